"""The DoG study of the Kim et al. folder (`reproductions.kim2024_delta_sgd dog`), end to end on a
few rounds of fmnist: the reps_rel pilot, its selection by the last-window training loss, the
selected cell's seeds, and the table beside the committed multi-seed Table 1."""

import pathlib
import statistics
import subprocess
import sys

import pytest

from reproductions import cell_runner
from reproductions import publish
from tests import trainer_processes

FMNIST_DIR = pathlib.Path('/usr/share/datasets/fashion-mnist')
REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS = REPO / 'reproductions' / 'kim2024_delta_sgd' / 'results'
ARGS = [
  '--optimizers=dog',
  '--reps_grid=1e-2,1e-1',
  '--pilot_rounds=2',
  '--pilot_window=2',
  '--rounds=3',
  '--seeds=2',
  '--rounds_per_eval=1',
  '--rounds_per_checkpoint=1',
]


def _run(*args, cwd):
  return subprocess.run(
    [sys.executable, '-m', 'reproductions.kim2024_delta_sgd', 'dog', *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
    env=trainer_processes.driver_env(),
  )


@pytest.mark.skipif(not FMNIST_DIR.is_dir(), reason=f'{FMNIST_DIR} missing')
def test_dog_is_piloted_selected_and_seeded_beside_table1(tmp_path):
  committed = publish.digests(str(RESULTS))
  result = _run(*ARGS, f'--runs_dir={tmp_path}/runs', f'--out={tmp_path}/out', cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  runs, out = tmp_path / 'runs', tmp_path / 'out'
  metrics = {p.parent.name: cell_runner.read_metrics(p) for p in runs.glob('*/metrics.csv')}
  # Selection: the smaller pilot training loss over its 2 rounds.
  loss = {
    reps: statistics.mean(
      float(r['train_loss']) for r in metrics[f'pilot2_a0.1_dog_reps{reps}_seed1']
    )
    for reps in ('1e-2', '1e-1')
  }
  best = min(loss, key=loss.get)
  assert set(metrics) == {
    'pilot2_a0.1_dog_reps1e-2_seed1',
    'pilot2_a0.1_dog_reps1e-1_seed1',
    f'a0.1_dog_reps{best}_seed1',
    f'a0.1_dog_reps{best}_seed2',
  }
  pilot = {r['reps_rel']: r for r in cell_runner.read_metrics(out / 'pilot_fmnist.csv')}
  assert float(pilot['1e-2']['train_loss_window']) == pytest.approx(loss['1e-2'], abs=1e-4)
  assert [r for r in pilot if pilot[r]['selected'] == 'yes'] == [best]
  # DoG's row: the final accuracy (%) of each seed, their mean and sample std.
  finals = [
    100 * float(metrics[f'a0.1_dog_reps{best}_seed{s}'][-1]['eval_accuracy']) for s in (1, 2)
  ]
  assert all(len(metrics[f'a0.1_dog_reps{best}_seed{s}']) == 3 for s in (1, 2))
  table = cell_runner.read_metrics(out / 'dog_fmnist.csv')
  assert table[0]['optimizer'] == f'dog (reps_rel {best})' and table[0]['published'] == ''
  assert float(table[0]['ours']) == pytest.approx(statistics.mean(finals), abs=0.01)
  assert float(table[0]['ours_std']) == pytest.approx(statistics.stdev(finals), abs=0.01)
  # Then the committed rows of alpha 0.1, as they are.
  committed_rows = [
    r
    for r in cell_runner.read_metrics(RESULTS / 'table1' / 'seeds' / 'table1_fmnist.csv')
    if r['alpha'] == '0.1'
  ]
  assert [(r['optimizer'], r['ours']) for r in table[1:]] == [
    (r['optimizer'], r['ours']) for r in committed_rows
  ]
  assert dict((r['optimizer'], r['ours']) for r in table[1:])['delta_sgd'] == '83.76'
  markdown = (out / 'dog_fmnist.md').read_text()
  assert '## Does DoG beat what is here?' in markdown
  assert f'- alpha 0.1: dog (reps_rel {best}) ' in markdown and ' delta_sgd 83.76 ' in markdown
  assert (out / 'accuracy_alpha0.1.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert publish.digests(str(RESULTS)) == committed


@pytest.mark.parametrize(
  'args, message',
  [
    (['--optimizers=sgd'], 'dog: error: --optimizers: unknown sgd; valid: dog, ldog'),
    (
      ['--alphas=0.5'],
      "dog: error: --alphas: '0.5' has no committed Table 1 column; valid: 1, 0.1, 0.01",
    ),
    (['--reps_grid=0'], "dog: error: --reps_grid: '0' is not a number > 0"),
    (
      ['--publish', '--rounds=3'],
      'dog: error: --publish: not the committed settings (reproductions/kim2024_delta_sgd/'
      'results/publish.json): --rounds=3 (committed: 1000); nothing was written',
    ),
  ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
  result = _run(*args, f'--runs_dir={tmp_path}/runs', '--dry_run', cwd=REPO)
  assert result.returncode == 2 and result.stderr.strip() == message
