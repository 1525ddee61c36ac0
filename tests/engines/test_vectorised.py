"""Engine "vectorised": the round's clients side by side, each computing what it computes alone.

* the functional form of a task model is the Keras model (every supported layer, dropout masks
  of each client's step seed included);
* per-client parity with the sequential in-process engine through the training loop (side by
  side, and one after another in the fused XLA loop of `fused_loop` where it runs): every
  metrics.csv column and client_eval value to RTOL (tests/metrics_close.py), synthetic (LEAF,
  clients of very unequal sizes) over 5 rounds for several server/client optimizer pairs, E > 1,
  per-client epochs and both weightings, and the fmnist CNN (dropout) over 2 rounds (the
  engine-parity module says why the CNN is held to 2); clients in chunks give the same rounds;
* DP aggregation on it is the in-process engine's;
* the trainer: --engine=vectorised runs and extends a finished run exactly; what it cannot run
  is refused in one line with exit 2.
"""

import copy
import csv
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import trainer_processes
from tests.metrics_close import assert_rows_close
from tests.metrics_close import central_test
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.core import seeds
from tff_adaptive.engines import config as engine_config
from tff_adaptive.engines import functional_model
from tff_adaptive.engines import fused_choice
from tff_adaptive.engines import vectorised
from tff_adaptive.loop import evaluation
from tff_adaptive.loop import sampling
from tff_adaptive.loop import training_loop
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers import schedules
from tff_adaptive.optimizers import server as server_optimizers
from tff_adaptive.optimizers.config import DoGHParams
from tff_adaptive.tasks import layers as task_layers
from tff_adaptive.tasks import models

FMNIST_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')


def _mlp(seed):
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(12,)),
      tf.keras.layers.Dense(
        8, activation='tanh', kernel_initializer=tf.keras.initializers.GlorotUniform(seed)
      ),
      tf.keras.layers.ReLU(),
      tf.keras.layers.Dense(5, use_bias=False),
      tf.keras.layers.Activation('softmax'),
    ]
  )


@pytest.mark.parametrize(
  'build,shape',
  [
    (lambda: models.build_softmax_regression(60, 10, seed=1), (60,)),
    (lambda: models.build_fmnist_cnn(10, seed=1), (28, 28, 1)),
    (lambda: models.build_emnist_cr_cnn(seed=1), (28, 28, 1)),
    (lambda: _mlp(1), (12,)),
  ],
  ids=['softmax', 'fmnist_cnn', 'emnist_cnn', 'mlp'],
)
def test_the_functional_model_is_the_keras_model(build, shape):
  """K = 3 clients with their own weights and inputs, inference and training (dropout): each
  client's output is its Keras model's, its masks those of its own step seed."""
  rng = np.random.default_rng(0)
  keras_models = [build() for _ in range(3)]
  for k, m in enumerate(keras_models):  # distinct weights per client
    m.set_weights([w + 0.1 * k * rng.standard_normal(w.shape) for w in m.get_weights()])
  x = rng.uniform(size=(3, 4, *shape)).astype(np.float32)
  step_seeds = np.array([[1, 7], [1, 8], [2, 9]], np.int64)
  model = functional_model.FunctionalModel.from_keras(keras_models[0])
  params = [np.stack(ws) for ws in zip(*[m.get_weights() for m in keras_models])]
  for training in (False, True):
    got = model.apply(params, tf.constant(x), training, tf.constant(step_seeds))
    for k, m in enumerate(keras_models):
      with seeds.step_seeds(tf.constant(step_seeds[k])):
        want = m(x[k], training=training)
      np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)
  # A padded minibatch: the first rows' masks are those of the unpadded minibatch.
  if any(isinstance(l, task_layers.StatelessDropout) for l in keras_models[0].layers):
    got = model.apply(params, tf.constant(x), True, tf.constant(step_seeds))
    with seeds.step_seeds(tf.constant(step_seeds[0])):
      want = keras_models[0](x[0, :3], training=True)
    np.testing.assert_allclose(got[0, :3], want, rtol=1e-5, atol=1e-6)


def test_an_unsupported_model_is_named():
  lstm = tf.keras.Sequential(
    [tf.keras.Input(shape=(5,)), tf.keras.layers.Embedding(10, 4), tf.keras.layers.LSTM(3)]
  )
  with pytest.raises(functional_model.UnsupportedModelError, match="'embedding'.*Embedding"):
    functional_model.FunctionalModel.from_keras(lstm)


_TASKS = {}


def _task(name):
  if name == 'fmnist' and not FMNIST_DIR.is_dir():
    pytest.skip(f'{FMNIST_DIR} missing (apt-get install dataset-fashion-mnist)')
  if name not in _TASKS:
    _TASKS[name] = tasks.build_task(
      tasks.TaskConfig(name, seed=1, num_clients=20 if name == 'fmnist' else None)
    )
  return _TASKS[name]


def _algorithm(task, server, client, aggregation=None, name='fedopt', **hparams):
  config = server_optimizers.ServerOptimizerConfig(
    server, learning_rate=server_optimizers.SERVER_OPTIMIZERS[server].default_learning_rate
  )
  return algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      client,
      server_optimizers.build_server_optimizer(config),
      config.learning_rate,
      schedules.ScheduleConfig(),
      num_clients=len(task.client_ids),
      aggregation=aggregation,
      **hparams,
    ),
  )


_EVALUATORS = {}


def _evaluator(task) -> evaluation.Evaluator:
  """One Evaluator per task: it assigns the weights it is given and resets its metrics on
  every call, so runs share it (and its traces)."""
  if task.name not in _EVALUATORS:
    _EVALUATORS[task.name] = evaluation.Evaluator(
      task.keras_model_fn, task.loss_fn, task.metrics_fn
    )
  return _EVALUATORS[task.name]


def _train(task, engine, output_dir, rounds, clients_per_round):
  central = central_test(task)
  training_loop.run_training(
    engine,
    tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1)),
    task.train_clients,
    sampling.build_client_sampler(task.client_ids, clients_per_round, seed=1),
    _evaluator(task),
    lambda round_num: central,
    task.client_test,
    training_loop.LoopConfig(
      rounds, rounds_per_eval=1, rounds_per_checkpoint=rounds, seed=1, output_dir=str(output_dir)
    ),
    log=open(os.devnull, 'w'),  # noqa: SIM115
  )
  return read_run(output_dir, rounds)


def read_run(output_dir, rounds):
  """(metrics.csv rows without seconds_per_round, client_eval rows of rounds 1..rounds)."""
  output_dir = pathlib.Path(output_dir)
  with open(output_dir / 'metrics.csv') as f:
    rows = [{k: v for k, v in r.items() if k != 'seconds_per_round'} for r in csv.DictReader(f)]
  client_eval = []
  for r in range(1, rounds + 1):
    with open(output_dir / 'client_eval' / f'round_{r:05d}.csv') as f:
      client_eval += list(csv.DictReader(f))
  return rows, client_eval


def _client(name, lr, optimizer=None, **kwargs):
  return algorithms.ClientTrainingConfig(
    client_optimizers.ClientOptimizerConfig(name, lr, **(optimizer or {})), **kwargs
  )


# (task, server optimizer, client config, rounds, clients per round[, algorithm and its
# hyperparameters, clients per chunk])
CASES = {
  'synthetic-adam-sgd': ('synthetic', 'adam', _client('sgd', 0.01, batch_size=10), 5, 10),
  'synthetic-yogi-sgdm-E2': (
    'synthetic',
    'yogi',
    _client('sgdm', 0.01, batch_size=10, epochs=2),
    5,
    10,
  ),
  'synthetic-sgdm-adam-uniform': (
    'synthetic',
    'sgdm',
    _client('adam', 0.001, batch_size=10, weighting='uniform'),
    5,
    10,
  ),
  'synthetic-adagrad-adagrad-epochs1to3': (
    'synthetic',
    'adagrad',
    _client('adagrad', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
  ),
  'fmnist-adam-sgd': ('fmnist', 'adam', _client('sgd', 0.01, batch_size=64), 2, 5),
  # The other algorithms: FedProx's transformed gradients, FedNova's step norms, q-FedAvg's and
  # AdaFedAdam's full passes (F_k at x_t; F_k at x_0, F_k and grad F_k at x_t, all examples or
  # the first 20), their results per client, also for clients in chunks.
  'synthetic-fedprox-sgd-epochs1to3': (
    'synthetic',
    'sgd',
    _client('sgd', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
    dict(name='fedprox', fedprox=algorithms.FedProxHParams(mu=0.1)),
  ),
  'synthetic-fednova-sgdm-epochs1to3': (
    'synthetic',
    'sgd',
    _client('sgdm', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
    dict(name='fednova'),
  ),
  'synthetic-qfedavg-sgd-chunks3': (
    'synthetic',
    'sgd',
    _client('sgd', 0.01, batch_size=10),
    5,
    10,
    dict(name='qfedavg'),
    3,
  ),
  'synthetic-adafedadam-sgd-epochs1to3': (
    'synthetic',
    'adaadam',
    _client('sgd', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
    dict(name='adafedadam'),
  ),
  'synthetic-adafedadam-authors-adam-chunks3': (
    'synthetic',
    'adaadam',
    _client('adam', 0.001, batch_size=10),
    5,
    10,
    dict(
      name='adafedadam',
      adafedadam=algorithms.AdaFedAdamHParams(gradient_examples=20, weighting='loss'),
    ),
    3,
  ),
  # SCAFFOLD: each client's stored control variate c_i (or c for a client new to the run) in
  # its corrected gradients and its c_i+ out; 20 of the 100 clients a round, so that many are
  # sampled again.
  'synthetic-scaffold-sgd': (
    'synthetic',
    'sgd',
    _client('sgd', 0.01, batch_size=10),
    5,
    20,
    dict(name='scaffold'),
  ),
  'synthetic-scaffold-sgdm-epochs1to3-chunks4': (
    'synthetic',
    'sgd',
    _client('sgdm', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    20,
    dict(name='scaffold'),
    4,
  ),
  # The client optimizers with their own step sizes, per client: SPS (its Polyak step from the
  # client's minibatch loss), Delta-SGD (from the client's own iterate and gradient
  # differences; the authors' options evaluate a second gradient per step, on the fmnist CNN
  # with the step's dropout masks); their step_size statistics feed AdaFedAdam's eta_k and
  # SCAFFOLD's K eta.
  'synthetic-adam-sps-epochs1to3': (
    'synthetic',
    'adam',
    _client('sps', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
  ),
  'synthetic-scaffold-sps-chunks4': (
    'synthetic',
    'sgd',
    _client('sps', 0.01, batch_size=10),
    5,
    20,
    dict(name='scaffold'),
    4,
  ),
  'synthetic-adafedadam-delta_sgd-epochs1to3': (
    'synthetic',
    'adaadam',
    _client('delta_sgd', 0.01, batch_size=10, epochs=1, max_epochs=3),
    5,
    10,
    dict(name='adafedadam'),
  ),
  # One round: Delta-SGD's step size ||dx|| / ||dg|| makes a round on this CNN amplify
  # differences in its start model ~1e3-fold (measured: 1e-6 absolute noise on the round-2 model
  # moves the mean step size by 3e-3), and FedAdam's first step turns the engines' 1e-6 rounding
  # of the clients' deltas into models up to 7e-6 apart. From the same round-1 model both
  # engines' round 2 agree to float precision; round 1 is every local step of the authors'
  # variant (both gradients, the grown first step) on every client.
  'fmnist-adam-delta_sgd-authors': (
    'fmnist',
    'adam',
    _client(
      'delta_sgd',
      0.01,
      dict(
        delta_sgd=optimizers.DeltaSGDHParams(
          gradient='same_batch', first_step='grown', zero_rule='grow', eps=1e-8
        )
      ),
      batch_size=64,
    ),
    1,
    5,
  ),
  # DoG and L-DoG (Ivgi et al. 2023): every client's own rbar, G and step size (per tensor for
  # L-DoG), from its own x_0 = x_t; SCAFFOLD's K eta from DoG's mean step size. reps_rel 1e-2:
  # at the package's 1e-6 the clients' first steps are ulp-sized on these models.
  'synthetic-adam-dog-epochs1to3': (
    'synthetic',
    'adam',
    _client(
      'dog', 0.01, dict(dog=DoGHParams(reps_rel=1e-2)), batch_size=10, epochs=1, max_epochs=3
    ),
    5,
    10,
  ),
  'synthetic-scaffold-dog-chunks4': (
    'synthetic',
    'sgd',
    _client('dog', 0.01, dict(dog=DoGHParams(reps_rel=1e-2)), batch_size=10),
    5,
    20,
    dict(name='scaffold'),
    4,
  ),
  'fmnist-sgd-ldog': (
    'fmnist',
    'sgd',
    _client('ldog', 0.01, dict(dog=DoGHParams(reps_rel=1e-2)), batch_size=64),
    1,
    5,
  ),
  # FedExP: each client's Delta_i and ||Delta_i||^2 into the extrapolated mean, the server
  # optimizer that keeps x_t, the released model; FedProx-ExP's proximal gradients and
  # SCAFFOLD-ExP's control variates (client states) in chunks.
  'synthetic-fedprox_exp-sgd': (
    'synthetic',
    'sgd',
    _client('sgd', 0.01, batch_size=10),
    5,
    10,
    dict(name='fedexp', fedexp=algorithms.FedExPHParams(local='fedprox', prox_mu=0.1)),
  ),
  'synthetic-scaffold_exp-sgd-chunks4': (
    'synthetic',
    'sgdm',
    _client('sgd', 0.01, batch_size=10),
    5,
    20,
    dict(name='fedexp', fedexp=algorithms.FedExPHParams(local='scaffold')),
    4,
  ),
  'fmnist-adafedadam-sgd': (
    'fmnist',
    'adaadam',
    _client('sgd', 0.01, batch_size=64),
    2,
    5,
    dict(name='adafedadam'),
  ),
  # FedPA: each client's IASG samples (the mean iterate of every epoch after the burn-in epoch:
  # 3 and 4 epochs give 2 and 3 samples), collected at each client's own epoch ends, then its
  # posterior delta by the DP of App. C or the exact solve; FedAvg deltas in the server burn-in
  # rounds (2 of 5), FedPA's after. fmnist: FedPA from round 1, held to round 1 as in
  # tests/engines/test_engine_parity.py (3 local epochs on the CNN amplify one-ulp differences).
  'synthetic-fedpa-sgdm-E3': (
    'synthetic',
    'sgdm',
    _client('sgd', 0.01, batch_size=10, epochs=3),
    5,
    10,
    dict(name='fedpa', fedpa=algorithms.FedPAHParams(burnin_rounds=2, shrinkage=0.1)),
  ),
  'synthetic-fedpa-exact-adam-E4-chunks3': (
    'synthetic',
    'adam',
    _client('sgdm', 0.01, batch_size=10, epochs=4),
    5,
    10,
    dict(
      name='fedpa',
      fedpa=algorithms.FedPAHParams(burnin_rounds=2, shrinkage=0.1, solver='exact'),
    ),
    3,
  ),
  'fmnist-fedpa-sgdm-E3': (
    'fmnist',
    'sgdm',
    _client('sgd', 0.01, batch_size=64, epochs=3),
    1,
    5,
    dict(name='fedpa', fedpa=algorithms.FedPAHParams(shrinkage=0.1)),
  ),
}


@pytest.mark.parametrize('case', list(CASES))
def test_each_client_computes_what_the_inprocess_engine_computes(case, tmp_path):
  given = CASES[case]
  task_name, server, client, rounds, k, algorithm, chunk = (*given, *({}, None)[len(given) - 5 :])
  task = _task(task_name)
  make = lambda: _algorithm(task, server, client, **algorithm)
  want_rows, want_clients = _train(
    task, engines.InProcessEngine(make()), tmp_path / 'inprocess', rounds, k
  )
  got_rows, got_clients = _train(
    task, vectorised.VectorisedEngine(make(), chunk_size=chunk), tmp_path / 'vectorised', rounds, k
  )
  if fused_choice.refusal(make()) is None:  # and one after another in one XLA computation
    fused_rows, fused_clients = _train(
      task, vectorised.VectorisedEngine(make(), fused=True), tmp_path / 'fused', rounds, k
    )
    smallest = min(len(c['y']) for c in task.client_test.values())
    # Delta-SGD's step ||dx|| / 2||dg|| turns XLA's other rounding (fused ops, other
    # summation orders) into percent-level differences once ||dg|| is tiny: on
    # synthetic-adafedadam-delta_sgd the fused and the in-process engine agree to 1e-7 over
    # rounds 1-2 and to the last bit in round 3's training loss, while one client's last step
    # size (not yet in any loss) differs by 4 % in round 3 and the certainty C_k read from it
    # by 0.75 %. Held to the rounds before that.
    same = 2 if client.optimizer.name == 'delta_sgd' else rounds
    per_round = len(want_clients) // rounds
    assert_rows_close(want_rows[:same], fused_rows[:same], n_examples=smallest)
    assert_rows_close(
      want_clients[: same * per_round], fused_clients[: same * per_round], n_examples=smallest
    )
  if rounds > 1:
    assert float(want_rows[-1]['train_loss']) != float(want_rows[0]['train_loss'])
  if algorithm.get('name') == 'fedpa':  # FedAvg deltas in the burn-in rounds, FedPA's after
    burnin = algorithm['fedpa'].burnin_rounds
    corrections = [float(r['client_delta_correction_mean']) for r in got_rows]
    assert corrections[:burnin] == [0.0] * burnin and min(corrections[burnin:]) > 0, corrections
  smallest = min(len(c['y']) for c in task.client_test.values())
  assert_rows_close(want_rows, got_rows, n_examples=smallest)
  assert_rows_close(want_clients, got_clients, n_examples=smallest)
  if task_name == 'synthetic':  # clients of unequal sizes: their local steps differ
    assert float(got_rows[0]['client_local_steps_min']) < float(
      got_rows[0]['client_local_steps_max']
    )


def test_clients_in_chunks_and_dp_give_the_inprocess_rounds(tmp_path):
  """Chunks of 3 clients (sorted by steps) on synthetic with DP (adaptive clip, seeded noise):
  the in-process engine's rounds, as all clients at once and the fused loop are. (Not bitwise the unchunked
  rounds: the training metrics sum the same minibatch losses in another order.)"""
  task = _task('synthetic')
  client = _client('sgd', 0.01, batch_size=10, weighting='uniform')
  make = lambda: _algorithm(
    task, 'adam', client, aggregators.dp_mean('gaussian_adaptive', 0.5, 10, 0.1, noise_seed=3)
  )
  runs = {
    'inprocess': engines.InProcessEngine(make()),
    'vectorised': vectorised.VectorisedEngine(make()),
    'chunks': vectorised.VectorisedEngine(make(), chunk_size=3),
    'fused': vectorised.VectorisedEngine(make(), fused=True),  # its fold compiled by XLA too
  }
  results = {name: _train(task, e, tmp_path / name, 4, 10) for name, e in runs.items()}
  smallest = min(len(c['y']) for c in task.client_test.values())
  for name in ('vectorised', 'chunks', 'fused'):
    for want, got in zip(results['inprocess'], results[name]):
      assert_rows_close(want, got, n_examples=smallest)
  assert float(results['chunks'][0][-1]['dp_clip']) != 0.1  # the DP aggregation ran, adapting


def _run(tmp_path, *args, name='run'):
  return trainer_processes.run(
    [
      '--task=synthetic',
      '--engine=vectorised',
      '--clients_per_round=10',
      '--client_batch_size=10',
      '--server_optimizer=adam',
      '--rounds_per_eval=2',
      f'--root_output_dir={tmp_path}',
      f'--experiment_name={name}',
      *args,
    ],
    timeout=300,
  )


def _metrics(path):
  with open(path / 'metrics.csv') as f:
    return [{k: v for k, v in r.items() if k != 'seconds_per_round'} for r in csv.DictReader(f)]


def test_the_trainer_runs_it_and_an_extended_run_continues_exactly(tmp_path):
  """SCAFFOLD with Delta-SGD clients in chunks: the clients' stored c_i and the stacked
  per-client step sizes; an extended run is the uninterrupted one, nothing on stderr."""
  args = ['--clients_per_chunk=4', '--algorithm=scaffold', '--client_optimizer=delta_sgd']
  whole = _run(tmp_path, '--total_rounds=4', *args, name='whole')
  assert whole.returncode == 0, whole.stderr
  assert trainer_processes.stderr_lines(whole.stderr) == []
  assert 'scaffold (adam server) on engine vectorised' in whole.stdout
  first = _run(tmp_path, '--total_rounds=2', *args, name='extended')
  assert first.returncode == 0, first.stderr
  second = _run(tmp_path, '--total_rounds=4', *args, name='extended')
  assert second.returncode == 0, second.stderr
  assert _metrics(tmp_path / 'extended') == _metrics(tmp_path / 'whole')
  assert len(_metrics(tmp_path / 'whole')) == 4


@pytest.mark.parametrize(
  'args,message',
  [
    (['--task=shakespeare', '--clients_per_round=2'], 'has no vectorised form'),
    (['--clients_per_chunk=0'], '--clients_per_chunk must be >= 1, got 0'),
  ],
)
def test_what_it_cannot_run_is_one_line_and_exit_2(tmp_path, tff_data_dir, args, message):
  result = _run(tmp_path, '--total_rounds=1', f'--data_dir={tff_data_dir}', *args)
  lines = trainer_processes.stderr_lines(result.stderr)
  assert result.returncode == 2 and len(lines) == 1, result.stderr
  assert message in lines[0], lines
  assert not (tmp_path / 'run').exists()


def test_clients_per_chunk_needs_the_vectorised_engine(tmp_path):
  result = trainer_processes.run(
    [
      '--task=synthetic',
      '--engine=inprocess',
      '--clients_per_chunk=4',
      f'--root_output_dir={tmp_path}',
    ],
    timeout=120,
  )
  assert result.returncode == 2
  assert trainer_processes.stderr_lines(result.stderr)[-1].endswith(
    '--clients_per_chunk needs --engine=vectorised'
  )


def test_engine_options_reach_it():
  task = _task('synthetic')
  algorithm = _algorithm(task, 'sgd', _client('sgd', 0.01, batch_size=10))
  engine = engines.build_engine('vectorised', algorithm, engines.EngineOptions(chunk_size=5))
  assert isinstance(engine, vectorised.VectorisedEngine) and engine.chunk_size == 5
  with pytest.raises(ValueError, match='chunk_size must be a positive integer'):
    vectorised.VectorisedEngine(algorithm, chunk_size=0)
  assert sorted(engines.ENGINES) == ['grid_cells', 'inprocess', 'tff', 'vectorised']
  # Every registered client optimizer has a stacked form; a new one is refused until it has.
  entries = client_optimizers.CLIENT_OPTIMIZERS
  assert all(entry.stacked is not None for entry in entries.values())
  assert engine_config.vectorised_refusal('fedopt', 'lamb') == (
    "client optimizer 'lamb' is not batched yet (supported: sgd, sgdm, adam, adagrad, sps, "
    'delta_sgd, dog, ldog); use --engine=inprocess'
  )
  # So has every registered algorithm (FedPA's samples as `Algorithm.epoch_means`); a new one
  # is refused by name until it has.
  assert all(engine_config.vectorised_refusal(n, 'sgd') is None for n in algorithms.ALGORITHMS)
  assert engine_config.vectorised_refusal('fedlamb', 'sgd') == (
    "algorithm 'fedlamb' is not batched yet (supported: fedopt, scaffold, fedpa, fedprox, "
    'fednova, qfedavg, fedexp, adafedadam); use --engine=inprocess'
  )
  # A client update written as a whole (not the three parts) is refused whatever its name.
  own = copy.copy(algorithm)
  own.__class__ = type('OwnUpdate', (type(algorithm),), {'client_update': lambda self, *a: None})
  with pytest.raises(ValueError, match="algorithm 'fedopt' writes its own client update"):
    vectorised.VectorisedEngine(own)
