"""Small federated data files in exactly TFF's on-disk formats, for the test suite.

TFF publishes its federated datasets as SQLite files (``emnist_all.sqlite``, ``shakespeare.sqlite``,
``stackoverflow.sqlite``, ``cifar100.sqlite``); the format and its writers (`write_tff_sqlite`, the
per-dataset example encoders, `serialize_example`, and the synthetic `write_emnist_scale`) are
library code in ``datasets/tff_format.py`` and re-exported here under their old names. This module
holds the test data built on them: random clients of each dataset at small sizes (`write_emnist`,
`write_shakespeare`, `write_stackoverflow`, `write_cifar100`, `write_all`), the StackOverflow count
archives, and damaged files (`truncate_file`, `write_wrong_schema`, `add_empty_client`).

The published files' indexes are documented by FedJAX's reader of these files
(``fedjax/core/sqlite_federated_data.py``); the features of each dataset's examples are what the
dataset's parser in ``tff.simulation.datasets.<name>`` reads:

* emnist (splits ``all_train``/``all_test``): ``pixels`` float_list of 28*28, ``label`` int64.
* shakespeare (``train``/``test``): ``snippets`` bytes.
* stackoverflow (``train``/``heldout``/``test``): ``creation_date``, ``tags``, ``title``,
  ``tokens``, ``type`` bytes and ``score`` int64.
* cifar100 (``train``/``test``): ``image`` int64_list of 32*32*3 (values 0..255), ``label`` and
  ``coarse_label`` int64.

StackOverflow's vocabulary files are ``stackoverflow.word_count.tar.bz2`` (a tar holding
``stackoverflow.word_count``: one ``word count`` line per word, most frequent first) and
``stackoverflow.tag_count.tar.bz2`` (``stackoverflow.tag_count``: a JSON object tag -> count), as
``tff.simulation.datasets.stackoverflow.load_word_counts``/``load_tag_counts`` read them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from collections.abc import Mapping
import io
import json
import os
import sqlite3
import tarfile

import numpy as np

from tff_adaptive.datasets.tff_format import SplitRows
from tff_adaptive.datasets.tff_format import _connect_new
from tff_adaptive.datasets.tff_format import _finish
from tff_adaptive.datasets.tff_format import cifar100_example
from tff_adaptive.datasets.tff_format import emnist_example
from tff_adaptive.datasets.tff_format import serialize_example
from tff_adaptive.datasets.tff_format import shakespeare_example
from tff_adaptive.datasets.tff_format import stackoverflow_example
from tff_adaptive.datasets.tff_format import write_emnist_scale
from tff_adaptive.datasets.tff_format import write_tff_sqlite

__all__ = [
  'CIFAR100_COARSE_OF_FINE',
  'EMNIST_SPLITS',
  'SO_TAGS',
  'SO_WORDS',
  'SplitRows',
  'add_empty_client',
  'cifar100_example',
  'emnist_example',
  'iter_rows',
  'serialize_example',
  'shakespeare_example',
  'stackoverflow_example',
  'truncate_file',
  'write_all',
  'write_cifar100',
  'write_emnist',
  'write_emnist_scale',
  'write_shakespeare',
  'write_stackoverflow',
  'write_stackoverflow_counts',
  'write_tag_counts_archive',
  'write_tff_sqlite',
  'write_word_counts_archive',
  'write_wrong_schema',
]

EMNIST_SPLITS = ('all_train', 'all_test')

# CIFAR-100 fine label -> coarse label (the dataset's own superclass table, fine labels in
# alphabetical order); TFF's cifar100.get_synthetic() pairs (0, 4), (51, 4), (88, 8), (71, 10).
CIFAR100_COARSE_OF_FINE = (
  4,
  1,
  14,
  8,
  0,
  6,
  7,
  7,
  18,
  3,
  3,
  14,
  9,
  18,
  7,
  11,
  3,
  9,
  7,
  11,
  6,
  11,
  5,
  10,
  7,
  6,
  13,
  15,
  3,
  15,
  0,
  11,
  1,
  10,
  12,
  14,
  16,
  9,
  11,
  5,
  5,
  19,
  8,
  8,
  15,
  13,
  14,
  17,
  18,
  10,
  16,
  4,
  17,
  4,
  2,
  0,
  17,
  4,
  18,
  17,
  10,
  3,
  2,
  12,
  12,
  16,
  12,
  1,
  9,
  19,
  2,
  10,
  0,
  1,
  16,
  12,
  9,
  13,
  15,
  13,
  16,
  19,
  2,
  4,
  6,
  19,
  5,
  5,
  8,
  19,
  18,
  1,
  2,
  15,
  6,
  0,
  17,
  8,
  14,
  13,
)

Sizes = int | tuple[int, int]

# ------------------------------------------------------------------------------ datasets


def _sizes(rng: np.random.Generator, n: int, sizes: Sizes) -> np.ndarray:
  if isinstance(sizes, int):
    return np.full(n, sizes, np.int64)
  lo, hi = sizes
  return rng.integers(lo, hi + 1, size=n)


def write_emnist(
  data_dir: str,
  num_clients: int = 4,
  train_examples: Sizes = (3, 6),
  test_examples: Sizes = (1, 3),
  seed: int = 0,
) -> str:
  """`data_dir`/emnist_all.sqlite: `num_clients` writers ('f0000_00', ...) in all_train and
  all_test, with random pixels in [0, 1) and labels in 0..61 (EMNIST-62)."""
  rng = np.random.default_rng(seed)
  rows = {}
  for split, sizes in zip(EMNIST_SPLITS, (train_examples, test_examples)):
    n = _sizes(rng, num_clients, sizes)
    rows[split] = {
      f'f{k:04d}_{k % 100:02d}': [
        emnist_example(rng.random((28, 28), dtype=np.float32), int(rng.integers(62)))
        for _ in range(n[k])
      ]
      for k in range(num_clients)
    }
  return write_tff_sqlite(os.path.join(data_dir, 'emnist_all.sqlite'), rows)


_CHARS = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?'-\n"


def write_shakespeare(
  data_dir: str,
  num_clients: int = 3,
  train_examples: Sizes = (2, 5),
  test_examples: Sizes = (1, 2),
  seed: int = 0,
) -> str:
  """`data_dir`/shakespeare.sqlite: characters ('THE_PLAY_CHARACTER_k') with random snippets of
  10-200 characters in train and test."""
  rng = np.random.default_rng(seed)
  rows = {}
  for split, sizes in (('train', train_examples), ('test', test_examples)):
    n = _sizes(rng, num_clients, sizes)
    rows[split] = {
      f'THE_PLAY_CHARACTER_{k}': [
        shakespeare_example(''.join(rng.choice(list(_CHARS), rng.integers(10, 201))))
        for _ in range(n[k])
      ]
      for k in range(num_clients)
    }
  return write_tff_sqlite(os.path.join(data_dir, 'shakespeare.sqlite'), rows)


SO_WORDS = (
  'the',
  'a',
  'to',
  'is',
  'i',
  'and',
  'you',
  'in',
  'of',
  'it',
  'for',
  'that',
  'this',
  'with',
  'can',
  'code',
  'function',
  'python',
  'java',
  'error',
  'file',
  'use',
  '.',
  ',',
  '?',
  '(',
  ')',
  'sql',
  'data',
  'value',
)
SO_TAGS = ('python', 'java', 'javascript', 'c#', 'sql', 'css', 'html', 'android', 'c++', 'php')


def _so_example(rng: np.random.Generator) -> bytes:
  tokens = ' '.join(rng.choice(SO_WORDS, rng.integers(3, 30)))
  title = ' '.join(rng.choice(SO_WORDS, rng.integers(2, 8)))
  tags = '|'.join(rng.choice(SO_TAGS, rng.integers(1, 4), replace=False))
  date = (
    f'20{rng.integers(8, 19):02d}-0{rng.integers(1, 10)}-1{rng.integers(0, 10)} '
    f'12:{rng.integers(10, 60)}:0{rng.integers(0, 10)} UTC'
  )
  return stackoverflow_example(
    tokens,
    title,
    tags,
    date,
    int(rng.integers(-3, 200)),
    'question' if rng.random() < 0.3 else 'answer',
  )


def write_stackoverflow(
  data_dir: str,
  num_clients: int = 4,
  train_examples: Sizes = (3, 6),
  test_clients: int = 2,
  heldout_clients: int = 2,
  other_examples: Sizes = (1, 3),
  seed: int = 0,
) -> str:
  """`data_dir`/stackoverflow.sqlite: `num_clients` train users ('00000000', ...), the first
  `test_clients` of them also in test (as in TFF's file), and `heldout_clients` other users in
  heldout. Sentences over the words `SO_WORDS`, tags from `SO_TAGS`."""
  rng = np.random.default_rng(seed)
  train_ids = [f'{k:08d}' for k in range(num_clients)]
  heldout_ids = [f'{num_clients + k:08d}' for k in range(heldout_clients)]
  rows = {}
  for split, ids, sizes in (
    ('train', train_ids, train_examples),
    ('heldout', heldout_ids, other_examples),
    ('test', train_ids[:test_clients], other_examples),
  ):
    n = _sizes(rng, len(ids), sizes)
    rows[split] = {cid: [_so_example(rng) for _ in range(n[k])] for k, cid in enumerate(ids)}
  return write_tff_sqlite(os.path.join(data_dir, 'stackoverflow.sqlite'), rows)


def write_cifar100(
  data_dir: str,
  num_train_clients: int = 3,
  num_test_clients: int = 2,
  train_examples: Sizes = 4,
  test_examples: Sizes = 3,
  seed: int = 0,
) -> str:
  """`data_dir`/cifar100.sqlite: train clients '0'..'N-1', test clients '0'..'M-1' (as in TFF:
  the ids overlap but are different people), random uint8 images, fine labels 0..99 with their
  true coarse labels."""
  rng = np.random.default_rng(seed)
  rows = {}
  for split, n_clients, sizes in (
    ('train', num_train_clients, train_examples),
    ('test', num_test_clients, test_examples),
  ):
    n = _sizes(rng, n_clients, sizes)
    clients = {}
    for k in range(n_clients):
      labels = rng.integers(100, size=n[k])
      clients[str(k)] = [
        cifar100_example(
          rng.integers(256, size=(32, 32, 3), dtype=np.uint8),
          int(y),
          CIFAR100_COARSE_OF_FINE[int(y)],
        )
        for y in labels
      ]
    rows[split] = clients
  return write_tff_sqlite(os.path.join(data_dir, 'cifar100.sqlite'), rows)


# ------------------------------------------------------------------------------ count archives


def _write_tar_bz2(path: str, member: str, payload: bytes) -> str:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with tarfile.open(path, 'w:bz2') as tar:
    info = tarfile.TarInfo(member)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))
  return path


def write_word_counts_archive(path: str, word_counts: Mapping[str, int]) -> str:
  """A stackoverflow.word_count.tar.bz2: member 'stackoverflow.word_count', 'word count' lines
  in the given order."""
  text = ''.join(f'{w} {c}\n' for w, c in word_counts.items())
  return _write_tar_bz2(path, 'stackoverflow.word_count', text.encode('utf-8'))


def write_tag_counts_archive(path: str, tag_counts: Mapping[str, int]) -> str:
  """A stackoverflow.tag_count.tar.bz2: member 'stackoverflow.tag_count', a JSON object."""
  return _write_tar_bz2(
    path, 'stackoverflow.tag_count', json.dumps(dict(tag_counts)).encode('utf-8')
  )


def write_stackoverflow_counts(data_dir: str) -> tuple[str, str]:
  """Both count archives for the fixture vocabulary: word k of `SO_WORDS` has count 1000 - k,
  tag k of `SO_TAGS` has count 500 - 7 * k, written in a shuffled order (TFF sorts tags)."""
  words = collections.OrderedDict((w, 1000 - k) for k, w in enumerate(SO_WORDS))
  tags = {t: 500 - 7 * k for k, t in enumerate(SO_TAGS)}
  order = np.random.default_rng(0).permutation(len(SO_TAGS))
  shuffled = collections.OrderedDict((SO_TAGS[i], tags[SO_TAGS[i]]) for i in order)
  return (
    write_word_counts_archive(os.path.join(data_dir, 'stackoverflow.word_count.tar.bz2'), words),
    write_tag_counts_archive(os.path.join(data_dir, 'stackoverflow.tag_count.tar.bz2'), shuffled),
  )


# ------------------------------------------------------------------------------ damaged files


def truncate_file(path: str, keep_fraction: float = 0.5) -> int:
  """Cuts `path` to `keep_fraction` of its size (as an interrupted copy would); returns bytes
  kept."""
  size = int(os.path.getsize(path) * keep_fraction)
  with open(path, 'r+b') as f:
    f.truncate(size)
  return size


def write_wrong_schema(path: str) -> str:
  """A valid SQLite file whose `examples` table lacks `serialized_example_proto`."""
  con, tmp = _connect_new(path)
  con.execute('DROP TABLE examples;')
  con.execute('CREATE TABLE examples (split_name TEXT, client_id TEXT, data BLOB);')
  con.execute("INSERT INTO examples VALUES ('train', 'x', x'00');")
  return _finish(con, tmp, path, indexes=False)


def add_empty_client(path: str, split: str, client_id: str) -> None:
  """Registers `client_id` in `split` of client_metadata with no example rows."""
  with sqlite3.connect(path) as con:
    con.execute('INSERT INTO client_metadata VALUES (?, ?, 0);', (client_id, split))
  con.close()


def iter_rows(path: str) -> Iterable[tuple[str, str, bytes]]:
  """All (split, client, proto) rows of a file, for tests."""
  con = sqlite3.connect(path)
  try:
    yield from con.execute(
      'SELECT split_name, client_id, serialized_example_proto FROM examples ORDER BY rowid'
    )
  finally:
    con.close()


def write_all(data_dir: str, seed: int = 0) -> str:
  """All four TFF SQLite fixtures (default sizes) and both StackOverflow count archives in
  `data_dir`; returns `data_dir`."""
  write_emnist(data_dir, seed=seed)
  write_shakespeare(data_dir, seed=seed)
  write_stackoverflow(data_dir, seed=seed)
  write_cifar100(data_dir, seed=seed)
  write_stackoverflow_counts(data_dir)
  return data_dir
