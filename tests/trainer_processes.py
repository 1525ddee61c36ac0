"""How the tests start `python -m run.federated_trainer`: forked from one preloading server.

Each pytest process starts one `run.preload.Preloaded` server on first use; every trainer run of
the tests is a child of it, a process of its own (pid, exit status, signals, stdio, worker_binary
children), without the ~10 CPU-s of importing TensorFlow and TFF per run: the server imports
`run.federated_trainer` as a module, and that import loads TensorFlow, TFF and the library
(`federated_trainer.import_training_modules`; run as `python -m`, the trainer imports them only
once its flags are checked), and it does AutoGraph's conversions for the children after the first
that needed them (`run.autograph_cache`; TEST_AUTOGRAPH_CACHE=0 turns that off). TEST_PRELOAD=0
runs every trainer as `sys.executable -m run.federated_trainer` instead. The tests that check what a fresh `python -m` process does at
start (TF's import-time logging, what a bad flag costs) start real processes themselves
(`real=True`). The reproduction drivers the tests start get `driver_env()`: their trainers are
forked from a server of this pytest process too (`run.preload.Preloaded.shared`), not from one
each driver would start and import TensorFlow and TFF into again.
"""

import atexit
import os
import pathlib
import re
import subprocess
import sys

from reproductions import cell_runner
from tff_adaptive.run import preload

REPO = pathlib.Path(__file__).resolve().parents[1]
TRAINER = 'run.federated_trainer'
_SERVERS: dict[tuple, preload.Preloaded] = {}
# TF 2.14 prints these three lines at `import tensorflow` whatever TF_CPP_MIN_LOG_LEVEL < 3 is
# (tensorflow/tensorflow#62075); with the XLA line below they are the only stderr lines the
# tests ignore (the trainer filters the three out itself: `tff_adaptive._quiet_tensorflow`).
# XLA on the CPU adds one more when it first compiles (--xla): "SetPriority unimplemented for
# this stream" (an XLA CPU-stream log line, no effect on results). Grappler's "Failed to detect
# the fetch node(s)" on TFF computations without outputs is not printed any more
# (`runtime.local.skip_grappler_without_fetches`): a test that sees it fails.
_TF_IMPORT_NOISE = re.compile(
  r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] (Unable to register cu(DNN|FFT|BLAS) '
  r'factory: Attempting to register factory for plugin cu(DNN|FFT|BLAS) when one has '
  r'already been registered|SetPriority unimplemented for this stream\.)$'
)


def stderr_lines(text: str) -> list:
  """The non-blank lines of a trainer's stderr but TF's import-time noise."""
  return [l for l in text.splitlines() if l.strip() and not _TF_IMPORT_NOISE.match(l)]


def env(**extra) -> dict:
  """The trainer's environment in the tests: TF's C++ INFO/WARNING quiet, unbuffered stdio."""
  return {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2', 'PYTHONUNBUFFERED': '1', **extra}


def command(args) -> list:
  """The trainer's command line as a user types it."""
  return [sys.executable, '-m', TRAINER, *args]


def server(environment=None) -> preload.Preloaded:
  """This pytest process's preloading server for `environment` (default `env()`)."""
  environment = env() if environment is None else environment
  key = tuple(sorted(preload.import_time_env(environment).items()))
  if key not in _SERVERS:
    _SERVERS[key] = preload.Preloaded(
      [TRAINER],
      env=environment,
      share_autograph=os.environ.get('TEST_AUTOGRAPH_CACHE') != '0',
      shareable=True,
    )
  return _SERVERS[key]


def driver_env(**extra) -> dict:
  """The environment of a reproduction driver (any `reproductions.cell_runner` user) started by a
  test: TF's C++ INFO/WARNING quiet, the repository importable from anywhere, `extra`, and the
  address of this process's server for its trainers' environment (`cell_runner.child_env`: TF's
  pools pinned), which the driver then shares (TEST_PRELOAD=0: none; it starts its own)."""
  environment = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2', 'PYTHONPATH': str(REPO), **extra}
  if os.environ.get('TEST_PRELOAD', '1') == '0':
    return environment
  trainers = cell_runner.child_env(environment)  # what the driver's cell runner gives them
  return {**environment, preload.SERVER_VARIABLE: server(trainers).address}


@atexit.register
def _close_servers() -> None:
  for server in _SERVERS.values():
    server.close()


def popen(args, *, real: bool = False, environment=None, cwd=REPO, **kwargs):
  """`python -m run.federated_trainer *args`, Popen-like; kwargs as for subprocess.Popen's stdio."""
  environment = env() if environment is None else environment
  if real or os.environ.get('TEST_PRELOAD', '1') == '0':
    return subprocess.Popen(command(args), cwd=cwd, env=environment, **kwargs)  # noqa: S603
  return server(environment).popen(TRAINER, args, cwd=cwd, env=environment, **kwargs)


def run(args, *, timeout=None, **kwargs) -> subprocess.CompletedProcess:
  """Like subprocess.run(command(args), capture_output=True, text=True)."""
  process = popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
  try:
    out, err = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()
    raise
  return subprocess.CompletedProcess(command(args), process.returncode, out, err)
