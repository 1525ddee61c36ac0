"""TFF computations spread over remote workers: each round's clients split across them.

Infrastructure module (no paper). Composed from TFF 0.87's public parts, no RPC of ours:

* per worker: `tff.framework.RemoteExecutorGrpcStub` -> `RemoteExecutor` ->
  `ResourceManagingExecutorFactory` -> `SyncExecutionContext` (the same stack as
  `local.local_execution`, over a channel to `host:port`);
* over all workers: TFF's `MergeableCompExecutionContext`, the context for computations with
  one aggregation (a learning process's `next`): it compiles the computation to
  `MergeableCompForm`, gives each worker a contiguous share of the CLIENTS-placed arguments
  (`up_to_merge`: broadcast, client work, and the partial aggregate of its clients), merges the
  partial aggregates with the aggregation's own `merge`, and runs `after_merge` (the server
  update). Only the order of the floating-point sums changes versus one worker.

Adjustments to TFF's pieces, each for a reason:

* `_WorkerOrderMergeContext` merges the partial aggregates in worker order (TFF: in the order
  the workers finish, which makes 3 or more workers irreproducible) and runs computations
  without CLIENTS-placed arguments on one worker (TFF: on every worker).

* TFF's `RemoteExecutor` calls its gRPC stub synchronously inside coroutines, so the merge
  context's subrounds would run one after the other on its single event loop. Each worker's
  context is therefore wrapped in `_ThreadedContext`, an `AsyncContext` whose `invoke` runs the
  worker's `SyncExecutionContext` in a thread: the workers compute concurrently.
* TFF retries every call that fails with gRPC UNAVAILABLE or FAILED_PRECONDITION, forever
  (`AsyncExecutionContext.invoke` is wrapped in `retrying.retry` with no limit), so a dead worker
  would hang the trainer. `_WorkerStub` turns UNAVAILABLE, and FAILED_PRECONDITION from a
  worker that no longer accepts a connection, into `WorkerLostError` naming the worker (its
  executor state is lost with it anyway: the round must be redone); gRPC keepalive turns a
  worker that vanishes silently into UNAVAILABLE within ~6.5 minutes. A worker that hangs while
  its host still answers is lost too when `round_timeout_s` is set and a call to it (its share
  of a round) takes longer.
* A worker frees a run's state only when asked: TFF's worker keeps one executor per set of
  cardinalities, reference-counted over the clients that got it, and every value a round
  created lives in it until disposed. TFF's `RemoteExecutor.close` asks (DisposeExecutor), but
  with no deadline, so it cannot be used on a worker that may hang, and TFF's stack never calls
  it when a round fails. `_WorkerStub` records the executors it got and did not dispose, and
  `RemoteExecution.close` disposes them on every worker not known to be lost, calls in flight
  or not (the worker destroys an executor once its running calls end), each worker within
  `_DISPOSE_DEADLINE_S`. Without this each lost worker left the survivors' share of the
  failed run on them for good (`benchmarks.worker_losses`, fmnist: +34 MiB per loss, now +1.2).

What travels over the network each round: the server state to every worker, each worker's
share of the clients' datasets, the partial aggregates back (and to the first worker for the
merge), and, for `after_merge`, the server state and the first worker's share again (TFF's
`MergeableCompForm` passes the original arguments to `after_merge`). The channel is plain gRPC
without authentication or encryption.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import subprocess
import sys
import threading
import time
import types

import grpc
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.proto.v0 import executor_pb2_grpc
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.execution_contexts import (
  mergeable_comp_execution_context as _merge_context,
)
from tensorflow_federated.python.core.impl.types import type_conversions

from tff_adaptive import commands
from tff_adaptive.runtime import local
from tff_adaptive.runtime import worker_process
from tff_adaptive.runtime.addresses import parse_worker_addresses

__all__ = [
  'RemoteExecution',
  'WorkerLostError',
  'WorkerStartError',
  'WorkerUnreachableError',
  'check_reachable',
  'local_workers_execution',
  'parse_worker_addresses',
  'remote_execution',
  'start_local_workers',
]

DEFAULT_CONNECT_TIMEOUT_S = 10.0
_ABANDON_WAIT_S = 10.0
_DISPOSE_DEADLINE_S = 3.0  # per worker, for all of its executors
_RECHECK_S = 2.0
# gRPC keepalive on the workers' channels: a worker that vanishes without closing its
# connection (host down, network cut) fails the pending call within ~6.5 minutes instead of
# never. Not more often: TFF's worker (gRPC's default server policy) rejects pings closer than
# 5 minutes during a long call and would drop the connection.
_KEEPALIVE_OPTIONS = (('grpc.keepalive_time_ms', 360_000), ('grpc.keepalive_timeout_ms', 20_000))
_ANNOUNCE = re.compile(r' on (\S+):(\d+) \(')


_GRPC_DIR = os.path.dirname(grpc.__file__) + os.sep
_quiet_grpc_threads = threading.Lock()
_quieted = False


# gRPC starts its threads (`cygrpc.ForkManagedThread`, named 'Thread-N (_run)') through this
# Cython wrapper, which appears in their tracebacks under this name.
_GRPC_THREAD_WRAPPER = 'grpc._cython.cygrpc._run_with_context'


def _grpc_thread_failure(traceback) -> bool:
  """Whether a thread's traceback is one of gRPC's own threads failing in gRPC's code (not a
  thread of ours or the user's that called into gRPC)."""
  in_wrapper = in_grpc = False
  while traceback is not None:
    code = traceback.tb_frame.f_code
    in_wrapper = in_wrapper or code.co_name.startswith(_GRPC_THREAD_WRAPPER)
    in_grpc = in_grpc or code.co_filename.startswith(_GRPC_DIR)
    traceback = traceback.tb_next
  return in_wrapper and in_grpc


def _grpc_excepthook(previous):
  """`threading.excepthook` that drops the failures of gRPC's own threads (its request,
  polling and delivery threads) in gRPC's code, and hands every other to `previous`."""

  def hook(args):
    if not _grpc_thread_failure(args.exc_traceback):
      previous(args)

  return hook


def _note_lost() -> None:
  """A worker was lost (`_WorkerStub.mark_lost`): from now on, gRPC's threads that fail on its
  closed channel stay quiet.

  The loss is reported once, as `WorkerLostError` (the trainer's one line, exit 4). gRPC's
  background threads of calls still in flight on that worker's channel can fail afterwards
  (once it is closed) with a traceback of their own on stderr, "Exception in thread
  Thread-N (_run)", which tells the user nothing more. Installed only after a loss, so a
  process that never loses a worker keeps its `threading.excepthook` as it was.
  """
  global _quieted
  with _quiet_grpc_threads:
    if not _quieted:
      threading.excepthook = _grpc_excepthook(threading.excepthook)
      _quieted = True


class WorkerLostError(RuntimeError):
  """A worker stopped answering in the middle of a computation (attribute `address`)."""

  def __init__(self, address: str, code: str | None = None, *, reason: str | None = None):
    super().__init__(f'worker {address} ' + (reason or f'stopped answering (gRPC {code})'))
    self.address = address


class WorkerStartError(RuntimeError):
  """An owned local worker did not start (its own error line is on stderr above)."""


class WorkerUnreachableError(RuntimeError):
  """A worker did not accept a gRPC connection in time (attribute `address`)."""

  def __init__(self, address: str, timeout_s: float):
    super().__init__(
      f'worker {address} is not reachable (no gRPC connection within {timeout_s:g} s); start it '
      f'there with `{commands.command("worker")} --port=PORT`, and check the address and '
      'firewall'
    )
    self.address = address


class _WorkerStub(tff.framework.RemoteExecutorStub):
  """`RemoteExecutorGrpcStub` whose lost-worker errors name the worker and are not retried,
  and which knows the worker's executors it got and did not dispose (`release` frees them)."""

  def __init__(self, channel: grpc.Channel, address: str):
    self._stub = tff.framework.RemoteExecutorGrpcStub(channel)
    self._group = executor_pb2_grpc.ExecutorGroupStub(channel)  # for calls with a deadline
    self._channel = channel
    self.address = address
    self.lost = False  # set once it failed as lost (dead, or hung past the round timeout)
    self._live_executors: list[str] = []  # ids got and not disposed (an id can be got twice)
    self._lock = threading.Lock()
    self._released = False  # no more dispose RPCs (the channel is about to close)

  def _call(self, method, request):
    try:
      return method(request)
    except grpc.RpcError as e:
      code = e.code() if callable(getattr(e, 'code', None)) else None
      if code is grpc.StatusCode.UNAVAILABLE or (
        code is grpc.StatusCode.FAILED_PRECONDITION and not self._answers()
      ):
        self.mark_lost()
        raise WorkerLostError(self.address, code.name) from None
      raise  # e.g. a computation's own FailedPreconditionError: TFF's handling

  def mark_lost(self) -> None:
    """It failed as lost: no dispose RPCs to it, and gRPC's threads failing on it stay quiet."""
    self.lost = True
    _note_lost()

  def _answers(self) -> bool:
    """Whether the worker still accepts a connection (FAILED_PRECONDITION is also a TF error)."""
    ready = grpc.channel_ready_future(self._channel)
    try:
      ready.result(timeout=_RECHECK_S)
      return True
    except grpc.FutureTimeoutError:
      return False
    finally:
      ready.cancel()

  def get_executor(self, request):
    response = self._call(self._stub.get_executor, request)
    with self._lock:
      self._live_executors.append(response.executor.id)
    return response

  def create_value(self, request):
    return self._call(self._stub.create_value, request)

  def create_struct(self, request):
    return self._call(self._stub.create_struct, request)

  def create_call(self, request):
    return self._call(self._stub.create_call, request)

  def create_selection(self, request):
    return self._call(self._stub.create_selection, request)

  def compute(self, request):
    return self._call(self._stub.compute, request)

  # Values are disposed by weakref finalizers, possibly after the channel closed (at exit).
  def dispose(self, request):
    if not self._released:
      self._stub.dispose(request)

  def dispose_executor(self, request):
    with self._lock:
      if self._released or request.executor.id not in self._live_executors:
        return  # released already: a second dispose would drop another client's reference
      self._live_executors.remove(request.executor.id)
    self._stub.dispose_executor(request)

  def release(self, *, dispose: bool) -> None:
    """Stops all further RPCs but this one; with `dispose`, first disposes the executors got
    and not disposed, all within `_DISPOSE_DEADLINE_S` (errors ignored: the worker may be
    gone)."""
    with self._lock:
      self._released = True
      ids, self._live_executors = self._live_executors, []
    if not dispose:
      return
    deadline = time.monotonic() + _DISPOSE_DEADLINE_S
    for executor_id in ids:
      request = executor_pb2.DisposeExecutorRequest(
        executor=executor_pb2.ExecutorId(id=executor_id)
      )
      try:
        self._group.DisposeExecutor(request, timeout=max(deadline - time.monotonic(), 0.01))
      except grpc.RpcError:
        break  # gone, or did not answer in time: the rest would fail the same way

  @property
  def is_ready(self) -> bool:
    return self._stub.is_ready


class _ThreadedContext(tff.framework.AsyncContext):
  """An `AsyncContext` running a `SyncContext`'s invoke in a thread, so workers overlap.

  Counts the calls in flight for `RemoteExecution.close`. A call that fails after the
  execution was closed (its round already failed on another worker, or was interrupted) ends
  as cancelled: nobody waits for its result, and asyncio would log its exception.
  """

  def __init__(
    self,
    context: tff.framework.SyncContext,
    execution: RemoteExecution,
    pool: concurrent.futures.ThreadPoolExecutor,
    stub: _WorkerStub,
    timeout_s: float | None,
  ):
    self._context = context
    self._execution = execution
    self._pool = pool  # one thread per worker (asyncio's default pool has only cores + 4)
    self._stub = stub
    self._timeout_s = timeout_s

  async def invoke(self, comp, arg):
    if asyncio.iscoroutine(arg):
      arg = await arg
    self._execution.call_started()
    # The call counts as in flight until its thread returns, even after a timeout gave up on
    # it; the worker is then lost: `RemoteExecution` closes its channel (which ends the call)
    # without asking it to free its executors, which would wait on it too.
    call = self._pool.submit(self._context.invoke, comp, arg)
    call.add_done_callback(lambda _: self._execution.call_ended())
    result = asyncio.wrap_future(call)
    try:
      return await asyncio.wait_for(asyncio.shield(result), self._timeout_s)
    except asyncio.TimeoutError:
      # Its late end (an error once the channel closes) is nobody's: retrieved, not logged.
      result.add_done_callback(lambda f: f.cancelled() or f.exception())
      self._stub.mark_lost()
      raise WorkerLostError(
        self._stub.address,
        reason=f'did not answer its share of the round within {self._timeout_s:g} s '
        '(--worker_round_timeout)',
      ) from None
    except Exception:
      if self._execution.closed:
        raise asyncio.CancelledError() from None
      raise


def _has_clients_part(type_spec) -> bool:
  """Whether a TFF type holds a CLIENTS-placed value anywhere."""
  if isinstance(type_spec, tff.FederatedType):
    return type_spec.placement is tff.CLIENTS
  if isinstance(type_spec, tff.StructType):
    return any(_has_clients_part(t) for t in type_spec.children())
  return False


def _all_equal(type_spec) -> bool:
  """Whether every federated part of a TFF type is all-equal (e.g. SERVER-placed)."""
  if isinstance(type_spec, tff.FederatedType):
    return type_spec.all_equal
  if isinstance(type_spec, tff.StructType):
    return all(_all_equal(t) for t in type_spec.children())
  return True


async def _run_in_worker_order(form, parts, contexts):
  """up_to_merge on every share at once, merge in worker order, then after_merge."""
  partials = await asyncio.gather(
    *(context.invoke(form.up_to_merge, part) for part, context in zip(parts, contexts))
  )
  merged = partials[0]
  for partial in partials[1:]:
    merged = await contexts[0].invoke(form.merge, structure.Struct.unnamed(merged, partial))

  def after_merge(part, context):
    arg = merged if part is None else structure.Struct.unnamed(part, merged)
    return context.invoke(form.after_merge, arg)

  result_type = form.after_merge.type_signature.result
  if _all_equal(result_type):  # the same on every share: computed once
    return await after_merge(parts[0], contexts[0])
  results = await asyncio.gather(*(after_merge(p, c) for p, c in zip(parts, contexts)))
  return _merge_context._repackage_partitioned_values(  # noqa: SLF001  (TFF has no public one)
    results, result_type_spec=result_type
  )


class _WorkerOrderMergeContext(tff.framework.MergeableCompExecutionContext):
  """TFF's merge context (its compiler, client split and repackaging) with two changes.

  * The workers' partial aggregates are merged in worker order. TFF merges them in the order
    the workers finish, so with 3 or more workers the float sums, hence the model, would
    differ from run to run (two are safe: a + b == b + a); in worker order a run is
    reproducible and a resumed run continues exactly.
  * A computation without CLIENTS-placed arguments (initialize, get/set_model_weights) runs
    on the first worker only; TFF would run it on every worker and merge zeros.
  """

  def invoke(self, comp, arg=None):
    form = comp
    if not isinstance(comp, tff.framework.MergeableCompForm):
      form = self._compiler_pipeline.compile(comp)
    parameter = form.up_to_merge.type_signature.parameter
    if arg is not None and _has_clients_part(parameter):
      parts = _merge_context.MergeableCompExecutionContextValue(
        arg, parameter, self._num_subrounds
      ).value()
    else:
      parts = [arg]
    contexts = self._async_execution_contexts[: len(parts)]
    result = self._async_runner.run_coro_and_return_result(
      _run_in_worker_order(form, parts, contexts)
    )
    result = type_conversions.type_to_py_container(result, form.after_merge.type_signature.result)
    if self._transform_result is not None:
      result = self._transform_result(result)
    return result


class RemoteExecution:
  """Connections to remote workers and the TFF context that spreads computations over them.

  Created by `remote_execution()`; use it as a context manager or call `close()`. Attributes:
  `addresses`, `context` (the `MergeableCompExecutionContext`). Owned worker processes passed
  in `owned` (from `start_local_workers`) are stopped by `close()`.
  """

  def __init__(
    self,
    addresses: tuple[str, ...],
    *,
    connect_timeout_s: float,
    default_num_clients: int,
    owned: list[subprocess.Popen] | None = None,
    round_timeout_s: float | None = None,
  ):
    self.addresses = addresses
    self._owned = list(owned or [])
    self._default_num_clients = default_num_clients
    self._channels: list[grpc.Channel] = []
    self._stubs: list[_WorkerStub] = []
    self._closed = False
    self._lock = threading.Lock()
    self._calls = 0
    self.calls_made = 0  # worker calls so far (all kinds), e.g. to check that they ran
    self._calls_done = threading.Condition()
    self._pool = concurrent.futures.ThreadPoolExecutor(
      max_workers=len(addresses), thread_name_prefix='tff_worker_call'
    )
    self._owner_thread = threading.current_thread()
    try:
      self._connect(connect_timeout_s)
      self._stubs = [_WorkerStub(c, a) for c, a in zip(self._channels, addresses)]
      workers = [
        _ThreadedContext(self._worker_context(stub), self, self._pool, stub, round_timeout_s)
        for stub in self._stubs
      ]
      self.context = _WorkerOrderMergeContext(
        workers,
        compiler_fn=tff.backends.native.compile_to_mergeable_comp_form,
        transform_result=tff.tensorflow.transform_result,
      )
      self._previous_default = local.install_default_context(self.context)
    except BaseException:
      self._release()
      raise

  def _connect(self, timeout_s: float) -> None:
    """Opens a channel to every worker, all waited for together; the first missing one fails."""
    options = [*local.GRPC_CHANNEL_OPTIONS, *_KEEPALIVE_OPTIONS]
    for address in self.addresses:
      self._channels.append(grpc.insecure_channel(address, options))
    _wait_ready(self._channels, self.addresses, timeout_s)

  def _worker_context(self, stub: _WorkerStub) -> tff.framework.SyncContext:
    def executor_stack(cardinalities):
      if self._closed:
        raise RuntimeError('This RemoteExecution is closed.')
      if cardinalities.get(tff.CLIENTS) is None:
        cardinalities[tff.CLIENTS] = self._default_num_clients
      executor = tff.framework.RemoteExecutor(stub)
      executor.set_cardinalities(cardinalities)
      return executor

    return tff.framework.SyncExecutionContext(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(executor_stack_fn=executor_stack),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result,
    )

  def call_started(self) -> None:
    with self._calls_done:
      self._calls += 1
      self.calls_made += 1

  def call_ended(self) -> None:
    with self._calls_done:
      self._calls -= 1
      self._calls_done.notify_all()

  def _release(self) -> None:
    """Frees the workers' executors, closes the channels and stops owned workers.

    Every worker not known to be lost is asked to dispose the executors this execution got
    from it, even with calls in flight (a round failed on another worker, or Ctrl-C): the
    worker destroys an executor when its last running call ends, and our calls still in flight
    then fail at once, as the channels close. Owned workers are stopped instead (nothing to
    free on a worker that exits).
    """
    for stub in self._stubs:
      stub.release(dispose=not (stub.lost or self._owned))
    for process in self._owned:
      worker_process.terminate(process)
    for channel in self._channels:
      local.close_channel(channel)
    self._channels.clear()
    with self._calls_done:
      self._calls_done.wait_for(lambda: self._calls == 0, timeout=_ABANDON_WAIT_S)
    self._pool.shutdown(wait=False, cancel_futures=True)

  @property
  def closed(self) -> bool:
    return self._closed

  def close(self) -> None:
    """Stops owned workers, closes the channels and restores the previous default context."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
    try:
      self._release()
    finally:
      local.restore_default_context(self.context, self._previous_default, self._owner_thread)
      self._previous_default = None

  def __enter__(self) -> RemoteExecution:
    return self

  def __exit__(self, exc_type, exc: BaseException | None, tb: types.TracebackType | None):
    self.close()


def check_reachable(
  addresses: tuple[str, ...] | list[str], timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
) -> None:
  """Raises WorkerUnreachableError naming the first worker without a gRPC connection in time."""
  channels = [grpc.insecure_channel(a, list(local.GRPC_CHANNEL_OPTIONS)) for a in addresses]
  try:
    _wait_ready(channels, addresses, timeout_s)
  finally:
    for channel in channels:
      local.close_channel(channel)


def _wait_ready(channels, addresses, timeout_s: float) -> None:
  futures = [grpc.channel_ready_future(channel) for channel in channels]
  deadline = time.monotonic() + timeout_s
  try:
    for future, address in zip(futures, addresses):
      try:
        future.result(timeout=max(deadline - time.monotonic(), 0.01))
      except grpc.FutureTimeoutError:
        raise WorkerUnreachableError(address, timeout_s) from None
  finally:
    for future in futures:
      future.cancel()


def remote_execution(
  addresses: tuple[str, ...] | list[str],
  *,
  connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
  default_num_clients: int = 0,
  round_timeout_s: float | None = None,
) -> RemoteExecution:
  """Connects to running workers (`python -m run.worker`) and makes them TFF's default context.

  Usage: `with remote_execution(['10.0.0.5:8000', '10.0.0.6:8000']): process.next(...)`.
  `round_timeout_s`: a worker that does not answer a call (its share of a round) within it is
  lost (`WorkerLostError`); None waits as long as its connection lives.

  Raises:
    WorkerUnreachableError: a worker does not accept a connection within connect_timeout_s.
  """
  if not addresses:
    raise ValueError('remote_execution needs at least one worker address')
  return RemoteExecution(
    tuple(addresses),
    connect_timeout_s=connect_timeout_s,
    default_num_clients=default_num_clients,
    round_timeout_s=round_timeout_s,
  )


def start_local_workers(
  count: int,
  *,
  max_concurrent_computation_calls: int | None = None,
  startup_timeout_s: float = 60.0,
) -> tuple[list[subprocess.Popen], tuple[str, ...]]:
  """Starts `count` owned workers on 127.0.0.1 (each a `worker_server` process).

  Each gets the parent-death signal (so does its `worker_binary`, from it): none outlives us.
  Returns (processes, addresses); pass both to `local_workers_execution` or stop the processes
  with `worker_process.terminate`.
  """
  if isinstance(count, bool) or not isinstance(count, int) or count < 1:
    raise ValueError(f'count must be an integer >= 1, got {count!r}')
  processes, addresses = [], []
  try:
    for _ in range(count):
      calls = str(max_concurrent_computation_calls or 0)
      args = [sys.executable, '-m', 'tff_adaptive.runtime.worker_server', '127.0.0.1', '0', calls]
      processes.append(
        subprocess.Popen(  # pylint: disable=subprocess-popen-preexec-fn
          args,
          stdin=subprocess.DEVNULL,
          stdout=subprocess.PIPE,
          text=True,
          close_fds=True,
          process_group=0,
          preexec_fn=worker_process.make_preexec_fn(os.getpid()),
        )
      )
    for process in processes:  # started together, announced in turn
      addresses.append(_read_announcement(process, startup_timeout_s))
  except BaseException:
    for process in processes:
      worker_process.terminate(process)
    raise
  return processes, tuple(addresses)


def _read_announcement(process: subprocess.Popen, timeout_s: float) -> str:
  """Reads the worker's 'serving ... on HOST:PORT (' line; fails if it exits or times out."""
  result: list[str] = []
  reader = threading.Thread(target=lambda: result.append(process.stdout.readline()), daemon=True)
  reader.start()
  reader.join(timeout_s)
  match = _ANNOUNCE.search(result[0]) if result else None
  if match is None:
    if result:  # end of output: it exited
      code = process.wait()
      raise WorkerStartError(f'a local worker exited at start with code {code} (see above)')
    raise WorkerStartError(f'a local worker did not start within {timeout_s:g} s')
  process.stdout.close()  # nothing else is printed on stdout
  return f'{match.group(1)}:{match.group(2)}'


def local_workers_execution(
  count: int,
  *,
  max_concurrent_computation_calls: int | None = None,
  default_num_clients: int = 0,
  round_timeout_s: float | None = None,
) -> RemoteExecution:
  """Starts `count` owned loopback workers and a `RemoteExecution` over them (closing stops them)."""
  processes, addresses = start_local_workers(
    count, max_concurrent_computation_calls=max_concurrent_computation_calls
  )
  try:
    return RemoteExecution(
      addresses,
      connect_timeout_s=DEFAULT_CONNECT_TIMEOUT_S,
      default_num_clients=default_num_clients,
      owned=processes,
      round_timeout_s=round_timeout_s,
    )
  except BaseException:
    for process in processes:
      worker_process.terminate(process)
    raise
