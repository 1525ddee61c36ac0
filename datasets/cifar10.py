"""CIFAR-10 from a locally prepared TensorFlow Datasets directory, and its federated split.

Reddi et al., "Adaptive Federated Optimization", ICLR 2021, App. C.1: "We create a federated
version of CIFAR-10 by randomly partitioning the training data among 500 clients, with each client
receiving 100 examples ... latent Dirichlet allocation (LDA) over the labels ... The multinomial
is drawn from a symmetric Dirichlet distribution with parameter 0.1." ``federated_cifar10`` is that
split, made with ``datasets.dirichlet_label_partition`` (prior "uniform": concentration 0.1 per
class, examples drawn without replacement).

The images are read with ``tensorflow_datasets`` (builder ``cifar10``, version 3.0.2) from a data
directory D that already holds the prepared dataset, D/cifar10/3.0.2 (``dataset_info.json``,
``features.json`` and the ``cifar10-{train,test}.tfrecord-*`` shards). Nothing is ever downloaded:
a missing directory raises ``DataNotFoundError`` saying how to prepare it on a connected machine.
tfds stores the examples shuffled; they are returned in the original CIFAR file order (by the
``id`` feature, ``train_00000`` ... ``train_49999``), so indices are stable across machines.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import NamedTuple

import numpy as np

from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError
from tff_adaptive.datasets.partitioners import dirichlet_label_partition

__all__ = [
  'CIFAR10_TFDS_VERSION',
  'Cifar10',
  'FederatedCifar10',
  'cifar10_prepared_dir',
  'federated_cifar10',
  'load_cifar10',
]

CIFAR10_TFDS_VERSION = '3.0.2'
_NAME = 'cifar10'
_IMAGE_SHAPE = (32, 32, 3)
_NUM_CLASSES = 10


class Cifar10(NamedTuple):
  """The CIFAR-10 splits as read-only NumPy arrays, in CIFAR file order.

  Attributes:
      x_train: uint8 images [50000, 32, 32, 3] (HWC, values 0..255).
      y_train: int64 labels [50000], values 0..9.
      x_test: uint8 images [10000, 32, 32, 3].
      y_test: int64 labels [10000].
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray


@dataclasses.dataclass(frozen=True)
class FederatedCifar10:
  """CIFAR-10 with its training set partitioned over clients.

  Attributes:
      data: the full dataset; ``data.x_test``/``data.y_test`` is the pooled test set.
      client_indices: one sorted int64 index array into ``data.x_train`` per client, disjoint.
  """

  data: Cifar10
  client_indices: tuple[np.ndarray, ...]

  @property
  def num_clients(self) -> int:
    return len(self.client_indices)

  def client(self, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Client ``k``'s training (images, labels)."""
    idx = self.client_indices[k]
    return self.data.x_train[idx], self.data.y_train[idx]


def cifar10_prepared_dir(data_dir: str | os.PathLike) -> str:
  """The directory tfds reads CIFAR-10 from: ``<data_dir>/cifar10/3.0.2`` (absolute)."""
  root = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
  return os.path.join(root, _NAME, CIFAR10_TFDS_VERSION)


def _one_line(error: BaseException) -> str:
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text[:300]}'


def _load_split(builder, split: str, prepared: str) -> tuple[np.ndarray, np.ndarray]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  try:
    expected_n = int(builder.info.splits[split].num_examples)
    batch = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1, shuffle_files=False))
  except (tf.errors.OpError, OSError, ValueError, KeyError, AssertionError) as e:
    raise DataFormatError(
      f"{prepared}: cannot read the prepared '{split}' split ({_one_line(e)})"
    ) from e
  images, labels, ids = batch['image'], batch['label'], batch['id']
  n = images.shape[0]
  if n != expected_n or images.dtype != np.uint8 or images.shape[1:] != _IMAGE_SHAPE:
    raise DataFormatError(
      f"{prepared}: '{split}' split has {images.dtype} images of shape {images.shape}; "
      f'expected uint8 ({expected_n}, 32, 32, 3) as recorded in dataset_info.json'
    )
  prefix = f'{split}_'
  try:
    positions = np.array(
      [int(i.decode()[len(prefix) :]) if i.decode().startswith(prefix) else -1 for i in ids],
      dtype=np.int64,
    )
  except ValueError:
    positions = np.full(n, -1, dtype=np.int64)
  order = np.argsort(positions, kind='stable')
  if not np.array_equal(positions[order], np.arange(n)):
    raise DataFormatError(f"{prepared}: '{split}' ids are not {prefix}00000..{prefix}{n - 1:05d}")
  labels = labels[order].astype(np.int64)
  if n and (labels.min() < 0 or labels.max() >= _NUM_CLASSES):
    raise DataFormatError(
      f"{prepared}: '{split}' has label {int(labels.max())} outside [0, {_NUM_CLASSES})"
    )
  images = np.ascontiguousarray(images[order])
  images.flags.writeable = False
  labels.flags.writeable = False
  return images, labels


def load_cifar10(data_dir: str | os.PathLike) -> Cifar10:
  """Loads CIFAR-10 from a tfds data directory where it is already prepared; never downloads.

  Args:
      data_dir: the tfds data directory D holding ``D/cifar10/3.0.2``.

  Returns:
      ``Cifar10(x_train, y_train, x_test, y_test)``: uint8 [N, 32, 32, 3] images and int64 [N]
      labels in CIFAR file order, N = 50000 (train) and 10000 (test) for the real dataset.

  Raises:
      DataNotFoundError: ``D/cifar10/3.0.2`` is not a prepared dataset; the one-line message
          names that directory and how to prepare it.
      DataFormatError: the prepared files are unreadable or do not hold CIFAR-10's features.
  """
  prepared = cifar10_prepared_dir(data_dir)
  root = os.path.dirname(os.path.dirname(prepared))
  if not os.path.isfile(os.path.join(prepared, 'dataset_info.json')):
    raise DataNotFoundError(
      f'CIFAR-10 is not prepared in {prepared} (no dataset_info.json); on a machine with '
      f'network access run `tfds build cifar10 --data_dir={root}` and copy {prepared} here'
    )
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  try:
    builder = tfds.builder(f'{_NAME}:{CIFAR10_TFDS_VERSION}', data_dir=root)
  except (OSError, ValueError, KeyError) as e:
    raise DataFormatError(f'{prepared}: unreadable tfds metadata ({_one_line(e)})') from e
  x_train, y_train = _load_split(builder, 'train', prepared)
  x_test, y_test = _load_split(builder, 'test', prepared)
  return Cifar10(x_train, y_train, x_test, y_test)


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return int(value)


def federated_cifar10(
  data_dir: str | os.PathLike,
  num_clients: int = 500,
  examples_per_client: int = 100,
  alpha: float = 0.1,
  seed: int = 0,
) -> FederatedCifar10:
  """CIFAR-10 split over clients by Dirichlet label allocation (Reddi et al. App. C.1).

  Args:
      data_dir: tfds data directory holding ``cifar10/3.0.2`` (see ``load_cifar10``).
      num_clients: number of clients, >= 1 (paper: 500).
      examples_per_client: training examples per client, >= 1 (paper: 100); the product with
          ``num_clients`` must not exceed the training set size.
      alpha: symmetric Dirichlet concentration per class, > 0 (paper: 0.1).
      seed: partition seed, >= 0.

  Returns:
      A ``FederatedCifar10``: the loaded data and ``num_clients`` disjoint index arrays equal to
      ``dirichlet_label_partition(y_train, num_clients, examples_per_client, alpha, seed)``.

  Raises:
      ValueError: an argument is out of range (checked before any data is read).
      DataNotFoundError, DataFormatError: as ``load_cifar10``.
  """
  num_clients = _check_int('num_clients', num_clients, 1)
  examples_per_client = _check_int('examples_per_client', examples_per_client, 1)
  seed = _check_int('seed', seed, 0)
  if (
    isinstance(alpha, bool)
    or not isinstance(alpha, numbers.Real)
    or not (np.isfinite(alpha) and alpha > 0)
  ):
    raise ValueError(f'alpha={alpha!r} is invalid; expected a finite number > 0')
  data = load_cifar10(data_dir)
  parts = dirichlet_label_partition(
    data.y_train, num_clients, examples_per_client, alpha, seed=seed
  )
  return FederatedCifar10(data=data, client_indices=tuple(parts))
