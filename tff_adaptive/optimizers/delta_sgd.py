"""Delta-SGD: locality-adaptive client step sizes (Kim et al. 2024, Algorithm 1).

Kim, Toghani, Uribe, Kyrillidis. "Adaptive Federated Learning with Auto-Tuned Clients."
ICLR 2024, Algorithm 1, with the delta of Sec. 4 (after Malitsky & Mishchenko 2020). Client i
in round t starts afresh from x_0 = x_t, eta_0, theta_0 and, for local steps k = 1, ..., K::

  x_k     = x_{k-1} - eta_{k-1} g(x_{k-1})
  eta_k   = min( gamma ||x_k - x_{k-1}|| / (2 ||g(x_k) - g(x_{k-1})||),   # curvature
                 sqrt(1 + delta theta_{k-1}) eta_{k-1} )                   # growth
  theta_k = eta_k / eta_{k-1}

The curvature candidate is the inverse of an estimate of the local smoothness: on
f(x) = L/2 ||x||^2, g(x_k) - g(x_{k-1}) = L (x_k - x_{k-1}), so it equals gamma / (2 L), which
is 1/L at the default gamma = 2. Defaults: eta_0 = 0.2, theta_0 = 1, gamma = 2, delta = 0.1
(the paper's values for every experiment).

The paper's rule is the default. The authors' public code (github.com/jlylekim/auto-tuned-FL,
`adsgd.py` / `update.py`) differs in four ways, each a named option here:

| option | paper (default) | authors' code |
|---|---|---|
| `gradient` | `'paper'`: g(x_k) is the gradient the next step takes anyway (on the next minibatch); one gradient per step | `'same_batch'`: g(x_{k-1}) is recomputed on the current minibatch, a second gradient evaluation per step (with the step's dropout masks; the code's two networks draw independent ones) |
| `first_step` | `'paper'`: step 1 uses eta_0 | `'grown'`: step 1 uses eta_0 sqrt(1 + delta theta_0) (its previous iterate equals the current one) |
| `zero_rule` | `'paper'`: ||dg|| = 0 means no curvature bound (the growth candidate) | `'grow'`: ||dx|| = 0 or ||dg|| = 0 -> the growth candidate |
| `eps` | 0 | 1e-8 added to the step whenever the min is taken |

The published Table 1 numbers came from the authors' code (with its command-line default
delta = 0.02 unless the run set it; the paper states 0.1 everywhere). With `zero_rule='paper'`,
||dx|| = 0 and ||dg|| > 0 give eta = 0 (the client stops for the rest of the round); theta is
then 0, never NaN.

`build_delta_sgd` returns a `tff.learning.optimizers.Optimizer` (gradient='paper' needs
nothing but gradients, so it drops into any TFF pipeline as a client optimizer);
`delta_sgd_step` is the same rule as a local-step hook (`core.local_loop.LocalStep`), which
'same_batch' needs for its extra gradient.

`DeltaSGDHParams` and the options' choices (`GRADIENTS`, `FIRST_STEPS`, `ZERO_RULES`) are defined
without TensorFlow in `optimizers.config` and re-exported here.
"""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.core import local_loop
from tff_adaptive.core import tree
from tff_adaptive.optimizers.config import FIRST_STEPS  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import GRADIENTS  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import ZERO_RULES  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import DeltaSGDHParams

# Optimizer state keys. x_prev/g_prev: x_{k-1} and g(x_{k-1}) of the last step; eta/theta: the
# step size the last step used and its ratio to the one before; the sums feed the per-client
# statistics; curvature/growth: the last step's two candidates (for plots, Kim et al. Fig. 7).
STEP = 'step'
ETA = 'eta'
THETA = 'theta'
X_PREV = 'x_prev'
G_PREV = 'g_prev'
STEP_SIZE_SUM = 'step_size_sum'
CURVATURE_STEPS = 'curvature_steps'
CURVATURE = 'curvature'
GROWTH = 'growth'


def curvature_candidate(dx_norm: tf.Tensor, dg_norm: tf.Tensor, gamma: float) -> tf.Tensor:
  """gamma ||x_k - x_{k-1}|| / (2 ||g(x_k) - g(x_{k-1})||), Algorithm 1 line 9 (first term).

  +inf where ||dg|| = 0 (no curvature bound), never NaN.
  """
  safe = tf.where(dg_norm > 0, dg_norm, tf.ones_like(dg_norm))
  return tf.where(
    dg_norm > 0, gamma * dx_norm / (2.0 * safe), tf.fill(tf.shape(dg_norm), float('inf'))
  )


def growth_candidate(eta_prev: tf.Tensor, theta_prev: tf.Tensor, delta: float) -> tf.Tensor:
  """sqrt(1 + delta theta_{k-1}) eta_{k-1}, Algorithm 1 line 9 (second term, with Sec. 4's delta)."""
  return tf.sqrt(1.0 + delta * theta_prev) * eta_prev


def next_step_size(
  eta_prev: tf.Tensor,
  theta_prev: tf.Tensor,
  dx_norm: tf.Tensor,
  dg_norm: tf.Tensor,
  hparams: DeltaSGDHParams,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
  """eta_k and theta_k from the last step (Algorithm 1 lines 9-10).

  Returns:
    (eta_k, theta_k, whether the curvature candidate was picked, curvature, growth).
  """
  curvature = curvature_candidate(dx_norm, dg_norm, hparams.gamma)
  growth = growth_candidate(eta_prev, theta_prev, hparams.delta)
  take_min = dg_norm > 0
  if hparams.zero_rule == 'grow':
    take_min = tf.logical_and(take_min, dx_norm > 0)
  eta = tf.where(take_min, tf.minimum(curvature, growth) + hparams.eps, growth)
  picked_curvature = tf.logical_and(take_min, curvature <= growth)
  safe_prev = tf.where(eta_prev > 0, eta_prev, tf.ones_like(eta_prev))
  theta = tf.where(eta_prev > 0, eta / safe_prev, tf.zeros_like(eta))
  return eta, theta, picked_curvature, curvature, growth


def first_step_size(hparams: DeltaSGDHParams) -> tuple[float, float]:
  """(the step size of local step 1, the theta after it)."""
  if hparams.first_step == 'grown':
    factor = (1.0 + hparams.delta * hparams.theta_0) ** 0.5
    return hparams.eta_0 * factor, factor
  return hparams.eta_0, hparams.theta_0


class _DeltaSGD(tff.learning.optimizers.Optimizer):
  """Delta-SGD as a `tff.learning.optimizers.Optimizer` (see the module docstring).

  `next(state, x, g)` is one local step from x = x_{k-1} with g = g(x_{k-1}): it picks the
  step size from the previous step's x and g stored in the state and returns x_k. The state
  must be re-initialized for every client in every round (Algorithm 1 line 6), which TFF's
  client work and this library's local loop both do.
  """

  def __init__(self, hparams: DeltaSGDHParams = DeltaSGDHParams()):
    self.hparams = hparams

  def initialize(self, specs):
    zeros = lambda s: tf.zeros(s.shape, s.dtype)
    return collections.OrderedDict(
      [
        (STEP, tf.constant(0, tf.int32)),
        (ETA, tf.constant(self.hparams.eta_0, tf.float32)),
        (THETA, tf.constant(self.hparams.theta_0, tf.float32)),
        (X_PREV, tf.nest.map_structure(zeros, specs)),
        (G_PREV, tf.nest.map_structure(zeros, specs)),
        (STEP_SIZE_SUM, tf.constant(0.0, tf.float32)),
        (CURVATURE_STEPS, tf.constant(0.0, tf.float32)),
        (CURVATURE, tf.constant(float('inf'), tf.float32)),
        (GROWTH, tf.constant(float('inf'), tf.float32)),
      ]
    )

  def next(self, state, weights, gradients):
    return self.step(state, weights, gradients, state[G_PREV])

  def step(self, state, weights, gradients, previous_gradients):
    """One step; `previous_gradients` is g(x_{k-1}) as the rule sees it (see `gradient`)."""
    # Values, not variables: x_{k-1} must be read before the caller assigns x_k.
    weights_flat = [tf.convert_to_tensor(w) for w in tf.nest.flatten(weights)]
    grads_flat = [tf.convert_to_tensor(g) for g in tf.nest.flatten(gradients)]
    dx_norm = tf.linalg.global_norm(tree.sub(weights_flat, tf.nest.flatten(state[X_PREV])))
    dg_norm = tf.linalg.global_norm(tree.sub(grads_flat, tf.nest.flatten(previous_gradients)))
    return self.step_from_norms(state, weights, weights_flat, grads_flat, dx_norm, dg_norm)

  def step_from_norms(
    self, state, weights, weights_flat, grads_flat, dx_norm, dg_norm, scale=lambda eta, x: eta
  ):
    """`step` given ||x_k - x_{k-1}|| and ||g_k - g_{k-1}||, elementwise in them.

    Engine "vectorised" passes K clients' stacked weights, state and [K] norms, and `scale`
    shaping each client's eta to its tensors (`engines.stacked_steps`).
    """
    eta, theta, picked, curvature, growth = next_step_size(
      state[ETA], state[THETA], dx_norm, dg_norm, self.hparams
    )
    first = tf.equal(state[STEP], 0)
    eta_1, theta_1 = first_step_size(self.hparams)
    eta = tf.where(first, tf.constant(eta_1, tf.float32), eta)
    theta = tf.where(first, tf.constant(theta_1, tf.float32), theta)
    picked = tf.logical_and(tf.logical_not(first), picked)
    new_weights = [
      x - tf.cast(scale(eta, x), x.dtype) * g for x, g in zip(weights_flat, grads_flat)
    ]
    new_state = collections.OrderedDict(state)
    new_state.update(
      [
        (STEP, state[STEP] + 1),
        (ETA, eta),
        (THETA, theta),
        (X_PREV, tf.nest.pack_sequence_as(state[X_PREV], weights_flat)),
        (G_PREV, tf.nest.pack_sequence_as(state[G_PREV], grads_flat)),
        (STEP_SIZE_SUM, state[STEP_SIZE_SUM] + eta),
        (CURVATURE_STEPS, state[CURVATURE_STEPS] + tf.cast(picked, tf.float32)),
        (CURVATURE, tf.where(first, float('inf'), curvature)),
        (GROWTH, tf.where(first, float('inf'), growth)),
      ]
    )
    return new_state, tf.nest.pack_sequence_as(weights, new_weights)


def build_delta_sgd(
  hparams: DeltaSGDHParams = DeltaSGDHParams(),
) -> tff.learning.optimizers.Optimizer:
  """Delta-SGD as a TFF client optimizer (gradient='paper'; 'same_batch' needs `delta_sgd_step`).

  Raises:
    ValueError: if hparams.gradient is 'same_batch', which needs a second gradient per step.
  """
  if hparams.gradient != 'paper':
    raise ValueError(
      "delta_sgd gradient='same_batch' evaluates a second gradient per step; use "
      'delta_sgd_step (a local-step hook), not a gradient-only optimizer'
    )
  return _DeltaSGD(hparams)


def delta_sgd_step(
  hparams: DeltaSGDHParams, gradient_transform: local_loop.GradientTransform | None = None
) -> local_loop.LocalStep:
  """Delta-SGD as a local step; 'same_batch' recomputes g(x_{k-1}) on the current minibatch.

  With a `gradient_transform` (SCAFFOLD's correction, FedProx's proximal term) both gradients
  of a step are transformed alike.
  """
  optimizer = _DeltaSGD(hparams)
  if hparams.gradient == 'paper':
    return local_loop.optimizer_step(optimizer, 0.0, gradient_transform)

  def transformed(grads, model):
    return tuple(gradient_transform(grads, model)) if gradient_transform else grads

  def init(model):
    state = optimizer.initialize(local_loop.trainable_specs(model))
    # x_prev := x_0, so step 1 sees ||dx|| = ||dg|| = 0 (its size is first_step_size anyway),
    # and, like the authors' code, evaluates the previous iterate's gradient there too.
    state[X_PREV] = tuple(v.read_value() for v in model.trainable_variables)
    return state

  def apply(model, batch, step_seed, state):
    trainable = tuple(model.trainable_variables)
    current = tuple(tf.identity(v.read_value()) for v in trainable)
    with tf.control_dependencies(current):
      _, grads = local_loop.loss_and_gradients(model, batch, step_seed)
    grads = transformed(grads, model)
    # g(x_{k-1}) on this minibatch: the model holds x_{k-1} for one more forward pass. It has
    # the step's dropout masks: TFF's forward_pass is a traced function that fixes them per
    # step (the authors' code runs two networks, which draw independent masks).
    with tf.control_dependencies(grads):
      moved = [v.assign(x) for v, x in zip(trainable, tf.nest.flatten(state[X_PREV]))]
    with tf.control_dependencies(moved):
      _, previous = local_loop.loss_and_gradients(model, batch, step_seed, record_metrics=False)
      previous = transformed(previous, model)
    state, new_weights = optimizer.step(state, current, grads, previous)
    with tf.control_dependencies(previous):
      for v, w in zip(trainable, new_weights):
        v.assign(w)
    return state

  return local_loop.LocalStep(init, apply)


def statistics(state) -> collections.OrderedDict:
  """Per-client statistics of one local training: the mean step size and how often the
  curvature candidate was the smaller one."""
  steps = tf.maximum(tf.cast(state[STEP], tf.float32), 1.0)
  return collections.OrderedDict(
    step_size=state[STEP_SIZE_SUM] / steps,
    curvature_fraction=state[CURVATURE_STEPS] / tf.maximum(steps - 1.0, 1.0),
  )
