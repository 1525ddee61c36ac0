"""reproductions.alshedivat2021_fedpa.least_squares: FedAvg's biased vs FedPA's consistent fixed point on least squares.

Al-Shedivat et al., ICLR 2021, Sec. 3, Fig. 1, App. A. The script's closed forms are checked
against the independent float64 reference (tests/reference/fedpa_numpy.py), the Sigma_l^-1 it
recovers from fedpa_math's dynamic program against the reference's shrinkage covariance, and
the claim itself on the script's default problem: FedAvg's distance to the global optimum grows
with its local steps K, while FedPA's shrinks with its posterior samples l and at l = 500 is
far below FedAvg's bias at K = 1000 (measured: 1.36 vs 0.14 over 10 seeds, about 10x).
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from reproductions import publish
from reproductions.alshedivat2021_fedpa import least_squares as fls
from tests.reference import fedpa_numpy as ref
from tff_adaptive.algorithms import fedpa_math
from tff_adaptive.run import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, 'reproductions', 'alshedivat2021_fedpa', 'results')
DRIVER = 'reproductions.alshedivat2021_fedpa.least_squares'
K_VALUES = (1, 10, 100, 1000)
SEEDS = range(2)


def _rel(a, b) -> float:
  return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


@pytest.fixture(scope='module')
def problem():
  return fls.make_problem()  # the script's default problem


@pytest.fixture(scope='module')
def distances(problem):
  """(FedAvg over K_VALUES, FedPA [l = 5 and 500, seed]) with the script's defaults."""
  fedavg = fls.fedavg_distances(problem, K_VALUES, fls.fedavg_lr(problem.As))
  fedpa = fls.fedpa_distances(problem, [5, 500], rho=1.0, temperature=0.1, seeds=SEEDS)
  return fedavg, fedpa


def test_closed_forms_match_reference(problem):
  As, mus, q = problem.As, problem.mus, problem.weights
  opt = fls.global_optimum(As, mus, q)
  assert _rel(opt, ref.quadratic_global_optimum(As, mus, q)) < 1e-10
  # q_i = n_i and A_i = X_i^T X_i / n_i: x* is the pooled least-squares solution.
  pooled = np.linalg.lstsq(np.vstack(problem.features), np.concatenate(problem.targets), None)[0]
  assert _rel(opt, pooled) < 1e-10
  lr = fls.fedavg_lr(As)
  for k in K_VALUES:
    got = fls.fedavg_fixed_point(As, mus, q, lr, k)
    assert _rel(got, ref.fedavg_gd_fixed_point(As, mus, q, lr, k)) < 1e-10, k
  assert _rel(fls.fedavg_fixed_point(As, mus, q, lr, 1), opt) < 1e-10  # K = 1 is GD
  rng = np.random.default_rng(0)
  samples = fls.sample_local_posteriors(As, mus, 30, 0.1, rng)
  sigma_invs = [np.linalg.inv(ref.shrinkage_covariance(s, 1.0)) for s in samples]
  means = samples.mean(axis=1)
  got = fls.fedpa_fixed_point(sigma_invs, means, q)
  assert _rel(got, ref.fedpa_fixed_point(sigma_invs, means, q)) < 1e-10
  assert _rel(fls.fedpa_fixed_point([a / 0.1 for a in As], mus, q), opt) < 1e-10  # exact moments


def test_dp_recovers_inverse_shrinkage_covariance():
  rng = np.random.default_rng(1)
  d = 5
  for l in (1, 2, 4, 12):
    xs = rng.normal(size=(l, d)) * np.exp(rng.normal(size=d)) + rng.normal(size=d)
    for rho in (0.0, 0.1, 1.0, 10.0):
      # Delta(x0) = Sigma_l^-1 (x0 - mean): column j is Delta(mean + e_j).
      mean = xs.mean(axis=0)
      cols = [
        fedpa_math.posterior_delta((tf.constant(mean + e),), (tf.constant(xs),), rho)[0].numpy()
        for e in np.eye(d)
      ]
      want = np.linalg.inv(ref.shrinkage_covariance(xs, rho))
      scale = np.abs(want).max()
      assert np.abs(np.stack(cols, axis=1) - want).max() < 1e-8 * scale, (l, rho)
      if l == 12:  # the script's batched graph loop over the same DP steps (one trace)
        got = fls.dp_inverse_covariances(xs[np.newaxis], rho)[0]
        assert np.abs(got - want).max() < 1e-8 * scale, (l, rho)


def test_fedavg_bias_grows_with_local_steps_fedpa_beats_it(distances):
  fedavg, fedpa = distances
  assert fedavg[0] < 1e-10  # K = 1: the optimum
  assert np.all(np.diff(fedavg) > 0), fedavg
  # Measured with these 2 seeds: FedAvg K = 1000 1.36, FedPA l = 500 0.133 (10x).
  assert fedavg[-1] >= 5 * fedpa[1].mean(), (fedavg, fedpa.mean(axis=1))


def test_fedpa_improves_with_samples(distances):
  _, fedpa = distances
  # Measured with these 2 seeds: l = 5 1.36, l = 500 0.133.
  assert fedpa[1].mean() < 0.5 * fedpa[0].mean(), fedpa.mean(axis=1)


def _script(*args, cwd=ROOT, timeout=300):
  """The script as a user runs it (from `cwd`, the repository importable)."""
  return subprocess.run(
    [sys.executable, '-m', DRIVER, *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=timeout,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=ROOT),
  )


def test_script_writes_figure(tmp_path):
  """A short run with the default --out writes under runs/ of the current directory, and the
  committed results stay byte for byte as they were."""
  committed = publish.digests(RESULTS)
  args = ['--dim=3', '--clients=3', '--k_values=1,10', '--l_values=5', '--seeds=2']
  args += ['--rounds=2', '--epochs=3']  # panel (b): both algorithms, 2 rounds
  result = _script(*args, cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  out = tmp_path / 'runs' / 'fedpa_least_squares'
  assert sorted(os.listdir(tmp_path)) == ['runs']
  assert (out / 'fedpa_least_squares.png').stat().st_size > 10_000
  rows = rows_csv = (out / 'distances.csv').read_text().splitlines()
  assert rows[0].startswith('method,K_or_l,distance')
  assert [r.split(',')[:2] for r in rows[1:4]] == [
    ['fedavg', '1'],
    ['fedavg', '10'],
    ['fedpa', '5'],
  ]
  rows = (out / 'rounds.csv').read_text().splitlines()
  assert rows[0] == 'round,FedAvg,FedPA' and len(rows) == 4
  # The same distances as a table, under what wrote them.
  markdown = (out / 'least_squares.md').read_text()
  assert '- Command: `' in markdown and '--clients=3' in markdown and str(tmp_path) not in markdown
  assert f'; code version {provenance.code_version(ROOT)}' in markdown  # and the date
  distances = {r.split(',')[0] + r.split(',')[1]: r.split(',')[2] for r in rows_csv[1:]}
  assert f'| FedAvg, K = 10 | {float(distances["fedavg10"]):.4g} |' in markdown
  assert f'| FedPA, l = 5 | {float(distances["fedpa5"]):.4g} |' in markdown
  assert 'Panel (b), the algorithms, 2 rounds' in markdown
  assert np.isfinite(np.array([r.split(',') for r in rows[1:]], float)).all()
  assert 'FedPA' in result.stdout and 'wrote' in result.stdout
  assert publish.digests(RESULTS) == committed and len(committed) >= 4


def test_publish_with_other_settings_is_refused(tmp_path):
  """--publish with a trial's settings: one line naming each differing setting and its
  committed value, exit 2, nothing written (it stops before computing anything)."""
  committed = publish.digests(RESULTS)
  result = _script('--publish', '--rounds=2', '--seeds=2', '--dim=10', cwd=tmp_path)
  assert result.returncode == 2 and result.stdout == ''
  assert result.stderr.strip() == (
    'least_squares: error: --publish: not the committed settings '
    '(reproductions/alshedivat2021_fedpa/results/publish.json): --seeds=2 (committed: 10); '
    '--rounds=2 (committed: 30); nothing was written'
  )
  assert publish.digests(RESULTS) == committed and os.listdir(tmp_path) == []


@pytest.mark.parametrize(
  'out',
  [
    'reproductions/alshedivat2021_fedpa/results/least_squares',
    'reproductions/alshedivat2021_fedpa/results',
  ],
)
def test_out_into_the_committed_folder_is_refused(out):
  committed = publish.digests(RESULTS)
  result = _script(f'--out={out}', '--rounds=2')
  assert result.returncode == 2
  assert result.stderr.strip() == (
    f'least_squares: error: --out={out}: reproductions/alshedivat2021_fedpa/results holds '
    'committed results; they are written only with --publish and the committed settings (see '
    'the README), or choose another folder'
  )
  assert publish.digests(RESULTS) == committed


def test_the_documented_publish_commands_are_the_recorded_settings():
  """Each publish.json entry of the paper: its command is in the README, --dry_run of it is
  accepted (so its flags and the defaults are the recorded settings) and names the committed
  folder; the committed tables' own Command lines carry the same flags (less --publish)."""
  with open(os.path.join(RESULTS, 'publish.json')) as f:
    entries = json.load(f)
  assert sorted(entries) == [
    'least_squares',
    'regimes_fmnist',
    'regimes_synthetic',
    'reproduce_fmnist',
  ]
  readme = open(os.path.join(ROOT, 'reproductions', 'alshedivat2021_fedpa', 'README.md')).read()
  readme = re.sub(r' *\\\n *', ' ', readme)  # join continued lines
  for name, entry in entries.items():
    command = entry['command'].split()
    assert entry['command'] in readme, name
    # regimes_<task>: regimes --task=<task>
    module = 'regimes' if name.startswith('regimes_') else name
    assert command[:3] == ['.venv/bin/python', '-m', f'reproductions.alshedivat2021_fedpa.{module}']
    result = subprocess.run(
      [sys.executable, *command[1:], '--dry_run'],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
    )
    assert result.returncode == 0, result.stderr
    assert os.path.join(ROOT, entry['out']) in result.stdout
  table = open(os.path.join(RESULTS, 'fmnist', 'fedpa_fmnist.md')).read()
  recorded = re.search(r'- Command: `python -m run.reproduce_fedpa_fmnist (.*)`', table).group(1)
  flags = entries['reproduce_fmnist']['command'].split()[3:]
  assert ['--publish', *recorded.split()] == flags


def test_publish_module_rules(monkeypatch, tmp_path):
  """Which paths are committed, how values compare, and the refusals, on the real records."""
  results = os.path.join(ROOT, 'reproductions', 'kim2024_delta_sgd', 'results')
  assert publish.committed_folder(os.path.join(results, 'new', 'x.png')) == results
  assert publish.committed_folder(os.path.join(ROOT, 'reproductions', 'kim2024_delta_sgd')) is None
  assert publish.committed_folder(os.path.join(ROOT, 'runs', 'results')) is None
  link = tmp_path / 'link'
  link.symlink_to(results)
  assert publish.committed_folder(str(link / 'table1_fmnist.md')) == results  # another spelling
  assert publish.same(['1', '2'], ['1', '2']) and not publish.same(['1'], ['1', '2'])
  assert publish.same(0.1, 0.1) and publish.same(30, 30.0) and not publish.same(True, 1)
  assert publish.differences({'rounds': 3, 'extra': 1}, {'rounds': 500, 'seed': 1}) == [
    '--rounds=3 (committed: 500)',
    '--extra=1 (not in the record)',
    '--seed (recorded, not a flag of the driver)',
  ]
  settings = {
    'dim': 10,
    'clients': 10,
    'problem_seed': 0,
    'k_values': ['1', '10', '100', '1000'],
    'l_values': ['2', '5', '10', '20', '50', '100', '500'],
    'seeds': 10,
    'rho': 1.0,
    'temperature': 0.1,
    'rounds': 30,
    'epochs': 51,
  }
  kwargs = dict(publish=True, explicit=False, settings=settings)
  target = os.path.join(ROOT, 'reproductions', 'alshedivat2021_fedpa', 'results', 'least_squares')
  assert publish.output(DRIVER, 'runs/x', **kwargs) == target
  monkeypatch.chdir(tmp_path)
  assert publish.output(DRIVER, 'runs/x', **{**kwargs, 'publish': False}) == str(
    tmp_path / 'runs/x'
  )
  with pytest.raises(
    publish.PublishError, match=r'^--publish writes to .*least_squares, not --out=y'
  ):
    publish.output(DRIVER, 'y', **{**kwargs, 'explicit': True})
  with pytest.raises(publish.PublishError, match=r'--epochs=3 \(committed: 51\); nothing was'):
    publish.output(DRIVER, 'runs/x', **{**kwargs, 'settings': {**settings, 'epochs': 3}})
  with pytest.raises(publish.PublishError, match='has no committed result'):
    publish.output('reproductions.reddi2021_fedopt.reproduce', 'x', **kwargs)
