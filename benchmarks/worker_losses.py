"""A long-lived worker's memory across repeated losses of the worker beside it.

  python -m benchmarks.worker_losses [--losses=20] [--task=fmnist] [--clients_per_round=10]
  bazel run //benchmarks:worker_losses -- --losses=5 --control

Infrastructure script (no paper). A user keeps `run.worker` processes running between runs;
when one of a run's workers is lost, the trainer stops (exit code 4) and the surviving workers
must free their share of the failed round, or each loss leaves it on them for good. TFF's
worker keeps one executor per set of cardinalities, reference-counted over the connections
that asked for it, and every value a round created lives in that executor until it is
disposed; an executor that is never disposed keeps them all.

The script starts one survivor (`python -m run.worker --port=0`), then --losses times:

1. starts a second worker and `run.federated_trainer` on both (`--workers=A,B`, the given
   task, 10 rounds at most, a fresh output directory);
2. once the trainer prints round 2, pauses it (SIGSTOP), SIGKILLs the second worker, and lets
   it go on (SIGCONT): its next call to B fails, usually while A is computing its share;
3. checks that the trainer exited with code 4 naming B, and reads the survivor's
   worker_binary resident memory (VmRSS from /proc) after a short settle.

The survivor runs with glibc's mmap threshold fixed (`MALLOC_MMAP_THRESHOLD_`, default 128 KiB;
`--malloc_mmap_threshold=0` leaves glibc's dynamic threshold): freed tensors then go back to
the system at once, so RSS shows what the worker still holds, not what glibc's heap arenas
kept for reuse. Under the dynamic threshold a worker grows ~30 MiB per run even when every
executor is disposed (fmnist, `--control`); see docs/engines_and_workers.md.

With --control it instead runs the same trainer to the end --losses times (no loss), the
baseline of how a healthy run leaves the worker. Prints one line per run and a summary: the
RSS after the first run, after the last, and the least-squares growth per run over the runs
after the first (the first run's growth is TF's one-time caches).
"""

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

_LOSSES = flags.DEFINE_integer('losses', 20, 'Runs, each losing the second worker.')
_TASK = flags.DEFINE_string('task', 'fmnist', 'The trainer task of every run.')
_CLIENTS_PER_ROUND = flags.DEFINE_integer('clients_per_round', 10, 'Clients per round.')
_CONTROL = flags.DEFINE_bool('control', False, 'Run each trainer to its end: no worker lost.')
_SETTLE_S = flags.DEFINE_float('settle_s', 2.0, 'Seconds to wait before reading the memory.')
_MMAP_THRESHOLD = flags.DEFINE_integer(
  'malloc_mmap_threshold',
  128 * 1024,
  "The survivor's MALLOC_MMAP_THRESHOLD_ (0: glibc's dynamic threshold, the default of a worker).",
)

_ANNOUNCE = re.compile(r' on (\S+):(\d+) \(.*worker_binary pid (\d+)\)')
_ROUNDS = 10
_TIMEOUT_S = 600


def _env() -> dict:
  return {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2', 'PYTHONUNBUFFERED': '1'}


class _Worker:
  """A `python -m run.worker --port=0` process: `.address`, `.binary_pid`."""

  def __init__(self, **env):
    self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, '-m', 'run.worker', '--port=0'],
      env={**_env(), **env},
      stdin=subprocess.DEVNULL,
      stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL,
      text=True,
    )
    ready, _, _ = select.select([self.proc.stdout], [], [], 60)
    match = _ANNOUNCE.search(self.proc.stdout.readline() if ready else '')
    if match is None:
      self.stop()
      raise RuntimeError('a worker did not announce its address within 60 s')
    self.address = f'{match.group(1)}:{match.group(2)}'
    self.binary_pid = int(match.group(3))

  def stop(self, sig=signal.SIGTERM) -> None:
    if self.proc.poll() is None:
      self.proc.send_signal(sig)
    self.proc.wait(30)


def _rss_mib(pid: int) -> float:
  with open(f'/proc/{pid}/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 1024
  raise RuntimeError(f'no VmRSS for pid {pid}')


def _trainer(workers: str, root: str) -> subprocess.Popen:
  args = [
    f'--task={_TASK.value}',
    f'--clients_per_round={_CLIENTS_PER_ROUND.value}',
    f'--total_rounds={_ROUNDS}',
    '--rounds_per_eval=5',
    f'--workers={workers}',
    f'--root_output_dir={root}',
  ]
  return subprocess.Popen(  # pylint: disable=consider-using-with
    [sys.executable, '-m', 'run.federated_trainer', *args],
    env=_env(),
    stdin=subprocess.DEVNULL,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _one_run(survivor: _Worker, index: int) -> str:
  """One trainer run on the survivor and a new worker; returns how it ended."""
  other = _Worker()
  try:
    with tempfile.TemporaryDirectory(prefix='worker_losses_') as root:
      trainer = _trainer(f'{survivor.address},{other.address}', root)
      try:
        if not _CONTROL.value:
          for line in trainer.stdout:
            if line.startswith('round 2/'):
              break
          trainer.send_signal(signal.SIGSTOP)
          other.stop(signal.SIGKILL)
          trainer.send_signal(signal.SIGCONT)
        _, stderr = trainer.communicate(timeout=_TIMEOUT_S)
      finally:
        if trainer.poll() is None:
          trainer.kill()
          trainer.wait()
  finally:
    other.stop(signal.SIGKILL)
  expected = 0 if _CONTROL.value else 4
  if trainer.returncode != expected:
    raise RuntimeError(
      f'run {index}: the trainer exited {trainer.returncode}, not {expected}: {stderr[-2000:]}'
    )
  if not _CONTROL.value:
    match = re.search(r'round (\d+): worker (\S+) ', stderr)
    if match is None or match.group(2) != other.address:
      raise RuntimeError(f'run {index}: the trainer did not name the lost worker: {stderr[-2000:]}')
    return f'lost {other.address} in round {match.group(1)}'
  return 'finished'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  if _LOSSES.value < 3:  # a growth per run after the first needs two runs after it
    raise app.UsageError(f'--losses must be >= 3, got {_LOSSES.value}')
  threshold = _MMAP_THRESHOLD.value
  survivor = _Worker(**({'MALLOC_MMAP_THRESHOLD_': str(threshold)} if threshold else {}))
  try:
    start = _rss_mib(survivor.binary_pid)
    kind = 'runs to the end (control)' if _CONTROL.value else 'runs, each losing the other worker'
    print(
      f'survivor {survivor.address} (worker_binary pid {survivor.binary_pid}): RSS {start:.1f} '
      f'MiB at start; {_LOSSES.value} {kind}; task {_TASK.value}, '
      f'{_CLIENTS_PER_ROUND.value} clients per round; MALLOC_MMAP_THRESHOLD_='
      f'{threshold or "unset (dynamic)"}',
      flush=True,
    )
    rss = []
    for i in range(1, _LOSSES.value + 1):
      started = time.monotonic()
      how = _one_run(survivor, i)
      time.sleep(_SETTLE_S.value)
      rss.append(_rss_mib(survivor.binary_pid))
      print(
        f'run {i:2d}: {how}; survivor RSS {rss[-1]:.1f} MiB '
        f'({rss[-1] - start:+.1f} since start); {time.monotonic() - started:.0f} s',
        flush=True,
      )
    slope = np.polyfit(np.arange(2, len(rss) + 1), rss[1:], 1)[0]
    print(
      f'survivor RSS: {start:.1f} MiB at start, {rss[0]:.1f} after run 1, {rss[-1]:.1f} after '
      f'run {len(rss)}; growth per run after the first: {slope:+.2f} MiB (least squares)',
      flush=True,
    )
  finally:
    survivor.stop()


if __name__ == '__main__':
  app.run(main)
