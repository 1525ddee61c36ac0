"""The FedExP study of the Reddi et al. folder (`reproductions.reddi2021_fedopt fedexp`), end to
end on a few rounds of the synthetic task: the eta_l search, the selection by the last-window
training loss, the seeds of the selected cell, and the table beside the committed Table 1."""

import json
import pathlib
import shlex
import statistics
import subprocess
import sys

import pytest

from reproductions import cell_runner
from reproductions import publish
from tests import trainer_processes

REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS = REPO / 'reproductions' / 'reddi2021_fedopt' / 'results'
ARGS = [
  '--task=synthetic',
  '--client_grid=-2,-1',
  '--rounds=3',
  '--window=2',
  '--seeds=2',
  '--rounds_per_eval=1',
  '--rounds_per_checkpoint=1',
]


def _run(*args, cwd):
  return subprocess.run(
    [sys.executable, '-m', 'reproductions.reddi2021_fedopt', 'fedexp', *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
    env=trainer_processes.driver_env(),
  )


def test_fedexp_is_searched_selected_and_seeded_as_table1(tmp_path):
  committed = publish.digests(str(RESULTS))
  result = _run(*ARGS, f'--runs_dir={tmp_path}/runs', f'--out={tmp_path}/out', cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  runs, out = tmp_path / 'runs', tmp_path / 'out'
  metrics = {p.parent.name: cell_runner.read_metrics(p) for p in runs.glob('*/metrics.csv')}
  # Selection: the smaller training loss averaged over rounds 2-3 (--window=2), seed 1.
  loss = {
    c: statistics.mean(float(r['train_loss']) for r in metrics[f'fedexp_c{c}_seed1'][1:])
    for c in ('-2', '-1')
  }
  best = min(loss, key=loss.get)
  assert set(metrics) == {'fedexp_c-2_seed1', 'fedexp_c-1_seed1', f'fedexp_c{best}_seed2'}
  search = {r['log10_client_lr']: r for r in cell_runner.read_metrics(out / 'search_synthetic.csv')}
  assert set(search) == {'-2', '-1'}
  for c in search:
    assert float(search[c]['train_loss_last2rounds']) == pytest.approx(loss[c], abs=1e-5)
  # FedExP's row: accuracy (%) over the evaluations of rounds 2-3, mean and std over the seeds.
  per_seed = [
    100 * statistics.mean(float(r['eval_accuracy']) for r in metrics[f'fedexp_c{best}_seed{s}'][1:])
    for s in (1, 2)
  ]
  eta_g = [float(r['fedexp_eta_g']) for s in (1, 2) for r in metrics[f'fedexp_c{best}_seed{s}']]
  assert min(eta_g) >= 1.0  # eta_g = max(1, ...)
  table = cell_runner.read_metrics(out / 'fedexp_synthetic.csv')
  assert table[0]['method'] == 'FedExP' and table[0]['log10_client_lr'] == best
  assert float(table[0]['ours']) == pytest.approx(statistics.mean(per_seed), abs=1e-3)
  assert float(table[0]['ours_std']) == pytest.approx(statistics.stdev(per_seed), abs=1e-3)
  assert float(table[0]['mean_eta_g']) == pytest.approx(statistics.mean(eta_g), rel=1e-3)
  # The committed Table 1 rows, read as they are, with FedExP minus each.
  committed_rows = cell_runner.read_metrics(
    RESULTS / 'table1' / 'synthetic' / 'table1_synthetic.csv'
  )
  assert [r['method'] for r in table[1:]] == [r['paper_name'] for r in committed_rows]
  for ours, theirs in zip(table[1:], committed_rows):
    assert float(ours['ours']) == float(theirs['ours'])
    assert float(ours['fedexp_minus_this']) == pytest.approx(
      float(table[0]['ours']) - float(theirs['ours']), abs=1e-3
    )
  markdown = (out / 'fedexp_synthetic.md').read_text()
  assert '## Does FedExP beat what is here?' in markdown and '- FedExP ' in markdown
  assert (out / 'fedexp_synthetic.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert publish.digests(str(RESULTS)) == committed


@pytest.mark.parametrize(
  'args, message',
  [
    (
      ['--task=emnist_cr'],
      'fedexp: error: flag --task=emnist_cr: value should be one of <fmnist|synthetic>; see --help',
    ),
    (['--client_grid=a,b'], 'fedexp: error: --client_grid=a,b: expected LOW,HIGH'),
    (
      ['--trainer_flags=--seed=4'],
      'fedexp: error: --trainer_flags=--seed=4: the driver sets --seed itself',
    ),
    (
      ['--publish', '--rounds=3'],
      'fedexp: error: --publish: not the committed settings (reproductions/reddi2021_fedopt/'
      'results/publish.json): --rounds=3 (committed: 300); nothing was written',
    ),
  ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
  result = _run(*args, f'--runs_dir={tmp_path}/runs', '--dry_run', cwd=REPO)
  assert result.returncode == 2 and result.stderr.strip() == message


def test_the_committed_result_records_its_command_and_settings():
  """publish.json's fedexp entry: its command is the one the committed table and the README
  quote, and the driver accepts it (a dry run passes --publish's settings check, naming the
  committed folder)."""
  entry = json.loads((RESULTS / 'publish.json').read_text())['fedexp_fmnist']
  table = (REPO / entry['out'] / 'fedexp_fmnist.md').read_text()
  assert f'- Command: `{entry["command"]}`' in table
  assert entry['command'] in (REPO / 'reproductions' / 'reddi2021_fedopt' / 'README.md').read_text()
  args = shlex.split(entry['command'].split(' -m reproductions.reddi2021_fedopt.fedexp ', 1)[1])
  result = _run(*args, '--dry_run', cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert result.stdout.rstrip().endswith(f'the report would go to {REPO / entry["out"]}')
