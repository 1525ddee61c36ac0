"""Server optimizers of the FedOpt family (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi).

Also registered: 'adaadam', AdaFedAdam's certainty-adaptive Adam (`optimizers.adaadam`).

Reddi et al. "Adaptive Federated Optimization." ICLR 2021, Algorithms 2 and 5.

Each adaptive optimizer comes in two named variants:

* ``"published"`` (default): what the authors' code ran to produce the paper's tables. Adam
  and Yogi are Keras-style and bias-corrected, eta_t = eta * sqrt(1 - b2^t) / (1 - b1^t);
  Adagrad and Yogi accumulators start at 0 (Adam's too); tau is added outside the sqrt.
* ``"algorithm2"``: Algorithm 2 exactly as printed: no bias correction and v_{-1} = tau^2.

Both apply x <- x - eta_t * m_t / (sqrt(v_t) + tau) to the pseudo-gradient g_t (initial minus
trained weights, averaged over clients); see `tff_adaptive.optimizers.fedopt_math` for the rules.

Where TFF's built-in optimizer computes a variant exactly it is returned as is:
``tff.learning.optimizers.build_adam`` is the published FedAdam, and ``build_yogi`` with
``initial_preconditioner_value=0`` is the published FedYogi. TFF's ``build_adagrad`` puts
epsilon inside the sqrt and starts its accumulator at 0.1, so neither FedAdagrad variant can
use it. All optimizers keep their learning rate under ``LEARNING_RATE_KEY`` so that
``tff.learning.optimizers.schedule_learning_rate`` and get/set_hparams work, and tau under
``"epsilon"``, TFF's name for it, so hparams have the same keys whichever class computes them.
"""

import collections
from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import registry
from tff_adaptive.optimizers import adaadam
from tff_adaptive.optimizers import fedopt_math
from tff_adaptive.optimizers import hparams as hparams_lib

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY
PUBLISHED = 'published'
ALGORITHM2 = 'algorithm2'
VARIANTS = (PUBLISHED, ALGORITHM2)

_BETA_1_KEY = 'beta_1'
_BETA_2_KEY = 'beta_2'
_TAU_KEY = 'epsilon'  # the paper's tau, under TFF's name for it
_STEP_KEY = 'step'
_FIRST_MOMENT_KEY = 'm'
_SECOND_MOMENT_KEY = 'v'
_HPARAMS_KEYS = (LEARNING_RATE_KEY, _BETA_1_KEY, _BETA_2_KEY, _TAU_KEY)


def _second_moment_rule(name: str) -> Callable[[Any, Any, Any], Any]:
  rules = {
    'adagrad': lambda v, g, beta_2: fedopt_math.adagrad_second_moment(v, g),
    'adam': fedopt_math.adam_second_moment,
    'yogi': fedopt_math.yogi_second_moment,
  }
  return rules[name]


class _AdaptiveServerOptimizer(tff.learning.optimizers.Optimizer):
  """One optimizer for Algorithm 2's three rules; see the builders for the update."""

  def __init__(
    self,
    rule: str,
    learning_rate: float,
    beta_1: float,
    beta_2: float,
    tau: float,
    initial_accumulator_value: float,
    bias_correction: bool,
  ):
    self._second_moment = _second_moment_rule(rule)
    self._lr = learning_rate
    self._beta_1 = beta_1
    self._beta_2 = beta_2
    self._tau = tau
    self._v0 = initial_accumulator_value
    self._bias_correction = bias_correction

  def initialize(self, specs: Any) -> collections.OrderedDict:
    zeros = lambda s: tf.zeros(s.shape, s.dtype)
    v0 = lambda s: tf.fill(s.shape, tf.constant(self._v0, s.dtype))
    return collections.OrderedDict(
      [
        (LEARNING_RATE_KEY, self._lr),
        (_BETA_1_KEY, self._beta_1),
        (_BETA_2_KEY, self._beta_2),
        (_TAU_KEY, self._tau),
        (_STEP_KEY, 0),
        (_FIRST_MOMENT_KEY, tf.nest.map_structure(zeros, specs)),
        (_SECOND_MOMENT_KEY, tf.nest.map_structure(v0, specs)),
      ]
    )

  def next(self, state, weights, gradients):
    lr = state[LEARNING_RATE_KEY]
    beta_1 = state[_BETA_1_KEY]
    beta_2 = state[_BETA_2_KEY]
    tau = state[_TAU_KEY]
    step = state[_STEP_KEY] + 1
    if self._bias_correction:
      eta = fedopt_math.bias_corrected_learning_rate(
        tf.cast(lr, tf.float32),
        tf.cast(beta_1, tf.float32),
        tf.cast(beta_2, tf.float32),
        tf.cast(step, tf.float32),
      )
    else:
      eta = lr

    def update(x, m, v, g):
      dtype = x.dtype
      m = fedopt_math.first_moment(m, g, tf.cast(beta_1, dtype))
      v = self._second_moment(v, g, tf.cast(beta_2, dtype))
      x = fedopt_math.adaptive_step(x, m, v, tf.cast(eta, dtype), tf.cast(tau, dtype))
      return x, m, v

    flat = [
      update(x, m, v, g)
      for x, m, v, g in zip(
        tf.nest.flatten(weights),
        tf.nest.flatten(state[_FIRST_MOMENT_KEY]),
        tf.nest.flatten(state[_SECOND_MOMENT_KEY]),
        tf.nest.flatten(gradients),
      )
    ]
    pack = lambda i, like: tf.nest.pack_sequence_as(like, [u[i] for u in flat])
    new_state = collections.OrderedDict(state)
    new_state[_STEP_KEY] = step
    new_state[_FIRST_MOMENT_KEY] = pack(1, state[_FIRST_MOMENT_KEY])
    new_state[_SECOND_MOMENT_KEY] = pack(2, state[_SECOND_MOMENT_KEY])
    return new_state, pack(0, weights)

  def get_hparams(self, state):
    return hparams_lib.select(state, _HPARAMS_KEYS)

  def set_hparams(self, state, hparams):
    return hparams_lib.replace(state, hparams, _HPARAMS_KEYS)


def _check_positive(name: str, value: float) -> None:
  if not value > 0:
    raise ValueError(f'{name} must be > 0, got {value}')


def _check_unit_interval(name: str, value: float) -> None:
  if not 0.0 <= value < 1.0:
    raise ValueError(f'{name} must be in [0, 1), got {value}')


def _check_variant(variant: str) -> None:
  if variant not in VARIANTS:
    raise ValueError(f'variant must be one of {", ".join(VARIANTS)}, got {variant!r}')


def _initial_v(variant: str, tau: float, value: float | None) -> float:
  """v_{-1}: 0 in the authors' code, tau^2 in Algorithm 2 (which requires >= tau^2)."""
  if value is None:
    return 0.0 if variant == PUBLISHED else tau**2
  if value < 0:
    raise ValueError(f'initial_accumulator_value must be >= 0, got {value}')
  if variant == ALGORITHM2 and value < tau**2 * (1 - 1e-9):  # float slack: 0.1**2 > 0.01
    raise ValueError(
      f'initial_accumulator_value must be >= tau^2 = {tau**2} for the '
      f'algorithm2 variant (Algorithm 2 requires v_-1 >= tau^2), got {value}'
    )
  return value


def build_fedadagrad(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.0,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
) -> tff.learning.optimizers.Optimizer:
  """FedAdagrad's server optimizer (Reddi et al. 2021, Algorithm 2).

  Update, with g_t the averaged pseudo-gradient (initial minus trained weights)::

    m_t = beta_1 * m_{t-1} + (1 - beta_1) * g_t
    v_t = v_{t-1} + g_t^2
    x_{t+1} = x_t - eta * m_t / (sqrt(v_t) + tau)

  Both variants use no bias correction. ``published`` (the authors' Keras Adagrad) starts
  v at 0; ``algorithm2`` starts it at tau^2. The paper uses beta_1 = 0 for FedAdagrad
  (App. B), which makes m_t = g_t.

  Args:
    learning_rate: Server learning rate eta, > 0.
    tau: Adaptivity, > 0, added outside the square root.
    beta_1: First-moment decay in [0, 1).
    initial_accumulator_value: v_{-1}; None picks the variant's value.
    variant: ``"published"`` or ``"algorithm2"``.

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: naming an argument outside its valid range.
  """
  _check_variant(variant)
  _check_positive('learning_rate', learning_rate)
  _check_positive('tau', tau)
  _check_unit_interval('beta_1', beta_1)
  v0 = _initial_v(variant, tau, initial_accumulator_value)
  return _AdaptiveServerOptimizer(
    'adagrad', learning_rate, beta_1, 0.0, tau, v0, bias_correction=False
  )


def _build_adam_like(rule, learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant):
  _check_variant(variant)
  _check_positive('learning_rate', learning_rate)
  _check_positive('tau', tau)
  _check_unit_interval('beta_1', beta_1)
  _check_unit_interval('beta_2', beta_2)
  v0 = _initial_v(variant, tau, initial_accumulator_value)
  if variant == PUBLISHED and v0 == 0.0:
    if rule == 'adam':
      return tff.learning.optimizers.build_adam(
        learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau
      )
    return tff.learning.optimizers.build_yogi(
      learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau, initial_preconditioner_value=0.0
    )
  return _AdaptiveServerOptimizer(
    rule, learning_rate, beta_1, beta_2, tau, v0, bias_correction=variant == PUBLISHED
  )


def build_fedadam(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
) -> tff.learning.optimizers.Optimizer:
  """FedAdam's server optimizer (Reddi et al. 2021, Algorithm 2).

  Update, with g_t the averaged pseudo-gradient (initial minus trained weights)::

    m_t = beta_1 * m_{t-1} + (1 - beta_1) * g_t
    v_t = beta_2 * v_{t-1} + (1 - beta_2) * g_t^2
    x_{t+1} = x_t - eta_t * m_t / (sqrt(v_t) + tau)

  ``published``: eta_t = eta * sqrt(1 - beta_2^t) / (1 - beta_1^t), v_{-1} = 0 (this is
  exactly ``tff.learning.optimizers.build_adam`` with epsilon = tau, which is returned).
  ``algorithm2``: eta_t = eta, v_{-1} = tau^2. beta_2 defaults to 0.999 as in the authors'
  runs; the paper's text says 0.99.

  Args:
    learning_rate: Server learning rate eta, > 0.
    tau: Adaptivity, > 0, added outside the square root.
    beta_1: First-moment decay in [0, 1).
    beta_2: Second-moment decay in [0, 1).
    initial_accumulator_value: v_{-1}; None picks the variant's value.
    variant: ``"published"`` or ``"algorithm2"``.

  Returns:
    A `tff.learning.optimizers.Optimizer`.
  """
  return _build_adam_like(
    'adam', learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant
  )


def build_fedyogi(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
) -> tff.learning.optimizers.Optimizer:
  """FedYogi's server optimizer (Reddi et al. 2021, Algorithm 2; Zaheer et al. 2018).

  Update, with g_t the averaged pseudo-gradient (initial minus trained weights)::

    m_t = beta_1 * m_{t-1} + (1 - beta_1) * g_t
    v_t = v_{t-1} - (1 - beta_2) * g_t^2 * sign(v_{t-1} - g_t^2)
    x_{t+1} = x_t - eta_t * m_t / (sqrt(v_t) + tau)

  ``published``: bias-corrected eta_t as in FedAdam, v_{-1} = 0 (exactly
  ``tff.learning.optimizers.build_yogi(..., initial_preconditioner_value=0)``, which is
  returned; TFF's own default starts v at 1e-6). ``algorithm2``: eta_t = eta,
  v_{-1} = tau^2.

  Args: as `build_fedadam`.

  Returns:
    A `tff.learning.optimizers.Optimizer`.
  """
  return _build_adam_like(
    'yogi', learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant
  )


def build_fedavg_sgd(learning_rate: float = 1.0) -> tff.learning.optimizers.Optimizer:
  """FedAvg's server SGD: x_{t+1} = x_t - eta * g_t (eta = 1 is plain model averaging)."""
  _check_positive('learning_rate', learning_rate)
  return tff.learning.optimizers.build_sgdm(learning_rate)


def build_fedavgm(
  learning_rate: float = 1.0, momentum: float = 0.9
) -> tff.learning.optimizers.Optimizer:
  """FedAvgM's server SGD with heavy-ball momentum (Hsu et al. 2019; Reddi et al. 2021).

  Update: u_t = momentum * u_{t-1} + g_t; x_{t+1} = x_t - eta * u_t (TF/Keras momentum,
  as the authors' code). momentum = 0 is FedAvg.
  """
  _check_positive('learning_rate', learning_rate)
  if not 0.0 <= momentum < 1.0:
    raise ValueError(f'momentum must be in [0, 1), got {momentum}')
  return tff.learning.optimizers.build_sgdm(learning_rate, momentum=momentum)


@dataclasses.dataclass(frozen=True)
class ServerOptimizerConfig:
  """Hyperparameters of a server optimizer, validated by its builder.

  Attributes:
    name: one of `SERVER_OPTIMIZERS`.
    learning_rate: eta.
    momentum: sgdm's momentum.
    tau, beta_1, beta_2, initial_accumulator_value, variant: adaptive optimizers'.
      beta_1 None picks 0 for adagrad and 0.9 for adam/yogi/adaadam; tau is AdaAdam's eps.
    certainty_lr_from_step: AdaAdam's (`optimizers.adaadam`).
  """

  name: str = 'sgd'
  learning_rate: float = 1.0
  momentum: float = 0.9
  tau: float = 1e-3
  beta_1: float | None = None
  beta_2: float = 0.999
  initial_accumulator_value: float | None = None
  variant: str = PUBLISHED
  certainty_lr_from_step: int = 0


@dataclasses.dataclass(frozen=True)
class ServerOptimizerEntry:
  """A registered server optimizer.

  Attributes:
    build: ServerOptimizerConfig -> `tff.learning.optimizers.Optimizer`.
    default_learning_rate: eta when neither the flag nor the task gives one.
    hparams: the `ServerOptimizerConfig` fields this optimizer reads (besides name and
      learning_rate); only these are recorded for a run, so an ignored flag cannot block a resume.
    default_tau: tau when neither the flag nor the task gives one.
  """

  build: Callable[[ServerOptimizerConfig], Any]
  default_learning_rate: float
  hparams: tuple[str, ...] = ()
  default_tau: float = 1e-3


_ADAPTIVE_HPARAMS = ('tau', 'beta_1', 'beta_2', 'initial_accumulator_value', 'variant')
SERVER_OPTIMIZERS: registry.Registry[ServerOptimizerEntry] = registry.Registry(
  'server optimizer',
  {
    'sgd': ServerOptimizerEntry(lambda c: build_fedavg_sgd(c.learning_rate), 1.0),
    'sgdm': ServerOptimizerEntry(
      lambda c: build_fedavgm(c.learning_rate, c.momentum), 0.3, ('momentum',)
    ),
    'adagrad': ServerOptimizerEntry(
      lambda c: build_fedadagrad(
        c.learning_rate,
        c.tau,
        0.0 if c.beta_1 is None else c.beta_1,
        c.initial_accumulator_value,
        c.variant,
      ),
      0.1,
      ('tau', 'beta_1', 'initial_accumulator_value', 'variant'),
    ),
    'adam': ServerOptimizerEntry(
      lambda c: build_fedadam(
        c.learning_rate,
        c.tau,
        0.9 if c.beta_1 is None else c.beta_1,
        c.beta_2,
        c.initial_accumulator_value,
        c.variant,
      ),
      0.01,
      _ADAPTIVE_HPARAMS,
    ),
    'yogi': ServerOptimizerEntry(
      lambda c: build_fedyogi(
        c.learning_rate,
        c.tau,
        0.9 if c.beta_1 is None else c.beta_1,
        c.beta_2,
        c.initial_accumulator_value,
        c.variant,
      ),
      0.01,
      _ADAPTIVE_HPARAMS,
    ),
    'adaadam': ServerOptimizerEntry(
      lambda c: adaadam.build_adaadam(
        c.learning_rate,
        0.9 if c.beta_1 is None else c.beta_1,
        c.beta_2,
        c.tau,
        c.certainty_lr_from_step,
      ),
      1e-3,
      ('tau', 'beta_1', 'beta_2', 'certainty_lr_from_step'),
      default_tau=1e-8,
    ),
  },
)


def build_server_optimizer(
  config: ServerOptimizerConfig,
) -> tff.learning.optimizers.Optimizer:
  """Looks `config.name` up in `SERVER_OPTIMIZERS` and builds it.

  Raises:
    ValueError: unknown name (listing the valid ones) or an invalid hyperparameter.
  """
  return SERVER_OPTIMIZERS[config.name].build(config)


def server_optimizer_record(config: ServerOptimizerConfig) -> dict[str, Any]:
  """The config fields that shape the run (name, learning_rate and the optimizer's hparams).

  Fields left None take the values the builder uses (beta_1: 0 for adagrad, 0.9 otherwise;
  initial_accumulator_value: the variant's v_{-1}).
  """
  entry = SERVER_OPTIMIZERS[config.name]
  record = {k: getattr(config, k) for k in ('name', 'learning_rate') + entry.hparams}
  if record.get('beta_1', 0.0) is None:
    record['beta_1'] = 0.0 if config.name == 'adagrad' else 0.9
  if 'initial_accumulator_value' in record and record['initial_accumulator_value'] is None:
    record['initial_accumulator_value'] = _initial_v(config.variant, config.tau, None)
  return record
