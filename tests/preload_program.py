"""A program for tests/run/test_preload.py: what it does is chosen by its first argument."""

import atexit
import os
import signal
import sys
import threading
import time


def main(action: str) -> None:
  print(f'argv={sys.argv[1:]} cwd={os.getcwd()} var={os.environ.get("PRELOAD_TEST_VAR")}')
  print(f'name={__name__} pgid_is_own={os.getpgrp() == os.getpid()}', flush=True)
  atexit.register(lambda: print('atexit ran', flush=True))
  if action == 'exit3':
    sys.exit(3)
  if action == 'exit_with':
    sys.exit(int(sys.argv[2]))
  if action == 'exit_message':
    sys.exit('a message')
  if action == 'raise':
    raise ValueError('boom')
  if action == 'interrupt':
    raise KeyboardInterrupt
  if action == 'thread':
    threading.Thread(target=lambda: (time.sleep(0.3), print('thread done', flush=True))).start()
    return
  if action == 'stdin':
    print(f'stdin={sys.stdin.read()!r}')
    return
  if action == 'wait_for_signal':
    print('waiting', flush=True)
    signal.pause()


if __name__ == '__main__':
  main(sys.argv[1])
