"""Fashion-MNIST loader reading the original gzip IDX files with NumPy only.

Fashion-MNIST (Xiao et al. 2017, arXiv:1708.07747) is one of the image tasks of Kim et al. 2024
("Adaptive Federated Learning with Auto-Tuned Clients", Delta-SGD), where it is partitioned over
100 clients x 500 examples with a Dirichlet label partition (see ``datasets.partitioners``).

The files are the four IDX files published by Zalando Research, installed offline by the Debian
package ``dataset-fashion-mnist`` into ``/usr/share/datasets/fashion-mnist``. The IDX format is a
big-endian header -- two zero bytes, a type code (0x08 = uint8), the number of dimensions -- followed
by one big-endian int32 per dimension and the raw data. The header is parsed and validated here
(magic number, dimensions, exact payload length); any mismatch raises ``DataFormatError``.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import zlib

import numpy as np

from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError

__all__ = [
  'DEFAULT_FASHION_MNIST_DIR',
  'FASHION_MNIST_FILES',
  'FashionMnist',
  'load_fashion_mnist',
  'read_idx',
]

DEFAULT_FASHION_MNIST_DIR = '/usr/share/datasets/fashion-mnist'

# split -> (images file, labels file), names as published and as installed by Debian.
FASHION_MNIST_FILES = {
  'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
  'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'),
}
_NUM_EXAMPLES = {'train': 60000, 'test': 10000}
_IMAGE_SHAPE = (28, 28)
_NUM_CLASSES = 10

# IDX type code -> big-endian NumPy dtype.
_IDX_DTYPES = {
  0x08: np.dtype('>u1'),
  0x09: np.dtype('>i1'),
  0x0B: np.dtype('>i2'),
  0x0C: np.dtype('>i4'),
  0x0D: np.dtype('>f4'),
  0x0E: np.dtype('>f8'),
}


@dataclasses.dataclass(frozen=True)
class FashionMnist:
  """The Fashion-MNIST train and test splits as read-only NumPy arrays.

  Attributes:
      x_train: uint8 images, shape [60000, 28, 28], values 0..255.
      y_train: int64 labels, shape [60000], values 0..9.
      x_test: uint8 images, shape [10000, 28, 28].
      y_test: int64 labels, shape [10000].
  """

  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray


def _read_bytes(path: str) -> bytes:
  """Returns the decompressed content of ``path`` (gzip if it ends in .gz, raw otherwise)."""
  try:
    if path.endswith('.gz'):
      with gzip.open(path, 'rb') as f:
        return f.read()
    with open(path, 'rb') as f:
      return f.read()
  except (EOFError, gzip.BadGzipFile, zlib.error) as e:
    raise DataFormatError(f'corrupt or truncated gzip file {path}: {e}') from e


def read_idx(path: str) -> np.ndarray:
  """Reads one IDX file (gzip-compressed if the name ends in .gz) into a NumPy array.

  Args:
      path: the file to read.

  Returns:
      A read-only array in native byte order with the shape given by the IDX header.

  Raises:
      DataNotFoundError: the file does not exist.
      DataFormatError: bad magic number, unknown type code, or a payload whose length differs
          from the product of the header dimensions.
  """
  if not os.path.isfile(path):
    raise DataNotFoundError(f'IDX file not found: {path}')
  raw = _read_bytes(path)
  if len(raw) < 4:
    raise DataFormatError(f'{path}: {len(raw)} bytes, too short for an IDX header')
  if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
    raise DataFormatError(f'{path}: bad IDX magic number 0x{raw[:4].hex()}')
  dtype = _IDX_DTYPES[raw[2]]
  ndim = raw[3]
  header_len = 4 + 4 * ndim
  if ndim == 0 or len(raw) < header_len:
    raise DataFormatError(f'{path}: IDX header with {ndim} dimensions is missing or truncated')
  shape = tuple(int(d) for d in np.frombuffer(raw, dtype='>i4', count=ndim, offset=4))
  expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(raw) - header_len != expected:
    raise DataFormatError(
      f'{path}: IDX payload has {len(raw) - header_len} bytes, header shape {shape} '
      f'needs {expected}'
    )
  data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(shape)
  data = data.astype(dtype.newbyteorder('='), copy=False)
  data.flags.writeable = False
  return data


def _resolve(data_dir: str, name: str) -> str:
  """Path of ``name`` in ``data_dir``, accepting an uncompressed copy; raises if neither exists."""
  path = os.path.join(data_dir, name)
  if os.path.isfile(path):
    return path
  unzipped = path[: -len('.gz')]
  if os.path.isfile(unzipped):
    return unzipped
  raise DataNotFoundError(
    f"Fashion-MNIST file not found: {path} (install it with 'apt-get install "
    f"dataset-fashion-mnist', which puts it in {DEFAULT_FASHION_MNIST_DIR}, or pass "
    f'--data_dir pointing at a directory holding {", ".join(_all_file_names())})'
  )


def _all_file_names() -> list[str]:
  return [name for pair in FASHION_MNIST_FILES.values() for name in pair]


def _load_split(data_dir: str, split: str) -> tuple[np.ndarray, np.ndarray]:
  images_name, labels_name = FASHION_MNIST_FILES[split]
  images_path = _resolve(data_dir, images_name)
  labels_path = _resolve(data_dir, labels_name)
  images = read_idx(images_path)
  labels = read_idx(labels_path)
  n = _NUM_EXAMPLES[split]
  if images.dtype != np.uint8 or images.shape != (n, *_IMAGE_SHAPE):
    raise DataFormatError(
      f'{images_path}: expected uint8 images of shape {(n, *_IMAGE_SHAPE)}, got '
      f'{images.dtype} {images.shape}'
    )
  if labels.dtype != np.uint8 or labels.shape != (n,):
    raise DataFormatError(
      f'{labels_path}: expected uint8 labels of shape {(n,)}, got {labels.dtype} {labels.shape}'
    )
  if labels.max() >= _NUM_CLASSES:
    raise DataFormatError(
      f'{labels_path}: label {int(labels.max())} outside the valid range [0, {_NUM_CLASSES})'
    )
  labels = labels.astype(np.int64)
  labels.flags.writeable = False
  return images, labels


def load_fashion_mnist(data_dir: str | None = None) -> FashionMnist:
  """Loads Fashion-MNIST from the four gzip IDX files.

  Args:
      data_dir: directory holding ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
          ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz`` (uncompressed copies
          without the ``.gz`` suffix are accepted too). Defaults to
          ``/usr/share/datasets/fashion-mnist`` (Debian package ``dataset-fashion-mnist``).

  Returns:
      A ``FashionMnist`` with read-only arrays: uint8 images [N, 28, 28] and int64 labels [N],
      N = 60000 (train) and 10000 (test), in file order.

  Raises:
      DataNotFoundError: a file is missing; the message names the expected path and how to get it.
      DataFormatError: a file is corrupt, truncated or does not have the Fashion-MNIST shape.
  """
  data_dir = DEFAULT_FASHION_MNIST_DIR if data_dir is None else os.fspath(data_dir)
  x_train, y_train = _load_split(data_dir, 'train')
  x_test, y_test = _load_split(data_dir, 'test')
  return FashionMnist(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
