"""A local TFF execution context whose C++ worker cannot outlive Python.

Infrastructure module (no paper): it replaces TensorFlow Federated 0.87's
`tff.backends.native.set_sync_local_cpp_execution_context()` for our trainer
and tests. TFF's own version starts its `worker_binary` child lazily on the
first computation call, without a parent-death signal and inheriting Python's
stdout/stderr, so the worker survives a SIGKILLed Python (re-parented to PID 1,
holding any output pipe open); and the `ServiceManager.__del__` of the context
that `import tensorflow_federated` installs runs during interpreter teardown,
printing "Exception ignored in ... AttributeError: 'NoneType' object has no
attribute 'Popen'" at every exit.

`local_execution()` instead starts the worker itself, eagerly, with the same
flags TFF uses (`--port`, `--max_concurrent_computation_calls`), plus:

* `PR_SET_PDEATHSIG = SIGKILL` (Linux `prctl`, set in the child between fork
  and exec), so the kernel kills the worker when Python dies for any reason;
* its own process group, so a terminal Ctrl-C reaches only Python, which
  raises `KeyboardInterrupt` and stops the worker in `close()`;
* stdout and stderr sent to Python's stderr (fd 2) or to a log file, never to
  Python's stdout.

It then composes the same client TFF builds internally, from public pieces:
`tff.framework.RemoteExecutorGrpcStub` -> `RemoteExecutor` ->
`ResourceManagingExecutorFactory` -> `SyncExecutionContext`, with
`tff.backends.native.desugar_and_transform_to_native` as compiler (after TFF's
secure-sum intrinsics are compiled to their TensorFlow bodies: `compile_native`), and
makes it the default context of the calling thread until `close()`.

At exit, `cleanup_at_exit` (registered by the `runtime` package) closes any
`LocalExecution` left open and replaces the default context by TFF's "no
default context", which drops the last reference to TFF's import-time
`ServiceManager`: it is destroyed then, while its module globals still exist
(no "Exception ignored" message; a worker it may have started is stopped too).
No garbage collection is needed for that (nothing holds it in a cycle), and a
full one cost a large process (a pytest worker) seconds at exit.

Importing this module also stops one line of noise on stderr (`skip_grappler_without_fetches`):
TFF's compiler runs Grappler on every TensorFlow graph of a computation, and on a graph with no
output (a compression or secure-sum step's side computations) Grappler logs "E ...
grappler_item_builder.cc:435] Failed to detect the fetch node(s), skipping this input" and
raises, after which TFF uses the graph as it was. Such graphs are now passed through unchanged
without asking Grappler: the same compiled computation, no error line.

Caveat: the kernel sends the parent-death signal when the *thread* that
forked the worker exits. With `with local_execution():` the worker is started
and stopped by the thread running the `with` block, so that thread outlives
the worker. Code that calls `close()` by hand must start the `LocalExecution`
from a thread that lives at least as long (normally the main thread).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import types

import grpc
import portpicker
import tensorflow_federated as tff
from tensorflow_federated.python.core.environments.tensorflow_backend import graph_optimizations
from tensorflow_federated.python.core.impl.context_stack import (
  set_default_context as _tff_set_default_context,
)

from tff_adaptive.runtime import worker_process
from tff_adaptive.runtime.worker_process import worker_binary_path


def skip_grappler_without_fetches() -> None:
  """TFF's `optimize_graph_spec`, returning a graph with no output as it is (module docstring):
  Grappler cannot optimize it (it finds no fetch node, logs an error line and raises, and TFF
  falls back to the unoptimized graph), so the result is TFF's own."""
  optimize = graph_optimizations.optimize_graph_spec
  if getattr(optimize, 'skips_graphs_without_fetches', False):
    return

  def optimize_graph_spec(graph_spec_obj, config_proto):
    if not graph_spec_obj.out_names:
      return graph_spec_obj
    return optimize(graph_spec_obj, config_proto)

  optimize_graph_spec.skips_graphs_without_fetches = True
  graph_optimizations.optimize_graph_spec = optimize_graph_spec


skip_grappler_without_fetches()


def simulate_secure_intrinsics(comp):
  """`comp` with TFF's secure-sum intrinsics as their TensorFlow bodies: secure aggregation
  simulated in the clear, the same modular arithmetic (as TFF's test contexts run it; TFF's
  C++ runtime has no secure sum). `comp` itself when it has none (their URIs, e.g.
  'federated_secure_sum_bitwidth', are not in its serialised form)."""
  if (
    b'federated_secure' not in tff.framework.ConcreteComputation.get_proto(comp).SerializeToString()
  ):
    return comp
  return tff.backends.test.replace_secure_intrinsics_with_bodies(comp)


def compile_native(comp):
  """The local context's compiler: `simulate_secure_intrinsics`, then TFF's native one."""
  return tff.backends.native.desugar_and_transform_to_native(simulate_secure_intrinsics(comp))


__all__ = ['LocalExecution', 'local_execution', 'worker_binary_path']

_GRPC_MAX_MESSAGE_LENGTH_BYTES = 2 * 1000 * 1000 * 1000  # As in TFF 0.87.
GRPC_CHANNEL_OPTIONS = (
  ('grpc.max_message_length', _GRPC_MAX_MESSAGE_LENGTH_BYTES),
  ('grpc.max_receive_message_length', _GRPC_MAX_MESSAGE_LENGTH_BYTES),
  ('grpc.max_send_message_length', _GRPC_MAX_MESSAGE_LENGTH_BYTES),
)
_START_ATTEMPTS = 3  # A picked port can be taken before the worker binds it.

_OPEN: list[LocalExecution] = []
_OPEN_LOCK = threading.Lock()


def _check_optional_positive(name: str, value: int | None) -> None:
  if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
    raise ValueError(f'{name} must be None or an integer >= 1, got {value!r}.')


class LocalExecution:
  """A running `worker_binary` and the TFF context that talks to it.

  Created (and started) by `local_execution()`; use it as a context manager or
  call `close()`. Attributes: `worker_pid`, `port`, `context` (the
  `tff.framework.SyncExecutionContext`), `max_concurrent_computation_calls`.
  """

  def __init__(
    self,
    *,
    max_concurrent_computation_calls: int | None,
    default_num_clients: int,
    intra_op_threads: int | None,
    inter_op_threads: int | None,
    stream_structs: bool,
    startup_timeout_s: float,
    worker_log: str | os.PathLike[str] | None,
  ):
    self.max_concurrent_computation_calls = max_concurrent_computation_calls
    self._default_num_clients = default_num_clients
    self._stream_structs = stream_structs
    self._executors = []
    self._closed = False
    self._lock = threading.Lock()
    self._owner_thread = threading.current_thread()
    env = dict(os.environ)
    if intra_op_threads is not None:
      env['TF_NUM_INTRAOP_THREADS'] = str(intra_op_threads)
    if inter_op_threads is not None:
      env['TF_NUM_INTEROP_THREADS'] = str(inter_op_threads)
    self._process, self.port, self._channel = self._start_worker(env, startup_timeout_s, worker_log)
    self.worker_pid = self._process.pid
    try:
      self._stub = tff.framework.RemoteExecutorGrpcStub(self._channel)
      factory = tff.framework.ResourceManagingExecutorFactory(
        executor_stack_fn=self._executor_stack
      )
      self.context = tff.framework.SyncExecutionContext(
        executor_fn=factory,
        compiler_fn=compile_native,
        transform_args=tff.tensorflow.transform_args,
        transform_result=tff.tensorflow.transform_result,
      )
      self._previous_default = install_default_context(self.context)
    except BaseException:
      self._stop_worker()
      raise
    with _OPEN_LOCK:
      _OPEN.append(self)

  def _start_worker(
    self,
    env: dict[str, str],
    startup_timeout_s: float,
    worker_log: str | os.PathLike[str] | None,
  ) -> tuple[subprocess.Popen[bytes], int, grpc.Channel]:
    """Starts the worker on a free port and waits until gRPC is READY."""
    max_calls = self.max_concurrent_computation_calls
    deadline = time.monotonic() + startup_timeout_s
    failures = []
    for _ in range(_START_ATTEMPTS):
      port = portpicker.pick_unused_port()
      process = worker_process.start(
        port, max_concurrent_computation_calls=max_calls, env=env, log=worker_log
      )
      channel = grpc.insecure_channel(f'localhost:{port}', list(GRPC_CHANNEL_OPTIONS))
      ready = grpc.channel_ready_future(channel)
      try:
        while process.poll() is None and time.monotonic() < deadline:
          try:
            ready.result(timeout=0.05)
            return process, port, channel
          except grpc.FutureTimeoutError:
            continue
      except BaseException:
        ready.cancel()
        close_channel(channel)
        worker_process.terminate(process)
        raise
      ready.cancel()
      close_channel(channel)
      failures.append(f'port {port}: exit code {process.poll()}')
      worker_process.terminate(process)
      if time.monotonic() >= deadline:
        break
    raise RuntimeError(
      f'worker_binary did not become ready within {startup_timeout_s} s '
      f'({"; ".join(failures) or "timed out"}).'
    )

  def _executor_stack(self, cardinalities):
    """Executor-stack function for `ResourceManagingExecutorFactory`."""
    if self._closed:
      raise RuntimeError('This LocalExecution is closed; its worker is gone.')
    if cardinalities.get(tff.CLIENTS) is None:
      cardinalities[tff.CLIENTS] = self._default_num_clients
    executor = tff.framework.RemoteExecutor(self._stub, stream_structs=self._stream_structs)
    executor.set_cardinalities(cardinalities)
    self._executors.append(executor)
    return executor

  @property
  def closed(self) -> bool:
    return self._closed

  def _stop_worker(self) -> None:
    worker_process.terminate(self._process)
    close_channel(self._channel)

  def close(self) -> None:
    """Stops the worker, waits for it and restores the previous context.

    Idempotent. The worker is stopped before the executors are released: the
    release RPCs then fail fast (and are ignored by TFF) instead of waiting on
    a worker that may be busy, e.g. after a KeyboardInterrupt.
    """
    with self._lock:
      if self._closed:
        return
      self._closed = True
    try:
      worker_process.terminate(self._process)
      for executor in self._executors:
        executor.close()  # Marks its values as disposed; RPC errors ignored.
      self._executors.clear()
      close_channel(self._channel)
    finally:
      with _OPEN_LOCK:
        if self in _OPEN:
          _OPEN.remove(self)
      restore_default_context(self.context, self._previous_default, self._owner_thread)
      self._previous_default = None

  def __enter__(self) -> LocalExecution:
    return self

  def __exit__(
    self,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: types.TracebackType | None,
  ) -> None:
    self.close()


def install_default_context(context):
  """Makes `context` TFF's default context; returns the one it replaces (or None)."""
  previous = getattr(tff.framework.get_context_stack(), '_stack', [None])[0]
  tff.framework.set_default_context(context)
  return previous


def restore_default_context(context, previous, owner_thread: threading.Thread) -> None:
  """Puts `previous` back if `context` is still the default and we are on its owner thread."""
  current = getattr(tff.framework.get_context_stack(), '_stack', [None])[0]
  if threading.current_thread() is owner_thread and current is context:
    if previous is not None:
      tff.framework.set_default_context(previous)
    else:
      _tff_set_default_context.set_no_default_context()


def close_channel(channel: grpc.Channel) -> None:
  """Closes `channel` without racing grpc's connectivity-polling thread.

  `RemoteExecutorGrpcStub` subscribes to the channel's connectivity, which
  runs a grpc thread that re-enters `watch_connectivity_state` every 0.2 s;
  `Channel.close()` between two of its calls makes that thread die with
  "ValueError: Cannot monitor channel state: Channel closed!" (printed as an
  unhandled thread exception). So: drop the subscriptions, wait until the
  thread has noticed and stopped polling, then close. These are private
  attributes of grpcio 1.59; without them the channel is left to the garbage
  collector, which is safe (its `__del__` only unsubscribes).
  """
  state = getattr(channel, '_connectivity_state', None)
  unsubscribe_all = getattr(channel, '_unsubscribe_all', None)
  if state is None or unsubscribe_all is None or not hasattr(state, 'polling'):
    return
  unsubscribe_all()
  deadline = time.monotonic() + 2.0
  while state.polling and time.monotonic() < deadline:
    time.sleep(0.01)
  if not state.polling:
    channel.close()


def local_execution(
  max_concurrent_computation_calls: int | None = None,
  *,
  default_num_clients: int = 0,
  intra_op_threads: int | None = None,
  inter_op_threads: int | None = None,
  stream_structs: bool = False,
  startup_timeout_s: float = 60.0,
  worker_log: str | os.PathLike[str] | None = None,
) -> LocalExecution:
  """Starts a guarded local `worker_binary` and makes it TFF's default context.

  Usage: `with local_execution() as ex: ...`, where `ex.worker_pid` is the
  worker's process id. Inside the block every TFF computation invoked from the
  same thread runs on this worker; on leaving it (normally, by an exception or
  KeyboardInterrupt) the worker is stopped and waited for, and the previous
  default context is restored. If Python is killed, the kernel kills the
  worker (PR_SET_PDEATHSIG). Without `with`, call `.close()`; an `atexit`
  hook closes it otherwise.

  Args:
    max_concurrent_computation_calls: Limit on parallel calls to one
      computation in the worker (e.g. client updates of one `federated_map`);
      None means no limit (TFF's default, flag value -1).
    default_num_clients: Number of clients assumed when a computation's
      arguments do not determine it, as in TFF.
    intra_op_threads: TF intra-op thread-pool size in the worker
      (`TF_NUM_INTRAOP_THREADS`); None keeps TF's default (number of cores).
    inter_op_threads: TF inter-op thread-pool size in the worker
      (`TF_NUM_INTEROP_THREADS`); None keeps TF's default.
    stream_structs: Passed to `tff.framework.RemoteExecutor`.
    startup_timeout_s: Seconds to wait for the worker to accept gRPC calls.
    worker_log: File the worker's stdout and stderr are appended to; None
      sends both to Python's stderr (file descriptor 2).

  Returns:
    The started `LocalExecution`.

  Raises:
    ValueError: If an argument is out of range.
    RuntimeError: If the worker binary is missing or does not become ready.
  """
  _check_optional_positive('max_concurrent_computation_calls', max_concurrent_computation_calls)
  _check_optional_positive('intra_op_threads', intra_op_threads)
  _check_optional_positive('inter_op_threads', inter_op_threads)
  if (
    isinstance(default_num_clients, bool)
    or not isinstance(default_num_clients, int)
    or default_num_clients < 0
  ):
    raise ValueError(f'default_num_clients must be an integer >= 0, got {default_num_clients!r}.')
  if not startup_timeout_s > 0:
    raise ValueError(f'startup_timeout_s must be > 0, got {startup_timeout_s!r}.')
  if not os.path.isfile(worker_binary_path()):
    raise RuntimeError(f'No TFF worker binary at {worker_binary_path()}.')
  return LocalExecution(
    max_concurrent_computation_calls=max_concurrent_computation_calls,
    default_num_clients=default_num_clients,
    intra_op_threads=intra_op_threads,
    inter_op_threads=inter_op_threads,
    stream_structs=stream_structs,
    startup_timeout_s=startup_timeout_s,
    worker_log=worker_log,
  )


def cleanup_at_exit() -> None:
  """Closes open executions and drops TFF's import-time context cleanly (`runtime`'s atexit)."""
  with _OPEN_LOCK:
    still_open = list(reversed(_OPEN))
  for execution in still_open:
    execution.close()
  _tff_set_default_context.set_no_default_context()
