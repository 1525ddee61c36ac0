"""Small federated data files in exactly TFF's on-disk formats, for the test suite.

TFF publishes its federated datasets as SQLite files (``emnist_all.sqlite``, ``shakespeare.sqlite``,
``stackoverflow.sqlite``, ``cifar100.sqlite``); the format and its writers (`write_tff_sqlite`, the
per-dataset example encoders, `serialize_example`, and the synthetic `write_emnist_scale`) are
library code in ``datasets/tff_format.py``, and the random clients of each dataset
(`write_emnist`, `write_shakespeare`, `write_stackoverflow`, `write_cifar100`) and the
StackOverflow count archives are ``datasets/samples.py`` (the users' sample-file command); all
are re-exported here under their old names. This module adds `write_all` (every file at the
writers' small default sizes) and damaged files (`truncate_file`, `write_wrong_schema`,
`add_empty_client`).

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

from collections.abc import Iterable
import os
import sqlite3

from tff_adaptive.datasets.samples import CIFAR100_COARSE_OF_FINE
from tff_adaptive.datasets.samples import EMNIST_SPLITS
from tff_adaptive.datasets.samples import SO_TAGS
from tff_adaptive.datasets.samples import SO_WORDS
from tff_adaptive.datasets.samples import write_cifar100
from tff_adaptive.datasets.samples import write_emnist
from tff_adaptive.datasets.samples import write_shakespeare
from tff_adaptive.datasets.samples import write_stackoverflow
from tff_adaptive.datasets.samples import write_stackoverflow_counts
from tff_adaptive.datasets.samples import write_tag_counts_archive
from tff_adaptive.datasets.samples import write_word_counts_archive
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
