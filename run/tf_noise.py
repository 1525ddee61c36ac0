"""Drops the log lines `import tensorflow` prints on every CPU-only start (TF 2.14).

TF 2.14 prints three "Unable to register cuDNN/cuFFT/cuBLAS factory" error lines at import,
whatever TF_CPP_MIN_LOG_LEVEL below 3 says (tensorflow/tensorflow#62075); they are noise, and a
user reading stderr should see only real problems. `filtered_import_noise()` sends the process's
stderr (file descriptor 2, which TF's C++ logging writes to) to a temporary file while the
block runs, then writes back every line but those three. This module imports no TensorFlow.
"""

import contextlib
import os
import re
import sys
import tempfile

NOISE = re.compile(
  r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] Unable to register cu(DNN|FFT|BLAS) '
  r'factory: Attempting to register factory for plugin cu(DNN|FFT|BLAS) when one has '
  r'already been registered$'
)


@contextlib.contextmanager
def filtered_import_noise():
  """Within the block, fd 2 goes to a temp file; afterwards all but the noise is replayed."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile(mode='w+b') as capture:
    os.dup2(capture.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      capture.seek(0)
      kept = [
        line
        for line in capture.read().decode(errors='replace').splitlines()
        if not NOISE.match(line)
      ]
      if kept:
        print('\n'.join(kept), file=sys.stderr, flush=True)
