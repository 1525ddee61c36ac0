"""Runs the cells of a reproduction: one `run.federated_trainer` process per cell, a few at once.

The trainers are forked from one process that has imported TensorFlow and TFF (`run.preload`;
about 10 CPU-s saved per cell): the server named by `run.preload.SERVER_VARIABLE` in the
environment where there is one for the trainers' environment (the tests start drivers so),
else one of the driver's own; `Runner(preload=False)` starts each as a new process.

Each cell (anything with a `name`) is a trainer command with `--root_output_dir=<runs_dir>
--experiment_name=<cell>`; its stdout and stderr are appended to `<runs_dir>/<cell>.log` and its
exit is recorded in `<runs_dir>/<cell>.status.json`. Rerunning resumes unfinished cells from
their checkpoints; a cell whose status says it ended with exit 0 running the very command it
would run now, and whose metrics.csv has every round, is not started again (a rerun of a
finished reproduction only rewrites its report). SIGINT / SIGTERM stop the cells (SIGTERM to
each). Used by every reproduction driver under reproductions/.
"""

from collections.abc import Callable
import csv
import dataclasses
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any
from typing import TextIO

from absl import app
from absl import flags

from reproductions import publish
from tff_adaptive.loop import run_dir
from tff_adaptive.run import cell_flags
from tff_adaptive.run import preload
from tff_adaptive.runtime import worker_process

TRAINER = 'run.federated_trainer'
PROGRESS_SECONDS = 30.0
EXIT_DIVERGED = 3
EXIT_USAGE = 2  # the trainer's exit for bad input, e.g. an experiment another process holds
EXIT_INTERRUPTED = (130, 143, -signal.SIGINT, -signal.SIGTERM)


def _repo_root() -> str:
  """Where `python -m run.federated_trainer` imports from (the runfiles tree under Bazel)."""
  return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_metrics(path: str) -> list[dict[str, str]]:
  """The rows of a metrics.csv, [] if it is missing or unreadable (it is written atomically)."""
  try:
    with open(path, newline='') as f:
      return list(csv.DictReader(f))
  except (OSError, csv.Error, UnicodeDecodeError):
    return []


def to_float(value: str | None) -> float | None:
  try:
    return float(value)
  except (TypeError, ValueError):
    return None


def last_round(rows: list[dict[str, str]]) -> int:
  rounds = [to_float(r.get('round_num')) for r in rows]
  return int(max((r for r in rounds if r is not None), default=0))


def status_path(runs_dir: str, cell) -> str:
  return os.path.join(runs_dir, f'{cell.name}.status.json')


def log_path(runs_dir: str, cell) -> str:
  return os.path.join(runs_dir, f'{cell.name}.log')


def read_status(runs_dir: str, cell) -> dict | None:
  try:
    with open(status_path(runs_dir, cell)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


THREAD_VARIABLES = ('TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS')


def run_status(finished: bool, rounds: int, total: int, exit_code: int | None) -> str:
  """A cell's status in a report: 'done', 'diverged after round R', 'failed (<exit>)' (a trainer
  exit other than 0, a divergence or an interruption), 'partial R of T' or 'missing'."""
  if finished:
    return 'done'
  if exit_code == EXIT_DIVERGED:
    return f'diverged after round {rounds}'
  if exit_code is not None and exit_code != 0 and exit_code not in EXIT_INTERRUPTED:
    return f'failed ({exit_text(exit_code)})'
  return f'partial {rounds} of {total}' if rounds else 'missing'


def child_env(environ=None) -> dict[str, str]:
  """The trainers' environment (`environ`, default this process's): TF's thread pools pinned to
  one thread each, whatever --parallel.

  TF 2.14 honours TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS (measured on this 2-core
  machine: a loop of 1500x1500 matmuls took 1.7-1.9 s with TF's default pools, 3.1-3.2 s with
  both set to 1, i.e. one core, and the process had 7 threads instead of 9), so several trainers
  at once do not oversubscribe the cores. They are set for every cell, not only with
  --parallel > 1, because the intra-op thread count changes the float summation order: the
  same 4-round fmnist cell gave train_loss 1.7117303 / 1.7117305 in round 2 and eval_accuracy
  0.2687 / 0.2637 in round 4 with default / single-thread pools. Pinned, a cell's numbers do not
  depend on --parallel or the machine's core count, and a resume with another --parallel
  continues the same trajectory. The fmnist CNN loses nothing by it (0.27-0.33 s a training
  round either way). Values set in the caller's environment are kept (and stated in the
  tables' header).
  """
  env = dict(os.environ if environ is None else environ)
  for name in THREAD_VARIABLES:
    env.setdefault(name, '1')
  return env


def _attempt_summary(log_path: str, offset: int) -> tuple[str | None, int | None]:
  """The trainer's last error line in its log from `offset` (this attempt), and the round named
  by 'training diverged in round N' there."""
  try:
    with open(log_path, errors='replace') as f:
      f.seek(max(offset, os.path.getsize(log_path) - 65536))
      text = f.read()
  except OSError:
    return None, None
  errors = [line for line in text.splitlines() if line.startswith('federated_trainer: error:')]
  diverged = re.findall(r'training diverged in round (\d+)', text)
  return (errors[-1] if errors else None), (int(diverged[-1]) if diverged else None)


def _diverged_cells(log_path: str, offset: int) -> dict[str, int]:
  """A `--cells` trainer's diverged cells in its log from `offset`: name -> round."""
  try:
    with open(log_path, errors='replace') as f:
      f.seek(offset)
      text = f.read()
  except OSError:
    return {}
  found = re.findall(r'^(\S+): diverged in round (\d+): ', text, re.MULTILINE)
  return {name: int(round_num) for name, round_num in found}


def exit_text(code: int) -> str:
  if code < 0:
    try:
      return f'killed by {signal.Signals(-code).name}'
    except ValueError:
      return f'killed by signal {-code}'
  return f'exit {code}'


def duration(seconds: float) -> str:
  seconds = int(seconds)
  if seconds >= 3600:
    return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m'
  return f'{seconds // 60}m{seconds % 60:02d}s' if seconds >= 60 else f'{seconds}s'


# The trainer flags grid cells may set apart, as they are typed.
CELL_FLAGS = tuple(f'--{name}' for name in cell_flags.CELL_FLAGS)


@dataclasses.dataclass(frozen=True)
class CellGroup:
  """Cells trained side by side by one trainer process (`--cells`, `engines.grid_cells`).

  Its members' commands differ only in `CELL_FLAGS` and --experiment_name; each member keeps
  its own experiment directory and status file (whose command is the member's own, which
  resumes or finds it finished alone), and the group's output goes to `<group>.log`.
  """

  members: tuple

  @property
  def name(self) -> str:
    return f'cells_{self.members[0].name}+{len(self.members) - 1}'


def _split_cell_flags(command: list[str]) -> tuple[list[str], list[str], str]:
  """(the command without the cell's own flags, the cell's flags, its experiment name)."""
  shared, own, name = [], [], None
  for arg in command:
    flag = arg.split('=', 1)[0]
    if flag == '--experiment_name':
      name = arg.split('=', 1)[1]
    elif flag in CELL_FLAGS:
      own.append(arg)
    else:
      shared.append(arg)
  return shared, own, name


def group_cells(cells: list, command: Callable[[Any, str], list[str]], runs_dir: str, size: int):
  """`cells` as `CellGroup`s of up to `size` cells whose commands differ only in their own
  flags (in their order); a group of one is the cell itself."""
  by_shared: dict[tuple, list] = {}
  for cell in cells:
    shared = tuple(_split_cell_flags(command(cell, runs_dir))[0])
    by_shared.setdefault(shared, []).append(cell)
  out = []
  for members in by_shared.values():
    for i in range(0, len(members), size):
      chunk = tuple(members[i : i + size])
      out.append(chunk[0] if len(chunk) == 1 else CellGroup(chunk))
  return out


def _members(item) -> tuple:
  return item.members if isinstance(item, CellGroup) else (item,)


@dataclasses.dataclass
class _Running:
  cell: Any
  process: subprocess.Popen | preload.Process
  log: TextIO
  offset: int  # where this attempt's output starts in the log


class Runner:
  """Runs the cells, `parallel` at once, with a progress line every PROGRESS_SECONDS.

  A cell is anything with a `name`; `command(cell, runs_dir)` gives its trainer command and
  `total_rounds` the rounds every cell trains.
  """

  def __init__(
    self,
    cells: list,
    runs_dir: str,
    parallel: int,
    command: Callable[[Any, str], list[str]],
    total_rounds: int,
    preload: bool = True,
    cells_per_process: int = 1,
  ):
    self.cells = cells
    # What runs: the cells, or `CellGroup`s of them trained side by side by one trainer each.
    self.items = (
      cells if cells_per_process == 1 else group_cells(cells, command, runs_dir, cells_per_process)
    )
    self.preload = preload
    self._server = None
    self.runs_dir = runs_dir
    self.parallel = parallel
    self.command = command
    self.total_rounds = total_rounds
    self.env = child_env()
    self.exit_codes: dict[str, int] = {}
    self.errors: dict[str, str] = {}
    self.stop_signal: int | None = None
    self._waiting: set[str] = set()
    self._lock_retries: dict[str, int] = {}

  def _on_signal(self, signum, frame) -> None:
    del frame
    if self.stop_signal is None:
      self.stop_signal = signum

  def _without_server(self, error: preload.ServerError) -> None:
    print(f'{error}; starting each trainer as a new process', file=sys.stderr, flush=True)
    self.preload = False

  def _preloaded(self) -> preload.Preloaded | None:
    """The server the trainers are forked from (started on first use), None without one."""
    if self._server is None and self.preload:
      try:
        self._server = preload.Preloaded.shared([TRAINER], env=self.env) or preload.Preloaded(
          [TRAINER], env=self.env
        )
      except preload.ServerError as e:
        self._without_server(e)
    return self._server

  def _command(self, item) -> list[str]:
    """The trainer command of a cell, or of a `CellGroup`: the members' shared flags and
    --cells=<runs_dir>/<group>.cells (written by `_start`)."""
    if not isinstance(item, CellGroup):
      return self.command(item, self.runs_dir)
    shared = _split_cell_flags(self.command(item.members[0], self.runs_dir))[0]
    return [*shared, f'--cells={os.path.join(self.runs_dir, item.name + ".cells")}']

  def finished_earlier(self, item) -> bool:
    """Whether a cell (every member of a group) already ran to the end with the command it
    would run now: its status says exit 0 for that very command line, and its metrics.csv has
    all `total_rounds`. (A changed command, e.g. more rounds, starts the trainer, which resumes
    or extends the run.)"""
    return all(self._finished_earlier(cell) for cell in _members(item))

  def _finished_earlier(self, cell) -> bool:
    command_line = shlex.join(self.command(cell, self.runs_dir))
    return ran_to_the_end(self.runs_dir, cell, command_line, self.total_rounds)

  def _start(self, cell) -> _Running:
    command = self._command(cell)
    if isinstance(cell, CellGroup):
      lines = []
      for member in cell.members:
        _, own, name = _split_cell_flags(self.command(member, self.runs_dir))
        lines.append(shlex.join([name, *own]))
      with publish.atomic_output(command[-1].split('=', 1)[1]) as f:
        f.write('\n'.join(lines) + '\n')
    log = open(log_path(self.runs_dir, cell), 'a')  # closed in _finish
    started = datetime.datetime.now().isoformat(timespec='seconds')
    log.write(f'# {started} {shlex.join(command)}\n')
    log.flush()
    # Its own process group: a terminal's Ctrl-C reaches only this script, which then sends
    # each trainer one SIGTERM.
    process = None
    if command[:3] == [sys.executable, '-m', TRAINER] and self._preloaded() is not None:
      try:
        process = self._server.popen(
          TRAINER,
          command[3:],
          stdout=log,
          stderr=subprocess.STDOUT,
          cwd=_repo_root(),
          env=self.env,
          process_group=True,
          death_signal=signal.SIGTERM,  # when the server ends, i.e. when this script does
        )
      except preload.ServerError as e:
        self._without_server(e)
    if process is None:
      process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=_repo_root(),
        env=self.env,
        process_group=0,
        # The child gets SIGTERM if this script dies (even by SIGKILL): no orphan trainer
        # holding its experiment's lock.
        preexec_fn=worker_process.make_preexec_fn(os.getpid(), signal.SIGTERM),
      )
    return _Running(cell, process, log, log.tell())

  @staticmethod
  def _poll(run: _Running) -> int | None:
    try:
      return run.process.poll()
    except preload.ServerError:  # the server died: its children got SIGTERM (death_signal)
      return None if os.path.exists(f'/proc/{run.process.pid}') else -signal.SIGTERM

  def _finish(self, run: _Running, code: int) -> None:
    """Each cell's status file: a group's members each get their own exit (0 if its
    metrics.csv is complete, 3 if the trainer named it diverged, else the group's), with the
    command that runs the member alone."""
    run.log.close()
    log = log_path(self.runs_dir, run.cell)
    error, diverged = _attempt_summary(log, run.offset)
    group = isinstance(run.cell, CellGroup)
    diverged_cells = _diverged_cells(log, run.offset) if group else {}
    for cell in _members(run.cell):
      cell_code = code
      if group:
        rows = read_metrics(os.path.join(self.runs_dir, cell.name, 'metrics.csv'))
        if last_round(rows) >= self.total_rounds:
          cell_code = 0
        elif cell.name in diverged_cells:
          cell_code = EXIT_DIVERGED
        elif code in (0, EXIT_DIVERGED):  # the trainer ended without finishing it: a failure
          cell_code = 1
      self.exit_codes[cell.name] = cell_code
      record = {
        'exit_code': cell_code,
        'ended': datetime.datetime.now().isoformat(timespec='seconds'),
        'command': shlex.join(self.command(cell, self.runs_dir)),
        'log': log,
        'error': error if cell_code not in (0, EXIT_DIVERGED) or not group else None,
        **{name: self.env[name] for name in THREAD_VARIABLES},
      }
      if group:
        record['trained_in'] = shlex.join(self._command(run.cell))
      if cell_code == EXIT_DIVERGED:
        record['diverged_round'] = diverged_cells.get(cell.name, diverged)
      if record['error']:
        self.errors[cell.name] = record['error']
      with publish.atomic_output(status_path(self.runs_dir, cell)) as f:
        json.dump(record, f, indent=1)
      print(f'ended {cell.name}: {self.describe(cell_code)}', flush=True)

  def _lock_paths(self, item) -> list[str]:
    return [os.path.join(self.runs_dir, c.name, run_dir.LOCK_FILE) for c in _members(item)]

  def _locked_by_another(self, item) -> bool:
    """Whether a cell's experiment is locked by a trainer this runner did not start (it stays
    pending until that one ends, with one line the first time)."""
    for path in self._lock_paths(item):
      holder = run_dir.lock_holder(path)
      if holder is not None:
        if item.name not in self._waiting:
          self._waiting.add(item.name)
          print(
            f'waiting for {item.name}: its experiment is in use by process {holder} (a trainer '
            'of an earlier, stopped run finishing its round, or of another driver)',
            flush=True,
          )
        return True
    return False

  def _lost_the_lock(self, run: _Running) -> bool:
    """Whether the trainer ended (exit 2) because another process held its experiment's lock
    when it started (a killed driver's trainer may take a round to stop); at most 3 times a
    cell, then it fails as any other exit 2."""
    run.log.close()
    with open(log_path(self.runs_dir, run.cell)) as f:
      f.seek(run.offset)
      lost = 'is in use by process' in f.read()
    self._lock_retries[run.cell.name] = self._lock_retries.get(run.cell.name, 0) + 1
    if lost and self._lock_retries[run.cell.name] <= 3:
      return True
    run.log = open(log_path(self.runs_dir, run.cell), 'a')  # noqa: SIM115 (closed in _finish)
    return False

  def _progress(self, running: dict[str, _Running], pending: list) -> str:
    total = self.total_rounds
    parts, remaining, times = [], 0, []
    for item in self.items:
      for cell in _members(item):
        rows = read_metrics(os.path.join(self.runs_dir, cell.name, 'metrics.csv'))
        if item.name in running:
          parts.append(f'{cell.name} {last_round(rows)}/{total}')
        if cell.name not in self.exit_codes:
          remaining += max(0, total - last_round(rows))
        if item.name in running or cell.name in self.exit_codes:
          times += [
            t for r in rows[-50:] if (t := to_float(r.get('seconds_per_round'))) is not None
          ]
    if times and remaining:
      at_once = max(1, min(self.parallel, len(running) + len(pending)))
      eta = duration(remaining * sum(times) / len(times) / at_once)
    else:
      eta = '0s' if not remaining else '?'
    clock = datetime.datetime.now().strftime('%H:%M:%S')
    cells = lambda items: sum(len(_members(i)) for i in items)
    return (
      f'[{clock}] cells: {len(self.exit_codes)} done, {cells(r.cell for r in running.values())} '
      f'running, {cells(pending)} pending | {", ".join(parts) or "-"} | ETA {eta}'
    )

  def run(self) -> int | None:
    """Runs every cell; returns the signal that stopped it, None when all ended."""
    os.makedirs(self.runs_dir, exist_ok=True)
    pending = list(self.items)
    running: dict[str, _Running] = {}
    previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    last_progress = 0.0
    try:
      while (pending or running) and self.stop_signal is None:
        for _ in range(len(pending)):
          if len(running) >= self.parallel:
            break
          cell = pending.pop(0)
          if self._locked_by_another(cell):  # e.g. a killed driver's trainer ending its round
            pending.append(cell)
            continue
          if self.finished_earlier(cell):
            for member in _members(cell):
              self.exit_codes[member.name] = 0
              print(
                f'finished earlier: {member.name} ({status_path(self.runs_dir, member)})',
                flush=True,
              )
            continue
          running[cell.name] = self._start(cell)
          print(f'started {cell.name} (log: {log_path(self.runs_dir, cell)})', flush=True)
        ended = False
        for name, run in list(running.items()):
          code = self._poll(run)
          if code is not None:
            del running[name]
            if code == EXIT_USAGE and self._lost_the_lock(run):
              pending.insert(0, run.cell)  # started again once the lock is free
              continue
            self._finish(run, code)
            ended = True
        now = time.monotonic()
        if ended or now - last_progress >= PROGRESS_SECONDS:
          print(self._progress(running, pending), flush=True)
          last_progress = now
        time.sleep(0.5)
      if self.stop_signal is not None:
        self._stop(list(running.values()))
    finally:
      for signum, handler in previous.items():
        signal.signal(signum, handler)
      if self._server is not None:
        self._server.close()
        self._server = None
    return self.stop_signal

  def _stop(self, running: list[_Running]) -> None:
    name = signal.Signals(self.stop_signal).name
    print(f'{name}: stopping {len(running)} running cell(s) with SIGTERM', flush=True)
    for run in running:
      run.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    for run in running:
      try:
        code = run.process.wait(timeout=max(0.1, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        run.process.kill()
        code = run.process.wait()
      self._finish(run, code)

  @staticmethod
  def describe(code: int) -> str:
    if code == 0:
      return 'done'
    if code == EXIT_DIVERGED:
      return 'diverged (exit 3)'
    if code in EXIT_INTERRUPTED:
      return f'interrupted ({exit_text(code)}); rerun to resume'
    return f'FAILED ({exit_text(code)})'


def run_cells(
  cells: list,
  runs_dir: str,
  parallel: int,
  command: Callable[[Any, str], list[str]],
  rounds: int,
  preload: bool = True,
  cells_per_process: int = 1,
) -> tuple[int | None, list, Runner]:
  """Runs every cell (forked from a preloading server, or as new processes with preload=False;
  `cells_per_process` > 1: up to that many cells side by side per trainer, `CellGroup`);
  returns (the exit code 130 / 143 if stopped by SIGINT / SIGTERM, else None; the cells that
  failed, a diverged one (trainer exit 3) being a result, not a failure; the runner, whose
  `exit_codes` and `errors` say more)."""
  runner = Runner(
    cells, runs_dir, parallel, command, rounds, preload=preload, cells_per_process=cells_per_process
  )
  grouped = '' if cells_per_process == 1 else f' in {len(runner.items)} trainers side by side'
  print(
    f'{len(cells)} cells{grouped}, {rounds} rounds each, {parallel} at once; runs in {runs_dir}'
  )
  stopped = runner.run()
  if stopped is not None:
    print('stopped; rerun the same command to resume', file=sys.stderr, flush=True)
    return (130 if stopped == signal.SIGINT else 143), [], runner
  failed = [c for c in cells if runner.exit_codes.get(c.name) not in (0, EXIT_DIVERGED)]
  return None, failed, runner


def shown_command(argv: list[str]) -> str:
  """A trainer command as a table quotes it, for a reader to paste: the interpreter and every
  flag's path value through `publish.shown_path`."""

  def shown(arg: str) -> str:
    name, equals, value = arg.partition('=') if arg.startswith('--') else ('', '', arg)
    return f'{name}{equals}{publish.shown_path(value)}'

  return shlex.join([shown(a) for a in argv])


def command_line(bazel_target: str) -> str:
  """This script's command line, reconstructed from sys.argv (as `bazel run` under Bazel)."""
  args = [shlex.quote(a) for a in sys.argv[1:]]
  if 'BUILD_WORKSPACE_DIRECTORY' in os.environ:
    return ' '.join([f'bazel run {bazel_target} --', *args])
  python = publish.shown_path(sys.executable)
  spec = getattr(sys.modules['__main__'], '__spec__', None)
  prog = ['-m', spec.name] if spec is not None and spec.name else [shlex.quote(sys.argv[0])]
  return ' '.join([shlex.quote(python), *prog, *args])


def stamp_line() -> str:
  """A report header's line with when and by which code it was written:
  `- Date: 2026-11-27T10:00:00; code version 1a2b3c4`."""
  date = datetime.datetime.now().isoformat(timespec='seconds')
  return f'- Date: {date}; code version {publish.code_version()}'


def report_failures(program: str, failed: list, runner: Runner, runs_dir: str) -> None:
  """One stderr line per failed cell: its exit, its log and the trainer's last error line."""
  for cell in failed:
    code = runner.exit_codes[cell.name]
    error = runner.errors.get(cell.name)
    print(
      f'{program}: error: cell {cell.name} failed ({exit_text(code)}); see '
      f'{log_path(runs_dir, cell)}' + (f'\n  its last line: {error}' if error else ''),
      file=sys.stderr,
    )


def drive(
  program: str,
  flag_values,
  cells: list,
  runs_dir: str,
  out: str,
  trainer_command: Callable[[Any, str], list[str]],
  write_report: Callable[[list, str, str], None],
) -> int:
  """A driver's run after its flags are checked: --dry_run prints the trainer commands; else
  the cells run (unless --report_only), the report is written from whatever finished, and each
  failed cell is named. Returns the exit status (1 if a cell failed; 130/143 if stopped)."""
  if flag_values.dry_run:
    for cell in cells:
      print(shlex.join(trainer_command(cell, runs_dir)))
    print(f'# then the table and figure into {out}')
    return 0
  failed, runner = [], None  # --report_only: nothing runs, nothing fails
  if not flag_values.report_only:
    stopped, failed, runner = run_cells(
      cells, runs_dir, flag_values.parallel, trainer_command, flag_values.rounds
    )
    if stopped is not None:
      return stopped
  if refuse_unfinished(program, flag_values, cells, runs_dir, trainer_command):
    report_failures(program, failed, runner, runs_dir)
    return 1
  write_report(cells, runs_dir, out)
  report_failures(program, failed, runner, runs_dir)
  return 1 if failed else 0


def ran_to_the_end(
  runs_dir: str, cell, command_line: str, rounds: int, diverged: bool = False
) -> bool:
  """Whether the cell's status file says `command_line` ended it: exit 0 with exactly `rounds`
  rounds in its metrics.csv, or, with `diverged`, exit 3 (a diverged run is a result). A cell
  run with other settings, or on to more rounds, was not ended by this command."""
  status = read_status(runs_dir, cell) or {}
  if status.get('command') != command_line:
    return False
  if diverged and status.get('exit_code') == EXIT_DIVERGED:
    return True
  rows = read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  return status.get('exit_code') == 0 and last_round(rows) == rounds


def unfinished(
  cells: list, runs_dir: str, rounds: int, command: Callable[[Any, str], list[str]]
) -> list:
  """The cells that `command(cell, runs_dir)` has not yet ended after `rounds` rounds or by
  diverging (`ran_to_the_end`)."""
  return [
    cell
    for cell in cells
    if not ran_to_the_end(
      runs_dir, cell, shlex.join(command(cell, runs_dir)), rounds, diverged=True
    )
  ]


def refuse_unfinished(
  program: str,
  flag_values,
  cells: list,
  runs_dir: str,
  command: Callable[[Any, str], list[str]],
) -> bool:
  """With --publish: whether some of `cells` have not finished with this command (then said in
  one line on stderr), so that a partial run (a failed cell, --report_only before the end, cells
  left by other settings) never replaces a committed result."""
  if not flag_values.publish:
    return False
  left = unfinished(cells, runs_dir, flag_values.rounds, command)
  if left:
    print(
      f'{program}: error: --publish: {len(left)} of {len(cells)} cells have not finished (e.g. '
      f'{left[0].name}); nothing was written',
      file=sys.stderr,
      flush=True,
    )
  return bool(left)


DRY_RUN_HELP = 'Print the trainer commands and where the report goes; write nothing.'


def define_output_flags(
  runs_dir: str | None,
  *,
  runs_dir_help: str = 'Where the cells run.',
  dry_run_help: str = DRY_RUN_HELP,
) -> None:
  """Every cell driver's --runs_dir, --out (default report/ under the runs directory), --publish,
  --report_only and --dry_run, as `drive` and `publish.output_from_flags` read them. Defined in
  this module: a driver lists them in its --help with `flags.adopt_module_key_flags(cell_runner)`."""
  flags.DEFINE_string('runs_dir', runs_dir, runs_dir_help)
  flags.DEFINE_string(
    'out',
    None,
    'Where the tables and figures go (default: report/ under the runs directory; not a committed '
    'results folder: see --publish).',
  )
  flags.DEFINE_bool('publish', False, publish.PUBLISH_HELP)
  flags.DEFINE_bool(
    'report_only', False, 'Do not train; write the report from the runs as they are.'
  )
  flags.DEFINE_bool('dry_run', False, dry_run_help)


HELP_ARGS = ('--help', '-help', '-h', '--helpshort', '-helpshort', '-?')


def app_run(main: Callable[[list[str]], int]) -> None:
  """absl's `app.run(main)` for a reproduction script, except that --help (-h, --helpshort)
  prints the script's usage and flags and exits 0 (absl's: 1), and an unknown flag or a bad
  value is one line `<script>: error: ...; see --help` with exit 2 (absl's: FATAL, exit 1)."""
  args = sys.argv[1 : sys.argv.index('--')] if '--' in sys.argv else sys.argv[1:]
  if any(arg in HELP_ARGS for arg in args):
    app.usage(shorthelp=True, writeto_stdout=True, exitcode=0)

  def parse(argv: list[str]) -> list[str]:
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      script = os.path.splitext(os.path.basename(argv[0]))[0]
      print(f'{script}: error: {e}; see --help', file=sys.stderr, flush=True)
      sys.exit(2)

  app.run(main, flags_parser=parse)


class UsageError(ValueError):
  """A bad flag value of a reproduction driver: one line on stderr, exit 2."""


def run_main(program: str, body: Callable[[list[str]], int], argv: list[str]) -> int:
  """body(argv), or exit status 2 with one `<program>: error: ...` line on a UsageError or a
  refused output (`publish.PublishError`)."""
  try:
    return body(argv)
  except (UsageError, publish.PublishError) as e:
    print(f'{program}: error: {e}', file=sys.stderr, flush=True)
    return 2


def check_driver_flags(flag_values, argv: list[str]) -> None:
  """No positional arguments; --rounds, --parallel and the cadences >= 1."""
  if len(argv) > 1:
    raise UsageError(f'unexpected arguments {argv[1:]}')
  for name in ('rounds', 'parallel', 'rounds_per_eval', 'rounds_per_checkpoint'):
    if flag_values[name].value < 1:
      raise UsageError(f'--{name} must be >= 1, got {flag_values[name].value}')
