"""The Kim et al. 2024 reproduction commands, end to end on a few rounds.

`reproductions.kim2024_delta_sgd.reproduce` trains its cells through the trainer and writes the tables and
figures; `reproductions.kim2024_delta_sgd.plot_step_sizes` traces one client's Delta-SGD step sizes. Both run here as
a user runs them, as subprocesses, on fmnist (the Debian package).
"""

import csv
import pathlib
import subprocess
import sys

import pytest

FMNIST_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')
REPO = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
  not FMNIST_DIR.is_dir(), reason=f'{FMNIST_DIR} missing (apt-get install dataset-fashion-mnist)'
)


def _run(module, *args, timeout=600):
  return subprocess.run(
    [sys.executable, '-m', module, *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )


def test_reproduction_runs_its_cells_and_writes_the_tables(tmp_path):
  out, runs = tmp_path / 'out', tmp_path / 'runs'
  args = [
    '--rows=sgd,delta_sgd',
    '--alphas=0.1',
    '--fedadam_rows=delta_sgd',
    '--rounds=2',
    '--rounds_per_eval=1',
    f'--out={out}',
    f'--runs_dir={runs}',
  ]
  result = _run('reproductions.kim2024_delta_sgd.reproduce', *args)
  assert result.returncode == 0, result.stdout + result.stderr
  with open(out / 'table1_fmnist.csv', newline='') as f:
    rows = {r['optimizer']: r for r in csv.DictReader(f)}
  assert set(rows) == {'sgd', 'delta_sgd'}
  for name, published in (('sgd', 83.6), ('delta_sgd', 86.4)):
    row = rows[name]
    assert float(row['published']) == published and row['status'] == 'done'
    assert row['rounds'] == '2' and 0 < float(row['ours']) < 100
    assert float(row['difference']) == pytest.approx(float(row['ours']) - published, abs=0.01)
    # ours is the final evaluation of the cell's metrics.csv
    with open(runs / f'a0.1_{name}_seed1' / 'metrics.csv', newline='') as f:
      last = list(csv.DictReader(f))[-1]
    assert float(row['ours']) == pytest.approx(100 * float(last['eval_accuracy']), abs=0.01)
  with open(out / 'table4_fedadam_fmnist.csv', newline='') as f:
    fedadam = list(csv.DictReader(f))
  assert [(r['optimizer'], r['published']) for r in fedadam] == [('delta_sgd', '85.8')]
  markdown = (out / 'table1_fmnist.md').read_text()
  assert '## Claim check' in markdown and '--rows=sgd,delta_sgd' in markdown
  for png in ('accuracy_alpha0.1.png', 'fedadam_alpha0.1.png'):
    assert (out / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  # A rerun finds every cell finished and rebuilds the same table.
  again = _run('reproductions.kim2024_delta_sgd.reproduce', *args)
  assert again.returncode == 0, again.stdout + again.stderr
  with open(out / 'table1_fmnist.csv', newline='') as f:
    assert {r['optimizer']: r for r in csv.DictReader(f)} == rows


def test_reproduction_rejects_an_unknown_row(tmp_path):
  result = _run(
    'reproductions.kim2024_delta_sgd.reproduce', '--rows=sgd,lamb', f'--out={tmp_path}', '--dry_run'
  )
  assert result.returncode == 2
  assert 'lamb' in result.stderr and 'delta_sgd' in result.stderr
  assert 'Traceback' not in result.stderr


def test_step_size_plot_traces_both_gradient_options(tmp_path):
  png = tmp_path / 'steps.png'
  result = _run('reproductions.kim2024_delta_sgd.plot_step_sizes', '--epochs=2', f'--out={png}')
  assert result.returncode == 0, result.stdout + result.stderr
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  with open(tmp_path / 'steps.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  # Client f0000 trains on 400 examples: 7 steps of 64 per epoch.
  assert [r['gradient'] for r in rows] == ['paper'] * 14 + ['same_batch'] * 14
  for r in rows:
    assert 0 < float(r['eta']) <= float(r['growth_candidate']) or r['local_step'] == '1'
  assert float(rows[0]['eta']) == pytest.approx(0.2)
  assert 'curvature candidate the smaller in' in result.stdout


@pytest.mark.parametrize(
  'driver, written',
  [
    ('reproductions.kim2024_delta_sgd.reproduce', 'table1_fmnist.md'),
    ('reproductions.alshedivat2021_fedpa.reproduce_fmnist', 'fedpa_fmnist.md'),
    ('reproductions.ju2023_adafedadam.reproduce_synthetic', 'table5_synthetic.md'),
  ],
)
def test_report_only_writes_the_report_without_running(tmp_path, driver, written):
  """--report_only on a runs directory with no cells yet: the tables (empty of ours), exit 0."""
  result = _run(driver, '--report_only', f'--runs_dir={tmp_path / "runs"}', f'--out={tmp_path}')
  assert result.returncode == 0, result.stderr
  assert 'Traceback' not in result.stderr
  assert (tmp_path / written).is_file()
  assert not (tmp_path / 'runs').exists() or not any((tmp_path / 'runs').iterdir())
