"""AdaFedAdam, FedProx, FedNova and q-FedAvg through the trainer and the training loop.

Engine parity of each algorithm on synthetic and fmnist is in tests/engines/test_engine_parity.py; the
math against the NumPy reference in tests/algorithms/test_fair_algorithms.py.
"""

import collections
import csv
import json
import os
import re

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import trainer_processes
from tests.run.test_trainer import experiment_in
from tests.run.test_trainer import run_trainer
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.loop import evaluation
from tff_adaptive.loop import training_loop
from tff_adaptive.run import provenance


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


_COMMON = ['--task=synthetic', '--num_clients=12', '--total_rounds=3', '--rounds_per_eval=1']
CASES = {
  'adafedadam': (
    ['--algorithm=adafedadam', '--fairness_alpha=2', '--client_epochs_max=3'],  # no server flag
    'synthetic_adafedadam_adaadam_sgd_seed1',
    {
      'adafedadam': {
        'alpha': 2.0,
        'gradient_examples': None,
        'weighting': 'paper',
        'certainty_floor': 'zero',
      }
    },
    'client_certainty_mean',
  ),
  'fedprox': (
    ['--algorithm=fedprox', '--fedprox_mu=0.1'],
    'synthetic_fedprox_sgd_sgd_seed1',
    {'fedprox': {'mu': 0.1}},
    'client_local_steps_mean',
  ),
  'fednova': (
    ['--algorithm=fednova', '--client_optimizer=sgdm', '--client_epochs_max=2'],
    'synthetic_fednova_sgd_sgdm_seed1',
    {},
    'client_steps_norm_mean',
  ),
  'qfedavg': (
    ['--algorithm=qfedavg', '--qfedavg_q=2'],
    'synthetic_qfedavg_sgd_sgd_seed1',
    {'qfedavg': {'q': 2.0}},
    'client_qffl_weight_mean',
  ),
}


# Both engines run every algorithm in tests/engines/test_engine_parity.py; here each algorithm goes
# through the trainer once, AdaFedAdam on both engines.
@pytest.mark.parametrize(
  'name,engine',
  [
    ('adafedadam', 'tff'),
    ('adafedadam', 'inprocess'),
    ('fedprox', 'tff'),
    ('fednova', 'inprocess'),
    ('qfedavg', 'tff'),
  ],
)
def test_trains_through_the_trainer(tmp_path, name, engine):
  args, experiment, sections, column = CASES[name]
  trainer = run_trainer([*_COMMON, *args, f'--engine={engine}', f'--root_output_dir={tmp_path}'])
  assert trainer.stderr_lines == [], trainer.report()
  # <task>_<algorithm>_<server opt>_<client opt>_seed<seed>_<6-digit hash>[_<engine>]
  directory = experiment_in(tmp_path)
  suffix = '' if engine == 'tff' else '_inprocess'
  assert re.fullmatch(f'{experiment}_[0-9a-f]{{6}}{suffix}', directory.name), directory.name
  hparams = json.loads((directory / 'hparams.json').read_text())
  assert hparams['algorithm'] == name
  if name == 'adafedadam':  # AdaAdam with the paper's defaults when no server flag is given
    assert hparams['server'] == {
      'name': 'adaadam',
      'learning_rate': 0.001,
      'tau': 1e-8,
      'beta_1': 0.9,
      'beta_2': 0.999,
      'certainty_lr_from_step': 0,
    }
  for key, value in sections.items():
    assert hparams[key] == value
  others = {'fedpa', 'fedprox', 'qfedavg', 'adafedadam'} - set(sections)
  assert not others & set(hparams)  # only the chosen algorithm's hyperparameters
  if '--client_epochs_max=3' in args or '--client_epochs_max=2' in args:
    assert hparams['client']['max_epochs'] in (2, 3)
  else:
    assert 'max_epochs' not in hparams['client']
  rows = _rows(directory / 'metrics.csv')
  assert len(rows) == 3 and all(float(r[column]) > 0 for r in rows)
  losses = [float(r['eval_loss']) for r in rows]
  assert all(np.isfinite(losses)) and losses[-1] != losses[0]  # it trained
  for row in rows:  # fairness metrics on every evaluation round
    rsd = float(row['eval_client_accuracy_error_rsd'])
    assert rsd >= 0 and np.isfinite(rsd)
  assert len(os.listdir(directory / 'client_eval')) == 3


def test_fair_flags_are_ignored_by_other_algorithms(tmp_path):
  trainer = run_trainer(
    [
      '--task=synthetic',
      '--total_rounds=1',
      '--fairness_alpha=3',
      '--qfedavg_q=2',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert trainer.stderr_lines == [
    "federated_trainer: warning: --qfedavg_q is ignored by algorithm 'fedopt' (not recorded)",
    "federated_trainer: warning: --fairness_alpha is ignored by algorithm 'fedopt' (not recorded)",
  ], trainer.report()


def test_client_with_zero_initial_loss_stops_the_run_naming_it(tmp_path):
  """AdaFedAdam's I_k = F_k(x_t) / F_k(x_0) is undefined for a client whose loss at x_0 is 0:
  the loop stops in the round that samples it, naming the client and the round; the rounds
  before stay written and the round's row is not."""
  task = tasks.build_task(tasks.TaskConfig('synthetic', seed=1, num_clients=6))
  train = dict(task.train_clients)
  # Client s0003: every label 0, and x_0 whose class-0 bias is so large that softmax gives
  # probability 1 (in float32) to class 0 on every example: F(x_0) = 0 exactly there.
  target = 's0003'
  train[target] = collections.OrderedDict(x=train[target]['x'], y=np.zeros_like(train[target]['y']))
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  bias = np.zeros(10, np.float32)
  bias[0] = 1e4
  initial = tff.learning.models.ModelWeights([initial.trainable[0], bias], [])
  evaluator = evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn)
  assert evaluator.evaluate(initial, train[target])['loss'] == 0.0
  alg = algorithms.build_adafedadam(
    lambda: task.model_fn(1),
    algorithms.ClientTrainingConfig(optimizers.ClientOptimizerConfig('sgd', 0.01), batch_size=10),
    optimizers.build_adaadam(),
  )
  ids = list(train)
  order = {1: [ids[0], ids[1]], 2: [ids[2], target]}
  with pytest.raises(training_loop.ClientLossError) as error:
    training_loop.run_training(
      engines.InProcessEngine(alg),
      initial,
      train,
      lambda r: order[r],
      evaluator,
      lambda r: task.central_test,
      task.client_test,
      training_loop.LoopConfig(
        2, rounds_per_eval=1, rounds_per_checkpoint=1, seed=1, output_dir=str(tmp_path)
      ),
      log=open(os.devnull, 'w'),  # noqa: SIM115
    )
  message = str(error.value)
  assert message.startswith(f'round 2: client {target} has loss 0 at the initial model x_0')
  assert 'checkpoints and metrics up to round 1 are intact' in message
  rows = _rows(tmp_path / 'metrics.csv')
  assert [r['round_num'] for r in rows] == ['1']


def test_client_with_non_finite_loss_stops_the_run_naming_it(tmp_path):
  """Any algorithm: a client whose data make its loss non-finite is named with its round."""
  task = tasks.build_task(tasks.TaskConfig('synthetic', seed=1, num_clients=6))
  train = dict(task.train_clients)
  target = 's0004'
  x = train[target]['x'].copy()
  x[0, 0] = np.inf
  train[target] = collections.OrderedDict(x=x, y=train[target]['y'])
  alg = algorithms.build_fedopt(
    lambda: task.model_fn(1),
    algorithms.ClientTrainingConfig(optimizers.ClientOptimizerConfig('sgd', 0.01), batch_size=10),
    optimizers.build_fedavg_sgd(1.0),
  )
  ids = list(train)
  order = {1: [ids[0], ids[1]], 2: [target, ids[2]]}
  with pytest.raises(training_loop.ClientLossError) as error:
    training_loop.run_training(
      engines.InProcessEngine(alg),
      tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1)),
      train,
      lambda r: order[r],
      evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn),
      lambda r: task.central_test,
      task.client_test,
      training_loop.LoopConfig(
        2, rounds_per_eval=1, rounds_per_checkpoint=1, seed=1, output_dir=str(tmp_path)
      ),
      log=open(os.devnull, 'w'),  # noqa: SIM115
    )
  assert str(error.value).startswith(f'round 2: client {target} has a non-finite loss')
  assert [r['round_num'] for r in _rows(tmp_path / 'metrics.csv')] == ['1']


@pytest.mark.parametrize('engine', ['tff', 'inprocess'])
def test_adafedadam_resumes_exactly(tmp_path, engine):
  """x_0 lives in the checkpointed server state: 2 rounds + a rerun to 4 = 4 rounds at once."""
  args = [
    '--task=synthetic',
    '--num_clients=12',
    '--algorithm=adafedadam',
    f'--engine={engine}',
    '--rounds_per_eval=1',
    '--rounds_per_checkpoint=1',
    '--server_learning_rate=0.01',
  ]
  run_trainer([*args, '--total_rounds=4', f'--root_output_dir={tmp_path / "once"}'])
  run_trainer([*args, '--total_rounds=2', f'--root_output_dir={tmp_path / "twice"}'])
  resumed = run_trainer([*args, '--total_rounds=4', f'--root_output_dir={tmp_path / "twice"}'])
  assert resumed.stderr_lines == [], resumed.report()
  assert 'after round 2' in resumed.stdout, resumed.report()  # it resumed, not restarted
  assert experiment_in(tmp_path / 'once').name == experiment_in(tmp_path / 'twice').name
  once = _rows(experiment_in(tmp_path / 'once') / 'metrics.csv')
  twice = _rows(experiment_in(tmp_path / 'twice') / 'metrics.csv')
  drop = lambda rows: [{k: v for k, v in r.items() if k != 'seconds_per_round'} for r in rows]
  assert drop(once) == drop(twice)


def test_table5_driver_end_to_end(tmp_path):
  """The reproduction command on a tiny budget, typed in tmp_path with the default --runs_dir and
  --out: every cell runs, FedProx's mu is tuned, the table (published beside ours), the tuning
  CSV and the three figures are written under runs/ there; a rerun resumes (nothing left to
  run); bad flags are one line with exit 2; the committed results are untouched, --publish with
  these settings is refused, and the documented publish command is the recorded settings."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  from reproductions import publish  # pylint: disable=g-import-not-at-top

  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  committed_dir = os.path.join(repo, 'reproductions', 'ju2023_adafedadam', 'results')
  committed = publish.digests(committed_dir)
  command = [
    sys.executable,
    '-m',
    'reproductions.ju2023_adafedadam.reproduce_synthetic',
    '--rounds=2',
    '--seeds=1',
    '--fedprox_mus=1',
    '--pareto_alphas=2',
    '--pareto_qs=',
    '--clients_per_round=5',
    '--rounds_per_eval=1',
  ]
  env = trainer_processes.driver_env()

  def run(args, cwd=tmp_path, timeout=600):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

  done = run(command, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  out = tmp_path / 'runs' / 'ju_synthetic' / 'report'
  assert os.listdir(tmp_path) == ['runs']
  table = _rows(out / 'table5_synthetic.csv')
  assert [r['algorithm'] for r in table] == [
    'FedAvg',
    'FedAdam',
    'q-FedAvg',
    'FedNova',
    'FedProx',
    'AdaFedAdam',
  ]
  ada = table[-1]
  assert float(ada['avg_published']) == 95.07
  assert float(ada['avg_difference']) == pytest.approx(float(ada['avg_ours']) - 95.07, abs=0.011)
  tuning = _rows(out / 'fedprox_mu.csv')
  assert [float(r['mu']) for r in tuning] == [1.0]
  assert list(tuning[0]) == ['mu', 'seed', 'rounds', 'avg_last5evals', 'avg', 'worst30']
  markdown = (out / 'table5_synthetic.md').read_text()
  assert f'; code version {provenance.code_version(str(repo))}' in markdown  # and the date
  assert 'FedProx mu tuned on seed 1 over 1: mu = 1 ' in markdown
  assert str(tmp_path) not in markdown  # commands with paths as typed there (relative)
  assert 'adafedadam_alpha2_seed1' in markdown
  for name in ('density.png', 'curves.png', 'pareto.png', 'pareto_std.png'):
    assert (out / name).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  again = run(command)
  assert again.returncode == 0, again.stderr[-3000:]
  assert _rows(out / 'table5_synthetic.csv') == table  # finished cells: the same numbers
  bad = run([*command[:3], '--seeds=x'], cwd=repo, timeout=300)
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1] == (
    "reproduce_synthetic: error: --seeds: 'x' is not a number"
  )
  refused = run([*command, '--publish'], timeout=300)
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.strip() == (
    'reproduce_synthetic: error: --publish: not the committed settings '
    '(reproductions/ju2023_adafedadam/results/publish.json): --rounds=2 (committed: 1000); '
    '--seeds=1 (committed: 1,2,3); --fedprox_mus=1 (committed: 0.001,0.005,0.01,0.1,1); '
    '--pareto_alphas=2 (committed: 2,4,8); --pareto_qs= (committed: 2,4); '
    '--clients_per_round=5 (committed: 100); --rounds_per_eval=1 (committed: 10); '
    'nothing was written'
  )
  assert publish.digests(committed_dir) == committed and len(committed) >= 8
  # The documented publish command (README, publish.json) is accepted as is (--dry_run) and
  # carries the flags the committed table quotes.
  with open(os.path.join(committed_dir, 'publish.json')) as f:
    entry = json.load(f)['reproduce_synthetic']
  with open(os.path.join(repo, 'reproductions', 'ju2023_adafedadam', 'README.md')) as f:
    readme = re.sub(r' *\\\n *', ' ', f.read())  # continued lines joined
  assert entry['command'] in readme
  flags = entry['command'].split()[3:]
  dry = run([sys.executable, '-m', entry['command'].split()[2], *flags, '--dry_run'], cwd=repo)
  assert dry.returncode == 0, dry.stderr
  assert dry.stdout.splitlines()[-1] == f'# then the tables and figures into {repo}/{entry["out"]}'
  with open(os.path.join(committed_dir, 'table5', 'synthetic', 'table5_synthetic.md')) as f:
    quoted = re.search(
      r'- Command: `\.venv/bin/python -m run.reproduce_ju_synthetic (.*)`', f.read()
    )
  assert ['--publish', *quoted.group(1).split()] == flags
  # --engine=vectorised: every cell's trainer gets it with --clients_per_chunk, in a runs
  # directory of its own (a run directory records its engine).
  dry = run([*command, '--engine=vectorised', '--clients_per_chunk=7', '--dry_run'])
  assert dry.returncode == 0, dry.stderr
  trainers = [l for l in dry.stdout.splitlines() if 'run.federated_trainer' in l]
  assert trainers and all(
    '--engine=vectorised' in l
    and '--clients_per_chunk=7' in l
    and f'--root_output_dir={tmp_path}/runs/ju_synthetic_vectorised ' in l
    for l in trainers
  ), trainers
  assert dry.stdout.splitlines()[-1].endswith('runs/ju_synthetic_vectorised/report')
  bad = run([*command, '--engine=vectorised', '--clients_per_chunk=0'])
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines()[-1] == (
    'reproduce_synthetic: error: --clients_per_chunk must be >= 1, got 0'
  )
  # --data_set: another candidate of settings_study, in its own runs directory; --publish needs
  # its own publish.json entry.
  dry = run([*command, '--data_set=leaf', '--dry_run'])
  assert dry.returncode == 0, dry.stderr
  trainers = [l for l in dry.stdout.splitlines() if 'run.federated_trainer' in l]
  assert trainers and all(
    ' --synthetic_generator=leaf ' in l
    and '--synthetic_alpha' not in l
    and f'--root_output_dir={tmp_path}/runs/ju_table5_leaf ' in l
    for l in trainers
  ), trainers
  refused = run([*command, '--data_set=synthetic_iid', '--publish'])
  assert refused.returncode == 2 and "no 'reproduce_synthetic_synthetic_iid' in" in refused.stderr
  refused = run([*command, '--data_set=leaf', '--publish'])  # its entry, other settings
  assert refused.returncode == 2
  assert (
    refused.stderr.strip()
    .splitlines()[-1]
    .startswith('reproduce_synthetic: error: --publish: not the committed settings')
  ), refused.stderr
  assert '--rounds=2 (committed: 1000)' in refused.stderr
  # LEAF's documented publish command (README, publish.json) is accepted as is (--dry_run).
  with open(os.path.join(committed_dir, 'publish.json')) as f:
    leaf = json.load(f)['reproduce_synthetic_leaf']
  assert leaf['command'] in readme
  dry = run([sys.executable, '-m', *leaf['command'].split()[2:], '--dry_run'], cwd=repo)
  assert dry.returncode == 0, dry.stderr
  assert dry.stdout.splitlines()[-1] == f'# then the tables and figures into {repo}/{leaf["out"]}'


def test_table5_driver_cross_silo_setup(tmp_path):
  """--data_set=fmnist_silo: the paper's Cifar10 cross-silo setup on Fashion-MNIST (16 clients,
  Dir(0.1), lr 0.02, batch 32, all clients every round, 200 rounds unless given), in its own
  runs directory; its report sets the published Cifar10 row beside ours under its own name."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top

  from reproductions import publish  # pylint: disable=g-import-not-at-top

  env = trainer_processes.driver_env()
  command = [sys.executable, '-m', 'reproductions.ju2023_adafedadam.reproduce_synthetic']

  def run(*args):
    return subprocess.run(
      [*command, '--data_set=fmnist_silo', *args],
      cwd=tmp_path,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
    )

  dry = run('--seeds=1', '--dry_run')
  assert dry.returncode == 0, dry.stderr
  trainers = [l for l in dry.stdout.splitlines() if 'run.federated_trainer' in l]
  assert len(trainers) == 5 + 5 + 5  # the main cells less FedProx, the mu grid, the Pareto sweep
  for line in trainers:
    assert (
      ' --task=fmnist --num_clients=16 --examples_per_client=3750 --dirichlet_alpha=0.1 ' in line
    )
    assert ' --client_learning_rate=0.02 --client_batch_size=32 --client_epochs_per_round=1 ' in (
      line
    )
    assert ' --clients_per_round=16 --total_rounds=200 ' in line
    assert f' --root_output_dir={tmp_path}/runs/ju_table5_fmnist_silo ' in line
    assert '--synthetic' not in line
  bad = run('--clients_per_round=17')
  assert bad.returncode == 2 and bad.stdout == ''
  assert bad.stderr.strip().splitlines()[-1] == (
    'reproduce_synthetic: error: --clients_per_round must be in [1, 16] for '
    '--data_set=fmnist_silo, got 17'
  )
  # The report before any cell ran: the published Cifar10 row, ours empty, the setup named.
  report = run('--report_only', '--rounds=3')
  assert report.returncode == 0, report.stderr
  out = tmp_path / 'runs' / 'ju_table5_fmnist_silo' / 'report'
  table = _rows(out / 'table5_fmnist_silo.csv')
  assert [(r['algorithm'], float(r['avg_published']), r['avg_ours']) for r in table] == [
    ('FedAvg', 48.3, ''),
    ('FedAdam', 59.35, ''),
    ('q-FedAvg', 31.94, ''),
    ('FedNova', 40.32, ''),
    ('FedProx', 55.77, ''),
    ('AdaFedAdam', 65.27, ''),
  ]
  markdown = (out / 'table5_fmnist_silo.md').read_text()
  assert markdown.startswith(
    '# Ju et al. (AdaFedAdam) Table 5, the cross-silo setup on Fashion-MNIST\n'
  )
  assert 'over the 16 clients (unweighted; Worst 30%: the 5 lowest)' in markdown
  assert 'Rounds 3; seeds 1, 2, 3; 16 clients per round' in markdown
  assert not (out / 'table5_synthetic.md').exists()
  # The committed command (publish.json) passes the settings check, but with cells unfinished
  # (an empty runs directory) --publish writes nothing: exit 1, naming how many.
  paper = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    'reproductions',
    'ju2023_adafedadam',
  )
  results = os.path.join(paper, 'results')
  with open(os.path.join(results, 'publish.json')) as f:
    entry = json.load(f)['reproduce_synthetic_fmnist_silo']
  with open(os.path.join(paper, 'README.md')) as f:
    assert entry['command'] in re.sub(r' *\\\n *', ' ', f.read())
  committed = publish.digests(results)
  refused = subprocess.run(
    [*command, *entry['command'].split()[3:], '--report_only', f'--runs_dir={tmp_path / "none"}'],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert refused.returncode == 1, refused.stderr
  assert refused.stderr.strip().splitlines()[-1] == (
    'reproduce_synthetic: error: --publish: 14 of 14 cells have not finished (e.g. '
    'fedavg_seed1); nothing was written'
  )
  assert publish.digests(results) == committed
