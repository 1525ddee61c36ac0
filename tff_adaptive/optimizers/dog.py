"""DoG and L-DoG: parameter-free client step sizes from the distance travelled (Ivgi et al. 2023).

Ivgi, Hinder, Carmon. "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule."
ICML 2023. From x_0, with g_t the stochastic gradient at x_t, t = 0, 1, ...::

  rbar_t  = max( r_eps, max_{i <= t} ||x_i - x_0|| )     # distance from the start, x_t included
  G_t     = sum_{i <= t} ||g_i||^2                       # g_t included
  eta_t   = rbar_t / sqrt(G_t + eps)
  x_{t+1} = x_t - eta_t g_t

so the first step moves exactly r_eps (eps = 0): eta_0 = r_eps / ||g_0||. L-DoG ("layer-wise
DoG") applies the same rule to every tensor l of the model separately: rbar_t^l, G_t^l and
eta_t^l from ||x_i^l - x_0^l|| and ||g_i^l||^2, and r_eps^l = reps_rel (1 + ||x_0^l||).

Defaults: the authors' package `dog-optimizer` (github.com/formll/dog), which produced the
paper's numbers: r_eps = reps_rel (1 + ||x_0||) with reps_rel = 1e-6 (the paper suggests 1e-4
for models with batch normalisation), eps = 1e-8 (the paper's formula: 0, `DoGHParams.eps`),
and the package's `init_eta` option (a given first step size; r_eps is then 0, so from t = 1 on
rbar_t = max_{1 <= i <= t} ||x_i - x_0||). The package's multiplier c (`lr`, 1 recommended) is
not exposed (c = 1), nor its weight decay (the tasks' losses carry their own regularisation),
nor the polynomial-decay iterate averaging, which the paper applies to the final model of a
centralised run: a client's model after its K local steps is what the server aggregates.

As a client optimizer (`CLIENT_OPTIMIZERS` 'dog' and 'ldog') the state starts afresh for every
client in every round, as for Delta-SGD (Kim et al. 2024): x_0 is the model the client received,
rbar = r_eps and G = 0. DoG's warm-up (rbar grows from r_eps ~ 1e-6 (1 + ||x_0||)) is then
repeated every round; with few local steps a client barely moves at the package's reps_rel, so
`--dog_reps_rel` (the first step's length relative to the model) is the one setting that
matters here (docs/client_optimizers.md shows the measured effect).

A zero gradient on the first step with eps = 0 leaves G_0 = 0: the step size is then 0 (no
step) instead of the formula's 0 / 0.

`build_dog` / `build_ldog` return a `tff.learning.optimizers.Optimizer` (DoG needs nothing but
gradients), so either drops into any TFF pipeline as a client optimizer; `dog_rule` / `ldog_rule`
are the registry's `ClientRule`s; their form for the vectorised engine (K clients' steps at once,
every client its own step sizes) is `engines.stacked_steps.dog_steps`, which calls `dog_step`. `DoGHParams` is defined without TensorFlow in
`optimizers.config` and re-exported here.
"""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.optimizers import client
from tff_adaptive.optimizers.config import ClientOptimizerConfig
from tff_adaptive.optimizers.config import DoGHParams

# Optimizer state keys: the step count t, x_0 (set on the first step), r_eps, rbar_t, G_t and the
# last eta_t (one per tensor for L-DoG), and the sum of the steps' (mean) step sizes.
STEP = 'step'
X0 = 'x0'
R_EPS = 'r_eps'
RBAR = 'rbar'
G = 'G'
ETA = 'eta'
STEP_SIZE_SUM = 'step_size_sum'


def _sq_norm(t: tf.Tensor) -> tf.Tensor:
  return tf.reduce_sum(tf.square(tf.cast(t, tf.float32)))


def _same(value: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
  del like
  return value


def step_size(rbar: tf.Tensor, big_g: tf.Tensor, eps: float) -> tf.Tensor:
  """eta_t = rbar_t / sqrt(G_t + eps); 0 where G_t + eps = 0 (a zero first gradient, eps = 0)."""
  denominator = big_g + eps
  positive = denominator > 0
  safe = tf.where(positive, denominator, tf.ones_like(denominator))
  return tf.where(positive, rbar / tf.sqrt(safe), tf.zeros_like(rbar))


def dog_step(
  state: collections.OrderedDict,
  weights: list[tf.Tensor],
  grads: list[tf.Tensor],
  hparams: DoGHParams,
  layerwise: bool,
  sq_norm=_sq_norm,
  scale=_same,
) -> tuple[collections.OrderedDict, list[tf.Tensor]]:
  """One DoG (or L-DoG) step x_t -> x_{t+1} (module docstring), on flat lists of tensors.

  `sq_norm(t)` is a tensor's squared norm and `scale(s, x)` shapes a per-model scalar s to x;
  engine "vectorised" passes per-client ones ([K] from K stacked clients,
  `engines.stacked_steps`), so the same function steps one client or K of them.
  """
  first = tf.equal(state[STEP], 0)
  x0 = [tf.where(scale(first, w), w, x) for w, x in zip(weights, tf.nest.flatten(state[X0]))]
  dist_sq = [sq_norm(w - x) for w, x in zip(weights, x0)]
  grad_sq = [sq_norm(g) for g in grads]
  if layerwise:
    norms = [tf.sqrt(sq_norm(x)) for x in x0]
  else:
    dist_sq, grad_sq = [tf.add_n(dist_sq)], [tf.add_n(grad_sq)]
    norms = [tf.sqrt(tf.add_n([sq_norm(x) for x in x0]))]
  reps_rel = 0.0 if hparams.init_eta is not None else hparams.reps_rel
  r_eps = [
    tf.where(first, reps_rel * (1.0 + n), r) for n, r in zip(norms, tf.nest.flatten(state[R_EPS]))
  ]
  rbar = [
    tf.maximum(tf.maximum(r_prev, tf.sqrt(d)), r)
    for r_prev, d, r in zip(tf.nest.flatten(state[RBAR]), dist_sq, r_eps)
  ]
  big_g = [g_prev + g for g_prev, g in zip(tf.nest.flatten(state[G]), grad_sq)]
  eta = [step_size(r, g, hparams.eps) for r, g in zip(rbar, big_g)]
  if hparams.init_eta is not None:
    eta = [tf.where(first, tf.fill(tf.shape(e), hparams.init_eta), e) for e in eta]
  per_tensor = eta if layerwise else eta * len(weights)
  new_weights = [
    w - tf.cast(scale(e, w), w.dtype) * g for w, e, g in zip(weights, per_tensor, grads)
  ]
  new_state = collections.OrderedDict(state)
  pack = lambda key, values: tf.nest.pack_sequence_as(state[key], values)
  new_state.update(
    [
      (STEP, state[STEP] + 1),
      (X0, pack(X0, x0)),
      (R_EPS, pack(R_EPS, r_eps)),
      (RBAR, pack(RBAR, rbar)),
      (G, pack(G, big_g)),
      (ETA, pack(ETA, eta)),
      (STEP_SIZE_SUM, state[STEP_SIZE_SUM] + tf.add_n(eta) / len(eta)),
    ]
  )
  return new_state, new_weights


class _DoG(tff.learning.optimizers.Optimizer):
  """DoG (layerwise=False) or L-DoG (True) as a `tff.learning.optimizers.Optimizer`.

  `next(state, x, g)` is one step from x = x_t with g = g(x_t); the first `next` after
  `initialize` takes x as x_0. Re-initialize the state for every client in every round (TFF's
  client work and this library's local loop both do).
  """

  def __init__(self, hparams: DoGHParams = DoGHParams(), layerwise: bool = False):
    self.hparams = hparams
    self.layerwise = layerwise

  def initialize(self, specs):
    zero = lambda: tf.constant(0.0, tf.float32)
    per_model = lambda: tuple(zero() for _ in tf.nest.flatten(specs)) if self.layerwise else zero()
    return collections.OrderedDict(
      [
        (STEP, tf.constant(0, tf.int32)),
        (X0, tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)),
        (R_EPS, per_model()),
        (RBAR, per_model()),
        (G, per_model()),
        (ETA, per_model()),
        (STEP_SIZE_SUM, zero()),
      ]
    )

  def next(self, state, weights, gradients):
    # Values, not variables: x_t must be read before the caller assigns x_{t+1}.
    flat_w = [tf.convert_to_tensor(w) for w in tf.nest.flatten(weights)]
    flat_g = [tf.convert_to_tensor(g) for g in tf.nest.flatten(gradients)]
    state, new_weights = dog_step(state, flat_w, flat_g, self.hparams, self.layerwise)
    return state, tf.nest.pack_sequence_as(weights, new_weights)


def build_dog(hparams: DoGHParams = DoGHParams()) -> tff.learning.optimizers.Optimizer:
  """DoG (Ivgi et al. 2023) as a TFF optimizer: one step size for the whole model."""
  return _DoG(hparams, layerwise=False)


def build_ldog(hparams: DoGHParams = DoGHParams()) -> tff.learning.optimizers.Optimizer:
  """L-DoG (Ivgi et al. 2023) as a TFF optimizer: one step size per tensor of the model."""
  return _DoG(hparams, layerwise=True)


def statistics(state) -> collections.OrderedDict:
  """Per-client statistics of one local training: the mean step size (the mean over tensors for
  L-DoG) and rbar at the last step, the farthest the client's iterates went from x_0 (the mean
  over tensors for L-DoG)."""
  steps = tf.maximum(tf.cast(state[STEP], tf.float32), 1.0)
  rbar = tf.nest.flatten(state[RBAR])
  return collections.OrderedDict(
    step_size=state[STEP_SIZE_SUM] / steps, distance=tf.add_n(rbar) / len(rbar)
  )


def dog_rule(config: ClientOptimizerConfig) -> client.ClientRule:
  """dog: `build_dog(config.dog)`; it reads no learning rate."""
  return client.optimizer_rule(build_dog(config.dog), statistics)


def ldog_rule(config: ClientOptimizerConfig) -> client.ClientRule:
  """ldog: `build_ldog(config.dog)`; it reads no learning rate."""
  return client.optimizer_rule(build_ldog(config.dog), statistics)
