"""Every `reproductions/<paper>/` has one shape: a README, `published.py`, one command for its
studies (`python -m reproductions.<paper> STUDY [FLAGS]`, `reproductions.studies`), each study a
module with its `main`, and each study's committed results in `results/<study>/` (where its
publish.json entries' `out` points). And no function in reproductions/ is over 80 lines."""

import ast
import importlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
REPRODUCTIONS = REPO / 'reproductions'
PAPERS = sorted(p.name for p in REPRODUCTIONS.iterdir() if (p / '__init__.py').is_file())
# paper -> {study: module}: the names both commands take (`tff-adaptive reproduce PAPER STUDY`).
STUDIES = {
  'alshedivat2021_fedpa': {
    'least_squares': 'least_squares',
    'fmnist': 'reproduce_fmnist',
    'regimes': 'regimes',
  },
  'dp_fedopt': {'fmnist': 'reproduce'},
  'ju2023_adafedadam': {'table5': 'reproduce_synthetic', 'settings': 'settings_study'},
  'kim2024_delta_sgd': {'table1': 'reproduce', 'step_sizes': 'plot_step_sizes', 'dog': 'dog'},
  'reddi2021_fedopt': {'table1': 'reproduce', 'fedexp': 'fedexp'},
}
MAX_FUNCTION_LINES = 80


def _dispatch(paper):
  """The paper's `__main__` module (its STUDIES and `main`)."""
  return importlib.import_module(f'reproductions.{paper}.__main__')


def _run(*args):
  return subprocess.run(
    [sys.executable, '-m', *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
  )


def test_each_paper_folder_has_the_one_shape():
  assert PAPERS == sorted(STUDIES)
  for paper in PAPERS:
    folder = REPRODUCTIONS / paper
    for name in ('README.md', 'published.py', '__main__.py', 'results/publish.json'):
      assert (folder / name).is_file(), (paper, name)
    studies = _dispatch(paper).STUDIES
    assert {name: s.module for name, s in studies.items()} == STUDIES[paper]
    readme = (folder / 'README.md').read_text()
    for name, study in studies.items():
      source = (folder / f'{study.module}.py').read_text()
      assert 'def main(' in source and "if __name__ == '__main__':" in source, (paper, name)
      assert f'`{name}`' in readme, (paper, name)  # the README names its studies


def _entry_module(key, modules):
  """The study module a publish.json entry belongs to: the entry is named after the module, or
  the module's name and a suffix (`reproduce_seeds`, `regimes_fmnist`)."""
  return max((m for m in modules if key == m or key.startswith(f'{m}_')), key=len)


@pytest.mark.parametrize('paper', PAPERS)
def test_each_committed_result_is_in_its_studys_folder(paper):
  """results/ holds publish.json and one folder per study; each entry's `out` is inside its
  study's folder, its command runs the study's module, and every committed file is one entry's."""
  results = REPRODUCTIONS / paper / 'results'
  study_of = {module: name for name, module in STUDIES[paper].items()}
  assert sorted(p.name for p in results.iterdir()) == sorted(['publish.json', *study_of.values()])
  folders = []
  for key, entry in json.loads((results / 'publish.json').read_text()).items():
    module = _entry_module(key, study_of)
    out = REPO / entry['out']
    assert out.is_relative_to(results / study_of[module]), (key, entry['out'])
    assert f' -m reproductions.{paper}.{module} ' in f'{entry["command"]} ', key
    folders.append(out if out.is_dir() else out.parent)  # a figure's `out` is the file
  committed = [p for p in results.rglob('*') if p.is_file() and p.name != 'publish.json']
  assert committed and all(any(p.is_relative_to(f) for f in folders) for p in committed)


@pytest.mark.parametrize('paper', PAPERS)
def test_the_papers_command_lists_its_studies(paper, capsys):
  """--help: the studies, one line each, exit 0; an unknown study or flags first: one line
  naming the valid ones, exit 2; nothing at all: the usage on stderr, exit 2."""
  main = _dispatch(paper).main
  assert main(['--help']) == 0
  shown = capsys.readouterr()
  assert shown.out.startswith(f'usage: python -m reproductions.{paper} STUDY [FLAGS]')
  for name, module in STUDIES[paper].items():
    assert f'\n  {name} ' in shown.out and f'({module}.py)' in shown.out
  valid = ', '.join(sorted(STUDIES[paper]))
  assert main(['nope'], prog='prog') == 2
  assert capsys.readouterr().err == f"prog: error: unknown STUDY 'nope'; valid: {valid}\n"
  assert main(['--rounds=3'], prog='prog') == 2
  assert capsys.readouterr().err == f'prog: error: the STUDY comes first; valid: {valid}\n'
  assert main([]) == 2
  assert 'studies' in capsys.readouterr().err


def test_a_study_through_the_papers_command_is_its_module():
  """The same --help (the module's docstring and flags), and --publish goes where publish.json
  says, as with the module's own command."""
  by_study = _run('reproductions.kim2024_delta_sgd', 'step_sizes', '--help')
  by_module = _run('reproductions.kim2024_delta_sgd.plot_step_sizes', '--help')
  assert by_study.returncode == by_module.returncode == 0, by_study.stderr
  assert by_study.stdout == by_module.stdout and '--dirichlet_alpha' in by_study.stdout
  entry = json.loads((REPRODUCTIONS / 'dp_fedopt' / 'results' / 'publish.json').read_text())
  dry = _run('reproductions.dp_fedopt', 'fmnist', '--publish', '--dry_run')
  assert dry.returncode == 0, dry.stderr
  out = REPO / entry['reproduce']['out']
  assert dry.stdout.rstrip().endswith(f'# then the table and figure into {out}')
  refused = _run('reproductions.dp_fedopt', 'fmnist', '--publish', '--rounds=3', '--dry_run')
  assert refused.returncode == 2 and refused.stderr.startswith('reproduce: error: --publish: ')


def test_dp_fedopt_has_no_published_table_and_its_settings_are_the_committed_ones():
  from reproductions.dp_fedopt import published  # pylint: disable=g-import-not-at-top

  entry = json.loads((REPRODUCTIONS / 'dp_fedopt' / 'results' / 'publish.json').read_text())
  assert published.PUBLISHED is None
  assert published.SETTINGS == entry['reproduce']['settings']


def test_no_function_in_reproductions_is_over_80_lines():
  long = []
  for path in sorted(REPRODUCTIONS.rglob('*.py')):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_FUNCTION_LINES:
          long.append(f'{path.relative_to(REPO)}: {node.name} ({lines} lines)')
  assert long == []
