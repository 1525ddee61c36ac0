"""Tests of tff_adaptive.loop.client_states: the disk-backed, copy-on-write client-state store."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tff_adaptive.loop import client_states


def _store(root, **kwargs) -> client_states.ClientStateStore:
  store = client_states.ClientStateStore(str(root), **kwargs)
  store.restore(0)
  return store


def _value(seed: float) -> list[np.ndarray]:
  return [np.full((2, 3), seed, np.float32), np.array([seed], np.float64)]


def _seed_of(value: list[np.ndarray] | None) -> float | None:
  return None if value is None else float(value[0][0, 0])


def _files(root, suffix: str) -> list[str]:
  return sorted(
    os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(suffix)
  )


def test_round_trip_is_bitwise_for_several_dtypes(tmp_path):
  rng = np.random.default_rng(0)
  special = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38], np.float32)
  nan_payload = np.frombuffer(np.uint32(0x7FC12345).tobytes(), np.float32)
  value = [
    np.concatenate([rng.standard_normal(1000).astype(np.float32), special, nan_payload]),
    rng.standard_normal((3, 4, 5)),  # float64
    np.asfortranarray(rng.standard_normal((4, 6)).astype(np.float16)),
    rng.integers(-(2**40), 2**40, size=7),
    np.array(np.float32(1.5)),  # a scalar leaf
    np.array([True, False]),
    np.zeros((0, 3), np.float32),
    np.array([1 + 2j], np.complex64),
  ]
  store = _store(tmp_path, cache_size=0)  # every get reads the file
  store.put('f0001', value, 1)
  for got in (store.get('f0001'), store.get('f0001')):
    assert len(got) == len(value)
    for a, b in zip(got, value):
      assert a.dtype == b.dtype and a.shape == b.shape
      assert a.tobytes() == b.tobytes()
  store.commit(1)
  reopened = client_states.ClientStateStore(str(tmp_path))
  reopened.restore(1)
  assert [a.tobytes() for a in reopened.get('f0001')] == [b.tobytes() for b in value]


def test_get_returns_independent_copies(tmp_path):
  store = _store(tmp_path)
  original = [np.arange(4, dtype=np.float32)]
  store.put('a', original, 1)
  original[0][:] = -1  # the store copied the value
  got = store.get('a')
  got[0][:] = 7
  assert got[0].flags.writeable
  np.testing.assert_array_equal(store.get('a')[0], np.arange(4, dtype=np.float32))


def test_unknown_client_and_container_protocol(tmp_path):
  store = _store(tmp_path)
  assert store.get('nobody') is None
  assert len(store) == 0 and 'nobody' not in store
  store.put('x', _value(1), 1)
  store.put('y', _value(2), 1)
  store.put('x', _value(3), 2)
  assert len(store) == 2 and 'x' in store and 'z' not in store and 3 not in store
  assert _seed_of(store.get('x')) == 3


def test_ids_with_slashes_dots_and_unicode_stay_under_root(tmp_path):
  root = tmp_path / 'store'
  ids = ['Alice/Bob', '../escape', '..', '.', '/abs/path', 'naïve 日本 🙂', '', 'a' * 500, 'A', 'a']
  store = _store(root)
  for i, cid in enumerate(ids):
    store.put(cid, _value(i), 1)
  store.commit(1)
  for i, cid in enumerate(ids):
    assert _seed_of(store.get(cid)) == i
  outside = [p for p in tmp_path.rglob('*') if not p.is_relative_to(root) and p != root]
  assert not outside
  assert len(_files(root, '.npz')) == len(ids)
  assert all(len(os.path.basename(p)) < 255 for p in _files(root, '.npz'))
  reopened = client_states.ClientStateStore(str(root))
  reopened.restore(1)
  assert len(reopened) == len(ids)
  assert [_seed_of(reopened.get(cid)) for cid in ids] == list(range(len(ids)))


def test_non_string_ids_are_refused(tmp_path):
  store = _store(tmp_path)
  with pytest.raises(TypeError, match='str'):
    store.put(5, _value(1), 1)


def test_cache_is_bounded_lru(tmp_path):
  store = _store(tmp_path, cache_size=4)
  for k in range(100):
    store.put(f'c{k}', [np.full(10, k, np.float32)], 1)
    assert store.cached_count <= 4
  for k in range(100):
    assert store.get(f'c{k}')[0][0] == k
    assert store.cached_count <= 4
  assert store.cached_count == 4
  # Least recently used is evicted: c96..c99 are cached; touching c96 keeps it over c97.
  store.get('c96')
  store.get('c0')
  assert set(store._cache) == {'c98', 'c99', 'c96', 'c0'}
  assert _store(tmp_path / 'nocache', cache_size=0).cached_count == 0


def _write_rounds_1_to_6(root) -> None:
  """Rounds 1..6 with commits at 2 and 4, then a 'crash' (no commit of 5 and 6)."""
  store = _store(root)
  store.put('a', _value(1.0), 1)
  store.put('b', _value(1.5), 1)
  store.put('a', _value(2.0), 2)
  store.commit(2)
  store.put('c', _value(3.0), 3)
  store.put('a', _value(4.0), 4)
  store.commit(4)
  store.put('a', _value(5.0), 5)  # overwrites a client after the checkpoint
  store.put('b', _value(5.5), 5)  # overwrites a client last written before round 2
  store.put('d', _value(5.0), 5)  # first seen after the checkpoint
  store.put('e', _value(6.0), 6)
  store.put('c', _value(6.0), 6)
  assert store.committed_rounds == [2, 4]
  assert _seed_of(store.get('a')) == 5.0 and len(store) == 5


def test_restore_sees_exactly_the_committed_state(tmp_path):
  _write_rounds_1_to_6(tmp_path)
  store = client_states.ClientStateStore(str(tmp_path))
  store.restore(4)
  assert len(store) == 3 and 'd' not in store and 'e' not in store
  assert store.get('d') is None and store.get('e') is None
  assert [_seed_of(store.get(c)) for c in 'abc'] == [4.0, 1.5, 3.0]
  assert store.committed_rounds == [2, 4]
  names = [os.path.basename(p) for p in _files(tmp_path, '.npz')]
  assert not [n for n in names if int(n[-12:-4]) > 4]  # versions of rounds 5, 6 deleted
  # Continuing from round 5 again works, and the old round-5 files do not come back.
  store.put('a', _value(50.0), 5)
  store.commit(5)
  again = client_states.ClientStateStore(str(tmp_path))
  again.restore(5)
  assert [_seed_of(again.get(c)) for c in 'abcde'] == [50.0, 1.5, 3.0, None, None]


def test_restore_of_an_older_kept_commit(tmp_path):
  _write_rounds_1_to_6(tmp_path)
  store = client_states.ClientStateStore(str(tmp_path))
  store.restore(2)
  assert [_seed_of(store.get(c)) for c in 'abcde'] == [2.0, 1.5, None, None, None]
  assert store.committed_rounds == [2]
  assert not os.path.exists(tmp_path / 'index' / 'round_00000004.json')
  with pytest.raises(ValueError, match=r'rounds available: \[2\]'):
    client_states.ClientStateStore(str(tmp_path)).restore(4)


def test_restore_zero_empties_the_store(tmp_path):
  _write_rounds_1_to_6(tmp_path)
  store = client_states.ClientStateStore(str(tmp_path))
  store.restore(0)
  assert len(store) == 0 and store.committed_rounds == []
  assert _files(tmp_path, '.npz') == [] and _files(tmp_path, '.json') == []


def test_garbage_collection_bounds_disk(tmp_path):
  keep = 2
  store = _store(tmp_path, keep_commits=keep)
  for r in range(1, 21):
    for cid in ('x', 'y', 'z'):
      store.put(cid, _value(r), r)
    store.commit(r)
    assert len(_files(tmp_path, '.npz')) <= 3 * (keep + 1)
  assert store.committed_rounds == [19, 20]
  assert len(_files(tmp_path, '.json')) == keep
  assert len(_files(tmp_path, '.npz')) == 3 * keep  # rounds 19 and 20
  # Rarely written clients keep their single old version.
  store.put('rare', _value(-1), 21)
  for r in range(21, 30):
    store.put('x', _value(r), r)
    store.commit(r)
  assert _seed_of(store.get('rare')) == -1 and _seed_of(store.get('y')) == 20
  assert len(_files(tmp_path, '.npz')) == 2 + 1 + 1 + 1  # x: 28, 29; y, z: 20; rare: 21
  for r in (29, 28):  # restore(28) discards round 29
    reopened = client_states.ClientStateStore(str(tmp_path))
    reopened.restore(r)
    assert [_seed_of(reopened.get(c)) for c in ('x', 'y', 'rare')] == [r, 20, -1]


def test_keep_commits_one(tmp_path):
  store = _store(tmp_path, keep_commits=1)
  for r in range(1, 6):
    store.put('x', _value(r), r)
    store.commit(r)
  assert store.committed_rounds == [5] and len(_files(tmp_path, '.npz')) == 1


def test_crash_mid_write_leaves_a_temp_file_that_is_ignored_and_cleaned(tmp_path):
  store = _store(tmp_path)
  store.put('a', _value(1), 1)
  store.commit(1)
  path = _files(tmp_path, '.npz')[0]
  directory, name = os.path.split(path)
  # A write of round 2 killed before its rename: a partial temp file; also a killed commit.
  partial = os.path.join(directory, f'.tmp-0123abcd-{name.replace("r00000001", "r00000002")}')
  with open(path, 'rb') as f:
    data = f.read()
  with open(partial, 'wb') as f:
    f.write(data[: len(data) // 2])
  partial_index = tmp_path / 'index' / '.tmp-0123abcd-round_00000002.json'
  partial_index.write_text('{"form')
  store = client_states.ClientStateStore(str(tmp_path))
  store.restore(1)
  assert _seed_of(store.get('a')) == 1 and len(store) == 1
  assert not os.path.exists(partial) and not partial_index.exists()
  assert store.committed_rounds == [1]


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
  store = _store(tmp_path)

  def fail(*args, **kwargs):
    raise OSError('disk full')

  monkeypatch.setattr(client_states.np, 'savez', fail)
  with pytest.raises(OSError, match='disk full'):
    store.put('a', _value(1), 1)
  assert not [n for _, _, names in os.walk(tmp_path) for n in names]
  assert 'a' not in store


@pytest.mark.parametrize('damage', ['truncate', 'garbage', 'flip', 'empty', 'npy'])
def test_corrupt_version_file_names_it(tmp_path, damage):
  store = _store(tmp_path)
  store.put('a', [np.arange(1000, dtype=np.float32)], 1)
  store.commit(1)
  (path,) = _files(tmp_path, '.npz')
  with open(path, 'rb') as f:
    data = bytearray(f.read())
  if damage == 'truncate':
    data = data[: len(data) - 100]
  elif damage == 'garbage':
    data = bytearray(b'not a zip file at all' * 10)
  elif damage == 'flip':
    data[len(data) // 2] ^= 0x10  # inside the array data: the member's CRC-32 catches it
  elif damage == 'empty':
    data = bytearray()
  else:
    with open(path, 'wb') as f:
      np.save(f, np.arange(3))
    with open(path, 'rb') as f:
      data = f.read()
  with open(path, 'wb') as f:
    f.write(data)
  store = client_states.ClientStateStore(str(tmp_path))
  store.restore(1)
  with pytest.raises(ValueError, match='Corrupt client-state file') as info:
    store.get('a')
  assert path in str(info.value) and '\n' not in str(info.value)


def test_corrupt_or_inconsistent_snapshot_names_it(tmp_path):
  store = _store(tmp_path)
  store.put('a', _value(1), 1)
  store.commit(1)
  snapshot = tmp_path / 'index' / 'round_00000001.json'
  good = snapshot.read_text()
  for bad in ('{"format": "tff_ada', '[]', good.replace('"round":1', '"round":2')):
    snapshot.write_text(bad)
    with pytest.raises(ValueError, match='Corrupt client-state index snapshot') as info:
      client_states.ClientStateStore(str(tmp_path)).restore(1)
    assert str(snapshot) in str(info.value) and '\n' not in str(info.value)
  snapshot.write_text(good)
  os.remove(_files(tmp_path, '.npz')[0])
  with pytest.raises(ValueError, match='Missing client-state file .*round_00000001.json'):
    client_states.ClientStateStore(str(tmp_path)).restore(1)
  assert snapshot.exists()  # a failed restore deletes nothing


def test_put_at_a_committed_round_is_an_error(tmp_path):
  store = _store(tmp_path)
  store.put('a', _value(1), 1)
  store.put('a', _value(2), 2)
  store.commit(2)
  for r in (0, 1, 2):
    with pytest.raises(ValueError, match='round'):
      store.put('b', _value(r), r)
  store.put('a', _value(3), 3)
  store.put('c', _value(4), 4)
  with pytest.raises(ValueError, match='after its put for round 4'):
    store.put('c', _value(3), 3)  # a client's rounds never go back
  assert _seed_of(store.get('a')) == 3 and 'b' not in store and _seed_of(store.get('c')) == 4


def test_commit_rules(tmp_path):
  store = _store(tmp_path)
  store.put('a', _value(5), 5)
  with pytest.raises(ValueError, match='later round 5'):
    store.commit(4)
  store.commit(5)
  with pytest.raises(ValueError, match='last committed round 5'):
    store.commit(5)
  store.commit(6)  # no puts: the same index
  assert json.loads((tmp_path / 'index' / 'round_00000006.json').read_text())['clients'] == {'a': 5}


def test_restore_of_a_missing_round_lists_the_available_ones(tmp_path):
  store = _store(tmp_path)
  for r in (1, 2, 3):
    store.put('a', _value(r), r)
    store.commit(r)
  fresh = client_states.ClientStateStore(str(tmp_path))
  with pytest.raises(ValueError, match=r'round 1 in .*index; rounds available: \[2, 3\]'):
    fresh.restore(1)
  with pytest.raises(ValueError, match='rounds available: none'):
    client_states.ClientStateStore(str(tmp_path / 'empty')).restore(7)
  with pytest.raises(RuntimeError, match='restore'):
    fresh.get('a')


def test_object_leaves_are_refused(tmp_path):
  store = _store(tmp_path)
  with pytest.raises(ValueError, match='dtype object'):
    store.put('a', [np.array([{}, None], dtype=object)], 1)
  assert 'a' not in store


_CHILD = r"""
import os, sys
import numpy as np
from tff_adaptive.loop import client_states
from tests.loop.test_client_states import _crash_expected, _crash_sample, _crash_value

root, every = sys.argv[1], int(sys.argv[2])
ckpts = sorted(int(n[5:]) for n in os.listdir(root) if n.startswith('ckpt_'))
start = ckpts[-1] if ckpts else 0
store = client_states.ClientStateStore(os.path.join(root, 'states'), cache_size=2)
store.restore(start)
print('ready', flush=True)
for r in range(start + 1, 10**6):
  for c in _crash_sample(r):
    got = store.get(f'client/{c}')
    prev = _crash_expected(c, r - 1)
    if (got is None) != (prev is None) or (got is not None and got[0][0] != prev):
      sys.exit(f'round {r} client {c}: got {got and got[0][0]}, expected {prev}')
    store.put(f'client/{c}', [_crash_value(c, r), np.float64(r)], r)
  if r % every == 0:
    store.commit(r)  # then the "checkpoint", keeping the last 2 as a checkpoint manager does
    with open(os.path.join(root, '.tmp'), 'w') as f:
      f.write(str(r))
    os.replace(os.path.join(root, '.tmp'), os.path.join(root, f'ckpt_{r:06d}'))
    for old in ckpts[:-1]:
      os.remove(os.path.join(root, f'ckpt_{old:06d}'))
    ckpts = ckpts[-1:] + [r]
"""

_CRASH_CLIENTS, _CRASH_DIM = 12, 50_000


def _crash_sample(r: int) -> list[int]:
  return [int(c) for c in np.random.default_rng(r).choice(_CRASH_CLIENTS, 3, replace=False)]


def _crash_value(c: int, r: int) -> np.ndarray:
  value = np.arange(_CRASH_DIM, dtype=np.float32)
  value[0] = r * 100 + c
  return value


def _crash_expected(c: int, s: int) -> float | None:
  """value[0] of client c's state at the end of round s (None: never sampled)."""
  for r in range(s, 0, -1):
    if c in _crash_sample(r):
      return float(r * 100 + c)
  return None


def test_sigkill_at_random_moments_resumes_exactly(tmp_path):
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = dict(os.environ, PYTHONPATH=repo)
  # Kills at random moments after the child's restore: mid-put, mid-commit, between a commit
  # and its checkpoint, mid-garbage-collection (in a trial run of 40 kills, 14 left a temp file
  # and 4 a snapshot newer than the latest checkpoint).
  delays = np.random.default_rng(0).uniform(0.05, 0.5, size=5)
  resumed = []
  for delay in delays:
    child = subprocess.Popen(
      [sys.executable, '-c', _CHILD, str(tmp_path), '3'], env=env, stdout=subprocess.PIPE
    )
    assert child.stdout.readline() == b'ready\n'
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, 'the child stopped by itself (see its stderr)'
    child.stdout.close()
    ckpts = sorted(int(n[5:]) for n in os.listdir(tmp_path) if n.startswith('ckpt_'))
    latest = ckpts[-1] if ckpts else 0
    store = client_states.ClientStateStore(str(tmp_path / 'states'))
    store.restore(latest)
    for c in range(_CRASH_CLIENTS):
      got = store.get(f'client/{c}')
      assert (got and float(got[0][0])) == _crash_expected(c, latest), (c, latest)
      assert got is None or got[1] == max(r for r in range(1, latest + 1) if c in _crash_sample(r))
    versions = _files(tmp_path / 'states', '.npz')
    assert not [p for p in versions if int(p[-12:-4]) > latest]
    assert len(versions) <= _CRASH_CLIENTS * 3
    assert not [n for _, _, names in os.walk(tmp_path / 'states') for n in names if '.tmp' in n]
    resumed.append(latest)
  assert resumed[-1] > 0 and resumed == sorted(resumed)
