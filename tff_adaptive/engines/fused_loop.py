"""A round's local training as one XLA computation: every client's steps, one after another.

On small models a local step is a handful of tiny ops, and what a step costs is op dispatch,
not arithmetic: the TF graph executor pays some microseconds per op and per `tf.while_loop`
iteration whatever the tensor sizes. A program that runs all of a round's local steps in one
compiled loop pays none of it; `benchmarks/fused_floor.py` measures that limit with a JAX
program of the same round. This module builds the same loop in TF, compiled by XLA
(`jit_compile=True`), from the vectorised engine's parts (the model's functional form, its
masked minibatch losses, the client optimizer's stacked form on one client, the algorithm's
gradient transform), so that a client computes what it computes in the sequential engines:

  for i = 0 .. C-1 (the round's clients, in order):
    x <- x_t; optimizer state <- ClientOpt.init
    for s = 0 .. K_i - 1 (epoch e, minibatch b of its seeded permutation):
      x <- ClientOpt(x, transform(grad f_i(x; minibatch b of epoch e)))   (training metrics too)
    u_i <- x_t - x; statistics_i <- the optimizer's statistics

XLA compiles one program per shape of its inputs, and a round's shapes (its examples, its
clients, its largest client) change from round to round: each is padded to a bucket (the next
power of two, `bucket`, `examples_bucket`), so a run compiles a handful of programs (about 0.2 s each
for the synthetic model); the loops run the real counts, never a padded step or client.

Around the loop, unchanged, the vectorised engine runs the clients' permutations (TF's kernels:
XLA's stateless random numbers differ from them), their full passes (AdaFedAdam's, q-FedAvg's),
their `client_result`, the aggregation fold and the server step. Refused (`refusal`): FedPA's
epoch means, and models with random layers (dropout: XLA would draw other masks).
"""

import collections
from collections.abc import Callable
from typing import Any
from typing import NamedTuple

import tensorflow as tf

from tff_adaptive.core import seeds

# The smallest padded number of a round's examples (`examples_bucket`).
MIN_BUCKET = 64


def bucket(size: tf.Tensor) -> tf.Tensor:
  """The padded number of a round's clients (int32 scalar): the next power of two >= size.
  (Every client's update is a slot of a [slots, ...] buffer: on a larger model, extra slots
  cost copies, so the clients' buckets start at 1, not MIN_BUCKET.)"""
  # Every bit below the highest of size - 1 set, plus one: the next power of two >= size.
  n = tf.maximum(tf.cast(size, tf.int32), 1) - 1
  for shift in (1, 2, 4, 8, 16):
    n = tf.bitwise.bitwise_or(n, tf.bitwise.right_shift(n, shift))
  return n + 1


def examples_bucket(size: int) -> int:
  """The padded number of a round's examples: the next power of two >= size, at least
  MIN_BUCKET. (Quarter-octave buckets copied less, but compiled 4 programs where this compiles
  one: on Reddi et al.'s synthetic cells of 100 rounds, 10 clients of power-law sizes a round,
  the compiles cost more than the copies saved.)"""
  size = max(int(size), MIN_BUCKET)
  return 1 << (size - 1).bit_length()


def pad_rows(t: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
  """`t` with zero rows appended up to `rows` rows (its leading dimension)."""
  padding = [[0, rows - tf.shape(t)[0]]] + [[0, 0]] * (t.shape.rank - 1)
  return tf.pad(t, padding)


class Clients(NamedTuple):
  """A round's clients as the loop reads them: row offsets of their examples in the concatenated
  features, sizes n_i, local steps K_i, steps per epoch ceil(n_i / B), every client's epoch
  permutations as rows of the concatenated examples ([E, sum n_i], `seeds.epoch_rows`) and
  round seeds [C, 2]."""

  starts: tf.Tensor
  sizes: tf.Tensor
  steps: tf.Tensor
  steps_per_epoch: tf.Tensor
  rows: tf.Tensor
  seeds: tf.Tensor


def minibatch(clients: Clients, i, epoch, b, batch_size: int):
  """Rows of the concatenated examples [B] and their mask [B] of client i's minibatch b of epoch
  `epoch` (its local step s = epoch ceil(n_i / B) + b): positions b B .. b B + B - 1 of its
  epoch permutation, those < n_i valid; as `VectorisedEngine.schedule` gives them. (The loop
  carries (epoch, b) from step to step: XLA would take a division by the client's steps per
  epoch for a compile-time constant, and compile a program per round.)"""
  position = b * batch_size + tf.range(batch_size)
  valid = position < clients.sizes[i]
  last = tf.maximum(clients.sizes[i] - 1, 0)
  index = tf.gather(clients.rows[epoch], clients.starts[i] + tf.minimum(position, last))
  return tf.where(valid, index, 0), valid


class FusedTraining:
  """The compiled loop (module docstring) for one engine's model, loss and client optimizer.

  Args:
    apply: (params [1, ...], x [1, B, ...], training, step seeds [1, 2]) -> predictions.
    client_losses: (y, predictions, valid, count) -> [1] minibatch losses (masked).
    update_metrics: (y, predictions, losses, valid, count, active) -> None: the training metrics.
    stepper: the client optimizer's stacked form (`stacked_steps`), here on one client.
    transform: None, or (grads, params, x_t, broadcast, client_state) -> grads.
    batch_size: B.
  """

  def __init__(
    self,
    apply: Callable,
    client_losses: Callable,
    update_metrics: Callable,
    stepper: Any,
    transform: Callable | None,
    batch_size: int,
  ):
    self._batch_size = batch_size
    self._apply, self._losses, self._metrics = apply, client_losses, update_metrics
    self._stepper, self._transform = stepper, transform
    self._compiled = tf.function(self._loop, jit_compile=True, autograph=False)

  def __call__(self, x_t, broadcast, client_states, features, clients: Clients, lr):
    """Every client's u_i = x_t - x_i (stacked [C, ...]) and its optimizer's statistics
    ({name: [C]}). The examples (`features`, `clients.rows`) come padded to `examples_bucket`
    rows (`VectorisedEngine.round_inputs` pads them as it concatenates them); the clients are
    padded to `bucket` here."""
    num_clients = tf.shape(clients.steps)[0]
    clients_pad = bucket(num_clients)
    updates, statistics = self._compiled(
      tuple(x_t),
      broadcast,
      tuple(pad_rows(s, clients_pad) for s in client_states),
      features,
      num_clients,
      Clients(
        *(
          t if name == 'rows' else pad_rows(t, clients_pad)
          for name, t in zip(Clients._fields, clients)
        )
      ),
      tf.cast(lr, tf.float32),
    )
    return (
      tuple(u[:num_clients] for u in updates),
      collections.OrderedDict((k, v[:num_clients]) for k, v in statistics.items()),
    )

  def _loop(
    self,
    x_t,
    broadcast,
    client_states,
    features,
    num_clients,
    clients,
    lr,
  ):
    stepper = self._stepper
    clients_pad = tf.shape(clients.steps)[0]  # a constant to XLA
    x0 = tuple(w[None] for w in x_t)
    fresh = stepper.init(x0, tuple(tf.TensorSpec(w.shape, w.dtype) for w in x_t), lr, 1)
    fresh_statistics = collections.OrderedDict(stepper.statistics(fresh))
    updates = tuple(tf.zeros(tf.concat([[clients_pad], w.shape], 0), w.dtype) for w in x_t)
    statistics = collections.OrderedDict(
      (name, tf.fill([clients_pad], tf.reshape(value, [])))
      for name, value in fresh_statistics.items()
    )

    def local_step(i, s, epoch, b, params, state):
      rows, mask = minibatch(clients, i, epoch, b, self._batch_size)
      batch = collections.OrderedDict((k, tf.gather(v, rows)[None]) for k, v in features.items())
      mask = mask[None]
      count = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
      own_seeds = seeds.local_step_seed(clients.seeds[i], s)[None]
      own_state = tuple(s[i][None] for s in client_states)

      def gradients(params):
        with tf.GradientTape() as tape:
          tape.watch(params)
          predictions = self._apply(params, batch['x'], True, own_seeds)
          losses = self._losses(batch['y'], predictions, mask, count)
          total_loss = tf.reduce_sum(losses)
        grads = tuple(tape.gradient(total_loss, params))
        if self._transform is not None:
          grads = tuple(self._transform(grads, params, tuple(x_t), broadcast, own_state))
        return predictions, losses, grads

      predictions, losses, grads = gradients(params)
      previous = None
      if stepper.needs_previous_gradient:  # at x_{k-1}, same minibatch and dropout masks
        previous = gradients(tuple(stepper.previous_point(state)))[2]
      active = tf.ones([1], tf.bool)
      state, params = stepper.step(state, params, grads, losses, previous, active)
      self._metrics(batch['y'], predictions, losses, mask, count, active)
      return tuple(params), state

    def client_body(i, updates, statistics):

      per_epoch = clients.steps_per_epoch[i]

      def step_body(s, epoch, b, params, state):
        params, state = local_step(i, s, epoch, b, params, state)
        last = tf.equal(b + 1, per_epoch)
        return s + 1, tf.where(last, epoch + 1, epoch), tf.where(last, 0, b + 1), params, state

      zero = tf.constant(0)
      _, _, _, params, state = tf.while_loop(
        lambda s, *_: s < clients.steps[i], step_body, (zero, zero, zero, x0, fresh)
      )
      at = tf.reshape(i, [1, 1])
      updates = tuple(
        tf.tensor_scatter_nd_update(u, at, w[None] - p) for u, w, p in zip(updates, x_t, params)
      )
      current = collections.OrderedDict(stepper.statistics(state))
      statistics = collections.OrderedDict(
        (k, tf.tensor_scatter_nd_update(v, at, tf.reshape(current[k], [1])))
        for k, v in statistics.items()
      )
      return i + 1, updates, statistics

    _, updates, statistics = tf.while_loop(
      lambda i, *_: i < num_clients, client_body, (tf.constant(0), updates, statistics)
    )
    return updates, statistics


def refusal(algorithm, functional) -> str | None:
  """Why the fused loop cannot run `algorithm`'s local training on its model's functional form
  `functional` (one line); None if it can."""
  if algorithm.epoch_means() is not None:
    return (
      f'algorithm {algorithm.name!r} collects epoch means of its iterates, which the fused loop '
      'does not'
    )
  random = [layer.name for layer in functional.layers if layer.random]
  if random:
    # XLA draws other numbers than TF's kernels from the same stateless seed (checked: a
    # stateless_uniform under jit_compile differs), so the masks would not be those every other
    # engine, and a run resumed on one, draws.
    return (
      f'the model has random layers ({", ".join(random)}), whose masks XLA draws differently '
      "from TF's kernels"
    )
  return None
