"""Tests of datasets.tff_sqlite, datasets.stackoverflow_counts and datasets.fetch on fixtures.

The fixture files (tests/fixtures.py) are in TFF's exact SQLite format; each loader's arrays are
compared with TFF's own `load_data(cache_dir=...)` and with an independent protobuf decoding of
the rows. Downloads are tested against a local HTTP server on 127.0.0.1 and file:// URLs.
"""

import collections
import functools
import http.server
import inspect
import lzma
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.example import example_pb2
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.datasets import sql_client_data_utils

from tests import fixtures
from tff_adaptive import commands
from tff_adaptive import datasets
from tff_adaptive.datasets import fetch as fetch_lib
from tff_adaptive.datasets import tff_sqlite

DATASETS = ('emnist', 'shakespeare', 'stackoverflow', 'cifar100')
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return fixtures.write_all(str(tmp_path_factory.mktemp('tff_sqlite')))


def _tff_load(name, data_dir):
  if name == 'emnist':
    return tff.simulation.datasets.emnist.load_data(only_digits=False, cache_dir=data_dir)
  return getattr(tff.simulation.datasets, name).load_data(cache_dir=data_dir)


def _tff_client_arrays(client_data, client_id):
  """TFF's examples one by one, stacked (strings as an object array, as TF batches them)."""
  elements = list(client_data.create_tf_dataset_for_client(client_id))
  return collections.OrderedDict(
    (
      k,
      np.array(
        [e[k].numpy() for e in elements],
        dtype=object if elements[0][k].dtype == tf.string else None,
      ),
    )
    for k in elements[0]
  )


def _proto_rows(path, split, client_id):
  con = sqlite3.connect(path)
  rows = con.execute(
    'SELECT serialized_example_proto FROM examples WHERE split_name = ? AND '
    'client_id = ? ORDER BY rowid',
    (split, client_id),
  ).fetchall()
  con.close()
  return [example_pb2.Example.FromString(r[0]).features.feature for r in rows]


def _copy(data_dir, name, dst_dir):
  os.makedirs(dst_dir, exist_ok=True)
  filename = tff_sqlite.SQLITE_FILES[name]
  shutil.copy(os.path.join(data_dir, filename), os.path.join(dst_dir, filename))
  return os.path.join(dst_dir, filename)


# ------------------------------------------------------------------------ loading = TFF's arrays


@pytest.mark.parametrize('name', DATASETS)
def test_each_split_equals_tff_load_data(data_dir, name):
  ours = datasets.load_federated(name, data_dir)
  theirs = _tff_load(name, data_dir)
  splits = (
    [ours.train, ours.heldout, ours.test] if name == 'stackoverflow' else [ours.train, ours.test]
  )
  assert len(splits) == len(theirs)
  for mine, tffs in zip(splits, theirs):
    assert list(mine.keys()) == tffs.client_ids and len(mine) == len(tffs.client_ids)
    for cid in tffs.client_ids[:2]:
      got, want = mine[cid], _tff_client_arrays(tffs, cid)
      assert list(got) == list(want)
      for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k])


def test_emnist_arrays_match_the_stored_protos(data_dir):
  splits = datasets.load_federated('emnist', data_dir)
  assert (len(splits.train), len(splits.test), splits.heldout) == (4, 4, None)
  cid = 'f0002_02'
  got = splits.train[cid]
  protos = _proto_rows(os.path.join(data_dir, 'emnist_all.sqlite'), 'all_train', cid)
  assert list(got) == ['label', 'pixels']
  assert got['pixels'].dtype == np.float32 and got['pixels'].shape == (len(protos), 28, 28)
  assert got['label'].dtype == np.int32 and 3 <= len(protos) <= 6
  for i, f in enumerate(protos):
    np.testing.assert_array_equal(
      got['pixels'][i].ravel(), np.asarray(f['pixels'].float_list.value, np.float32)
    )
    assert got['label'][i] == f['label'].int64_list.value[0]


def test_string_and_image_features_match_the_stored_protos(data_dir):
  so = datasets.load_federated('stackoverflow', data_dir)
  assert (len(so.train), len(so.heldout), len(so.test)) == (4, 2, 2)
  assert set(so.heldout).isdisjoint(so.train) and set(so.test) <= set(so.train)
  got = so.heldout['00000004']
  protos = _proto_rows(os.path.join(data_dir, 'stackoverflow.sqlite'), 'heldout', '00000004')
  assert list(got) == ['creation_date', 'score', 'tags', 'title', 'tokens', 'type']
  assert got['tokens'].dtype == object and got['score'].dtype == np.int64
  assert list(got['tokens']) == [f['tokens'].bytes_list.value[0] for f in protos]
  assert list(got['score']) == [f['score'].int64_list.value[0] for f in protos]
  cifar = datasets.load_federated('cifar100', data_dir)
  assert list(cifar.train) == ['0', '1', '2'] and list(cifar.test) == ['0', '1']
  img = cifar.test['1']
  protos = _proto_rows(os.path.join(data_dir, 'cifar100.sqlite'), 'test', '1')
  assert img['image'].dtype == np.uint8 and img['image'].shape == (3, 32, 32, 3)
  np.testing.assert_array_equal(img['image'][2].ravel(), protos[2]['image'].int64_list.value)
  np.testing.assert_array_equal(
    img['coarse_label'], [fixtures.CIFAR100_COARSE_OF_FINE[y] for y in img['label']]
  )


def test_fixture_serialization_is_tffs_and_coarse_labels_are_cifars():
  element = collections.OrderedDict(
    pixels=tf.constant(np.linspace(0, 1, 784, dtype=np.float32).reshape(28, 28)),
    label=tf.constant(7, tf.int64),
    snippets=tf.constant(b'to be'),
  )
  spec = collections.OrderedDict((k, tf.TensorSpec.from_tensor(v)) for k, v in element.items())
  serializer = sql_client_data_utils._build_serializer(spec)  # pylint: disable=protected-access
  tff_bytes = serializer(element)
  assert fixtures.serialize_example({k: v.numpy() for k, v in element.items()}) == tff_bytes
  synthetic = tff.simulation.datasets.cifar100.get_synthetic()
  for e in synthetic.create_tf_dataset_for_client(synthetic.client_ids[0]):
    assert fixtures.CIFAR100_COARSE_OF_FINE[int(e['label'])] == int(e['coarse_label'])
  assert np.bincount(fixtures.CIFAR100_COARSE_OF_FINE).tolist() == [5] * 20


def test_fixture_files_have_tffs_tables_and_indexes(data_dir):
  con = sqlite3.connect(os.path.join(data_dir, 'emnist_all.sqlite'))
  names = {r[0] for r in con.execute('SELECT name FROM sqlite_master')}
  assert names == {
    'examples',
    'client_metadata',
    'idx_examples_client_id',
    'idx_examples_client_id_split',
    'idx_metadata_client_id',
  }
  meta = dict(
    con.execute("SELECT client_id || '/' || split_name, num_examples FROM client_metadata")
  )
  counted = dict(
    con.execute(
      "SELECT client_id || '/' || split_name, COUNT(*) FROM examples GROUP BY client_id, split_name"
    )
  )
  con.close()
  assert meta == counted and len(meta) == 8


def test_library_writers_synthetic_scale_and_no_partial_file(tmp_path):
  directory = str(tmp_path / 'scale')
  datasets.write_emnist_scale(directory, 70, examples_per_client=3, test_clients=4)
  splits = datasets.load_federated('emnist', directory)
  assert len(splits.train) == 70 and len(splits.test) == 4
  np.testing.assert_array_equal(splits.train['c0000061']['label'], [61, 0, 1])
  assert os.listdir(directory) == ['emnist_all.sqlite']
  bad = tmp_path / 'bad'
  with pytest.raises(TypeError, match="split 'all_train', client 'a': expected serialized"):
    datasets.write_tff_sqlite(str(bad / 'emnist_all.sqlite'), {'all_train': {'a': ['text']}})
  assert os.listdir(bad) == []


# ------------------------------------------------------------------------ laziness


def test_one_client_is_loaded_without_reading_the_others(tmp_path):
  good = fixtures.emnist_example(np.full((28, 28), 0.5, np.float32), 3)
  rows = {
    'all_train': {f'bad{k:02d}': [b'not a proto'] * 3 for k in range(20)},
    'all_test': {'bad00': [b'not a proto']},
  }
  rows['all_train']['good'] = [good, good]
  fixtures.write_tff_sqlite(str(tmp_path / 'emnist_all.sqlite'), rows)
  splits = datasets.load_federated('emnist', str(tmp_path))  # opening parses nothing
  assert len(splits.train) == 21 and 'good' in splits.train and 'nobody' not in splits.train
  got = splits.train['good']
  np.testing.assert_array_equal(got['label'], [3, 3])
  assert got['pixels'].shape == (2, 28, 28) and float(got['pixels'].mean()) == 0.5
  with pytest.raises(datasets.DataFormatError) as e:
    splits.train['bad07']
  assert str(e.value) == (
    f"client 'bad07' of split 'all_train' in {tmp_path}/emnist_all.sqlite: its examples do "
    "not parse as TFF's emnist features: Could not parse example input, value: 'not a "
    "proto'"
  )
  with pytest.raises(KeyError):
    splits.train['nobody']


def test_client_loads_reuse_one_traced_graph_and_skip_tffs_list_lookup(data_dir, monkeypatch):
  splits = datasets.load_federated('shakespeare', data_dir)
  client_data = splits.train.client_data
  traced, listed = [], []
  dataset_fn = client_data.serializable_dataset_fn
  monkeypatch.setattr(
    type(client_data),
    'serializable_dataset_fn',
    property(lambda self: lambda cid: traced.append(1) or dataset_fn(cid)),
  )
  monkeypatch.setattr(
    type(client_data), 'create_tf_dataset_for_client', lambda self, cid: listed.append(cid)
  )
  sizes = [len(splits.train[cid]['snippets']) for cid in list(splits.train) * 3]
  assert len(sizes) == 9 and all(2 <= n <= 5 for n in sizes)
  assert len(traced) == 1 and listed == []  # traced once for 9 loads; no O(population) lookup


def test_mapped_clients_apply_fn_lazily(data_dir):
  raw = datasets.load_federated('emnist', data_dir).train
  calls = []

  def to_model(arrays):
    calls.append(len(arrays['label']))
    return collections.OrderedDict(x=arrays['pixels'][..., None], y=arrays['label'])

  mapped = datasets.MappedClients(raw, to_model)
  assert len(mapped) == 4 and list(mapped) == list(raw) and 'f0001_01' in mapped
  assert 'f9999_99' not in mapped and calls == []
  got = mapped['f0001_01']
  assert list(got) == ['x', 'y'] and got['x'].shape[1:] == (28, 28, 1)
  assert calls == [len(got['y'])] and mapped != datasets.MappedClients(raw, to_model)
  with_id = datasets.MappedClients(
    raw, lambda cid, a: {'n': np.array([len(cid)])}, pass_client_id=True
  )
  assert with_id['f0003_03']['n'].tolist() == [8]


# ------------------------------------------------------------------------ errors


def test_missing_file_names_path_and_fetch_command(tmp_path):
  missing = tmp_path / 'nothere'
  with pytest.raises(datasets.DataNotFoundError) as e:
    datasets.load_federated('stackoverflow', str(missing))
  msg = str(e.value)
  assert '\n' not in msg
  assert f'{missing}/stackoverflow.sqlite not found' in msg
  assert (f'{commands.command("fetch")} --data_dir={missing} --dataset=stackoverflow') in msg
  assert not missing.exists()  # TFF's loader would have created it and started a download


def test_unknown_dataset_is_a_value_error(tmp_path):
  with pytest.raises(
    ValueError,
    match="dataset must be one of emnist, shakespeare, stackoverflow, cifar100, got 'mnist'",
  ):
    datasets.load_federated('mnist', str(tmp_path))


def test_truncated_file_is_a_format_error(data_dir, tmp_path):
  path = _copy(data_dir, 'cifar100', str(tmp_path))
  size = os.path.getsize(path)
  kept = fixtures.truncate_file(path, 0.6)
  with pytest.raises(datasets.DataFormatError) as e:
    datasets.load_federated('cifar100', str(tmp_path))
  assert str(e.value) == (
    f'{path} is truncated: {kept} bytes, its header says {size} (an '
    'interrupted download or copy?); fetch it again'
  )


def test_not_sqlite_and_wrong_schema_and_missing_split(data_dir, tmp_path):
  path = str(tmp_path / 'shakespeare.sqlite')
  with open(path, 'wb') as f:
    f.write(b'<html>404 Not Found</html>' * 10)
  with pytest.raises(datasets.DataFormatError, match='is not an SQLite database'):
    datasets.load_federated('shakespeare', str(tmp_path))
  fixtures.write_wrong_schema(path)
  with pytest.raises(datasets.DataFormatError) as e:
    datasets.load_federated('shakespeare', str(tmp_path))
  assert str(e.value) == (
    f"{path} is not a TFF SQLite dataset: table 'examples' lacks "
    'column(s) serialized_example_proto (has client_id, data, split_name)'
  )
  shutil.copy(os.path.join(data_dir, 'shakespeare.sqlite'), tmp_path / 'emnist_all.sqlite')
  with pytest.raises(datasets.DataFormatError, match="has no clients in split 'all_train'"):
    datasets.load_federated('emnist', str(tmp_path))


def test_corrupt_pages_are_format_errors(data_dir, tmp_path):
  path = _copy(data_dir, 'emnist', str(tmp_path))
  size = os.path.getsize(path)
  with open(path, 'r+b') as f:  # garble everything after the first page, keep the size
    f.seek(4096)
    f.write(np.random.default_rng(0).integers(0, 256, size - 4096, np.uint8).tobytes())
  with pytest.raises(datasets.DataFormatError) as e:
    datasets.load_federated('emnist', str(tmp_path))
  assert str(e.value) == (
    f'{path} is not a valid SQLite database: database disk image is malformed'
  )
  # A garbled data page that opening does not touch surfaces when its client is loaded.
  fixtures.write_emnist(str(tmp_path), num_clients=40)
  with open(path, 'r+b') as f:
    f.seek(5 * 4096 + 8)
    f.write(b'\xa5' * 4000)
  splits = datasets.load_federated('emnist', str(tmp_path))
  assert splits.train['f0039_39']['pixels'].shape[1:] == (28, 28)
  with pytest.raises(datasets.DataFormatError) as e:
    splits.train['f0000_00']
  assert str(e.value) == (
    f"client 'f0000_00' of split 'all_train' in {path} cannot be read: Step() failed: [11] "
    'database disk image is malformed: SELECT serialized_example_proto FROM examples WHERE '
    "client_id = 'f0000_00' and split_name ='all_train'"
  )


def test_empty_client_is_a_format_error_naming_it(data_dir, tmp_path):
  path = _copy(data_dir, 'shakespeare', str(tmp_path))
  fixtures.add_empty_client(path, 'train', 'THE_PLAY_GHOST')
  splits = datasets.load_federated('shakespeare', str(tmp_path))
  assert len(splits.train) == 4 and len(splits.train['THE_PLAY_CHARACTER_0']['snippets']) >= 2
  with pytest.raises(datasets.DataFormatError) as e:
    splits.train['THE_PLAY_GHOST']
  assert str(e.value) == (
    f"client 'THE_PLAY_GHOST' of split 'train' in {path} has no examples (client_metadata lists it)"
  )


def test_file_without_client_index_warns(data_dir, tmp_path, caplog):
  fixtures.write_tff_sqlite(
    str(tmp_path / 'shakespeare.sqlite'),
    {s: {'A': [fixtures.shakespeare_example('x')]} for s in ('train', 'test')},
    indexes=False,
  )
  datasets.load_federated('shakespeare', str(tmp_path))
  assert 'has no index on examples(client_id)' in caplog.text


# ------------------------------------------------------------------------ word and tag counts


def _tff_counts(archive, monkeypatch, fn, **kwargs):
  """TFF's own load_*_counts, with Keras' download replaced by extracting our archive."""

  def get_file(fname, origin, cache_dir=None, **unused):
    out = os.path.join(cache_dir, 'datasets')
    os.makedirs(out, exist_ok=True)
    with tarfile.open(archive) as tar:
      tar.extractall(out)
    return os.path.join(out, fname)

  monkeypatch.setattr(tf.keras.utils, 'get_file', get_file)
  return fn(cache_dir=os.path.join(os.path.dirname(archive), 'keras_' + fn.__name__), **kwargs)


def test_word_and_tag_counts_equal_tffs(data_dir, monkeypatch):
  words = datasets.load_word_counts(data_dir)
  assert list(words.items())[:3] == [('the', 1000), ('a', 999), ('to', 998)]
  assert len(words) == len(fixtures.SO_WORDS)
  assert list(datasets.load_word_counts(data_dir, vocab_size=4)) == ['the', 'a', 'to', 'is']
  tags = datasets.load_tag_counts(data_dir)
  assert list(tags.items()) == [(t, 500 - 7 * k) for k, t in enumerate(fixtures.SO_TAGS)]
  so = tff.simulation.datasets.stackoverflow
  for kwargs in ({}, {'vocab_size': 4}):
    assert _tff_counts(
      os.path.join(data_dir, 'stackoverflow.word_count.tar.bz2'),
      monkeypatch,
      so.load_word_counts,
      **kwargs,
    ) == datasets.load_word_counts(data_dir, **kwargs)
  theirs = _tff_counts(
    os.path.join(data_dir, 'stackoverflow.tag_count.tar.bz2'), monkeypatch, so.load_tag_counts
  )
  assert list(theirs.items()) == list(tags.items())


def test_counts_errors(data_dir, tmp_path):
  with pytest.raises(datasets.DataNotFoundError) as e:
    datasets.load_tag_counts(str(tmp_path))
  assert str(e.value) == (
    f"{tmp_path}/stackoverflow.tag_count.tar.bz2 not found (TFF's StackOverflow counts "
    f'archive); fetch it on a connected machine with: {commands.command("fetch")} '
    f'--data_dir={tmp_path} --dataset=stackoverflow_counts'
  )
  with pytest.raises(ValueError, match='vocab_size must be None or a positive int, got 0'):
    datasets.load_word_counts(data_dir, vocab_size=0)
  path = tmp_path / 'stackoverflow.word_count.tar.bz2'
  path.write_bytes(b'BZh91AY&SY' + b'\x00' * 40)
  with pytest.raises(datasets.DataFormatError, match='is not a readable tar archive'):
    datasets.load_word_counts(str(tmp_path))
  fixtures.write_tag_counts_archive(str(path), {'a': 1})  # wrong member name
  with pytest.raises(datasets.DataFormatError, match="has no member 'stackoverflow.word_count'"):
    datasets.load_word_counts(str(tmp_path))


# ------------------------------------------------------------------------ fetch


class _Server:
  """http.server on 127.0.0.1 in a thread serving a directory; counts GET requests."""

  def __init__(self, directory, short_body=False):
    server = self
    self.requests = 0

    class Handler(http.server.SimpleHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_GET(self):  # pylint: disable=invalid-name
        server.requests += 1
        if not short_body:
          return super().do_GET()
        # Announce the whole file, send half of it and hang up (a dropped connection).
        with open(self.translate_path(self.path), 'rb') as f:
          body = f.read()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True

    self._httpd = http.server.ThreadingHTTPServer(
      ('127.0.0.1', 0), functools.partial(Handler, directory=directory)
    )
    self.url = f'http://127.0.0.1:{self._httpd.server_address[1]}/'
    self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._httpd.shutdown()
    self._httpd.server_close()


def _mirror(tmp_path, data_dir, payload_fn=lambda b: b, name='mirror'):
  """A directory serving emnist_all.sqlite.lzma = lzma(payload_fn(fixture bytes))."""
  mirror = tmp_path / name
  mirror.mkdir()
  with open(os.path.join(data_dir, 'emnist_all.sqlite'), 'rb') as f:
    original = f.read()
  (mirror / 'emnist_all.sqlite.lzma').write_bytes(lzma.compress(payload_fn(original)))
  return mirror, original


def _leftovers(directory):
  return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def test_fetch_urls_and_hashes_are_tffs():
  for name, sources in fetch_lib.DATASETS.items():
    module = getattr(
      tff.simulation.datasets, 'stackoverflow' if name.startswith('stackoverflow') else name
    )
    text = inspect.getsource(module)
    for s in sources:
      assert f"'{fetch_lib.TFF_BASE_URL}{s.remote}'" in text, s
      if s.sha256:
        assert f"'{s.sha256}'" in text, s


def test_fetch_over_http_verifies_and_renames(data_dir, tmp_path):
  mirror, original = _mirror(tmp_path, data_dir)
  out = tmp_path / 'data'
  with _Server(str(mirror)) as server:
    result = fetch_lib.fetch('emnist', str(out), base_url=server.url, log=lambda s: None)
  path = str(out / 'emnist_all.sqlite')
  assert result == [(path, 'downloaded')] and server.requests == 1
  assert _leftovers(out) == ['emnist_all.sqlite']
  mask = os.umask(0)
  os.umask(mask)
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600
  with open(path, 'rb') as f:
    assert f.read() == original
  assert len(datasets.load_federated('emnist', str(out)).train) == 4


@pytest.mark.parametrize(
  'damage, reason',
  [
    ('truncated', 'the LZMA stream ends early'),
    ('corrupt', 'downloaded file does not verify: .* is not an SQLite database'),
    ('half_sqlite', 'downloaded file does not verify: .* is truncated'),
    ('dropped', 'download (failed|incomplete)'),
  ],
)
def test_bad_download_leaves_no_file(data_dir, tmp_path, damage, reason):
  if damage == 'corrupt':
    mirror, _ = _mirror(tmp_path, data_dir, lambda b: np.random.default_rng(1).bytes(len(b)))
  elif damage == 'half_sqlite':
    mirror, _ = _mirror(tmp_path, data_dir, lambda b: b[: len(b) // 2])
  else:
    mirror, _ = _mirror(tmp_path, data_dir)
  if damage == 'truncated':
    archive = mirror / 'emnist_all.sqlite.lzma'
    archive.write_bytes(archive.read_bytes()[:-200])
  out = tmp_path / 'data'
  with _Server(str(mirror), short_body=damage == 'dropped') as server:
    with pytest.raises(fetch_lib.FetchError, match=reason):
      fetch_lib.fetch('emnist', str(out), base_url=server.url, log=lambda s: None)
  assert _leftovers(out) == []


def test_interrupted_download_leaves_no_file(data_dir, tmp_path):
  mirror, _ = _mirror(tmp_path, data_dir)
  out = tmp_path / 'data'

  def interrupt(received):
    if received > 1000:
      raise KeyboardInterrupt

  with pytest.raises(KeyboardInterrupt):
    fetch_lib.fetch_source(
      fetch_lib.DATASETS['emnist'][0],
      str(out),
      mirror.as_uri(),
      log=lambda s: None,
      on_chunk=interrupt,
      chunk_size=512,
    )
  assert _leftovers(out) == []


def test_valid_file_is_kept_and_invalid_one_replaced(data_dir, tmp_path):
  mirror, original = _mirror(tmp_path, data_dir)
  out = str(tmp_path / 'data')
  path = _copy(data_dir, 'emnist', out)
  mtime = os.stat(path).st_mtime_ns
  with _Server(str(mirror)) as server:
    assert fetch_lib.fetch('emnist', out, server.url, log=lambda s: None) == [(path, 'kept')]
    assert server.requests == 0 and os.stat(path).st_mtime_ns == mtime
    fixtures.truncate_file(path, 0.5)
    logged = []
    assert fetch_lib.fetch('emnist', out, server.url, log=logged.append) == [(path, 'downloaded')]
    assert server.requests == 1 and 'present but invalid' in logged[0]
  with open(path, 'rb') as f:
    assert f.read() == original


def test_fetch_counts_from_file_url_checks_sha256(data_dir, tmp_path):
  out = tmp_path / 'data'
  base = 'file://' + data_dir
  with pytest.raises(
    fetch_lib.FetchError,
    match='SHA-256 [0-9a-f]{64} is not the published '
    '1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c',
  ):
    fetch_lib.fetch('stackoverflow_counts', str(out), base, log=lambda s: None)
  assert _leftovers(out) == []
  result = fetch_lib.fetch('stackoverflow_counts', str(out), base, sha256=None, log=lambda s: None)
  assert [a for _, a in result] == ['downloaded', 'downloaded']
  assert datasets.load_tag_counts(str(out)) == datasets.load_tag_counts(data_dir)
  assert list(datasets.load_word_counts(str(out))) == list(fixtures.SO_WORDS)


def test_fetch_cli(data_dir, tmp_path, capsys):
  mirror, _ = _mirror(tmp_path, data_dir)
  out = str(tmp_path / 'data')
  assert (
    fetch_lib.main([f'--data_dir={out}', '--dataset=emnist', f'--base_url={mirror.as_uri()}']) == 0
  )
  assert os.path.isfile(os.path.join(out, 'emnist_all.sqlite'))
  proc = subprocess.run(
    [sys.executable, '-m', 'tff_adaptive.datasets.fetch', f'--data_dir={out}', '--dataset=mnist'],
    cwd=ROOT,
    capture_output=True,
    text=True,
    check=False,
  )
  assert proc.returncode == 2 and proc.stdout == ''
  assert proc.stderr == (
    'fetch: error: --dataset=mnist is not one of emnist, shakespeare, '
    'stackoverflow, cifar100, stackoverflow_counts\n'
  )


def test_garbage_example_bytes_name_the_client_and_file(data_dir, tmp_path):
  """Stored bytes that are not tf.train.Example protos: one DataFormatError, no decode error."""
  path = _copy(data_dir, 'stackoverflow', str(tmp_path))
  splits = datasets.load_federated('stackoverflow', str(tmp_path))
  victim = next(iter(splits.train))
  con = sqlite3.connect(path)
  garbage = bytes(range(256)) * 2  # not a proto; TF's error message quotes non-UTF-8 bytes
  con.execute(
    'UPDATE examples SET serialized_example_proto = ? WHERE client_id = ? AND split_name = ?',
    (garbage, victim, 'train'),
  )
  con.commit()
  con.close()
  splits = datasets.load_federated('stackoverflow', str(tmp_path))
  with pytest.raises(datasets.DataFormatError) as e:
    splits.train[victim]
  assert str(e.value).startswith(f"client {victim!r} of split 'train' in {path}: "), str(e.value)


def test_mapped_client_values_that_make_no_model_input_name_the_client_and_file(data_dir, tmp_path):
  path = _copy(data_dir, 'shakespeare', str(tmp_path))
  splits = datasets.load_federated('shakespeare', str(tmp_path))

  def to_model_input(raw):
    raise UnicodeDecodeError('utf-8', b'\xff', 0, 1, 'invalid start byte')

  mapped = datasets.MappedClients(splits.train, to_model_input)
  client = next(iter(mapped))
  with pytest.raises(datasets.DataFormatError) as e:
    mapped[client]
  assert str(e.value) == (
    f"client {client!r} of split 'train' in {path}: its examples do not make model inputs "
    "(UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte)"
  )
