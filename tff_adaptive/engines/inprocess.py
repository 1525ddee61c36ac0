"""Engine "inprocess": an `Algorithm`'s round as one compiled TF function, no TFF runtime.

The same algorithm functions as engine "tff" (client update, aggregation fold, server
optimizer, extra server state), run in this process: one `tf.function` per round over the
round's clients in memory, on the GPU when TF sees one (`device`), with optional XLA
compilation of every local step (`jit_compile`). Nothing is serialized or sent to a worker:
the server state stays a nest of tensors on the device between rounds.

Round t inside the function (clients i = 0..k-1 in the order given):

  eta_l = schedule(t); b = client_broadcast(server extra, t)
  for i: out_i = client_update(model, x_t, D_i, seed_i, eta_l, b, state_i)      (sequential)
         acc = aggregation.accumulate(acc, out_i.update, out_i.weight); sum w_i extras_i; stats
  g_t, aggregator state = aggregation.report(acc, aggregator state) (e.g. DP noise and clip);
  x_{t+1} = server_update(x_t, g_t) (ServerOpt unless g_t is non-finite)
  server extra <- server_extra_update(extra, sum w_i extras_i / sum w_i, k)

The round's clients arrive as one tensor per feature (all clients' examples concatenated)
plus row offsets, so the function is traced once and serves every round whatever the clients'
sizes. Training metrics accumulate in the workspace model's metric variables over all clients
and are finalized after the round, as TFF's `sum_then_finalize` does.

GPU: `pip install tensorflow[and-cuda]==2.14.1` (CUDA 11.8 / cuDNN 8.6 wheels) and
`--engine=inprocess --device=GPU:0`; TFF's own worker is CPU-only.
"""

import collections
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import _quiet_tensorflow
from tff_adaptive.algorithms import base as algorithm_base
from tff_adaptive.core import local_loop
from tff_adaptive.core import tree
from tff_adaptive.engines import base


def _leading_none(spec: tf.TensorSpec) -> tf.TensorSpec:
  return tf.TensorSpec([None] + spec.shape.as_list(), spec.dtype)


def _as_spec(value: Any) -> tf.TensorSpec:
  value = tf.convert_to_tensor(value)
  return tf.TensorSpec(value.shape, value.dtype)


def check_device(device: str | None) -> str | None:
  """`device` if TF has such a device (e.g. 'CPU:0', '/GPU:0'); None passes.

  Raises:
    ValueError: naming the device and the devices TF sees (TF would otherwise fall back to
      the CPU silently).
  """
  if device is None:
    return None
  try:
    spec = tf.DeviceSpec.from_string(device if device.startswith('/') else f'/{device}')
  except ValueError as e:
    raise ValueError(f'invalid device {device!r}: {e}') from None
  visible = tf.config.list_logical_devices()
  if not any(
    d.device_type == (spec.device_type or '').upper()
    and (spec.device_index is None or d.name.endswith(f':{spec.device_index}'))
    for d in visible
  ):
    names = ', '.join(d.name.replace('/device:', '') for d in visible)
    hint = ' (GPU: pip install tensorflow[and-cuda]==2.14.1)' if 'GPU' in device.upper() else ''
    raise ValueError(f'device {device!r} is not available; TensorFlow sees: {names}{hint}')
  return device


class _Finalizer:
  """Applies a VariableModel's metric finalizers to summed unfinalized metrics.

  TFF calls the finalizers (which build Keras metrics, i.e. variables) in graph mode; calling
  them eagerly more than once fails, so they are traced once into a graph of their own with a
  placeholder per unfinalized value, and run in a session every round.
  """

  def __init__(self, finalizers, unfinalized_example):
    self._graph = tf.Graph()
    with self._graph.as_default():
      self._inputs = tf.nest.map_structure(
        lambda t: tf.compat.v1.placeholder(t.dtype, t.shape), unfinalized_example
      )
      self._outputs = collections.OrderedDict(
        (name, finalizers[name](value)) for name, value in self._inputs.items()
      )
      init = [
        tf.compat.v1.global_variables_initializer(),
        tf.compat.v1.local_variables_initializer(),
      ]
    self._session = tf.compat.v1.Session(graph=self._graph)
    self._session.run(init)

  def __call__(self, unfinalized):
    feed = dict(
      zip(tf.nest.flatten(self._inputs), [np.asarray(v) for v in tf.nest.flatten(unfinalized)])
    )
    return self._session.run(self._outputs, feed_dict=feed)


class InProcessEngine(base.Engine):
  """Runs an `Algorithm`'s rounds in one compiled TF function each (see module docstring).

  The round's parts, for engines built from this one (`vectorised.VectorisedEngine` overrides
  `_round`; `grid_cells.GridCellsEngine` runs K vectorised engines' parts in one function), not
  for users: `specs` (the trainable weights' specs), `round_inputs(clients)` (the compiled
  function's arguments after the state), `state_spec(state)`, `reset_metrics()`,
  `fold_clients(state, spec, num_clients, client_output)` (the aggregation fold and statistics
  over `client_output(i)`), `server_step(state, spec, num_clients, carry, new_states)` (g_t,
  ServerOpt, the extra server state) and `round_result(clients, *outputs)` (the loop's
  `RoundResult` of the function's outputs).
  """

  def __init__(
    self,
    algorithm: algorithm_base.Algorithm,
    device: str | None = None,
    jit_compile: bool = False,
  ):
    """Builds the workspace model on `device`.

    Args:
      algorithm: an `Algorithm`.
      device: a TF device name ('CPU:0', 'GPU:0'); None lets TF place ops (a GPU if visible).
      jit_compile: compile every local step with XLA (`core.local_loop.xla_steps`).
    """
    super().__init__(algorithm)
    if algorithm.aggregation.tff_only:
      raise ValueError(
        f'{algorithm.aggregation.name} runs on engine tff only: {algorithm.aggregation.tff_only}'
      )
    self.device = check_device(device)
    self.jit_compile = jit_compile
    with tf.device(self.device):
      # Created here: variables created while the round function traces would make
      # tf.function trace it twice.
      self._model = algorithm.model_fn()
    self.specs = local_loop.trainable_specs(self._model)
    self._finalizer = None
    self._round_fn = None

  def initialize(self, initial_weights: tff.learning.models.ModelWeights) -> Any:
    with tf.device(self.device):
      weights = tff.learning.models.ModelWeights(
        tuple(tf.constant(w) for w in initial_weights.trainable),
        tuple(tf.constant(w) for w in initial_weights.non_trainable),
      )
      extra = self.algorithm.server_extra_init(self.specs)
      return collections.OrderedDict(
        model=weights,
        optimizer=self.algorithm.server_optimizer.initialize(self.specs),
        client_round=tf.constant(0, tf.int32),
        extra=self.algorithm.server_extra_for_model(extra, weights),
        aggregator=self.algorithm.aggregation.initialize(self.specs),
      )

  def model_weights(self, state: Any) -> tff.learning.models.ModelWeights:
    """The model the algorithm releases from `state` (`Algorithm.released_weights`)."""
    weights = self.algorithm.released_weights(state['model'], state['optimizer'])
    return tff.learning.models.ModelWeights(
      [np.asarray(w) for w in weights.trainable], [np.asarray(w) for w in weights.non_trainable]
    )

  # -- The round. ----------------------------------------------------------------------------

  def _client_update_fn(self, args) -> tf.types.experimental.ConcreteFunction:
    """The client update on the workspace model, traced once for any client of the round.

    The round's loop calls this one trace for each client, and the loop's carried structures
    (extras, statistics, client state) come from its outputs: the client update (the model's
    forward and backward pass, every local step) is traced once per round function, not once
    for the structures and again for the loop.
    """
    x_t, features, _, _, _, _, _, broadcast = args
    model, alg = self._model, self.algorithm

    def client_update(x_t, features, seed, lr, broadcast, client_state):
      return alg.client_update(model, x_t, features, seed, lr, broadcast, client_state)

    client_state = ()
    if alg.stateful_clients:
      client_state = tuple(tf.TensorSpec(s.shape, s.dtype) for s in self.specs)
    return tf.function(client_update, autograph=False).get_concrete_function(
      tf.nest.map_structure(_as_spec, x_t),
      collections.OrderedDict(
        (k, tf.TensorSpec([None] + v.shape[1:].as_list(), v.dtype)) for k, v in features.items()
      ),
      tf.TensorSpec([2], tf.int64),
      tf.TensorSpec([], tf.float32),
      tf.nest.map_structure(_as_spec, broadcast),
      client_state,
    )

  def _client(
    self, client_update, i, x_t, features, splits, seeds_, states, present, lr, broadcast
  ):
    del present  # in `states` already (`_entry_states`)
    start, end = splits[i], splits[i + 1]
    data = collections.OrderedDict((k, v[start:end]) for k, v in features.items())
    client_state = tuple(s[i] for s in states)
    return client_update(x_t, data, seeds_[i], lr, broadcast, client_state)

  def _entry_states(self, states, present, broadcast):
    """Each client's state on entry, stacked: its stored one, or `initial_client_state` for a
    client sampled for the first time; () for algorithms without client states."""
    alg = self.algorithm
    if not alg.stateful_clients:
      return ()
    fresh = tuple(alg.initial_client_state(broadcast))
    return tuple(
      tf.where(tf.reshape(present, [-1] + [1] * new.shape.rank), stored, new[None])
      for stored, new in zip(states, fresh)
    )

  def _round(self, state, features, splits, seeds_, states, present):
    alg = self.algorithm
    x_t = state['model']
    lr = tf.cast(alg.client_lr_schedule(state['client_round']), tf.float32)
    broadcast = alg.client_broadcast(state['extra'], state['client_round'])
    self.reset_metrics()
    num_clients = tf.shape(seeds_)[0]
    states = self._entry_states(states, present, broadcast)
    args = (x_t, features, splits, seeds_, states, present, lr, broadcast)
    client_update = self._client_update_fn(args)
    spec = tf.nest.map_structure(_as_spec, client_update.structured_outputs)
    carry, new_states = self.fold_clients(
      state, spec, num_clients, lambda i: self._client(client_update, i, *args)
    )
    return self.server_step(state, spec, num_clients, carry, new_states)

  def reset_metrics(self) -> None:
    for v in self._model.local_variables:
      v.assign(tf.zeros_like(v))

  def fold_clients(self, state, spec, num_clients, client_output, slots=None):
    """Folds `client_output(i)` (a `ClientOutput`) over i = 0..num_clients-1 in order: the
    aggregation's accumulator, the w-weighted sum of extras, sum w_i, and the statistics' sum,
    min and max; and the clients' new states, stacked (`slots` of them, default num_clients)."""
    alg = self.algorithm

    def fold(carry, out):
      acc, extras_sum, weight_sum, stat_sum, stat_min, stat_max = carry
      w = tf.cast(out.weight, tf.float32)
      return (
        alg.aggregation.accumulate(acc, out.update, out.weight),
        tree.add_scaled(extras_sum, out.extras, w),
        weight_sum + w,
        tree.add(stat_sum, out.stats),
        tf.nest.map_structure(tf.minimum, stat_min, out.stats),
        tf.nest.map_structure(tf.maximum, stat_max, out.stats),
      )

    zeros = lambda specs: tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
    fill = lambda specs, v: tf.nest.map_structure(lambda s: tf.fill(s.shape, v), specs)
    carry = (
      alg.aggregation.zero(spec.update, state['aggregator']),
      zeros(spec.extras),
      tf.constant(0.0),
      zeros(spec.stats),
      fill(spec.stats, float('inf')),
      fill(spec.stats, float('-inf')),
    )
    new_states = [
      tf.TensorArray(s.dtype, size=num_clients if slots is None else slots, element_shape=s.shape)
      for s in tf.nest.flatten(spec.state)
    ]

    def body(i, carry, new_states):
      out = client_output(i)
      new_states = [ta.write(i, s) for ta, s in zip(new_states, tf.nest.flatten(out.state))]
      return i + 1, fold(carry, out), new_states

    _, carry, new_states = tf.while_loop(
      lambda i, *_: i < num_clients, body, (tf.constant(0), carry, new_states)
    )
    return carry, [ta.stack() for ta in new_states]

  def server_step(self, state, spec, num_clients, carry, new_states):
    """g_t from the fold, x_{t+1} = ServerOpt(x_t, g_t), the extra server state, and the
    round's outputs (new state, unfinalized training metrics, client statistics, ...)."""
    alg = self.algorithm
    x_t = state['model']
    acc, extras_sum, weight_sum, stat_sum, stat_min, stat_max = carry
    update, aggregator_state, aggregator_metrics = alg.aggregation.report(acc, state['aggregator'])
    opt_state, trainable, non_finite = alg.server_update(state['optimizer'], x_t.trainable, update)
    new_state = collections.OrderedDict(
      model=tff.learning.models.ModelWeights(tuple(trainable), tuple(x_t.non_trainable)),
      optimizer=opt_state,
      client_round=state['client_round'] + 1,
      extra=alg.next_server_extra(
        state['extra'], tree.divide_no_nan(extras_sum, weight_sum), num_clients, non_finite
      ),
      aggregator=aggregator_state,
    )
    stats = collections.OrderedDict()
    for name in spec.stats:
      stats[f'{name}_mean'] = stat_sum[name] / tf.cast(num_clients, tf.float32)
      stats[f'{name}_min'] = stat_min[name]
      stats[f'{name}_max'] = stat_max[name]
    metrics = self._model.report_local_unfinalized_metrics()
    return new_state, metrics, stats, non_finite, aggregator_metrics, new_states

  def state_spec(self, state) -> Any:
    """The server state's specs; the aggregator's as TF traces its initialization, so that a
    shape that changes from round to round (DP-FTRL's tree buffer grows a level at every power
    of two) is None there, as in TFF's type of the same state."""
    spec = tf.nest.map_structure(_as_spec, state)
    traced = tf.function(
      lambda: self.algorithm.aggregation.initialize(self.specs), autograph=False
    ).get_concrete_function()
    spec['aggregator'] = tf.nest.map_structure(_as_spec, traced.structured_outputs)
    return spec

  def round_signature(self, state, features, splits, seeds_, states, present) -> tuple:
    """The round function's input signature, for the state and `round_inputs(clients)`."""
    return (
      self.state_spec(state),
      collections.OrderedDict(
        (k, tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype))) for k, v in features.items()
      ),
      tf.TensorSpec([None], tf.int32),
      tf.TensorSpec([None, 2], tf.int64),
      tuple(_leading_none(s) for s in self.specs) if self.algorithm.stateful_clients else (),
      tf.TensorSpec([None], tf.bool),
    )

  def _build_round_fn(self, state, *inputs):
    signature = self.round_signature(state, *inputs)

    def round_fn(*args):
      if self.jit_compile:
        with local_loop.xla_steps():
          return self._round(*args)
      return self._round(*args)

    return tf.function(round_fn, input_signature=signature, autograph=False)

  def next(self, state, clients: Sequence[base.RoundClient]) -> base.RoundResult:
    if not clients:
      raise ValueError('a round needs at least one client')
    inputs = self.round_inputs(clients)
    with tf.device(self.device):
      if self._round_fn is None:
        self._round_fn = self._build_round_fn(state, *inputs)
        # The first round traces and compiles: XLA's one-off CPU notice is kept off stderr.
        with _quiet_tensorflow.filtered_compile_noise():
          outputs = self._round_fn(state, *inputs)
      else:
        outputs = self._round_fn(state, *inputs)
    return self.round_result(clients, *outputs)

  def round_inputs(self, clients: Sequence[base.RoundClient]) -> tuple:
    """The round function's arguments after the state: the clients' examples concatenated, row
    offsets, seeds, stored states (stateful algorithms) and whether each had one."""
    names = list(clients[0].features)
    sizes = [len(np.asarray(c.features[names[0]])) for c in clients]
    splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    rows = self.examples_size(int(splits[-1]))
    features = collections.OrderedDict()
    for k in names:
      parts = [np.asarray(c.features[k]) for c in clients]
      features[k] = np.zeros((rows, *parts[0].shape[1:]), parts[0].dtype)
      np.concatenate(parts, out=features[k][: splits[-1]])
    seeds_ = np.stack([np.asarray(c.seed, np.int64) for c in clients])
    present = np.array([c.state is not None for c in clients], np.bool_)
    states = ()
    if self.algorithm.stateful_clients:
      states = tuple(
        np.stack(
          [
            np.asarray(c.state[j], s.dtype.as_numpy_dtype)
            if c.state is not None
            else np.zeros(s.shape, s.dtype.as_numpy_dtype)
            for c in clients
          ]
        )
        for j, s in enumerate(self.specs)
      )
    return features, splits, seeds_, states, present

  def examples_size(self, total: int) -> int:
    """Rows of the round function's concatenated examples for `total` examples (these; an
    engine may pad them)."""
    return total

  def round_result(
    self, clients, new_state, metrics, stats, non_finite, aggregator_metrics, new_states
  ) -> base.RoundResult:
    if self._finalizer is None:
      self._finalizer = _Finalizer(self._model.metric_finalizers(), metrics)
    train = self._finalizer(metrics)
    row = base.flat_metrics(train, stats, non_finite, aggregator_metrics)
    client_states = None
    if self.algorithm.stateful_clients:
      leaves = [np.asarray(a) for a in new_states]
      client_states = [[leaf[i] for leaf in leaves] for i in range(len(clients))]
    return base.RoundResult(new_state, row, client_states)
