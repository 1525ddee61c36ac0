"""Tests of reproductions/ju2023_adafedadam/plot_fairness.py: the fairness numbers, the density estimate, and the CLI."""

import math
import os
import pathlib
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from reproductions import publish
from reproductions.ju2023_adafedadam import plot_fairness

_REPO = pathlib.Path(__file__).resolve().parents[2]
_PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def _write_run(run_dir: pathlib.Path, per_round: dict[int, list[float]], rounds: int) -> None:
  """A fake trainer run: client_eval/round_NNNNN.csv per evaluation round and metrics.csv with
  the client-accuracy columns filled on those rounds only (empty on the others)."""
  (run_dir / 'client_eval').mkdir(parents=True)
  rows = []
  for r in range(1, rounds + 1):
    row = {'round_num': r, 'train_loss': 1.0 / r}
    if r in per_round:
      acc = np.asarray(per_round[r])
      pd.DataFrame(
        {'client_id': [f'c{k}' for k in range(acc.size)], 'loss': 1.0 - acc, 'accuracy': acc}
      ).to_csv(run_dir / 'client_eval' / f'round_{r:05d}.csv', index=False)
      stats = plot_fairness.fairness_stats(acc)
      row['eval_client_accuracy_mean'] = stats['avg'] / 100
      row['eval_client_accuracy_std'] = stats['std'] / 100
      row['eval_client_accuracy_worst30'] = stats['worst30'] / 100
    rows.append(row)
  pd.DataFrame(rows).to_csv(run_dir / 'metrics.csv', index=False)


def test_fairness_stats_hand_computed():
  stats = plot_fairness.fairness_stats(np.array([0.9, 0.5, 1.0, 0.7]))
  assert stats['avg'] == pytest.approx(77.5)  # (0.5 + 0.7 + 0.9 + 1.0) / 4
  # K = 4: ceil(0.3 * 4) = ceil(1.2) = 2 lowest, (0.5 + 0.7) / 2.
  assert stats['worst30'] == pytest.approx(60.0)
  # Errors e = (0.5, 0.3, 0.1, 0.0), mean 0.225; deviations (0.275, 0.075, -0.125, -0.225),
  # squares sum to 0.1475, population variance 0.1475 / 4 = 0.036875 (the accuracies' too).
  assert stats['error_mean'] == pytest.approx(0.225)
  assert stats['std'] == pytest.approx(100 * math.sqrt(0.036875))
  assert stats['error_rsd'] == pytest.approx(math.sqrt(0.036875) / 0.225)  # 0.19203 / 0.225
  assert stats['error_rsd'] == pytest.approx(0.853461, abs=1e-6)


def test_fairness_stats_worst30_takes_at_least_one_client_and_rounds_up():
  # K = 1, 3: ceil(0.3), ceil(0.9) = 1 client; K = 7: ceil(2.1) = 3 clients.
  assert plot_fairness.fairness_stats([0.4])['worst30'] == pytest.approx(40.0)
  assert plot_fairness.fairness_stats([0.9, 0.2, 0.6])['worst30'] == pytest.approx(20.0)
  seven = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
  assert plot_fairness.fairness_stats(seven)['worst30'] == pytest.approx(20.0)


def test_fairness_stats_rsd_is_zero_without_errors():
  stats = plot_fairness.fairness_stats([1.0, 1.0, 1.0])
  assert stats['error_mean'] == 0.0
  assert stats['error_rsd'] == 0.0
  assert stats['std'] == 0.0


def test_fairness_stats_rejects_no_clients():
  with pytest.raises(ValueError, match='at least one'):
    plot_fairness.fairness_stats([])


def test_fairness_stats_agrees_with_the_trainers_summary():
  """The worst-30% rule is the one behind metrics.csv's eval_client_accuracy_* columns."""
  from tff_adaptive.loop import evaluation  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  for k in (1, 4, 7, 10, 33, 100):
    acc = rng.uniform(0.2, 1.0, size=k)
    ours = plot_fairness.fairness_stats(acc)
    theirs = evaluation.distribution_summary(acc)
    for key in ('mean', 'std', 'worst30'):
      assert ours['avg' if key == 'mean' else key] == pytest.approx(100 * theirs[key]), (k, key)


def test_silverman_bandwidth_closed_form():
  # x = 0..4: sample std sqrt(10 / 4) = 1.581; IQR 3 - 1 = 2, 2 / 1.34 = 1.493 is smaller;
  # h = 0.9 * 1.493 * 5^(-1/5).
  h = plot_fairness.silverman_bandwidth(np.arange(5.0), floor=0.0)
  assert h == pytest.approx(0.9 * (2 / 1.34) * 5**-0.2)


def test_silverman_bandwidth_floor_for_identical_values():
  assert plot_fairness.silverman_bandwidth([70.0, 70.0, 70.0]) == plot_fairness.MIN_BANDWIDTH
  # IQR 0 but a nonzero std: the std is used, not the floor.
  h = plot_fairness.silverman_bandwidth([50.0] * 9 + [90.0], floor=0.0)
  assert h == pytest.approx(0.9 * np.std([50.0] * 9 + [90.0], ddof=1) * 10**-0.2)


@pytest.mark.parametrize(
  'samples', [[50.0, 60.0, 60.0, 90.0, 12.5], [70.0, 70.0, 70.0], [100.0] * 5 + [0.0] * 2]
)
def test_kernel_density_integrates_to_one(samples):
  grid = np.linspace(-200.0, 300.0, 50001)
  density = plot_fairness.kernel_density(np.array(samples), grid)
  assert np.all(density >= 0)
  assert np.trapz(density, grid) == pytest.approx(1.0, abs=1e-6)


def test_kernel_density_of_one_sample_is_a_normal_density():
  grid = np.array([10.0, 12.0])
  density = plot_fairness.kernel_density(np.array([10.0]), grid, bandwidth=2.0)
  # phi(0) / 2 and phi(1) / 2.
  expected = np.exp(-0.5 * np.array([0.0, 1.0])) / (2.0 * math.sqrt(2 * math.pi))
  np.testing.assert_allclose(density, expected, rtol=1e-12)


def test_client_accuracies_takes_the_latest_round(tmp_path):
  run_dir = tmp_path / 'run'
  _write_run(run_dir, {2: [0.1, 0.2], 4: [0.3, 0.4, 0.5], 10: [0.6, 0.7]}, rounds=10)
  (run_dir / 'client_eval' / 'round_00012.csv.tmp').write_text('client_id,loss,accuracy\n')
  np.testing.assert_allclose(plot_fairness.client_accuracies(run_dir), [0.6, 0.7])
  np.testing.assert_allclose(plot_fairness.client_accuracies(str(run_dir), 4), [0.3, 0.4, 0.5])
  with pytest.raises(ValueError, match='round 3'):
    plot_fairness.client_accuracies(run_dir, 3)


def test_client_accuracies_names_the_directory_without_files(tmp_path):
  with pytest.raises(ValueError, match=f'{tmp_path}: no client_eval'):
    plot_fairness.client_accuracies(tmp_path)
  with pytest.raises(ValueError, match='no such run directory'):
    plot_fairness.client_accuracies(tmp_path / 'missing')


def test_eval_curve_drops_non_eval_rows_and_keeps_rounds_of_every_run():
  nan = float('nan')
  a = pd.DataFrame({'round_num': [1, 2, 3, 4], 'eval_client_accuracy_mean': [nan, 0.2, nan, 0.4]})
  b = pd.DataFrame({'round': [2, 4, 6], 'eval_client_accuracy_mean': [0.4, 0.6, 0.8]})
  curve = plot_fairness.eval_curve([a, b], 'eval_client_accuracy_mean')
  assert list(curve.index) == [2, 4]
  np.testing.assert_allclose(curve['mean'], [0.3, 0.5])
  np.testing.assert_allclose(curve['min'], [0.2, 0.4])
  np.testing.assert_allclose(curve['max'], [0.4, 0.6])
  with pytest.raises(ValueError, match='eval_client_accuracy_worst30'):
    plot_fairness.eval_curve([a], 'eval_client_accuracy_worst30')


def test_pareto_front_is_sorted_by_alpha(tmp_path, monkeypatch):
  drawn = []
  save = plot_fairness._save
  monkeypatch.setattr(
    plot_fairness, '_save', lambda fig, path: (drawn.append(fig), save(fig, path))
  )
  points = [
    {'label': 'AdaFedAdam(alpha=4)', 'alpha': 4.0, 'error_mean': 0.3, 'error_rsd': 0.5},
    {'label': 'FedAvg', 'error_mean': 0.25, 'error_rsd': 2.0},
    {'label': 'AdaFedAdam(alpha=1)', 'alpha': 1.0, 'error_mean': 0.1, 'error_rsd': 3.0},
    {'label': 'AdaFedAdam(alpha=2)', 'alpha': 2.0, 'error_mean': 0.2, 'error_rsd': 1.0},
    {'label': 'FedProx', 'alpha': None, 'error_mean': 0.22, 'error_rsd': 1.5},
  ]
  plot_fairness.pareto_figure(points, tmp_path / 'pareto.png')
  (ax,) = drawn[0].axes
  front, fedavg, fedprox = ax.lines
  np.testing.assert_allclose(front.get_xdata(), [0.1, 0.2, 0.3])
  np.testing.assert_allclose(front.get_ydata(), [3.0, 1.0, 0.5])
  assert [t.get_text() for t in ax.texts] == ['alpha=1', 'alpha=2', 'alpha=4']
  legend = [t.get_text() for t in ax.get_legend().get_texts()]
  assert legend == ['AdaFedAdam', 'FedAvg', 'FedProx']
  assert (tmp_path / 'pareto.png').read_bytes().startswith(_PNG_MAGIC)
  assert not plt.get_fignums()


def test_figures_are_written_and_closed(tmp_path):
  run_dir = tmp_path / 'run'
  _write_run(run_dir, {2: [0.5, 0.9], 4: [0.6, 1.0, 0.8]}, rounds=4)
  frame = pd.read_csv(run_dir / 'metrics.csv')
  accuracies = plot_fairness.client_accuracies(run_dir)
  plot_fairness.density_figure({'FedAvg': [accuracies, accuracies]}, tmp_path / 'd' / 'a.png')
  plot_fairness.curves_figure({'FedAvg': [frame]}, tmp_path / 'c.png', setup='SYNTHETIC')
  for name in ('d/a.png', 'c.png'):
    assert (tmp_path / name).read_bytes().startswith(_PNG_MAGIC)
  assert not plt.get_fignums()
  with pytest.raises(ValueError, match='no runs'):
    plot_fairness.density_figure({'FedAvg': []}, tmp_path / 'e.png')
  assert not plt.get_fignums()


def test_parse_group():
  assert plot_fairness.parse_group('FedAvg=a:b/c') == ('FedAvg', None, ['a', 'b/c'])
  assert plot_fairness.parse_group('AdaFedAdam(alpha=2)=runs/lr=1') == (
    'AdaFedAdam(alpha=2)',
    2.0,
    ['runs/lr=1'],
  )
  for bad in ('FedAvg', '=a', 'FedAvg=', 'FedAvg=a::b', 'A(alpha=2=a'):
    with pytest.raises(ValueError, match='LABEL=RUN_DIR'):
      plot_fairness.parse_group(bad)
  with pytest.raises(ValueError, match='not a number'):
    plot_fairness.parse_group('A(alpha=x)=a')


def _cli(*args):
  return subprocess.run(
    [sys.executable, '-m', 'reproductions.ju2023_adafedadam.plot_fairness', *map(str, args)],
    cwd=_REPO,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, 'MPLBACKEND': 'Agg'},
  )


def test_cli_writes_the_three_figures(tmp_path):
  runs = {
    'fedavg_1': {5: [0.5, 0.6, 0.7], 10: [0.5, 0.7, 0.9, 1.0]},
    'fedavg_2': {5: [0.4, 0.6], 10: [0.6, 0.8]},
    'ada1': {5: [0.7, 0.7], 10: [0.8, 0.9]},
    'ada2': {5: [0.6, 0.8], 10: [0.75, 0.95]},
  }
  for name, per_round in runs.items():
    _write_run(tmp_path / name, per_round, rounds=10)
  out = tmp_path / 'figures'
  result = _cli(
    out,
    f'FedAvg={tmp_path / "fedavg_1"}:{tmp_path / "fedavg_2"}',
    f'AdaFedAdam(alpha=2)={tmp_path / "ada2"}',
    f'AdaFedAdam(alpha=1)={tmp_path / "ada1"}',
    '--setup=SYNTHETIC',
  )
  assert result.returncode == 0, result.stderr
  for name in ('density.png', 'curves.png', 'pareto.png'):
    data = (out / name).read_bytes()
    assert len(data) > 1000 and data.startswith(_PNG_MAGIC), name
  lines = result.stdout.splitlines()
  assert [line.split(':')[0] for line in lines] == [
    'FedAvg',
    'AdaFedAdam(alpha=2)',
    'AdaFedAdam(alpha=1)',
  ]
  # FedAvg's round-10 averages: 77.5 (the hand-computed example) and 70.0; mean 73.75, sample
  # std |77.5 - 70| / sqrt(2) = 5.30.
  assert 'runs=2 clients=2,4 avg=73.75+-5.30 ' in lines[0]
  assert 'runs=1 clients=2 avg=85.00 ' in lines[1]


def test_cli_missing_directory_exits_2_with_one_line(tmp_path):
  missing = tmp_path / 'no_such_run'
  result = _cli(tmp_path / 'out', f'FedAvg={missing}')
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert str(missing) in result.stderr
  assert 'Traceback' not in result.stderr
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('make_run', [False, True])
def test_cli_usage_errors_exit_2_with_one_line(tmp_path, make_run):
  if make_run:  # a run directory without client_eval files
    (tmp_path / 'run').mkdir()
    args = [f'FedAvg={tmp_path / "run"}']
  else:  # no '=' in the group
    args = ['FedAvg']
  result = _cli(tmp_path / 'out', *args)
  assert result.returncode == 2
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert ('client_eval' if make_run else 'LABEL=RUN_DIR') in result.stderr


def test_cli_refuses_a_committed_results_folder(tmp_path):
  """OUT_DIR inside reproductions/<paper>/results (the committed figures are the driver's, written
  only by its --publish): one line, exit 2, the committed files unchanged."""
  _write_run(tmp_path / 'run', {5: [0.5, 0.7]}, rounds=5)
  committed = _REPO / 'reproductions' / 'ju2023_adafedadam' / 'results'
  before = publish.digests(str(committed))
  result = _cli(committed / 'table5' / 'synthetic', f'FedAvg={tmp_path / "run"}')
  assert result.returncode == 2 and result.stdout == ''
  assert result.stderr.strip() == (
    f'plot_fairness: error: OUT_DIR {committed / "table5" / "synthetic"}: '
    'reproductions/ju2023_adafedadam/results holds committed results, written only by their '
    'drivers with --publish; choose another folder'
  )
  assert publish.digests(str(committed)) == before and 'table5/synthetic/curves.png' in before
