"""One command per paper: `python -m reproductions.<paper> STUDY [FLAGS]`.

Each paper's folder has a `__main__.py` naming its studies (`STUDIES`: study -> `Study`, the
module that runs it and one line on what it reproduces) and calling `dispatch`, which runs the
study's module with the remaining arguments exactly as `python -m reproductions.<paper>.<module>`
would: as `__main__`, so through the module's own `if __name__ == '__main__':` block and its
`main`. (A module's absl flags are its own only when it runs as `__main__`: `--help` lists the
main module's flags, and some drivers define theirs only there; so the module is run, not
imported.) The modules stay runnable under their own names, as the committed tables quote them,
and a table written through the paper's command quotes the module's command all the same
(`cell_runner.command_line`). `tff-adaptive reproduce PAPER STUDY [FLAGS]` is the same dispatch.

  python -m reproductions.kim2024_delta_sgd --help              # the studies, one line each
  python -m reproductions.kim2024_delta_sgd table1 --help       # the study's flags
  python -m reproductions.kim2024_delta_sgd table1 --rounds=1000 --parallel=2

A study's committed results are under its paper's `results/<study>/` (publish.json's `out`).
"""

from collections.abc import Mapping
import dataclasses
import importlib
import runpy
import sys

# Arguments that ask for the paper's usage (a study's own --help goes after the study).
HELP_ARGS = ('--help', '-help', '-h', '--helpshort', '-helpshort', '-?', 'help')


@dataclasses.dataclass(frozen=True)
class Study:
  """A paper's study: the module of the paper's folder that runs it, and what it reproduces."""

  module: str
  what: str


def usage(package: str, studies: Mapping[str, Study], prog: str) -> str:
  """The paper's usage: the command, its package docstring's first line, then the studies one per
  line, in the paper's order, each with its module."""
  doc = (importlib.import_module(package).__doc__ or '').strip()
  width = max(len(name) for name in studies)
  return '\n'.join(
    [
      f'usage: {prog} STUDY [FLAGS]',
      *(doc.splitlines()[:1]),
      '',
      'studies (STUDY --help: its flags; results in results/STUDY/):',
      *(f'  {name:<{width}}  {study.what} ({study.module}.py)' for name, study in studies.items()),
    ]
  )


def dispatch(
  package: str,
  studies: Mapping[str, Study],
  argv: list[str] | None = None,
  prog: str | None = None,
) -> int:
  """Runs the study `argv[0]` of the paper `package` (`reproductions.<paper>`) with `argv[1:]`.

  Returns the exit status: 0 after printing the studies for --help; 2, with one line on stderr,
  for an unknown study or flags before the study; 2 with the usage on stderr for no arguments. A
  study's own exit status (absl's `sys.exit`) passes through as SystemExit.
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  prog = prog or f'python -m {package}'
  valid = ', '.join(sorted(studies))
  if not argv:
    print(usage(package, studies, prog), file=sys.stderr, flush=True)
    return 2
  study, rest = argv[0], argv[1:]
  if study in HELP_ARGS:
    print(usage(package, studies, prog), flush=True)
    return 0
  if study.startswith('-'):
    print(f'{prog}: error: the STUDY comes first; valid: {valid}', file=sys.stderr, flush=True)
    return 2
  if study not in studies:
    print(f'{prog}: error: unknown STUDY {study!r}; valid: {valid}', file=sys.stderr, flush=True)
    return 2
  module = f'{package}.{studies[study].module}'
  sys.argv = [sys.argv[0] if sys.argv else module, *rest]  # argv[0]: runpy sets the module's file
  runpy.run_module(module, run_name='__main__', alter_sys=True)
  return 0
