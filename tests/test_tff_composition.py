"""Our algorithms' TFF parts on TFF's ordinary client data, in a user's own composition.

Each algorithm without extra state gives a `ClientWorkProcess` that takes batched
`tf.data.Dataset`s of the model's input spec (`client_data=engines.BATCHED`), as TFF's
`build_weighted_fed_avg` does. Composed with TFF's own broadcast, the algorithm's aggregation
(TFF's `MeanFactory` where the algorithm's is the weighted mean) and TFF's optimizer finalizer,
it must give exactly the model of our own LearningProcess on the single-element format given
the seeds the batched route derives (`engines.batched_client_seed`), whatever the user's batch
size, and the same model on a rerun.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.test_fedpa import _INITIAL
from tests.test_fedpa import _clients
from tests.test_fedpa import _linear_model_fn
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
