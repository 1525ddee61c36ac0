"""End-to-end tests of `python -m run.federated_trainer`, each run as a process of its own.

The trainer runs from the repository root (TF_CPP_MIN_LOG_LEVEL=2, outputs under pytest's
tmp_path), forked from the tests' preloading server (`tests.trainer_processes`: a process of its
own without the TF/TFF imports; a few bad-input cases run as fresh `python -m` processes); absl
FLAGS are never touched in this process. Covered: every server optimizer (and fmnist for two of them), SCAFFOLD, the
in-process engine (with XLA and an explicit device), bit-exact determinism, exact resumption
after SIGKILL (FedOpt and SCAFFOLD on both engines), the hyperparameter-mismatch refusal, one-line fast
errors for bad input, divergence (exit 3), SIGINT (exit 130), and that no `worker_binary`
started by a trainer outlives it. Workers are found by scanning /proc while the trainer runs
for processes named worker_binary whose parent is the trainer, identified by (pid, start time).

Runs are tiny (synthetic: 3-8 rounds; fmnist: 3 rounds on 20 clients). The bad-input runs'
"fast" check bounds the child's CPU time, which the machine's load does not inflate.
"""

import csv
import json
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

from tests import trainer_processes
from tff_adaptive import commands
from tff_adaptive.run import provenance

REPO = pathlib.Path(__file__).resolve().parents[2]
FMNIST_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')
SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adagrad', 'adam', 'yogi')
RUN_TIMEOUT_S = 300
_env = trainer_processes.env
_command = trainer_processes.command
_stderr_lines = trainer_processes.stderr_lines


# ---------------------------------------------------------------------------------------------
# /proc helpers: worker_binary children of a process.


def _stat(pid: int):
  """(comm, state, ppid, starttime) of /proc/<pid>/stat, or None if there is no such process."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      text = f.read()
  except (FileNotFoundError, ProcessLookupError):
    return None
  comm = text[text.index('(') + 1 : text.rindex(')')]
  rest = text[text.rindex(')') + 2 :].split()
  return comm, rest[0], int(rest[1]), int(rest[19])


def _worker_children(ppid: int) -> set:
  """{(pid, starttime)} of the live processes named worker_binary whose parent is ppid."""
  found = set()
  for name in os.listdir('/proc'):
    if name.isdigit():
      stat = _stat(int(name))
      if stat and stat[0] == 'worker_binary' and stat[2] == ppid and stat[1] not in 'ZX':
        found.add((int(name), stat[3]))
  return found


def _alive(worker) -> bool:
  """Whether the process (pid, starttime) still runs (a zombie counts as gone)."""
  pid, starttime = worker
  stat = _stat(pid)
  return stat is not None and stat[3] == starttime and stat[1] not in 'ZX'


def _assert_workers_gone(workers, within_s: float = 5.0) -> None:
  deadline = time.monotonic() + within_s
  while True:
    alive = sorted(w for w in workers if _alive(w))
    if not alive:
      return
    if time.monotonic() > deadline:
      raise AssertionError(
        f'worker_binary processes {alive} (pid, start time) are still '
        f'running {within_s} s after their trainer ended'
      )
    time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# A running trainer: stdout/stderr collected by threads, its worker children recorded.


class Trainer:
  """`python -m run.federated_trainer ARGS` as a subprocess."""

  def __init__(self, args):
    self.args = list(args)
    self.proc = trainer_processes.popen(
      self.args,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    self.workers = set()
    self._out, self._err = [], []
    self._out_closed = False
    self._cond = threading.Condition()
    self._stop_watching = threading.Event()
    self._threads = [
      threading.Thread(target=f, daemon=True)
      for f in (self._read_stdout, self._read_stderr, self._watch_workers)
    ]
    for t in self._threads:
      t.start()

  def _read_stdout(self):
    for line in self.proc.stdout:
      with self._cond:
        self._out.append(line.rstrip('\n'))
        self._cond.notify_all()
    with self._cond:
      self._out_closed = True
      self._cond.notify_all()

  def _read_stderr(self):
    for line in self.proc.stderr:
      self._err.append(line)

  def _watch_workers(self):
    while not self._stop_watching.is_set():
      self.workers |= _worker_children(self.proc.pid)
      self._stop_watching.wait(0.05)

  def wait_for_line(self, pattern: str, timeout_s: float = RUN_TIMEOUT_S) -> str:
    """Returns the first stdout line matching `pattern`, waiting for it to be printed."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    with self._cond:
      while True:
        for line in self._out:
          if regex.search(line):
            return line
        remaining = deadline - time.monotonic()
        if self._out_closed or remaining <= 0:
          break
        self._cond.wait(remaining)
    self.proc.kill()
    self.finish()
    raise AssertionError(f'no stdout line matches {pattern!r}\n{self.report()}')

  def finish(self, timeout_s: float = RUN_TIMEOUT_S) -> int:
    """Waits for the trainer to exit and its output to be read; returns its exit code."""
    try:
      self.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      self.proc.wait()
      raise AssertionError(f'trainer ran over {timeout_s} s\n{self.report()}') from None
    finally:
      self._stop_watching.set()
      for t in self._threads:
        t.join(10)
    return self.proc.returncode

  @property
  def stdout(self) -> str:
    return '\n'.join(self._out)

  @property
  def stderr(self) -> str:
    return ''.join(self._err)

  @property
  def stderr_lines(self) -> list:
    return _stderr_lines(self.stderr)

  def report(self) -> str:
    return (
      f'command: {" ".join(self.args)}\nexit code: {self.proc.returncode}\n'
      f'--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}'
    )


def run_trainer(args, expect_rc: int = 0) -> Trainer:
  """Runs the trainer to completion, checks its exit code and that its workers are gone."""
  trainer = Trainer(args)
  rc = trainer.finish()
  assert rc == expect_rc, trainer.report()
  if '--engine=inprocess' in args:
    assert not trainer.workers, f'the in-process engine started a worker\n{trainer.report()}'
  else:
    assert trainer.workers, f'no worker_binary child seen\n{trainer.report()}'
  _assert_workers_gone(trainer.workers)
  return trainer


# ---------------------------------------------------------------------------------------------
# Output helpers.


def experiment_in(root: pathlib.Path) -> pathlib.Path:
  """The one experiment directory under `root` (default names end in a hash of the settings)."""
  found = [p for p in root.iterdir() if p.is_dir()]
  assert len(found) == 1, found
  return found[0]


def _read_metrics(experiment_dir: pathlib.Path):
  """(header, rows) of metrics.csv, rows as dicts without seconds_per_round."""
  with open(experiment_dir / 'metrics.csv', newline='') as f:
    reader = csv.DictReader(f)
    header = list(reader.fieldnames)
    rows = [{k: v for k, v in row.items() if k != 'seconds_per_round'} for row in reader]
  return header, rows


def _snapshot(directory: pathlib.Path) -> dict:
  """{relative path: bytes} of every file under `directory` but the run lock (pid of its holder)."""
  return {
    str(p.relative_to(directory)): p.read_bytes()
    for p in sorted(directory.rglob('*'))
    if p.is_file() and p.name != '.lock'
  }


def _client_eval(experiment_dir: pathlib.Path) -> dict:
  return _snapshot(experiment_dir / 'client_eval')


def _leaf(hparams: dict, dotted: str):
  for key in dotted.split('.'):
    hparams = hparams[key]
  return hparams


# ---------------------------------------------------------------------------------------------
# 1. Smoke: every server optimizer, fmnist, the variants and client options, 3 rounds each.

_SMOKE_ROUNDS = 3
_SMOKE = [
  # (task, server optimizer, extra flags, {hparams.json leaf: expected value})
  (
    'synthetic',
    'sgd',
    ['--client_lr_schedule=step_decay'],
    {'client.lr_schedule.name': 'step_decay'},
  ),
  ('synthetic', 'sgdm', ['--client_optimizer=sgdm'], {'client.optimizer.momentum': 0.9}),
  (
    'synthetic',
    'adagrad',
    ['--client_lr_schedule=exp_decay'],
    {'client.lr_schedule.name': 'exp_decay'},
  ),
  ('synthetic', 'adam', ['--server_learning_rate=0.01'], {'server.learning_rate': 0.01}),
  (
    'synthetic',
    'yogi',
    ['--server_learning_rate=0.01', '--adaptive_variant=algorithm2'],
    {'server.variant': 'algorithm2'},
  ),
  # SCAFFOLD (stateful clients) and the in-process engine.
  (
    'synthetic',
    'sgd',
    ['--algorithm=scaffold'],
    {'algorithm': 'scaffold', 'engine': 'tff'},
  ),
  (
    'synthetic',
    'adam',
    ['--engine=inprocess', '--xla'],
    {'engine': 'inprocess', 'xla': True},
  ),
  (
    'synthetic',
    'sgd',
    ['--algorithm=scaffold', '--engine=inprocess', '--device=CPU:0'],
    {'algorithm': 'scaffold', 'runtime.device': 'CPU:0'},
  ),
  # fmnist: a population of 20 Dirichlet clients x 500 examples (same partitioner, fewer
  # clients to evaluate), evaluated once, after round 3 (on the 10,000 test images).
  ('fmnist', 'sgd', ['--num_clients=20', '--rounds_per_eval=3'], {'task.num_clients': 20}),
  (
    'fmnist',
    'adam',
    ['--num_clients=20', '--rounds_per_eval=3', '--server_learning_rate=0.01'],
    {'task.num_clients': 20},
  ),
  # Client optimizers of Kim et al. 2024 (every one trains fmnist on both engines in
  # test_engine_parity); here the trainer's flags and hparams.json.
  (
    'fmnist',
    'sgd',
    [
      '--num_clients=20',
      '--rounds_per_eval=3',
      '--client_optimizer=delta_sgd',
      '--client_weighting=uniform',
      '--delta_sgd_gradient=same_batch',
    ],
    {'client.optimizer.delta_sgd.gradient': 'same_batch', 'client.weighting': 'uniform'},
  ),
  (
    'fmnist',
    'adam',
    [
      '--num_clients=20',
      '--rounds_per_eval=3',
      '--client_optimizer=sps',
      '--engine=inprocess',
      '--server_learning_rate=0.001',
      '--tau=1e-8',
    ],
    {'client.optimizer.sps.mode': 'smooth_iter', 'client.optimizer.sps.c': 0.5},
  ),
  (
    'synthetic',
    'sgd',
    ['--client_optimizer=adam', '--client_learning_rate=0.001'],
    {'client.optimizer.epsilon': 1e-8, 'client.optimizer.beta_2': 0.999},
  ),
  (
    'synthetic',
    'sgd',
    ['--client_optimizer=adagrad', '--client_learning_rate=0.01', '--engine=inprocess'],
    {'client.optimizer.epsilon': 1e-10, 'client.optimizer.learning_rate': 0.01},
  ),
]


@pytest.mark.parametrize(
  'task,optimizer,extra,expected_hparams',
  _SMOKE,
  ids=[f'{t}-{o}' + ''.join(f'-{e[2:].split("=")[-1]}' for e in x) for t, o, x, _ in _SMOKE],
)
def test_smoke(tmp_path, task, optimizer, extra, expected_hparams):
  if task == 'fmnist' and not FMNIST_DIR.is_dir():
    pytest.skip(f'{FMNIST_DIR} missing (apt-get install dataset-fashion-mnist)')
  trainer = run_trainer(
    [
      f'--task={task}',
      f'--server_optimizer={optimizer}',
      f'--total_rounds={_SMOKE_ROUNDS}',
      '--rounds_per_eval=2',
      f'--root_output_dir={tmp_path}',
      *extra,
    ]
  )  # a later flag wins
  assert trainer.stderr_lines == [], trainer.report()
  algorithm = 'scaffold' if '--algorithm=scaffold' in extra else 'fedopt'
  engine = '_inprocess' if '--engine=inprocess' in extra else ''
  client = ([e.split('=')[1] for e in extra if e.startswith('--client_optimizer=')] or ['sgd'])[-1]
  experiment = experiment_in(tmp_path)
  assert re.fullmatch(
    f'{task}_{algorithm}_{optimizer}_{client}_seed1_[0-9a-f]{{6}}{engine}', experiment.name
  ), experiment.name
  rounds_per_eval = 3 if '--rounds_per_eval=3' in extra else 2
  eval_rounds = [
    k for k in range(1, _SMOKE_ROUNDS + 1) if k % rounds_per_eval == 0 or k == _SMOKE_ROUNDS
  ]

  hparams = json.loads((experiment / 'hparams.json').read_text())
  assert hparams['server']['name'] == optimizer
  assert hparams['task']['name'] == task
  assert hparams['runtime']['total_rounds'] == _SMOKE_ROUNDS
  # The code that ran: the commit of the checkout it ran from (test_provenance: the function).
  assert hparams['runtime']['code_version'] == provenance.code_version(str(trainer_processes.REPO))
  for key, value in expected_hparams.items():
    assert _leaf(hparams, key) == value, key

  header, rows = _read_metrics(experiment)
  assert header[0] == 'round_num'
  for column in (
    'train_loss',
    'eval_loss',
    'eval_accuracy',
    'eval_client_accuracy_worst30',
    'seconds_per_round',
  ):
    assert column in header
  assert [row['round_num'] for row in rows] == ['1', '2', '3']
  # Every algorithm reports its clients' local steps K (mean, min, max over the round).
  for row in rows:
    assert float(row['client_local_steps_min']) <= float(row['client_local_steps_mean'])
    assert float(row['client_local_steps_mean']) <= float(row['client_local_steps_max'])
    assert float(row['client_local_steps_min']) >= 1.0
  # SPS and Delta-SGD report their clients' mean local step size the same way (Kim et al.).
  adaptive = any(e in extra for e in ('--client_optimizer=sps', '--client_optimizer=delta_sgd'))
  assert ('client_step_size_mean' in header) == adaptive
  for row in rows if adaptive else []:
    assert 0 < float(row['client_step_size_min']) <= float(row['client_step_size_mean'])
    assert float(row['client_step_size_mean']) <= float(row['client_step_size_max'])
  eval_columns = ('eval_loss', 'eval_accuracy', 'eval_client_accuracy_worst30')
  for k, row in enumerate(rows, start=1):
    assert math.isfinite(float(row['train_loss'])) and float(row['train_loss']) > 0, row
    if k in eval_rounds:
      assert math.isfinite(float(row['eval_loss'])), row
      assert 0.0 <= float(row['eval_accuracy']) <= 1.0, row
      assert 0.0 <= float(row['eval_client_accuracy_worst30']) <= 1.0, row
    else:
      assert all(row[c] == '' for c in eval_columns), row
  assert sorted(os.listdir(experiment / 'client_eval')) == [
    f'round_{k:05d}.csv' for k in eval_rounds
  ]
  assert os.listdir(experiment / 'checkpoints') == [f'program_state_{_SMOKE_ROUNDS}']
  assert (experiment / 'client_states').is_dir() == (algorithm == 'scaffold')

  for k in range(1, _SMOKE_ROUNDS + 1):
    pattern = rf'^round {k}/{_SMOKE_ROUNDS} .*\btrain_loss=\S+ .*\d\.\d\ds/round eta \d+s$'
    assert any(re.search(pattern, l) for l in trainer.stdout.splitlines()), (
      f'no progress line for round {k}\n{trainer.report()}'
    )


# ---------------------------------------------------------------------------------------------
# 2./3. Determinism and exact resumption, against one uninterrupted 8-round run A.

_TOTAL = 8
RUN_A = [
  '--task=synthetic',
  '--server_optimizer=adam',
  '--server_learning_rate=0.01',
  f'--total_rounds={_TOTAL}',
  '--rounds_per_eval=3',
  '--rounds_per_checkpoint=2',
]
# The default name: its hash pins run A's fingerprint (hparams.json without `runtime`), so a
# change that would leave users' existing runs unresumable shows up here.
RUN_A_NAME = 'synthetic_fedopt_adam_sgd_seed1_d08f19'


@pytest.fixture
def run_a(synthetic_adam_run) -> pathlib.Path:
  """The experiment directory of run A (uninterrupted, 8 rounds, checkpoints every 2; made once
  for test_trainer and test_robustness: conftest.py)."""
  return synthetic_adam_run


def test_same_seed_gives_identical_metrics(run_a, tmp_path):
  run_trainer([*RUN_A, f'--root_output_dir={tmp_path}'])
  header, rows = _read_metrics(tmp_path / RUN_A_NAME)
  header_a, rows_a = _read_metrics(run_a)
  assert len(rows_a) == _TOTAL
  assert header == header_a
  assert rows == rows_a  # every column but seconds_per_round, as printed (bit-exact)
  assert _client_eval(tmp_path / RUN_A_NAME) == _client_eval(run_a)


def test_different_seed_gives_different_train_loss(run_a, tmp_path):
  run_trainer([*RUN_A, '--seed=2', f'--root_output_dir={tmp_path}'])
  _, rows = _read_metrics(experiment_in(tmp_path))
  _, rows_a = _read_metrics(run_a)
  assert [r['round_num'] for r in rows] == [r['round_num'] for r in rows_a]
  for row, row_a in zip(rows, rows_a):
    assert row['train_loss'] != row_a['train_loss'], row['round_num']


_RESUME_VARIANTS = {
  # name: extra flags on top of run A's
  'fedopt-tff': [],
  'fedopt-inprocess': ['--engine=inprocess'],
  'scaffold-tff': ['--algorithm=scaffold', '--server_optimizer=sgd', '--server_learning_rate=1'],
  'scaffold-inprocess': [
    '--algorithm=scaffold',
    '--server_optimizer=sgd',
    '--server_learning_rate=1',
    '--engine=inprocess',
  ],
}


@pytest.mark.parametrize('variant', list(_RESUME_VARIANTS))
def test_resume_after_sigkill_is_exact(run_a, tmp_path, variant):
  extra = _RESUME_VARIANTS[variant]
  if extra:  # the uninterrupted reference of this variant
    reference_root = tmp_path / 'reference'
    run_trainer([*RUN_A, *extra, f'--root_output_dir={reference_root}'])
    reference = experiment_in(reference_root)
  else:
    reference = run_a
  args = [*RUN_A, *extra, f'--root_output_dir={tmp_path / "killed"}']
  trainer = Trainer(args)
  trainer.wait_for_line(rf'^round 5/{_TOTAL} ')
  experiment = experiment_in(tmp_path / 'killed')
  assert experiment.name.endswith('_inprocess') == ('inprocess' in variant), experiment
  workers = set(trainer.workers) | _worker_children(trainer.proc.pid)
  os.kill(trainer.proc.pid, signal.SIGKILL)
  assert trainer.finish() == -signal.SIGKILL
  if 'inprocess' in variant:
    assert not workers, f'the in-process engine started a worker\n{trainer.report()}'
  else:
    assert workers, f'no worker_binary child seen\n{trainer.report()}'
    _assert_workers_gone(workers)  # PR_SET_PDEATHSIG
  checkpoints = os.listdir(experiment / 'checkpoints')
  assert 'program_state_4' in checkpoints and f'program_state_{_TOTAL}' not in checkpoints

  resumed = run_trainer(args)
  assert re.search(r'^Resuming .* after round [46]$', resumed.stdout, re.M), resumed.report()
  assert 'round 1/' not in resumed.stdout
  header, rows = _read_metrics(experiment)
  header_a, rows_a = _read_metrics(reference)
  assert header == header_a
  assert rows == rows_a
  assert _client_eval(experiment) == _client_eval(reference)


# ---------------------------------------------------------------------------------------------
# 4. A rerun with different hyperparameters is refused and touches nothing.


def test_hparams_mismatch_refuses_and_keeps_files(run_a, tmp_path):
  experiment = tmp_path / RUN_A_NAME
  shutil.copytree(run_a, experiment)
  before = _snapshot(experiment)
  # Without --experiment_name these settings would get a directory of their own.
  trainer = Trainer(
    [
      *RUN_A,
      '--server_learning_rate=0.02',
      '--client_optimizer=sps',
      f'--experiment_name={RUN_A_NAME}',
      f'--root_output_dir={tmp_path}',
    ]
  )
  assert trainer.finish() == 2, trainer.report()
  assert not trainer.workers
  [line] = trainer.stderr_lines
  # The changed part first, its own settings counted, not listed; then the other keys.
  detail = "client.optimizer.name: 'sgd' -> 'sps' (and 10 of its settings); "
  assert f'different hyperparameters ({detail}server.learning_rate: 0.01 -> 0.02)' in line, line
  assert 'Traceback' not in trainer.stderr
  assert _snapshot(experiment) == before


# ---------------------------------------------------------------------------------------------
# 5. Bad input: exit 2, one stderr line naming the value and the valid choices/range, fast.

_BAD_INPUT = {
  'task': (['--task=nope'], ["--task: unknown task 'nope'; valid choices:", 'fmnist, synthetic']),
  'algorithm': (
    ['--task=synthetic', '--algorithm=nope'],
    ["--algorithm: unknown algorithm 'nope'; valid choices: fedopt, scaffold, fedpa"],
  ),
  'engine': (
    ['--task=synthetic', '--engine=nope'],
    ["--engine: unknown engine 'nope'; valid choices: tff, inprocess"],
  ),
  'xla_without_inprocess': (['--task=synthetic', '--xla'], ['--xla', '--engine=inprocess']),
  'fused_loop_with_tff': (
    ['--task=synthetic', '--fused_loop=on'],
    ['--fused_loop needs --engine=inprocess or --engine=vectorised'],
  ),
  'fused_loop_value': (
    ['--task=synthetic', '--engine=inprocess', '--fused_loop=yes'],
    ["--fused_loop: unknown fused loop 'yes'; valid choices: auto, on, off"],
  ),
  'fused_loop_and_xla': (
    ['--task=synthetic', '--engine=inprocess', '--xla', '--fused_loop=on'],
    ['--fused_loop=on and --xla exclude each other: choose one'],
  ),
  'workers_format': (
    ['--task=synthetic', '--workers=10.0.0.5:8000,nope'],
    ["--workers: 'nope' is not host:port", 'e.g. --workers=10.0.0.5:8000,10.0.0.6:8000'],
  ),
  'local_workers_zero': (
    ['--task=synthetic', '--local_workers=0'],
    ['--local_workers must be an integer in [1, 256], got 0'],
  ),
  'workers_both': (
    ['--task=synthetic', '--local_workers=2', '--workers=127.0.0.1:8000'],
    ['--workers and --local_workers exclude each other'],
  ),
  'workers_inprocess': (
    ['--task=synthetic', '--engine=inprocess', '--local_workers=2'],
    ['--workers and --local_workers need --engine=tff', 'got --engine=inprocess'],
  ),
  'device': (
    ['--task=synthetic', '--engine=inprocess', '--device=GPU:7'],
    ["--device: device 'GPU:7' is not available; TensorFlow sees: CPU:0"],
  ),
  'server_optimizer': (
    ['--task=synthetic', '--server_optimizer=nope'],
    ["unknown server optimizer 'nope'", 'sgd, sgdm, adagrad, adam, yogi'],
  ),
  'client_optimizer': (
    ['--task=synthetic', '--client_optimizer=nope'],
    ["unknown client optimizer 'nope'", 'sgd, sgdm, adam, adagrad, sps, delta_sgd'],
  ),
  # Client optimizers of Kim et al. 2024: their hyperparameters, before any TFF work.
  'delta_sgd_eta0': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_eta0=0'],
    ['--delta_sgd_eta0 must be > 0, got 0.0'],
  ),
  'delta_sgd_gamma': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_gamma=-2'],
    ['--delta_sgd_gamma must be > 0, got -2.0'],
  ),
  'delta_sgd_theta0': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_theta0=0'],
    ['--delta_sgd_theta0 must be > 0, got 0.0'],
  ),
  'delta_sgd_delta': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_delta=-0.1'],
    ['--delta_sgd_delta must be >= 0, got -0.1'],
  ),
  'delta_sgd_gradient': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_gradient=next'],
    ["--delta_sgd_gradient: unknown delta sgd gradient 'next'; valid choices: paper, same_batch"],
  ),
  # FedPA (Al-Shedivat et al. 2021).
  'fedpa_burnin_longer_than_run': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=3',
      '--total_rounds=5',
      '--fedpa_burnin_rounds=5',
    ],
    ['--fedpa_burnin_rounds=5 must be < --total_rounds=5', 'never leave its FedAvg burn-in'],
  ),
  'fedpa_no_sample': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=2',
      '--fedpa_burnin_epochs=2',
    ],
    ['--fedpa_burnin_epochs=2 leaves no posterior sample', '< --client_epochs_per_round=2'],
  ),
  'fedpa_burnin_epochs_at_one_epoch': (  # E = 1 and one burn-in epoch: l = 0
    ['--task=synthetic', '--algorithm=fedpa', '--fedpa_burnin_epochs=1'],
    ['--fedpa_burnin_epochs=1 leaves no posterior sample', '< --client_epochs_per_round=1'],
  ),
  'fedpa_shrinkage_negative': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=3',
      '--fedpa_shrinkage=-0.5',
    ],
    ['--fedpa_shrinkage', 'rho must be >= 0 (form paper), got -0.5'],
  ),
  'fedpa_shrinkage_convex': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=3',
      '--fedpa_shrinkage_form=convex',
      '--fedpa_shrinkage=0',
    ],
    ['must be in (0, 1] (form convex), got 0.0'],
  ),
  'fedpa_shrinkage_form': (
    ['--task=synthetic', '--algorithm=fedpa', '--fedpa_shrinkage_form=lw'],
    ["--fedpa_shrinkage_form: unknown fedpa shrinkage form 'lw'; valid choices: paper, convex"],
  ),
  'fedpa_solver': (
    ['--task=synthetic', '--algorithm=fedpa', '--fedpa_solver=cg'],
    ["--fedpa_solver: unknown fedpa solver 'cg'; valid choices: dp, exact"],
  ),
  'fedpa_burnin_negative': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=3',
      '--fedpa_burnin_rounds=-1',
    ],
    ['--fedpa_burnin_rounds must be >= 0, got -1'],
  ),
  'sps_c': (
    ['--task=synthetic', '--client_optimizer=sps', '--sps_c=0'],
    ['--sps_c must be > 0, got 0.0'],
  ),
  'sps_mode': (
    ['--task=synthetic', '--client_optimizer=sps', '--sps_mode=smooth'],
    ["--sps_mode: unknown sps mode 'smooth'; valid choices: smooth_iter, constant"],
  ),
  'client_weighting': (
    ['--task=synthetic', '--client_weighting=size'],
    ["--client_weighting: unknown client weighting 'size'; valid choices: example, uniform"],
  ),
  'client_beta_1': (
    ['--task=synthetic', '--client_optimizer=adam', '--client_beta_1=1'],
    ['--client_beta_1 must be in [0, 1), got 1.0'],
  ),
  'delta_sgd_schedule': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--client_lr_schedule=step_decay'],
    ['--client_lr_schedule=step_decay', "client optimizer 'delta_sgd' sets its own step sizes"],
  ),
  'sps_eta_max_without_constant': (
    ['--task=synthetic', '--client_optimizer=sps', '--sps_eta_max=0.5'],
    ['--sps_eta_max caps --sps_mode=constant only, got --sps_mode=smooth_iter'],
  ),
  'scaffold_adam': (
    ['--task=synthetic', '--algorithm=scaffold', '--client_optimizer=adam'],
    ['--client_optimizer=adam cannot run under --algorithm=scaffold', 'sgd, sgdm, sps, delta_sgd'],
  ),
  'float32_overflow': (
    ['--task=synthetic', '--client_optimizer=delta_sgd', '--delta_sgd_eta0=1e39'],
    ['--delta_sgd_eta0 must be at most 3.403e+38 in magnitude, got 1e+39'],
  ),
  'adaptive_variant': (
    ['--task=synthetic', '--adaptive_variant=nope'],
    ["--adaptive_variant: unknown adaptive variant 'nope'", 'published', 'algorithm2'],
  ),
  'server_learning_rate': (
    ['--task=synthetic', '--server_learning_rate=0'],
    ['--server_learning_rate', '> 0', 'got 0.0'],
  ),
  'client_learning_rate': (
    ['--task=synthetic', '--client_learning_rate=-1'],
    ['--client_learning_rate', '> 0', 'got -1.0'],
  ),
  # The optimizers' own checks, named by the flag that sets the value.
  'server_momentum': (
    ['--task=synthetic', '--server_optimizer=sgdm', '--server_momentum=1.5'],
    ['--server_momentum must be in [0, 1), got 1.5'],
  ),
  'client_momentum': (
    ['--task=synthetic', '--client_optimizer=sgdm', '--client_momentum=-1'],
    ['--client_momentum must be in [0, 1), got -1.0'],
  ),
  'initial_accumulator_value': (
    ['--task=synthetic', '--server_optimizer=adagrad', '--initial_accumulator_value=-1'],
    ['--initial_accumulator_value must be >= 0, got -1.0'],
  ),
  'tau': (['--task=synthetic', '--server_optimizer=adam', '--tau=0'], ['--tau', '> 0', 'got 0.0']),
  'client_batch_size': (
    ['--task=synthetic', '--client_batch_size=0'],
    ['--client_batch_size', '> 0', 'got 0'],
  ),
  'total_rounds': (['--task=synthetic', '--total_rounds=0'], ['--total_rounds', '> 0', 'got 0']),
  'clients_per_round': (
    ['--task=synthetic', '--clients_per_round=1000'],
    ['clients_per_round', '[1, 100]', '1000'],
  ),
  # AdaFedAdam, FedProx, FedNova, q-FedAvg (Ju et al.).
  'fairness_alpha': (
    ['--task=synthetic', '--algorithm=adafedadam', '--fairness_alpha=-1'],
    ['--fairness_alpha must be >= 0, got -1.0'],
  ),
  'adaadam_eps': (
    ['--task=synthetic', '--algorithm=adafedadam', '--tau=0'],
    ['--tau', '> 0', 'got 0.0'],
  ),
  'adaadam_lr': (
    ['--task=synthetic', '--algorithm=adafedadam', '--server_learning_rate=-0.001'],
    ['--server_learning_rate', '> 0', 'got -0.001'],
  ),
  'adaadam_beta': (
    ['--task=synthetic', '--algorithm=adafedadam', '--server_beta_1=1'],
    ['--server_beta_1 must be in [0, 1), got 1.0'],
  ),
  'adaadam_beta_2': (
    ['--task=synthetic', '--algorithm=adafedadam', '--server_beta_2=-0.5'],
    ['--server_beta_2 must be in [0, 1), got -0.5'],
  ),
  'adafedadam_server': (
    ['--task=synthetic', '--algorithm=adafedadam', '--server_optimizer=adam'],
    ['--algorithm=adafedadam', 'valid --server_optimizer: adaadam', "(got 'adam')"],
  ),
  'adafedadam_weighting': (
    ['--task=synthetic', '--algorithm=adafedadam', '--adafedadam_weighting=size'],
    ["--adafedadam_weighting: unknown adafedadam weighting 'size'", 'paper, loss'],
  ),
  'adafedadam_certainty_floor': (
    ['--task=synthetic', '--algorithm=adafedadam', '--adafedadam_certainty_floor=clip'],
    ["--adafedadam_certainty_floor: unknown adafedadam certainty floor 'clip'", 'zero, none'],
  ),
  'adafedadam_gradient_examples': (
    ['--task=synthetic', '--algorithm=adafedadam', '--adafedadam_gradient_examples=0'],
    ['--adafedadam_gradient_examples must be > 0, got 0'],
  ),
  'qfedavg_q': (
    ['--task=synthetic', '--algorithm=qfedavg', '--qfedavg_q=-1'],
    ['--qfedavg_q must be >= 0, got -1.0'],
  ),
  'qfedavg_sps': (
    ['--task=synthetic', '--algorithm=qfedavg', '--client_optimizer=sps'],
    ['--client_optimizer=sps cannot run under --algorithm=qfedavg', 'sgd, sgdm, adam, adagrad'],
  ),
  'fedprox_mu': (
    ['--task=synthetic', '--algorithm=fedprox', '--fedprox_mu=-0.01'],
    ['--fedprox_mu must be >= 0, got -0.01'],
  ),
  'fednova_adam': (
    ['--task=synthetic', '--algorithm=fednova', '--client_optimizer=adam'],
    ['--client_optimizer=adam cannot run under --algorithm=fednova', 'sgd, sgdm'],
  ),
  'client_epochs_max': (
    ['--task=synthetic', '--client_epochs_per_round=2', '--client_epochs_max=1'],
    ['--client_epochs_max=1 must be >= --client_epochs_per_round=2'],
  ),
  'client_epochs_max_fedpa': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=2',
      '--client_epochs_max=3',
    ],
    ['--client_epochs_max cannot run under --algorithm=fedpa'],
  ),
  # Non-finite and out-of-range floats name the flag.
  'server_learning_rate_inf': (
    ['--task=synthetic', '--server_learning_rate=inf'],
    ['--server_learning_rate must be a finite number, got inf'],
  ),
  'client_learning_rate_overflow': (
    ['--task=synthetic', '--client_learning_rate=1e309'],
    ['--client_learning_rate must be a finite number, got inf'],
  ),
  'tau_nan': (
    ['--task=synthetic', '--server_optimizer=adam', '--tau=nan'],
    ['--tau must be a finite number, got nan'],
  ),
  'dirichlet_alpha_inf': (['--task=fmnist', '--dirichlet_alpha=inf'], ['--dirichlet_alpha']),
  'synthetic_alpha_negative': (
    ['--task=synthetic', '--synthetic_alpha=-1'],
    ['--synthetic_alpha must be >= 0, got -1.0'],
  ),
  'synthetic_beta_nan': (['--task=synthetic', '--synthetic_beta=nan'], ['--synthetic_beta']),
  # Experiment names that would write elsewhere than one directory under the root.
  'experiment_name_parent': (
    ['--task=synthetic', '--experiment_name=../x'],
    ["--experiment_name='../x' is not a plain directory name"],
  ),
  'experiment_name_absolute': (
    ['--task=synthetic', '--experiment_name=/tmp/x'],
    ["--experiment_name='/tmp/x' is not a plain directory name"],
  ),
  'experiment_name_dot': (
    ['--task=synthetic', '--experiment_name=.'],
    ["--experiment_name='.' is not a plain directory name"],
  ),
  'experiment_name_nested': (
    ['--task=synthetic', '--experiment_name=a/b'],
    ["--experiment_name='a/b' is not a plain directory name"],
  ),
  # absl's own parse errors: one line, exit 2.
  'unparsable_value': (
    ['--task=synthetic', '--total_rounds=abc'],
    ['--total_rounds=abc', 'see --help'],
  ),
  'unknown_flag': (['--task=synthetic', '--no_such_flag=1'], ["'no_such_flag'", 'see --help']),
  'data_dir': (
    ['--task=fmnist', '--data_dir=/nonexistent'],
    ['/nonexistent/train-images-idx3-ubyte.gz', 'apt-get install dataset-fashion-mnist'],
  ),
  'data_files_all_named': (  # all three files at once, and the sample-file command
    ['--task=so_lr', '--data_dir=/nonexistent'],
    [
      'task so_lr: 3 data files missing: /nonexistent/stackoverflow.sqlite, '
      '/nonexistent/stackoverflow.word_count.tar.bz2, /nonexistent/stackoverflow.tag_count.tar.bz2',
      f'{commands.command("samples")} --data_dir=DIR',
    ],
  ),
}
# CPU seconds a bad flag may cost: in a fresh `python -m` process (TF and TFF imports, ~10 CPU-s),
# and in a child of the tests' preloading server (the trainer's own work before it exits).
_MAX_CPU_S = 30.0
_MAX_CPU_S_PRELOADED = 3.0
# Fresh processes each import TensorFlow (~650 MB resident): at most this many at a time.
_MAX_CONCURRENT_RUNS = 4


class _Spawned:
  """A trainer run with stdout/stderr in files, and its CPU time (rusage) when it ended."""

  def __init__(self, args, directory: pathlib.Path, real: bool = False):
    self.args = args
    self.real = real
    self.root = directory / 'out'
    self.stdout_path, self.stderr_path = directory / 'stdout', directory / 'stderr'
    self.proc = None
    self.workers = set()
    self.rc = self.cpu_s = None

  def start(self):
    if self.proc is not None:
      return
    with open(self.stdout_path, 'w') as out, open(self.stderr_path, 'w') as err:
      self.proc = trainer_processes.popen(
        [*self.args, f'--root_output_dir={self.root}'],
        real=self.real,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
      )

  def _ended(self) -> bool:
    if not self.real:
      if self.proc.poll() is None:
        return False
      self.rc, self.cpu_s = self.proc.returncode, self.proc.cpu_s
      return True
    pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
    if pid:
      self.rc = self.proc.returncode = os.waitstatus_to_exitcode(status)
      self.cpu_s = usage.ru_utime + usage.ru_stime
    return bool(pid)

  def wait(self):
    self.start()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
      self.workers |= _worker_children(self.proc.pid)
      if self._ended():
        return self
      if time.monotonic() > deadline:
        self.proc.kill()
        raise AssertionError(f'{self.args} ran over {RUN_TIMEOUT_S} s')
      time.sleep(0.05)

  @property
  def stdout(self) -> str:
    return self.stdout_path.read_text()

  @property
  def stderr(self) -> str:
    return self.stderr_path.read_text()

  def report(self) -> str:
    return (
      f'command: {" ".join(self.args)}\nexit code: {self.rc}\n'
      f'--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}'
    )


def _check_bad_input(run, name: str, max_cpu_s: float) -> None:
  assert run.rc == 2, run.report()
  assert 'Traceback' not in run.stderr, run.report()
  lines = _stderr_lines(run.stderr)
  assert len(lines) == 1, run.report()
  assert lines[0].startswith('federated_trainer: error: '), lines
  for text in _BAD_INPUT[name][1]:
    assert text in lines[0], (text, lines[0])
  assert run.cpu_s < max_cpu_s, f'{run.cpu_s:.1f} CPU-s\n{run.report()}'
  assert not run.workers
  assert not run.root.exists()  # nothing written
  assert run.stdout == ''


@pytest.mark.parametrize('name', list(_BAD_INPUT))
def test_bad_input_fails_fast_with_one_line(tmp_path, name):
  run = _Spawned(_BAD_INPUT[name][0], tmp_path).wait()
  _check_bad_input(run, name, _MAX_CPU_S_PRELOADED)


# A fresh `python -m` process for a few: a flag, a cross-flag rule, the data check.
_FRESH_PROCESS_CASES = ('task', 'fedpa_burnin_longer_than_run', 'device', 'data_files_all_named')


@pytest.fixture(scope='module')
def fresh_bad_input_runs(tmp_path_factory):
  runs = {
    name: _Spawned(_BAD_INPUT[name][0], tmp_path_factory.mktemp(f'bad_{name}'), real=True)
    for name in _FRESH_PROCESS_CASES
  }
  yield runs
  for run in runs.values():
    if run.proc is not None and run.rc is None:  # started, never waited for (e.g. under -k)
      run.proc.kill()  # Popen.kill polls first, which may reap it: wait through Popen
      run.proc.wait()


@pytest.mark.parametrize('name', _FRESH_PROCESS_CASES)
def test_bad_input_in_a_fresh_process(fresh_bad_input_runs, name):
  names = list(fresh_bad_input_runs)  # a sliding window: this run and the next few run together
  for ahead in names[names.index(name) : names.index(name) + _MAX_CONCURRENT_RUNS]:
    fresh_bad_input_runs[ahead].start()
  _check_bad_input(fresh_bad_input_runs[name].wait(), name, _MAX_CPU_S)


# ---------------------------------------------------------------------------------------------
# 6./7. Divergence (exit 3) and Ctrl-C (exit 130) keep what was written; no worker survives.

_DIVERGING = [
  '--task=synthetic',
  '--server_optimizer=sgd',
  '--server_learning_rate=1e36',
  '--total_rounds=6',
  '--rounds_per_eval=1',
  '--rounds_per_checkpoint=1',
]


def _train_columns(row: dict) -> dict:
  return {k: v for k, v in row.items() if k.startswith('train_')}


@pytest.mark.parametrize('engine', ['tff', 'inprocess'])
def test_divergence_exits_3_and_keeps_earlier_rounds(run_a, tmp_path, engine):
  # Round 1 trains the initial model (finite); its server step of 1e36 * update makes the
  # round-2 logits overflow float32.
  args = [*_DIVERGING, f'--engine={engine}', f'--root_output_dir={tmp_path}']
  trainer = run_trainer(args, expect_rc=3)
  experiment = experiment_in(tmp_path)
  [line] = trainer.stderr_lines
  assert 'diverged in round 2' in line and 'learning rate' in line, line
  assert re.search(r'^round 1/6 .*eval_loss=', trainer.stdout, re.M), trainer.report()
  assert os.listdir(experiment / 'checkpoints') == ['program_state_1']
  _, rows = _read_metrics(experiment)
  _, rows_a = _read_metrics(run_a)
  assert rows[0]['round_num'] == '1' and rows[0]['eval_loss'] != ''
  # Round 1's client training does not depend on the server optimizer: same as run A's.
  if engine == 'tff':
    assert _train_columns(rows[0]) == _train_columns(rows_a[0])
  # The diverged round is not recorded: metrics.csv holds rounds 1..N-1, as the message says.
  assert [r['round_num'] for r in rows] == ['1']
  kept = _snapshot(experiment / 'checkpoints')
  first_row = rows[0]

  # The checkpoint of round 1 is usable: a rerun resumes from it and diverges again.
  rerun = run_trainer(args, expect_rc=3)
  assert re.search(r'^Resuming .* after round 1$', rerun.stdout, re.M), rerun.report()
  [line] = rerun.stderr_lines
  assert 'diverged in round 2' in line, line
  assert _snapshot(experiment / 'checkpoints') == kept
  assert _read_metrics(experiment)[1][0] == first_row


def test_relative_flagfile_is_read_from_where_bazel_run_was_typed(tmp_path):
  """`bazel run` runs the trainer in its runfiles tree and says where the command was typed in
  BUILD_WORKING_DIRECTORY: a relative --flagfile (and the file's relative --root_output_dir)
  resolve from there. Here the repository stands in for the runfiles tree."""
  typed = tmp_path / 'typed'
  (typed / 'presets').mkdir(parents=True)
  (typed / 'presets' / 'tiny.flags').write_text(
    '# a preset\n--task=synthetic\n--total_rounds=1\n--rounds_per_eval=1\n--root_output_dir=out\n'
  )
  env = {**_env(), 'BUILD_WORKING_DIRECTORY': str(typed)}
  result = trainer_processes.run(
    ['--flagfile=presets/tiny.flags', '--experiment_name=tiny'],
    environment=env,
    timeout=RUN_TIMEOUT_S,
  )
  assert result.returncode == 0, result.stderr
  _, rows = _read_metrics(typed / 'out' / 'tiny')
  assert [row['round_num'] for row in rows] == ['1']
  assert not (REPO / 'out').exists() and not (REPO / 'presets').exists()


def test_flagfile_paths_are_joined_onto_the_typed_directory():
  from tff_adaptive.run import federated_trainer  # pylint: disable=g-import-not-at-top

  argv = ['trainer', '--flagfile=a.flags', '--flagfile', 'b/c.flags', '--flagfile=/abs/d.flags']
  assert federated_trainer._flagfiles_from('/typed', argv) == [
    'trainer',
    '--flagfile=/typed/a.flags',
    '--flagfile',
    '/typed/b/c.flags',
    '--flagfile=/abs/d.flags',
  ]
  assert federated_trainer._flagfiles_from('/typed', ['t', '--task=x']) == ['t', '--task=x']


def test_sigint_exits_130_and_stops_worker(tmp_path):
  trainer = Trainer(
    [
      '--task=synthetic',
      '--total_rounds=1000',
      '--rounds_per_checkpoint=1',
      f'--root_output_dir={tmp_path}',
    ]
  )
  trainer.wait_for_line(r'^round 2/1000 ')
  os.kill(trainer.proc.pid, signal.SIGINT)
  assert trainer.finish(timeout_s=180) == 130, trainer.report()
  assert trainer.workers, f'no worker_binary child seen\n{trainer.report()}'
  _assert_workers_gone(trainer.workers)
  assert 'Traceback' not in trainer.stderr, trainer.report()
  [line] = trainer.stderr_lines
  assert 'interrupted' in line and 'rerun the same command to resume' in line, line
  # The round in progress was finished and checkpointed (here every round is).
  stopped = int(trainer.wait_for_line(r'^stopped after round \d+ \(Ctrl-C\)').split()[3])
  experiment = experiment_in(tmp_path)
  assert f'program_state_{stopped}' in os.listdir(experiment / 'checkpoints')
  _, rows = _read_metrics(experiment)
  assert [r['round_num'] for r in rows[:2]] == ['1', '2']
