"""Small federated data files in exactly TFF's formats: the way to try the big tasks offline.

    tff-adaptive samples --data_dir=DIR       # .venv/bin/tff-adaptive in a checkout
    tff-adaptive train --task=so_lr --data_dir=DIR --total_rounds=3

writes, in DIR, random stand-ins for the files TFF publishes (`emnist_all.sqlite`,
`shakespeare.sqlite`, `stackoverflow.sqlite`, `cifar100.sqlite`, StackOverflow's
`stackoverflow.word_count.tar.bz2` and `stackoverflow.tag_count.tar.bz2`), with enough clients
for every task's published clients per round: emnist_cr, emnist_ae, shakespeare, so_nwp, so_lr
and cifar100 then run with their defaults. The numbers they give mean nothing; they show that
the pipeline runs, how fast a round is, and what a run writes. fmnist reads the Debian package
(`apt-get install dataset-fashion-mnist`), synthetic generates its data, and cifar10 needs the
tfds-prepared dataset (`tfds build cifar10`).

The writers are the test suite's fixtures too (tests/fixtures.py), at smaller default sizes.
Formats: see `tff_format` (TFF's SQLite layout and each dataset's example features) and
`stackoverflow_counts` (the count archives).
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Mapping
from collections.abc import Sequence
import io
import json
import os
import sys
import tarfile

import numpy as np

from tff_adaptive import commands
from tff_adaptive.datasets.tff_format import cifar100_example
from tff_adaptive.datasets.tff_format import emnist_example
from tff_adaptive.datasets.tff_format import shakespeare_example
from tff_adaptive.datasets.tff_format import stackoverflow_example
from tff_adaptive.datasets.tff_format import write_tff_sqlite

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


# ------------------------------------------------------------------------------ all, and the CLI


def write_samples(data_dir: str, seed: int = 0) -> list[str]:
  """Sample files for every TFF-format task in `data_dir` (created); returns their paths.

  Sized so that each task's published clients per round fit (so_nwp samples 50 StackOverflow
  users a round), with a few batches per client.
  """
  os.makedirs(data_dir, exist_ok=True)
  return [
    write_emnist(
      data_dir, num_clients=20, train_examples=(20, 60), test_examples=(5, 10), seed=seed
    ),
    write_shakespeare(
      data_dir, num_clients=12, train_examples=(5, 12), test_examples=(2, 4), seed=seed
    ),
    write_stackoverflow(
      data_dir,
      num_clients=60,
      train_examples=(10, 40),
      test_clients=20,
      heldout_clients=10,
      other_examples=(2, 6),
      seed=seed,
    ),
    write_cifar100(
      data_dir,
      num_train_clients=20,
      num_test_clients=10,
      train_examples=(20, 40),
      test_examples=(5, 10),
      seed=seed,
    ),
    *write_stackoverflow_counts(data_dir),
  ]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog=commands.command('samples'),
    description="Write small random files in TFF's formats for the tasks emnist_cr, emnist_ae, "
    f'shakespeare, so_nwp, so_lr and cifar100 (then: {commands.command("train")} '
    '--task=so_lr --data_dir=DIR).',
  )
  parser.add_argument('--data_dir', required=True, help='Directory to write the files to.')
  parser.add_argument('--seed', type=int, default=0, help='Seed of the random contents.')
  args = parser.parse_args(argv)
  try:
    paths = write_samples(args.data_dir, args.seed)
  except OSError as e:
    print(f'samples: error: cannot write to {args.data_dir}: {e.strerror}', file=sys.stderr)
    return 2
  for path in paths:
    print(f'wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)')
  print(
    f'try: {commands.command("train")} --task=so_lr --data_dir={os.path.abspath(args.data_dir)} '
    '--total_rounds=3 (the numbers are meaningless: random data)'
  )
  return 0


if __name__ == '__main__':
  sys.exit(main())
