"""Client time of FedPA (dynamic program and exact solve) vs FedAvg, measured side by side.

  python -m benchmarks.fedpa_overhead [--dims=100,1000,10000,100000] [--repeats=21] [--memory]
  bazel run //benchmarks:fedpa_overhead -- --dims=100,1000 --repeats=5

Al-Shedivat et al. 2021 (FedPA), Table 1: "time a client takes to compute its update based on
5 local epochs (100 steps per epoch) on synthetic linear regression", FedAvg vs FedPA with the
dynamic program (DP, App. C) vs FedPA with the exact solve, at d = 100, 1K, 10K, 100K. Setup:
one client with n = 100 * B examples (B = 10: 100 steps per epoch), x ~ N(0, I / d),
y = x^T w* + 0.1 eps with w* ~ N(0, I), a Keras `Dense(1)` linear regression with MSE loss
(d + 1 parameters), client SGD (lr 0.05), 5 epochs. FedPA: `burnin_epochs=1` (the authors'
code), so l = 4 samples (the mean of the iterates of each later epoch), shrinkage rho = 0.01.

What is timed is the project's real client code: `algorithms.build_fedopt(...).client_update`
(FedAvg) and `algorithms.build_fedpa(...).client_update` with solver 'dp' or 'exact', each
wrapped in one `tf.function` as the in-process engine wraps it (traced once, untimed), called on
all the client's examples as tensors; `.numpy()` of every output ends a call. After `--warmup`
calls each, the variants are called in round-robin (the order rotating every repetition) so
that machine load affects them alike; the table reports the median ms per call, the relative
increase over FedAvg measured in this run, the DP's own share (FedPA-DP minus FedAvg, ms) and
the paper's numbers beside ours; below it, the quartiles of each and the median CPU time per
call (`time.process_time`: all this process's threads), less sensitive than wall time to other
jobs on the machine. The exact solve forms the d x d covariance (O(d^2) memory,
O(d^3) time): it runs only for d <= `--exact_max_dim`, and once only where one call takes more
than `--exact_once_s` seconds.

With `--memory`, the DP alone (`fedpa_math.dp_init`, `dp_update` per sample, `dp_delta`) runs
inside a `tf.function` at d = `--memory_dim` (10^6) for each l of `--memory_samples`, each in a
fresh process; the samples are drawn one at a time inside the function (as the client makes
them: one per epoch). Printed: the increase of the process's peak RSS during one call over its
RSS before the call, for the DP and for a control that draws the same samples and keeps only
their running mean (what any client keeps), vs the l d 4 bytes of O(l d) memory and the d^2 4
bytes (4 TB at 10^6) of the dense covariance of the exact solve. The peak is the kernel's
high-water mark VmHWM (/proc/self/status), reset to the current RSS just before the call
(clear_refs). It is the counter `ru_maxrss` reads, but a spawned process's `ru_maxrss` also
carries its parent's peak at exec (here the benchmark process with TF and the data loaded), so
`ru_maxrss` is only printed alongside.
"""

import collections
import multiprocessing
import os
import resource
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import algorithms
from tff_adaptive import optimizers
from tff_adaptive import runtime  # noqa: F401  (drops TFF's import-time context cleanly at exit)
from tff_adaptive.algorithms import fedpa_math
from tff_adaptive.core import seeds

_DIMS = flags.DEFINE_list('dims', ['100', '1000', '10000', '100000'], 'Model dimensions d.')
_REPEATS = flags.DEFINE_integer('repeats', 21, 'Timed calls per variant and d (round-robin).')
_WARMUP = flags.DEFINE_integer('warmup', 2, 'Untimed calls per variant first (after tracing).')
_EXACT_MAX_DIM = flags.DEFINE_integer('exact_max_dim', 10000, 'Largest d of the exact solve.')
_EXACT_ONCE_S = flags.DEFINE_float(
  'exact_once_s', 10.0, 'Time the exact solve once only where its first call takes longer.'
)
_EPOCHS = flags.DEFINE_integer('epochs', 5, 'Local epochs E (the paper: 5).')
_STEPS = flags.DEFINE_integer('steps_per_epoch', 100, 'Local steps per epoch (the paper: 100).')
_BATCH = flags.DEFINE_integer('batch_size', 10, 'Client batch size B; n = steps_per_epoch * B.')
_LR = flags.DEFINE_float('lr', 0.05, 'Client SGD learning rate.')
_SHRINKAGE = flags.DEFINE_float('shrinkage', 0.01, "FedPA's rho (the paper's form).")
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the data and the initial model.')
_MEMORY = flags.DEFINE_bool('memory', False, "Also measure the DP's peak memory at --memory_dim.")
_MEMORY_DIM = flags.DEFINE_integer('memory_dim', 1_000_000, 'd of the memory measurement.')
_MEMORY_SAMPLES = flags.DEFINE_list('memory_samples', ['4', '10'], 'l of the memory measurement.')

VARIANTS = ('fedavg', 'fedpa_dp', 'fedpa_exact')
_BURNIN_EPOCHS = 1
_UNBEARABLE_S = 120.0  # an exact-solve call slower than this is reported as unbearably slow
# Al-Shedivat et al. 2021, Table 1: ms per client update, and the increase over FedAvg the
# paper prints (its exact-solve +12% at d = 100 is 82 / 72 = +14%); None: "too slow".
PAPER_MS = {
  100: {'fedavg': 72, 'fedpa_dp': (91, 26), 'fedpa_exact': (82, 12)},
  1000: {'fedavg': 76, 'fedpa_dp': (92, 21), 'fedpa_exact': (104, 36)},
  10000: {'fedavg': 80, 'fedpa_dp': (93, 16), 'fedpa_exact': (797, 896)},
  100000: {'fedavg': 149, 'fedpa_dp': (155, 4), 'fedpa_exact': None},
}


def make_data(d: int, n: int, seed: int) -> collections.OrderedDict:
  """Synthetic linear regression: x ~ N(0, I / d), y = x^T w* + 0.1 eps, w* ~ N(0, I)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, d), dtype=np.float32) / np.float32(np.sqrt(d))
  w = rng.standard_normal((d, 1), dtype=np.float32)
  y = x @ w + np.float32(0.1) * rng.standard_normal((n, 1), dtype=np.float32)
  return collections.OrderedDict(x=tf.constant(x), y=tf.constant(y))


def make_model_fn(d: int, seed: int):
  input_spec = collections.OrderedDict(
    x=tf.TensorSpec([None, d], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
  )

  def model_fn():
    keras_model = tf.keras.Sequential(
      [
        tf.keras.Input(shape=(d,), dtype=tf.float32),
        tf.keras.layers.Dense(1, kernel_initializer=tf.keras.initializers.GlorotUniform(seed)),
      ]
    )
    return tff.learning.models.from_keras_model(
      keras_model, input_spec=input_spec, loss=tf.keras.losses.MeanSquaredError()
    )

  return model_fn


def build_client(variant: str, model_fn):
  """(one tf.function calling the variant's client_update, the workspace model it trains)."""
  client = algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig('sgd', _LR.value),
    epochs=_EPOCHS.value,
    batch_size=_BATCH.value,
  )
  server = tff.learning.optimizers.build_sgdm(1.0)
  if variant == 'fedavg':
    alg, broadcast = algorithms.build_fedopt(model_fn, client, server), ()
  else:
    hparams = algorithms.FedPAHParams(
      burnin_rounds=0,
      burnin_epochs=_BURNIN_EPOCHS,
      shrinkage=_SHRINKAGE.value,
      solver='dp' if variant == 'fedpa_dp' else 'exact',
    )
    alg = algorithms.build_fedpa(model_fn, client, server, fedpa=hparams)
    broadcast = tf.constant(True)  # past the server burn-in: FedPA deltas
  model = model_fn()  # the workspace model, created outside the traced function

  @tf.function
  def client_fn(initial_weights, data, seed, learning_rate):
    return alg.client_update(model, initial_weights, data, seed, learning_rate, broadcast, ())

  return client_fn, model


def _call(fn, args) -> tuple[float, float, algorithms.ClientOutput]:
  """Wall and CPU seconds (this process, all threads) of one call, its outputs forced to
  completion with `.numpy()`; and the outputs."""
  cpu, start = time.process_time(), time.perf_counter()
  out = tf.nest.map_structure(lambda t: t.numpy(), fn(*args))
  return time.perf_counter() - start, time.process_time() - cpu, out


def bench_dim(d: int) -> dict:
  """Builds, traces and warms up the variants at d; times them round-robin. Returns a row."""
  n = _STEPS.value * _BATCH.value
  data = make_data(d, n, _SEED.value)
  model_fn = make_model_fn(d, _SEED.value)
  variants = [v for v in VARIANTS if v != 'fedpa_exact' or d <= _EXACT_MAX_DIM.value]
  fns, args = {}, {}
  for variant in variants:
    fn, model = build_client(variant, model_fn)
    weights = tff.learning.models.ModelWeights.from_model(model)
    initial = tff.learning.models.ModelWeights(
      tuple(tf.constant(w) for w in weights.trainable),
      tuple(tf.constant(w) for w in weights.non_trainable),
    )
    args[variant] = (
      initial,
      data,
      tf.constant(seeds.client_seed(0, 1, 0, 1)),
      tf.constant(_LR.value, tf.float32),
    )
    started = time.perf_counter()
    fns[variant] = fn.get_concrete_function(*args[variant])
    print(f'  d={d} {variant}: traced in {time.perf_counter() - started:.1f} s', flush=True)

  times, cpu = {v: [] for v in variants}, {v: [] for v in variants}
  once, updates = set(), {}
  for variant in variants:
    for k in range(_WARMUP.value):
      seconds, cpu_s, out = _call(fns[variant], args[variant])
      updates[variant] = np.concatenate([np.ravel(u) for u in out.update])
      norm = float(np.linalg.norm(updates[variant]))
      ok = bool(np.all(np.isfinite(updates[variant]))) and out.weight > 0
      print(
        f'  d={d} {variant}: warm-up call {k + 1} {seconds * 1e3:.0f} ms, |update| = {norm:.3g}'
        f'{"" if ok else " NOT FINITE (weight 0)"}',
        flush=True,
      )
      if not ok:
        raise RuntimeError(f'd={d} {variant}: non-finite update; lower --lr')
      if variant == 'fedpa_exact' and seconds > _EXACT_ONCE_S.value:
        times[variant].append(seconds)  # one call is the measurement
        cpu[variant].append(cpu_s)
        once.add(variant)
        break
  if 'fedpa_exact' in updates:
    gap = np.linalg.norm(updates['fedpa_dp'] - updates['fedpa_exact'])
    print(
      f'  d={d}: |DP - exact| / |exact| = {gap / np.linalg.norm(updates["fedpa_exact"]):.2g}',
      flush=True,
    )
  repeated = [v for v in variants if v not in once]
  for rep in range(_REPEATS.value):
    k = rep % len(repeated)
    for variant in repeated[k:] + repeated[:k]:
      seconds, cpu_s, _ = _call(fns[variant], args[variant])
      times[variant].append(seconds)
      cpu[variant].append(cpu_s)
  row = {'d': d, 'calls': {v: len(times[v]) for v in variants}, 'once': once}
  for variant in variants:
    row[variant] = statistics.median(times[variant]) * 1e3
    q = np.percentile(times[variant], [25, 75]) * 1e3
    row[f'{variant}_iqr'] = (float(q[0]), float(q[1]))
    row[f'{variant}_cpu'] = statistics.median(cpu[variant]) * 1e3
  print(
    f'  d={d}: '
    + ', '.join(f'{v} {row[v]:.1f} ms ({len(times[v])} calls)' for v in variants)
    + f'; load {os.getloadavg()[0]:.2f}',
    flush=True,
  )
  return row


def _bytes(n: float) -> str:
  for unit, size in (('TB', 1e12), ('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
    if n >= size:
      return f'{n / size:.3g} {unit}'
  return f'{n:.0f} B'


def _pct(value: float, base: float) -> str:
  return f'{100.0 * (value / base - 1.0):+.0f}%'


def _paper(d: int, variant: str) -> str:
  """The paper's 'ms (+increase%)' for `variant` at d, as printed in its Table 1."""
  if d not in PAPER_MS:
    return 'n/a'
  entry = PAPER_MS[d][variant]
  if entry is None:
    return 'too slow'
  if variant == 'fedavg':
    return f'{entry}'
  return f'{entry[0]} (+{entry[1]}%)'


def format_table(rows) -> str:
  lines = [
    '| d | FedAvg ms | paper | FedPA-DP ms | paper | DP share ms | paper | FedPA-exact ms | '
    'paper |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for row in rows:
    d = row['d']
    avg, dp = row['fedavg'], row['fedpa_dp']
    if 'fedpa_exact' in row:
      exact = f'{row["fedpa_exact"]:.1f} ({_pct(row["fedpa_exact"], avg)})'
      if 'fedpa_exact' in row['once']:
        exact += ', 1 call'
      if row['fedpa_exact'] > _UNBEARABLE_S * 1e3:
        exact += f', > {_UNBEARABLE_S:.0f} s: unbearably slow'
    else:
      exact = f'skipped (d > {_EXACT_MAX_DIM.value:,}: d x d = {_bytes(4 * d * d)})'
    paper_share = (
      f'{PAPER_MS[d]["fedpa_dp"][0] - PAPER_MS[d]["fedavg"]}' if d in PAPER_MS else 'n/a'
    )
    lines.append(
      f'| {d:,} | {avg:.1f} | {_paper(d, "fedavg")} | {dp:.1f} ({_pct(dp, avg)}) | '
      f'{_paper(d, "fedpa_dp")} | {dp - avg:.1f} | {paper_share} | {exact} | '
      f'{_paper(d, "fedpa_exact")} |'
    )
  lines.append('')
  lines.append(
    'noise: interquartile range of ms per call (calls); CPU ms per call (median, this process, '
    'all threads) and its increase over FedAvg'
  )
  for row in rows:
    lines.append(
      f'  d={row["d"]:,}: '
      + ', '.join(
        f'{v} [{row[f"{v}_iqr"][0]:.1f}, {row[f"{v}_iqr"][1]:.1f}] ({row["calls"][v]}) '
        f'cpu {row[f"{v}_cpu"]:.1f}'
        + ('' if v == 'fedavg' else f' ({_pct(row[f"{v}_cpu"], row["fedavg_cpu"])})')
        for v in VARIANTS
        if v in row
      )
    )
  return '\n'.join(lines)


# -- Peak memory of the DP (each configuration in a fresh process). -----------------------------


def _status_kb(field: str) -> int:
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith(field + ':'):
        return int(line.split()[1])
  raise KeyError(field)


def memory_child(d: int, num_samples: int, use_dp: bool, rho: float) -> dict:
  """Runs in a fresh process: peak RSS increase of one call drawing l samples of a d-model.

  With `use_dp`, the samples go through `fedpa_math.dp_update` and the call returns
  `dp_delta`; otherwise (the control) only their running mean is kept. Sample j + 1 is drawn
  after sample j has been consumed (control dependency), as a client makes one per epoch.
  """
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  tf.constant(1.0).numpy()  # start the runtime before the baseline

  def run(seed):
    x0 = (tf.random.stateless_normal([d, 1], tf.stack([seed, 0])), tf.zeros([1]))
    state = fedpa_math.dp_init(x0, num_samples) if use_dp else tuple(tf.zeros_like(x) for x in x0)
    for j in range(num_samples):
      last = state.delta[0] if use_dp else state[0]
      with tf.control_dependencies([last]):
        noise = tf.random.stateless_normal([d, 1], tf.stack([seed, j + 1]))
      sample = (x0[0] + 0.01 * noise, x0[1] + 0.01)
      if use_dp:
        state = fedpa_math.dp_update(state, sample, rho)
      else:
        state = tuple(m + (s - m) / float(j + 1) for m, s in zip(state, sample))
    out = fedpa_math.dp_delta(state, rho) if use_dp else state
    return tf.add_n([tf.reduce_sum(tf.square(o)) for o in out])

  # The seed is an argument, so Grappler cannot fold the random samples into constants.
  fn = tf.function(run).get_concrete_function(tf.TensorSpec([], tf.int64))
  try:  # reset the peak (VmHWM) to the current RSS (Linux >= 4.0)
    with open('/proc/self/clear_refs', 'w') as f:
      f.write('5')
    reset = True
  except OSError:
    reset = False
  rss_before, hwm_before = _status_kb('VmRSS'), _status_kb('VmHWM')
  value = float(fn(tf.constant(_SEED_FOR_MEMORY, tf.int64)).numpy())
  hwm_after = _status_kb('VmHWM')
  return {
    'rss_before_kb': rss_before,
    'peak_kb': hwm_after,
    'rss_after_kb': _status_kb('VmRSS'),
    'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    'exact': reset and hwm_after > hwm_before,
    'finite': bool(np.isfinite(value)),
  }


_SEED_FOR_MEMORY = 7


def measure_memory(d: int, samples: list[int], rho: float) -> str:
  """Fresh process per (l, DP or control); returns the printed table."""
  context = multiprocessing.get_context('spawn')
  # The children import TF afresh: level 3 also hides its CUDA-plugin registration lines.
  os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
  results = {}
  for num_samples in samples:
    for use_dp in (True, False):
      with context.Pool(1) as pool:
        started = time.perf_counter()
        r = pool.apply(memory_child, (d, num_samples, use_dp, rho))
      name = 'DP' if use_dp else 'control'
      extra = (r['peak_kb'] - r['rss_before_kb']) / 1024
      print(
        f'  memory d={d:,} l={num_samples} {name}: RSS before {r["rss_before_kb"] / 1024:.0f} MB, '
        f'peak {r["peak_kb"] / 1024:.0f} MB (+{extra:.1f} MB), RSS after '
        f'{r["rss_after_kb"] / 1024:.0f} MB (ru_maxrss {r["maxrss_kb"] / 1024:.0f} MB); '
        f'{time.perf_counter() - started:.1f} s',
        flush=True,
      )
      if not r['finite']:
        raise RuntimeError(f'memory run d={d} l={num_samples} {name}: non-finite result')
      if not r['exact']:
        print('    (peak not reset or not raised by the call: a lower bound)', flush=True)
      results[num_samples, use_dp] = extra
  mb = 4 * d / 2**20  # one d-vector of float32
  lines = [
    f'Peak RSS increase of one call over the RSS before it (VmHWM, reset before the call; a '
    f'fresh process each), d = {d:,}, one d-vector = {mb:.3g} MB:',
    '',
    '| l | DP MB | control MB | DP - control MB | in d-vectors | l d 4 bytes MB | '
    'dense d x d (exact) |',
    '|---:|---:|---:|---:|---:|---:|---:|',
  ]
  for num_samples in samples:
    dp, control = results[num_samples, True], results[num_samples, False]
    lines.append(
      f'| {num_samples} | {dp:.1f} | {control:.1f} | {dp - control:.1f} | '
      f'{(dp - control) / mb:.1f} | {num_samples * mb:.1f} | {_bytes(4 * d * d)} |'
    )
  if len(samples) > 1:
    lo, hi = min(samples), max(samples)
    slope = (results[hi, True] - results[hi, False] - results[lo, True] + results[lo, False]) / (
      hi - lo
    )
    lines.append('')
    lines.append(
      f'DP - control grows by {slope:.1f} MB = {slope / mb:.1f} d-vectors per extra sample '
      f'(l = {lo} -> {hi}).'
    )
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  dims = [int(d) for d in _DIMS.value]
  for flag in (_REPEATS, _EPOCHS, _STEPS, _BATCH):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if _WARMUP.value < 1:
    raise app.UsageError(f'--warmup must be >= 1, got {_WARMUP.value}')
  if _EPOCHS.value <= _BURNIN_EPOCHS:
    raise app.UsageError(f'--epochs must exceed the burn-in epoch ({_BURNIN_EPOCHS})')
  num_samples = _EPOCHS.value - _BURNIN_EPOCHS
  print(
    f'synthetic linear regression, 1 client: n = {_STEPS.value * _BATCH.value} examples, '
    f'B = {_BATCH.value} ({_STEPS.value} steps/epoch), E = {_EPOCHS.value}, SGD lr {_LR.value}; '
    f'FedPA l = {num_samples}, rho = {_SHRINKAGE.value}; {_WARMUP.value} warm-up + '
    f'{_REPEATS.value} timed calls each, round-robin; TF {tf.__version__}, '
    f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}',
    flush=True,
  )
  rows = []
  for d in dims:
    started = time.perf_counter()
    rows.append(bench_dim(d))
    print(f'd={d}: done in {time.perf_counter() - started:.0f} s', file=sys.stderr, flush=True)
  print()
  print(
    'ms per client update, median over calls (ours measured side by side in one run, with the '
    'increase over FedAvg), beside Al-Shedivat et al. 2021 Table 1; DP share = FedPA-DP - FedAvg.'
  )
  print()
  print(format_table(rows))
  compared = [r for r in rows if r['d'] in PAPER_MS]
  if compared:
    verdict = [
      (r['d'], 100.0 * (r['fedpa_dp'] / r['fedavg'] - 1.0), PAPER_MS[r['d']]['fedpa_dp'][1])
      for r in compared
    ]
    ok = all(ours <= paper for _, ours, paper in verdict)
    print()
    print(
      "DP overhead at or below the paper's at every d: "
      + ('yes' if ok else 'NO')
      + ' ('
      + ', '.join(f'd={d:,}: {o:+.0f}% vs +{p}%' for d, o, p in verdict)
      + ')'
    )
  if _MEMORY.value:
    print()
    rho = fedpa_math.paper_rho(_SHRINKAGE.value, num_samples)
    print(measure_memory(_MEMORY_DIM.value, [int(s) for s in _MEMORY_SAMPLES.value], rho))
  print(f'load average at the end: {os.getloadavg()[0]:.2f}')


if __name__ == '__main__':
  app.run(main)
