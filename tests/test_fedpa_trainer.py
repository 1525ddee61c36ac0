"""FedPA through the trainer: both engines, the Table 3 presets on TFF-format fixtures, and the
rounds-to-target metric (metrics.csv, run.summarize, resume)."""

import csv
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from reproductions.alshedivat2021_fedpa import published as published_fedpa
from run import provenance
from run import summarize
from tests import trainer_processes
from tests.test_trainer import Trainer
from tests.test_trainer import experiment_in
from tests.test_trainer import run_trainer
from tff_adaptive.loop import targets

_FEDPA = [
  '--task=synthetic',
  '--algorithm=fedpa',
  '--client_epochs_per_round=3',
  '--fedpa_burnin_rounds=2',
  '--fedpa_shrinkage=0.1',
  '--total_rounds=4',
  '--rounds_per_eval=1',
  '--rounds_to_target=0.05,0.999',
]


def _rows(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('engine', ['tff', 'inprocess'])
def test_fedpa_trains_on_both_engines(tmp_path, engine):
  trainer = run_trainer([*_FEDPA, f'--engine={engine}', f'--root_output_dir={tmp_path}'])
  assert trainer.stderr_lines == [], trainer.report()
  experiment = experiment_in(tmp_path)
  suffix = '' if engine == 'tff' else '_inprocess'
  assert re.fullmatch(f'synthetic_fedpa_sgd_sgd_seed1_[0-9a-f]{{6}}{suffix}', experiment.name)
  hparams = json.loads((experiment / 'hparams.json').read_text())
  assert hparams['fedpa'] == {
    'burnin_rounds': 2,
    'burnin_epochs': 1,
    'shrinkage': 0.1,
    'shrinkage_form': 'paper',
    'solver': 'dp',
  }
  rows = _rows(experiment / 'metrics.csv')
  corrections = [float(r['client_delta_correction_mean']) for r in rows]
  assert corrections[:2] == [0.0, 0.0] and min(corrections[2:]) > 0  # burn-in, then FedPA
  assert all(float(r['client_delta_non_finite_max']) == 0.0 for r in rows)
  # Rounds to target: the running average of eval_accuracy over the last 10 rounds.
  accuracy = [float(r['eval_accuracy']) for r in rows]
  for k, row in enumerate(rows, start=1):
    assert float(row['eval_accuracy_avg10']) == pytest.approx(sum(accuracy[:k]) / k)
  assert [r['rounds_to_eval_accuracy_0.05'] for r in rows] == ['1.0'] * 4  # reached at once
  assert 'rounds_to_eval_accuracy_0.999' not in rows[0]  # never reached: no column
  assert summarize.summarize(str(tmp_path), targets=(0.05, 0.999)).iloc[0]['rounds_to_0.05'] == 1


@pytest.mark.parametrize('epochs,burnin', [(1, 0), (3, 1)])
def test_fedpa_defaults_run(tmp_path, epochs, burnin):
  """--algorithm=fedpa alone runs: one burn-in epoch (the authors' code) when E > 1, none at E = 1."""
  trainer = run_trainer(
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--engine=inprocess',
      '--total_rounds=2',
      f'--client_epochs_per_round={epochs}',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert trainer.stderr_lines == [], trainer.report()
  hparams = json.loads((experiment_in(tmp_path) / 'hparams.json').read_text())
  assert hparams['fedpa']['burnin_epochs'] == burnin
  assert hparams['client']['epochs'] == epochs
  assert len(_rows(experiment_in(tmp_path) / 'metrics.csv')) == 2


def test_fedpa_flags_are_ignored_by_other_algorithms(tmp_path):
  trainer = run_trainer(
    [
      '--task=synthetic',
      '--total_rounds=1',
      '--fedpa_shrinkage=0.5',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert trainer.stderr_lines == [
    "federated_trainer: warning: --fedpa_shrinkage is ignored by algorithm 'fedopt' (not recorded)"
  ], trainer.report()
  hparams = json.loads((experiment_in(tmp_path) / 'hparams.json').read_text())
  assert 'fedpa' not in hparams


def test_rounds_to_target_definition():
  """First evaluated round whose mean over rounds (r - 10, r] reaches the threshold."""
  history = [(5, 0.80), (10, 0.86), (15, 0.85), (20, 0.70), (25, 0.90), (30, 0.95)]
  assert targets.running_average(history, 10) == pytest.approx(0.83)  # rounds 5 and 10
  assert targets.running_average(history, 25) == pytest.approx(0.80)  # rounds 20 and 25
  assert targets.rounds_to_target(history, 0.85) == 15  # (0.86 + 0.85) / 2
  assert targets.rounds_to_target(history, 0.9) == 30
  assert targets.rounds_to_target(history, 0.96) is None
  assert targets.column('eval_accuracy', 0.84) == 'rounds_to_eval_accuracy_0.84'


def test_rounds_to_target_survives_resume_and_extension(tmp_path):
  """A run of 3 rounds extended to 6 (evaluating every 2 rounds, so its old last round 3 was an
  extra evaluation) writes the same running averages and targets in rounds 2, 4, 6 as an
  uninterrupted 6-round run: the history comes back from metrics.csv, without round 3."""
  common = [
    '--task=synthetic',
    '--engine=inprocess',
    '--rounds_per_eval=2',
    '--rounds_per_checkpoint=1',
    '--rounds_to_target=0.05,0.3',
  ]
  run_trainer([*common, '--total_rounds=6', f'--root_output_dir={tmp_path / "a"}'])
  run_trainer([*common, '--total_rounds=3', f'--root_output_dir={tmp_path / "b"}'])
  run_trainer([*common, '--total_rounds=6', f'--root_output_dir={tmp_path / "b"}'])
  a = _rows(experiment_in(tmp_path / 'a') / 'metrics.csv')
  b = _rows(experiment_in(tmp_path / 'b') / 'metrics.csv')
  assert experiment_in(tmp_path / 'a').name == experiment_in(tmp_path / 'b').name
  columns = [c for c in a[-1] if 'avg10' in c or c.startswith('rounds_to_')]
  assert 'eval_accuracy_avg10' in columns, a[-1]
  assert b[2]['eval_accuracy_avg10'] != ''  # round 3 was evaluated in run b only
  for k in (1, 3, 5):  # rounds 2, 4, 6
    assert [a[k].get(c) for c in columns] == [b[k].get(c) for c in columns], k
  # Round 4's average is rounds 2 and 4 only, not b's extra round 3.
  expected = (float(a[1]['eval_accuracy']) + float(a[3]['eval_accuracy'])) / 2
  assert float(b[3]['eval_accuracy_avg10']) == pytest.approx(expected, rel=1e-12)


def test_unknown_target_metric_warns_once(tmp_path):
  trainer = run_trainer(
    [
      '--task=synthetic',
      '--total_rounds=2',
      '--rounds_per_eval=1',
      '--target_metric=eval_acuracy',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert len(trainer.stderr_lines) == 1, trainer.report()
  assert "target metric 'eval_acuracy' is not evaluated" in trainer.stderr_lines[0]
  assert 'eval_accuracy' in trainer.stderr_lines[0]


REPO = pathlib.Path(__file__).resolve().parents[1]
FEDPA = REPO / 'reproductions' / 'alshedivat2021_fedpa'
PRESET_RUNS = [
  'fedpa_emnist_cr',
  'fedpa_so_nwp',
  'fedpa_so_lr',
  'fedavg_me_emnist_cr',
]
# fedpa_cifar100 is parsed and checked against Table 6 above but not trained here: its round is
# ResNet-18's (~60 CPU-s to build and train even in-process on the fixtures), which
# tests/test_tasks.py runs as TFF computations, and FedPA's plumbing is the same for every model.
# Flags the plumbing runs add after a preset's flag file (which they override: the runs check
# that flags after the file win). The engine is no part of a preset (both engines run FedPA in
# test_fedpa_trains_on_both_engines), so the two StackOverflow models run on the in-process
# engine: so_lr (5M weights) took 15 against 30 CPU-s as TFF computations, so_nwp 31 against 40.
# The EMNIST presets run on the default engine, TFF's.
_SHORTER = {
  'fedpa_so_lr': {'engine': 'inprocess'},
  'fedpa_so_nwp': {'engine': 'inprocess'},
}


def test_fedpa_presets_are_table3_and_parse_as_trainer_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top

  from run import flags as trainer_flags  # noqa: F401  (defines the flags)

  names = published_fedpa.preset_names()
  assert len(names) == 8
  readme = (FEDPA / 'README.md').read_text()
  for name in names:
    path = FEDPA / 'presets' / f'{name}.flags'
    assert path.read_text() == published_fedpa.preset(name), path
    assert f'`{name}.flags`' in readme
    args = flags.FLAGS.read_flags_from_files([f'--flagfile={path}'], force_gnu=False)
    values = dict(a[2:].split('=', 1) for a in args)
    assert all(name in flags.FLAGS for name in values), values
  # Spot checks against Table 6 of the paper.
  emnist = published_fedpa.preset_flags('fedpa_emnist_cr')
  assert (emnist['server_learning_rate'], emnist['client_learning_rate']) == (0.5, 0.01)
  assert (emnist['fedpa_burnin_rounds'], emnist['fedpa_shrinkage']) == (100, 0.1)
  cifar = published_fedpa.preset_flags('fedpa_cifar100')
  assert (cifar['client_epochs_per_round'], cifar['clients_per_round']) == (10, 20)
  assert (cifar['fedpa_burnin_rounds'], cifar['fedpa_shrinkage']) == (400, 0.01)
  so_lr = published_fedpa.preset_flags('fedpa_so_lr')
  assert (so_lr['server_optimizer'], so_lr['tau'], so_lr['server_learning_rate']) == (
    'adagrad',
    1e-5,
    5.0,
  )
  fedavg_me = published_fedpa.preset_flags('fedavg_me_emnist_cr')
  assert fedavg_me['algorithm'] == 'fedopt' and 'fedpa_shrinkage' not in fedavg_me
  assert {k: v for k, v in emnist.items() if not k.startswith('fedpa')} == {
    **fedavg_me,
    'algorithm': 'fedpa',
  }


@pytest.fixture(scope='module')
def preset_runs(tff_data_dir, tmp_path_factory):
  """Three FedPA presets and one FedAvg-ME preset, 2 rounds each on the TFF-format fixtures
  (server burn-in 1 so both phases run), two trainers at a time."""
  root = tmp_path_factory.mktemp('presets')
  runs = {}
  pending = list(PRESET_RUNS)
  while pending:
    started = {}
    for name in [pending.pop(0) for _ in range(min(2, len(pending)))]:
      args = [
        f'--flagfile={FEDPA / "presets" / f"{name}.flags"}',
        f'--data_dir={tff_data_dir}',
        '--total_rounds=2',
        '--clients_per_round=2',
        f'--root_output_dir={root}',
        f'--experiment_name={name}',
      ]
      if name.startswith('fedpa'):
        args.append('--fedpa_burnin_rounds=1')
      args += [f'--{flag}={value}' for flag, value in _SHORTER.get(name, {}).items()]
      started[name] = Trainer(args)
    for name, trainer in started.items():
      trainer.finish()
      runs[name] = trainer
  return root, runs


@pytest.mark.parametrize('name', PRESET_RUNS)
def test_preset_plumbing(preset_runs, name):
  root, runs = preset_runs
  trainer = runs[name]
  assert trainer.proc.returncode == 0, trainer.report()
  flags = {**published_fedpa.preset_flags(name), **_SHORTER.get(name, {})}
  hparams = json.loads((root / name / 'hparams.json').read_text())
  assert hparams['task']['name'] == flags['task']
  assert hparams['algorithm'] == flags['algorithm']
  assert hparams['server']['name'] == flags['server_optimizer']
  assert hparams['server']['learning_rate'] == flags['server_learning_rate']
  assert hparams['client']['optimizer']['learning_rate'] == flags['client_learning_rate']
  assert hparams['client']['epochs'] == flags['client_epochs_per_round']
  assert hparams['clients_per_round'] == 2  # flags after the flag file win
  rows = _rows(root / name / 'metrics.csv')
  assert len(rows) == 2 and all(math.isfinite(float(r['train_loss'])) for r in rows)
  if flags['algorithm'] == 'fedpa':
    assert hparams['fedpa']['shrinkage'] == flags['fedpa_shrinkage']
    assert hparams['fedpa']['burnin_rounds'] == 1
    assert float(rows[0]['client_delta_correction_mean']) == 0.0
    assert float(rows[1]['client_delta_correction_mean']) > 0.0
  metric = flags.get('target_metric', 'eval_accuracy')
  assert targets.average_column(metric) in rows[-1], list(rows[-1])


def test_fmnist_comparison_driver(tmp_path):
  """reproductions.alshedivat2021_fedpa.reproduce_fmnist on 2 rounds (burn-in 1), one seed, typed in
  tmp_path with the default --runs_dir and --out: both cells run, the table, the paired difference
  and the figure are written under runs/ there; a rerun resumes (nothing left to train); the
  committed results are untouched, and --publish with these settings is refused."""
  from reproductions import publish  # pylint: disable=g-import-not-at-top

  committed_dir = REPO / 'reproductions' / 'alshedivat2021_fedpa' / 'results'
  committed = publish.digests(str(committed_dir))
  args = [
    sys.executable,
    '-m',
    'reproductions.alshedivat2021_fedpa.reproduce_fmnist',
    '--rounds=2',
    '--burnin_rounds=1',
    '--seeds=1',
    '--rounds_per_eval=1',
    '--parallel=2',
  ]
  env = trainer_processes.driver_env()
  for _ in range(2):
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
  runs, out = tmp_path / 'runs' / 'fedpa_fmnist', tmp_path / 'runs' / 'fedpa_fmnist' / 'report'
  assert os.listdir(tmp_path) == ['runs']
  table = (out / 'fedpa_fmnist.md').read_text()
  assert f'; code version {provenance.code_version(str(REPO))}' in table  # and the date
  assert 'FedPA - FedAvg, paired by seed' in table and '| fedpa | ' in table
  assert str(tmp_path) not in table and '--root_output_dir=runs/fedpa_fmnist ' in table
  rows = _rows(out / 'fedpa_fmnist.csv')
  assert [(r['algorithm'], r['rounds']) for r in rows] == [('fedavg', '2'), ('fedpa', '2')]
  assert (out / 'fedpa_fmnist.png').stat().st_size > 10000
  fedpa = _rows(runs / 'fedpa_seed1' / 'metrics.csv')
  fedavg = _rows(runs / 'fedavg_seed1' / 'metrics.csv')
  assert fedpa[0]['train_loss'] == fedavg[0]['train_loss']  # round 1: burn-in, the same
  assert float(fedpa[1]['client_delta_correction_mean']) > 0
  # accuracy_last5evals (targets.window_column): the mean of the (here 2) evaluations.
  mean = 100 * (float(fedpa[0]['eval_accuracy']) + float(fedpa[1]['eval_accuracy'])) / 2
  assert float(rows[1]['accuracy_last5evals']) == pytest.approx(mean, abs=0.006)
  refused = subprocess.run(
    [*args, '--publish'], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
  )
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.strip() == (
    'reproduce_fmnist: error: --publish: not the committed settings '
    '(reproductions/alshedivat2021_fedpa/results/publish.json): --rounds=2 (committed: 300); '
    '--seeds=1 (committed: 1,2,3); --burnin_rounds=1 (committed: 100); --rounds_per_eval=1 '
    '(committed: 5); nothing was written'
  )
  assert publish.digests(str(committed_dir)) == committed and len(committed) >= 7
