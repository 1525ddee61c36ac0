"""Program processes forked from one that has already imported TensorFlow and TFF.

Infrastructure (no paper). Every `python -m run.federated_trainer` spends about 10 CPU-s importing
TensorFlow and TFF before it reads a flag; a short run (a test, a cell of a grid search) spends
more on that than on training. `Preloaded(('run.federated_trainer',))` starts one server process
that imports the program's modules once, then forks one child per `popen(...)`. The child is a
process of its own (pid, exit status, signals, process group, stdio, working directory,
environment, rusage) that runs the program as `__main__`, as `python -m` would, minus the imports:

  server = preload.Preloaded(('run.federated_trainer',))
  trainer = server.popen('run.federated_trainer', ['--task=synthetic'], stdout=subprocess.PIPE)
  trainer.wait()  # like subprocess.Popen: returncode, poll, send_signal, kill, stdout, stderr

Forking is safe because the server only imports: it refuses to fork once TensorFlow's runtime
has started (its thread pools would not survive a fork), and each child sets up TFF's default
context afresh (the import-time one keeps its event loop on a thread that a fork leaves behind).
Variables read while importing (TF_CPP_MIN_LOG_LEVEL, PYTHON*, ...) are fixed when the server
starts: `popen` refuses an environment that differs in them.

One server can serve several processes: `Preloaded(..., shareable=True)` listens on a Unix socket
(`address`); a process started with that address in its environment (`SERVER_VARIABLE`), e.g. a
reproduction driver started by the tests, gets it from `Preloaded.shared(modules, env)` instead
of starting a server of its own (which costs the same ~10 CPU-s of imports again), provided the
server preloaded those modules with the same import-time variables; `shared` returns None
otherwise, and the caller starts its own. A sharing process's `close()` (or its death) ends only
its connection: its children that asked for a `death_signal` get that signal then, as they would
when a server of its own ended; the server ends with the process that started it.

The children are the server's, not the caller's: the server reports each exit (status and CPU
time) over its socket; a child outlives the server only like a `subprocess.Popen` child outlives
its parent (pass `death_signal` to tie it). The server exits when its caller closes it or dies;
it runs in its own process group and ignores SIGINT; a child joins the caller's process group
(or, with `process_group=True`, one of its own), so a terminal's Ctrl-C reaches the caller and
its children as with `subprocess.Popen`, not the server.
"""

import atexit
import contextlib
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from tff_adaptive.run import (
  autograph_cache,  # imports TensorFlow's AutoGraph only where TF is imported
)
from tff_adaptive.runtime import worker_process  # no TensorFlow import

__all__ = ['SERVER_VARIABLE', 'Preloaded', 'Process', 'ServerError']

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Read while Python or TensorFlow start or import: a child's must match the server's.
_IMPORT_TIME_PREFIXES = ('TF_', 'TENSORFLOW', 'PYTHON', 'CUDA', 'XLA', 'OMP_', 'OPENBLAS', 'MKL')
_PER_CHILD = frozenset({'PYTHONUNBUFFERED'})  # the child builds its stdio itself
_NO_AUTOGRAPH = '--no_autograph_cache'  # the server's option: Preloaded(share_autograph=False)
_LISTEN = '--listen='  # the server's option: Preloaded(shareable=True), the socket's path
# The address of a shareable server, in the environment of the processes that may share it.
SERVER_VARIABLE = 'RUN_PRELOAD_SERVER'


class ServerError(RuntimeError):
  """The preloading server failed to start or stopped answering."""


def import_time_env(env) -> dict:
  """The variables of `env` that take effect while Python and TensorFlow start."""
  return {
    k: v for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES) and k not in _PER_CHILD
  }


# ---------------------------------------------------------------------------------------------
# The server: imports, then forks one child per request.


def _send(sock: socket.socket, message: dict, fds=()) -> None:
  socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def _hung_up(caller: socket.socket) -> bool:
  """Whether `caller` has closed its end (or died) after its last request: forking that
  request's child would start a trainer nobody waits for, which a rerun of the killed driver
  would then find holding its cell's lock."""
  try:
    return caller.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b''
  except BlockingIOError:
    return False
  except OSError:
    return True


def _runtime_started() -> bool:
  if 'tensorflow' not in sys.modules:
    return False
  from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top

  return context.context()._context_handle is not None  # noqa: SLF001  (TF has no public test)


def _std_streams(unbuffered: bool) -> None:
  """sys.stdin/stdout/stderr over fds 0-2, buffered as Python buffers them at start-up."""

  def text(fd, mode, **kwargs):
    raw = io.FileIO(fd, mode, closefd=False)
    if 'w' in mode and unbuffered:
      return io.TextIOWrapper(raw, encoding='utf-8', write_through=True, **kwargs)
    buffered = io.BufferedWriter(raw) if 'w' in mode else io.BufferedReader(raw)
    return io.TextIOWrapper(buffered, encoding='utf-8', **kwargs)

  sys.stdin = sys.__stdin__ = text(0, 'rb')
  sys.stdout = sys.__stdout__ = text(1, 'wb', line_buffering=os.isatty(1))
  sys.stderr = sys.__stderr__ = text(2, 'wb', errors='backslashreplace', line_buffering=True)
  absl_logging = sys.modules.get('absl.logging')
  if absl_logging is not None:  # its handler holds the stream it was created with
    absl_logging.get_absl_handler().python_handler.stream = sys.stderr


def _exit_code(exit: SystemExit) -> int:
  """What Python exits with for an uncaught SystemExit."""
  if exit.code is None:
    return 0
  if isinstance(exit.code, int):
    return exit.code
  print(exit.code, file=sys.stderr)
  return 1


def _run_child(request: dict, fds: list[int]) -> None:  # pragma: no cover (forked child)
  """Becomes `python -m <module> <args>` in the child; never returns."""
  code, die_by = 1, None
  try:
    os.setpgid(0, request['pgid'])  # the caller's group, or (0) one of its own
    die_with_server = request['death_signal'] and worker_process.make_preexec_fn(
      request['server_pid'], request['death_signal']
    )
    if die_with_server:
      die_with_server()
    for target, fd in enumerate(fds):
      os.dup2(fd, target)
      os.close(fd)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    _std_streams(bool(request['env'].get('PYTHONUNBUFFERED')))
    sys.argv = [request['module'], *request['args']]
    sys.path[0] = request['cwd']
    if request.get('autograph_record'):
      autograph_cache.record(request['autograph_record'])
    if 'tensorflow_federated' in sys.modules:
      import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

      tff.backends.native.set_sync_local_cpp_execution_context()  # as TFF's import does
    try:
      runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
      code = 0
    except SystemExit as e:
      code = _exit_code(e)
    except KeyboardInterrupt:  # Python prints it and dies by SIGINT (exit status 130)
      traceback.print_exc()
      code, die_by = 130, signal.SIGINT
    except BaseException:  # pylint: disable=broad-except
      traceback.print_exc()
      code = 1
    threading._shutdown()  # noqa: SLF001  (joins non-daemon threads, as at interpreter exit)
    atexit._run_exitfuncs()  # noqa: SLF001  (what interpreter exit runs)
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except Exception:  # pylint: disable=broad-except
        pass
    if die_by is not None:
      signal.signal(die_by, signal.SIG_DFL)
      os.kill(os.getpid(), die_by)
    os._exit(code & 0xFF)  # pylint: disable=protected-access


def serve(
  sock: socket.socket, modules: list[str], share_autograph: bool = True, listen: str | None = None
) -> None:
  """The server's loop: import `modules`, then fork on each request until the socket closes.

  With `share_autograph`, what AutoGraph converts in a child is converted here before the next
  fork, so that later children find it done (`run.autograph_cache`). With `listen` (a path),
  other processes may connect there and make requests too (`Preloaded.shared`).
  """
  programs = set(modules)
  environment = import_time_env(os.environ)  # as started (an import may set some)
  for name in modules:
    __import__(name)
  for name in programs:  # a program runs as __main__ in the child, not as its module
    sys.modules.pop(name, None)
    package, _, leaf = name.rpartition('.')
    if package in sys.modules and hasattr(sys.modules[package], leaf):
      delattr(sys.modules[package], leaf)
  if _runtime_started():
    raise ServerError(f'importing {modules} started the TensorFlow runtime; cannot fork safely')
  record = listener = None
  if share_autograph and autograph_cache.available():
    handle, record = tempfile.mkstemp(prefix='preload-autograph-', suffix='.jsonl')
    os.close(handle)
  try:
    if listen:
      listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
      listener.bind(listen)
      listener.listen()
    ready = {'ready': os.getpid(), 'modules': sorted(programs), 'env': environment}
    _serve_requests(sock, listener, ready, record)
  finally:
    if record:
      os.remove(record)
    if listener is not None:
      listener.close()
      os.remove(listen)


def _send_if_open(sock: socket.socket, message: dict) -> None:
  """Sends to a sharing process, which may have ended meanwhile."""
  try:
    _send(sock, message)
  except OSError:
    pass


class _RequestServer:
  """The server's loop: forks a child per request of its callers (the owner, and those that
  share it through `listener`), reaps the children and tells each caller when its child ends."""

  def __init__(
    self, owner: socket.socket, listener: socket.socket | None, ready: dict, record: str | None
  ):
    self.owner, self.listener, self.ready, self.record = owner, listener, ready, record
    self.done = set()  # the lines of `record` already read
    self.converted = self.lines = 0  # functions converted here so far; lines children recorded
    self.callers = [owner]  # the process that started the server, then those sharing it
    # pid -> (the number of its request, its caller, its death signal); pids are reused,
    # request numbers are not.
    self.children = {}
    self.requests = 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller's, not the server's, to act on
    self.wake_r, self.wake_w = os.pipe()
    os.set_blocking(self.wake_r, False)
    os.set_blocking(self.wake_w, False)
    signal.set_wakeup_fd(self.wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)

  def reply(self, caller: socket.socket, message: dict) -> None:
    # The owner's socket failing ends the server; a sharer may have gone meanwhile.
    if caller is self.owner:
      _send(self.owner, message)
    elif caller in self.callers:
      _send_if_open(caller, message)

  def serve(self) -> None:
    """Until the owner closes its socket (or dies)."""
    _send(self.owner, self.ready)
    while True:
      waiting = [*self.callers, self.wake_r, *([] if self.listener is None else [self.listener])]
      readable, _, _ = select.select(waiting, [], [])
      if self.wake_r in readable:
        self._drain_wakeups()
      self._reap()
      if self.listener is not None and self.listener in readable:
        caller, _ = self.listener.accept()
        self.callers.append(caller)
        _send_if_open(caller, self.ready)
      for caller in [c for c in self.callers if c in readable]:
        if not self._handle(caller):
          self._stop_children()
          return

  def _stop_children(self) -> None:
    """The owner has gone: each child gets its death signal now, not when this process has
    finished exiting (TensorFlow's teardown takes a while), so that a trainer forked just before
    its driver died stops during its start-up instead of training a round with its cell
    locked."""
    for pid, (_, _, death_signal) in list(self.children.items()):
      if death_signal:
        with contextlib.suppress(ProcessLookupError):
          os.kill(pid, death_signal)

  def _drain_wakeups(self) -> None:
    while True:
      try:
        if not os.read(self.wake_r, 512):
          break
      except BlockingIOError:
        break

  def _reap(self) -> None:
    while self.children:
      pid, status, usage = os.wait4(-1, os.WNOHANG)
      if not pid:
        break
      number, caller, _ = self.children.pop(pid)
      cpu_s = usage.ru_utime + usage.ru_stime
      code = os.waitstatus_to_exitcode(status)
      self.reply(caller, {'exit': number, 'code': code, 'cpu_s': cpu_s})

  def _handle(self, caller: socket.socket) -> bool:
    """Reads one request of `caller` and forks its child; False when the owner has gone."""
    try:
      data, fds, _, _ = socket.recv_fds(caller, 1 << 20, 3)
    except OSError:
      if caller is self.owner:
        raise
      data, fds = b'', []
    if not data or _hung_up(caller):  # the caller closed the socket or died
      for fd in fds:  # a request sent just before its caller died: nobody waits for its child
        os.close(fd)
      if caller is self.owner:
        return False
      self._forget(caller)
      return True
    request = {**json.loads(data), 'server_pid': os.getpid(), 'autograph_record': self.record}
    if self.record:
      now, self.lines = autograph_cache.convert_recorded(self.record, self.done)
      self.converted += now
      if _runtime_started():  # never expected: conversion is pure Python
        raise ServerError('converting AutoGraph functions started the TensorFlow runtime')
    pid = self._fork(request, fds)
    self.requests += 1
    self.children[pid] = (self.requests, caller, request['death_signal'])
    autograph = {'converted': self.converted, 'recorded': self.lines}
    self.reply(caller, {'started': pid, 'number': self.requests, 'autograph': autograph})
    return True

  def _forget(self, caller: socket.socket) -> None:
    """As if a sharer's own server had ended: its children that asked for a death signal
    get it."""
    self.callers.remove(caller)
    caller.close()
    for pid, (_, of, death_signal) in self.children.items():
      if of is caller and death_signal:
        try:
          os.kill(pid, death_signal)
        except ProcessLookupError:
          pass

  def _fork(self, request: dict, fds: list[int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
      signal.set_wakeup_fd(-1)
      signal.signal(signal.SIGCHLD, signal.SIG_DFL)
      signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts
      for fd in (self.wake_r, self.wake_w, *(c.fileno() for c in self.callers)):
        os.close(fd)
      if self.listener is not None:
        os.close(self.listener.fileno())
      _run_child(request, fds)
    for fd in fds:
      os.close(fd)
    return pid


def _serve_requests(
  owner: socket.socket, listener: socket.socket | None, ready: dict, record: str | None
) -> None:
  _RequestServer(owner, listener, ready, record).serve()


# ---------------------------------------------------------------------------------------------
# The caller's side.


class Process:
  """A child of the server, used like `subprocess.Popen`."""

  def __init__(self, server: 'Preloaded', pid: int, number: int, args, stdout, stderr):
    self._server = server
    self._number = number  # the server's number of this child's request
    self.pid = pid
    self.args = args
    self.stdout = stdout
    self.stderr = stderr
    self.stdin = None
    self.returncode = None
    self.cpu_s = None  # user + system CPU seconds of the child and its waited-for children

  def poll(self):
    if self.returncode is None:
      ended = self._server.exited(self._number, timeout_s=0)
      if ended is not None:
        self.returncode, self.cpu_s = ended
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      ended = self._server.exited(self._number, timeout_s=timeout)
      if ended is None:
        raise subprocess.TimeoutExpired(self.args, timeout)
      self.returncode, self.cpu_s = ended
    return self.returncode

  def send_signal(self, sig: int) -> None:
    if self.poll() is None:
      try:
        os.kill(self.pid, sig)
      except ProcessLookupError:
        pass

  def terminate(self) -> None:
    self.send_signal(signal.SIGTERM)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)

  def communicate(self, timeout=None):
    """(stdout, stderr) read to the end, then waits; like Popen.communicate without input."""
    results = {}

    def drain(name):
      stream = getattr(self, name)
      if stream is not None:
        results[name] = stream.read()
        stream.close()

    readers = [threading.Thread(target=drain, args=(n,)) for n in ('stdout', 'stderr')]
    for r in readers:
      r.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    for r in readers:
      r.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if any(r.is_alive() for r in readers):
      raise subprocess.TimeoutExpired(self.args, timeout)
    self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return results.get('stdout'), results.get('stderr')


class Preloaded:
  """A server that has imported `modules` and forks a child per `popen`; `close()` stops it.

  With `shareable`, other processes may use it too: start them with `address` in their
  environment as `SERVER_VARIABLE`; they get it from `Preloaded.shared`.
  """

  def __init__(
    self,
    modules,
    env=None,
    start_timeout_s: float = 300.0,
    share_autograph: bool = True,
    shareable: bool = False,
  ):
    self.modules = list(modules)
    self.env = dict(os.environ if env is None else env)
    self._dir = tempfile.mkdtemp(prefix='preload-') if shareable else None
    # Where a shareable server listens (None if it does not): a path in a folder of our own.
    self.address = os.path.join(self._dir, 'server') if shareable else None
    sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    self._server = subprocess.Popen(  # pylint: disable=consider-using-with
      [
        sys.executable,
        '-m',
        'tff_adaptive.run.preload',
        str(theirs.fileno()),
        *([] if share_autograph else [_NO_AUTOGRAPH]),
        *([_LISTEN + self.address] if shareable else []),
        *self.modules,
      ],
      cwd=_REPO,
      env=self.env,
      stdin=subprocess.DEVNULL,
      pass_fds=[theirs.fileno()],
      process_group=0,  # a terminal's Ctrl-C reaches the caller, which decides what to stop
    )
    theirs.close()
    sock.settimeout(start_timeout_s)
    try:
      ready = self._ready(sock)
    except (OSError, ValueError) as e:
      self._server.kill()
      self._server.wait()
      self._remove_dir()
      raise ServerError(f'the preloading server did not start: {e}') from None
    if ready is None or 'ready' not in ready:
      self._server.wait()
      self._remove_dir()
      raise ServerError(f'the preloading server exited with {self._server.returncode}')
    self._connected(sock, ready)

  @classmethod
  def shared(cls, modules, env=None, timeout_s: float = 30.0) -> 'Preloaded | None':
    """The shareable server named by `SERVER_VARIABLE` in `env` (default: this process's),
    if it preloaded `modules` with `env`'s import-time variables; None otherwise.

    Closing it (or this process ending) ends this process's connection, not the server.
    """
    env = dict(os.environ if env is None else env)
    address = env.get(SERVER_VARIABLE)
    if not address:
      return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(timeout_s)
    try:
      sock.connect(address)
      ready = cls._ready(sock)
    except (OSError, ValueError):
      sock.close()
      return None
    if (
      not ready
      or not set(modules) <= set(ready.get('modules', ()))
      or ready.get('env') != import_time_env(env)
    ):
      sock.close()
      return None
    self = cls.__new__(cls)
    self.modules = list(modules)
    self.env = env
    self._dir = self.address = self._server = None
    self._connected(sock, ready)
    return self

  @staticmethod
  def _ready(sock: socket.socket) -> dict | None:
    data = sock.recv(1 << 20)
    return json.loads(data) if data else None

  def _connected(self, sock: socket.socket, ready: dict) -> None:
    self._sock = sock
    self._sock.settimeout(None)
    self.pid = ready['ready']  # the server's
    self._cond = threading.Condition()
    self._exits: dict[int, tuple[int, float]] = {}
    self._started: list[tuple[int, int]] = []  # (pid, request number), in request order
    self._request_lock = threading.Lock()
    self._closed = False
    # When the server forked this caller's latest child: how many functions it had converted
    # for AutoGraph and how many conversions its children had recorded (run.autograph_cache).
    self.autograph = {'converted': 0, 'recorded': 0}
    self._reader = threading.Thread(target=self._read, daemon=True)
    self._reader.start()

  def _remove_dir(self) -> None:
    if self._dir is not None:
      shutil.rmtree(self._dir, ignore_errors=True)

  def _recv(self):
    data = self._sock.recv(1 << 20)
    return json.loads(data) if data else None

  def _read(self) -> None:
    while True:
      try:
        message = self._recv()
      except OSError:
        message = None
      with self._cond:
        if message is None:
          self._closed = True
          self._cond.notify_all()
          return
        if 'started' in message:
          self._started.append((message['started'], message['number']))
          self.autograph = message['autograph']
        else:
          self._exits[message['exit']] = (message['code'], message['cpu_s'])
        self._cond.notify_all()

  def exited(self, number: int, timeout_s):
    """(exit code, CPU seconds) of the child of request `number`, None if not ended in time."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with self._cond:
      while number not in self._exits:
        if self._closed:
          raise ServerError(f'the preloading server stopped before its child {number} ended')
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
          return None
        self._cond.wait(remaining)
      return self._exits.pop(number)

  def popen(
    self,
    module: str,
    args,
    *,
    cwd=None,
    env=None,
    stdin=subprocess.DEVNULL,
    stdout=None,
    stderr=None,
    text: bool = False,
    process_group: bool = False,
    death_signal: int = 0,
  ) -> Process:
    """`python -m module *args` as a child of the server; stdio as for `subprocess.Popen`
    (None, DEVNULL, PIPE, a file object or fd; stderr also STDOUT)."""
    if module not in self.modules:
      raise ValueError(f'{module!r} was not preloaded; preloaded: {", ".join(self.modules)}')
    env = dict(os.environ if env is None else env)
    if import_time_env(env) != import_time_env(self.env):
      raise ValueError(
        f'the environment differs from the server in variables read at import: '
        f'{sorted(set(import_time_env(env).items()) ^ set(import_time_env(self.env).items()))}'
      )
    to_close, ours = [], {}

    def child_fd(spec, number, name):
      if spec is None:
        return os.dup(number)
      if spec == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR)
      if spec == subprocess.PIPE:
        read_end, write_end = os.pipe()
        ours[name] = read_end
        return write_end
      return os.dup(spec if isinstance(spec, int) else spec.fileno())

    fds = [child_fd(stdin, 0, 'stdin'), child_fd(stdout, 1, 'stdout')]
    fds.append(os.dup(fds[1]) if stderr == subprocess.STDOUT else child_fd(stderr, 2, 'stderr'))
    to_close.extend(fds)
    request = {
      'module': module,
      'args': [str(a) for a in args],
      'cwd': os.path.abspath(cwd or os.getcwd()),
      'env': env,
      'pgid': 0 if process_group else os.getpgrp(),
      'death_signal': int(death_signal),
    }
    try:
      with self._request_lock:
        with self._cond:
          if self._closed:
            raise ServerError('the preloading server has stopped')
          _send(self._sock, request, fds)
          while not self._started and not self._closed:
            self._cond.wait()
          if not self._started:
            raise ServerError('the preloading server stopped before starting the process')
          pid, number = self._started.pop(0)
    finally:
      for fd in to_close:
        os.close(fd)
    if 'stdin' in ours:  # a pipe into the child: not needed by any caller yet
      os.close(ours.pop('stdin'))
    streams = {
      name: (open(fd, 'r') if text else open(fd, 'rb'))  # pylint: disable=consider-using-with
      for name, fd in ours.items()
    }
    return Process(
      self, pid, number, [module, *request['args']], streams.get('stdout'), streams.get('stderr')
    )

  def close(self) -> None:
    """Stops the server (its running children go on, as a Popen child does); for a shared
    one, ends this process's connection (its children with a death signal get it)."""
    try:
      self._sock.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass
    self._sock.close()
    if self._server is None:
      return
    try:
      self._server.wait(30)
    except subprocess.TimeoutExpired:
      self._server.kill()
      self._server.wait()
    self._remove_dir()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


if __name__ == '__main__':
  if len(sys.argv) < 3 or not sys.argv[1].isdigit():
    sys.exit('run.preload: the server of run.preload.Preloaded (started by it, not by hand)')
  _options = [a for a in sys.argv[2:] if a == _NO_AUTOGRAPH or a.startswith(_LISTEN)]
  _listen = [a.removeprefix(_LISTEN) for a in _options if a.startswith(_LISTEN)]
  serve(
    socket.socket(fileno=int(sys.argv[1])),
    [a for a in sys.argv[2:] if a not in _options],
    _NO_AUTOGRAPH not in _options,
    _listen[0] if _listen else None,
  )
