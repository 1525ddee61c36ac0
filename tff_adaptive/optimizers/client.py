"""Client optimizers: the local update rule x <- ClientOpt(x, g) of every algorithm.

Each registered client optimizer is a `ClientRule`: how a local step is taken (a
`core.local_loop.LocalStep`, given the round's eta_l(t) and an optional gradient transform
such as SCAFFOLD's correction) and which per-client statistics it reports. Where the rule needs
nothing but gradients it is also a `tff.learning.optimizers.Optimizer` (`ClientRule.optimizer`,
`build_client_optimizer`) that a user can pass to any TFF pipeline. Every rule's state starts
afresh for every client in every round (Reddi et al. 2021, Algorithm 5; Kim et al. 2024,
Algorithm 1 line 6).

* sgd: x <- x - eta_l g.
* sgdm: heavy-ball momentum in the TF/Keras/PyTorch form, u <- mu u + g, x <- x - eta_l u.
* adam: Kingma & Ba, TFF's `build_adam` (Keras form: eta_k = eta_l sqrt(1-b2^k)/(1-b1^k),
  x <- x - eta_k m / (sqrt(v) + eps)); PyTorch's Adam, which Kim et al. ran, adds eps to the
  bias-corrected sqrt(v_hat) instead, a difference of eps (1 - sqrt(1 - b2^k)) in the
  denominator (below 1e-8 at the default eps).
* adagrad: Duchi et al. in PyTorch's form (accumulator from 0, eps = 1e-10 outside the sqrt):
  G <- G + g^2, x <- x - eta_l g / (sqrt(G) + eps). TFF's `build_adagrad` puts eps inside the
  sqrt and starts G at 0.1, so this is FedAdagrad's published rule with tau = eps.
* sps: the stochastic Polyak step size (`optimizers.sps`), no learning rate.
* delta_sgd: Delta-SGD (`optimizers.delta_sgd`), its own eta_0 instead of a learning rate.

The client learning-rate schedule applies to the rules that read a learning rate; sps and
delta_sgd set their own step sizes and accept only the constant schedule.
"""

import collections
from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import registry
from tff_adaptive.core import local_loop
from tff_adaptive.optimizers import delta_sgd as delta_sgd_lib
from tff_adaptive.optimizers import server as server_optimizers
from tff_adaptive.optimizers import sps as sps_lib

# Per-optimizer default of `ClientOptimizerConfig.epsilon` (PyTorch's, which Kim et al. used).
DEFAULT_EPSILON = {'adam': 1e-8, 'adagrad': 1e-10}


@dataclasses.dataclass(frozen=True)
class ClientOptimizerConfig:
  """Hyperparameters of a client optimizer.

  Attributes:
    name: one of `CLIENT_OPTIMIZERS`.
    learning_rate: eta_l (before the client schedule), > 0; unused by sps and delta_sgd.
    momentum: mu of sgdm, in [0, 1).
    beta_1, beta_2: Adam's moment decays, in [0, 1).
    epsilon: Adam's / Adagrad's eps, > 0; None takes `DEFAULT_EPSILON`.
    sps: SPS's hyperparameters.
    delta_sgd: Delta-SGD's hyperparameters.
  """

  name: str = 'sgd'
  learning_rate: float = 0.1
  momentum: float = 0.9
  beta_1: float = 0.9
  beta_2: float = 0.999
  epsilon: float | None = None
  sps: sps_lib.SPSHParams = sps_lib.SPSHParams()
  delta_sgd: delta_sgd_lib.DeltaSGDHParams = delta_sgd_lib.DeltaSGDHParams()

  def __post_init__(self):
    CLIENT_OPTIMIZERS[self.name]  # pylint: disable=pointless-statement
    if not self.learning_rate > 0:
      raise ValueError(f'client learning_rate must be > 0, got {self.learning_rate}')
    for name in ('momentum', 'beta_1', 'beta_2'):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f'client {name} must be in [0, 1), got {getattr(self, name)}')
    if self.epsilon is not None and not self.epsilon > 0:
      raise ValueError(f'client epsilon must be > 0, got {self.epsilon}')

  @property
  def resolved_epsilon(self) -> float:
    return DEFAULT_EPSILON.get(self.name, 1e-8) if self.epsilon is None else self.epsilon


@dataclasses.dataclass(frozen=True)
class ClientRule:
  """How a client optimizer takes its local steps.

  Attributes:
    local_step: (eta_l(t), gradient transform or None) -> a `local_loop.LocalStep`.
    statistics: the step state after the last local step -> OrderedDict of float32 scalars
      (reported per client, then as mean/min/max over the round's clients).
    optimizer: the rule as a `tff.learning.optimizers.Optimizer`, where it is one.
  """

  local_step: Callable[[tf.Tensor, local_loop.GradientTransform | None], local_loop.LocalStep]
  statistics: Callable[[Any], collections.OrderedDict] = lambda state: collections.OrderedDict()
  optimizer: tff.learning.optimizers.Optimizer | None = None


def optimizer_rule(
  optimizer: tff.learning.optimizers.Optimizer,
  statistics: Callable[[Any], collections.OrderedDict] | None = None,
) -> ClientRule:
  """The rule x <- optimizer.next(x, g) (`local_loop.optimizer_step`)."""
  step = lambda lr, transform: local_loop.optimizer_step(optimizer, lr, transform)
  if statistics is None:
    return ClientRule(step, optimizer=optimizer)
  return ClientRule(step, statistics, optimizer)


def _adagrad(config: ClientOptimizerConfig) -> tff.learning.optimizers.Optimizer:
  # G_0 = 0, eps outside the sqrt, no first moment: FedAdagrad's published rule, tau = eps.
  return server_optimizers.build_fedadagrad(
    config.learning_rate, tau=config.resolved_epsilon, beta_1=0.0, initial_accumulator_value=0.0
  )


def _delta_sgd(config: ClientOptimizerConfig) -> ClientRule:
  hparams = config.delta_sgd
  step = lambda lr, transform: delta_sgd_lib.delta_sgd_step(hparams, transform)
  optimizer = delta_sgd_lib.build_delta_sgd(hparams) if hparams.gradient == 'paper' else None
  return ClientRule(step, delta_sgd_lib.statistics, optimizer)


def _sps(config: ClientOptimizerConfig) -> ClientRule:
  step = lambda lr, transform: sps_lib.sps_step(config.sps, transform)
  return ClientRule(step, sps_lib.statistics)


@dataclasses.dataclass(frozen=True)
class ClientOptimizerEntry:
  """A registered client optimizer.

  Attributes:
    build: config -> `ClientRule`.
    hparams: the config fields it reads besides the name (recorded in hparams.json).
    reads_learning_rate: False for rules that set their own step sizes (no learning rate, only
      the constant schedule).
    scalar_step: True where x_t - x_K is a sum of scalar steps times (momentum-averaged)
      gradients, so that (x_t - x_K) / (sum of steps) is a mean gradient (SCAFFOLD's control
      variate); False for per-coordinate preconditioners (Adam, Adagrad).
  """

  build: Callable[[ClientOptimizerConfig], ClientRule]
  hparams: tuple[str, ...] = ()
  reads_learning_rate: bool = True
  scalar_step: bool = True


CLIENT_OPTIMIZERS: registry.Registry[ClientOptimizerEntry] = registry.Registry(
  'client optimizer',
  {
    'sgd': ClientOptimizerEntry(
      lambda c: optimizer_rule(tff.learning.optimizers.build_sgdm(c.learning_rate))
    ),
    'sgdm': ClientOptimizerEntry(
      lambda c: optimizer_rule(
        tff.learning.optimizers.build_sgdm(c.learning_rate, momentum=c.momentum)
      ),
      ('momentum',),
    ),
    'adam': ClientOptimizerEntry(
      lambda c: optimizer_rule(
        tff.learning.optimizers.build_adam(
          c.learning_rate, beta_1=c.beta_1, beta_2=c.beta_2, epsilon=c.resolved_epsilon
        )
      ),
      ('beta_1', 'beta_2', 'epsilon'),
      scalar_step=False,
    ),
    'adagrad': ClientOptimizerEntry(
      lambda c: optimizer_rule(_adagrad(c)), ('epsilon',), scalar_step=False
    ),
    'sps': ClientOptimizerEntry(_sps, ('sps',), reads_learning_rate=False),
    'delta_sgd': ClientOptimizerEntry(_delta_sgd, ('delta_sgd',), reads_learning_rate=False),
  },
)


def build_client_rule(config: ClientOptimizerConfig) -> ClientRule:
  """The registered client optimizer `config.name` as a `ClientRule`."""
  return CLIENT_OPTIMIZERS[config.name].build(config)


def build_client_optimizer(config: ClientOptimizerConfig) -> tff.learning.optimizers.Optimizer:
  """The registered client optimizer `config.name` as a TFF optimizer.

  Raises:
    ValueError: for rules that need more than a gradient (sps; delta_sgd with
      gradient='same_batch'): use `build_client_rule`.
  """
  rule = build_client_rule(config)
  if rule.optimizer is None:
    raise ValueError(
      f'client optimizer {config.name!r} needs more than a gradient per step (the loss or a '
      'second gradient); use build_client_rule(config).local_step'
    )
  return rule.optimizer


def client_optimizer_record(config: ClientOptimizerConfig) -> dict[str, Any]:
  """The config fields that shape the run: the name, the learning rate where the rule reads
  one, and the optimizer's hparams (epsilon resolved)."""
  entry = CLIENT_OPTIMIZERS[config.name]
  record = {'name': config.name}
  if entry.reads_learning_rate:
    record['learning_rate'] = config.learning_rate
  for key in entry.hparams:
    value = config.resolved_epsilon if key == 'epsilon' else getattr(config, key)
    record[key] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
  return record
