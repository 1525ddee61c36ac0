"""Each DP noise change below must fail tests/aggregators/test_dp_noise.py: a mutation check of its tests.

  .venv/bin/python tools/dp_noise_mutations.py            # every mutation, about 6 minutes
  .venv/bin/python tools/dp_noise_mutations.py M1 M2      # some

Applies one source change at a time to a copy of the repository (the checkout is not touched),
runs the tests that measure that mechanism's noise, and prints which failed. Exit 1 when a
mutation passes every test (a wrong noise level the tests would not see).
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
DP = 'tff_adaptive/aggregators/dp.py'
DDP = 'tff_adaptive/aggregators/ddp.py'
NOISE = 'tff_adaptive/core/dp_noise.py'

# name -> (what it does, file, old text, new text, tests (-k) that should catch it)
MUTATIONS = {
  'M1': (
    'adaptive clip: value noise at the total z instead of z_v',
    DP,
    '      noise.value_noise_multiplier,\n      target_quantile,',
    '      noise.noise_multiplier,\n      target_quantile,',
    'adaptive',
  ),
  'M2': (
    "adaptive clip: the count's noise drawn from the value's stream",
    DP,
    '_COUNT_STREAM = 1',
    '_COUNT_STREAM = 0',
    'adaptive',
  ),
  'M3': (
    'fixed clip: the query built with 0.9 z C',
    DP,
    'noise.clip, noise.sum_stddev(), (noise_seed, _VALUE_STREAM)',
    'noise.clip, 0.9 * noise.sum_stddev(), (noise_seed, _VALUE_STREAM)',
    'fixed',
  ),
  'M4': (
    'Gaussian queries: 0.95 of the std drawn, the event still reporting the full std',
    DP,
    '        stddev=global_state.stddev,',
    '        stddev=0.95 * global_state.stddev,',
    'fixed or adaptive',
  ),
  'M5': (
    'Gaussian queries: the round counter not advanced (the same noise every round)',
    DP,
    'return result, global_state._replace(round=global_state.round + 1), event',
    'return result, global_state, event',
    'fixed or adaptive or resumed',
  ),
  'M6': (
    "adaptive clip: the count's noise at sigma_b / 2",
    DP,
    '      noise.count_noise_stddev,\n',
    '      noise.count_noise_stddev / 2,\n',
    'adaptive',
  ),
  'M7': (
    'the split computed without the count sensitivity 1/2 (the queries and the accountant agree, '
    'the paper does not)',
    NOISE,
    'return (noise_multiplier**-2 - (2 * count_stddev) ** -2) ** -0.5',
    'return (noise_multiplier**-2 - count_stddev**-2) ** -0.5',
    'adaptive',
  ),
  'M8': (
    "tree: each node's noise 0.9 z C",
    DP,
    'noise_std=noise.sum_stddev(), specs=specs',
    'noise_std=0.9 * noise.sum_stddev(), specs=specs',
    'tree',
  ),
  'M9': (
    'tree: restarted one round late',
    DP,
    'restart_query.PeriodicRoundRestartIndicator(noise.restart_rounds)',
    'restart_query.PeriodicRoundRestartIndicator(noise.restart_rounds + 1)',
    'tree',
  ),
  'M10': (
    "tree: the run's seed used as the generator's seed (runs of seeds s and s + 1 overlap)",
    DP,
    'seed=_tree_seed(noise_seed)',
    'seed=noise_seed',
    'seeds',
  ),
  'M11': (
    "Skellam: each client's share of half the variance",
    DDP,
    'lam = 0.5 * tf.cast(local_stddev, tf.float64) ** 2',
    'lam = 0.25 * tf.cast(local_stddev, tf.float64) ** 2',
    'skellam',
  ),
  'M12': (
    "Skellam: every client's share from one seed (correlated shares)",
    DDP,
    'seed = _value_seed(self._run_seed, flat, _NOISE_STREAM)',
    'seed = _value_seed(self._run_seed, tf.zeros([1]), _NOISE_STREAM)',
    'skellam',
  ),
}


def _run(name: str) -> bool:
  """True when the mutation is caught (some selected test fails)."""
  what, path, old, new, selection = MUTATIONS[name]
  with tempfile.TemporaryDirectory() as tmp:
    copy = pathlib.Path(tmp) / 'repo'
    shutil.copytree(
      REPO, copy, ignore=shutil.ignore_patterns('.venv', '.git', 'runs', 'results', '__pycache__')
    )
    source = (copy / path).read_text()
    if source.count(old) != 1:
      raise SystemExit(f'{name}: the text to change is not found once in {path}')
    (copy / path).write_text(source.replace(old, new))
    result = subprocess.run(
      [
        str(REPO / '.venv/bin/python'),
        '-m',
        'pytest',
        '-q',
        '-p',
        'no:cacheprovider',
        'tests/aggregators/test_dp_noise.py',
        '-k',
        selection,
      ],
      cwd=copy,
      capture_output=True,
      text=True,
      check=False,
    )
  failed = [line.split(' ')[1] for line in result.stdout.splitlines() if line.startswith('FAILED')]
  summary = (
    result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-300:]
  )
  caught = result.returncode != 0
  print(f'{name} {"caught" if caught else "NOT CAUGHT"}: {what}\n  {summary}')
  for test in failed:
    print(f'    {test.split("::", 1)[-1]}')
  sys.stdout.flush()
  return caught


def main(names):
  names = names or list(MUTATIONS)
  missed = [n for n in names if not _run(n)]
  if missed:
    print(f'not caught: {", ".join(missed)}')
    return 1
  print(f'all {len(names)} caught')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
