"""TFF's federated EMNIST-62, Shakespeare, StackOverflow and CIFAR-100 from local SQLite files.

These are the federated benchmarks of Reddi et al., "Adaptive Federated Optimization", ICLR 2021
(App. C), as TensorFlow Federated publishes them: one SQLite file per dataset with the tables
``examples(split_name, client_id, serialized_example_proto)`` and ``client_metadata(client_id,
split_name, num_examples)``, each example a serialized ``tf.train.Example``. The files are read
through ``tff.simulation.datasets.<name>.load_data(cache_dir=data_dir)``, which opens
``<data_dir>/<file>.sqlite`` without any network access when that file exists (and would download
it otherwise, so ``load_federated`` checks for it first and never lets TFF try).

The splits are lazy ``Mapping[client_id, OrderedDict[feature, np.ndarray]]`` views: the client
ids are read once (TFF's ``SqlClientData``), ``len`` and ``in`` are O(1), and ``clients[cid]``
runs one indexed SQL query for that client and parses its examples (a TF graph traced once per
split, so no per-client graph building and no memory growth). The arrays are TFF's raw features,
batched: e.g. EMNIST ``label`` int32 [n], ``pixels`` float32 [n, 28, 28]. ``MappedClients`` puts
a task's preprocessing on top, lazily too.

Errors are one line: a missing file raises ``DataNotFoundError`` with the path and the fetch
command (``python -m tff_adaptive.datasets.fetch``); a truncated or non-SQLite file, a wrong schema, a missing
split, an unparsable or empty client raise ``DataFormatError`` naming the file (and client).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import logging
import os
import pathlib
import sqlite3
from typing import Any

import numpy as np

from tff_adaptive import commands
from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError

__all__ = [
  'FederatedSplits',
  'MappedClients',
  'SQLITE_FILES',
  'SqlClients',
  'check_sqlite_file',
  'fetch_command',
  'load_federated',
  'sqlite_path',
]

ClientArrays = collections.OrderedDict  # feature name -> np.ndarray [examples, ...]


@dataclasses.dataclass(frozen=True)
class _Spec:
  filename: str
  description: str
  splits: tuple[str, ...]  # TFF split names in the order load_data returns them
  names: tuple[str, ...]  # our split names, same order


_SPECS = {
  'emnist': _Spec('emnist_all.sqlite', 'EMNIST-62', ('all_train', 'all_test'), ('train', 'test')),
  'shakespeare': _Spec('shakespeare.sqlite', 'Shakespeare', ('train', 'test'), ('train', 'test')),
  'stackoverflow': _Spec(
    'stackoverflow.sqlite',
    'StackOverflow',
    ('train', 'heldout', 'test'),
    ('train', 'heldout', 'test'),
  ),
  'cifar100': _Spec('cifar100.sqlite', 'CIFAR-100', ('train', 'test'), ('train', 'test')),
}
SQLITE_FILES = {name: spec.filename for name, spec in _SPECS.items()}

_EXAMPLES_COLUMNS = ('split_name', 'client_id', 'serialized_example_proto')
_METADATA_COLUMNS = ('client_id', 'split_name', 'num_examples')
_SQLITE_MAGIC = b'SQLite format 3\x00'
_LOG = logging.getLogger(__name__)


def _check_dataset(dataset: str) -> _Spec:
  if dataset not in _SPECS:
    raise ValueError(f'dataset must be one of {", ".join(_SPECS)}, got {dataset!r}')
  return _SPECS[dataset]


def sqlite_path(dataset: str, data_dir: str) -> str:
  """The absolute path TFF's loader opens for `dataset` with cache_dir=data_dir."""
  return os.path.join(os.path.abspath(data_dir), _check_dataset(dataset).filename)


def fetch_command(dataset: str, data_dir: str) -> str:
  """The command that downloads `dataset` into `data_dir` (on a connected machine)."""
  return f'{commands.command("fetch")} --data_dir={os.path.abspath(data_dir)} --dataset={dataset}'


# --------------------------------------------------------------------------------- validation


def _check_header(path: str) -> None:
  """SQLite magic and, from the header's page count, that the file is not truncated."""
  try:
    size = os.path.getsize(path)
    with open(path, 'rb') as f:
      header = f.read(100)
  except OSError as e:
    raise DataFormatError(f'{path} cannot be read: {e.strerror}') from None
  if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
    raise DataFormatError(f'{path} is not an SQLite database (bad header; {size} bytes)')
  page_size = int.from_bytes(header[16:18], 'big')
  page_size = 65536 if page_size == 1 else page_size
  change_counter = int.from_bytes(header[24:28], 'big')
  pages = int.from_bytes(header[28:32], 'big')
  valid_for = int.from_bytes(header[92:96], 'big')
  if pages and valid_for == change_counter:
    expected = pages * page_size
    if size < expected:
      raise DataFormatError(
        f'{path} is truncated: {size} bytes, its header says {expected} '
        '(an interrupted download or copy?); fetch it again'
      )
  elif page_size and size % page_size:
    raise DataFormatError(
      f'{path} is truncated: {size} bytes is not a whole number of '
      f'{page_size}-byte pages; fetch it again'
    )


def _connect_read_only(path: str) -> sqlite3.Connection:
  return sqlite3.connect(pathlib.Path(path).resolve().as_uri() + '?mode=ro', uri=True)


def check_sqlite_file(path: str, splits: Sequence[str] = (), integrity: bool = False) -> None:
  """Checks that `path` is a TFF SqlClientData file, cheaply (no scan unless `integrity`).

  Checks: SQLite header and size, the `examples` and `client_metadata` tables and columns,
  one readable example row, a client in each of `splits`. With `integrity`, also SQLite's
  `PRAGMA quick_check` (reads the whole file; for freshly downloaded files). Warns when
  `examples` has no index starting with client_id, which makes every client load a full scan.

  Raises:
    DataNotFoundError: `path` does not exist.
    DataFormatError: any check fails; the message names `path`.
  """
  if not os.path.isfile(path):
    raise DataNotFoundError(f'{path} does not exist')
  _check_header(path)
  try:
    con = _connect_read_only(path)
    try:
      tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
      for table, columns in (
        ('examples', _EXAMPLES_COLUMNS),
        ('client_metadata', _METADATA_COLUMNS),
      ):
        if table not in tables:
          raise DataFormatError(
            f'{path} is not a TFF SQLite dataset: no table {table!r} '
            f'(tables: {", ".join(sorted(tables)) or "none"})'
          )
        have = {r[1] for r in con.execute(f'PRAGMA table_info({table})')}
        missing = [c for c in columns if c not in have]
        if missing:
          raise DataFormatError(
            f'{path} is not a TFF SQLite dataset: table {table!r} lacks column(s) '
            f'{", ".join(missing)} (has {", ".join(sorted(have))})'
          )
      con.execute('SELECT serialized_example_proto FROM examples LIMIT 1').fetchall()
      for split in splits:
        if not con.execute(
          'SELECT 1 FROM client_metadata WHERE split_name = ? LIMIT 1', (split,)
        ).fetchall():
          raise DataFormatError(f'{path} has no clients in split {split!r}')
      if not _has_client_index(con):
        _LOG.warning(
          '%s has no index on examples(client_id): every client load scans the whole file', path
        )
      if integrity:
        result = con.execute('PRAGMA quick_check').fetchall()
        if result != [('ok',)]:
          raise DataFormatError(f'{path} is corrupt: SQLite quick_check says {result[0][0]!r}')
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise DataFormatError(f'{path} is not a valid SQLite database: {e}') from None


def _has_client_index(con: sqlite3.Connection) -> bool:
  for index in con.execute('PRAGMA index_list(examples)').fetchall():
    columns = [r[2] for r in con.execute(f'PRAGMA index_info({index[1]!r})')]
    if columns[:1] == ['client_id'] or columns[:2] == ['split_name', 'client_id']:
      return True
  return False


# --------------------------------------------------------------------------------- lazy views


class SqlClients(Mapping):
  """One split of a TFF SQLite dataset as a lazy Mapping client id -> raw feature arrays.

  Wraps a `tff.simulation.datasets.ClientData` returned by TFF's `load_data`. Client ids are
  TFF's (sorted). `self[cid]` materialises that client only; nothing is cached.
  """

  def __init__(self, client_data: Any, path: str, dataset: str, split: str):
    self._client_data = client_data
    self._path = path
    self._dataset = dataset
    self._split = split
    self._ids = list(client_data.client_ids)
    self._id_set = frozenset(self._ids)
    self._load_fn = None

  @property
  def client_data(self) -> Any:
    """The underlying tff.simulation.datasets.ClientData."""
    return self._client_data

  @property
  def client_ids(self) -> list[str]:
    return self._ids

  @property
  def split(self) -> str:
    return self._split

  def __len__(self) -> int:
    return len(self._ids)

  def __iter__(self) -> Iterator[str]:
    return iter(self._ids)

  def __contains__(self, client_id: object) -> bool:
    return client_id in self._id_set

  __eq__ = object.__eq__
  __hash__ = object.__hash__

  def __repr__(self) -> str:
    return f'SqlClients({self._path!r}, split={self._split!r}, clients={len(self)})'

  def _loader(self) -> Callable[[Any], Any]:
    # One traced graph per split: TFF's serializable dataset (SQL query + proto parsing)
    # for a client id tensor, all examples batched into one element. Building a new
    # tf.data pipeline per client in eager mode costs ~50 ms and leaks ~0.1 MB per call.
    # (TFF's create_tf_dataset_for_client also checks membership in a list, O(population);
    # membership is checked here with a set instead.)
    if self._load_fn is None:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top

      dataset_fn = self._client_data.serializable_dataset_fn

      @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
      def load(client_id):
        return dataset_fn(client_id).batch(2**31 - 1).get_single_element()

      self._load_fn = load
    return self._load_fn

  def __getitem__(self, client_id: str) -> ClientArrays:
    if client_id not in self._id_set:
      raise KeyError(client_id)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    try:
      element = self._loader()(tf.constant(client_id))
    except tf.errors.OpError as e:
      raise self._diagnose(client_id, e) from None
    except UnicodeDecodeError as e:
      # TF fails to decode its own error message when it quotes the stored (binary) bytes.
      raise DataFormatError(
        f'{self.describe(client_id)}: its stored examples are not serialized tf.train.Example '
        f'protos ({e.reason} at byte {e.start} of an error message quoting them)'
      ) from None
    return collections.OrderedDict((k, v.numpy()) for k, v in element.items())

  def describe(self, client_id: str) -> str:
    """'client <id> of split <split> in <file>', for error messages."""
    return f'client {client_id!r} of split {self._split!r} in {self._path}'

  def _diagnose(self, client_id: str, error: Exception) -> DataFormatError:
    where = self.describe(client_id)
    try:
      con = _connect_read_only(self._path)
      try:
        (count,) = con.execute(
          'SELECT COUNT(*) FROM examples WHERE client_id = ? AND split_name = ?',
          (client_id, self._split),
        ).fetchone()
      finally:
        con.close()
    except sqlite3.DatabaseError as e:
      return DataFormatError(f'{where} cannot be read: {e}')
    if count == 0:
      return DataFormatError(f'{where} has no examples (client_metadata lists it)')
    if type(error).__name__ == 'InvalidArgumentError':
      return DataFormatError(
        f"{where}: its examples do not parse as TFF's "
        f'{self._dataset} features: {_op_error_text(error)}'
      )
    return DataFormatError(f'{where} cannot be read: {_op_error_text(error)}')


def _op_error_text(error: Exception) -> str:
  """The one informative line of a TF op error (not 'Graph execution error', stacks, nodes)."""
  lines = [line.strip() for line in (getattr(error, 'message', '') or str(error)).splitlines()]
  useful = [
    line
    for line in lines
    if line
    and not line.startswith(
      ('Graph execution error', 'Detected at node', 'File "', '<stack traces', '[[')
    )
  ]
  text = (useful or lines or [type(error).__name__])[0]
  return text.split(' [Op:')[0].split('\t [[')[0].strip()


class MappedClients(Mapping):
  """A lazy Mapping applying `fn` to each client's arrays of `clients` on access.

  Args:
    clients: client id -> raw arrays (e.g. a `SqlClients`).
    fn: raw OrderedDict -> model OrderedDict; with `pass_client_id`, fn(client_id, raw).
    pass_client_id: call fn with the client id first (for per-client seeding).
  """

  def __init__(
    self,
    clients: Mapping[str, Mapping[str, np.ndarray]],
    fn: Callable[..., Mapping[str, np.ndarray]],
    pass_client_id: bool = False,
  ):
    self._clients = clients
    self._fn = fn
    self._pass_client_id = pass_client_id

  def __len__(self) -> int:
    return len(self._clients)

  def __iter__(self) -> Iterator[str]:
    return iter(self._clients)

  def __contains__(self, client_id: object) -> bool:
    return client_id in self._clients

  __eq__ = object.__eq__
  __hash__ = object.__hash__

  def __getitem__(self, client_id: str) -> ClientArrays:
    raw = self._clients[client_id]
    try:
      out = self._fn(client_id, raw) if self._pass_client_id else self._fn(raw)
    except (ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError) as e:
      # The stored examples parsed but their values do not make model inputs (e.g. bytes
      # that are not UTF-8 text, labels out of range): name the client and its file.
      describe = getattr(self._clients, 'describe', None)
      where = describe(client_id) if describe else f'client {client_id!r}'
      text = str(e).strip().splitlines()
      raise DataFormatError(
        f'{where}: its examples do not make model inputs ({type(e).__name__}: '
        f'{text[0] if text else ""})'
      ) from None
    return collections.OrderedDict(out)

  def __repr__(self) -> str:
    return f'MappedClients({self._clients!r}, {getattr(self._fn, "__name__", self._fn)})'


@dataclasses.dataclass(frozen=True)
class FederatedSplits:
  """The splits of one TFF dataset. heldout: StackOverflow's held-out users, else None."""

  dataset: str
  path: str
  train: SqlClients
  test: SqlClients
  heldout: SqlClients | None = None


def _tff_load(dataset: str, data_dir: str) -> tuple[Any, ...]:
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  datasets = tff.simulation.datasets
  if dataset == 'emnist':
    return datasets.emnist.load_data(only_digits=False, cache_dir=data_dir)
  return getattr(datasets, dataset).load_data(cache_dir=data_dir)


def load_federated(dataset: str, data_dir: str) -> FederatedSplits:
  """Opens TFF's `dataset` SQLite file in `data_dir` (never downloads).

  Args:
    dataset: 'emnist' (EMNIST-62, emnist_all.sqlite), 'shakespeare', 'stackoverflow' or
      'cifar100' (<name>.sqlite).
    data_dir: the directory holding the file (TFF's cache_dir).

  Returns:
    FederatedSplits whose train/test (and StackOverflow heldout) are lazy SqlClients.

  Raises:
    ValueError: unknown dataset.
    DataNotFoundError: the file is missing (message: its path and the fetch command).
    DataFormatError: the file is truncated, not SQLite, or not in TFF's schema/splits.
  """
  spec = _check_dataset(dataset)
  data_dir = os.path.abspath(data_dir)
  path = os.path.join(data_dir, spec.filename)
  if not os.path.isfile(path):
    raise DataNotFoundError(
      f"{path} not found (TFF's {spec.description} file); fetch it on a connected "
      f'machine with: {fetch_command(dataset, data_dir)}'
    )
  check_sqlite_file(path, spec.splits)
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_federated.python.simulation.datasets import sql_client_data

  try:
    loaded = _tff_load(dataset, data_dir)
  except (sqlite3.DatabaseError, sql_client_data.DatabaseFormatError) as e:
    raise DataFormatError(f'{path} cannot be opened by TFF: {e}') from None
  splits = {
    name: SqlClients(cd, path, dataset, split)
    for name, split, cd in zip(spec.names, spec.splits, loaded)
  }
  return FederatedSplits(dataset=dataset, path=path, **splits)
