"""The Kim et al. 2024 reproduction commands, end to end on a few rounds.

`reproductions.kim2024_delta_sgd.reproduce` trains its cells through the trainer and writes the tables and
figures; `reproductions.kim2024_delta_sgd.plot_step_sizes` traces one client's Delta-SGD step sizes. Both run here as
a user runs them, as subprocesses, on fmnist (the Debian package).
"""

import csv
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from reproductions import publish
from tests import trainer_processes
from tff_adaptive.run import provenance

FMNIST_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')
REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS = REPO / 'reproductions' / 'kim2024_delta_sgd' / 'results'

pytestmark = pytest.mark.skipif(
  not FMNIST_DIR.is_dir(), reason=f'{FMNIST_DIR} missing (apt-get install dataset-fashion-mnist)'
)


def _run(module, *args, timeout=600, cwd=REPO):
  """The command as a user types it in `cwd` (the repository importable from anywhere)."""
  return subprocess.run(
    [sys.executable, '-m', module, *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
    env=trainer_processes.driver_env(),
  )


def test_reproduction_runs_its_cells_and_writes_the_tables(tmp_path):
  """Typed in tmp_path with the default --out and --runs_dir: the report lands under runs/ there,
  and the committed results stay byte for byte as they were."""
  committed = publish.digests(str(RESULTS))
  out, runs = tmp_path / 'runs' / 'kim2024_table1' / 'report', tmp_path / 'runs' / 'kim2024_table1'
  args = [
    '--rows=sgd,delta_sgd',
    '--alphas=0.1',
    '--fedadam_rows=delta_sgd',
    '--rounds=2',
    '--rounds_per_eval=1',
  ]
  result = _run('reproductions.kim2024_delta_sgd.reproduce', *args, cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  assert os.listdir(tmp_path) == ['runs'] and (out / 'table1_fmnist.csv').is_file()
  assert publish.digests(str(RESULTS)) == committed and len(committed) >= 11
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
  assert f'; code version {provenance.code_version(str(REPO))}' in markdown  # and the date
  assert '## Claim check' in markdown and '--rows=sgd,delta_sgd' in markdown
  assert str(tmp_path) not in markdown  # commands with paths as typed there (relative)
  for png in ('accuracy_alpha0.1.png', 'fedadam_alpha0.1.png'):
    assert (out / png).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert 'ours_last5evals' in rows['sgd']  # targets.window_column: the last 5 evaluations
  with open(runs / 'a0.1_sgd_seed1' / 'metrics.csv', newline='') as f:
    accuracy = [float(r['eval_accuracy']) for r in csv.DictReader(f)]
  assert float(rows['sgd']['ours_last5evals']) == pytest.approx(
    100 * sum(accuracy[-5:]) / len(accuracy[-5:]), abs=0.01
  )
  # A rerun finds every cell finished and rebuilds the same table.
  again = _run('reproductions.kim2024_delta_sgd.reproduce', *args, cwd=tmp_path)
  assert again.returncode == 0, again.stdout + again.stderr
  with open(out / 'table1_fmnist.csv', newline='') as f:
    assert {r['optimizer']: r for r in csv.DictReader(f)} == rows
  # --publish with these trial settings: refused, naming them, before anything runs.
  refused = _run('reproductions.kim2024_delta_sgd.reproduce', *args, '--publish', cwd=tmp_path)
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.strip() == (
    'reproduce: error: --publish: not the committed settings '
    '(reproductions/kim2024_delta_sgd/results/publish.json): --rounds=2 (committed: 500); '
    '--alphas=0.1 (committed: 1,0.1,0.01); --rows=sgd,delta_sgd (committed: '
    'sgd,sgd_decay,sgdm,sgdm_decay,adam,adagrad,sps,delta_sgd); --extra_rows=false (committed: '
    'true); --fedadam_rows=delta_sgd (committed: all); --rounds_per_eval=1 (committed: 25); '
    'nothing was written'
  )
  assert publish.digests(str(RESULTS)) == committed


@pytest.mark.parametrize(
  'args, message',
  [
    (
      ['--publish', '--rounds=3', '--parallel=2', '--fedadam_rows=all', '--extra_rows'],
      'reproduce: error: --publish: not the committed settings (reproductions/kim2024_delta_sgd/'
      'results/publish.json): --rounds=3 (committed: 500); nothing was written',
    ),
    (
      ['--out=reproductions/kim2024_delta_sgd/results', '--rounds=500'],
      'reproduce: error: --out=reproductions/kim2024_delta_sgd/results: reproductions/'
      'kim2024_delta_sgd/results holds committed results; they are written only with --publish '
      'and the committed settings (see the README), or choose another folder',
    ),
  ],
)
def test_committed_results_are_refused_without_the_committed_settings(tmp_path, args, message):
  """With --report_only (which would write the report at once): one line, exit 2, no runs
  directory made, the committed files unchanged."""
  committed = publish.digests(str(RESULTS))
  runs = tmp_path / 'runs'
  result = _run(
    'reproductions.kim2024_delta_sgd.reproduce', *args, '--report_only', f'--runs_dir={runs}'
  )
  assert result.returncode == 2 and result.stderr.strip() == message, result.stderr
  assert not runs.exists() and publish.digests(str(RESULTS)) == committed


def test_the_documented_publish_commands_are_the_recorded_settings():
  """Each results/publish.json entry: its command is in the README, the driver accepts it
  (--dry_run: its flags and the defaults are the recorded settings) and names the committed
  path; the committed tables' own Command lines carry the same flags, less --publish."""
  entries = json.loads((RESULTS / 'publish.json').read_text())
  # reproduce_seeds: the multi-seed result of the same driver (--seeds > 1).
  # dog_pilot<rounds>: the DoG study's result per pilot length.
  assert sorted(entries) == [
    'dog_pilot100',
    'dog_pilot1000',
    'plot_step_sizes',
    'reproduce',
    'reproduce_seeds',
  ]
  readme = (REPO / 'reproductions' / 'kim2024_delta_sgd' / 'README.md').read_text()
  readme = re.sub(r' *\\\n *', ' ', readme)  # join continued lines
  for name, entry in entries.items():
    assert entry['command'] in readme, name
    command = entry['command'].split()
    module = re.sub(r'_(seeds|pilot\d+)$', '', name)
    assert command[:3] == ['.venv/bin/python', '-m', f'reproductions.kim2024_delta_sgd.{module}']
    result = _run(command[2], *command[3:], '--dry_run')
    assert result.returncode == 0, result.stderr
    assert str(REPO / entry['out']) in result.stdout
  flags = entries['reproduce']['command'].split()[3:]
  for table in ('table1_fmnist.md', 'table4_fedadam_fmnist.md'):
    text = (RESULTS / 'table1' / table).read_text()
    recorded = re.search(r'- Command: `\.venv/bin/python -m run.reproduce_kim2024 (.*)`', text)
    assert ['--publish', *recorded.group(1).split()] == flags, table


def test_several_seeds_give_the_mean_and_std_of_each_row(tmp_path):
  """--seeds=2 with --alpha_rows: every (alpha, row) runs seed 1 and 2; the table's `ours` is the
  mean of the two final accuracies in the cells' metrics.csv, `ours_std` their sample std."""
  runs, out = tmp_path / 'runs', tmp_path / 'report'
  args = [
    '--alphas=0.1,1',
    '--rows=sgd',
    '--alpha_rows=1:delta_sgd_authors_code,sgdm',
    '--fedadam_rows=',
    '--seeds=2',
    '--rounds=2',
    '--rounds_per_eval=1',
    '--parallel=2',
    f'--runs_dir={runs}',
    f'--out={out}',
  ]
  result = _run('reproductions.kim2024_delta_sgd.reproduce', *args)
  assert result.returncode == 0, result.stdout + result.stderr
  assert sorted(p.name for p in runs.iterdir() if p.is_dir()) == [
    f'a{a}_{r}_seed{s}'
    for a, r in (('0.1', 'sgd'), ('1', 'delta_sgd_authors_code'), ('1', 'sgdm'))
    for s in (1, 2)
  ]
  with open(out / 'table1_fmnist.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert [(r['alpha'], r['optimizer']) for r in rows] == [
    ('0.1', 'sgd'),
    ('1', 'delta_sgd_authors_code'),
    ('1', 'sgdm'),
  ]
  for row in rows:
    finals = []
    for seed in (1, 2):
      cell = f'a{row["alpha"]}_{row["optimizer"]}_seed{seed}'
      with open(runs / cell / 'metrics.csv', newline='') as f:
        finals.append(100 * float(list(csv.DictReader(f))[-1]['eval_accuracy']))
    mean = (finals[0] + finals[1]) / 2
    assert float(row['ours']) == pytest.approx(mean, abs=0.01)
    # the sample std of two values: |a - b| / sqrt(2)
    assert float(row['ours_std']) == pytest.approx(abs(finals[0] - finals[1]) / 2**0.5, abs=0.01)
    assert row['ours_per_seed'] == f'1:{finals[0]:.2f} 2:{finals[1]:.2f}'
    assert row['seeds'] == '2 of 2' and row['status'] == 'done' and row['rounds'] == '2'
    assert float(row['difference']) == pytest.approx(mean - float(row['published']), abs=0.02)
    assert finals[0] != finals[1]  # the seeds differ
    # the clients' mean step size over the rounds, then the seeds; none for a fixed rate
    steps = []
    for seed in (1, 2):
      cell = f'a{row["alpha"]}_{row["optimizer"]}_seed{seed}'
      with open(runs / cell / 'metrics.csv', newline='') as f:
        per_round = [r.get('client_step_size_mean') for r in csv.DictReader(f)]
      if any(per_round):
        steps.append(sum(float(v) for v in per_round) / len(per_round))
    if row['optimizer'] == 'delta_sgd_authors_code':
      assert len(steps) == 2 and float(row['step_size']) == pytest.approx(sum(steps) / 2, rel=1e-6)
    else:
      assert steps == [] and row['step_size'] == ''
  markdown = (out / 'table1_fmnist.md').read_text()
  assert 'seeds 1-2 (ours: the mean over them' in markdown
  assert "Delta-SGD with the authors' code options" in markdown
  assert (out / 'accuracy_alpha1.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert not (out / 'table4_fedadam_fmnist.csv').exists()  # --fedadam_rows= : none


@pytest.mark.parametrize(
  'flag, message',
  [
    ('--alpha_rows=1', '--alpha_rows=1: expected ALPHA:ROW,ROW,... (e.g. 1:sgdm,delta_sgd)'),
    ('--alpha_rows=0.5:sgd', '--alpha_rows: alpha 0.5 is not in --alphas (1,0.1,0.01)'),
    ('--alpha_rows=1:sgd,lamb', '--alpha_rows: unknown lamb; valid: sgd,'),
    ('--seeds=0', '--seeds=0 must be >= 1'),
    ('--alpha_rows=1:sgd --alpha_rows=1.0:sgdm', '--alpha_rows: alpha 1 is given twice'),
  ],
)
def test_bad_seeds_or_alpha_rows_are_one_line_errors(tmp_path, flag, message):
  result = _run(
    'reproductions.kim2024_delta_sgd.reproduce', *flag.split(), f'--out={tmp_path}', '--dry_run'
  )
  assert result.returncode == 2 and result.stdout == ''
  assert result.stderr.startswith(f'reproduce: error: {message}'), result.stderr
  assert len(result.stderr.strip().splitlines()) == 1


def test_reproduction_rejects_an_unknown_row(tmp_path):
  result = _run(
    'reproductions.kim2024_delta_sgd.reproduce', '--rows=sgd,lamb', f'--out={tmp_path}', '--dry_run'
  )
  assert result.returncode == 2
  assert 'lamb' in result.stderr and 'delta_sgd' in result.stderr
  assert 'Traceback' not in result.stderr


def test_step_size_plot_traces_both_gradient_options(tmp_path):
  committed = publish.digests(str(RESULTS))
  refused = _run('reproductions.kim2024_delta_sgd.plot_step_sizes', '--epochs=2', '--publish')
  assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
    'plot_step_sizes: error: --publish: not the committed settings '
    '(reproductions/kim2024_delta_sgd/results/publish.json): --epochs=2 (committed: 40); '
    'nothing was written'
  )
  png = tmp_path / 'steps.png'
  result = _run('reproductions.kim2024_delta_sgd.plot_step_sizes', '--epochs=2', f'--out={png}')
  assert result.returncode == 0, result.stdout + result.stderr
  assert publish.digests(str(RESULTS)) == committed
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
