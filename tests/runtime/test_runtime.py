"""Tests of tff_adaptive.runtime: the worker_binary never outlives Python.

Each scenario runs in a child Python process, which enters
`runtime.local_execution()`, runs a small federated computation and prints the
worker's PID; the test then checks that this PID (and only this PID, so that
tests running in parallel do not interfere) is no longer a live worker_binary.
The four children are started together, so that their TF imports overlap;
the 'normal' child first also runs on TFF's own import-time context, whose
worker runtime's atexit hook must stop without TFF's __del__ message.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

_CHILD = r"""
import os, sys, time
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
import numpy as np
import tensorflow_federated as tff
from tff_adaptive import runtime

mode = sys.argv[1]

def report(pid, result):
  with open(f'/proc/{pid}/comm') as f:
    name = f.read().strip()
  print(f'PID {pid} RESULT {result} NAME {name}', flush=True)

@tff.tensorflow.computation(np.float32)
def add_one(x):
  return x + 1.0

@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def sum_plus_one(values):
  return tff.federated_sum(tff.federated_map(add_one, values))

if mode == 'normal':
  # First on TFF's own import-time context: its worker must be stopped by
  # runtime's atexit hook, without the ServiceManager.__del__ message.
  assert sum_plus_one([1.0, 2.0, 3.0]) == 9.0
  children = []
  for task in os.listdir('/proc/self/task'):
    with open(f'/proc/self/task/{task}/children') as f:
      children += f.read().split()
  report(int(children[0]), 9.0)

with runtime.local_execution(max_concurrent_computation_calls=2) as ex:
  result = sum_plus_one([1.0, 2.0, 3.0])
  report(ex.worker_pid, result)
  if mode == 'raise':
    raise ValueError('raised inside the with block')
  if mode == 'loop':
    while True:
      sum_plus_one([1.0, 2.0, 3.0])
      time.sleep(0.2)
print('EXITED', flush=True)
"""

_STARTUP_TIMEOUT_S = 45.0
_WORKER_GONE_TIMEOUT_S = 5.0


def _child_env() -> dict[str, str]:
  env = dict(os.environ)
  env['PYTHONPATH'] = os.pathsep.join(p for p in sys.path if p)
  env['TF_CPP_MIN_LOG_LEVEL'] = '2'
  return env


def _is_live_worker(pid: int) -> bool:
  """True if `pid` is a running (not zombie) process named worker_binary."""
  try:
    with open(f'/proc/{pid}/stat', 'r') as f:
      stat = f.read()
  except (FileNotFoundError, ProcessLookupError):
    return False
  name = stat[stat.index('(') + 1 : stat.rindex(')')]
  state = stat[stat.rindex(')') + 2]
  return name == 'worker_binary' and state not in ('Z', 'X')


def _wait_worker_gone(pid: int, timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while _is_live_worker(pid):
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


def _read_pid_line(process: subprocess.Popen) -> tuple[int, str]:
  line = process.stdout.readline()
  assert line.startswith('PID '), line
  fields = line.split()
  assert fields[5] == 'worker_binary', line
  return int(fields[1]), fields[3]


@pytest.fixture(scope='module')
def children():
  """Starts one child per mode at once; yields {mode: Popen}."""
  procs = {}
  try:
    for mode in ('normal', 'raise', 'kill', 'interrupt'):
      child_mode = 'loop' if mode in ('kill', 'interrupt') else mode
      procs[mode] = subprocess.Popen(
        [sys.executable, '-c', _CHILD, child_mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
      )
    yield procs
  finally:
    for p in procs.values():
      if p.poll() is None:
        p.kill()
      p.communicate()


def test_normal_exit_leaves_no_worker_and_no_noise(children):
  proc = children['normal']
  tff_pid, _ = _read_pid_line(proc)
  pid, result = _read_pid_line(proc)
  assert pid != tff_pid
  stdout, stderr = proc.communicate(timeout=_STARTUP_TIMEOUT_S)
  assert proc.returncode == 0, stderr
  assert float(result) == 9.0  # (1+1) + (2+1) + (3+1).
  assert stdout.strip() == 'EXITED'
  assert 'Exception ignored' not in stderr
  assert 'Exception in thread' not in stderr
  assert 'Traceback' not in stderr
  assert not _is_live_worker(pid)
  assert not _is_live_worker(tff_pid)


def test_exception_in_block_leaves_no_worker(children):
  proc = children['raise']
  pid, _ = _read_pid_line(proc)
  _, stderr = proc.communicate(timeout=_STARTUP_TIMEOUT_S)
  assert proc.returncode == 1
  assert 'ValueError: raised inside the with block' in stderr
  assert 'Exception ignored' not in stderr
  assert 'Exception in thread' not in stderr
  assert not _is_live_worker(pid)


def test_sigkill_of_python_kills_worker(children):
  proc = children['kill']
  pid, _ = _read_pid_line(proc)
  assert _is_live_worker(pid)
  proc.send_signal(signal.SIGKILL)
  proc.communicate(timeout=_STARTUP_TIMEOUT_S)
  assert proc.returncode == -signal.SIGKILL
  assert _wait_worker_gone(pid, _WORKER_GONE_TIMEOUT_S)


def test_sigint_of_python_stops_worker(children):
  proc = children['interrupt']
  pid, _ = _read_pid_line(proc)
  assert _is_live_worker(pid)
  proc.send_signal(signal.SIGINT)
  _, stderr = proc.communicate(timeout=_STARTUP_TIMEOUT_S)
  # An uncaught KeyboardInterrupt makes Python exit through SIGINT.
  assert proc.returncode == -signal.SIGINT, stderr
  assert 'KeyboardInterrupt' in stderr
  assert 'Exception ignored' not in stderr
  assert 'Exception in thread' not in stderr
  # The worker was stopped and reaped before Python exited.
  assert not _is_live_worker(pid)


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (
      {'max_concurrent_computation_calls': 0},
      'max_concurrent_computation_calls',
    ),
    ({'intra_op_threads': -1}, 'intra_op_threads'),
    ({'inter_op_threads': 1.5}, 'inter_op_threads'),
    ({'default_num_clients': -2}, 'default_num_clients'),
    ({'startup_timeout_s': 0.0}, 'startup_timeout_s'),
  ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
  from tff_adaptive import runtime  # pylint: disable=g-import-not-at-top

  with pytest.raises(ValueError, match=message):
    runtime.local_execution(**kwargs)


@pytest.mark.filterwarnings('error::pytest.PytestUnhandledThreadExceptionWarning')
def test_in_process_nesting_restores_contexts_and_stops_workers():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  from tff_adaptive import runtime  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(np.float32)
  def double(x):
    return 2.0 * x

  stack = tff.framework.get_context_stack()
  before = stack.current
  with runtime.local_execution() as outer:
    assert stack.current is outer.context
    with runtime.local_execution(intra_op_threads=1) as inner:
      assert stack.current is inner.context
      assert inner.worker_pid != outer.worker_pid
      assert double(3.0) == 6.0
    assert not _is_live_worker(inner.worker_pid)
    assert stack.current is outer.context
    assert double(4.0) == 8.0
  assert not _is_live_worker(outer.worker_pid)
  assert outer.closed and inner.closed
  assert stack.current is before
