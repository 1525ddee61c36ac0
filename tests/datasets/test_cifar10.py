"""Tests for the CIFAR-10 loader (tfds prepared data, no network) and its federated split.

The fixture is a genuine tfds-prepared ``cifar10/3.0.2``: a tiny ``cifar-10-binary.tar.gz`` in
CIFAR's binary format (per record 1 label byte + 3072 pixel bytes, channel-major R, G, B planes
of 32 x 32) is put in a manual directory, and tfds's own ``Cifar10`` builder extracts and parses
it and writes the tfrecord shards, ``dataset_info.json`` and ``features.json`` with its writer
(``download_and_prepare`` finds the archive under the file name registered in tfds's checksums
for the CIFAR URL, so it downloads nothing).
"""

import io
import os
import tarfile

import numpy as np
import pytest

from tff_adaptive.datasets import Cifar10
from tff_adaptive.datasets import DataFormatError
from tff_adaptive.datasets import DataNotFoundError
from tff_adaptive.datasets import cifar10_prepared_dir
from tff_adaptive.datasets import dirichlet_label_partition
from tff_adaptive.datasets import federated_cifar10
from tff_adaptive.datasets import load_cifar10

TRAIN_BATCH_SIZES = (4, 3, 5, 2, 6)  # data_batch_1..5.bin: 20 training images
NUM_TEST = 7
CLASS_NAMES = 'airplane automobile bird cat deer dog frog horse ship truck'.split()


def _records(images: np.ndarray, labels: np.ndarray) -> bytes:
  """CIFAR-10 binary format: <label byte><1024 R><1024 G><1024 B> per image."""
  planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
  return np.concatenate([labels[:, None].astype(np.uint8), planes], axis=1).tobytes()


def _write_archive(path: str, train, test) -> None:
  with tarfile.open(path, 'w:gz') as tar:

    def add(name: str, payload: bytes) -> None:
      info = tarfile.TarInfo(f'cifar-10-batches-bin/{name}')
      info.size = len(payload)
      tar.addfile(info, io.BytesIO(payload))

    start = 0
    for i, size in enumerate(TRAIN_BATCH_SIZES, start=1):
      add(
        f'data_batch_{i}.bin',
        _records(train[0][start : start + size], train[1][start : start + size]),
      )
      start += size
    add('test_batch.bin', _records(*test))
    add('batches.meta.txt', ('\n'.join(CLASS_NAMES) + '\n\n').encode())


@pytest.fixture(scope='module')
def prepared(tmp_path_factory):
  """(data_dir, written Cifar10 arrays) for a tfds-prepared tiny CIFAR-10."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  root = tmp_path_factory.mktemp('cifar10')
  rng = np.random.default_rng(0)
  num_train = sum(TRAIN_BATCH_SIZES)
  x_train = rng.integers(0, 256, size=(num_train, 32, 32, 3), dtype=np.uint8)
  y_train = np.arange(num_train, dtype=np.int64) % 10  # every class twice
  x_test = rng.integers(0, 256, size=(NUM_TEST, 32, 32, 3), dtype=np.uint8)
  y_test = np.array([9, 0, 3, 3, 7, 1, 5], dtype=np.int64)
  manual = root / 'manual'
  manual.mkdir()
  _write_archive(str(manual / 'cifar-10-binary.tar.gz'), (x_train, y_train), (x_test, y_test))
  data_dir = root / 'tfds'
  builder = tfds.builder('cifar10', data_dir=str(data_dir))
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=str(manual)))
  return str(data_dir), Cifar10(x_train, y_train, x_test, y_test)


def test_fixture_is_a_tfds_prepared_dataset(prepared):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  data_dir, _ = prepared
  expected = os.path.join(data_dir, 'cifar10', '3.0.2')
  assert cifar10_prepared_dir(data_dir) == expected
  assert {
    'dataset_info.json',
    'features.json',
    'cifar10-train.tfrecord-00000-of-00001',
    'cifar10-test.tfrecord-00000-of-00001',
  } <= set(os.listdir(expected))
  builder = tfds.builder('cifar10', data_dir=data_dir)
  assert builder.is_prepared() and str(builder.version) == '3.0.2'
  assert builder.info.splits['train'].num_examples == 20
  assert builder.info.splits['test'].num_examples == 7
  assert builder.info.features['label'].names == CLASS_NAMES


def test_load_returns_the_written_arrays_in_file_order(prepared):
  data_dir, written = prepared
  data = load_cifar10(data_dir)
  assert isinstance(data, Cifar10)
  x_train, y_train, x_test, y_test = data  # also a plain 4-tuple
  assert x_train.dtype == np.uint8 and x_train.shape == (20, 32, 32, 3)
  assert x_test.dtype == np.uint8 and x_test.shape == (7, 32, 32, 3)
  assert y_train.dtype == np.int64 and y_test.dtype == np.int64
  for got, want in zip(data, written):
    np.testing.assert_array_equal(got, want)
  assert not x_train.flags.writeable and not y_train.flags.writeable


def test_missing_data_names_directory_and_how_to_prepare(tmp_path):
  with pytest.raises(DataNotFoundError) as info:
    load_cifar10(tmp_path / 'nowhere')
  message = str(info.value)
  assert isinstance(info.value, FileNotFoundError)
  assert '\n' not in message
  assert os.path.join(str(tmp_path), 'nowhere', 'cifar10', '3.0.2') in message
  assert f'tfds build cifar10 --data_dir={tmp_path / "nowhere"}' in message


def test_corrupt_shard_raises_data_format_error(prepared, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top

  data_dir, _ = prepared
  copy = tmp_path / 'tfds'
  shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns('downloads'))
  shard = copy / 'cifar10' / '3.0.2' / 'cifar10-train.tfrecord-00000-of-00001'
  shard.write_bytes(shard.read_bytes()[:5000])  # truncated mid-record
  with pytest.raises(DataFormatError, match=r"cifar10/3\.0\.2: cannot read the prepared 'train'"):
    load_cifar10(copy)


def test_federated_cifar10_is_the_dirichlet_partition(prepared):
  data_dir, written = prepared
  fed = federated_cifar10(data_dir, num_clients=4, examples_per_client=5, alpha=0.1, seed=3)
  assert fed.num_clients == 4
  expected = dirichlet_label_partition(written.y_train, 4, 5, 0.1, seed=3)
  for idx, want in zip(fed.client_indices, expected):
    np.testing.assert_array_equal(idx, want)
  # 4 x 5 = all 20 examples, each exactly once.
  np.testing.assert_array_equal(np.sort(np.concatenate(fed.client_indices)), np.arange(20))
  x, y = fed.client(2)
  np.testing.assert_array_equal(x, written.x_train[expected[2]])
  np.testing.assert_array_equal(y, written.y_train[expected[2]])
  np.testing.assert_array_equal(fed.data.x_test, written.x_test)
  again = federated_cifar10(data_dir, num_clients=4, examples_per_client=5, alpha=0.1, seed=3)
  assert all(np.array_equal(a, b) for a, b in zip(fed.client_indices, again.client_indices))


@pytest.mark.parametrize(
  'kwargs, match',
  [
    (dict(num_clients=0), r'num_clients=0 .*>= 1'),
    (dict(examples_per_client=-5), r'examples_per_client=-5 .*>= 1'),
    (dict(alpha=0.0), r'alpha=0.0 .*> 0'),
    (dict(seed=1.5), r'seed=1.5 .*integer >= 0'),
  ],
)
def test_federated_cifar10_validates_before_reading(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match):  # not DataNotFoundError: checked first
    federated_cifar10(tmp_path / 'nowhere', **kwargs)


def test_federated_cifar10_too_many_examples(prepared):
  data_dir, _ = prepared
  with pytest.raises(ValueError, match=r'5 \* 5 = 25 is invalid; expected <= len\(labels\)=20'):
    federated_cifar10(data_dir, num_clients=5, examples_per_client=5)
