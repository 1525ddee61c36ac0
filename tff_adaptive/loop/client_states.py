"""A disk-backed per-client state store whose contents resume exactly from a checkpoint.

Stateful federated algorithms keep a state per client across rounds (SCAFFOLD: a control
variate c_i shaped like the model's trainable weights). On EMNIST (3,400 clients x 1.2M floats)
that is 16 GB, so `ClientStateStore` keeps the states on disk and only a small LRU cache of
them (`cache_size` entries) in memory.

A state is a list of NumPy arrays (the leaves of a nest in a fixed order; the store knows
nothing of the structure). Any dtype but `object` round trips exactly, bit for bit.

Design: copy-on-write versions plus index snapshots committed with the checkpoints.

* `put(client, value, r)` never overwrites the state of an earlier round: it writes a new
  version file `versions/<shard>/<key>.r<r>.npz` (temp file in the same directory, then
  `os.replace`, so a reader sees a whole old file or a whole new one, never a partial one) and
  sets the live index entry client -> r. Keys encode the client id (hex of its UTF-8 bytes, or
  a SHA-256 for long ids), so any string, '../x' and unicode included, maps to a file name
  inside the root; shards (256, by the id's SHA-256) keep directories small.
* `commit(r)` atomically writes the live index as `index/round_<r>.json` (temp + rename). It
  must be called before the training loop saves its checkpoint of round r, so that every
  checkpoint has a snapshot (a crash between the two leaves a snapshot newer than the latest
  checkpoint, which the resume discards).
* `restore(r)` at start or resume loads the snapshot of round r as the live index, deletes the
  snapshots and version files of rounds > r (written after that checkpoint, before the crash)
  and stale temp files (a write interrupted by the kill).

Why resume is exact: a version file, once renamed into place, is never modified, and puts
after a commit can only add files of later rounds. The snapshot of round r names, for every
client, the round of its version at the end of round r, and garbage collection never deletes a
file a kept snapshot refers to. So after any crash, `restore(r)` sees exactly the states of the
end of round r, whatever rounds r+1.. wrote (including a client first seen, or overwritten, in
those rounds), and a killed write leaves only a temp file, which is ignored and deleted.

Garbage collection: after a commit, only the last `keep_commits` snapshots are kept (default 2,
matching a checkpoint manager that keeps the last 2 checkpoints, so the latest checkpoint
always has its snapshot) and a version file is deleted when neither the live index nor a kept
snapshot refers to it. Disk use is therefore at most about `keep_commits + 1` versions per
client (one per kept snapshot plus the live one), and in steady state close to one version per
client, since a client sampled rarely has all its references on one file. The snapshot a
version belongs to is computed rather than read: the version of client c in the snapshot of
round s is c's newest version of a round <= s (puts for rounds <= the last commit are refused).

Memory: the cache holds at most `cache_size` states; besides that the store keeps the live
index and the list of version rounds on disk per client (a few small ints per client), never
the states of other clients.

Corrupt or truncated version files and snapshots raise a one-line `ValueError` naming the file.
One process at a time may use a root directory (the store takes no lock).
"""

import collections
from collections.abc import Sequence
import hashlib
import json
import os
import uuid
import zipfile

import numpy as np

__all__ = ['ClientStateError', 'ClientStateStore']

_FORMAT = 'tff_adaptive.client_states/1'
_VERSIONS_DIR = 'versions'
_INDEX_DIR = 'index'
_TMP_PREFIX = '.tmp-'
_VERSION_SUFFIX = '.npz'
_SNAPSHOT_PREFIX = 'round_'
_SNAPSHOT_SUFFIX = '.json'
# Client ids of up to this many UTF-8 bytes are stored as 'c' + hex (readable, reversible);
# longer ones as 'h' + SHA-256, so that a file name stays within 255 bytes.
_MAX_HEX_ID_BYTES = 100


def _id_bytes(client_id: str) -> bytes:
  if not isinstance(client_id, str):
    raise TypeError(f'client ids must be str, got {type(client_id).__name__}: {client_id!r}')
  return client_id.encode('utf-8', 'surrogatepass')


def _shard_and_key(client_id: str) -> tuple[str, str]:
  """The shard directory and file-name key of `client_id` ('c' or 'h' and lowercase hex digits)."""
  data = _id_bytes(client_id)
  digest = hashlib.sha256(data).hexdigest()
  key = 'c' + data.hex() if len(data) <= _MAX_HEX_ID_BYTES else 'h' + digest
  return digest[:2], key


def _parse_version_name(name: str) -> tuple[str, int] | None:
  """(key, round) of a version file name, or None if `name` is not one."""
  if not name.endswith(_VERSION_SUFFIX) or name.startswith('.'):
    return None
  key, sep, round_str = name[: -len(_VERSION_SUFFIX)].rpartition('.r')
  if not sep or not key or not round_str.isdigit():
    return None
  return key, int(round_str)


def _parse_snapshot_name(name: str) -> int | None:
  if not (name.startswith(_SNAPSHOT_PREFIX) and name.endswith(_SNAPSHOT_SUFFIX)):
    return None
  round_str = name[len(_SNAPSHOT_PREFIX) : -len(_SNAPSHOT_SUFFIX)]
  return int(round_str) if round_str.isdigit() else None


def _one_line(error: BaseException) -> str:
  return ' '.join(f'{type(error).__name__}: {error}'.split())


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except FileNotFoundError:
    pass


class ClientStateError(ValueError):
  """The stored client states cannot be read: a missing, truncated or corrupt file."""


class ClientStateStore:
  """Per-client states (lists of arrays) on disk, copy-on-write, with exact resume.

  Usage in a training loop that checkpoints every R rounds:

    store = ClientStateStore(root)
    store.restore(start_round)  # 0 for a fresh run, else the restored checkpoint's round
    for r in range(start_round + 1, total_rounds + 1):
      for cid in sampled_clients(r):
        state = store.get(cid)  # None on the client's first visit
        ...
        store.put(cid, new_state, r)
      if r % R == 0:
        store.commit(r)  # before saving the round-r checkpoint
        save_checkpoint(r)

  `get` returns fresh writable copies: the caller may modify them freely.

  Args:
    root: Directory of the store (created on the first write). Only one store may use it at a time.
    cache_size: Most client states kept in memory (least recently used evicted); 0 disables
      the cache.
    keep_commits: Index snapshots kept (the last ones committed); rounds among them can be
      restored. Must be >= 1; use the checkpoint manager's number of kept checkpoints.
    fsync: Also fsync files and directories before and after each rename, so that the state
      survives a power loss, not only a killed process (slower).
  """

  def __init__(
    self, root: str, *, cache_size: int = 16, keep_commits: int = 2, fsync: bool = False
  ):
    if cache_size < 0:
      raise ValueError(f'cache_size must be >= 0, got {cache_size}')
    if keep_commits < 1:
      raise ValueError(f'keep_commits must be >= 1, got {keep_commits}')
    self._root = os.path.abspath(root)
    self._versions_dir = os.path.join(self._root, _VERSIONS_DIR)
    self._index_dir = os.path.join(self._root, _INDEX_DIR)
    self._cache_size = cache_size
    self._keep_commits = keep_commits
    self._fsync = fsync
    self._cache: collections.OrderedDict[str, tuple[np.ndarray, ...]] = collections.OrderedDict()
    self._restored = False
    self._live: dict[str, int] = {}  # client id -> round of its latest version
    self._versions: dict[str, list[int]] = {}  # client id -> sorted rounds of its files
    self._multi: set[str] = set()  # clients with more than one version file
    self._committed: list[int] = []  # rounds of the snapshots on disk, ascending
    self._last_commit = 0
    self._max_put_round = 0

  @property
  def root(self) -> str:
    return self._root

  @property
  def committed_rounds(self) -> list[int]:
    """Rounds of the index snapshots on disk (the restorable rounds besides 0), ascending."""
    self._check_restored()
    return list(self._committed)

  @property
  def cached_count(self) -> int:
    """Client states held in the in-memory cache (at most `cache_size`)."""
    return len(self._cache)

  def __len__(self) -> int:
    self._check_restored()
    return len(self._live)

  def __contains__(self, client_id) -> bool:
    self._check_restored()
    return isinstance(client_id, str) and client_id in self._live

  def _check_restored(self) -> None:
    if not self._restored:
      raise RuntimeError('ClientStateStore.restore(round_num) must be called before use')

  # Paths.

  def _version_path(self, client_id: str, round_num: int) -> str:
    shard, key = _shard_and_key(client_id)
    return os.path.join(self._versions_dir, shard, f'{key}.r{round_num:08d}{_VERSION_SUFFIX}')

  def _snapshot_path(self, round_num: int) -> str:
    return os.path.join(self._index_dir, f'{_SNAPSHOT_PREFIX}{round_num:08d}{_SNAPSHOT_SUFFIX}')

  def _list_snapshots(self) -> dict[int, str]:
    try:
      names = os.listdir(self._index_dir)
    except FileNotFoundError:
      return {}
    snapshots = {}
    for name in names:
      round_num = _parse_snapshot_name(name)
      if round_num is not None:
        snapshots[round_num] = os.path.join(self._index_dir, name)
    return snapshots

  def _write_atomically(self, path: str, write_fn) -> None:
    """Writes `path` via a temp file in its directory and `os.replace`."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f'{_TMP_PREFIX}{uuid.uuid4().hex}-{name}')
    try:
      with open(tmp, 'wb') as f:
        write_fn(f)
        if self._fsync:
          f.flush()
          os.fsync(f.fileno())
      os.replace(tmp, path)
    except BaseException:
      _remove(tmp)
      raise
    if self._fsync:
      fd = os.open(directory, os.O_RDONLY)
      try:
        os.fsync(fd)
      finally:
        os.close(fd)

  # Restore.

  def _load_snapshot(self, path: str, round_num: int) -> dict[str, int]:
    try:
      with open(path, 'rb') as f:
        data = json.loads(f.read().decode('utf-8'))
      if not isinstance(data, dict) or data.get('format') != _FORMAT:
        raise ValueError(f'not a {_FORMAT} index snapshot')
      if data.get('round') != round_num:
        raise ValueError(f'round {data.get("round")!r} does not match the file name')
      clients = data['clients']
      if not isinstance(clients, dict) or not all(
        type(r) is int and 1 <= r <= round_num for r in clients.values()
      ):
        raise ValueError(f'client rounds must be ints in [1, {round_num}]')
      return clients
    except (OSError, ValueError, KeyError, TypeError) as e:
      raise ClientStateError(
        f'Corrupt client-state index snapshot {path}: {_one_line(e)}'
      ) from None

  def restore(self, round_num: int) -> None:
    """Makes the store what it was at the commit of `round_num` (0: empty), discarding later work.

    Deletes the snapshots and version files of rounds > `round_num` and stale temp files (so
    `restore(0)` empties the store). Must be called once before any other use.

    Raises:
      ValueError: If `round_num` > 0 has no snapshot (the error lists the available rounds), or
        the snapshot is corrupt, or a version file it refers to is missing. Nothing is deleted
        in these cases.
    """
    if type(round_num) is not int or round_num < 0:
      raise ValueError(f'restore: round_num must be an int >= 0, got {round_num!r}')
    snapshots = self._list_snapshots()
    if round_num == 0:
      live = {}
    elif round_num not in snapshots:
      raise ClientStateError(
        f'No client-state index snapshot of round {round_num} in {self._index_dir}; '
        f'rounds available: {sorted(snapshots) or "none"} (the last {self._keep_commits} '
        'commits are kept)'
      )
    else:
      live = self._load_snapshot(snapshots[round_num], round_num)
    key_to_id = {_shard_and_key(cid)[1]: cid for cid in live}

    # Scan the version files: drop temp files, rounds > round_num and unknown clients' files.
    versions: dict[str, list[int]] = collections.defaultdict(list)
    to_delete = []
    if os.path.isdir(self._versions_dir):
      for shard in os.scandir(self._versions_dir):
        if not shard.is_dir(follow_symlinks=False):
          continue
        for entry in os.scandir(shard.path):
          if entry.name.startswith(_TMP_PREFIX):
            to_delete.append(entry.path)
            continue
          parsed = _parse_version_name(entry.name)
          if parsed is None:
            continue  # Not ours: leave it alone.
          key, version_round = parsed
          cid = key_to_id.get(key)
          if cid is None or version_round > round_num:
            to_delete.append(entry.path)
          else:
            versions[cid].append(version_round)
    for cid, version_round in live.items():
      if version_round not in versions.get(cid, ()):
        raise ClientStateError(
          f'Missing client-state file {self._version_path(cid, version_round)} (client '
          f'{cid!r}) referred to by {snapshots[round_num]}'
        )

    for path in to_delete:
      _remove(path)
    for snapshot_round, path in snapshots.items():
      if snapshot_round > round_num:
        _remove(path)
    if os.path.isdir(self._index_dir):
      for name in os.listdir(self._index_dir):
        if name.startswith(_TMP_PREFIX):
          _remove(os.path.join(self._index_dir, name))

    self._live = dict(live)
    self._versions = {cid: sorted(rounds) for cid, rounds in versions.items()}
    self._multi = {cid for cid, rounds in self._versions.items() if len(rounds) > 1}
    self._committed = sorted(r for r in snapshots if r <= round_num)
    self._last_commit = round_num
    self._max_put_round = round_num
    self._cache.clear()
    self._restored = True
    self._collect_garbage()  # Of a crash during a previous garbage collection.

  # Reads and writes.

  def get(self, client_id: str) -> list[np.ndarray] | None:
    """The state of `client_id` (fresh writable copies of its arrays), or None if it has none."""
    self._check_restored()
    _id_bytes(client_id)
    round_num = self._live.get(client_id)
    if round_num is None:
      return None
    leaves = self._cache.get(client_id)
    if leaves is None:
      leaves = self._read_version(self._version_path(client_id, round_num))
      self._cache_put(client_id, leaves)
    else:
      self._cache.move_to_end(client_id)
    return [leaf.copy() for leaf in leaves]

  def _read_version(self, path: str) -> tuple[np.ndarray, ...]:
    try:
      # Opened here, not by np.load, which leaks the file when it is not a valid zip.
      with open(path, 'rb') as f:
        npz = np.load(f, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
          raise ValueError('an .npy file, not an .npz')
        with npz:
          names = list(npz.files)
          if names != [f'arr_{i}' for i in range(len(names))]:
            raise ValueError(f'unexpected members {names[:5]}')
          leaves = tuple(npz[name] for name in names)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
      raise ClientStateError(f'Corrupt client-state file {path}: {_one_line(e)}') from None
    for leaf in leaves:
      leaf.flags.writeable = False
    return leaves

  def _cache_put(self, client_id: str, leaves: tuple[np.ndarray, ...]) -> None:
    if self._cache_size == 0:
      return
    self._cache[client_id] = leaves
    self._cache.move_to_end(client_id)
    while len(self._cache) > self._cache_size:
      self._cache.popitem(last=False)

  def put(self, client_id: str, value: Sequence[np.ndarray], round_num: int) -> None:
    """Stores `value` (a list of arrays; copied) as the state of `client_id` after `round_num`.

    Writes a new version file atomically; the versions of earlier rounds are kept until
    no kept snapshot refers to them. A second put for the same client and round replaces the
    first.

    Raises:
      ValueError: If `round_num` < 1, or <= the last committed (or restored) round, or older
        than the client's latest version, or a leaf has dtype object.
    """
    self._check_restored()
    _id_bytes(client_id)
    if type(round_num) is not int or round_num < 1:
      raise ValueError(f'put: round_num must be an int >= 1, got {round_num!r}')
    if round_num <= self._last_commit:
      raise ValueError(
        f'put({client_id!r}) for round {round_num}, but round {self._last_commit} is already '
        'committed (or restored): states of committed rounds are immutable'
      )
    previous = self._live.get(client_id)
    if previous is not None and round_num < previous:
      raise ValueError(
        f'put({client_id!r}) for round {round_num} after its put for round {previous}'
      )
    if isinstance(value, np.ndarray) or not isinstance(value, Sequence):
      raise TypeError(f'value must be a sequence of arrays, got {type(value).__name__}')
    leaves = tuple(np.array(leaf, copy=True) for leaf in value)
    for i, leaf in enumerate(leaves):
      if leaf.dtype.hasobject:
        raise ValueError(f'put({client_id!r}): leaf {i} has dtype object; store numeric arrays')
      leaf.flags.writeable = False

    self._write_atomically(self._version_path(client_id, round_num), lambda f: np.savez(f, *leaves))
    self._live[client_id] = round_num
    self._max_put_round = max(self._max_put_round, round_num)
    rounds = self._versions.setdefault(client_id, [])
    if not rounds or rounds[-1] != round_num:
      rounds.append(round_num)
      if len(rounds) > 1:
        self._multi.add(client_id)
    self._cache_put(client_id, leaves)

  def commit(self, round_num: int) -> None:
    """Snapshots the live index as the state at the end of `round_num`; then collects garbage.

    Call it before saving the training checkpoint of `round_num`.

    Raises:
      ValueError: If `round_num` is not after the last commit, or a put was for a later round.
    """
    self._check_restored()
    if type(round_num) is not int or round_num <= self._last_commit:
      raise ValueError(
        f'commit: round_num must be an int > the last committed round {self._last_commit}, '
        f'got {round_num!r}'
      )
    if round_num < self._max_put_round:
      raise ValueError(f'commit({round_num}) after a put for the later round {self._max_put_round}')
    data = json.dumps(
      {'format': _FORMAT, 'round': round_num, 'clients': self._live}, separators=(',', ':')
    ).encode('utf-8')
    self._write_atomically(self._snapshot_path(round_num), lambda f: f.write(data))
    self._committed.append(round_num)
    self._last_commit = round_num
    self._max_put_round = round_num
    self._collect_garbage()

  def _collect_garbage(self) -> None:
    """Deletes the snapshots beyond the last `keep_commits` and the unreferenced versions."""
    while len(self._committed) > self._keep_commits:
      _remove(self._snapshot_path(self._committed.pop(0)))
    kept = self._committed
    for cid in list(self._multi):
      rounds = self._versions[cid]
      referenced = set()
      if cid in self._live:
        referenced.add(self._live[cid])
      for snapshot_round in kept:
        # The client's version in that snapshot: its newest of a round <= snapshot_round.
        older = [r for r in rounds if r <= snapshot_round]
        if older:
          referenced.add(older[-1])
      for r in rounds:
        if r not in referenced:
          _remove(self._version_path(cid, r))
      rounds[:] = [r for r in rounds if r in referenced]
      if len(rounds) <= 1:
        self._multi.discard(cid)
