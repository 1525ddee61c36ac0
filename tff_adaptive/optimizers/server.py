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

The names, the config, the registry `SERVER_OPTIMIZERS` and the builders' checks
(`check_fedadagrad`, ...) are defined without TensorFlow in `optimizers.config` and re-exported
here; each builder below runs its check, which `config.check_server_optimizer` runs on a config
without building.
"""

import collections
from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.optimizers import fedopt_math
from tff_adaptive.optimizers import hparams as hparams_lib
from tff_adaptive.optimizers.config import ALGORITHM2  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import PUBLISHED
from tff_adaptive.optimizers.config import SERVER_OPTIMIZERS
from tff_adaptive.optimizers.config import VARIANTS  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import ServerOptimizerConfig
from tff_adaptive.optimizers.config import ServerOptimizerEntry  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import server_optimizer_record  # noqa: F401  (re-exported)

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY

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
    noise_variance: float = 0.0,
  ):
    self._second_moment = _second_moment_rule(rule)
    if noise_variance:
      self._second_moment = lambda v, g, beta_2: fedopt_math.noise_aware_second_moment(
        rule, v, g, beta_2, tf.cast(noise_variance, g.dtype)
      )
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


def build_fedadagrad(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.0,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
  noise_variance: float = 0.0,
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
    noise_variance: sigma^2 >= 0, the known variance of DP noise on each coordinate of g_t,
      removed from v_t (`fedopt_math.noise_aware_second_moment`); 0: as published.

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: naming an argument outside its valid range.
  """
  v0 = optimizer_config.check_fedadagrad(
    learning_rate, tau, beta_1, initial_accumulator_value, variant, noise_variance
  )
  return _AdaptiveServerOptimizer(
    'adagrad', learning_rate, beta_1, 0.0, tau, v0, False, noise_variance
  )


def _build_adam_like(
  rule, learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant, noise_variance
):
  v0 = optimizer_config.check_adam_like(
    learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant, noise_variance
  )
  if variant == PUBLISHED and v0 == 0.0 and not noise_variance:
    if rule == 'adam':
      return tff.learning.optimizers.build_adam(
        learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau
      )
    return tff.learning.optimizers.build_yogi(
      learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau, initial_preconditioner_value=0.0
    )
  return _AdaptiveServerOptimizer(
    rule, learning_rate, beta_1, beta_2, tau, v0, variant == PUBLISHED, noise_variance
  )


def build_fedadam(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
  noise_variance: float = 0.0,
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
    noise_variance: sigma^2 >= 0, the known variance of DP noise on each coordinate of g_t
      (user-level DP: (z C / m)^2), removed from v_t: v_t = max(beta_2 v_{t-1} + (1 - beta_2)
      (g_t^2 - sigma^2), 0) (`fedopt_math.noise_aware_second_moment`); 0: as published.

  Returns:
    A `tff.learning.optimizers.Optimizer`.
  """
  return _build_adam_like(
    'adam', learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant, noise_variance
  )


def build_fedyogi(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
  noise_variance: float = 0.0,
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

  Args: as `build_fedadam` (noise_variance: g_t^2 - sigma^2 in place of g_t^2 in v_t's rule,
  v_t clamped at 0).

  Returns:
    A `tff.learning.optimizers.Optimizer`.
  """
  return _build_adam_like(
    'yogi', learning_rate, tau, beta_1, beta_2, initial_accumulator_value, variant, noise_variance
  )


def build_fedavg_sgd(learning_rate: float = 1.0) -> tff.learning.optimizers.Optimizer:
  """FedAvg's server SGD: x_{t+1} = x_t - eta * g_t (eta = 1 is plain model averaging)."""
  optimizer_config.check_fedavg_sgd(learning_rate)
  return tff.learning.optimizers.build_sgdm(learning_rate)


def build_fedavgm(
  learning_rate: float = 1.0, momentum: float = 0.9
) -> tff.learning.optimizers.Optimizer:
  """FedAvgM's server SGD with heavy-ball momentum (Hsu et al. 2019; Reddi et al. 2021).

  Update: u_t = momentum * u_{t-1} + g_t; x_{t+1} = x_t - eta * u_t (TF/Keras momentum,
  as the authors' code). momentum = 0 is FedAvg.
  """
  optimizer_config.check_fedavgm(learning_rate, momentum)
  return tff.learning.optimizers.build_sgdm(learning_rate, momentum=momentum)


def build_server_optimizer(
  config: ServerOptimizerConfig,
) -> tff.learning.optimizers.Optimizer:
  """Looks `config.name` up in `SERVER_OPTIMIZERS` and builds it.

  Raises:
    ValueError: unknown name (listing the valid ones) or an invalid hyperparameter.
  """
  return SERVER_OPTIMIZERS[config.name].build(config)
