"""AdaAdam: Adam whose decay rates and step size adapt to the certainty C of the update.

Ju et al., "Accelerating Fair Federated Learning: Adaptive Federated Adam" (AdaFedAdam),
Algorithm 1. With m_0 = v_0 = 0 and c_{0,m} = c_{0,v} = 1, step t with update g_t and
certainty C_t:

    beta_{t,1} = beta_1^C_t,  beta_{t,2} = beta_2^C_t,  eta_t = C_t eta
    c_{t+1,m} = c_{t,m} beta_{t,1},  c_{t+1,v} = c_{t,v} beta_{t,2}
    m_{t+1} = beta_{t,1} m_t + (1 - beta_{t,1}) g_t
    v_{t+1} = beta_{t,2} v_t + (1 - beta_{t,2}) g_t^2
    x_{t+1} = x_t - eta_t m_hat / (sqrt(v_hat) + eps),
    m_hat = m_{t+1} / (1 - c_{t+1,m}),  v_hat = v_{t+1} / (1 - c_{t+1,v})

(the printed algorithm's last line has eta where its text and the line eta_t <- C eta mean
eta_t). With C_t = 1 for every t, c_{t,m} = beta_1^t and this is bias-corrected Adam (Kingma
and Ba; the published FedAdam of Reddi et al.). C_t is the optimizer's hyperparameter
`certainty` (`CERTAINTY_KEY`), set each step by AdaFedAdam's finalizer (`build_finalizer`)
through `set_hparams`, the way `tff.learning.optimizers.schedule_learning_rate` sets the
learning rate; used alone it stays 1.

Option `certainty_lr_from_step` = s uses eta_t = eta for steps t < s and C_t eta from step s
(0-based; the authors' code: 6, "lr x C from the 7th server step"). With C_t < 0 the
algorithm breaks down (beta^C > 1: the moments grow instead of decaying, eta_t < 0 steps
uphill); this optimizer applies any C it is given, and AdaFedAdam decides what reaches it:
`certainty_step`'s `certainty_floor` (by default a round with C <= 0 makes no step), the one
rule of our AdaFedAdam process and of the TFF finalizer (`build_finalizer`).

The checks of the builder's arguments (`check_adaadam`), `CERTAINTY_FLOORS` and
`check_certainty_floor` are defined without TensorFlow in `optimizers.config`.
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.core import tree
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.optimizers import hparams as hparams_lib
from tff_adaptive.optimizers.config import CERTAINTY_FLOORS  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import check_certainty_floor

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY
CERTAINTY_KEY = 'certainty'
_BETA_1_KEY = 'beta_1'
_BETA_2_KEY = 'beta_2'
_EPSILON_KEY = 'epsilon'
_STEP_KEY = 'step'
_PRODUCT_1_KEY = 'c_m'
_PRODUCT_2_KEY = 'c_v'
_HPARAMS_KEYS = (LEARNING_RATE_KEY, _BETA_1_KEY, _BETA_2_KEY, _EPSILON_KEY, CERTAINTY_KEY)


def adapted_decay(beta: tf.Tensor, certainty: tf.Tensor) -> tf.Tensor:
  """beta_t = beta^C."""
  return tf.pow(beta, certainty)


def moment(previous: tf.Tensor, value: tf.Tensor, beta_t: tf.Tensor) -> tf.Tensor:
  """beta_t previous + (1 - beta_t) value."""
  return beta_t * previous + (1.0 - beta_t) * value


def adaadam_step(x, m_hat, v_hat, eta_t, epsilon):
  """x - eta_t m_hat / (sqrt(v_hat) + eps)."""
  return x - eta_t * m_hat / (tf.sqrt(v_hat) + epsilon)


class _AdaAdam(tff.learning.optimizers.Optimizer):
  """AdaAdam as a `tff.learning.optimizers.Optimizer` (see the module docstring)."""

  def __init__(
    self,
    learning_rate: float = 1e-3,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-8,
    certainty_lr_from_step: int = 0,
  ):
    optimizer_config.check_adaadam(learning_rate, beta_1, beta_2, epsilon, certainty_lr_from_step)
    self._lr = float(learning_rate)
    self._beta_1 = float(beta_1)
    self._beta_2 = float(beta_2)
    self._epsilon = float(epsilon)
    self._lr_from = int(certainty_lr_from_step)

  def initialize(self, specs: Any) -> collections.OrderedDict:
    zeros = lambda s: tf.zeros(s.shape, s.dtype)
    return collections.OrderedDict(
      [
        (LEARNING_RATE_KEY, self._lr),
        (_BETA_1_KEY, self._beta_1),
        (_BETA_2_KEY, self._beta_2),
        (_EPSILON_KEY, self._epsilon),
        (CERTAINTY_KEY, 1.0),
        (_STEP_KEY, 0),
        (_PRODUCT_1_KEY, 1.0),
        (_PRODUCT_2_KEY, 1.0),
        ('m', tf.nest.map_structure(zeros, specs)),
        ('v', tf.nest.map_structure(zeros, specs)),
      ]
    )

  def next(self, state, weights, gradients):
    f32 = lambda key: tf.cast(state[key], tf.float32)
    certainty = f32(CERTAINTY_KEY)
    beta_1 = adapted_decay(f32(_BETA_1_KEY), certainty)
    beta_2 = adapted_decay(f32(_BETA_2_KEY), certainty)
    step = state[_STEP_KEY]
    lr = f32(LEARNING_RATE_KEY)
    eta = tf.where(step >= self._lr_from, certainty * lr, lr)
    c_m = f32(_PRODUCT_1_KEY) * beta_1
    c_v = f32(_PRODUCT_2_KEY) * beta_2
    epsilon = f32(_EPSILON_KEY)

    def update(x, m, v, g):
      cast = lambda t: tf.cast(t, x.dtype)
      m = moment(m, g, cast(beta_1))
      v = moment(v, g * g, cast(beta_2))
      x = adaadam_step(x, m / cast(1.0 - c_m), v / cast(1.0 - c_v), cast(eta), cast(epsilon))
      return x, m, v

    flat = [
      update(x, m, v, g)
      for x, m, v, g in zip(
        tf.nest.flatten(weights),
        tf.nest.flatten(state['m']),
        tf.nest.flatten(state['v']),
        tf.nest.flatten(gradients),
      )
    ]
    pack = lambda i, like: tf.nest.pack_sequence_as(like, [u[i] for u in flat])
    new_state = collections.OrderedDict(state)
    new_state[_STEP_KEY] = step + 1
    new_state[_PRODUCT_1_KEY] = c_m
    new_state[_PRODUCT_2_KEY] = c_v
    new_state['m'] = pack(1, state['m'])
    new_state['v'] = pack(2, state['v'])
    return new_state, pack(0, weights)

  def get_hparams(self, state):
    return hparams_lib.select(state, _HPARAMS_KEYS)

  def set_hparams(self, state, hparams):
    return hparams_lib.replace(state, hparams, _HPARAMS_KEYS)


def build_adaadam(
  learning_rate: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  epsilon: float = 1e-8,
  certainty_lr_from_step: int = 0,
) -> tff.learning.optimizers.Optimizer:
  """AdaAdam with the paper's defaults (those of Adam: eta 1e-3, beta 0.9 / 0.999, eps 1e-8)."""
  return _AdaAdam(learning_rate, beta_1, beta_2, epsilon, certainty_lr_from_step)


def with_certainty(optimizer, state, certainty: tf.Tensor):
  """The optimizer state with hyperparameter C set (AdaAdam, or one wrapped by TFF's
  `schedule_learning_rate`, which passes hparams through)."""
  hparams = optimizer.get_hparams(state)
  hparams[CERTAINTY_KEY] = tf.cast(certainty, tf.float32)
  return optimizer.set_hparams(state, hparams)


def build_finalizer(
  optimizer, weights_type, certainty_floor: str = 'zero'
) -> tff.learning.templates.FinalizerProcess:
  """A TFF finalizer applying AdaAdam to an aggregate OrderedDict(update=g, certainty=C).

  The output of `tff_adaptive.aggregators.CertaintyWeightedMeanFactory`; compose both in
  `tff.learning.templates.compose_learning_process`. Its step is `certainty_step`, the server
  step of our AdaFedAdam process (Ju et al. Algorithm 1), so the two agree: with
  `certainty_floor='zero'` (AdaFedAdam's default) a round whose C <= 0 makes no step, with
  'none' C is applied as it is (the authors' code); `AdaFedAdam.build_finalizer` passes the
  algorithm's option. Like TFF's `build_apply_optimizer_finalizer`, a non-finite g or C leaves
  the model and the optimizer state unchanged; measurements: `update_non_finite` and
  `certainty`.
  """
  check_certainty_floor(certainty_floor)
  specs = tff.types.type_to_tf_tensor_specs(weights_type.trainable)

  @tff.tensorflow.computation
  def init_fn():
    return optimizer.initialize(specs)

  state_type = init_fn.type_signature.result
  aggregate_type = tff.StructWithPythonType(
    [('update', weights_type.trainable), (CERTAINTY_KEY, tff.TensorType(np.float32))],
    collections.OrderedDict,
  )

  @tff.tensorflow.computation(state_type, weights_type, aggregate_type)
  def step(state, weights, aggregate):
    new_state, trainable, non_finite = certainty_step(
      optimizer, state, weights.trainable, aggregate, certainty_floor
    )
    measurements = collections.OrderedDict(
      update_non_finite=non_finite, certainty=tf.cast(aggregate[CERTAINTY_KEY], tf.float32)
    )
    return (
      new_state,
      tff.learning.models.ModelWeights(trainable, weights.non_trainable),
      (measurements),
    )

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(init_fn, tff.SERVER)

  @tff.federated_computation(
    initialize.type_signature.result,
    tff.FederatedType(weights_type, tff.SERVER),
    tff.FederatedType(aggregate_type, tff.SERVER),
  )
  def next_fn(state, weights, aggregate):
    new_state, new_weights, measurements = tff.federated_map(step, (state, weights, aggregate))
    return tff.templates.MeasuredProcessOutput(new_state, new_weights, measurements)

  return tff.learning.templates.FinalizerProcess(initialize, next_fn)


def certainty_step(optimizer, state, trainable, aggregate, certainty_floor: str):
  """(state, x_t, OrderedDict(update=g, certainty=C)) -> (state, x_{t+1}, update_non_finite).

  Sets C, applies the optimizer (Ju et al. Algorithm 1); a non-finite g, C or result keeps x_t
  and the state (the rule of TFF's `build_apply_optimizer_finalizer`, which checks the update).

  `certainty_floor` (CERTAINTY_FLOORS): 'zero' makes no step when C <= 0 (nor when C is NaN):
  x_t and the whole optimizer state (moments, running products, step count) are kept, as
  C = 0 would mean (beta^0 = 1, eta_t = 0) without its 0/0 bias correction on a first step,
  and update_non_finite is 0; 'none' applies any C (C < 0 steps uphill).
  """
  check_certainty_floor(certainty_floor)
  certainty = tf.cast(aggregate[CERTAINTY_KEY], tf.float32)
  update = tf.nest.pack_sequence_as(trainable, tf.nest.flatten(aggregate['update']))
  inputs_finite = tf.logical_and(tf.math.is_finite(certainty), tree.all_finite(update))
  safe_certainty = tf.where(inputs_finite, certainty, 1.0)
  new_state, new_trainable = optimizer.next(
    with_certainty(optimizer, state, safe_certainty), trainable, update
  )
  new_state = with_certainty(optimizer, new_state, 1.0)
  # A finite g and C can still give a non-finite step (e.g. beta^C rounding to 1 before any
  # step has moved the running products: 1 - c = 0 in the bias correction): rejected too.
  finite = tf.logical_and(inputs_finite, tree.all_finite(new_trainable))
  keep = lambda new, old: tf.nest.map_structure(lambda a, b: tf.where(finite, a, b), new, old)
  new_state, new_trainable = keep(new_state, state), keep(new_trainable, trainable)
  non_finite = tf.cast(tf.logical_not(finite), tf.int32)
  if certainty_floor == 'none':
    return new_state, new_trainable, non_finite
  step = aggregate[CERTAINTY_KEY] > 0
  keep = lambda new, old: tf.nest.map_structure(lambda a, b: tf.where(step, a, b), new, old)
  return keep(new_state, state), keep(new_trainable, trainable), tf.where(step, non_finite, 0)
