"""The limits a round of local training is measured against: a fused JAX loop and a tight TF loop.

Infrastructure (no paper of its own). `benchmarks.vectorised_clients` and
`benchmarks.round_time` report every engine's seconds per round over these two floors, for
Sequential models of Dense layers (the synthetic task's softmax regression, the MLP) with a
sparse softmax cross-entropy on logits, client SGD and FedAvg's example-weighted mean:

* `JaxFloor`: the round's local steps, every client's one after another, in one
  `jax.jit` (a `fori_loop` over the clients, each starting from x_t and running its K_i steps
  in an inner `fori_loop`, u_i = x_t - x_i kept at its end), then sum_i n_i u_i / sum_i n_i and the server step
  x_t - eta u (server SGD) — the same arithmetic with no op dispatch between steps, the limit
  on this CPU;
* `TfLoopFloor`: the same loop as a plain `tf.function` (a `tf.while_loop`, no XLA): what any
  graph-executed TF loop of these steps costs, op dispatch included.

Both take the round's step table from the engine (`VectorisedEngine.schedule`: each client's
minibatch rows, padded to B and masked, in the seeded order the engines visit them), so they
compute the round the engines compute; `check` holds their model to the engine's to 1e-5. The
table's arrays are padded to a power of two (as `engines.fused_loop` pads them) so neither floor
compiles more than a few programs; padded steps are never run. Time spent building the table
(NumPy) is not counted: a floor is the loop alone.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf

from tff_adaptive.engines import fused_loop


def dense_layers(keras_model: tf.keras.Model) -> list[str]:
  """Each Dense layer's activation ('relu' or 'linear'); raises ValueError for other models."""
  activations = []
  for layer in keras_model.layers:
    if isinstance(layer, tf.keras.layers.InputLayer):
      continue
    if not isinstance(layer, tf.keras.layers.Dense):
      raise ValueError(f'the floors support Dense layers only, got {type(layer).__name__}')
    name = tf.keras.activations.serialize(layer.activation)
    if name not in ('relu', 'linear'):
      raise ValueError(f'the floors support relu and linear activations, got {name!r}')
    activations.append(name)
  return activations


def _pad(a: np.ndarray, size: int) -> np.ndarray:
  return np.concatenate([a, np.zeros((size - len(a),) + a.shape[1:], a.dtype)])


class StepTable(collections.namedtuple('StepTable', 'steps rows valid weights')):
  """A round's local steps in client order, padded (module docstring)."""


def step_table(engine, features, splits, seeds_) -> StepTable:
  """The round's step table from a vectorised engine's `schedule` (NumPy, padded)."""
  steps, (rows, valid) = engine.schedule(tf.constant(splits), tf.constant(seeds_))
  steps, rows, valid = steps.numpy(), rows.numpy(), valid.numpy()
  client = np.repeat(np.arange(len(steps)), steps).astype(np.int32)
  step = np.concatenate([np.arange(k) for k in steps]).astype(np.int32)
  size = fused_loop.examples_bucket(len(client))
  del features
  return StepTable(
    steps.astype(np.int32),
    _pad(rows[client, step].astype(np.int32), size),
    _pad(valid[client, step], size),
    np.diff(splits).astype(np.float32),
  )


def _loss_jax(params, activations, x, y, mask):
  h = x
  for j, act in enumerate(activations):
    h = h @ params[2 * j] + params[2 * j + 1]
    if act == 'relu':
      h = jax.nn.relu(h)
  logp = jax.nn.log_softmax(h)
  per_example = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
  m = mask.astype(jnp.float32)
  return jnp.sum(per_example * m) / jnp.maximum(jnp.sum(m), 1.0)


class JaxFloor:
  """The round's local SGD steps in one jitted `fori_loop`, FedAvg's mean and the server step.

  `server_step`: (x_t, mean update) -> x_{t+1} (NumPy), e.g. an Adam step; None: server SGD at
  `server_lr`, x_t - eta u.
  """

  def __init__(self, activations, client_lr: float, server_lr: float = 1.0, server_step=None):
    self.activations = tuple(activations)
    self.client_lr, self.server_lr = client_lr, server_lr
    self.server_step = server_step
    self._round = jax.jit(self._round_fn)

  def _round_fn(self, x_t, x, y, steps, rows, valid, num_clients):
    grad = jax.grad(_loss_jax)
    updates = tuple(jnp.zeros((steps.shape[0],) + w.shape, w.dtype) for w in x_t)

    def client_body(i, carry):
      start, updates = carry

      def step_body(s, params):
        g = start + s
        idx = rows[g]
        grads = grad(params, self.activations, x[idx], y[idx], valid[g])
        return tuple(p - self.client_lr * d for p, d in zip(params, grads))

      params = jax.lax.fori_loop(0, steps[i], step_body, tuple(x_t))
      updates = tuple(u.at[i].set(a - p) for u, a, p in zip(updates, x_t, params))
      return start + steps[i], updates

    _, updates = jax.lax.fori_loop(0, num_clients, client_body, (0, updates))
    return updates

  def __call__(self, x_t, x, y, table: StepTable):
    """x_{t+1} (NumPy) after one round from x_t on the clients' examples (x, y) by `table`."""
    num_clients = len(table.weights)
    slots = fused_loop.examples_bucket(num_clients)
    rows = fused_loop.examples_bucket(len(x))
    updates = self._round(
      tuple(jnp.asarray(w) for w in x_t),
      jnp.asarray(_pad(x, rows)),
      jnp.asarray(_pad(y, rows)),
      _pad(table.steps, slots),
      table.rows,
      table.valid,
      num_clients,
    )
    weights = _pad(table.weights, slots)
    mean = [np.tensordot(weights, np.asarray(u), axes=1) / weights.sum() for u in updates]
    if self.server_step is not None:
      return self.server_step(x_t, mean)
    return [w - self.server_lr * m for w, m in zip(x_t, mean)]


class TfLoopFloor:
  """The same loop as a plain `tf.function` (graph-executed `tf.while_loop`, no XLA)."""

  def __init__(self, activations, client_lr: float, server_lr: float = 1.0):
    self.activations = tuple(activations)
    self.client_lr, self.server_lr = client_lr, server_lr
    self._round = tf.function(self._round_fn, autograph=False, reduce_retracing=True)

  def _loss(self, params, x, y, mask):
    h = x
    for j, act in enumerate(self.activations):
      h = tf.matmul(h, params[2 * j]) + params[2 * j + 1]
      if act == 'relu':
        h = tf.nn.relu(h)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, h)
    m = tf.cast(mask, tf.float32)
    return tf.reduce_sum(per_example * m) / tf.maximum(tf.reduce_sum(m), 1.0)

  def _round_fn(self, x_t, x, y, steps, rows, valid, weights):
    def client_body(i, start, acc):
      def step_body(s, params):
        g = start + s
        idx = rows[g]
        with tf.GradientTape() as tape:
          tape.watch(params)
          loss = self._loss(params, tf.gather(x, idx), tf.gather(y, idx), valid[g])
        grads = tape.gradient(loss, params)
        return s + 1, tuple(p - self.client_lr * d for p, d in zip(params, grads))

      _, params = tf.while_loop(lambda s, _: s < steps[i], step_body, (0, tuple(x_t)))
      acc = tuple(m + weights[i] * (a - p) for m, a, p in zip(acc, x_t, params))
      return i + 1, start + steps[i], acc

    zeros = tuple(tf.zeros_like(w) for w in x_t)
    _, _, acc = tf.while_loop(lambda i, *_: i < tf.shape(steps)[0], client_body, (0, 0, zeros))
    return tuple(w - self.server_lr * m / tf.reduce_sum(weights) for w, m in zip(x_t, acc))

  def __call__(self, x_t, x, y, table: StepTable):
    new = self._round(
      tuple(tf.constant(w) for w in x_t),
      tf.constant(_pad(x, fused_loop.examples_bucket(len(x)))),
      tf.constant(_pad(y, fused_loop.examples_bucket(len(y)))),
      tf.constant(table.steps),
      tf.constant(table.rows),
      tf.constant(table.valid),
      tf.constant(table.weights),
    )
    return [w.numpy() for w in new]


def max_relative_difference(a, b) -> float:
  """max over tensors of max |a - b| / max |a| (a the reference)."""
  return max(
    float(np.max(np.abs(np.asarray(u) - np.asarray(v))) / (np.max(np.abs(np.asarray(u))) + 1e-12))
    for u, v in zip(a, b)
  )
