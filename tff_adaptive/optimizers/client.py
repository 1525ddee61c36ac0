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

`ClientOptimizerConfig`, the registry `CLIENT_OPTIMIZERS` (whose entries build with the `*_rule`
functions below) and `client_optimizer_record` are defined without TensorFlow in
`optimizers.config` and re-exported here.
"""

import collections
from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.core import local_loop
from tff_adaptive.optimizers import delta_sgd as delta_sgd_lib
from tff_adaptive.optimizers import server as server_optimizers
from tff_adaptive.optimizers import sps as sps_lib
from tff_adaptive.optimizers.config import CLIENT_OPTIMIZERS
from tff_adaptive.optimizers.config import DEFAULT_EPSILON  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import ClientOptimizerConfig
from tff_adaptive.optimizers.config import ClientOptimizerEntry  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import client_optimizer_record  # noqa: F401  (re-exported)


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


# The registered rules (`CLIENT_OPTIMIZERS`' builders), config -> ClientRule.


def sgd_rule(config: ClientOptimizerConfig) -> ClientRule:
  """sgd: TFF's SGD at eta_l."""
  return optimizer_rule(tff.learning.optimizers.build_sgdm(config.learning_rate))


def sgdm_rule(config: ClientOptimizerConfig) -> ClientRule:
  """sgdm: TFF's heavy-ball SGD at eta_l, momentum mu."""
  return optimizer_rule(
    tff.learning.optimizers.build_sgdm(config.learning_rate, momentum=config.momentum)
  )


def adam_rule(config: ClientOptimizerConfig) -> ClientRule:
  """adam: TFF's (Keras-form) Adam at eta_l."""
  return optimizer_rule(
    tff.learning.optimizers.build_adam(
      config.learning_rate,
      beta_1=config.beta_1,
      beta_2=config.beta_2,
      epsilon=config.resolved_epsilon,
    )
  )


def adagrad_rule(config: ClientOptimizerConfig) -> ClientRule:
  """adagrad: PyTorch's form (G_0 = 0, eps outside the sqrt, no first moment), which is
  FedAdagrad's published rule with tau = eps."""
  return optimizer_rule(
    server_optimizers.build_fedadagrad(
      config.learning_rate, tau=config.resolved_epsilon, beta_1=0.0, initial_accumulator_value=0.0
    )
  )


def sps_rule(config: ClientOptimizerConfig) -> ClientRule:
  """sps: a local-step hook (it needs the minibatch loss); no TFF optimizer."""
  step = lambda lr, transform: sps_lib.sps_step(config.sps, transform)
  return ClientRule(step, sps_lib.statistics)


def delta_sgd_rule(config: ClientOptimizerConfig) -> ClientRule:
  """delta_sgd: a local-step hook, and a TFF optimizer for gradient='paper'."""
  hparams = config.delta_sgd
  step = lambda lr, transform: delta_sgd_lib.delta_sgd_step(hparams, transform)
  optimizer = delta_sgd_lib.build_delta_sgd(hparams) if hparams.gradient == 'paper' else None
  return ClientRule(step, delta_sgd_lib.statistics, optimizer)


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
