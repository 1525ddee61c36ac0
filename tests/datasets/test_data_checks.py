"""Examples that parse but cannot be data are refused in one line naming client, split and file.

For each task on TFF's SQLite files, one training client of a copy of the fixture file gets
examples that TFF's parser accepts but whose values the task's format rules out (pixels
outside [0, 1] or not finite, labels outside the task's classes, texts that are all empty;
CIFAR-100's image values cannot be checked: TFF's parser casts them to uint8). Reading that
client raises `DataFormatError` naming it, its split, its file and the feature, while every
other client reads as before. The trainer reports it as one line, exit 2, before the client
trains (`test_a_client_of_garbage_that_parses_stops_the_trainer`). Examples of another shape
than the format's do not parse at all: also one line naming the client.
"""

import shutil
import sqlite3

import numpy as np
import pytest

from tests import trainer_processes
from tff_adaptive import datasets
from tff_adaptive import tasks
from tff_adaptive.datasets import checks
from tff_adaptive.datasets import tff_format

_SO_COUNTS = ('stackoverflow.word_count.tar.bz2', 'stackoverflow.tag_count.tar.bz2')


def _so(tokens='a b', title='t', tags='javascript'):
  return tff_format.stackoverflow_example(tokens, title, tags, '2010-01-08 09:34:05 UTC', 1, 'q')


def _cifar(label=3):
  return tff_format.serialize_example(
    {
      'image': np.full((32, 32, 3), 7, np.int64),
      'label': np.int64(label),
      'coarse_label': np.int64(0),
    }
  )


# task -> (file, stored example, what the one line says about it)
CASES = {
  'emnist_cr-pixels': (
    'emnist_cr',
    'emnist_all.sqlite',
    tff_format.emnist_example(np.full((28, 28), 2.0), 3),
    'pixels: 784 of 784 values are outside [0.0, 1.0] (the first: 2.0)',
  ),
  'emnist_cr-label': (
    'emnist_cr',
    'emnist_all.sqlite',
    tff_format.emnist_example(np.full((28, 28), 0.5), 62),
    "label: 1 of 1 labels are not one of the task's 62 classes 0..61 (the first: 62)",
  ),
  'emnist_ae-nan': (
    'emnist_ae',
    'emnist_all.sqlite',
    tff_format.emnist_example(np.full((28, 28), np.nan), 3),
    'pixels: 784 of 784 values are outside [0.0, 1.0] (the first: nan)',
  ),
  'cifar100-label': (
    'cifar100',
    'cifar100.sqlite',
    _cifar(label=-1),
    "label: 1 of 1 labels are not one of the task's 100 classes 0..99 (the first: -1)",
  ),
  'shakespeare-empty': (
    'shakespeare',
    'shakespeare.sqlite',
    tff_format.shakespeare_example(b''),
    'snippets: all 1 texts are empty',
  ),
  'so_nwp-empty': (
    'so_nwp',
    'stackoverflow.sqlite',
    _so(tokens=''),
    'tokens: all 1 texts are empty',
  ),
  'so_lr-no_tags': ('so_lr', 'stackoverflow.sqlite', _so(tags=''), 'tags: all 1 texts are empty'),
}


def _replace_client(path, split, client_id, example):
  """Every stored example of the client becomes `example` (one example, metadata to match)."""
  con = sqlite3.connect(path)
  con.execute('DELETE FROM examples WHERE split_name = ? AND client_id = ?', (split, client_id))
  con.execute(
    'INSERT INTO examples (split_name, client_id, serialized_example_proto) VALUES (?, ?, ?)',
    (split, client_id, example),
  )
  con.execute(
    'UPDATE client_metadata SET num_examples = 1 WHERE split_name = ? AND client_id = ?',
    (split, client_id),
  )
  con.commit()
  con.close()


def _data_dir_with(tff_data_dir, tmp_path, filename, example):
  """A copy of the fixtures' `filename` (and the Stack Overflow counts) whose first training
  client holds `example`; returns (data_dir, path, client id, TFF's name of the split)."""
  for name in (filename, *(_SO_COUNTS if filename.startswith('stackoverflow') else ())):
    shutil.copy(f'{tff_data_dir}/{name}', tmp_path / name)
  path = str(tmp_path / filename)
  con = sqlite3.connect(path)
  splits = [r[0] for r in con.execute('SELECT DISTINCT split_name FROM client_metadata')]
  con.close()
  split = next(s for s in splits if 'train' in s)
  dataset = {'emnist_all.sqlite': 'emnist'}.get(filename, filename.split('.')[0])
  victim = datasets.load_federated(dataset, str(tmp_path)).train.client_ids[0]
  _replace_client(path, split, victim, example)
  return str(tmp_path), path, victim, split


@pytest.mark.parametrize('case', CASES)
def test_examples_that_parse_but_cannot_be_data_name_client_split_file_and_feature(
  tff_data_dir, tmp_path, case
):
  task_name, filename, example, detail = CASES[case]
  data_dir, path, victim, split = _data_dir_with(tff_data_dir, tmp_path, filename, example)
  task = tasks.build_task(tasks.TaskConfig(task_name, data_dir=data_dir))
  with pytest.raises(datasets.DataFormatError) as raised:
    task.train_clients[victim]
  assert str(raised.value) == (
    f'client {victim!r} of split {split!r} in {path}: its examples do not make model inputs '
    f'(ValueError: {detail})'
  )
  others = [c for c in task.client_ids if c != victim]
  assert len(task.train_clients[others[0]]['y']) > 0  # the other clients read as before


def test_random_values_stored_as_an_emnist_client_are_refused(tff_data_dir, tmp_path):
  """Random 32-bit values in EMNIST's features parse (the features and their lengths are
  right) and train to accuracy 0 unless refused: they are outside EMNIST's pixel range."""
  rng = np.random.default_rng(0)
  pixels = rng.uniform(-1e6, 1e6, size=(28, 28)).astype(np.float32)
  example = tff_format.serialize_example({'pixels': pixels, 'label': np.int64(rng.integers(1e9))})
  data_dir, path, victim, split = _data_dir_with(
    tff_data_dir, tmp_path, 'emnist_all.sqlite', example
  )
  task = tasks.build_task(tasks.TaskConfig('emnist_cr', data_dir=data_dir))
  with pytest.raises(datasets.DataFormatError, match=r'pixels: \d+ of 784 values are outside'):
    task.train_clients[victim]


def test_a_client_of_garbage_that_parses_stops_the_trainer(tff_data_dir, tmp_path):
  """One line, exit 2, naming the client; the trainer had not trained it."""
  example = tff_format.emnist_example(np.full((28, 28), 2.0), 3)
  data_dir, path, victim, split = _data_dir_with(
    tff_data_dir, tmp_path, 'emnist_all.sqlite', example
  )
  proc = trainer_processes.run(
    [
      '--task=emnist_cr',
      f'--data_dir={data_dir}',
      '--total_rounds=1',
      '--clients_per_round=3',  # of the fixture's 3 writers: the victim is sampled
      '--engine=inprocess',
      f'--root_output_dir={tmp_path / "runs"}',
    ],
    timeout=300,
  )
  assert proc.returncode == 2, proc.stderr
  [line] = trainer_processes.stderr_lines(proc.stderr)
  assert line.startswith(f'federated_trainer: error: client {victim!r} of split {split!r}'), line
  assert 'pixels: 784 of 784 values are outside [0.0, 1.0]' in line
  assert 'Traceback' not in proc.stderr


@pytest.mark.parametrize(
  'values, low, high, message',
  [
    ([0.0, 0.5, 1.0], 0.0, 1.0, None),
    ([0.0, 1.5, -2.0], 0.0, 1.0, '2 of 3 values are outside [0.0, 1.0] (the first: 1.5)'),
    ([0.0, np.inf], 0.0, 1.0, '1 of 2 values are outside [0.0, 1.0] (the first: inf)'),
    ([0, 255, 256], 0, 255, '1 of 3 values are outside [0, 255] (the first: 256)'),
    ([], 0, 1, None),
  ],
)
def test_check_in_range(values, low, high, message):
  if message is None:
    checks.check_in_range('x', np.asarray(values), low, high)
  else:
    with pytest.raises(ValueError) as raised:
      checks.check_in_range('x', np.asarray(values), low, high)
    assert str(raised.value) == f'x: {message}'


def test_check_some_text_allows_single_empty_texts():
  checks.check_some_text('t', [b'', b'word', b''])
  checks.check_some_text('t', [])
  with pytest.raises(ValueError, match='t: all 2 texts are empty'):
    checks.check_some_text('t', [b'', b'  '])


def test_examples_of_another_shape_name_client_split_and_file(tff_data_dir, tmp_path):
  """EMNIST pixels of 27 x 28 values: TFF's parser refuses them (a fixed-length feature)."""
  example = tff_format.serialize_example(
    {'pixels': np.full((27, 28), 0.5, np.float32), 'label': np.int64(3)}
  )
  data_dir, path, victim, split = _data_dir_with(
    tff_data_dir, tmp_path, 'emnist_all.sqlite', example
  )
  task = tasks.build_task(tasks.TaskConfig('emnist_cr', data_dir=data_dir))
  with pytest.raises(datasets.DataFormatError) as raised:
    task.train_clients[victim]
  message = str(raised.value)
  assert message.startswith(
    f"client {victim!r} of split {split!r} in {path}: its examples do not parse as TFF's emnist "
    'features: '
  ), message
  assert '\n' not in message
