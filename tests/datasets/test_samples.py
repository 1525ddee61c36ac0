"""The sample-file command (tff_adaptive.datasets.samples) and the one-message data check."""

import os
import pathlib
import subprocess
import sys

import pytest

from tests import trainer_processes
from tff_adaptive import commands
from tff_adaptive import datasets
from tff_adaptive import tasks
from tff_adaptive.datasets import samples

REPO = pathlib.Path(__file__).resolve().parents[2]
SAMPLE_TASKS = ('emnist_cr', 'emnist_ae', 'shakespeare', 'so_nwp', 'so_lr', 'cifar100')


@pytest.fixture(scope='module')
def sample_dir(tmp_path_factory):
  data_dir = tmp_path_factory.mktemp('samples')
  assert samples.main([f'--data_dir={data_dir}']) == 0
  return data_dir


def test_the_samples_serve_every_tff_format_task_at_its_published_clients_per_round(sample_dir):
  assert sorted(os.listdir(sample_dir)) == [
    'cifar100.sqlite',
    'emnist_all.sqlite',
    'shakespeare.sqlite',
    'stackoverflow.sqlite',
    'stackoverflow.tag_count.tar.bz2',
    'stackoverflow.word_count.tar.bz2',
  ]
  for task in SAMPLE_TASKS:
    tasks.check_data(tasks.TaskConfig(task, data_dir=str(sample_dir)))  # nothing missing
    assert all(f.has_samples for f in tasks.TASKS[task].data), task
  for dataset, task in (('emnist', 'emnist_cr'), ('shakespeare', 'shakespeare'),
                        ('stackoverflow', 'so_nwp'), ('cifar100', 'cifar100')):  # fmt: skip
    splits = datasets.load_federated(dataset, str(sample_dir))
    assert len(splits.train.client_ids) >= tasks.TASKS[task].defaults.clients_per_round, dataset


def test_the_documented_command_then_trains_so_lr(tmp_path, monkeypatch):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  written = subprocess.run(
    [sys.executable, '-m', 'tff_adaptive.datasets.samples', f'--data_dir={tmp_path / "d"}'],
    cwd=tmp_path,  # from anywhere: the package's module
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert written.returncode == 0, written.stderr[-2000:]
  monkeypatch.chdir(tmp_path)  # the hint names the train command as it runs from there
  assert f'try: {commands.command("train")} --task=so_lr' in written.stdout
  trained = trainer_processes.run(
    [
      '--task=so_lr',
      f'--data_dir={tmp_path / "d"}',
      '--engine=inprocess',
      '--total_rounds=1',
      f'--root_output_dir={tmp_path / "out"}',
    ],
    environment=env,
    timeout=300,
  )
  assert trained.returncode == 0, trained.stderr[-2000:]
  assert 'round 1/1 ' in trained.stdout and 'eval_macro_f1=' in trained.stdout, trained.stdout


def test_every_missing_file_is_named_in_one_message(tmp_path):
  with pytest.raises(datasets.DataNotFoundError) as e:
    tasks.check_data(tasks.TaskConfig('so_lr', data_dir=str(tmp_path)))
  message = str(e.value)
  assert message.startswith('task so_lr: 3 data files missing: ')
  for name in (
    'stackoverflow.sqlite',
    'stackoverflow.word_count.tar.bz2',
    'stackoverflow.tag_count.tar.bz2',
  ):
    assert str(tmp_path / name) in message
  assert message.count('--dataset=stackoverflow_counts') == 1  # one command for both archives
  assert '--dataset=stackoverflow;' in message
  assert f'{commands.command("samples")} --data_dir=DIR' in message
  assert '\n' not in message


def test_only_the_missing_files_are_named_and_alternatives_count(tmp_path):
  samples.write_stackoverflow_counts(str(tmp_path))
  with pytest.raises(datasets.DataNotFoundError) as e:
    tasks.check_data(tasks.TaskConfig('so_lr', data_dir=str(tmp_path)))
  assert str(e.value).startswith(
    f'task so_lr: a data file missing: {tmp_path / "stackoverflow.sqlite"}; get it with: '
  )
  # Fashion-MNIST: an uncompressed copy serves; no sample files, so no samples hint.
  for name in ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte.gz'):
    (tmp_path / name).write_bytes(b'')
  with pytest.raises(datasets.DataNotFoundError) as e:
    tasks.check_data(tasks.TaskConfig('fmnist', data_dir=str(tmp_path)))
  message = str(e.value)
  assert message.startswith('task fmnist: 2 data files missing: ')
  assert 'train-' not in message and 't10k-images-idx3-ubyte.gz' in message
  assert 'apt-get install dataset-fashion-mnist' in message and 'samples' not in message


def test_synthetic_reads_no_files(tmp_path):
  tasks.check_data(tasks.TaskConfig('synthetic', data_dir=str(tmp_path)))
