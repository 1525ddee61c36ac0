"""Which code produced a run or a report: the commit of the checkout it ran from.

Infrastructure (no paper). The trainer records it in each run's hparams.json
(`runtime.code_version`, the run's latest start: the runtime section may change on a resume) and
the reproduction drivers print it in their reports' headers, beside the date and the command.
"""

import os
import subprocess

__all__ = ['NOT_A_CHECKOUT', 'UNCOMMITTED', 'checkout_root', 'code_version']

NOT_A_CHECKOUT = 'unknown (not a git checkout)'
UNCOMMITTED = ' + uncommitted changes'


def checkout_root() -> str:
  """The workspace under `bazel run`, else the directory that holds this package."""
  return os.environ.get('BUILD_WORKSPACE_DIRECTORY') or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))
  )


def code_version(root: str | None = None) -> str:
  """`git rev-parse --short HEAD` of the checkout at `root` (default `checkout_root()`), with
  ' + uncommitted changes' when a tracked file differs from that commit (untracked files, such as
  runs/, do not count); `NOT_A_CHECKOUT` where `root` is not the top of a git checkout, e.g. an
  installed wheel (even one installed into a virtual environment inside some repository)."""
  root = checkout_root() if root is None else root
  if not os.path.exists(os.path.join(root, '.git')):  # a directory, or a worktree's file
    return NOT_A_CHECKOUT

  def git(*args: str) -> str | None:
    try:
      done = subprocess.run(  # noqa: S603
        ['git', '-C', root, *args],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
      )
    except (OSError, subprocess.TimeoutExpired):
      return None
    return done.stdout.strip() if done.returncode == 0 else None

  commit = git('rev-parse', '--short', 'HEAD')
  if not commit:
    return NOT_A_CHECKOUT
  changed = git('status', '--porcelain', '--untracked-files=no')
  return commit + (UNCOMMITTED if changed else '')
