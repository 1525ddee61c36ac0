"""Our algorithms' TFF parts on TFF's ordinary client data, in a user's own composition.

Each algorithm without extra state gives a `ClientWorkProcess` that takes batched
`tf.data.Dataset`s of the model's input spec (`client_data=engines.BATCHED`), as TFF's
`build_weighted_fed_avg` does. Composed with TFF's own broadcast, the algorithm's aggregation
(TFF's `MeanFactory` where the algorithm's is the weighted mean) and TFF's optimizer finalizer,
it must give exactly the model of our own LearningProcess on the single-element format given
the seeds the batched route derives (`engines.batched_client_seed`), whatever the user's batch
size, and the same model on a rerun. AdaFedAdam (its x_0 kept by the client work) composed with
`CertaintyWeightedMeanFactory` and the AdaAdam finalizer gives the model of our hand-written
LearningProcess on the same batched data.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.algorithms.test_fedpa import _INITIAL
from tests.algorithms.test_fedpa import _clients
from tests.algorithms.test_fedpa import _linear_model_fn
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime

_MODEL_FN = _linear_model_fn(4)
_CLIENT = algorithms.ClientTrainingConfig(
  optimizers.ClientOptimizerConfig('sgd', 0.05), epochs=2, batch_size=5
)
_SERVER = tff.learning.optimizers.build_sgdm(0.5, momentum=0.9)
_ALGORITHMS = {
  'fedopt': lambda: algorithms.build_fedopt(_MODEL_FN, _CLIENT, _SERVER),
  'fedprox': lambda: algorithms.build_fedprox(
    _MODEL_FN, _CLIENT, _SERVER, fedprox=algorithms.FedProxHParams(mu=0.1)
  ),
  'fedpa': lambda: algorithms.build_fedpa(
    _MODEL_FN, _CLIENT, _SERVER, algorithms.FedPAHParams(burnin_rounds=1, shrinkage=0.1)
  ),
  'fednova': lambda: algorithms.build_fednova(
    _MODEL_FN,
    algorithms.ClientTrainingConfig(
      optimizers.ClientOptimizerConfig('sgdm', 0.05, momentum=0.5), epochs=2, batch_size=5
    ),
    _SERVER,
  ),
  'qfedavg': lambda: algorithms.build_qfedavg(
    _MODEL_FN, _CLIENT, _SERVER, qfedavg=algorithms.QFedAvgHParams(q=1.0)
  ),
}
_ROUNDS = 3


def _initial_weights():
  @tff.tensorflow.computation
  def initial():
    return tff.learning.models.ModelWeights(
      [tf.constant(w) for w in _INITIAL.trainable],
      [tf.constant(w) for w in _INITIAL.non_trainable],
    )

  return initial


def _users_process(algorithm):
  """What a TFF user writes: TFF's parts around our client work on ordinary data."""
  weights_type = tff.learning.models.weights_type_from_model(_MODEL_FN)
  client_work = engines.build_client_work(algorithm, client_data=engines.BATCHED)
  update_type = client_work.next.type_signature.result.result.member.update
  if algorithm.aggregation.factory().__class__ is tff.aggregators.MeanFactory:
    aggregator = tff.aggregators.MeanFactory()  # TFF's own, as a user would pass it
  else:  # FedNova's normalized mean, q-FedAvg's: the algorithm's own factory
    aggregator = algorithm.aggregation.factory()
  return tff.learning.templates.compose_learning_process(
    _initial_weights(),
    tff.learning.templates.build_broadcast_process(weights_type),
    client_work,
    aggregator.create(update_type, tff.TensorType(np.float32)),
    algorithm.build_finalizer(weights_type),
  )


def _train(process, data_for_round):
  state = process.initialize()
  for round_num in range(1, _ROUNDS + 1):
    state = process.next(state, data_for_round(round_num)).state
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


@pytest.mark.parametrize('name', list(_ALGORITHMS))
def test_ordinary_batched_datasets_in_a_users_composition(name):
  clients = _clients(np.random.default_rng(12), count=3)
  with runtime.local_execution():
    users = _users_process(_ALGORITHMS[name]())
    batched = lambda batch: (
      lambda r: [tf.data.Dataset.from_tensor_slices(c).batch(batch) for c in clients]
    )
    ours = _train(users, batched(4))
    assert all(np.all(np.isfinite(w)) for w in ours)
    # The user's batching does not matter (examples are gathered, then batched by B), and a
    # rerun is exact.
    for again in (_train(users, batched(7)), _train(users, batched(4))):
      for a, b in zip(again, ours):
        np.testing.assert_array_equal(a, b)
    # Our own process on the single-element format, given the seeds the batched route derives.
    reference = engines.build_learning_process(_ALGORITHMS[name]())

    def single_element(round_num):
      return [
        tf.data.Dataset.from_tensors(
          collections.OrderedDict(
            c, seed=engines.batched_client_seed(round_num, collections.OrderedDict(c)).numpy()
          )
        )
        for c in clients
      ]

    state = reference.set_model_weights(reference.initialize(), _INITIAL)
    for round_num in range(1, _ROUNDS + 1):
      state = reference.next(state, single_element(round_num)).state
    expected = reference.get_model_weights(state).trainable
  for a, b in zip(ours, expected):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  initial = np.concatenate([np.ravel(w) for w in _INITIAL.trainable])
  assert not np.allclose(np.concatenate([np.ravel(w) for w in ours]), initial)  # it trained


def test_bad_client_data_format_and_stateful_algorithms_say_what_they_take():
  algorithm = _ALGORITHMS['fedopt']()
  with pytest.raises(
    ValueError, match="client_data must be one of single_element, batched, got 'x'"
  ):
    engines.build_client_work(algorithm, client_data='x')
  scaffold = algorithms.build_scaffold(_MODEL_FN, _CLIENT, optimizers.build_fedavg_sgd(1.0), 3)
  with pytest.raises(ValueError, match="its LearningProcess takes client_data='single_element'"):
    engines.build_learning_process(scaffold, clients_per_round=3, client_data=engines.BATCHED)
  for client_data in (engines.SINGLE_ELEMENT, engines.BATCHED):
    with pytest.raises(ValueError, match='scaffold keeps extra server or client state: no Client'):
      engines.build_client_work(scaffold, client_data=client_data)
    # AdaFedAdam's extra state, x_0, is set from the initial model alone: the client work keeps it.
    client_work = engines.build_client_work(_adafedadam(), client_data=client_data)
    assert isinstance(client_work, tff.learning.templates.ClientWorkProcess)
    state_type = client_work.initialize.type_signature.result.member
    assert [str(t) for t in state_type.extra] == ['float32[4,1]', 'float32[1]']


_KERAS_ADAM = tf.keras.optimizers.Adam(0.01)
_BAD_INPUTS = {
  'keras optimizer': (
    lambda: algorithms.build_fedopt(_MODEL_FN, _CLIENT, _KERAS_ADAM),
    'build_fedopt: server_optimizer must be a tff.learning.optimizers.Optimizer (e.g. '
    'optimizers.build_fedadam(0.01) or tff.learning.optimizers.build_sgdm(1.0)), not a Keras '
    'optimizer; got keras.src.optimizers.adam.Adam',
  ),
  'client optimizer config for the client': (
    lambda: algorithms.build_fedprox(_MODEL_FN, _CLIENT.optimizer, _SERVER),
    'build_fedprox: client must be an algorithms.ClientTrainingConfig; got '
    'tff_adaptive.optimizers.config.ClientOptimizerConfig',
  ),
  'a model for model_fn': (
    lambda: algorithms.build_scaffold(_MODEL_FN(), _CLIENT, _SERVER, 3),
    'build_scaffold: model_fn must be a no-arg callable returning a tff.learning VariableModel; '
    'got',
  ),
  'aggregation factory': (
    lambda: algorithms.build_fednova(
      _MODEL_FN, _CLIENT, _SERVER, aggregation=tff.aggregators.MeanFactory()
    ),
    'build_fednova: aggregation must be None or an aggregators.UpdateAggregation (e.g. '
    'aggregators.weighted_mean()); got tensorflow_federated.python.aggregators.mean.MeanFactory',
  ),
  'schedule name': (
    lambda: algorithms.build_fedpa(
      _MODEL_FN, _CLIENT, _SERVER, server_lr_schedule='step_decay', server_learning_rate=1.0
    ),
    'build_fedpa: server_lr_schedule must be None or an optimizers.ScheduleConfig; got builtins.str',
  ),
  'a learning process for the algorithm': (
    lambda: engines.build_learning_process(
      tff.learning.algorithms.build_weighted_fed_avg(_MODEL_FN, _SERVER)
    ),
    'build_learning_process: algorithm must be an algorithm of tff_adaptive.algorithms (e.g. '
    'algorithms.build_fedopt(model_fn, client, server_optimizer)); TFF learning processes are '
    'composed from its parts, not passed in; got tensorflow_federated.',
  ),
  'a name for the algorithm': (
    lambda: engines.build_client_work('fedopt', client_data=engines.BATCHED),
    'build_client_work: algorithm must be an algorithm of tff_adaptive.algorithms',
  ),
}


@pytest.mark.parametrize('case', list(_BAD_INPUTS))
def test_builders_say_in_one_line_what_they_take(case):
  build, message = _BAD_INPUTS[case]
  with pytest.raises(TypeError) as raised:
    build()
  text = str(raised.value)
  assert text.startswith(message), text
  assert '\n' not in text


# -- AdaFedAdam: its client work keeps x_0. ---------------------------------------------------

_ADAFEDADAM = {
  'defaults': algorithms.AdaFedAdamHParams(),  # alpha 1, the paper's weighting, floor 'zero'
  'alpha 3, loss weighting': algorithms.AdaFedAdamHParams(alpha=3.0, weighting='loss'),
}


def _adafedadam(hparams=algorithms.AdaFedAdamHParams()):
  return algorithms.build_adafedadam(
    _MODEL_FN, _CLIENT, optimizers.build_adaadam(0.1), adafedadam=hparams
  )


def _users_adafedadam(hparams):
  """A user's AdaFedAdam: TFF's broadcast, our client work, certainty mean, AdaAdam finalizer."""
  weights_type = tff.learning.models.weights_type_from_model(_MODEL_FN)
  client_work = engines.build_client_work(_adafedadam(hparams), client_data=engines.BATCHED)
  update_type = client_work.next.type_signature.result.result.member.update
  return tff.learning.templates.compose_learning_process(
    _initial_weights(),
    tff.learning.templates.build_broadcast_process(weights_type),
    client_work,
    aggregators.CertaintyWeightedMeanFactory(hparams.alpha).create(
      update_type, tff.TensorType(np.float32)
    ),
    optimizers.adaadam.build_finalizer(
      optimizers.build_adaadam(0.1), weights_type, certainty_floor=hparams.certainty_floor
    ),
  )


def test_adafedadam_client_work_in_a_users_composition_gives_our_model():
  clients = _clients(np.random.default_rng(12), count=3)
  batched = lambda batch: (
    lambda r: [tf.data.Dataset.from_tensor_slices(c).batch(batch) for c in clients]
  )
  models = {}
  with runtime.local_execution():
    for name, hparams in _ADAFEDADAM.items():
      users = _users_adafedadam(hparams)
      state = users.initialize()
      for round_num in range(1, _ROUNDS + 1):
        output = users.next(state, batched(4)(round_num))
        state = output.state
        stats = output.metrics['client_work']['client_stats']
        assert stats['invalid_max'] == 0 and stats['certainty_min'] > 0, (name, round_num)
      ours = [np.asarray(w) for w in users.get_model_weights(state).trainable]
      # The client work kept x_0, the model its first round received, for F_k(x_0).
      for kept, initial in zip(state.client_work['extra'], _INITIAL.trainable):
        np.testing.assert_array_equal(kept, initial)
      for a, b in zip(_train(users, batched(7)), ours):  # the user's batching does not matter
        np.testing.assert_array_equal(a, b)
      # Our own hand-written process (x_0 in the server state) on the same batched data.
      reference = engines.build_learning_process(_adafedadam(hparams), client_data=engines.BATCHED)
      fresh = reference.initialize()  # x_0 is the initial model, set_model_weights or not
      for kept, initial in zip(fresh.client_work['extra'], fresh.global_model_weights.trainable):
        np.testing.assert_array_equal(kept, initial)
      state = reference.set_model_weights(fresh, _INITIAL)
      for round_num in range(1, _ROUNDS + 1):
        state = reference.next(state, batched(4)(round_num)).state
      for a, b in zip(ours, reference.get_model_weights(state).trainable):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)
      models[name] = np.concatenate([np.ravel(w) for w in ours])
  initial = np.concatenate([np.ravel(w) for w in _INITIAL.trainable])
  for name, model in models.items():
    assert np.all(np.isfinite(model)) and not np.allclose(model, initial), name  # it trained
  defaults, other = models.values()
  assert np.abs(defaults - other).max() > 1e-3  # the variants give different models


def test_adafedadam_finalizer_makes_no_step_when_certainty_is_not_positive():
  """Our process's rule (`certainty_floor='zero'`, AdaFedAdam's default): a round whose C <= 0
  keeps the model and AdaAdam's whole state; 'none' (the authors' code) steps uphill."""
  weights_type = tff.learning.models.weights_type_from_model(_MODEL_FN)
  specs = tff.types.type_to_tf_tensor_specs(weights_type.trainable)
  update = [np.full(w.shape, 0.5, np.float32) for w in _INITIAL.trainable]
  outputs = {}
  with runtime.local_execution():
    for floor in (None, 'zero', 'none'):
      algorithm = _adafedadam(algorithms.AdaFedAdamHParams(certainty_floor=floor or 'zero'))
      finalizer = (
        algorithm.build_finalizer(weights_type)
        if floor is None
        else optimizers.adaadam.build_finalizer(algorithm.server_optimizer, weights_type, floor)
      )
      for c in (-0.5, 0.0, 0.5):
        aggregate = collections.OrderedDict(update=update, certainty=np.float32(c))
        state = finalizer.initialize()
        out = finalizer.next(state, _INITIAL, aggregate)
        # Our own process's server step on the same inputs.
        opt_state, trainable, non_finite = algorithm.server_update(
          algorithm.server_optimizer.initialize(specs),
          tuple(tf.constant(w) for w in _INITIAL.trainable),
          tf.nest.map_structure(tf.constant, aggregate),
        )
        for a, b in zip(out.result.trainable, trainable):
          np.testing.assert_array_equal(a, b)
        for a, b in zip(tf.nest.flatten(out.state), tf.nest.flatten(opt_state)):
          np.testing.assert_array_equal(np.asarray(a), tf.convert_to_tensor(b).numpy())
        assert out.measurements['update_non_finite'] == int(non_finite)
        outputs[floor, c] = [np.asarray(w) for w in out.result.trainable], out.state
  for floor in (None, 'zero'):
    for c in (-0.5, 0.0):  # no step: model and AdaAdam's state (step count included) kept
      model, state = outputs[floor, c]
      for a, b in zip(model, _INITIAL.trainable):
        np.testing.assert_array_equal(a, b)
      assert state['step'] == 0
  # 'none': C = 0 on a first step is 0/0 in the bias correction, a rejected non-finite step.
  stepped, _ = outputs['none', -0.5]
  assert all(np.all(a > b) for a, b in zip(stepped, _INITIAL.trainable))  # uphill
  assert all(np.all(a < b) for a, b in zip(outputs['zero', 0.5][0], _INITIAL.trainable))
  with pytest.raises(ValueError, match="unknown AdaFedAdam certainty_floor 'clip'"):
    optimizers.adaadam.build_finalizer(optimizers.build_adaadam(), weights_type, 'clip')
