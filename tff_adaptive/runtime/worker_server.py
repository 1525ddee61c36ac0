"""One TFF remote-execution worker that serves exactly one address (127.0.0.1 by default).

Infrastructure module (no paper). The worker is TFF's own C++ `worker_binary` (its gRPC
executor service; no RPC of ours). TFF 0.87's binary always listens on every interface
(`[::]:port`, hard-coded in worker_main.cc), which would expose an unauthenticated executor to
the whole network. So, unless the host is a wildcard (0.0.0.0, ::), `serve` confines it:

1. it binds the listening socket to `host:port` itself (port 0 picks a free port), in the
   machine's network namespace;
2. it moves into a new, private network namespace (an unprivileged user namespace plus a
   network namespace: `unshare(CLONE_NEWUSER | CLONE_NEWNET)`, then brings its loopback up),
   where nothing but itself can reach `worker_binary`, which it starts there on the same port;
3. it copies bytes between each accepted connection and the binary (a byte relay: the gRPC
   stream passes through unchanged).

With a wildcard host the binary runs directly, reachable from any host that can route to it.
The binary gets a parent-death signal (`worker_process`), so it never outlives this process.
SIGINT and SIGTERM stop it and return normally.

Module entry point for owned local workers (`remote.start_local_workers`):
`python -m tff_adaptive.runtime.worker_server HOST PORT` (the user-facing CLI is `run/worker.py`).
This module imports neither TensorFlow nor TFF: the process must still be single-threaded when
it calls `unshare`.
"""

from __future__ import annotations

from collections.abc import Callable
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import sys
import threading
import time
from typing import TextIO

from tff_adaptive.runtime import worker_process

WILDCARD_HOSTS = ('0.0.0.0', '::', '[::]')
_CLONE_NEWUSER = 0x10000000  # <linux/sched.h>
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1  # <net/if.h>
_RELAY_CHUNK_BYTES = 1 << 20
_READY_TIMEOUT_S = 60.0


class WorkerServerError(RuntimeError):
  """The worker could not be started as asked (message is one line, for the user)."""


class ConfinementUnavailableError(WorkerServerError):
  """This kernel/container does not let an unprivileged process create a user namespace."""


def is_wildcard(host: str) -> bool:
  return host in WILDCARD_HOSTS


def _bind(host: str, port: int) -> socket.socket:
  """A listening TCP socket on host:port, in the current network namespace."""
  try:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
  except socket.gaierror as e:
    raise WorkerServerError(f'--host={host}: cannot resolve it ({e.strerror})') from None
  family, kind, proto, _, address = infos[0]
  listener = socket.socket(family, kind, proto)
  listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    listener.bind(address)
  except OSError as e:
    listener.close()
    raise WorkerServerError(f'cannot listen on {host}:{port}: {e.strerror}') from None
  listener.listen(64)
  return listener


def _write(path: str, text: str) -> None:
  with open(path, 'w') as f:
    f.write(text)


def _isolate_network() -> None:
  """Moves this (single-threaded) process into a new user + network namespace, loopback up."""
  uid, gid = os.geteuid(), os.getegid()
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
    reason = os.strerror(ctypes.get_errno())
    raise ConfinementUnavailableError(
      f'cannot confine the worker to one address: this system does not let unprivileged '
      f"processes create user namespaces ({reason}; e.g. a container's seccomp profile, "
      f"Ubuntu's AppArmor restriction, or kernel.unprivileged_userns_clone=0); TFF 0.87's "
      f'worker_binary listens on every interface, so allow them or pass --host=0.0.0.0 on a '
      f'trusted network'
    )
  try:
    # Keep our own ids inside (files the binary might touch stay ours); setgroups must be
    # denied before an unprivileged process may write gid_map.
    _write('/proc/self/uid_map', f'{uid} {uid} 1')
    _write('/proc/self/setgroups', 'deny')
    _write('/proc/self/gid_map', f'{gid} {gid} 1')
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
      request = struct.pack('16sH14s', b'lo', 0, b'')
      flags = struct.unpack('16sH', fcntl.ioctl(s, _SIOCGIFFLAGS, request)[:18])[1]
      fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack('16sH14s', b'lo', flags | _IFF_UP, b''))
  except OSError as e:
    raise WorkerServerError(
      f'cannot set up the private network namespace of the worker ({e}); pass --host=0.0.0.0 '
      f'on a trusted network instead'
    ) from None


def _wait_listening(process, port: int, timeout_s: float, stop: threading.Event) -> None:
  """Waits until the binary accepts TCP connections on 127.0.0.1:port (in our namespace)."""
  deadline = time.monotonic() + timeout_s
  while not stop.is_set():
    if process.poll() is not None:
      raise WorkerServerError(f'worker_binary exited with code {process.returncode} at start')
    try:
      socket.create_connection(('127.0.0.1', port), timeout=1.0).close()
      return
    except OSError:
      if time.monotonic() > deadline:
        raise WorkerServerError(f'worker_binary did not listen within {timeout_s:.0f} s') from None
      time.sleep(0.05)


def _pump(source: socket.socket, sink: socket.socket) -> None:
  """Copies bytes from source to sink until EOF or an error, then shuts both down.

  Either direction ending ends the connection (gRPC never half-closes a live one), which also
  wakes the other direction's blocked recv.
  """
  buffer = bytearray(_RELAY_CHUNK_BYTES)
  view = memoryview(buffer)
  try:
    while True:
      n = source.recv_into(buffer)
      if not n:
        break
      sink.sendall(view[:n])
  except OSError:
    pass
  for sock in (sink, source):
    try:
      sock.shutdown(socket.SHUT_RDWR)
    except OSError:
      pass


def _relay_connection(client: socket.socket, port: int) -> None:
  try:
    upstream = socket.create_connection(('127.0.0.1', port))
  except OSError:
    client.close()
    return
  for sock in (client, upstream):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
  client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # a vanished trainer ends it
  back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
  back.start()
  _pump(client, upstream)
  back.join()
  client.close()
  upstream.close()


def _accept_loop(listener: socket.socket, port: int) -> None:
  while True:
    try:
      client, _ = listener.accept()
    except OSError as e:
      if e.errno in (errno.EINTR, errno.ECONNABORTED):
        continue
      return  # the listener was closed: shutting down
    threading.Thread(target=_relay_connection, args=(client, port), daemon=True).start()


def serve(
  host: str = '127.0.0.1',
  port: int = 0,
  *,
  max_concurrent_computation_calls: int | None = None,
  announce: Callable[[str, int, int], None] | None = None,
  out: TextIO = sys.stdout,
  allow_unconfined: bool = False,
) -> int:
  """Serves TFF remote execution on host:port until SIGINT/SIGTERM; returns an exit code.

  Call from the main thread of a process that has not started threads (no TensorFlow import).
  `announce(host, port, worker_pid)` is called once the worker accepts connections (default:
  prints one line to `out`). Returns 0 after a signal, 1 if the binary died by itself.
  `allow_unconfined`: where user namespaces are not available, warn on stderr and run the
  binary directly (on every interface) instead of failing (for owned local workers).

  Raises:
    WorkerServerError: the address cannot be bound, or the worker cannot be confined to it.
  """
  isolated = not is_wildcard(host)
  if not isolated and port == 0:
    raise WorkerServerError(f'--host={host} needs an explicit --port (the binary picks none)')
  listener = _bind(host, port) if isolated else None
  bound_port = listener.getsockname()[1] if listener else port
  stop = threading.Event()

  def on_signal(signum, frame):  # only flags: every wait below polls it
    del signum, frame
    stop.set()

  previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
  process = None
  try:
    if isolated:
      isolated, listener = _confine(listener, bound_port, allow_unconfined)
    if stop.is_set():
      return 0
    process = worker_process.start(
      bound_port, max_concurrent_computation_calls=max_concurrent_computation_calls
    )
    _wait_listening(process, bound_port, _READY_TIMEOUT_S, stop)
    if stop.is_set():
      return 0
    if listener is not None:
      threading.Thread(target=_accept_loop, args=(listener, bound_port), daemon=True).start()
    if announce is None:
      scope = 'this address only' if isolated else 'every interface of this machine'
      print(
        f'TFF worker serving remote execution on {host}:{bound_port} ({scope}; worker_binary '
        f'pid {process.pid}); stop with Ctrl-C or SIGTERM',
        file=out,
        flush=True,
      )
    else:
      announce(host, bound_port, process.pid)
    while not stop.is_set() and process.poll() is None:
      stop.wait(0.2)
  finally:
    code = _stop(listener, process, previous)
  if not stop.is_set() and code is not None:
    print(f'worker: error: worker_binary exited by itself (code {code})', file=sys.stderr)
    return 1
  return 0


def _confine(listener, bound_port: int, allow_unconfined: bool):
  """(isolated, listener) once this process's network is confined to the listener's address;
  where that is unavailable and `allow_unconfined`, (False, None) after a warning."""
  try:
    _isolate_network()
  except ConfinementUnavailableError as e:
    if not allow_unconfined:
      raise
    print(
      f'worker: warning: {str(e).split(";")[0]}; this local worker listens on every '
      f'interface (port {bound_port})',
      file=sys.stderr,
      flush=True,
    )
    listener.close()
    return False, None
  return True, listener


def _stop(listener, process, previous) -> int | None:
  """Closes the listener, stops the worker_binary, restores the signal handlers; the binary's
  exit code if it had ended by itself (None otherwise)."""
  if listener is not None:
    try:
      listener.shutdown(socket.SHUT_RDWR)  # wakes the accept loop (close alone does not)
    except OSError:
      pass
    listener.close()
  code = None if process is None else process.poll()
  if process is not None:
    worker_process.terminate(process)
  for s, handler in previous.items():
    signal.signal(s, handler)
  return code


def _main(argv: list[str]) -> int:
  """Internal entry point for owned local workers: HOST PORT MAX_CONCURRENT_CALLS (0: none).

  Owned local workers fall back to an unconfined binary (with a warning) where user
  namespaces are unavailable.
  """
  host, port, max_calls = argv[1], int(argv[2]), int(argv[3])
  try:
    return serve(
      host, port, max_concurrent_computation_calls=max_calls or None, allow_unconfined=True
    )
  except WorkerServerError as e:
    print(f'worker: error: {e}', file=sys.stderr, flush=True)
    return 2


if __name__ == '__main__':
  sys.exit(_main(sys.argv))
