"""Disk use, memory and speed of the per-client state store under SCAFFOLD's access pattern.

  python -m benchmarks.client_state_memory [--clients=10000] [--dim=100000] [--rounds=200]
      [--clients_per_round=10] [--cache_size=16] [--root=/tmp/...] [--keep]

Infrastructure script for stateful algorithms (SCAFFOLD keeps a control variate per client,
shaped like the model's trainable weights: on EMNIST 3,400 clients x 1.2M floats = 16 GB).
`tff_adaptive.loop.client_states.ClientStateStore` keeps those states on disk with a small LRU
cache in memory; this script checks that memory stays bounded while disk holds all N states.

1. Populate: put a float32 vector of length --dim for each of the --clients clients (round 1),
   then commit, to show the on-disk size for N clients.
2. Rounds 2.., --rounds of them: sample --clients_per_round clients uniformly without
   replacement (seeded `np.random.Generator`), get each one's state (None -> zeros), put a new
   vector (state + 1), commit every 10 rounds (as a loop checkpointing every 10 rounds).

Reports the clients with a state, bytes on disk (sum of the file sizes), the process's current
and peak RSS (/proc/self/status VmRSS, VmHWM) at the start, after populating and after the
rounds, and the seconds per get and put; and what holding all states in memory would take
(N x dim x 4 bytes). Gets right after the writes are mostly served from the OS page cache.
The store's root is deleted at the end unless --keep is given.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

from tff_adaptive.loop import client_states

_CLIENTS = flags.DEFINE_integer('clients', 10_000, 'Clients in the population.')
_DIM = flags.DEFINE_integer('dim', 100_000, 'float32 entries of each client state.')
_ROUNDS = flags.DEFINE_integer('rounds', 200, 'Rounds after populating.')
_K = flags.DEFINE_integer('clients_per_round', 10, 'Clients sampled per round.')
_CACHE_SIZE = flags.DEFINE_integer('cache_size', 16, 'LRU cache entries of the store.')
_COMMIT_EVERY = flags.DEFINE_integer('commit_every', 10, 'Rounds between commits.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the client sampling.')
_ROOT = flags.DEFINE_string(
  'root', '', 'Store directory; must not exist or be empty (default: a new temp directory).'
)
_KEEP = flags.DEFINE_bool('keep', False, 'Keep the store directory at the end.')


def _memory_mib() -> tuple[float, float]:
  """(current RSS, peak RSS) of this process in MiB, from /proc/self/status."""
  values = {}
  with open('/proc/self/status') as f:
    for line in f:
      name, _, rest = line.partition(':')
      if name in ('VmRSS', 'VmHWM'):
        values[name] = int(rest.split()[0]) / 1024  # kB
  return values['VmRSS'], values['VmHWM']


def _disk_bytes(root: str) -> tuple[int, int]:
  """(bytes, files) of all files under `root`."""
  total = count = 0
  for directory, _, names in os.walk(root):
    for name in names:
      total += os.path.getsize(os.path.join(directory, name))
      count += 1
  return total, count


def _report(label: str, store, root: str, start_rss: float) -> None:
  size, files = _disk_bytes(root)
  rss, peak = _memory_mib()
  print(
    f'{label}: {len(store):,} clients with state, {size / 2**30:.3f} GiB on disk in '
    f'{files:,} files ({size / max(len(store), 1) / 2**20:.3f} MiB per client); '
    f'RSS {rss:.1f} MiB (peak {peak:.1f} MiB, growth since start {rss - start_rss:+.1f} MiB); '
    f'{store.cached_count} states cached',
    flush=True,
  )


def _summary(name: str, times: list[float]) -> str:
  q = statistics.quantiles(times, n=20) if len(times) > 1 else times * 19
  return (
    f'{name}: median {statistics.median(times) * 1e3:.2f} ms, mean '
    f'{statistics.fmean(times) * 1e3:.2f} ms, p95 {q[18] * 1e3:.2f} ms ({len(times):,} calls)'
  )


def run(root: str) -> None:
  n, dim, k = _CLIENTS.value, _DIM.value, _K.value
  in_memory = n * dim * 4
  print(
    f'{n:,} clients x {dim:,} float32 = {in_memory / 2**30:.3f} GiB if held in memory; '
    f'store at {root}, cache_size {_CACHE_SIZE.value}; {os.cpu_count()} CPUs, load average '
    f'{os.getloadavg()[0]:.1f}',
    flush=True,
  )
  start_rss, _ = _memory_mib()
  print(f'start: RSS {start_rss:.1f} MiB', flush=True)
  store = client_states.ClientStateStore(root, cache_size=_CACHE_SIZE.value)
  store.restore(0)
  ids = [f'f{i:07d}' for i in range(n)]

  started = time.perf_counter()
  populate_put = []
  for i, cid in enumerate(ids):
    value = np.full(dim, i, np.float32)
    t0 = time.perf_counter()
    store.put(cid, [value], 1)
    populate_put.append(time.perf_counter() - t0)
  store.commit(1)
  populate_s = time.perf_counter() - started
  print(
    f'populated in {populate_s:.1f} s ({in_memory / populate_s / 2**20:.0f} MiB/s); '
    + _summary('put', populate_put),
    flush=True,
  )
  _report('after populating', store, root, start_rss)

  rng = np.random.default_rng(_SEED.value)
  gets, puts = [], []
  started = time.perf_counter()
  for r in range(2, _ROUNDS.value + 2):
    for i in rng.choice(n, size=k, replace=False):
      cid = ids[i]
      t0 = time.perf_counter()
      state = store.get(cid)
      t1 = time.perf_counter()
      leaf = np.zeros(dim, np.float32) if state is None else state[0]
      leaf += 1
      t2 = time.perf_counter()
      store.put(cid, [leaf], r)
      t3 = time.perf_counter()
      gets.append(t1 - t0)
      puts.append(t3 - t2)
    if r % _COMMIT_EVERY.value == 0:
      store.commit(r)
  rounds_s = time.perf_counter() - started
  print(
    f'{_ROUNDS.value} rounds x {k} clients in {rounds_s:.1f} s '
    f'({rounds_s / _ROUNDS.value * 1e3:.1f} ms per round, commits included)',
    flush=True,
  )
  print(_summary('get', gets), flush=True)
  print(_summary('put', puts), flush=True)
  _report(f'after {_ROUNDS.value} rounds', store, root, start_rss)
  print(f'committed rounds kept: {store.committed_rounds}', flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  for flag in (_CLIENTS, _DIM, _ROUNDS, _K, _COMMIT_EVERY):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if _K.value > _CLIENTS.value:
    raise app.UsageError(f'--clients_per_round must be <= --clients={_CLIENTS.value}')
  if _ROOT.value:
    root = os.path.abspath(_ROOT.value)
    if os.path.exists(root) and (not os.path.isdir(root) or os.listdir(root)):
      raise app.UsageError(f'--root={root} exists and is not an empty directory')
    os.makedirs(root, exist_ok=True)
  else:
    root = tempfile.mkdtemp(prefix='client_state_memory_')
  try:
    run(root)
  finally:
    if _KEEP.value:
      print(f'kept {root}', file=sys.stderr)
    else:
      shutil.rmtree(root, ignore_errors=True)
      print(f'deleted {root}', file=sys.stderr)


if __name__ == '__main__':
  app.run(main)
