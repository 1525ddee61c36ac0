"""Where TFF computations run: one guarded local worker, or a round spread over many.

Infrastructure (no paper). TFF 0.87's own local context starts its C++ `worker_binary` without a
parent-death signal, so the worker can outlive Python; and it has no ready-made context for
workers on other machines. This subpackage supplies both, composed from TFF's public parts:

* `local_execution()` (module `local`): TFF's default context on a `worker_binary` this process
  owns; the worker dies with Python, however Python ends.
* `remote_execution(addresses)`, `local_workers_execution(n)` (module `remote`): TFF's
  `MergeableCompExecutionContext` over running workers, each round's clients split among them,
  partial aggregates merged in worker order; a lost worker is a `WorkerLostError` naming it.
* `worker_server` (no TensorFlow import): one worker confined to one address, behind
  `python -m run.worker`; `worker_process`: starting and stopping `worker_binary`.
* `addresses` (no TensorFlow import): `parse_worker_addresses`, the trainer's --workers check.

The names below are loaded on first use, so `tff_adaptive.runtime.worker_server` can be imported
without TensorFlow (a worker must still be single-threaded when it enters its own namespace).

Importing this subpackage (which `import tff_adaptive` does) registers an `atexit` hook: if TFF was imported, it closes any
`LocalExecution` left open and replaces TFF's default context by "no default context", which
drops the last reference to TFF's import-time `ServiceManager`, so it is destroyed while its
module globals still exist (no "Exception ignored ... 'Popen'" message at exit; a worker it
started is stopped too).
"""

import atexit
import importlib
import sys

__all__ = [
  'DEFAULT_CONNECT_TIMEOUT_S',
  'LocalExecution',
  'RemoteExecution',
  'WorkerLostError',
  'WorkerStartError',
  'WorkerUnreachableError',
  'check_reachable',
  'local_execution',
  'local_workers_execution',
  'parse_worker_addresses',
  'remote_execution',
]

_MODULE_OF = {
  'LocalExecution': 'local',
  'local_execution': 'local',
  **{
    name: 'remote'
    for name in (
      'DEFAULT_CONNECT_TIMEOUT_S',
      'RemoteExecution',
      'WorkerLostError',
      'WorkerStartError',
      'WorkerUnreachableError',
      'check_reachable',
      'local_workers_execution',
      'remote_execution',
    )
  },
  'parse_worker_addresses': 'addresses',
}


def __getattr__(name: str):
  if name not in _MODULE_OF:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  return getattr(importlib.import_module(f'{__name__}.{_MODULE_OF[name]}'), name)


def __dir__() -> list[str]:
  return sorted(__all__)


def _cleanup_at_exit() -> None:
  if 'tensorflow_federated' in sys.modules:
    importlib.import_module(f'{__name__}.local').cleanup_at_exit()


atexit.register(_cleanup_at_exit)
