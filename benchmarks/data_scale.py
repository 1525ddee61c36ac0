"""Per-round data overhead vs population size on TFF-format SQLite fixtures (flat = O(k)).

  python -m benchmarks.data_scale [--populations=1000,10000,100000] [--rounds=50]
  bazel run //benchmarks:data_scale -- --populations=1000,10000

Infrastructure script for the scale requirement of the native federated benchmarks (Reddi et
al., "Adaptive Federated Optimization", ICLR 2021, App. C: StackOverflow has 342,477 training
clients and a ~9 GB SQLite file): sampling and building a round's client data must cost
O(clients per round), never O(population), and memory must not grow over rounds.

For each population N an EMNIST-like emnist_all.sqlite in TFF's exact format (indexes as in
TFF's published files) is generated once into --cache_dir (`datasets.write_emnist_scale`, a
synthetic-data generator: N clients x --examples_per_client examples of 28x28 float32 pixels).
Then:

* open: `datasets.load_federated('emnist', dir)` (TFF's SqlClientData reads and sorts the
  client ids once) plus building the sampler over them (both O(N), once per run);
* per round, median (and quartiles) over --rounds rounds, the (population, sampler) pairs
  interleaved round by round so that machine load affects them alike: sample
  --clients_per_round clients with `tff_adaptive.loop.sampling.build_client_sampler` (method 'tff',
  the published order, and 'fast') and materialise each sampled client's arrays through the
  lazy mapping (one indexed SQL query and one parse each), as the training loop does;
* memory: RSS after --memory_rounds rounds vs after 10.

Separately, the sampler alone at --sampler_populations (default up to StackOverflow's
342,477): TFF's `build_uniform_sampling_fn` calls `RandomState.choice(ids, k, replace=False)`,
which converts the id list to an array and permutes all N indices every round; 'fast' draws
with `np.random.default_rng([seed, round]).choice(N, k, replace=False)` (Floyd's algorithm).
Writes --output (data path) and the same name with `_sampler` (sampler alone) as CSV.
"""

import collections
import csv
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

from tff_adaptive import datasets

# runtime: its atexit hook drops TFF's import-time context cleanly (no "Exception ignored" at exit).
from tff_adaptive import runtime  # noqa: F401
from tff_adaptive.loop import sampling

_POPULATIONS = flags.DEFINE_list(
  'populations', ['1000', '10000', '100000'], 'Client counts of the generated SQLite fixtures.'
)
_SAMPLER_POPULATIONS = flags.DEFINE_list(
  'sampler_populations',
  ['1000', '10000', '100000', '342477'],
  'Population sizes for the sampler-only timing.',
)
_EXAMPLES = flags.DEFINE_integer('examples_per_client', 2, 'Training examples per client.')
_K = flags.DEFINE_integer('clients_per_round', 10, 'Clients sampled per round.')
_ROUNDS = flags.DEFINE_integer('rounds', 50, 'Timed rounds per (population, sampler).')
_MEMORY_ROUNDS = flags.DEFINE_integer('memory_rounds', 200, 'Rounds of the memory check.')
_CACHE_DIR = flags.DEFINE_string(
  'cache_dir', '/tmp/tff_adaptive_data_scale', 'Where the generated fixtures are kept between runs.'
)
_OUTPUT = flags.DEFINE_string('output', 'results/benchmarks/data_scale.csv', 'CSV path.')

METHODS = ('tff', 'fast')


def _rss_mib() -> float:
  with open('/proc/self/statm') as f:
    return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


def _fixture(population: int) -> tuple[str, float]:
  """The cached fixture directory for `population` and the seconds spent generating it."""
  directory = os.path.join(_CACHE_DIR.value, f'emnist_n{population}_e{_EXAMPLES.value}')
  if os.path.exists(os.path.join(directory, 'emnist_all.sqlite')):
    return directory, 0.0
  started = time.perf_counter()
  datasets.write_emnist_scale(directory, population, _EXAMPLES.value)
  return directory, time.perf_counter() - started


def _round(train, sample, round_num: int) -> tuple[float, float, int]:
  """(sampling s, materialising s, examples) of one round."""
  t0 = time.perf_counter()
  ids = sample(round_num)
  t1 = time.perf_counter()
  arrays = [collections.OrderedDict(train[cid]) for cid in ids]
  t2 = time.perf_counter()
  return t1 - t0, t2 - t1, sum(len(a['label']) for a in arrays)


def bench_populations(populations: list[int]) -> list[dict]:
  """Opens every population's fixture, then times rounds interleaved (round r of every
  (population, sampler) pair before round r + 1, the order rotating), so machine load affects
  all pairs alike; then the memory check, one pair after the other."""
  pairs, rows = [], []
  for population in populations:
    directory, generate_s = _fixture(population)
    size_mb = os.path.getsize(os.path.join(directory, 'emnist_all.sqlite')) / 2**20
    started = time.perf_counter()
    train = datasets.load_federated('emnist', directory).train
    open_s = time.perf_counter() - started
    assert len(train) == population, (len(train), population)
    started = time.perf_counter()
    train[train.client_ids[0]]  # traces the split's loader graph, once
    trace_s = time.perf_counter() - started
    for method in METHODS:
      started = time.perf_counter()
      sample = sampling.build_client_sampler(train.client_ids, _K.value, seed=1, method=method)
      build_s = time.perf_counter() - started
      pairs.append((train, sample))
      rows.append(
        collections.OrderedDict(
          population=population,
          method=method,
          file_mb=round(size_mb, 1),
          generate_s=round(generate_s, 2),
          open_s=round(open_s, 3),
          first_client_s=round(trace_s, 3),
          sampler_build_s=round(build_s, 4),
        )
      )
  timings = [[] for _ in pairs]
  for r in range(1, _ROUNDS.value + 1):
    for j in range(len(pairs)):
      i = (j + r) % len(pairs)
      timings[i].append(_round(*pairs[i], r))
  for row, (train, sample), times in zip(rows, pairs, timings):
    assert all(n == _K.value * _EXAMPLES.value for _, _, n in times)
    row['sample_ms'] = round(statistics.median(t[0] for t in times) * 1e3, 4)
    row['load_ms'] = round(statistics.median(t[1] for t in times) * 1e3, 3)
    row['round_ms'] = round(statistics.median(t[0] + t[1] for t in times) * 1e3, 3)
    row['round_ms_q25'], _, row['round_ms_q75'] = (
      round(q * 1e3, 3) for q in statistics.quantiles([t[0] + t[1] for t in times], n=4)
    )
    # Memory: continue from round _ROUNDS + 1; RSS after 10 and after memory_rounds rounds.
    rss = {}
    for r in range(1, _MEMORY_ROUNDS.value + 1):
      _round(train, sample, _ROUNDS.value + r)
      if r in (10, _MEMORY_ROUNDS.value):
        rss[r] = _rss_mib()
    row['rss_mib_10'] = round(rss[10], 1)
    row[f'rss_mib_{_MEMORY_ROUNDS.value}'] = round(rss[_MEMORY_ROUNDS.value], 1)
    print(
      f'N={row["population"]:,} {row["method"]}: round {row["round_ms"]:.2f} ms',
      file=sys.stderr,
      flush=True,
    )
  return rows


def bench_sampler(population: int) -> dict:
  ids = [f'c{k:07d}' for k in range(population)]
  row = collections.OrderedDict(population=population)
  for method in METHODS:
    sample = sampling.build_client_sampler(ids, _K.value, seed=1, method=method)
    times = []
    for r in range(1, _ROUNDS.value + 1):
      started = time.perf_counter()
      sample(r)
      times.append(time.perf_counter() - started)
    row[f'{method}_ms'] = round(statistics.median(times) * 1e3, 4)
  return row


def _format(rows, sampler_rows) -> str:
  m = _MEMORY_ROUNDS.value
  lines = [
    f'per round: sample {_K.value} clients + materialise their arrays (median of '
    f'{_ROUNDS.value} rounds); {_EXAMPLES.value} examples/client',
    f'{"clients":>9} {"file MB":>8} {"open s":>7} {"sampler":>7} {"sample ms":>10} '
    f'{"load ms":>8} {"round ms":>9} {"[q25, q75]":>14} {"RSS@10":>8} {f"RSS@{m}":>8}',
  ]
  for r in rows:
    iqr = f'[{r["round_ms_q25"]:.1f}, {r["round_ms_q75"]:.1f}]'
    lines.append(
      f'{r["population"]:>9,} {r["file_mb"]:>8.1f} {r["open_s"]:>7.2f} '
      f'{r["method"]:>7} {r["sample_ms"]:>10.3f} {r["load_ms"]:>8.2f} '
      f'{r["round_ms"]:>9.2f} {iqr:>14} {r["rss_mib_10"]:>8.1f} '
      f'{r[f"rss_mib_{m}"]:>8.1f}'
    )
  lines += [
    '',
    f'sampler alone, {_K.value} of N (median ms of {_ROUNDS.value} rounds)',
    f'{"N":>9} {"tff ms":>9} {"fast ms":>9}',
  ]
  for r in sampler_rows:
    lines.append(f'{r["population"]:>9,} {r["tff_ms"]:>9.3f} {r["fast_ms"]:>9.3f}')
  return '\n'.join(lines)


def _write_csv(path: str, rows) -> None:
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(f'wrote {path}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  try:
    populations = [int(p) for p in _POPULATIONS.value]
    sampler_populations = [int(p) for p in _SAMPLER_POPULATIONS.value]
  except ValueError as e:
    raise app.UsageError(f'--populations/--sampler_populations must be integers: {e}')
  if min(populations + sampler_populations) < _K.value:
    raise app.UsageError(f'every population must be >= --clients_per_round={_K.value}')
  for flag in (_EXAMPLES, _K, _ROUNDS):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if _MEMORY_ROUNDS.value < 10:
    raise app.UsageError(f'--memory_rounds must be >= 10, got {_MEMORY_ROUNDS.value}')
  print(
    f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; fixtures in {_CACHE_DIR.value}',
    flush=True,
  )
  # Warm-up (TF/TFF imports, first graph traces) on a small fixture, so the first timed
  # population does not pay it.
  warm = datasets.load_federated('emnist', _fixture(100)[0]).train
  warm[warm.client_ids[0]]
  rows = bench_populations(populations)
  sampler_rows = [bench_sampler(n) for n in sampler_populations]
  print(_format(rows, sampler_rows))
  # Under `bazel run`, relative paths are taken from the directory the command was typed in.
  output = os.path.join(os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd()), _OUTPUT.value)
  _write_csv(output, rows)
  root, ext = os.path.splitext(output)
  _write_csv(f'{root}_sampler{ext or ".csv"}', sampler_rows)


if __name__ == '__main__':
  app.run(main)
