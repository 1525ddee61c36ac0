"""reproductions.cell_runner: cells forked from the preloading server, stopped like processes.

A driver (a small script around `cell_runner.run_cells`) runs two long synthetic cells; Ctrl-C
(SIGINT) to the driver gives each cell one SIGTERM: each checkpoints its round and exits 143,
recorded in its status file, and a rerun resumes both; SIGKILL to the driver leaves no trainer
running (the server ends with the driver, its children with the server).
"""

import dataclasses
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from tests import trainer_processes

REPO = pathlib.Path(__file__).resolve().parents[2]

_DRIVER = """
import dataclasses, sys
from reproductions import cell_runner

@dataclasses.dataclass(frozen=True)
class Cell:
  name: str

def command(cell, runs_dir):
  return [sys.executable, '-m', 'run.federated_trainer', '--task=synthetic', '--engine=inprocess',
          f'--total_rounds={ROUNDS}', '--rounds_per_eval=1000', '--rounds_per_checkpoint=1000',
          f'--seed={1 + int(cell.name[-1])}', f'--root_output_dir={runs_dir}',
          f'--experiment_name={cell.name}']

code, failed, runner = cell_runner.run_cells([Cell('cell0'), Cell('cell1')], sys.argv[1], 2, command, ROUNDS)
print('exit codes', runner.exit_codes, flush=True)
sys.exit(code or (1 if failed else 0))
"""


def _driver(runs_dir: pathlib.Path, rounds: int, shared: bool = True) -> subprocess.Popen:
  """The driver, its trainers forked from this pytest process's server (`shared`) or from one
  of its own."""
  env = trainer_processes.env()
  return subprocess.Popen(  # pylint: disable=consider-using-with
    [sys.executable, '-c', _DRIVER.replace('ROUNDS', str(rounds)), str(runs_dir)],
    cwd=REPO,
    env=trainer_processes.driver_env(**env) if shared else env,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _holders(runs_dir: pathlib.Path, marker: str, timeout_s: float = 300.0) -> dict:
  """{cell: pid of the trainer holding its run lock}, once both cells' attempt (the part of its
  log after its last '# <time> <command>' line) has printed `marker`."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    pids = {}
    for cell in ('cell0', 'cell1'):
      log = runs_dir / f'{cell}.log'
      lock = runs_dir / cell / '.lock'
      attempt = log.read_text().rsplit('\n# ', 1)[-1] if log.exists() else ''
      if marker in attempt and lock.exists():
        pids[cell] = int(lock.read_text())
    if len(pids) == 2:
      return pids
    time.sleep(0.2)
  raise AssertionError(f'the cells did not start: {sorted(p.name for p in runs_dir.iterdir())}')


def _gone(pid: int, timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    try:
      with open(f'/proc/{pid}/stat') as f:
        if f.read().rsplit(')', 1)[1].split()[0] in 'ZX':
          return True
    except FileNotFoundError:
      return True
    time.sleep(0.05)
  return False


def test_ctrl_c_stops_each_cell_with_one_sigterm_and_a_rerun_resumes(tmp_path):
  runs = tmp_path / 'runs'
  driver = _driver(runs, rounds=100000)
  pids = _holders(runs, 'round 2/')
  assert all(pid != driver.pid for pid in pids.values())
  driver.send_signal(signal.SIGINT)
  out, err = driver.communicate(timeout=120)
  assert driver.returncode == 130, out + err
  assert 'SIGINT: stopping 2 running cell(s) with SIGTERM' in out
  for cell, pid in pids.items():
    assert _gone(pid, 10), f'{cell} (pid {pid}) still runs'
    status = json.loads((runs / f'{cell}.status.json').read_text())
    assert status['exit_code'] == 143, status
    log = (runs / f'{cell}.log').read_text()
    assert 'stopped after round' in log and '(SIGTERM); its checkpoint is saved' in log, log
  # The rerun resumes each cell after the round it checkpointed.
  stopped_after = {
    cell: int(re.findall(r'stopped after round (\d+)', (runs / f'{cell}.log').read_text())[-1])
    for cell in pids
  }
  driver = _driver(runs, rounds=100000)
  _holders(runs, 'Resuming ')
  driver.send_signal(signal.SIGINT)
  out, err = driver.communicate(timeout=120)
  assert driver.returncode == 130, out + err
  for cell, after in stopped_after.items():
    attempt = (runs / f'{cell}.log').read_text().rsplit('\n# ', 1)[-1]
    assert re.search(rf'^Resuming .* after round {after}$', attempt, re.M), attempt


@pytest.mark.parametrize('shared', [False, True], ids=['own_server', 'shared_server'])
def test_a_killed_driver_leaves_no_trainer_running(tmp_path, shared):
  """Its own server ends with it, and so do the trainers forked from it (their death signal);
  a shared server outlives it, and sends that signal to its trainers when its connection ends."""
  runs = tmp_path / 'runs'
  driver = _driver(runs, rounds=100000, shared=shared)
  pids = _holders(runs, 'round 2/')
  driver.kill()
  driver.communicate(timeout=60)
  for cell, pid in pids.items():
    assert _gone(pid, 60), f'{cell} (pid {pid}) outlived its driver'


def test_without_the_server_each_cell_is_a_new_process_and_a_finished_cell_is_not_restarted(
  tmp_path, capsys
):
  from reproductions import cell_runner  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class Cell:
    name: str

  runs = tmp_path / 'runs'
  command = lambda rounds: (
    lambda cell, runs_dir: trainer_processes.command(
      ['--task=synthetic', f'--total_rounds={rounds}', f'--root_output_dir={runs_dir}']
      + [f'--experiment_name={cell.name}', '--engine=inprocess']
    )
  )
  runner = cell_runner.Runner([Cell('a')], str(runs), 1, command(2), 2, preload=False)
  assert runner.run() is None
  assert runner.exit_codes == {'a': 0}
  assert (runs / 'a' / 'metrics.csv').read_text().count('\n') == 3  # header + 2 rounds
  # The same command again: the cell ended with it, so no trainer starts (a start appends a
  # '# <time> <command>' line to the cell's log and rewrites its status).
  files = {name: (runs / name).read_text() for name in ('a.log', 'a.status.json')}
  capsys.readouterr()
  again = cell_runner.Runner([Cell('a')], str(runs), 1, command(2), 2, preload=False)
  assert again.run() is None and again.exit_codes == {'a': 0}
  assert f'finished earlier: a ({runs / "a.status.json"})' in capsys.readouterr().out
  assert {name: (runs / name).read_text() for name in files} == files
  # Another command (one more round): the trainer starts and extends the run.
  longer = cell_runner.Runner([Cell('a')], str(runs), 1, command(3), 3, preload=False)
  assert longer.run() is None and longer.exit_codes == {'a': 0}
  assert (runs / 'a' / 'metrics.csv').read_text().count('\n') == 4
  assert (runs / 'a.log').read_text().count('\n# ') == 1  # two attempts: the first line + one


def test_cells_are_grouped_by_their_shared_flags_and_a_group_log_names_its_diverged_cells(
  tmp_path,
):
  """`group_cells`: cells whose commands differ only in their rates and server optimizer (and
  their names) share a trainer, up to the group size, in order; another seed is another group.
  `_diverged_cells` reads the `--cells` trainer's 'NAME: diverged in round N: ...' lines of
  this attempt only."""
  from reproductions import cell_runner  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class Cell:
    name: str
    lr: float
    seed: int

  def command(cell, runs_dir):
    return [
      'python',
      '-m',
      'run.federated_trainer',
      f'--client_learning_rate={cell.lr}',
      '--server_optimizer=adam',
      f'--seed={cell.seed}',
      f'--root_output_dir={runs_dir}',
      f'--experiment_name={cell.name}',
    ]

  cells = [Cell(f'c{i}', 0.1 * (i + 1), 1 + (i == 3)) for i in range(5)]
  groups = cell_runner.group_cells(cells, command, 'runs', 2)
  assert [[c.name for c in cell_runner._members(g)] for g in groups] == [
    ['c0', 'c1'],
    ['c2', 'c4'],
    ['c3'],
  ]
  assert groups[2] is cells[3]  # a group of one is the cell itself
  log = tmp_path / 'group.log'
  log.write_text('c0: diverged in round 7: training diverged in round 7 ...\n')
  offset = log.stat().st_size
  with open(log, 'a') as f:
    f.write(
      '[c1] round 3/5 ...\nc1: diverged in round 4: round 4: client 7 has a non-finite loss\n'
    )
    f.write('c2: done: train_loss=0.1\n')
  assert cell_runner._diverged_cells(str(log), offset) == {'c1': 4}
  assert cell_runner._diverged_cells(str(log), 0) == {'c0': 7, 'c1': 4}


def test_publish_is_refused_while_a_cell_has_not_finished(tmp_path, capsys):
  """`refuse_unfinished`: a cell counts as finished when its trainer, started with this very
  command, exited 0 after exactly the rounds asked for, or diverged (exit 3: a result); a failed,
  short, never-run or over-long cell, or one a different command left, is unfinished, and with
  --publish the driver says how many in one line (without --publish nothing is checked)."""
  from reproductions import cell_runner  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class Cell:
    name: str

  command = lambda cell, runs_dir: ['trainer', f'--experiment_name={cell.name}', '--seed=1']

  def cell(name, exit_code, rounds, seed=1):
    if exit_code is not None:
      argv = ['trainer', f'--experiment_name={name}', f'--seed={seed}']
      status = {'exit_code': exit_code, 'command': ' '.join(argv)}
      (tmp_path / f'{name}.status.json').write_text(json.dumps(status))
    (tmp_path / name).mkdir()
    lines = ['round_num,train_loss'] + [f'{r},1.0' for r in range(1, rounds + 1)]
    (tmp_path / name / 'metrics.csv').write_text('\n'.join(lines) + '\n')
    return Cell(name)

  done, diverged = cell('done', 0, 4), cell('diverged', 3, 2)
  short, failed, never = cell('short', 0, 3), cell('failed', 1, 4), cell('never', None, 0)
  longer, other = cell('longer', 0, 6), cell('other', 0, 4, seed=2)
  everything = [done, diverged, short, failed, never, longer, other]
  assert cell_runner.unfinished(everything, str(tmp_path), 4, command) == [
    short,
    failed,
    never,
    longer,
    other,
  ]

  @dataclasses.dataclass
  class Flags:
    publish: bool
    rounds: int = 4

  def refused(flags, cells):
    return cell_runner.refuse_unfinished('driver', flags, cells, str(tmp_path), command)

  assert not refused(Flags(False), everything)
  assert not refused(Flags(True), [done, diverged])
  assert capsys.readouterr().err == ''
  assert refused(Flags(True), everything)
  assert capsys.readouterr().err == (
    'driver: error: --publish: 5 of 7 cells have not finished (e.g. short); nothing was written\n'
  )
