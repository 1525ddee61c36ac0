"""TFF's C++ `worker_binary` as a child process that cannot outlive its parent.

Infrastructure module (no paper), shared by `runtime.local_execution` (the trainer's own local
worker) and `worker_server` (a worker serving one network address). It imports neither
TensorFlow nor TFF: `worker_server` must stay single-threaded until it has moved into its own
network namespace, and importing TensorFlow starts threads.

The child gets:

* `PR_SET_PDEATHSIG = SIGKILL` (Linux `prctl`, set between fork and exec), so the kernel kills
  the worker when its parent dies for any reason (even SIGKILL);
* its own process group, so a terminal Ctrl-C reaches only the parent, which then stops the
  worker with `terminate`;
* stdout and stderr sent to the parent's stderr (fd 2) or to a log file, never to its stdout.

Caveat: the kernel sends the parent-death signal when the *thread* that forked the worker
exits, so start workers from a thread that outlives them (normally the main thread).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
from typing import IO

_PR_SET_PDEATHSIG = 1  # From <linux/prctl.h>.
STOP_GRACE_S = 5.0

# Resolved once, in the parent: the forked child only calls the function.
_PRCTL = None
if sys.platform.startswith('linux'):
  _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
  _PRCTL.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
  _PRCTL.restype = ctypes.c_int


def worker_binary_path() -> str:
  """Returns the path of the C++ `worker_binary` shipped in the TFF package (TFF not imported)."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or spec.origin is None:
    raise RuntimeError('tensorflow_federated is not installed.')
  return os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')


def make_preexec_fn(parent_pid: int, death_signal: int = signal.SIGKILL):
  """Returns a hook for the child (between fork and exec) setting PR_SET_PDEATHSIG to
  `death_signal`: the child gets it when `parent_pid` dies, also if that happened before."""
  if _PRCTL is None:
    return None
  prctl = _PRCTL
  death_signal = int(death_signal)

  def preexec() -> None:
    if prctl(_PR_SET_PDEATHSIG, death_signal, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), 'prctl(PR_SET_PDEATHSIG) failed')
    if os.getppid() != parent_pid:  # The parent died before prctl ran.
      os.kill(os.getpid(), death_signal)

  return preexec


def start(
  port: int,
  *,
  max_concurrent_computation_calls: int | None = None,
  env: dict[str, str] | None = None,
  log: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
  """Starts `worker_binary --port=port` guarded as described in the module docstring.

  The binary listens on every interface (`[::]:port`, hard-coded in TFF 0.87's worker_main.cc).
  `log`: a file its stdout and stderr are appended to; None sends both to our stderr.
  """
  binary = worker_binary_path()
  if not os.path.isfile(binary):
    raise RuntimeError(f'No TFF worker binary at {binary}.')
  args = [
    binary,
    f'--port={port}',
    f'--max_concurrent_computation_calls={max_concurrent_computation_calls or -1}',
  ]
  out: IO[bytes] | int = 2  # Our stderr file descriptor.
  if log is not None:
    out = open(log, 'ab')  # pylint: disable=consider-using-with
  try:
    return subprocess.Popen(  # pylint: disable=subprocess-popen-preexec-fn
      args,
      stdin=subprocess.DEVNULL,
      stdout=out,
      stderr=out,
      env=env,
      close_fds=True,
      process_group=0,
      preexec_fn=make_preexec_fn(os.getpid()),
    )
  finally:
    if not isinstance(out, int):
      out.close()


def terminate(process: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
  """SIGTERMs `process`, SIGKILLs it after `grace_s`, and reaps it."""
  if process.poll() is not None:
    return
  try:
    process.terminate()
    process.wait(timeout=grace_s)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()
  except BaseException:  # E.g. a second Ctrl-C while waiting.
    process.kill()
    process.wait()
    raise
