"""run.provenance: the code version that runs and reports record, on throwaway git checkouts."""

import os
import pathlib
import subprocess

import pytest

from tff_adaptive.run import provenance


def _git(root: pathlib.Path, *args: str) -> str:
  env = dict(
    os.environ,
    GIT_AUTHOR_NAME='t',
    GIT_AUTHOR_EMAIL='t@example.com',
    GIT_COMMITTER_NAME='t',
    GIT_COMMITTER_EMAIL='t@example.com',
  )
  done = subprocess.run(
    ['git', '-C', str(root), *args], capture_output=True, text=True, check=True, env=env
  )
  return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> pathlib.Path:
  root = tmp_path / 'checkout'
  root.mkdir()
  _git(root, 'init', '-q')
  (root / 'code.py').write_text('x = 1\n')
  _git(root, 'add', 'code.py')
  _git(root, 'commit', '-q', '-m', 'first')
  return root


def test_a_clean_checkout_is_its_short_commit(checkout):
  assert provenance.code_version(str(checkout)) == _git(checkout, 'rev-parse', '--short', 'HEAD')


def test_a_changed_tracked_file_is_named_an_untracked_one_is_not(checkout):
  commit = _git(checkout, 'rev-parse', '--short', 'HEAD')
  (checkout / 'runs').mkdir()
  (checkout / 'runs' / 'metrics.csv').write_text('round_num\n')  # outputs are not code
  assert provenance.code_version(str(checkout)) == commit
  (checkout / 'code.py').write_text('x = 2\n')
  assert provenance.code_version(str(checkout)) == f'{commit} + uncommitted changes'
  _git(checkout, 'commit', '-q', '-am', 'second')
  second = _git(checkout, 'rev-parse', '--short', 'HEAD')
  assert second != commit and provenance.code_version(str(checkout)) == second


def test_outside_a_checkout_or_below_its_top_it_is_unknown(checkout, tmp_path):
  assert provenance.code_version(str(tmp_path / 'elsewhere')) == provenance.NOT_A_CHECKOUT
  # A wheel installed into a virtual environment inside some repository: not that repo's code.
  site_packages = checkout / '.venv' / 'lib' / 'site-packages'
  site_packages.mkdir(parents=True)
  assert provenance.code_version(str(site_packages)) == provenance.NOT_A_CHECKOUT


def test_bazel_run_names_the_workspace(checkout, monkeypatch):
  monkeypatch.setenv('BUILD_WORKSPACE_DIRECTORY', str(checkout))
  assert provenance.checkout_root() == str(checkout)
  assert provenance.code_version() == _git(checkout, 'rev-parse', '--short', 'HEAD')


def test_outside_bazel_it_is_the_checkout_holding_the_package(monkeypatch):
  monkeypatch.delenv('BUILD_WORKSPACE_DIRECTORY', raising=False)
  root = pathlib.Path(
    provenance.checkout_root()
  )  # this checkout (Bazel's runfiles under bazel test)
  assert (root / 'run' / 'provenance.py').samefile(provenance.__file__)
