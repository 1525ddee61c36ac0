"""Quiets TensorFlow 2.14's C++ logging for a process that imports tff_adaptive first.

Infrastructure (no paper). Without it a short script using this library prints ~245 lines to
stderr: grappler's INFO lines for every TFF computation, the CPU-feature and CUDA notices of
`import tensorflow`, and three "Unable to register cuDNN/cuFFT/cuBLAS factory" ERROR lines that
TF 2.14 prints at import on every CPU-only machine whatever TF_CPP_MIN_LOG_LEVEL below 3 says
(tensorflow/tensorflow#62075).

`install()` (run by `import tff_adaptive`):

* sets TF_CPP_MIN_LOG_LEVEL=2 (errors only) unless the user set it. TF reads it once, at its
  first log line, so it takes effect in this process only if TensorFlow is not loaded yet; the
  TFF worker_binary processes started later inherit it either way;
* if TensorFlow is not loaded yet, arranges that its import (whoever triggers it) runs with the
  process's stderr (file descriptor 2, where TF's C++ logging writes) captured, and writes back
  every captured line except those three. Nothing is imported here: `tff_adaptive.runtime`'s
  worker server must stay free of TensorFlow (and single-threaded).

A user who imports TensorFlow before tff_adaptive sets the variable before that import instead:
`os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')`, or in the shell.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile

__all__ = ['filtered_compile_noise', 'filtered_import_noise', 'filtered_stderr', 'install']

IMPORT_NOISE = re.compile(
  r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] Unable to register cu(DNN|FFT|BLAS) '
  r'factory: Attempting to register factory for plugin cu(DNN|FFT|BLAS) when one has '
  r'already been registered$'
)


# XLA's CPU device logs this ERROR line once per process, when it first runs a compiled
# program (the in-process engines' `--fused_loop` and `--xla`); nothing is wrong.
XLA_CPU_NOISE = re.compile(
  r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] SetPriority unimplemented for this stream\.$'
)


def filtered_import_noise():
  """Within the block, fd 2 goes to a temporary file; afterwards all but the noise is replayed."""
  return filtered_stderr((IMPORT_NOISE,))


def filtered_compile_noise():
  """`filtered_import_noise` for a block that may first run an XLA program on the CPU."""
  return filtered_stderr((IMPORT_NOISE, XLA_CPU_NOISE))


@contextlib.contextmanager
def filtered_stderr(noise):
  """Within the block, fd 2 goes to a temporary file; afterwards every line that matches none
  of the `noise` patterns is replayed."""
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
        if not any(pattern.match(line) for pattern in noise)
      ]
      if kept:
        print('\n'.join(kept), file=sys.stderr, flush=True)


class _FilteredLoader(importlib.abc.Loader):
  """Runs another loader's `exec_module` inside `filtered_import_noise`."""

  def __init__(self, loader: importlib.abc.Loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module) -> None:
    module.__spec__.loader = self._loader  # the module keeps TF's own loader afterwards
    module.__loader__ = self._loader
    with filtered_import_noise():
      self._loader.exec_module(module)


class _TensorFlowImportFilter(importlib.abc.MetaPathFinder):
  """A one-shot finder: the first import of `tensorflow` runs through `_FilteredLoader`."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname != 'tensorflow':
      return None
    sys.meta_path.remove(self)
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is None or spec.loader is None:
      return spec
    spec.loader = _FilteredLoader(spec.loader)
    return spec


def install() -> None:
  """Quiets TF's C++ logging if TensorFlow is not loaded yet (see the module docstring)."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  if 'tensorflow' in sys.modules:
    return
  if not any(isinstance(f, _TensorFlowImportFilter) for f in sys.meta_path):
    sys.meta_path.insert(0, _TensorFlowImportFilter())
