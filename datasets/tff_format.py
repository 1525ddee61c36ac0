"""Writers of federated data in TFF's SQLite format (what `load_federated` and TFF read).

TensorFlow Federated stores a federated dataset as one SQLite file with two tables::

    examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)  -- one per example
    client_metadata(client_id TEXT, split_name TEXT, num_examples INTEGER)    -- one row per client

each example a serialized ``tf.train.Example``. This is exactly what
``tff.simulation.datasets.save_to_sql_client_data`` writes and what
``tff.simulation.datasets.load_and_parse_sql_client_data`` (``SqlClientData``), TFF's published
``emnist_all.sqlite``/``shakespeare.sqlite``/``stackoverflow.sqlite``/``cifar100.sqlite`` and
this library's ``datasets.load_federated`` read. Features are encoded as
``save_to_sql_client_data`` encodes them: strings as one bytes value, floats as a flattened
float_list, integers as a flattened int64_list. Written files also get the indexes of TFF's
published files (``examples(client_id)``, ``examples(split_name, client_id)``,
``client_metadata(client_id)``; ``save_to_sql_client_data`` writes none), which make reading one
client an indexed query. Unlike ``save_to_sql_client_data``, the writers here take serialized
examples per (split, client), so one client id may be in several splits (as in TFF's own files),
need no ``tf.data`` pipeline, and write 100,000+ clients in seconds.

A user converts their own federated data with `write_tff_sqlite` and the example encoders, e.g.
``write_tff_sqlite(path, {'train': {cid: [emnist_example(x, y) for x, y in data[cid]]}})``.

Functions:

* `serialize_example`: a ``tf.train.Example`` of a feature mapping, encoded as TFF encodes it.
* `emnist_example`, `shakespeare_example`, `stackoverflow_example`, `cifar100_example`: one
  example with the features that dataset's parser in ``tff.simulation.datasets.<name>`` (and
  ``load_federated``) reads.
* `write_tff_sqlite`: a file of split -> client id -> serialized examples.
* `write_emnist_scale`: a synthetic EMNIST-shaped ``emnist_all.sqlite`` of any population size
  (for benchmarks; not real data).

TensorFlow is imported on the first serialization, not with this module.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from collections.abc import Sequence
import os
import sqlite3

import numpy as np

__all__ = [
  'SplitRows',
  'cifar100_example',
  'emnist_example',
  'serialize_example',
  'shakespeare_example',
  'stackoverflow_example',
  'write_emnist_scale',
  'write_tff_sqlite',
]

# split -> client id -> that client's serialized tf.train.Example protos, in order.
SplitRows = Mapping[str, Mapping[str, Sequence[bytes]]]

_SCHEMA = (
  'CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, '
  'serialized_example_proto BLOB NOT NULL);',
  'CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT NULL, '
  'num_examples INTEGER NOT NULL);',
)
_INDEXES = (
  'CREATE INDEX idx_examples_client_id ON examples (client_id);',
  'CREATE INDEX idx_examples_client_id_split ON examples (split_name, client_id);',
  'CREATE INDEX idx_metadata_client_id ON client_metadata (client_id);',
)


# ------------------------------------------------------------------------------ serialization


def serialize_example(features: Mapping[str, object]) -> bytes:
  """A tf.train.Example of `features`, encoded as TFF's save_to_sql_client_data encodes them.

  Args:
    features: feature name -> value. bytes/str -> one bytes value; float arrays (or floats) ->
      flattened float_list (float32); integer arrays (or ints) -> flattened int64_list.

  Returns:
    The serialized ``tf.train.Example``.

  Raises:
    ValueError: a value of another dtype (e.g. bool), which TFF's serializer rejects too.
  """
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow.core.example import feature_pb2  # pylint: disable=g-import-not-at-top

  feature = {}
  for key, value in features.items():
    if isinstance(value, str):
      value = value.encode('utf-8')
    if isinstance(value, bytes):
      feature[key] = feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[value]))
      continue
    array = np.asarray(value)
    if np.issubdtype(array.dtype, np.floating):
      feature[key] = feature_pb2.Feature(
        float_list=feature_pb2.FloatList(value=array.astype(np.float32).ravel().tolist())
      )
    elif np.issubdtype(array.dtype, np.integer):
      feature[key] = feature_pb2.Feature(
        int64_list=feature_pb2.Int64List(value=array.astype(np.int64).ravel().tolist())
      )
    else:
      raise ValueError(f'feature {key!r}: unsupported dtype {array.dtype}')
  return example_pb2.Example(features=feature_pb2.Features(feature=feature)).SerializeToString()


def emnist_example(pixels: np.ndarray, label: int) -> bytes:
  """One EMNIST example (splits ``all_train``/``all_test`` of ``emnist_all.sqlite``).

  Args:
    pixels: float [28, 28] (or 784 values) in [0, 1].
    label: class in 0..61 (EMNIST-62: digits, upper case, lower case).

  Returns:
    The example with ``pixels`` float_list of 28*28 and ``label`` int64.
  """
  return serialize_example(
    {'pixels': np.asarray(pixels, np.float32).reshape(28, 28), 'label': np.int64(label)}
  )


def shakespeare_example(snippet: str | bytes) -> bytes:
  """One Shakespeare example (splits ``train``/``test`` of ``shakespeare.sqlite``).

  Args:
    snippet: a line of the client's (character's) text.

  Returns:
    The example with ``snippets`` bytes (UTF-8).
  """
  return serialize_example({'snippets': snippet})


def stackoverflow_example(
  tokens: str, title: str, tags: str, creation_date: str, score: int, type_: str
) -> bytes:
  """One StackOverflow example (splits ``train``/``heldout``/``test`` of ``stackoverflow.sqlite``).

  Args:
    tokens: the post's space-separated tokens.
    title: the question's title (space-separated tokens).
    tags: the question's tags, '|'-separated.
    creation_date: e.g. '2010-01-08 09:34:05 UTC'.
    score: the post's score.
    type_: 'question' or 'answer'.

  Returns:
    The example with ``creation_date``, ``tags``, ``title``, ``tokens``, ``type`` bytes and
    ``score`` int64.
  """
  return serialize_example(
    collections.OrderedDict(
      creation_date=creation_date,
      score=np.int64(score),
      tags=tags,
      title=title,
      tokens=tokens,
      type=type_,
    )
  )


def cifar100_example(image: np.ndarray, label: int, coarse_label: int) -> bytes:
  """One CIFAR-100 example (splits ``train``/``test`` of ``cifar100.sqlite``).

  Args:
    image: uint8 [32, 32, 3] (values 0..255).
    label: fine label in 0..99.
    coarse_label: that label's superclass in 0..19.

  Returns:
    The example with ``image`` int64_list of 32*32*3, ``label`` and ``coarse_label`` int64.
  """
  return serialize_example(
    {
      'image': np.asarray(image, np.uint8).reshape(32, 32, 3).astype(np.int64),
      'label': np.int64(label),
      'coarse_label': np.int64(coarse_label),
    }
  )


# ------------------------------------------------------------------------------ SQLite writers


def _connect_new(path: str) -> tuple[sqlite3.Connection, str]:
  """A new file next to `path` with TFF's two tables (no indexes yet), and its path."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + '.partial'
  if os.path.exists(tmp):
    os.remove(tmp)
  con = sqlite3.connect(tmp)
  con.execute('PRAGMA journal_mode=OFF;')
  con.execute('PRAGMA synchronous=OFF;')
  for q in _SCHEMA:
    con.execute(q)
  return con, tmp


def _finish(con: sqlite3.Connection, tmp: str, path: str, indexes: bool) -> str:
  """Indexes (if `indexes`), commits and closes `con`, and moves `tmp` to `path`."""
  if indexes:
    for q in _INDEXES:
      con.execute(q)
  con.commit()
  con.close()
  os.replace(tmp, path)
  return path


def _discard(con: sqlite3.Connection, tmp: str) -> None:
  """Closes `con` and removes its unfinished file `tmp`."""
  con.close()
  if os.path.exists(tmp):
    os.remove(tmp)


def _check_proto(split: str, client_id: str, proto: bytes) -> bytes:
  if not isinstance(proto, bytes):
    raise TypeError(
      f'split {split!r}, client {client_id!r}: expected serialized tf.train.Example bytes, got '
      f'{type(proto).__name__}'
    )
  return proto


def write_tff_sqlite(path: str, rows: SplitRows, indexes: bool = True) -> str:
  """Writes `rows` as a TFF SqlClientData file at `path`, replacing it.

  The file is written next to `path` and moved there when complete, so an interrupted write
  leaves no partial file at `path`.

  Args:
    path: the SQLite file to write, e.g. ``<data_dir>/emnist_all.sqlite``.
    rows: split -> client id -> that client's serialized examples (e.g. from `emnist_example`).
      Every (split, client) gets a client_metadata row with its example count, also a client
      with no examples; a client id may be in several splits.
    indexes: whether to add the indexes of TFF's published files.

  Returns:
    `path`.

  Raises:
    TypeError: an example that is not bytes.
  """
  con, tmp = _connect_new(path)
  try:
    for split, clients in rows.items():
      for client_id, protos in clients.items():
        con.executemany(
          'INSERT INTO examples (split_name, client_id, serialized_example_proto) '
          'VALUES (?, ?, ?);',
          ((split, client_id, _check_proto(split, client_id, p)) for p in protos),
        )
        con.execute(
          'INSERT INTO client_metadata (client_id, split_name, num_examples) VALUES (?, ?, ?);',
          (client_id, split, len(protos)),
        )
  except BaseException:
    _discard(con, tmp)
    raise
  return _finish(con, tmp, path, indexes)


# ------------------------------------------------------------------------------ synthetic data


def write_emnist_scale(
  data_dir: str,
  num_clients: int,
  examples_per_client: int = 2,
  test_clients: int = 10,
  seed: int = 0,
) -> str:
  """Writes a synthetic EMNIST-shaped ``emnist_all.sqlite`` of `num_clients` clients, quickly.

  Synthetic data for benchmarks of the data path at real population sizes (e.g. TFF's 3,400
  EMNIST writers or StackOverflow's 342,477 users), not for training: one random 28x28 image
  (seeded by `seed`) serialized once per label and reused. Client k ('c0000000', ...) has
  `examples_per_client` examples in ``all_train`` with labels (k + j) % 62; the first
  `test_clients` clients also have one ``all_test`` example. 100,000 clients x 2 examples take
  about 10 s and 700 MB.

  Args:
    data_dir: the directory to write ``emnist_all.sqlite`` into (replacing it).
    num_clients: training clients.
    examples_per_client: training examples per client.
    test_clients: how many of the clients also have a test example.
    seed: seed of the image's pixels.

  Returns:
    The path of the written file.
  """
  rng = np.random.default_rng(seed)
  pixels = rng.random((28, 28), dtype=np.float32)
  protos = [emnist_example(pixels, label) for label in range(62)]
  ids = [f'c{k:07d}' for k in range(num_clients)]
  path = os.path.join(data_dir, 'emnist_all.sqlite')
  con, tmp = _connect_new(path)
  try:
    con.executemany(
      'INSERT INTO examples VALUES (?, ?, ?);',
      (
        ('all_train', ids[k], protos[(k + j) % 62])
        for k in range(num_clients)
        for j in range(examples_per_client)
      ),
    )
    con.executemany(
      'INSERT INTO client_metadata VALUES (?, ?, ?);',
      ((cid, 'all_train', examples_per_client) for cid in ids),
    )
    test_ids = ids[:test_clients]
    con.executemany(
      'INSERT INTO examples VALUES (?, ?, ?);',
      (('all_test', cid, protos[k % 62]) for k, cid in enumerate(test_ids)),
    )
    con.executemany(
      'INSERT INTO client_metadata VALUES (?, ?, ?);', ((cid, 'all_test', 1) for cid in test_ids)
    )
  except BaseException:
    _discard(con, tmp)
    raise
  return _finish(con, tmp, path, indexes=True)
