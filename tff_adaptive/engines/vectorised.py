"""Engine "vectorised": all of a round's clients trained side by side as one batched computation.

The in-process engine (`inprocess`) runs a round's clients one after another in one compiled
function. This engine runs the same round with the clients' local training in lock-step: the K
clients' weights are stacked on a leading axis, and local step s trains every client on its own
s-th minibatch at once, through the model's functional form (`functional_model`: batched
matmuls for Dense, per-client convolutions run in parallel). On small models, where a local step
is a handful of tiny ops, per-op overhead and not arithmetic sets the pace of the sequential
loop; one batched op per layer for all K clients removes most of it.

What each client computes is what the sequential engines compute for it, in the three parts of
`Algorithm.client_update`:

* its full passes (`Algorithm.full_passes`: q-FedAvg's F_k(x_t), AdaFedAdam's F_k(x_0) and
  F_k, grad F_k at x_t): every client's loss (and gradient) over its own examples at the shared
  weights, `local_loop.FULL_PASS_CHUNK` rows per client at a time in inference mode, summed as
  `local_loop.full_loss_and_gradient` sums them;

* its minibatches: epoch e visits `seeds.epoch_permutations(n_i, E, seed_i)` in slices of B, the
  last one smaller (here padded to B rows and masked);
* its steps: K_i = E_i ceil(n_i / B); a client whose steps are done (or that has no examples)
  is masked: its weights and optimizer state stay as they were while others go on;
* its randomness: local step s draws from `seeds.local_step_seed(seed_i, s)`, dropout masks as
  `tasks.layers.StatelessDropout` draws them inside `seeds.step_seeds`;
* its loss: the task's Keras loss per example, reduced over the client's own minibatch as the
  loss's reduction says (mean over the minibatch's elements, or sum); gradients of the sum over
  clients of these losses, so client i's gradient is that of its own loss;
* its gradient transform (`Algorithm.transform_gradient`: FedProx's g + mu (x - x_t),
  SCAFFOLD's g - c_i + c with each client's own stored c_i), elementwise, on the stacked
  gradients;
* its optimizer's step, in the stacked form of `stacked_steps`: the optimizer's `next` once
  on the stacked weights (sgd, sgdm, adam, adagrad: accumulators stacked, hyperparameters and
  step count shared), mapped over the clients (delta_sgd: per-client step sizes; with
  'same_batch' a second gradient at each client's previous iterate), or SPS's Polyak step
  from each client's minibatch loss and gradient norm; its statistics (mean step size) per
  client;
* its epoch means (`Algorithm.epoch_means`, FedPA's IASG samples): the iterates after each
  step of a collected epoch summed into the client's slot for that epoch (its own epoch ends:
  step s is in epoch s // ceil(n_i / B)), divided by the epoch's steps at the end;
* its output: `Algorithm.client_result` on its own slice (u_i, K_i, n_i, its passes), called
  per client in the round's fold (FedNova's normalised update, q-FedAvg's h_k, AdaFedAdam's
  U_k, C_k, I_k, SCAFFOLD's c_i+ and Delta c_i), so the per-client math is the algorithm's own,
  written once; new client states go to the training loop as the in-process engine's do;
* then the round's fold and server step are the in-process engine's, in client order: the
  aggregation (weighted mean, DP, compression, FedNova's and AdaFedAdam's own), the server
  optimizer, the extra server state, the statistics.

Training metrics: the loss metric (each (client, step) minibatch's loss weighted by its size),
`num_examples`, `num_batches`, and the task's metrics updated with the step's real examples of
every client at once (per-example metrics such as accuracy, identical to per-minibatch updates).

Supported: algorithms FedOpt (every server optimizer; FedAvg, FedAvgM, FedAdagrad, FedAdam,
FedYogi), FedProx, FedNova, q-FedAvg, AdaFedAdam, SCAFFOLD and FedPA, with every client
optimizer (sgd, sgdm, adam, adagrad, sps, delta_sgd, as each algorithm allows), example or
uniform weighting, E and max_epochs, client learning-rate schedules, DP and compressed
aggregation where the algorithm allows them; Sequential models of the layers `functional_model`
knows. An algorithm that overrides `client_update` as a whole, an unregistered algorithm or
client optimizer, or another model is refused in one line naming why
(`config.vectorised_refusal`, `functional_model.UnsupportedModelError`).
"""

import collections
from typing import Any
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base as algorithm_base
from tff_adaptive.core import local_loop
from tff_adaptive.core import seeds
from tff_adaptive.engines import config
from tff_adaptive.engines import functional_model
from tff_adaptive.engines import fused_loop
from tff_adaptive.engines import inprocess
from tff_adaptive.engines import stacked_steps

_MEAN_REDUCTIONS = ('auto', 'sum_over_batch_size')


def _keras_parts(model: tff.learning.models.VariableModel):
  """(Keras model, Keras loss, metrics) of a `tff.learning.models.from_keras_model` model."""
  keras_model = getattr(model, '_keras_model', None)
  loss_fns = getattr(model, '_loss_fns', None)
  if keras_model is None or not loss_fns or not hasattr(model, 'get_metrics'):
    raise functional_model.UnsupportedModelError(
      'the vectorised engine needs a model made by tff.learning.models.from_keras_model '
      f'(got {type(model).__name__})'
    )
  if len(loss_fns) != 1:
    raise functional_model.UnsupportedModelError(
      'the vectorised engine supports models with one loss'
    )
  loss = loss_fns[0]
  if not isinstance(loss, tf.keras.losses.Loss):
    raise functional_model.UnsupportedModelError(
      f'the vectorised engine needs a tf.keras.losses.Loss object, got {type(loss).__name__}'
    )
  if loss.reduction not in (*_MEAN_REDUCTIONS, 'sum'):
    raise functional_model.UnsupportedModelError(
      f'loss reduction {loss.reduction!r}; the vectorised engine supports '
      "'sum_over_batch_size' (or 'auto') and 'sum'"
    )
  if keras_model.losses:
    raise functional_model.UnsupportedModelError(
      f'model {keras_model.name!r} adds regularisation losses; not supported by the '
      'vectorised engine'
    )
  return keras_model, loss, model.get_metrics()


def keras_model(algorithm: algorithm_base.Algorithm) -> tf.keras.Model:
  """The Keras model of a fresh `algorithm.model_fn()` (refused as `check_supported` refuses)."""
  return _keras_parts(algorithm.model_fn())[0]


def check_algorithm_reason(algorithm: algorithm_base.Algorithm) -> str | None:
  """Why the engine cannot run `algorithm` (one line); None if it can."""
  reason = config.vectorised_refusal(algorithm.name, algorithm.client.optimizer.name)
  own = type(algorithm).client_update is not algorithm_base.Algorithm.client_update
  if reason is None and own:
    reason = (
      f'algorithm {algorithm.name!r} writes its own client update, which is not batched; use '
      '--engine=inprocess'
    )
  return reason


def check_algorithm(algorithm: algorithm_base.Algorithm) -> None:
  """Raises ValueError (one line, naming why) if the engine cannot run `algorithm`."""
  reason = check_algorithm_reason(algorithm)
  if reason is not None:
    raise ValueError(f'--engine=vectorised: {reason}')


def check_supported(algorithm: algorithm_base.Algorithm) -> None:
  """`check_algorithm`, then whether the algorithm's model has a batched form (builds one)."""
  check_algorithm(algorithm)
  try:
    functional_model.FunctionalModel.from_keras(keras_model(algorithm))
  except functional_model.UnsupportedModelError as e:
    raise ValueError(f'--engine=vectorised: {e}') from None


class VectorisedEngine(inprocess.InProcessEngine):
  """A round's clients trained side by side (module docstring); the rest as `inprocess`.

  Its round's parts, besides the in-process engine's (for `grid_cells`): `functional` (the
  model's batched form), `schedule(splits, seeds)` (every client's steps and minibatches),
  `client_losses`, `update_metrics` and `output_spec(broadcast)` (`client_result`'s structure).
  """

  def __init__(
    self,
    algorithm: algorithm_base.Algorithm,
    device: str | None = None,
    chunk_size: int | None = None,
    fused: bool = False,
  ):
    """Checks that `algorithm` and its model are supported, then builds the workspace model.

    Args:
      algorithm: an `Algorithm` of `config.VECTORISED_ALGORITHMS` with a client optimizer of
        `config.VECTORISED_CLIENT_OPTIMIZERS`.
      device: a TF device name; None lets TF place ops.
      chunk_size: train the round's clients this many at a time, grouped by their number of
        local steps (for clients of very unequal sizes); None: all at once.
      fused: run the clients' local steps one after another in one XLA computation
        (`fused_loop`) instead of side by side; `chunk_size` is then not read.

    Raises:
      ValueError: the algorithm, client optimizer or model is not supported (one line).
    """
    check_algorithm(algorithm)
    if chunk_size is not None and (
      isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
      raise ValueError(f'chunk_size must be a positive integer or None, got {chunk_size!r}')
    self.chunk_size = chunk_size
    super().__init__(algorithm, device=device)
    keras, self._loss, self._metrics = _keras_parts(self._model)
    self.functional = functional_model.FunctionalModel.from_keras(keras)
    self._stepper = stacked_steps.build(algorithm.client.optimizer, algorithm.client_rule)
    with tf.Graph().as_default():  # the names of the client rule's statistics
      params = tuple(tf.zeros([1, *s.shape], s.dtype) for s in self.specs)
      state = self._stepper.init(params, self.specs, tf.constant(0.0), tf.constant(1))
      self._rule_statistics = tuple(self._stepper.statistics(state))
    self.fused = None
    self._fold_fn = None
    if fused:
      reason = fused_loop.refusal(algorithm, self.functional)
      if reason is not None:
        raise ValueError(f'fused local training: {reason}')
      self.fused = fused_loop.FusedTraining(
        self.functional.apply,
        self.client_losses,
        self.update_metrics,
        self._stepper,
        algorithm.transform_gradient if algorithm.transforms_gradient() else None,
        algorithm.client.batch_size,
      )

  # -- The round. ----------------------------------------------------------------------------

  # The round's inputs are the in-process engine's (`round_inputs`: the clients' examples
  # concatenated, row offsets, seeds, stored client states and whether each had one), and so is
  # its compiled function (`_build_round_fn`).

  def round_inputs(self, clients) -> tuple:
    """The in-process engine's inputs; with the fused loop also every client's epoch
    permutations as rows of the concatenated examples (`seeds.epoch_rows`, [E, sum n_i], E the
    most epochs a client runs), computed on the host for all clients at once."""
    inputs = super().round_inputs(clients)
    if self.fused is None:
      return inputs
    splits, seeds_ = inputs[1], inputs[2]
    epochs = self.algorithm.client.max_epochs or self.algorithm.client.epochs
    rows = seeds.epoch_rows(np.diff(splits), epochs, seeds_)
    padding = np.zeros((epochs, self.examples_size(len(rows[0])) - len(rows[0])), np.int32)
    return (*inputs, np.concatenate([rows, padding], axis=1))

  def examples_size(self, total: int) -> int:
    """Rows of the concatenated examples for `total` examples: with the fused loop padded to
    its bucket (`fused_loop.examples_bucket`), so that XLA compiles a handful of programs."""
    return total if self.fused is None else fused_loop.examples_bucket(total)

  def round_signature(self, state, *inputs) -> tuple:
    signature = super().round_signature(state, *inputs[:5])
    if self.fused is None:
      return signature
    return (*signature, tf.TensorSpec([inputs[5].shape[0], None], tf.int32))

  def _round(self, state, features, splits, seeds_, states, present, rows=None):
    alg = self.algorithm
    x_t = state['model']
    lr = tf.cast(alg.client_lr_schedule(state['client_round']), tf.float32)
    broadcast = alg.client_broadcast(state['extra'], state['client_round'])
    self.reset_metrics()
    sizes = splits[1:] - splits[:-1]
    num_clients = tf.shape(sizes)[0]
    client_states = self._entry_states(states, present, broadcast)
    (updates, passes, rule_stats, collected), steps = self._train_clients(
      x_t, broadcast, client_states, features, splits, seeds_, lr, rows
    )
    per_client = _PerClient(
      updates, steps, tf.cast(sizes, tf.float32), rule_stats, passes, client_states, collected
    )
    shared = (lr, broadcast, tuple(x_t.trainable))
    spec = self.output_spec(broadcast)
    if self.fused is not None and not alg.aggregation.compressed:
      carry, new_states = self._compiled_fold(state['aggregator'], spec, per_client, shared)
    else:
      carry, new_states = self.fold_clients(
        state, spec, num_clients, lambda i: self._client_output(i, per_client, shared)
      )
    return self.server_step(state, spec, num_clients, carry, new_states)

  def _client_output(self, i, per_client, shared):
    """Client i's `client_result` from the round's stacked per-client results."""
    updates, steps, num_examples, rule_stats, passes, client_states, collected = per_client
    lr, broadcast, x_shared = shared
    return self.algorithm.client_result(
      algorithm_base.LocalResult(
        update=tuple(u[i] for u in updates),
        num_steps=steps[i],
        stats=collections.OrderedDict(
          [('local_steps', tf.cast(steps[i], tf.float32))]
          + [(name, value[i]) for name, value in rule_stats.items()]
        ),
        num_examples=num_examples[i],
        learning_rate=lr,
        passes=collections.OrderedDict(
          (name, algorithm_base.Evaluation(loss[i], tuple(g[i] for g in grads) or None))
          for name, (loss, grads) in passes.items()
        ),
        broadcast=broadcast,
        client_state=tuple(s[i] for s in client_states),
        initial=x_shared,
        epoch_means=tf.nest.map_structure(lambda t: t[i], collected),
      )
    )

  def _compiled_fold(self, aggregator_state, spec, per_client, shared):
    """`fold_clients` compiled by XLA (with the fused loop; not for compressed aggregations,
    whose random rotations XLA would draw otherwise): the clients' `client_result`s and the
    aggregation's accumulation, padded to `fused_loop.bucket` clients. Returns what
    `fold_clients` returns."""
    num_clients = tf.shape(per_client.steps)[0]
    slots = fused_loop.bucket(num_clients)
    padded = tf.nest.map_structure(lambda t: fused_loop.pad_rows(t, slots), per_client)

    def fold(aggregator_state, padded, shared, num_clients):
      return self.fold_clients(
        collections.OrderedDict(aggregator=aggregator_state),
        spec,
        num_clients,
        lambda i: self._client_output(i, padded, shared),
        slots=tf.shape(padded.steps)[0],
      )

    if self._fold_fn is None:
      self._fold_fn = tf.function(fold, jit_compile=True, autograph=False)
    carry, stacked = self._fold_fn(aggregator_state, padded, shared, num_clients)
    return carry, [t[:num_clients] for t in stacked]

  def output_spec(self, broadcast) -> algorithm_base.ClientOutput:
    """The structure of `client_result`'s output, traced once in a scratch graph."""
    alg = self.algorithm
    zeros = lambda s: tf.zeros(s.shape, s.dtype)
    with tf.Graph().as_default():
      weights = tuple(zeros(s) for s in self.specs)
      out = alg.client_result(
        algorithm_base.LocalResult(
          update=weights,
          num_steps=tf.zeros([], tf.int32),
          stats=collections.OrderedDict(
            (name, tf.zeros([])) for name in ('local_steps', *self._rule_statistics)
          ),
          num_examples=tf.zeros([]),
          learning_rate=tf.zeros([]),
          passes=collections.OrderedDict(
            (name, algorithm_base.Evaluation(tf.zeros([]), weights if p.gradient else None))
            for name, p in alg.full_passes().items()
          ),
          broadcast=tf.nest.map_structure(zeros, broadcast),
          client_state=weights if alg.stateful_clients else (),
          initial=weights,
          epoch_means=tf.nest.map_structure(zeros, self._epoch_means_specs()),
        )
      )
      return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), out)

  def _epoch_means_specs(self):
    """One client's `LocalResult.epoch_means` as specs: (n, means [count, ...]), or ()."""
    means = self.algorithm.epoch_means()
    if means is None:
      return ()
    return tf.TensorSpec([], tf.int32), tuple(
      tf.TensorSpec([means.count, *s.shape], s.dtype) for s in self.specs
    )

  def _client_epochs(self, seeds_: tf.Tensor) -> tf.Tensor:
    """E_i per client, [K] int32 (`Algorithm.client_epochs`, or E for every client)."""
    alg = self.algorithm
    if alg.client_epochs(seeds_[0]) is None:
      return tf.fill(tf.shape(seeds_)[:1], tf.constant(alg.client.epochs, tf.int32))
    return tf.map_fn(alg.client_epochs, seeds_, fn_output_signature=tf.int32)

  def _train_clients(self, x_t, broadcast, client_states, features, splits, seeds_, lr, rows):
    """Every client's full passes and local training from x_t, side by side.

    Returns ((u_i stacked, {pass name: (F_i [K], grad F_i stacked or ())}), K_i). With
    `chunk_size` C the clients train C at a time, in chunks of similar K_i (by K_i
    descending, ties in client order), so that a chunk's lock-step length is close to each of
    its clients' own; the results come back in client order either way.
    """
    starts, sizes = splits[:-1], splits[1:] - splits[:-1]
    if self.fused is not None:
      steps_per_epoch = local_loop.steps_per_epoch(sizes, self.algorithm.client.batch_size)
      steps = steps_per_epoch * self._client_epochs(seeds_)
      passes = self._full_passes(x_t, broadcast, features, starts, sizes)
      updates, statistics = self.fused(
        x_t.trainable,
        broadcast,
        client_states,
        features,
        fused_loop.Clients(starts, sizes, steps, steps_per_epoch, rows, seeds_),
        lr,
      )
      return (updates, passes, statistics, ()), steps
    steps, schedule = self.schedule(splits, seeds_)
    num_clients = tf.shape(steps)[0]
    if self.chunk_size is None:
      outputs = self._train_chunk(
        x_t, broadcast, client_states, features, starts, sizes, steps, schedule, seeds_, lr
      )
      return outputs, steps
    order = tf.argsort(steps, direction='DESCENDING', stable=True)
    chunk = self.chunk_size
    scalar = tf.TensorSpec([], tf.float32)
    per_client = (
      self.specs,
      collections.OrderedDict(
        (name, (scalar, self.specs if p.gradient else ()))
        for name, p in self.algorithm.full_passes().items()
      ),
      collections.OrderedDict((name, scalar) for name in self._rule_statistics),
      self._epoch_means_specs(),
    )
    buffers = tf.nest.map_structure(
      lambda s: tf.zeros(tf.concat([[num_clients], s.shape], 0), s.dtype), per_client
    )

    def body(c, buffers):
      members = order[c * chunk : tf.minimum((c + 1) * chunk, num_clients)]
      pick = lambda t: tf.gather(t, members)
      member_steps = pick(steps)
      outputs = self._train_chunk(
        x_t,
        broadcast,
        tuple(pick(t) for t in client_states),
        features,
        pick(starts),
        pick(sizes),
        member_steps,
        tuple(pick(t)[:, : tf.reduce_max(member_steps)] for t in schedule),
        pick(seeds_),
        lr,
      )
      return c + 1, tf.nest.map_structure(
        lambda b, u: tf.tensor_scatter_nd_update(b, members[:, None], u), buffers, outputs
      )

    num_chunks = (num_clients + chunk - 1) // chunk
    _, outputs = tf.while_loop(lambda c, _: c < num_chunks, body, (tf.constant(0), buffers))
    return outputs, steps

  def _stack(self, weights, num_clients):
    return tuple(tf.repeat(tf.convert_to_tensor(w)[None], num_clients, axis=0) for w in weights)

  def _full_pass(self, point, full_pass, features, starts, sizes):
    """Each client's `FullPass` at the shared weights `point`: (F_i [K], grad F_i stacked or
    ()), chunk by chunk of `local_loop.FULL_PASS_CHUNK` rows per client in inference mode, as
    `local_loop.full_loss_and_gradient` computes F_k alone: the sum over chunks of chunk size x
    the chunk's loss, over min(n_i, max_examples) examples."""
    num_clients = tf.shape(sizes)[0]
    n = sizes if full_pass.max_examples is None else tf.minimum(sizes, full_pass.max_examples)
    chunk = local_loop.FULL_PASS_CHUNK
    no_seeds = tf.zeros([num_clients, 2], tf.int64)

    def body(c, loss_sum, grad_sum):
      params = self._stack(point, num_clients)
      position = c * chunk + tf.range(chunk)
      valid = position[None, :] < n[:, None]  # [K, chunk]
      count = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
      rows = tf.where(valid, starts[:, None] + position[None, :], 0)
      batch = collections.OrderedDict((k, tf.gather(v, rows)) for k, v in features.items())
      with tf.GradientTape() as tape:
        tape.watch(params)
        predictions = self.functional.apply(params, batch['x'], False, no_seeds)
        losses = self.client_losses(batch['y'], predictions, valid, count)
        weighted = losses * tf.cast(count, losses.dtype)
        total = tf.reduce_sum(weighted)
      if full_pass.gradient:
        grads = tape.gradient(total, params)
        grad_sum = tuple(s + g for s, g in zip(grad_sum, grads))
      return c + 1, loss_sum + weighted, grad_sum

    zeros = self._stack(tuple(tf.zeros_like(p) for p in point), num_clients)
    zeros = zeros if full_pass.gradient else ()
    num_chunks = (tf.reduce_max(n) + chunk - 1) // chunk
    _, loss_sum, grad_sum = tf.while_loop(
      lambda c, *_: c < num_chunks,
      body,
      (tf.constant(0), tf.zeros([num_clients]), zeros),
    )
    count = tf.cast(n, tf.float32)
    per_client = lambda t: tf.reshape(count, [-1] + [1] * (t.shape.rank - 1))
    return tf.math.divide_no_nan(loss_sum, count), tuple(
      tf.math.divide_no_nan(g, per_client(g)) for g in grad_sum
    )

  def _full_passes(self, x_t, broadcast, features, starts, sizes):
    """{pass name: (F_i [K], grad F_i stacked or ())} of the given clients."""
    passes = collections.OrderedDict()
    for name, full_pass in self.algorithm.full_passes().items():
      point = tuple(broadcast) if full_pass.at_broadcast else x_t.trainable
      passes[name] = self._full_pass(point, full_pass, features, starts, sizes)
    return passes

  def _train_chunk(
    self, x_t, broadcast, client_states, features, starts, sizes, steps, schedule, seeds_, lr
  ):
    """The given clients' full passes, then their lock-step local training from x_t; returns
    (their u_i stacked, {pass name: (F_i, grad F_i or ())})."""
    alg = self.algorithm
    num_clients = tf.shape(steps)[0]
    passes = self._full_passes(x_t, broadcast, features, starts, sizes)
    x_shared = tuple(x_t.trainable)
    params = self._stack(x_shared, num_clients)
    stepper = self._stepper
    opt_state = stepper.init(params, self.specs, lr, num_clients)
    transforms = alg.transforms_gradient()
    collector = _EpochMeansCollector(
      alg.epoch_means(), broadcast, sizes, steps, alg.client.batch_size, self.specs
    )

    def gradients(params, batch, valid, count, step_seeds):
      with tf.GradientTape() as tape:
        tape.watch(params)
        predictions = self.functional.apply(params, batch['x'], True, step_seeds)
        losses = self.client_losses(batch['y'], predictions, valid, count)
        total = tf.reduce_sum(losses)
      grads = tuple(tape.gradient(total, params))
      if transforms:  # elementwise: x_t and the broadcast broadcast over the stacked clients
        grads = tuple(alg.transform_gradient(grads, params, x_shared, broadcast, client_states))
      return predictions, losses, grads

    def body(s, params, opt_state, sums):
      active = s < steps
      idx, valid = schedule[0][:, s], schedule[1][:, s]
      count = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
      batch = collections.OrderedDict((k, tf.gather(v, idx)) for k, v in features.items())
      step_seeds = seeds.local_step_seed(seeds_, s)
      predictions, losses, grads = gradients(params, batch, valid, count, step_seeds)
      previous = None
      if stepper.needs_previous_gradient:  # at x_{k-1}, same minibatch and dropout masks
        previous = gradients(stepper.previous_point(opt_state), batch, valid, count, step_seeds)[2]
      opt_state, params = stepper.step(opt_state, params, grads, losses, previous, active)
      self.update_metrics(batch['y'], predictions, losses, valid, count, active)
      params = tuple(params)
      return s + 1, params, opt_state, collector.add(sums, s, params)

    _, params, opt_state, sums = tf.while_loop(
      lambda s, *_: s < tf.reduce_max(steps),
      body,
      (tf.constant(0), params, opt_state, collector.init()),
    )
    updates = tuple(w[None] - p for w, p in zip(x_shared, params))
    statistics = collections.OrderedDict(stepper.statistics(opt_state))
    return updates, passes, statistics, collector.result(sums)

  def permutations(self, splits, seeds_):
    """K_i, ceil(n_i / B) and every client's epoch permutations: (steps [K], steps per epoch
    [K], perms [K, E, n_max] of range(n_i), zero-padded), E the most epochs a client runs."""
    alg = self.algorithm
    max_epochs = alg.client.max_epochs or alg.client.epochs
    sizes = splits[1:] - splits[:-1]
    n_max = tf.reduce_max(sizes)
    steps_per_epoch = local_loop.steps_per_epoch(sizes, alg.client.batch_size)
    steps = steps_per_epoch * self._client_epochs(seeds_)

    def permutations(args):
      n, seed = args
      perms = seeds.epoch_permutations(n, max_epochs, seed)
      return tf.pad(perms, [[0, 0], [0, n_max - n]])

    perms = tf.map_fn(permutations, (sizes, seeds_), fn_output_signature=tf.int32)
    return steps, steps_per_epoch, perms

  def schedule(self, splits, seeds_):
    """K_i and every client's minibatches: (steps [K], (row of the concatenated examples [K, S,
    B], valid [K, S, B])), S = max K_i. Step s of client i visits epoch e = s // ceil(n_i / B) of its
    permutation, positions b B .. min(b B + B, n_i) - 1 for b = s mod ceil(n_i / B)."""
    batch_size = self.algorithm.client.batch_size
    steps, steps_per_epoch, perms = self.permutations(splits, seeds_)
    max_epochs, n_max = tf.shape(perms)[1], tf.shape(perms)[2]
    sizes = splits[1:] - splits[:-1]
    s = tf.range(tf.reduce_max(steps))[None, :]  # [1, S]
    per_epoch = tf.maximum(steps_per_epoch, 1)[:, None]
    epoch = tf.minimum(s // per_epoch, max_epochs - 1)  # [K, S]
    position = (s % per_epoch)[..., None] * batch_size + tf.range(batch_size)  # [K, S, B]
    valid = (position < sizes[:, None, None]) & (s < steps[:, None])[..., None]
    position = tf.minimum(position, tf.maximum(n_max - 1, 0))
    clients = tf.broadcast_to(tf.range(tf.shape(sizes)[0])[:, None, None], tf.shape(position))
    epochs = tf.broadcast_to(epoch[..., None], tf.shape(position))
    idx = tf.gather_nd(perms, tf.stack([clients, epochs, position], axis=-1))
    return steps, (tf.where(valid, idx + splits[:-1, None, None], 0), valid)

  def client_losses(self, y, predictions, valid, count):
    """Each client's minibatch loss [K], reduced as the task's loss reduces a minibatch."""
    per_element = self._loss.call(y, predictions)  # [K, B, ...]
    mask = tf.cast(valid, per_element.dtype)
    mask = tf.reshape(
      mask, tf.concat([tf.shape(mask), tf.ones([per_element.shape.rank - 2], tf.int32)], 0)
    )
    summed = tf.reduce_sum(tf.reshape(per_element * mask, [tf.shape(per_element)[0], -1]), axis=1)
    if self._loss.reduction == 'sum':
      return summed
    elements = tf.cast(count, per_element.dtype) * tf.cast(
      tf.reduce_prod(tf.shape(per_element)[2:]), per_element.dtype
    )
    return tf.math.divide_no_nan(summed, elements)

  def update_metrics(self, y, predictions, losses, valid, count, active):
    """The workspace model's training metrics, as the sequential minibatch updates leave them."""
    for metric in self._metrics:
      if metric.name == 'loss':  # TFF's size-weighted mean of minibatch losses
        tf.keras.metrics.Mean.update_state(
          metric, losses, sample_weight=tf.cast(count, losses.dtype)
        )
      elif metric.name == 'num_examples':
        tf.keras.metrics.Sum.update_state(metric, tf.reduce_sum(count))
      elif metric.name == 'num_batches':
        tf.keras.metrics.Sum.update_state(metric, tf.reduce_sum(tf.cast(active, tf.int32)))
      elif isinstance(metric, tf.keras.metrics.MeanMetricWrapper):  # per-example means
        metric.update_state(y, predictions, sample_weight=tf.cast(valid, predictions.dtype))
      else:
        metric.update_state(tf.boolean_mask(y, valid), tf.boolean_mask(predictions, valid))


class _PerClient(NamedTuple):
  """The round's per-client results, stacked on a leading client axis."""

  updates: tuple
  steps: tf.Tensor
  num_examples: tf.Tensor
  rule_stats: collections.OrderedDict
  passes: collections.OrderedDict
  client_states: tuple
  collected: Any


class _EpochMeansCollector:
  """`Algorithm.epoch_means` for clients in lock-step: sums [K, count, ...] of the iterates
  after each step of a collected epoch, slot j for epoch first_epoch + j of each client (its
  epoch at global step s is s // K_e, K_e = ceil(n_i / B)), as `base.collecting_epoch_means`
  sums them one client at a time; divided by K_e at the end. Without epoch means: nothing."""

  def __init__(self, means, broadcast, sizes, steps, batch_size, specs):
    self.means, self.specs = means, specs
    if means is None:
      return
    self.steps = steps
    self.per_epoch = local_loop.steps_per_epoch(sizes, batch_size)  # K_e per client, [K]
    epochs = steps // tf.maximum(self.per_epoch, 1)  # E_i
    self.collecting = tf.logical_and(means.active(broadcast), self.per_epoch > 0)  # [K]
    self.collected = tf.where(
      self.collecting, tf.clip_by_value(epochs - means.first_epoch, 0, means.count), 0
    )

  def init(self):
    if self.means is None:
      return ()
    num_clients = tf.shape(self.steps)[0]
    return tuple(
      tf.zeros(tf.concat([[num_clients, self.means.count], s.shape], 0), s.dtype)
      for s in self.specs
    )

  def add(self, sums, s, params):
    if self.means is None:
      return ()
    slot = s // tf.maximum(self.per_epoch, 1) - self.means.first_epoch
    take = self.collecting & (s < self.steps) & (slot >= 0) & (slot < self.means.count)
    index = tf.stack(
      [tf.range(tf.shape(slot)[0]), tf.clip_by_value(slot, 0, self.means.count - 1)], 1
    )
    return tuple(
      tf.tensor_scatter_nd_add(
        m, index, tf.where(tf.reshape(take, [-1] + [1] * (p.shape.rank - 1)), p, tf.zeros_like(p))
      )
      for m, p in zip(sums, params)
    )

  def result(self, sums):
    """(n [K], means [K, count, ...]) or ()."""
    if self.means is None:
      return ()
    per_epoch = tf.cast(self.per_epoch, self.specs[0].dtype)
    return self.collected, tuple(
      tf.math.divide_no_nan(m, tf.reshape(per_epoch, [-1] + [1] * (m.shape.rank - 1))) for m in sums
    )
