"""tff-adaptive: the library's programs as one console command.

  tff-adaptive train [FLAGS]                        the trainer (train --help: its flags)
  tff-adaptive summarize ROOT [OPTIONS]             one line per run under ROOT
  tff-adaptive worker --port=PORT [--host=ADDRESS]  one TFF worker, for train --workers=...
  tff-adaptive samples --data_dir=DIR               small stand-ins of TFF's data files
  tff-adaptive fetch --data_dir=DIR --dataset=NAME  TFF's data files (needs the network)
  tff-adaptive reproduce PAPER STUDY [FLAGS]        a paper's reproduction (from a checkout)

Installed by `pip install` of the package (`[project.scripts]` in pyproject.toml); in a checkout
set up by tools/setup.sh it is `.venv/bin/tff-adaptive`, and each subcommand is the same program
as `.venv/bin/python -m run.federated_trainer`, `-m run.summarize`, `-m run.worker`,
`-m tff_adaptive.datasets.samples`, `-m tff_adaptive.datasets.fetch`. The reproductions are the
repository's (their presets and committed results are not in the package): `reproduce PAPER
STUDY` is `python -m reproductions.<PAPER> STUDY` of the checkout it is started in (the paper's
`__main__` dispatch: `reproduce PAPER --help` lists its studies).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys

__all__ = ['SUBCOMMANDS', 'main']

# subcommand -> the module it runs as __main__.
SUBCOMMANDS = {
  'train': 'tff_adaptive.run.federated_trainer',
  'summarize': 'tff_adaptive.run.summarize',
  'worker': 'tff_adaptive.run.worker',
  'samples': 'tff_adaptive.datasets.samples',
  'fetch': 'tff_adaptive.datasets.fetch',
}
REPRODUCE = 'reproduce'


def _fail(message: str) -> int:
  print(f'tff-adaptive: error: {message}', file=sys.stderr, flush=True)
  return 2


def _run_module(module: str, prog: str, args: list[str]) -> int:
  """Runs `module` as `__main__` with argv [prog, *args], as `python -m module` would."""
  sys.argv = [prog, *args]
  runpy.run_module(module, run_name='__main__', alter_sys=True)
  return 0


def _checkout() -> str | None:
  """The repository checkout whose `reproductions/` to run: the working directory or an
  enclosing one, else the one this package was installed from (editable); None in neither."""
  here = os.path.abspath(os.getcwd())
  while True:
    if os.path.isfile(os.path.join(here, 'reproductions', '__init__.py')):
      return here
    parent = os.path.dirname(here)
    if parent == here:
      break
    here = parent
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # run/ -> checkout
  if os.path.isfile(os.path.join(package, 'reproductions', '__init__.py')):
    return package
  return None


def _reproduce(args: list[str]) -> int:
  """`reproduce PAPER [STUDY] [FLAGS]`: the paper's `__main__` dispatch (`reproductions.studies`)
  with `[STUDY] [FLAGS]`, so the studies are those of `python -m reproductions.<PAPER>`."""
  checkout = _checkout()
  if checkout is None:
    return _fail(
      'reproduce runs the reproductions of a checkout of the repository (their presets and '
      'committed results are not in the package): run it inside one'
    )
  root = os.path.join(checkout, 'reproductions')
  papers = sorted(
    name for name in os.listdir(root) if os.path.isfile(os.path.join(root, name, '__main__.py'))
  )
  if not args or args[0].startswith('-'):
    return _fail(f'reproduce needs a PAPER; valid: {", ".join(papers)}')
  paper, rest = args[0], args[1:]
  if paper not in papers:
    return _fail(f'reproduce: unknown PAPER {paper!r}; valid: {", ".join(papers)}')
  if checkout not in sys.path:
    sys.path.insert(0, checkout)
  dispatch = importlib.import_module(f'reproductions.{paper}.__main__')
  return dispatch.main(rest, prog=f'tff-adaptive reproduce {paper}')


def main(argv: list[str] | None = None) -> int:
  """`tff-adaptive SUBCOMMAND ARGS...` (module docstring); the exit code."""
  argv = sys.argv[1:] if argv is None else list(argv)
  if not argv or argv[0] in ('-h', '--help', 'help'):
    print(__doc__.strip())
    return 0
  name, rest = argv[0], argv[1:]
  if name == REPRODUCE:
    return _reproduce(rest)
  if name not in SUBCOMMANDS:
    valid = ', '.join([*SUBCOMMANDS, REPRODUCE])
    return _fail(f'unknown command {name!r}; valid: {valid} (tff-adaptive --help)')
  module = SUBCOMMANDS[name]
  if importlib.util.find_spec(module) is None:  # pragma: no cover (a broken install)
    return _fail(f'{module} is not importable: reinstall tff-adaptive')
  return _run_module(module, f'tff-adaptive {name}', rest)


if __name__ == '__main__':
  sys.exit(main())
