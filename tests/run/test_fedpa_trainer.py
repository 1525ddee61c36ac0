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
from tests import trainer_processes
from tests.run.test_trainer import Trainer
from tests.run.test_trainer import experiment_in
from tests.run.test_trainer import run_trainer
from tff_adaptive.loop import targets
from tff_adaptive.run import provenance
from tff_adaptive.run import summarize

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


REPO = pathlib.Path(__file__).resolve().parents[2]
FEDPA = REPO / 'reproductions' / 'alshedivat2021_fedpa'
PRESET_RUNS = [
  'fedpa_emnist_cr',
  'fedpa_so_nwp',
  'fedpa_so_lr',
  'fedavg_me_emnist_cr',
]
# fedpa_cifar100 is parsed and checked against Table 6 above but not trained here: its round is
# ResNet-18's (~60 CPU-s to build and train even in-process on the fixtures), which
# tests/tasks/test_tasks.py runs as TFF computations, and FedPA's plumbing is the same for every model.
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

  from tff_adaptive.run import flags as trainer_flags  # noqa: F401  (defines the flags)

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


def test_regimes_driver(tmp_path):
  """reproductions.alshedivat2021_fedpa.regimes on one regime (Synthetic(1, 1), E = 3, rho = 1,
  one seed, 3 rounds with a 1-round burn-in): a FedAvg and a FedPA cell, identical in the burn-in;
  the table's paired difference and correction are those of the cells' metrics.csv; bad input is
  one line with exit 2 and --publish with these settings is refused."""
  from reproductions import publish  # pylint: disable=g-import-not-at-top

  committed_dir = REPO / 'reproductions' / 'alshedivat2021_fedpa' / 'results'
  committed = publish.digests(str(committed_dir))
  args = [
    sys.executable,
    '-m',
    'reproductions.alshedivat2021_fedpa.regimes',
    '--data_sets=1_1',
    '--epochs=3',
    '--shrinkages=1',
    '--seeds=1',
    '--rounds=3',
    '--burnin_rounds=1',
    '--rounds_per_eval=1',
  ]
  env = trainer_processes.driver_env()

  def run(*extra):
    return subprocess.run(
      [*args, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )

  done = run()
  assert done.returncode == 0, done.stdout + done.stderr
  runs = tmp_path / 'runs' / 'fedpa_regimes_synthetic'
  fedavg = _rows(runs / '1_1_E3_fedavg_seed1' / 'metrics.csv')
  fedpa = _rows(runs / '1_1_E3_fedpa_rho1_seed1' / 'metrics.csv')
  # The burn-in round: the same FedAvg round, up to rounding. (FedAvg's local steps run in
  # the fused XLA loop on synthetic, FedPA's, which collect epoch means, in the TF loop.)
  burnin = [float(r[0]['train_loss']) for r in (fedpa, fedavg)]
  assert burnin[0] == pytest.approx(burnin[1], rel=1e-6)
  assert float(fedpa[-1]['train_loss']) != pytest.approx(float(fedavg[-1]['train_loss']), rel=1e-4)
  table = _rows(runs / 'report' / 'regimes_synthetic.csv')
  assert [(r['algorithm'], r['shrinkage'], r['seeds']) for r in table] == [
    ('fedavg', '', '1'),
    ('fedpa', '1', '1'),
  ]
  mean_accuracy = lambda rows: 100 * sum(float(r['eval_accuracy']) for r in rows) / len(rows)
  assert float(table[1]['difference_last5']) == pytest.approx(
    mean_accuracy(fedpa) - mean_accuracy(fedavg), abs=1e-3
  )
  corrections = [float(r['client_delta_correction_mean']) for r in fedpa[1:]]
  assert min(corrections) > 0
  assert float(table[1]['correction']) == pytest.approx(sum(corrections) / 2, abs=1e-4)
  markdown = (runs / 'report' / 'regimes_synthetic.md').read_text()
  assert f'; code version {provenance.code_version(str(REPO))}' in markdown
  assert str(tmp_path) not in markdown and '| 1_1 | 3 | FedPA rho=1 | 1 | ' in markdown
  assert (runs / 'report' / 'regimes_synthetic.png').stat().st_size > 10000
  bad = run('--data_sets=2_2')
  assert bad.returncode == 2 and bad.stdout == ''
  assert bad.stderr.strip() == (
    "regimes: error: --data_sets: '2_2' is not a synthetic data set; valid: iid, 0_0, 1_1"
  )
  refused = run('--publish')
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.startswith('regimes: error: --publish: not the committed settings')
  # The committed command (publish.json, quoted in the README) passes the settings check, but
  # with its cells unfinished (an empty runs directory) it writes nothing: exit 1.
  entry = json.loads((committed_dir / 'publish.json').read_text())['regimes_synthetic']
  readme = re.sub(r' *\\\n *', ' ', (FEDPA / 'README.md').read_text())
  assert entry['command'] in readme
  unfinished = subprocess.run(
    [*args[:3], *entry['command'].split()[3:], '--report_only', f'--runs_dir={tmp_path / "none"}'],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert unfinished.returncode == 1 and unfinished.stderr.strip() == (
    'regimes: error: --publish: 48 of 48 cells have not finished (e.g. iid_E5_fedavg_seed1); '
    'nothing was written'
  )
  assert publish.digests(str(committed_dir)) == committed


def test_regimes_report_pairs_seeds_and_leaves_out_unfinished_and_diverged_cells(tmp_path):
  """The regimes report from run directories written here (2 local-epoch settings x 2 seeds, 8
  rounds, burn-in 2): the means are over the seeds that ran all rounds, a diverged cell is
  counted and not averaged, and FedPA - FedAvg pairs each FedPA seed with the same seed's FedAvg
  (left out where that FedAvg did not finish), over the last 5 evaluations."""
  runs = tmp_path / 'runs'
  runs.mkdir()

  def cell(name, accuracy, rounds=8, exit_code=0, fedpa=False):
    (runs / name).mkdir()
    lines = ['round_num,eval_accuracy,eval_loss,client_delta_correction_mean']
    for r in range(1, rounds + 1):
      correction = 0.1 * r if fedpa and r > 2 else (0.0 if fedpa else '')
      lines.append(f'{r},{accuracy + 0.01 * r},{1 / r},{correction}')
    (runs / name / 'metrics.csv').write_text('\n'.join(lines) + '\n')
    (runs / f'{name}.status.json').write_text(json.dumps({'exit_code': exit_code}))

  cell('iid_E3_fedavg_seed1', 0.50)
  cell('iid_E3_fedavg_seed2', 0.60)
  cell('iid_E3_fedpa_rho0.1_seed1', 0.53, fedpa=True)
  cell('iid_E3_fedpa_rho0.1_seed2', 0.70, rounds=5, exit_code=3, fedpa=True)  # diverged
  cell('iid_E4_fedavg_seed1', 0.40)
  cell('iid_E4_fedavg_seed2', 0.45, rounds=6, exit_code=143)  # stopped
  cell('iid_E4_fedpa_rho0.1_seed1', 0.38, fedpa=True)
  cell('iid_E4_fedpa_rho0.1_seed2', 0.47, fedpa=True)
  done = subprocess.run(
    [
      sys.executable,
      '-m',
      'reproductions.alshedivat2021_fedpa.regimes',
      '--data_sets=iid',
      '--epochs=3,4',
      '--shrinkages=0.1',
      '--seeds=1,2',
      '--rounds=8',
      '--burnin_rounds=2',
      '--rounds_per_eval=1',
      '--report_only',
      f'--runs_dir={runs}',
      f'--out={tmp_path / "out"}',
    ],
    cwd=tmp_path,
    env=trainer_processes.driver_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert done.returncode == 0, done.stderr
  rows = {
    (r['epochs'], r['shrinkage']): r for r in _rows(tmp_path / 'out' / 'regimes_synthetic.csv')
  }
  number = lambda row, key: float(row[key])
  fedavg3, fedpa3 = rows['3', ''], rows['3', '0.1']
  assert (fedavg3['seeds'], fedavg3['diverged']) == ('2', '0')
  assert number(fedavg3, 'final_accuracy') == pytest.approx(63.0)  # 58 and 68
  assert number(fedavg3, 'final_accuracy_std') == pytest.approx(math.sqrt(50), abs=1e-4)
  assert (fedpa3['seeds'], fedpa3['diverged']) == ('1', '1')
  assert number(fedpa3, 'difference_last5') == pytest.approx(3.0)  # seed 1 only
  assert fedpa3['difference_per_seed'] == 's1:+3.00' and fedpa3['difference_last5_std'] == ''
  assert number(fedpa3, 'correction') == pytest.approx(0.55)  # rounds 3-8: 0.1 r
  assert number(fedpa3, 'accuracy_last5evals') == pytest.approx(59.0)  # 0.53 + 0.06
  fedavg4, fedpa4 = rows['4', ''], rows['4', '0.1']
  assert (fedavg4['seeds'], fedpa4['seeds']) == ('1', '2')
  assert fedpa4['difference_per_seed'] == 's1:-2.00'  # seed 2's FedAvg stopped at round 6
  assert number(fedpa4, 'final_accuracy') == pytest.approx(50.5)  # 46 and 55
  markdown = (tmp_path / 'out' / 'regimes_synthetic.md').read_text()
  assert '| iid | 3 | FedPA rho=0.1 | 1 (1 diverged) | ' in markdown
  assert '| iid | 3 | FedAvg | 2 | 63.00 +- 7.07 | ' in markdown
