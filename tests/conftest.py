"""Every in-process TFF computation of the suite runs on a guarded worker.

`runtime.local_execution()` starts TFF's worker_binary with a parent-death signal and stops it
at the end of the session, so the suite never leaves a worker behind (tools/test.sh checks).
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top

from tff_adaptive import runtime


@pytest.fixture(scope='session', autouse=True)
def _guarded_tff_worker():
  with runtime.local_execution():
    yield


@pytest.fixture(scope='session')
def tff_data_dir(tmp_path_factory):
  """A directory with small fixtures of TFF's four SQLite datasets and the StackOverflow count
  archives, in TFF's exact formats (tests/fixtures.py: `write_all`); shared, do not modify."""
  from tests import fixtures  # pylint: disable=g-import-not-at-top

  return fixtures.write_all(str(tmp_path_factory.mktemp('tff_data')))
