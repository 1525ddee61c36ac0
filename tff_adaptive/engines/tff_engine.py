"""Engine "tff": an `Algorithm` as a `tff.learning.templates.LearningProcess` on TFF's runtime.

Algorithms that keep no state besides the model and the server optimizer's (FedOpt; the
algorithms that change only the client step or the aggregation) are composed from TFF's four
template parts with `tff.learning.templates.compose_learning_process`:

* distributor: `build_broadcast_process` (x_t to every client);
* client work: a `ClientWorkProcess` (`build_client_work`) whose state is the round number t
  (for eta_l(t) and the round-dependent broadcast) and whose clients run
  `Algorithm.client_update`;
* aggregator: the algorithm's `tff.aggregators` factory (`MeanFactory` for FedOpt);
* finalizer: `build_apply_optimizer_finalizer(server_optimizer)` (rejects non-finite updates).

Algorithms with extra server state or per-client state (SCAFFOLD; AdaFedAdam, whose server
keeps x_0) have their `next` written by hand from the same algorithm functions, the same
aggregation factory and the same optimizer: SCAFFOLD's client work would read state that the
finalizer updates and a LearningProcess returns nothing per client; AdaFedAdam's x_0 is set by
`set_model_weights`. An extra state set from x_0 alone (AdaFedAdam) still has a
`ClientWorkProcess` for users' compositions, which keeps it in its own state, set in the first
round (`build_client_work`); composed, it gives the hand-written process's model. Per-client
states travel in each client's data (the stored c_i, or a flag that the client has none) and
come back gathered at the server in `metrics['client_states']` ([clients_per_round, ...] per
leaf, in the clients' order).

Each client's dataset has ONE element holding all of its examples (leading dimension n) and
its seed (`core.seeds.SEED_KEY`); the client batches by gathering inside a `tf.while_loop`
(`core.local_loop`), which avoids TFF's per-batch dataset iteration.
"""

import collections
from collections.abc import Sequence
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base as algorithm_base
from tff_adaptive.core import seeds
from tff_adaptive.core import validation
from tff_adaptive.engines import base

STATE_KEY = 'client_state'
STATE_PRESENT_KEY = 'client_state_present'
POSITION_KEY = 'position'
_RESERVED = (seeds.SEED_KEY, STATE_KEY, STATE_PRESENT_KEY, POSITION_KEY)


@functools.lru_cache(maxsize=16)
def _model_parts(algorithm: algorithm_base.Algorithm):
  """(weights type, input spec items, metric finalizers), from ONE model built in a graph."""
  with tf.Graph().as_default():
    model = algorithm.model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    element = tuple(collections.OrderedDict(model.input_spec).items())
    finalizers = model.metric_finalizers()
  return weights_type, element, finalizers


def _model_types(algorithm: algorithm_base.Algorithm):
  """(weights type, a new OrderedDict of the model's input spec, metric finalizers).

  Building a model (seconds for ResNet-18) happens once per algorithm, not per use.
  """
  weights_type, element, finalizers = _model_parts(algorithm)
  return weights_type, collections.OrderedDict(element), finalizers


def client_data_type(algorithm: algorithm_base.Algorithm) -> tff.SequenceType:
  """The TFF type of one client's data: a sequence whose single element is everything."""
  weights_type, element, _ = _model_types(algorithm)
  element[seeds.SEED_KEY] = tf.TensorSpec([2], tf.int64)
  if algorithm.stateful_clients:
    specs = tff.types.type_to_tf_tensor_specs(weights_type.trainable)
    element[STATE_KEY] = tuple(specs)
    element[STATE_PRESENT_KEY] = tf.TensorSpec([], tf.bool)
    element[POSITION_KEY] = tf.TensorSpec([], tf.int32)
  return tff.SequenceType(tff.types.tensorflow_to_type(element))


# How a client's data arrives (`build_client_work`, `build_learning_process`).
SINGLE_ELEMENT = 'single_element'  # one element: every example plus SEED_KEY (the trainer's)
BATCHED = 'batched'  # TFF's ordinary client data: a batched dataset of the model's input spec
CLIENT_DATA = (SINGLE_ELEMENT, BATCHED)


def batched_data_type(algorithm: algorithm_base.Algorithm) -> tff.SequenceType:
  """TFF's ordinary client data: a sequence of batches of the model's input spec."""
  _, element, _ = _model_types(algorithm)
  return tff.SequenceType(tff.types.tensorflow_to_type(element))


def batched_client_seed(round_num: tf.Tensor, features) -> tf.Tensor:
  """int64[2] seed of a client whose data carries none: [t, hash of its examples].

  TFF's clients are anonymous, so the seed of a client's shuffling and dropout is derived from
  what it has: the round number t and a FarmHash of its serialized example tensors. The same
  data in the same round gives the same seed (a rerun is exact); two clients with identical
  data share it. `build_client_work(..., client_data=SINGLE_ELEMENT)` takes explicit seeds.
  """
  serialized = tf.strings.reduce_join(
    [tf.io.serialize_tensor(v) for v in tf.nest.flatten(features)]
  )
  digest = tf.strings.to_hash_bucket_fast(serialized, 2**62)
  return tf.stack([tf.cast(round_num, tf.int64), digest])


def _all_examples(data: tf.data.Dataset):
  """The examples of a batched dataset as one batch (leading dimension n, the client's size)."""
  return data.unbatch().batch(2**31 - 1).get_single_element()


def _split(element: collections.OrderedDict):
  features = collections.OrderedDict((k, v) for k, v in element.items() if k not in _RESERVED)
  return features, element[seeds.SEED_KEY]


def _summarize_stats(stats):
  """{name}@CLIENTS -> OrderedDict(name_mean, name_min, name_max)@SERVER (unweighted)."""
  names = tff.structure.name_list(stats.type_signature.member)
  if not names:
    return tff.federated_value(collections.OrderedDict(), tff.SERVER)
  summary = collections.OrderedDict()
  for name in names:
    value = stats[name]
    summary[f'{name}_mean'] = tff.federated_mean(value)
    summary[f'{name}_min'] = tff.federated_min(value)
    summary[f'{name}_max'] = tff.federated_max(value)
  return tff.federated_zip(summary)


def _initial_weights_fn(algorithm):
  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(algorithm.model_fn())

  return initial_model_weights_fn


def _server_update_fn(algorithm, weights_type, aggregate_type):
  """(optimizer state, x_t, aggregate) -> (state, x_{t+1}, update_non_finite).

  `Algorithm.server_update`: TFF's finalizer rule for a model-shaped g_t.
  """
  specs = tff.types.type_to_tf_tensor_specs(weights_type.trainable)

  @tff.tensorflow.computation
  def init_optimizer():
    return algorithm.server_optimizer.initialize(specs)

  @tff.tensorflow.computation(init_optimizer.type_signature.result, weights_type, aggregate_type)
  def server_update(opt_state, weights, update):
    new_state, new_trainable, non_finite = algorithm.server_update(
      opt_state, weights.trainable, update
    )
    new_weights = tff.learning.models.ModelWeights(new_trainable, weights.non_trainable)
    return new_state, new_weights, non_finite

  return init_optimizer, server_update


def _check_algorithm(builder: str, algorithm) -> None:
  validation.check_type(
    builder,
    'algorithm',
    algorithm,
    algorithm_base.Algorithm,
    'an algorithm of tff_adaptive.algorithms (e.g. algorithms.build_fedopt(model_fn, client, '
    'server_optimizer)); TFF learning processes are composed from its parts, not passed in',
  )


def _data_type(algorithm: algorithm_base.Algorithm, client_data: str) -> tff.SequenceType:
  if client_data not in CLIENT_DATA:
    raise ValueError(f'client_data must be one of {", ".join(CLIENT_DATA)}, got {client_data!r}')
  if client_data == BATCHED:
    return batched_data_type(algorithm)
  return client_data_type(algorithm)


def _client_computation(algorithm, received_type, weights_type, client_data, keeps_extra: bool):
  """The one client computation of both routes: (received, x_t, data) -> (out, metrics).

  `received`: OrderedDict(lr, round (the round being run, 1-based), and `broadcast`, or, for a
  client work that keeps an extra state set from x_0 (`keeps_extra`), `extra`: the client then
  sets the broadcast from x_t in the first round, see `build_client_work`). `out`:
  OrderedDict(update, weight, stats, extras, state, position, candidate): the algorithm's client
  value and weight, statistics, extras, new client state and its position in the round, and
  the extra state computed from this x_t (`keeps_extra`; () otherwise). Its data: one element
  with every example, its seed and its stored state (SINGLE_ELEMENT), or TFF's batched data,
  gathered into one batch and seeded by `batched_client_seed` (BATCHED).
  """
  data_type = _data_type(algorithm, client_data)
  batched = client_data == BATCHED

  def broadcast_of(received, initial_weights):
    """(b, E from this round's x_t): the first round's clients set E from x_t = x_0."""
    if not keeps_extra:
      return received['broadcast'], ()
    candidate = algorithm.server_extra_for_model(received['extra'], initial_weights)
    first = tf.equal(received['round'], 1)
    extra = tf.nest.map_structure(
      lambda new, kept: tf.where(first, new, kept), candidate, tuple(received['extra'])
    )
    return algorithm.client_broadcast(extra, received['round'] - 1), candidate

  def stored_state(element, broadcast):
    if not algorithm.stateful_clients:
      return (), tf.constant(0)
    fresh = algorithm.initial_client_state(broadcast)
    state = tf.nest.map_structure(
      lambda stored, new: tf.where(element[STATE_PRESENT_KEY], stored, new),
      tuple(element[STATE_KEY]),
      tuple(fresh),
    )
    return state, element[POSITION_KEY]

  @tff.tensorflow.computation(received_type, weights_type, data_type)
  def client_update(received, initial_weights, data):
    model = algorithm.model_fn()

    @tf.function(autograph=False)
    def train():
      element = None
      if batched:
        features = _all_examples(data)
        seed = batched_client_seed(received['round'], features)
      else:
        element = data.get_single_element()
        features, seed = _split(element)
      broadcast, candidate = broadcast_of(received, initial_weights)
      state, position = stored_state(element, broadcast)
      out = algorithm.client_update(
        model, initial_weights, features, seed, received['lr'], broadcast, state
      )
      return (
        collections.OrderedDict(
          update=tuple(out.update) if isinstance(out.update, list) else out.update,
          weight=out.weight,
          stats=out.stats,
          extras=out.extras,
          state=out.state,
          position=position,
          candidate=candidate,
        ),
        model.report_local_unfinalized_metrics(),
      )

    return train()

  return client_update


def _client_measurements(metrics_aggregation, model_outputs, stats):
  """OrderedDict(train=the model's metrics summed then finalized, client_stats)@SERVER."""
  return tff.federated_zip(
    collections.OrderedDict(
      train=metrics_aggregation(model_outputs), client_stats=_summarize_stats(stats)
    )
  )


def _client_work_state(algorithm, specs, keeps_extra: bool):
  """(initial state, round inputs, next state) computations of `build_client_work`'s state:
  the rounds done t, and with `keeps_extra` the extra state E."""

  @tff.tensorflow.computation
  def initial_state():
    t = tf.constant(0, tf.int32)
    if keeps_extra:
      return collections.OrderedDict(round_num=t, extra=algorithm.server_extra_init(specs))
    return t

  state_type = initial_state.type_signature.result
  rounds_done = lambda state: state['round_num'] if keeps_extra else state

  @tff.tensorflow.computation(state_type)
  def round_inputs(state):
    t = rounds_done(state)
    inputs = collections.OrderedDict(
      lr=tf.cast(algorithm.client_lr_schedule(t), tf.float32),
      round=t + 1,  # the round being run (the state counts the rounds done)
    )
    if keeps_extra:
      inputs['extra'] = state['extra']
    else:
      inputs['broadcast'] = algorithm.client_broadcast((), t)
    return inputs

  def next_state_fn(candidate_type):
    @tff.tensorflow.computation(state_type, candidate_type)
    def next_state(state, candidate):
      t = rounds_done(state)
      if not keeps_extra:
        return t + 1
      first = tf.equal(t, 0)
      extra = tf.nest.map_structure(
        lambda new, kept: tf.where(first, new, kept), tuple(candidate), tuple(state['extra'])
      )
      return collections.OrderedDict(round_num=t + 1, extra=extra)

    return next_state

  return initial_state, round_inputs, next_state_fn


def build_client_work(
  algorithm: algorithm_base.Algorithm, client_data: str = SINGLE_ELEMENT
) -> tff.learning.templates.ClientWorkProcess:
  """The algorithm's clients as a `tff.learning.templates.ClientWorkProcess`.

  Its state is the round number t (int32 at the server); each round every client receives x_t,
  eta_l(t) and `algorithm.client_broadcast((), t)`, runs `algorithm.client_update` on its data
  (one dataset element with all its examples and its seed, see `build_learning_process`) and
  returns a `ClientResult` (update u_i = x_t - x_i in TFF's sign, weight w_i). Measurements:
  `train` (the model's metrics, summed then finalized) and `client_stats` (mean/min/max of the
  client statistics). Compose it with any distributor, `tff.aggregators` factory and finalizer
  (`tff.learning.templates.compose_learning_process`). For algorithms that `fits_templates`
  (no extra server or client state) and those whose extra server state is set from x_0 alone
  (`extra_from_initial_model`), not for stateful clients (SCAFFOLD).

  Extra state set from x_0 (AdaFedAdam: x_0 itself, for the clients' F_k(x_0), Ju et al.
  Algorithm 2): the clients of a ClientWorkProcess receive only x_t, so the state is
  OrderedDict(round_num=t, extra=E). In the first round (t = 0), when x_t = x_0 (the process's
  initial weights, or those given to `set_model_weights` before it), each client uses
  E = `server_extra_for_model(E, x_t)` and sends it back; the server keeps the elementwise min
  of those copies, exactly E since every client received the same x_t (TFF's
  `build_broadcast_process`), and ignores them in later rounds (a model-sized upload per client
  and round). Every later round broadcasts the kept E. The update is the algorithm's client
  value (AdaFedAdam: OrderedDict(update=U_k, certainty=C_k, loss_ratio=I_k), what
  `aggregators.CertaintyWeightedMeanFactory` takes, with weight p_k); compose it with
  `algorithm.aggregation.factory()` and `algorithm.build_finalizer(weights_type)`: the same
  model as our own `build_learning_process(algorithm)` (tests/engines/test_tff_composition.py).

  Client data (`client_data`): SINGLE_ELEMENT (default, the trainer's) is a dataset of one
  element holding all the client's examples and its seed; BATCHED is TFF's ordinary client
  data, any batched `tf.data.Dataset` of the model's input spec (what
  `tff.learning.algorithms.build_weighted_fed_avg` takes). Its examples are gathered into one
  batch and trained on exactly as the single element would be (batched by the algorithm's
  `client.batch_size`, reshuffled every epoch), with the seed `batched_client_seed(t, examples)`:
  the same client data in the same round gives the same model as SINGLE_ELEMENT given that seed.
  """
  _check_algorithm('build_client_work', algorithm)
  data_type = _data_type(algorithm, client_data)
  keeps_extra = not algorithm.fits_templates
  if keeps_extra and not algorithm.extra_from_initial_model:
    raise ValueError(f'{algorithm.name} keeps extra server or client state: no ClientWorkProcess')
  weights_type, _, finalizers = _model_types(algorithm)
  specs = tuple(tff.types.type_to_tf_tensor_specs(weights_type.trainable))
  metrics_aggregation = tff.learning.metrics.sum_then_finalize(finalizers)
  initial_state, round_inputs, next_state_fn = _client_work_state(algorithm, specs, keeps_extra)
  client_update = _client_computation(
    algorithm, round_inputs.type_signature.result, weights_type, client_data, keeps_extra
  )
  out_type = client_update.type_signature.result[0]
  next_state = next_state_fn(out_type['candidate'])

  @tff.tensorflow.computation(out_type)
  def client_result(out):
    return tff.learning.templates.ClientResult(update=out['update'], update_weight=out['weight'])

  @tff.federated_computation
  def client_init():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.federated_computation(
    client_init.type_signature.result,
    tff.FederatedType(weights_type, tff.CLIENTS),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def client_next(state, weights, client_data):
    received = tff.federated_broadcast(tff.federated_map(round_inputs, state))
    out, model_outputs = tff.federated_map(client_update, (received, weights, client_data))
    # Every client received the same x_t: the min of their copies of E is E exactly.
    kept = tff.federated_min(out.candidate) if keeps_extra else tff.federated_value((), tff.SERVER)
    return tff.templates.MeasuredProcessOutput(
      tff.federated_map(next_state, (state, kept)),
      tff.federated_map(client_result, out),
      _client_measurements(metrics_aggregation, model_outputs, out.stats),
    )

  return tff.learning.templates.ClientWorkProcess(client_init, client_next)


def _composed_process(
  algorithm: algorithm_base.Algorithm, client_data: str = SINGLE_ELEMENT
) -> tff.learning.templates.LearningProcess:
  """The template route: distributor, client work, aggregator, finalizer."""
  weights_type, _, _ = _model_types(algorithm)
  client_work = build_client_work(algorithm, client_data)
  update_type = client_work.next.type_signature.result.result.member.update
  process = tff.learning.templates.compose_learning_process(
    _initial_weights_fn(algorithm),
    tff.learning.templates.build_broadcast_process(weights_type),
    client_work,
    algorithm.aggregation.factory().create(update_type, tff.TensorType(np.float32)),
    algorithm.build_finalizer(weights_type),
  )
  if type(algorithm).released_weights is algorithm_base.Algorithm.released_weights:
    return process

  @tff.tensorflow.computation(process.initialize.type_signature.result.member)
  def get_model_weights(state):
    # The model the algorithm releases (`Algorithm.released_weights`, FedExP's average of its
    # last two iterates); the finalizer's state is the server optimizer's.
    return algorithm.released_weights(state.global_model_weights, state.finalizer)

  return tff.learning.templates.LearningProcess(
    process.initialize, process.next, get_model_weights, process.set_model_weights
  )


def _collect(values, positions, clients_per_round: int, value_type):
  """Gathers one value per client at the server, [clients_per_round, ...] in client order."""
  specs = tff.types.type_to_tf_tensor_specs(value_type.member)

  @tff.tensorflow.computation
  def zero():
    return tf.nest.map_structure(
      lambda s: tf.zeros([clients_per_round] + s.shape.as_list(), s.dtype), specs
    )

  acc_type = zero.type_signature.result

  @tff.tensorflow.computation(acc_type, (value_type.member, np.int32))
  def accumulate(acc, value_and_position):
    value, position = value_and_position
    return tf.nest.map_structure(
      lambda a, v: tf.tensor_scatter_nd_update(a, [[position]], v[tf.newaxis]), acc, value
    )

  @tff.tensorflow.computation(acc_type, acc_type)
  def merge(a, b):  # accumulators hold disjoint positions, zeros elsewhere
    return tf.nest.map_structure(tf.add, a, b)

  @tff.tensorflow.computation(acc_type)
  def report(acc):
    return acc

  return tff.federated_aggregate(
    tff.federated_zip((values, positions)), zero(), accumulate, merge, report
  )


def _extra_state(algorithm, weights_type, specs):
  """The hand-written route's client work state, OrderedDict(round_num, extra): (its value for
  x_0, the round's inputs to the clients, its next value, its value for new model weights)."""

  @tff.tensorflow.computation(weights_type)
  def client_work_init(initial_weights):
    # The extra state for the initial model x_0 (AdaFedAdam's x_0), as `set_model_weights` sets.
    return collections.OrderedDict(
      round_num=tf.constant(0, tf.int32),
      extra=algorithm.server_extra_for_model(algorithm.server_extra_init(specs), initial_weights),
    )

  state_type = client_work_init.type_signature.result

  @tff.tensorflow.computation(state_type)
  def round_inputs(client_work):
    return collections.OrderedDict(
      lr=tf.cast(algorithm.client_lr_schedule(client_work['round_num']), tf.float32),
      round=client_work['round_num'] + 1,  # the round being run, for batched data's seed
      broadcast=algorithm.client_broadcast(client_work['extra'], client_work['round_num']),
    )

  def next_fn(extras_type):
    @tff.tensorflow.computation(state_type, extras_type, np.int32, np.int32)
    def server_extra(client_work, extras_mean, num_clients, update_non_finite):
      return collections.OrderedDict(
        round_num=client_work['round_num'] + 1,
        extra=algorithm.next_server_extra(
          client_work['extra'], extras_mean, num_clients, update_non_finite
        ),
      )

    return server_extra

  def for_model(client_work, model_weights):
    return collections.OrderedDict(
      round_num=client_work['round_num'],
      extra=algorithm.server_extra_for_model(client_work['extra'], model_weights),
    )

  return client_work_init, round_inputs, next_fn, for_model


def _model_weights_access(algorithm, state_type, for_model):
  """The LearningProcess's `get_model_weights` and `set_model_weights` (which sets the extra
  state for the new weights, as `client_work_init` does for x_0)."""

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    # The model the algorithm releases: x_{t+1} but for FedExP (`Algorithm.released_weights`);
    # the finalizer's state is the server optimizer's.
    return algorithm.released_weights(state.global_model_weights, state.finalizer)

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights(state, model_weights):
    return tff.learning.templates.LearningAlgorithmState(
      global_model_weights=model_weights,
      distributor=state.distributor,
      client_work=for_model(state.client_work, model_weights),
      aggregator=state.aggregator,
      finalizer=state.finalizer,
    )

  return get_model_weights, set_model_weights


def _handwritten_init(algorithm, client_work_init, aggregation_process, init_optimizer):
  """The hand-written route's `initialize`: x_0, its extra state, the aggregator's and the
  server optimizer's initial states."""

  @tff.federated_computation
  def init_fn():
    initial_weights = tff.federated_eval(_initial_weights_fn(algorithm), tff.SERVER)
    return tff.federated_zip(
      tff.learning.templates.LearningAlgorithmState(
        global_model_weights=initial_weights,
        distributor=tff.federated_value((), tff.SERVER),
        client_work=tff.federated_map(client_work_init, initial_weights),
        aggregator=aggregation_process.initialize(),
        finalizer=tff.federated_eval(init_optimizer, tff.SERVER),
      )
    )

  return init_fn


def _handwritten_next(algorithm, init_fn, data_type, round_inputs, parts, clients_per_round):
  """The hand-written route's `next`: broadcast x_t and the round's inputs, the clients'
  computation, the aggregation, the server update, the extra state; gathered client states."""
  client_update, aggregation_process, server_update, server_extra, metrics_aggregation = parts

  @tff.tensorflow.computation
  def one():
    return tf.constant(1, tf.int32)

  @tff.federated_computation(
    init_fn.type_signature.result, tff.FederatedType(data_type, tff.CLIENTS)
  )
  def next_fn(state, client_data):
    received = tff.federated_broadcast(tff.federated_map(round_inputs, state.client_work))
    weights = tff.federated_broadcast(state.global_model_weights)
    out, model_outputs = tff.federated_map(client_update, (received, weights, client_data))
    aggregated = aggregation_process.next(state.aggregator, out.update, out.weight)
    num_clients = tff.federated_sum(tff.federated_eval(one, tff.CLIENTS))
    extras_mean = (
      tff.federated_mean(out.extras, weight=out.weight)
      if len(out.extras.type_signature.member)
      else tff.federated_value((), tff.SERVER)
    )
    opt_state, new_weights, non_finite = tff.federated_map(
      server_update, (state.finalizer, state.global_model_weights, aggregated.result)
    )
    metrics = collections.OrderedDict(
      client_work=_client_measurements(metrics_aggregation, model_outputs, out.stats),
      aggregator=aggregated.measurements,
      finalizer=tff.federated_zip(collections.OrderedDict(update_non_finite=non_finite)),
    )
    if algorithm.stateful_clients:
      metrics['client_states'] = _collect(
        out.state, out.position, clients_per_round, out.state.type_signature
      )
    new_state = tff.learning.templates.LearningAlgorithmState(
      global_model_weights=new_weights,
      distributor=state.distributor,
      client_work=tff.federated_map(
        server_extra, (state.client_work, extras_mean, num_clients, non_finite)
      ),
      aggregator=aggregated.state,
      finalizer=opt_state,
    )
    return tff.learning.templates.LearningProcessOutput(
      tff.federated_zip(new_state), tff.federated_zip(metrics)
    )

  return next_fn


def _handwritten_process(
  algorithm: algorithm_base.Algorithm,
  clients_per_round: int | None,
  client_data: str = SINGLE_ELEMENT,
) -> tff.learning.templates.LearningProcess:
  """The hand-written route, for algorithms with extra server state or client state: TFF's
  `LearningProcess` has no per-client output (SCAFFOLD's new c_i) and its composition sets no
  extra state from new model weights (AdaFedAdam's x_0 in `set_model_weights`). The parts are
  the template route's: the same client computation (`_client_computation`), the algorithm's
  aggregation factory and server update (the finalizer's rule).
  """
  if algorithm.stateful_clients and not clients_per_round:
    raise ValueError(f'{algorithm.name} keeps client state: clients_per_round is required')
  weights_type, _, finalizers = _model_types(algorithm)
  data_type = _data_type(algorithm, client_data)
  specs = tuple(tff.types.type_to_tf_tensor_specs(weights_type.trainable))
  metrics_aggregation = tff.learning.metrics.sum_then_finalize(finalizers)
  client_work_init, round_inputs, server_extra_fn, for_model = _extra_state(
    algorithm, weights_type, specs
  )
  client_update = _client_computation(
    algorithm, round_inputs.type_signature.result, weights_type, client_data, keeps_extra=False
  )
  out_type = client_update.type_signature.result[0]
  aggregation_process = algorithm.aggregation.factory().create(
    out_type['update'], tff.TensorType(np.float32)
  )
  init_optimizer, server_update = _server_update_fn(
    algorithm, weights_type, aggregation_process.next.type_signature.result.result.member
  )
  server_extra = server_extra_fn(out_type['extras'])

  parts = (client_update, aggregation_process, server_update, server_extra, metrics_aggregation)
  init_fn = _handwritten_init(algorithm, client_work_init, aggregation_process, init_optimizer)
  next_fn = _handwritten_next(algorithm, init_fn, data_type, round_inputs, parts, clients_per_round)
  get_model_weights, set_model_weights = _model_weights_access(
    algorithm, init_fn.type_signature.result.member, for_model
  )
  return tff.learning.templates.LearningProcess(
    init_fn, next_fn, get_model_weights, set_model_weights
  )


def build_learning_process(
  algorithm: algorithm_base.Algorithm,
  clients_per_round: int | None = None,
  client_data: str = SINGLE_ELEMENT,
) -> tff.learning.templates.LearningProcess:
  """The algorithm as a `tff.learning.templates.LearningProcess`.

  Its `next(state, client_data)` takes one `tf.data.Dataset` per client with a single element,
  an OrderedDict of the client's example tensors plus `core.seeds.SEED_KEY` (int64[2]) and, for
  stateful algorithms, `client_state`, `client_state_present` and `position` (its index in the
  round). Metrics: `client_work/train` (the model's metrics), `client_work/client_stats`,
  `finalizer/update_non_finite`, and `client_states` for stateful algorithms.

  With `client_data=BATCHED` (algorithms without client state), `next` takes TFF's ordinary
  client data instead: any batched `tf.data.Dataset` of the model's input spec per client,
  seeds derived inside (`build_client_work`).

  Args:
    algorithm: an `Algorithm`.
    clients_per_round: the number of clients of every round; required for stateful algorithms
      (the size of the gathered client states).
    client_data: SINGLE_ELEMENT or BATCHED.
  """
  _check_algorithm('build_learning_process', algorithm)
  _data_type(algorithm, client_data)  # checks client_data
  if algorithm.fits_templates:
    return _composed_process(algorithm, client_data)
  if client_data == BATCHED and algorithm.stateful_clients:
    raise ValueError(
      f'{algorithm.name} keeps client state: its LearningProcess takes '
      f'client_data={SINGLE_ELEMENT!r} only (one element per client with its seed and state)'
    )
  return _handwritten_process(algorithm, clients_per_round, client_data)


class TffEngine(base.Engine):
  """Runs rounds through a LearningProcess on the current TFF execution context."""

  def __init__(self, algorithm: algorithm_base.Algorithm, clients_per_round: int | None = None):
    super().__init__(algorithm)
    self.process = build_learning_process(algorithm, clients_per_round)
    weights_type, _, _ = _model_types(algorithm)
    self._state_specs = tuple(tff.types.type_to_tf_tensor_specs(weights_type.trainable))

  def initialize(self, initial_weights):
    return self.process.set_model_weights(self.process.initialize(), initial_weights)

  def next(self, state, clients: Sequence[base.RoundClient]) -> base.RoundResult:
    datasets = []
    for position, client in enumerate(clients):
      element = collections.OrderedDict(client.features)
      element[seeds.SEED_KEY] = np.asarray(client.seed, np.int64)
      if self.algorithm.stateful_clients:
        present = client.state is not None
        element[STATE_KEY] = tuple(
          np.asarray(client.state[i], s.dtype.as_numpy_dtype)
          if present
          else np.zeros(s.shape, s.dtype.as_numpy_dtype)
          for i, s in enumerate(self._state_specs)
        )
        element[STATE_PRESENT_KEY] = np.bool_(present)
        element[POSITION_KEY] = np.int32(position)
      datasets.append(tf.data.Dataset.from_tensors(element))
    output = self.process.next(state, datasets)
    metrics = output.metrics
    row = base.flat_metrics(
      metrics['client_work']['train'],
      metrics['client_work']['client_stats'],
      metrics['finalizer']['update_non_finite'],
      metrics['aggregator'],
    )
    client_states = None
    if self.algorithm.stateful_clients:
      leaves = [np.asarray(a) for a in tf.nest.flatten(metrics['client_states'])]
      client_states = [[leaf[i] for leaf in leaves] for i in range(len(clients))]
    return base.RoundResult(output.state, row, client_states)

  def model_weights(self, state):
    weights = self.process.get_model_weights(state)
    return tff.learning.models.ModelWeights(
      [np.asarray(w) for w in weights.trainable], [np.asarray(w) for w in weights.non_trainable]
    )
