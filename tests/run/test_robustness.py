"""A run directory survives anything: concurrent starts, damaged checkpoints and metrics, kills.

End-to-end, as subprocesses of `python -m run.federated_trainer` (helpers from test_trainer):
one lock per experiment, checkpoint fallback, metrics.csv checked on resume, SIGTERM like
Ctrl-C, finished and extended runs, ignored flags, a damaged hparams.json, the experiment
directory under a file, a full disk (a small tmpfs, where this machine lets the tests mount
one), and a randomised kill test. Every run is compared with one uninterrupted reference run
(`reference`).
"""

import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import time

import pytest

from tests.run.test_trainer import RUN_A
from tests.run.test_trainer import RUN_A_NAME
from tests.run.test_trainer import Trainer
from tests.run.test_trainer import _assert_workers_gone
from tests.run.test_trainer import _client_eval
from tests.run.test_trainer import _read_metrics
from tests.run.test_trainer import _snapshot
from tests.run.test_trainer import experiment_in
from tests.run.test_trainer import run_trainer

TOTAL = 8
ARGS = list(RUN_A)
NAME = RUN_A_NAME
assert f'--total_rounds={TOTAL}' in ARGS


@pytest.fixture
def reference(synthetic_adam_run):
  """The experiment directory of the uninterrupted run of ARGS (test_trainer's run A, made once
  for both files: conftest.py)."""
  return synthetic_adam_run


def _same_as_reference(experiment, reference):
  assert _read_metrics(experiment) == _read_metrics(reference)
  assert _client_eval(experiment) == _client_eval(reference)


def _one_error_line(trainer):
  [line] = trainer.stderr_lines
  assert line.startswith('federated_trainer: error: ') and 'Traceback' not in trainer.stderr
  return line


def test_a_second_trainer_on_a_running_experiment_is_refused(reference, tmp_path):
  args = [*ARGS, f'--root_output_dir={tmp_path}']
  first = Trainer(args)
  first.wait_for_line(r'^round 2/')
  os.kill(first.proc.pid, signal.SIGSTOP)  # holds its lock while frozen
  try:
    second = Trainer(args)
    assert second.finish() == 2, second.report()
    line = _one_error_line(second)
    assert f'{tmp_path / NAME} is in use by process {first.proc.pid}' in line, line
    assert not second.workers
  finally:
    os.kill(first.proc.pid, signal.SIGCONT)
  assert first.finish() == 0, first.report()
  header, rows = _read_metrics(tmp_path / NAME)
  assert [r['round_num'] for r in rows] == [str(k) for k in range(1, TOTAL + 1)]  # once each
  _same_as_reference(tmp_path / NAME, reference)


@pytest.mark.parametrize('damage', ['truncate', 'empty'])
def test_an_unreadable_latest_checkpoint_falls_back_to_the_previous_one(
  reference, tmp_path, damage
):
  experiment = tmp_path / NAME
  shutil.copytree(reference, experiment)
  latest = experiment / 'checkpoints' / f'program_state_{TOTAL}'
  for path in [p for p in latest.rglob('*') if p.is_file()]:
    if damage == 'truncate':
      with open(path, 'r+b') as f:
        f.truncate(path.stat().st_size // 3)
    else:
      path.unlink()
  trainer = run_trainer([*ARGS, f'--root_output_dir={tmp_path}'])
  [warning] = trainer.stderr_lines
  assert f'checkpoint {latest} does not load' in warning and 'trying the previous one' in warning
  assert f'Resuming {experiment} after round {TOTAL - 2}' in trainer.stdout
  _same_as_reference(experiment, reference)
  assert (experiment / 'checkpoints' / f'unreadable_program_state_{TOTAL}').is_dir()  # kept


def test_no_loadable_checkpoint_exits_2_naming_the_directory(reference, tmp_path):
  experiment = tmp_path / NAME
  shutil.copytree(reference, experiment)
  for path in (experiment / 'checkpoints').rglob('*'):
    if path.is_file():
      path.write_bytes(b'')
  trainer = Trainer([*ARGS, f'--root_output_dir={tmp_path}'])
  assert trainer.finish() == 2, trainer.report()
  line = trainer.stderr_lines[-1]
  assert f'no checkpoint in {experiment / "checkpoints"} loads' in line, trainer.report()
  assert _read_metrics(experiment) == _read_metrics(reference)  # metrics untouched


@pytest.mark.parametrize('damage', ['missing', 'random_bytes', 'rows_lost'])
def test_metrics_csv_must_hold_the_checkpointed_rounds(reference, tmp_path, damage):
  experiment = tmp_path / NAME
  shutil.copytree(reference, experiment)
  shutil.rmtree(experiment / 'checkpoints' / f'program_state_{TOTAL}')  # resume from 6
  metrics = experiment / 'metrics.csv'
  if damage == 'missing':
    metrics.unlink()
  elif damage == 'random_bytes':
    metrics.write_bytes(random.Random(0).randbytes(300))
  else:
    metrics.write_text(''.join(metrics.read_text().splitlines(keepends=True)[:4]))  # rounds 1-3
  before = _snapshot(experiment)
  trainer = Trainer([*ARGS, f'--root_output_dir={tmp_path}'])
  assert trainer.finish() == 2, trainer.report()
  line = _one_error_line(trainer)
  assert str(metrics) in line and 'it should hold rounds 1-6' in line, line
  expected = {
    'missing': 'is missing',
    'random_bytes': 'is unreadable',
    'rows_lost': 'lacks rounds 4-6',
  }
  assert expected[damage] in line, line
  assert _snapshot(experiment) == before


def test_sigterm_stops_like_ctrl_c_and_the_run_resumes_exactly(reference, tmp_path):
  args = [*ARGS, f'--root_output_dir={tmp_path}']
  trainer = Trainer(args)
  trainer.wait_for_line(r'^round 5/')
  workers = set(trainer.workers)
  trainer.proc.send_signal(signal.SIGTERM)
  assert trainer.finish() == 143, trainer.report()
  line = _one_error_line(trainer)
  assert 'terminated (SIGTERM); rerun the same command to resume' in line, line
  assert workers, trainer.report()
  _assert_workers_gone(workers)
  # It finished the round in progress (5, or later under load) and checkpointed it, although checkpoints are
  # every 2 rounds: no finished round is lost.
  stopped = int(trainer.wait_for_line(r'^stopped after round \d+ \(SIGTERM\)').split()[3])
  assert stopped in (5, 6, 7), trainer.report()
  _, rows = _read_metrics(tmp_path / NAME)
  assert rows[-1]['round_num'] == str(stopped), trainer.report()
  checkpoints = os.listdir(tmp_path / NAME / 'checkpoints')
  assert f'program_state_{stopped}' in checkpoints, checkpoints
  resumed = run_trainer(args)
  assert f'Resuming {tmp_path / NAME} after round {stopped}' in resumed.stdout, resumed.report()
  _same_as_reference(tmp_path / NAME, reference)


def test_a_finished_experiment_says_so_and_can_be_extended(reference, tmp_path):
  shorter = [a for a in ARGS if not a.startswith('--total_rounds')]
  args = [*shorter, '--total_rounds=6', f'--root_output_dir={tmp_path}']
  run_trainer(args)
  again = run_trainer(args)
  assert f'{tmp_path / NAME} had already finished 6 rounds; its last metrics: train_loss=' in (
    again.stdout
  ), again.report()
  assert 'round ' not in again.stdout
  # Extending to 8 rounds (constant schedules) ends exactly as the uninterrupted 8-round run.
  extended = run_trainer([*shorter, f'--total_rounds={TOTAL}', f'--root_output_dir={tmp_path}'])
  assert 'Resuming' in extended.stdout
  _same_as_reference(tmp_path / NAME, reference)
  hparams = json.loads((tmp_path / NAME / 'hparams.json').read_text())
  assert hparams['runtime']['total_rounds'] == TOTAL


def test_extending_a_step_decay_run_is_refused_with_the_reason(tmp_path):
  args = [
    '--task=synthetic',
    '--client_lr_schedule=step_decay',
    '--rounds_per_eval=2',
    '--experiment_name=step',  # the default name would differ too (its hash covers the schedule)
  ]
  run_trainer([*args, '--total_rounds=2', f'--root_output_dir={tmp_path}'])
  trainer = Trainer([*args, '--total_rounds=4', f'--root_output_dir={tmp_path}'])
  assert trainer.finish() == 2, trainer.report()
  line = _one_error_line(trainer)
  assert 'client.lr_schedule.total_rounds: 2 -> 4' in line, line
  assert 'step_decay depends on the total number of rounds' in line, line


def test_a_flag_the_optimizer_ignores_is_warned_about_and_not_recorded(tmp_path):
  trainer = run_trainer(
    [
      '--task=synthetic',
      '--total_rounds=1',
      '--server_beta_2=0.5',
      '--dirichlet_alpha=0.5',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert trainer.stderr_lines == [
    "federated_trainer: warning: --dirichlet_alpha is ignored by task 'synthetic' (not recorded)",
    "federated_trainer: warning: --server_beta_2 is ignored by server optimizer 'sgd' "
    '(not recorded)',
  ]
  # TF 2.14's three "Unable to register cuDNN/cuFFT/cuBLAS factory" import lines are dropped.
  assert 'Unable to register' not in trainer.stderr, trainer.stderr
  hparams = json.loads((experiment_in(tmp_path) / 'hparams.json').read_text())
  assert 'beta_2' not in hparams['server']
  assert hparams['task'] == {
    'name': 'synthetic',
    'seed': 1,
    'synthetic_alpha': 1.0,
    'synthetic_beta': 1.0,
    'num_clients': None,
  }
  # The same experiment without the ignored flag resumes (nothing to refuse).
  again = run_trainer(['--task=synthetic', '--total_rounds=1', f'--root_output_dir={tmp_path}'])
  assert 'had already finished 1 rounds' in again.stdout


def test_a_run_recorded_by_an_earlier_version_resumes(reference, tmp_path):
  """hparams.json before 87e7419 held every task option (and data_dir): those the task does not
  read never shaped the run, so the run resumes under its name and the file is rewritten."""
  experiment = tmp_path / 'old_run'
  shutil.copytree(reference, experiment)
  stored = json.loads((experiment / 'hparams.json').read_text())
  stored['task'].update(
    data_dir=None, dirichlet_alpha=0.1, examples_per_client=None
  )  # synthetic reads neither
  (experiment / 'hparams.json').write_text(json.dumps(stored))
  again = run_trainer([*ARGS, '--experiment_name=old_run', f'--root_output_dir={tmp_path}'])
  assert f'{experiment} had already finished {TOTAL} rounds' in again.stdout, again.report()
  rewritten = json.loads((experiment / 'hparams.json').read_text())
  assert 'dirichlet_alpha' not in rewritten['task'] and 'data_dir' in rewritten['runtime']


def test_a_damaged_hparams_json_exits_2_naming_it(reference, tmp_path):
  experiment = tmp_path / NAME
  shutil.copytree(reference, experiment)
  (experiment / 'hparams.json').write_text('{"task": ')
  before = _snapshot(experiment)
  trainer = Trainer([*ARGS, f'--root_output_dir={tmp_path}'])
  assert trainer.finish() == 2, trainer.report()
  line = _one_error_line(trainer)
  assert f'{experiment / "hparams.json"} is unreadable' in line, line
  assert _snapshot(experiment) == before


def test_an_output_root_under_a_file_exits_2_before_writing(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  trainer = Trainer(['--task=synthetic', f'--root_output_dir={blocker / "runs"}'])
  assert trainer.finish() == 2, trainer.report()
  line = _one_error_line(trainer)
  assert f'cannot create the experiment directory {blocker / "runs"}' in line, line
  assert 'Not a directory' in line
  assert sorted(p.name for p in tmp_path.iterdir()) == ['a_file']


def test_random_kills_including_during_checkpoint_writes_resume_exactly(tmp_path):
  """Five SIGKILLs at random moments (seeded), a checkpoint every round, then completion.

  A kill comes within 0.5 s of a round's progress line (or of "Resuming"), where a round and its
  checkpoint take ~0.6 s: each run advances a round or two, and 20 rounds leave room for all
  five kills."""
  args = [
    '--task=synthetic',
    '--server_optimizer=yogi',
    '--total_rounds=20',
    '--rounds_per_eval=10',
    '--rounds_per_checkpoint=1',
  ]
  run_trainer([*args, f'--root_output_dir={tmp_path / "reference"}'])
  rng = random.Random(12)
  kills = 0
  while kills < 5:
    trainer = Trainer([*args, f'--root_output_dir={tmp_path / "killed"}'])
    try:
      trainer.wait_for_line(r'^(round \d+/20|Resuming)', timeout_s=120)
    except AssertionError:
      break  # finished before it could be killed: the loop below checks the result
    time.sleep(rng.uniform(0.0, 0.5))
    os.kill(trainer.proc.pid, signal.SIGKILL)
    trainer.finish()
    kills += 1
  assert kills == 5
  run_trainer([*args, f'--root_output_dir={tmp_path / "killed"}'])
  _same_as_reference(experiment_in(tmp_path / 'killed'), experiment_in(tmp_path / 'reference'))


@pytest.fixture
def small_disk(tmp_path):
  """`resize(kib)`: tmp_path/disk as a tmpfs of that many KiB (mounted on first call, remounted
  after); root only, skipped where mounting is not allowed. Unmounted after the test."""
  mount_point = tmp_path / 'disk'
  mount_point.mkdir()
  mounted = []

  def resize(kib: int) -> pathlib.Path:
    options = f'size={kib}k' if not mounted else f'remount,size={kib}k'
    proc = subprocess.run(
      ['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', str(mount_point)],
      capture_output=True,
      text=True,
      check=False,
    )
    if proc.returncode != 0:
      assert not mounted, proc.stderr  # a remount that fails is a failure, not a skip
      pytest.skip(f'cannot mount a tmpfs here ({proc.stderr.strip()}); test_disk_full.py injects')
    mounted.append(kib)
    return mount_point

  if os.geteuid() != 0:
    pytest.skip('mounting a small filesystem needs root; test_disk_full.py injects the fault')
  yield resize
  if mounted:
    subprocess.run(['umount', '-l', str(mount_point)], check=False)


def _kib_on_tmpfs(directory: pathlib.Path) -> int:
  """What the files under `directory` take on a tmpfs: whole 4 KiB pages."""
  pages = sum(-(-p.stat().st_size // 4096) for p in directory.rglob('*') if p.is_file())
  return 4 * pages


def test_a_full_disk_exits_5_naming_the_file_and_resumes_exactly_once_space_is_freed(
  reference, small_disk
):
  """Run A into a filesystem with half the space it needs: exit 5, one line naming the file,
  no temporary left, metrics.csv a prefix of the uninterrupted run's; then, the filesystem
  grown, the same command ends exactly as the uninterrupted run. (Each kind of file on a full
  disk, by fault injection: test_disk_full.py.)"""
  needed = _kib_on_tmpfs(reference)
  disk = small_disk(needed // 2)
  args = [*ARGS, f'--root_output_dir={disk}']
  trainer = Trainer(args)
  assert trainer.finish() == 5, trainer.report()
  _assert_workers_gone(trainer.workers)
  line = _one_error_line(trainer)
  experiment = disk / NAME
  assert f'no space left on device writing {experiment}/' in line, line
  assert 'free space, then rerun the same command to resume' in line
  assert [p for p in experiment.rglob('*') if '_temp' in p.name or '.tmp' in p.name] == []
  _, rows = _read_metrics(experiment)
  _, reference_rows = _read_metrics(reference)
  assert 0 < len(rows) < len(reference_rows)
  for row, reference_row in zip(rows, reference_rows):  # columns of later rounds: empty here
    assert row == {k: v for k, v in reference_row.items() if k in row}
    assert all(reference_row[k] == '' for k in reference_row.keys() - row.keys())
  small_disk(4 * needed)
  run_trainer(args)
  _same_as_reference(experiment, reference)
