"""The experiment directory: a safe name, a usable location, and one exclusive lock per run.

* `experiment_dir(root, name)`: the name must be one plain path component (no '/', not '.',
  '..' or empty, not absolute), so an experiment is always a direct child of its root.
* `prepare(path)`: creates the directory, or fails in one line (a path component is a file, no
  permission, read-only file system) before anything is written.
* `RunLock(path)`: an exclusive `fcntl.flock` on `<path>/.lock`, held for the whole run and
  released by the kernel when the process dies in any way (SIGKILL included), so it is never
  stale. The holder writes its pid into the file; a second trainer on the same experiment
  fails at once naming that process.
"""

import errno
import fcntl
import os

LOCK_FILE = '.lock'


class RunDirError(ValueError):
  """The experiment directory cannot be used (bad name, location, or held by another run)."""


def experiment_dir(root: str, name: str) -> str:
  """root/name, after checking that `name` is one plain path component.

  Raises:
    RunDirError: naming the bad name and what is allowed.
  """
  if (
    not name
    or name in ('.', '..')
    or '/' in name
    or os.sep in name
    or '\0' in name
    or os.path.isabs(name)
  ):
    raise RunDirError(
      f'--experiment_name={name!r} is not a plain directory name; use one path component '
      "without '/', not '.' or '..' (it is created under --root_output_dir)"
    )
  return os.path.join(root, name)


def prepare(path: str) -> str:
  """Creates `path` (and its parents) if needed and checks it is a writable directory.

  Raises:
    RunDirError: one line naming the path and the reason.
  """
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise RunDirError(f'cannot create the experiment directory {path}: {e.strerror}') from None
  if not os.path.isdir(path):
    raise RunDirError(f'{path} exists and is not a directory')
  if not os.access(path, os.W_OK | os.X_OK):
    raise RunDirError(f'the experiment directory {path} is not writable')
  return path


def lock_holder(path: str) -> str | None:
  """The pid (as written) of the process that holds the lock file `path`, None if none does
  (or the file does not exist). Takes and drops the lock when it is free."""
  try:
    fd = os.open(path, os.O_RDWR)
  except OSError:
    return None
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
      return None
    with open(path) as f:
      return f.read().strip() or 'another process'
  else:
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


class RunLock:
  """An exclusive lock on an experiment directory for the life of this process (or `release`)."""

  def __init__(self, path: str):
    self.path = os.path.join(path, LOCK_FILE)
    try:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise RunDirError(f'cannot create the lock file {self.path}: {e.strerror}') from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = ''
      try:
        with open(self.path) as f:
          holder = f.read().strip()
      except OSError:
        pass
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        who = f'process {holder}' if holder else 'another process'
        raise RunDirError(
          f'experiment {os.path.dirname(self.path)} is in use by {who} (another trainer is '
          'running it); wait for it to finish or use another --experiment_name'
        ) from None
      raise RunDirError(f'cannot lock {self.path}: {e.strerror}') from None
    os.ftruncate(fd, 0)
    os.write(fd, f'{os.getpid()}\n'.encode())
    self._fd = fd

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self) -> 'RunLock':
    return self

  def __exit__(self, *exc) -> None:
    self.release()
