"""The local loop of client training, with a hook for the step.

A client runs E epochs over its examples in minibatches of B: each epoch visits a seeded
permutation of the examples (the last minibatch smaller when B does not divide n), the
arithmetic of `dataset.shuffle(n).batch(B).repeat(E)` with a stateless shuffle, so a client's
training is a pure function of its seed. What happens in one step is a `LocalStep`:

* `optimizer_step(optimizer, learning_rate)`: x <- ClientOpt(x, grad f(x; batch)) (FedAvg);
  with `gradient_transform` the gradient is changed first (SCAFFOLD's g - c_i + c, FedProx's
  g + mu (x - x_t));
* any other `LocalStep` may evaluate further gradients (Delta-SGD), average iterates (FedPA),
  or keep its own state across steps.

The model is a `tff.learning.models.VariableModel` used as the step's workspace: its trainable
variables hold the current local iterate x, and its metric variables accumulate the training
metrics of every minibatch. The loop itself is a `tf.while_loop`, so it runs unchanged inside
a TFF computation (engine "tff") and inside one compiled round function (engine "inprocess").
"""

import collections
from collections.abc import Callable
import contextlib
import dataclasses
import threading
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.core import seeds

LEARNING_RATE_KEY = tff.learning.optimizers.LEARNING_RATE_KEY
VariableModel = tff.learning.models.VariableModel
Batch = collections.OrderedDict
_options = threading.local()
# (g, model) -> g': changes a step's gradient before the client optimizer sees it.
GradientTransform = Callable[[tuple[tf.Tensor, ...], VariableModel], Any]


@contextlib.contextmanager
def xla_steps():
  """Local loops traced inside the block compile each step with XLA (`jit_compile=True`).

  The step (forward, backward, client optimizer) is compiled once per minibatch shape (B, and
  the last minibatch's size n mod B); the loop around it stays a `tf.while_loop`, since clients'
  example counts differ. Used by the in-process engine's `jit_compile` option.
  """
  previous = getattr(_options, 'xla', False)
  _options.xla = True
  try:
    yield
  finally:
    _options.xla = previous


@dataclasses.dataclass(frozen=True)
class LocalStep:
  """One local step and the state it carries from step to step.

  Attributes:
    init: model -> the state before the first step (e.g. the client optimizer's state).
    apply: (model, batch, step_seed, state) -> state; updates the model's trainable variables
      in place (the local iterate). `step_seed` is int64[2], unique to (client, round, step).
    end_epoch: optional (model, epoch, state) -> state, called after the last step of every
      epoch (epoch: int32, 0-based), e.g. to turn the epoch's iterates into a posterior sample
      (FedPA); the loop then runs epochs as an outer loop, so per-epoch work costs nothing in
      the steps.
  """

  init: Callable[[VariableModel], Any]
  apply: Callable[[VariableModel, Batch, tf.Tensor, Any], Any]
  end_epoch: Callable[[VariableModel, tf.Tensor, Any], Any] | None = None


def trainable_specs(model: VariableModel) -> tuple[tf.TensorSpec, ...]:
  return tuple(tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables)


def loss_and_gradients(
  model: VariableModel,
  batch: Batch,
  step_seed: tf.Tensor,
  record_metrics: bool = True,
) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
  """The minibatch loss at the model's current weights and its gradient w.r.t. the trainables.

  The forward pass runs in training mode inside `seeds.step_seeds(step_seed)`. With
  `record_metrics=False` the model's metric variables are left as they were, so a step that
  evaluates a second gradient does not count its minibatch twice.
  """
  saved = None
  if not record_metrics:
    saved = [v.read_value() for v in model.local_variables]
  trainable = model.trainable_variables
  with tf.GradientTape() as tape, seeds.step_seeds(step_seed):
    output = model.forward_pass(batch, training=True)
  grads = tape.gradient(output.loss, trainable)
  if saved is not None:
    with tf.control_dependencies([output.loss]):
      for v, value in zip(model.local_variables, saved):
        v.assign(value)
  return output.loss, tuple(grads)


def optimizer_step(
  optimizer: tff.learning.optimizers.Optimizer,
  learning_rate: tf.Tensor,
  gradient_transform: GradientTransform | None = None,
) -> LocalStep:
  """x <- ClientOpt.next(x, g), g = grad f(x; batch), optionally transformed first.

  Args:
    optimizer: the client optimizer, re-initialized at the start of every local training.
    learning_rate: eta_l for this round (set under the optimizer's learning-rate key).
    gradient_transform: optional (g, model) -> g' applied before the optimizer sees g.

  Returns:
    A `LocalStep` whose state is the optimizer's state.
  """

  def init(model):
    state = optimizer.initialize(trainable_specs(model))
    state[LEARNING_RATE_KEY] = tf.cast(learning_rate, tf.float32)
    return state

  def apply(model, batch, step_seed, state):
    _, grads = loss_and_gradients(model, batch, step_seed)
    if gradient_transform is not None:
      grads = tuple(gradient_transform(grads, model))
    trainable = tuple(model.trainable_variables)
    state, new_weights = optimizer.next(state, trainable, grads)
    for v, w in zip(trainable, new_weights):
      v.assign(w)
    return state

  return LocalStep(init, apply)


def num_examples(features: collections.OrderedDict) -> tf.Tensor:
  """n: the leading dimension of the client's feature tensors (int32 scalar)."""
  return tf.shape(tf.nest.flatten(features)[0])[0]


def steps_per_epoch(n: tf.Tensor, batch_size: int) -> tf.Tensor:
  """ceil(n / B): one epoch's local steps for n examples (0 for none), any shape of n."""
  return (n + batch_size - 1) // batch_size


def run_local_steps(
  model: VariableModel,
  features: collections.OrderedDict,
  seed: tf.Tensor,
  batch_size: int,
  epochs: int,
  local_step: LocalStep,
  num_epochs: tf.Tensor | None = None,
) -> tuple[Any, tf.Tensor]:
  """Runs E epochs of minibatch steps on one client's in-memory examples.

  Args:
    model: the workspace model; its trainable variables must hold the starting point x_t.
    features: OrderedDict of per-example tensors (leading dimension n).
    seed: int64[2], the client's seed for this round (`seeds.client_seed`).
    batch_size: B >= 1.
    epochs: E >= 1 (with `num_epochs`: the most epochs a client may run).
    local_step: what one step does.
    num_epochs: optional int32 tensor <= epochs: run this many epochs instead (resource
      heterogeneity); epoch e visits the same permutation either way.

  Returns:
    (the step state after the last step, K = E * ceil(n / B) local steps taken, int32).
  """
  n = num_examples(features)
  per_epoch = steps_per_epoch(n, batch_size)
  seed = tf.cast(seed, tf.int64)
  perms = seeds.epoch_permutations(n, epochs, seed)
  if num_epochs is not None:
    epochs = tf.cast(num_epochs, tf.int32)
  num_steps = per_epoch * epochs
  apply = lambda batch, step_seed, state: local_step.apply(model, batch, step_seed, state)
  if getattr(_options, 'xla', False):
    apply = tf.function(apply, jit_compile=True, autograph=False)

  def step(epoch, b, state):
    idx = perms[epoch, b * batch_size : tf.minimum((b + 1) * batch_size, n)]
    batch = tf.nest.map_structure(lambda t: tf.gather(t, idx), features)
    i = epoch * per_epoch + b
    return apply(batch, seeds.local_step_seed(seed, i), state)

  if local_step.end_epoch is None:

    def body(i, state):
      return i + 1, step(i // per_epoch, i % per_epoch, state)

    _, state = tf.while_loop(
      lambda i, _: i < num_steps, body, (tf.constant(0), local_step.init(model))
    )
    return state, num_steps

  def epoch_body(epoch, state):
    _, state = tf.while_loop(
      lambda b, _: b < per_epoch,
      lambda b, state: (b + 1, step(epoch, b, state)),
      (tf.constant(0), state),
    )
    return epoch + 1, local_step.end_epoch(model, epoch, state)

  _, state = tf.while_loop(
    lambda epoch, _: epoch < epochs, epoch_body, (tf.constant(0), local_step.init(model))
  )
  return state, num_steps


# Examples per forward pass of `full_loss_and_gradient` (not a hyperparameter: the result is
# the same up to float rounding whatever the chunk size).
FULL_PASS_CHUNK = 512


def full_loss_and_gradient(
  model: VariableModel,
  features: collections.OrderedDict,
  max_examples: int | None = None,
  gradient: bool = True,
) -> tuple[tf.Tensor, tuple[tf.Tensor, ...] | None]:
  """F_k(x) and grad F_k(x) over a client's local data at the model's current weights.

  F_k is the example-weighted mean of the model's per-batch losses over the first
  m = min(n, max_examples) examples (all n by default), computed in chunks of
  `FULL_PASS_CHUNK` in inference mode (no dropout), so the loss of a model whose loss is a
  per-example mean is exactly that mean. The model's metric variables are left untouched, so
  the training metrics count only training steps. A client without examples gives (0, 0).

  Args:
    model: the workspace model holding x.
    features: OrderedDict of per-example tensors (leading dimension n).
    max_examples: optional cap m (Ju et al.'s code: 512).
    gradient: also return the gradient w.r.t. the trainable variables (else None).

  Returns:
    (float32 loss, tuple of gradients or None).
  """
  n = num_examples(features)
  if max_examples is not None:
    n = tf.minimum(n, max_examples)
  saved = [v.read_value() for v in model.local_variables]
  trainable = model.trainable_variables
  num_chunks = (n + FULL_PASS_CHUNK - 1) // FULL_PASS_CHUNK

  def body(i, loss_sum, grad_sum):
    start = i * FULL_PASS_CHUNK
    end = tf.minimum(start + FULL_PASS_CHUNK, n)
    batch = tf.nest.map_structure(lambda t: t[start:end], features)
    size = tf.cast(end - start, tf.float32)
    with tf.GradientTape() as tape:
      loss = tf.cast(model.forward_pass(batch, training=False).loss, tf.float32)
    if gradient:
      grads = tape.gradient(loss, trainable)
      grad_sum = tuple(s + size * tf.cast(g, s.dtype) for s, g in zip(grad_sum, grads))
    return i + 1, loss_sum + size * loss, grad_sum

  zeros = tuple(tf.zeros_like(v) for v in trainable) if gradient else ()
  with tf.control_dependencies(saved):
    _, loss_sum, grad_sum = tf.while_loop(
      lambda i, *_: i < num_chunks, body, (tf.constant(0), tf.constant(0.0), zeros)
    )
  with tf.control_dependencies([loss_sum, *grad_sum]):
    for v, value in zip(model.local_variables, saved):
      v.assign(value)
  count = tf.cast(n, tf.float32)
  loss = tf.math.divide_no_nan(loss_sum, count)
  if not gradient:
    return loss, None
  return loss, tuple(tf.math.divide_no_nan(g, tf.cast(count, g.dtype)) for g in grad_sum)
