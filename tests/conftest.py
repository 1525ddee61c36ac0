"""Every in-process TFF computation of the suite runs on a guarded worker.

`runtime.local_execution()` starts TFF's worker_binary with a parent-death signal and stops it
at the end of the session, so the suite never leaves a worker behind (tools/test.sh checks).

tools/test.sh runs the files on three pytest-xdist workers (`--dist loadfile`); the heaviest files
are collected first so that no worker is left alone with a long file at the end, and one
trainer run that two files compare against is made once for all workers.
"""

import fcntl
import os
import pathlib

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
  archives, in TFF's exact formats (tests/fixtures.py: `write_all`), written once per test run
  (the first xdist worker to ask, under a lock; ~4.5 CPU-s) and shared: do not modify."""
  from tests import fixtures  # pylint: disable=g-import-not-at-top

  shared = _shared_dir(tmp_path_factory) / 'tff_data'
  shared.mkdir(exist_ok=True)
  with open(shared / 'lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (shared / 'done').exists():
      fixtures.write_all(str(shared / 'files'))
      (shared / 'done').touch()
  return str(shared / 'files')


# Files by descending run time (measured from a fresh clone's junit XML, 2026-11-28, files of
# 20 s or more; only the order matters). Under
# `--dist loadfile` xdist hands out files in collection order, so longest first keeps the
# workers busy until the end. Files not listed keep their order after these.
_HEAVIEST_FIRST = (
  'test_engine_parity.py',
  'test_trainer.py',
  'test_vectorised.py',
  'test_dp_trainer.py',
  'test_robustness.py',
  'test_reddi2021.py',
  'test_fair_trainer.py',
  'test_tasks.py',
  'test_remote_workers.py',
  'test_fedpa_trainer.py',
  'test_tff_composition.py',
  'test_grid_cells.py',
  'test_kim2024.py',
  'test_scaffold.py',
  'test_dp.py',
  'test_fedpa_least_squares.py',
  'test_cell_runner.py',
  'test_fedopt.py',
  'test_readme.py',
  'test_preload.py',
  'test_fair_algorithms.py',
  'test_fedpa.py',
  'test_ddp.py',
  'test_reddi_models.py',
  'test_compression.py',
  'test_disk_full.py',
  'test_compression_trainer.py',
  'test_runtime.py',
  'test_ju_settings_study.py',
  'test_registry.py',
)


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(_HEAVIEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


def _shared_dir(tmp_path_factory) -> pathlib.Path:
  """A directory this pytest run's xdist workers share (this worker's own without xdist)."""
  base = tmp_path_factory.getbasetemp()
  return base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base


@pytest.fixture(scope='session')
def synthetic_adam_run(tmp_path_factory) -> pathlib.Path:
  """One uninterrupted 8-round FedAdam run of the synthetic task, checkpoints every 2 rounds
  (test_trainer's run A): the reference of the determinism and resume tests and of
  test_robustness. Made once per test run and shared by the xdist workers (the first to ask
  makes it under a lock); its experiment directory is read-only: copy it to change it."""
  from tests.run import test_trainer  # pylint: disable=g-import-not-at-top

  shared = _shared_dir(tmp_path_factory) / 'synthetic_adam_run'
  shared.mkdir(exist_ok=True)
  with open(shared / 'lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (shared / 'done').exists():
      test_trainer.run_trainer([*test_trainer.RUN_A, f'--root_output_dir={shared / "out"}'])
      (shared / 'done').touch()
  return shared / 'out' / test_trainer.RUN_A_NAME
