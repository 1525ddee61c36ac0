"""The fused loop: a round's local steps, every client's one after another, as one XLA program.

Parity with the other engines is `tests/engines/test_vectorised.py`'s (every algorithm and client
optimizer case, through the training loop). Here: the padded sizes, the minibatches the loop
visits (those of `VectorisedEngine.schedule`, step by step), what `--fused_loop` chooses and
refuses, and the engines the registry builds from it.
"""

import collections
import logging

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.engines import fused_choice
from tff_adaptive.engines import fused_loop
from tff_adaptive.engines import inprocess
from tff_adaptive.engines import vectorised
from tff_adaptive.optimizers import schedules
from tff_adaptive.tasks import models


def test_clients_pad_to_the_next_power_of_two():
  sizes = [0, 1, 2, 3, 10, 63, 64, 65, 100, 1024, 1025]
  want = [1, 1, 2, 4, 16, 64, 64, 128, 128, 1024, 2048]
  assert [int(fused_loop.bucket(tf.constant(n))) for n in sizes] == want


def test_examples_pad_to_the_next_power_of_two_of_at_least_64():
  sizes = [0, 1, 64, 65, 128, 129, 1000, 1024, 1025, 17955]
  want = [64, 64, 64, 128, 128, 256, 1024, 1024, 2048, 32768]
  assert [fused_loop.examples_bucket(n) for n in sizes] == want


def _algorithm(model_fn, name='fedopt', client='sgd', batch_size=3, epochs=2, **hparams):
  return algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      model_fn,
      algorithms.ClientTrainingConfig(
        optimizers.ClientOptimizerConfig(client, 0.1), batch_size=batch_size, epochs=epochs
      ),
      optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0)),
      1.0,
      schedules.ScheduleConfig(),
      num_clients=10,
      **hparams,
    ),
  )


_SYNTHETIC = []


def _synthetic():
  if not _SYNTHETIC:
    _SYNTHETIC.append(tasks.build_task(tasks.TaskConfig('synthetic', seed=1)))
  return _SYNTHETIC[0]


def test_each_step_visits_the_minibatch_of_the_vectorised_schedule():
  """Clients of 0, 1, 5, 7 and 12 examples, B = 3, E = 2: for every client and step, the rows
  and mask the loop computes from its (epoch, b) counters are the schedule's."""
  task = _synthetic()
  engine = vectorised.VectorisedEngine(_algorithm(lambda: task.model_fn(1)), fused=True)
  sizes = np.array([0, 1, 5, 7, 12], np.int32)
  splits = tf.constant(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32))
  seeds_ = tf.constant(np.arange(10, dtype=np.int64).reshape(5, 2) + 3)
  want_steps, (want_rows, want_valid) = engine.schedule(splits, seeds_)
  steps, per_epoch, _ = engine.permutations(splits, seeds_)
  np.testing.assert_array_equal(steps, [0, 2, 4, 6, 8])
  rows = engine.round_inputs(
    [
      engines.RoundClient(
        str(i),
        collections.OrderedDict(x=np.zeros((n, 60), np.float32), y=np.zeros(n, np.int32)),
        seeds_[i].numpy(),
      )
      for i, n in enumerate(sizes)
    ]
  )[5]
  assert rows.shape == (2, fused_loop.examples_bucket(sizes.sum()))
  clients = fused_loop.Clients(
    splits[:-1], splits[1:] - splits[:-1], steps, per_epoch, rows, seeds_
  )
  for i in range(5):
    epoch, b = 0, 0
    for s in range(int(steps[i])):
      got_rows, valid = fused_loop.minibatch(clients, i, epoch, b, 3)
      np.testing.assert_array_equal(valid, want_valid[i, s])
      np.testing.assert_array_equal(got_rows, want_rows[i, s])
      b += 1
      if b == per_epoch[i]:
        epoch, b = epoch + 1, 0
  assert int(tf.reduce_sum(tf.cast(want_valid, tf.int32))) == 2 * sizes.sum()


def test_auto_fuses_on_the_cpu_for_models_without_convolutions():
  task = _synthetic()
  dense = _algorithm(lambda: task.model_fn(1))
  assert fused_choice.use_fused(dense, 'auto', None, jit_compile=False)
  assert fused_choice.use_fused(dense, 'auto', 'CPU:0', jit_compile=False)
  assert not fused_choice.use_fused(dense, 'auto', 'GPU:0', jit_compile=False)
  assert not fused_choice.use_fused(dense, 'auto', None, jit_compile=True)  # --xla: its own
  assert not fused_choice.use_fused(dense, 'off', None, jit_compile=False)
  assert not fused_choice.measured_faster(_algorithm(_fmnist_cnn_model), None)


def test_what_it_cannot_run_falls_back_with_one_warning(caplog):
  task = _synthetic()
  fedpa = _algorithm(
    lambda: task.model_fn(1), name='fedpa', fedpa=algorithms.FedPAHParams(shrinkage=0.1)
  )
  assert fused_choice.refusal(fedpa) == (
    "algorithm 'fedpa' collects epoch means of its iterates, which the fused loop does not"
  )
  with caplog.at_level(logging.WARNING):
    engine = engines.build_engine('inprocess', fedpa, engines.EngineOptions(fused_loop='on'))
  assert type(engine) is inprocess.InProcessEngine
  warnings = [r.getMessage() for r in caplog.records if 'fused_loop' in r.getMessage()]
  assert warnings == [
    "--fused_loop=on: not fused (algorithm 'fedpa' collects epoch means of its iterates, which "
    'the fused loop does not); training as without it'
  ]
  with pytest.raises(ValueError, match='fused local training: algorithm .fedpa. collects'):
    vectorised.VectorisedEngine(fedpa, fused=True)
  with pytest.raises(ValueError, match='--fused_loop=on and --xla exclude each other'):
    fused_choice.use_fused(fedpa, 'on', None, jit_compile=True)
  with pytest.raises(ValueError, match="unknown mode 'yes'; valid choices: auto, on, off"):
    fused_choice.use_fused(fedpa, 'yes', None, jit_compile=False)


def test_the_registry_builds_the_fused_engines():
  task = _synthetic()
  make = lambda: _algorithm(lambda: task.model_fn(1))
  built = {
    (name, mode): engines.build_engine(name, make(), engines.EngineOptions(fused_loop=mode))
    for name in ('inprocess', 'vectorised')
    for mode in ('auto', 'on', 'off')
  }
  for name in ('inprocess', 'vectorised'):
    for mode in ('auto', 'on'):
      engine = built[name, mode]
      assert isinstance(engine, vectorised.VectorisedEngine) and engine.fused is not None
  assert type(built['inprocess', 'off']) is inprocess.InProcessEngine
  assert built['vectorised', 'off'].fused is None
  # The fmnist CNN stays unfused under auto (convolutions), and under on (dropout).
  cnn = _algorithm(_fmnist_cnn_model)
  assert fused_choice.refusal(cnn) == (
    'the model has random layers (conv2_drop, fc1_drop), whose masks XLA draws differently from '
    "TF's kernels"
  )
  for mode in ('auto', 'on'):
    built = engines.build_engine('inprocess', cnn, engines.EngineOptions(fused_loop=mode))
    assert type(built) is inprocess.InProcessEngine


def _fmnist_cnn_model():
  spec = collections.OrderedDict(
    x=tf.TensorSpec([None, 28, 28, 1], tf.float32), y=tf.TensorSpec([None], tf.int32)
  )
  return tff.learning.models.from_keras_model(
    models.build_fmnist_cnn(10, seed=1),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=spec,
  )
