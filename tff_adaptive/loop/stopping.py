"""Stopping a training loop at a round boundary on Ctrl-C (SIGINT) or SIGTERM.

Python runs a signal handler wherever the main thread is, including inside TensorFlow's C++
(eager ops check for pending signals). An exception raised there can leave TF's native state
inconsistent: a trainer sent SIGTERM while it set up a round's datasets once died in glibc
with `corrupted size vs. prev_size` instead of exiting 143. So, while rounds run, the first
SIGINT or SIGTERM only records the request. The loop finishes the round in progress,
checkpoints it, and then hands the signal to the handler that was installed before:
KeyboardInterrupt for Ctrl-C, the trainer's own SIGTERM handler (exit 143), or the default
action. A second signal is handed over at once, for a round that takes too long.

A batch scheduler's SIGTERM therefore loses no finished round, and the resumed run continues
from the round that was in progress when the signal came.
"""

import os
import signal
import sys
import threading
from typing import TextIO

_NAMES = {signal.SIGINT: 'Ctrl-C', signal.SIGTERM: 'SIGTERM'}


class StopAtRoundEnd:
  """A context manager that defers SIGINT and SIGTERM to the end of the current round.

  Use:
    with StopAtRoundEnd(log=sys.stdout) as stop:
      for round_num in ...:
        ...  # train, write metrics
        if stop.requested:
          ...  # checkpoint
          stop.deliver()  # raises, e.g. KeyboardInterrupt, or ends the process

  Outside the main thread (where Python cannot install handlers), and for a signal whose
  handler is SIG_IGN, nothing is deferred.

  Attributes:
    requested: the signal number received and not yet delivered, or None.
  """

  def __init__(self, log: TextIO | None = None):
    self._log = log
    self._previous = {}
    self.requested = None

  def __enter__(self) -> 'StopAtRoundEnd':
    if threading.current_thread() is not threading.main_thread():
      return self
    for signum in _NAMES:
      previous = signal.getsignal(signum)
      if previous is not signal.SIG_IGN:
        self._previous[signum] = previous
        signal.signal(signum, self._on_signal)
    return self

  def __exit__(self, exc_type, exc, tb) -> None:
    if exc_type is None and self.requested is not None:
      self.deliver()  # came after the last round: still a request to stop the program
    self._restore()

  @property
  def requested_name(self) -> str:
    """'Ctrl-C' or 'SIGTERM' for the pending request."""
    return _NAMES.get(self.requested, str(self.requested))

  def _on_signal(self, signum, frame) -> None:
    if self.requested is not None:  # the second signal: stop now
      self.requested = signum
      self.deliver(frame)
      return
    self.requested = signum
    self._notify(
      f'{_NAMES[signum]}: stopping after the round in progress (with a checkpoint); '
      f'{_NAMES[signum]} again stops at once\n'
    )

  def _notify(self, text: str) -> None:
    # Not print(): the handler may have interrupted a write to the same buffered stream.
    stream = self._log if self._log is not None else sys.stdout
    try:
      os.write(stream.fileno(), text.encode())
    except (AttributeError, OSError, ValueError):  # no file descriptor (e.g. StringIO)
      pass

  def _restore(self) -> None:
    for signum, previous in self._previous.items():
      signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    self._previous = {}

  def deliver(self, frame=None) -> None:
    """Restores the previous handlers and hands them the requested signal.

    A Python handler is called here (it usually raises: KeyboardInterrupt, or the trainer's
    exit); the default action is taken by raising the signal again (for SIGTERM: the process
    ends).
    """
    signum = self.requested
    if signum is None:
      return
    previous = self._previous.get(signum)
    self._restore()
    self.requested = None
    if callable(previous):
      previous(signum, frame)
    else:
      signal.raise_signal(signum)
