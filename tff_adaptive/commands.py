"""How to type one of this package's commands so that it runs as pasted (no TensorFlow).

Infrastructure (no paper). The package installs one console command, `tff-adaptive` (train,
summarize, worker, samples, fetch; `tff_adaptive.run.cli`). A hint that a program prints names it
the way that works from where the user is: the console script beside the running interpreter
(`tff-adaptive` when that is what PATH finds, `.venv/bin/tff-adaptive` from a checkout whose
environment is not activated, an absolute path otherwise), or, where no script was installed,
this interpreter with `-m tff_adaptive.run.cli`. Never a bare `python`, which is often not the
environment the library is in.
"""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ['CLI_MODULE', 'CONSOLE_SCRIPT', 'command']

CONSOLE_SCRIPT = 'tff-adaptive'
CLI_MODULE = 'tff_adaptive.run.cli'


def _shown(path: str) -> str:
  """`path` relative to the working directory when inside it, else absolute."""
  relative = os.path.relpath(path)
  return relative if not relative.startswith(os.pardir) else os.path.abspath(path)


def command(subcommand: str) -> str:
  """The prefix of `tff-adaptive SUBCOMMAND` that runs as pasted here (module docstring)."""
  script = os.path.join(os.path.dirname(sys.executable), CONSOLE_SCRIPT)
  if os.path.isfile(script):
    found = shutil.which(CONSOLE_SCRIPT)
    if found and os.path.abspath(found) == os.path.abspath(script):
      return f'{CONSOLE_SCRIPT} {subcommand}'
    return f'{_shown(script)} {subcommand}'
  return f'{_shown(sys.executable)} -m {CLI_MODULE} {subcommand}'
