"""StopAtRoundEnd: the first SIGINT/SIGTERM is deferred to the round's end, a second is not.

Signals are sent to this process with os.kill; Python runs the handler in the main thread at
the next bytecode, so each check follows the kill directly.
"""

import io
import os
import signal

import pytest

from tff_adaptive.loop import stopping


class _Stop(Exception):
  pass


def _raise_stop(signum, frame):
  del frame
  raise _Stop(signum)


@pytest.fixture
def sigterm_raises():
  previous = signal.signal(signal.SIGTERM, _raise_stop)
  yield
  signal.signal(signal.SIGTERM, previous)


def test_the_first_signal_is_recorded_and_delivered_later(sigterm_raises):
  log = io.StringIO()
  reached = []
  with pytest.raises(_Stop):
    with stopping.StopAtRoundEnd(log) as stop:
      os.kill(os.getpid(), signal.SIGTERM)
      for _ in range(1000):  # bytecodes in which an immediate handler would have run
        pass
      reached.append(stop.requested)  # recorded, nothing raised yet
      assert stop.requested_name == 'SIGTERM'
      stop.deliver()  # the previous handler runs now
  assert reached == [signal.SIGTERM]
  assert signal.getsignal(signal.SIGTERM) is _raise_stop


def test_ctrl_c_becomes_keyboard_interrupt_at_delivery():
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  with stopping.StopAtRoundEnd() as stop:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
      pass
    assert stop.requested == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
      stop.deliver()
    assert stop.requested is None
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_is_delivered_at_once(sigterm_raises):
  with stopping.StopAtRoundEnd() as stop:
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(_Stop):
      os.kill(os.getpid(), signal.SIGTERM)
      for _ in range(1000):  # the handler runs between bytecodes
        pass
    assert signal.getsignal(signal.SIGTERM) is _raise_stop  # restored on delivery


def test_a_request_after_the_last_round_is_delivered_on_exit(sigterm_raises):
  with pytest.raises(_Stop):
    with stopping.StopAtRoundEnd():
      os.kill(os.getpid(), signal.SIGTERM)


def test_an_exception_inside_drops_the_request_and_restores_handlers(sigterm_raises):
  with pytest.raises(ZeroDivisionError):
    with stopping.StopAtRoundEnd():
      os.kill(os.getpid(), signal.SIGTERM)
      1 / 0  # noqa: B018
  assert signal.getsignal(signal.SIGTERM) is _raise_stop


def test_ignored_signals_stay_ignored():
  previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
  try:
    with stopping.StopAtRoundEnd() as stop:
      assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
      os.kill(os.getpid(), signal.SIGTERM)
      assert stop.requested is None
  finally:
    signal.signal(signal.SIGTERM, previous)
