"""run.summarize on metrics.csv files written here (no training): every evaluated metric of the
task, the last-window averages (a window of rounds), short runs marked, one-line errors."""

import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tff_adaptive.loop import targets
from tff_adaptive.run import summarize

REPO = pathlib.Path(__file__).resolve().parents[2]


def _write_run(root, name, rounds, rounds_per_eval, metrics=('accuracy',), seed=0):
  """A metrics.csv as the trainer writes it: train_loss every round, eval_* (and the trainer's
  eval_<metric>_avg10) on every rounds_per_eval-th round and the last, eval_final_* once."""
  rng = np.random.default_rng(seed)
  rows = []
  for r in range(1, rounds + 1):
    row = {'round_num': r, 'train_loss': float(rng.uniform(0, 3)), 'seconds_per_round': 0.5}
    if r % rounds_per_eval == 0 or r == rounds:
      row['eval_loss'] = float(rng.uniform(0, 3))
      for m in metrics:
        row[f'eval_{m}'] = float(rng.uniform(0, 1))
        row[f'eval_{m}_avg10'] = -1.0  # the trainer's running average: not repeated
      row['eval_client_accuracy_mean'] = float(rng.uniform(0, 1))
    if r == rounds:
      row['eval_final_loss'] = 1.5
    rows.append(row)
  frame = pd.DataFrame(rows)
  os.makedirs(root / name)
  frame.to_csv(root / name / 'metrics.csv', index=False)
  return frame


def _cli(*args, columns=80):
  return subprocess.run(
    [sys.executable, '-m', 'run.summarize', *map(str, args)],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, 'COLUMNS': str(columns)},
  )


def test_so_lr_shows_recall_at_5_and_its_window_average(tmp_path):
  frame = _write_run(tmp_path, 'so_lr', 120, 1, metrics=('recall_at_5', 'macro_f1'))
  row = summarize.summarize(str(tmp_path)).iloc[0]
  last = frame[frame['round_num'] == 120].iloc[0]
  assert row['eval_recall_at_5'] == last['eval_recall_at_5']
  window = frame[frame['round_num'] > 20]['eval_recall_at_5']
  assert row['eval_recall_at_5_last100rounds'] == pytest.approx(np.mean(window), rel=1e-12)
  assert row['eval_macro_f1_last100rounds'] == pytest.approx(
    np.mean(frame[frame['round_num'] > 20]['eval_macro_f1']), rel=1e-12
  )
  assert row['eval_final_loss'] == 1.5 and 'eval_final_loss_last100rounds' not in row
  assert 'eval_accuracy' not in row and 'eval_recall_at_5_avg10' not in row
  assert 'eval_recall_at_5_avg10_last100rounds' not in row
  shown = _cli(tmp_path, '--columns=all')
  assert shown.returncode == 0, shown.stderr
  assert 'eval_recall_at_5_last100rounds' in shown.stdout and shown.stderr == ''


@pytest.mark.parametrize('rounds_per_eval, rounds, evaluations', [(1, 250, 100), (10, 250, 10)])
def test_window_average_is_the_mean_of_the_last_100_rounds(
  tmp_path, rounds_per_eval, rounds, evaluations
):
  frame = _write_run(tmp_path, 'run', rounds, rounds_per_eval)
  row = summarize.summarize(str(tmp_path)).iloc[0]
  in_window = frame[(frame['round_num'] > rounds - 100) & (frame['round_num'] <= rounds)]
  accuracy = in_window['eval_accuracy'].dropna().to_numpy()
  assert len(accuracy) == evaluations == row['window_evals']
  assert row['eval_accuracy_last100rounds'] == pytest.approx(accuracy.mean(), rel=1e-12)
  assert row['eval_loss_last100rounds'] == pytest.approx(
    in_window['eval_loss'].dropna().to_numpy().mean(), rel=1e-12
  )
  assert row['eval_client_accuracy_mean_last100rounds'] == pytest.approx(
    in_window['eval_client_accuracy_mean'].dropna().to_numpy().mean(), rel=1e-12
  )
  assert row['train_loss_last100rounds'] == pytest.approx(
    in_window['train_loss'].to_numpy().mean(), rel=1e-12
  )
  assert row['window_rounds'] == 100 and row['rounds'] == rounds
  assert targets.window_column('eval_accuracy', 100) == 'eval_accuracy_last100rounds'


def test_window_flag_and_off_cadence_last_round(tmp_path):
  """--window=30 on a run evaluated every 10 rounds whose last round, 95, is evaluated too:
  rounds (65, 95] hold the evaluations of 70, 80, 90 and 95."""
  frame = _write_run(tmp_path, 'run', 95, 10)
  row = summarize.summarize(str(tmp_path), window=30).iloc[0]
  expected = frame.set_index('round_num').loc[[70, 80, 90, 95], 'eval_accuracy'].to_numpy()
  assert row['window_evals'] == 4
  assert row['eval_accuracy_last30rounds'] == pytest.approx(expected.mean(), rel=1e-12)
  shown = _cli(tmp_path, '--window=30', '--columns=all')
  assert shown.returncode == 0 and 'eval_accuracy_last30rounds' in shown.stdout


def test_a_run_shorter_than_the_window_is_marked(tmp_path):
  short = _write_run(tmp_path, 'a_short', 40, 10)
  _write_run(tmp_path, 'b_long', 150, 10, seed=1)
  table = summarize.summarize(str(tmp_path)).set_index('experiment')
  assert table.loc['a_short', 'window_rounds'] == 40 and table.loc['b_long', 'window_rounds'] == 100
  assert table.loc['a_short', 'window_evals'] == 4
  assert table.loc['a_short', 'eval_accuracy_last100rounds'] == pytest.approx(
    short['eval_accuracy'].dropna().mean(), rel=1e-12
  )
  shown = _cli(tmp_path)
  assert shown.returncode == 0
  assert shown.stderr.strip() == (
    'summarize: note: shorter than the 100-round window, averaged over all their rounds '
    '(window_rounds < 100): a_short (40)'
  )


def test_targets_use_the_metric(tmp_path):
  """--targets with --metric=eval_recall_at_5: the first round whose 10-round running average
  reaches the threshold."""
  frame = _write_run(tmp_path, 'so_lr', 30, 1, metrics=('recall_at_5',))
  values = frame['eval_recall_at_5'].to_numpy()
  running = [values[max(0, k - 9) : k + 1].mean() for k in range(len(values))]
  threshold = float(np.median(running))
  expected = 1 + next(k for k, v in enumerate(running) if v >= threshold)
  table = summarize.summarize(str(tmp_path), targets=(threshold,), metric='eval_recall_at_5')
  assert table.iloc[0][f'rounds_to_{threshold:g}'] == expected


@pytest.mark.parametrize(
  'argument, message',
  [
    ('--window=abc', 'summarize: --window=abc: expected a whole number of rounds >= 1'),
    ('--window=0', 'summarize: --window=0: expected a whole number of rounds >= 1'),
    ('--window=-5', 'summarize: --window=-5: expected a whole number of rounds >= 1'),
    ('--last=5', 'summarize: --last=5: --last (the last K evaluations) was replaced by'),
    ('--lats=5', 'summarize: unknown option --lats; valid: --window, --targets, --metric'),
    ('--targets=x', "summarize: --targets: 'x' is not a number"),
  ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, argument, message):
  _write_run(tmp_path, 'run', 5, 1)
  result = _cli(tmp_path, argument)
  assert result.returncode == 2 and result.stdout == ''
  assert len(result.stderr.strip().splitlines()) == 1
  assert result.stderr.startswith(message), result.stderr


def test_unknown_metric_names_the_valid_ones(tmp_path):
  _write_run(tmp_path, 'so_lr', 5, 1, metrics=('recall_at_5',))
  result = _cli(tmp_path, '--targets=0.5', '--metric=eval_accuracy')
  assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
  assert result.stderr.startswith(
    'summarize: --metric=eval_accuracy: not evaluated in any run; valid: '
    'eval_client_accuracy_mean, eval_loss, eval_recall_at_5;'
  ), result.stderr


def test_window_column_names_the_unit():
  assert targets.window_column('eval_recall_at_5', 100) == 'eval_recall_at_5_last100rounds'
  assert targets.window_column('ours', 5, 'evals') == 'ours_last5evals'
  assert targets.average_column('eval_accuracy') == 'eval_accuracy_avg10'  # the trainer's
  with pytest.raises(ValueError, match='valid: rounds, evals'):
    targets.window_column('eval_loss', 5, 'steps')


def test_one_line_per_run_found_at_any_depth_within_80_columns(tmp_path):
  """The demo's layout (ROOT/demo/<experiment>/) and a reproduction's (ROOT/<study>/<cell>/):
  each run one line, its headline metric at the end and over the window, its wall time."""
  adam = _write_run(tmp_path, 'demo/fmnist_fedopt_adam_sgd_seed1_96aa93_long_name_here', 150, 10)
  _write_run(tmp_path, 'demo/fmnist_fedopt_sgd_sgd_seed1_5b064f', 150, 10, seed=1)
  shown = _cli(tmp_path)
  assert shown.returncode == 0, shown.stderr
  note, *lines = shown.stdout.splitlines()
  # Too long for 80 columns: the part every name starts with is cut and named above the table.
  assert note == '(.. stands for demo/fmnist_fedopt_ at the start)'
  assert lines[0].split() == ['experiment', 'rounds', 'eval_accuracy', 'last100', 'wall']
  assert len(lines) == 3 and max(map(len, [note, *lines])) <= 80
  first = lines[1].split()
  assert first[0] == '..adam_sgd_seed1_96aa93_long_name_here'
  window = adam[adam['round_num'] > 50]['eval_accuracy'].dropna().mean()
  assert first[1:] == [
    '150',
    f'{adam["eval_accuracy"].dropna().iloc[-1]:.4f}',
    f'{window:.4f}',
    '1:15',  # 150 rounds x 0.5 s
  ]
  # Narrower still: the common end goes too, then the middle of each name.
  narrow = _cli(tmp_path, columns=50).stdout.splitlines()
  assert max(map(len, narrow)) <= 50 and '...' in narrow[2].split()[0]
  # The same runs from inside the demo's folder; a wide terminal shows the names whole.
  wide = _cli(tmp_path / 'demo', columns=200).stdout.splitlines()
  assert wide[1].split()[0] == 'fmnist_fedopt_adam_sgd_seed1_96aa93_long_name_here'


def test_columns_sort_and_csv(tmp_path):
  a = _write_run(tmp_path, 'a', 20, 1, seed=1)
  b = _write_run(tmp_path, 'b', 20, 1, seed=2)
  lasts = {'a': a['eval_accuracy'].iloc[-1], 'b': b['eval_accuracy'].iloc[-1]}
  order = sorted(lasts, key=lasts.get, reverse=True)
  shown = _cli(tmp_path, '--window=10', '--sort=-eval_accuracy', '--columns=experiment,rounds')
  assert shown.returncode == 0, shown.stderr
  assert [line.split() for line in shown.stdout.splitlines()] == [
    ['experiment', 'rounds'],
    [order[0], '20'],
    [order[1], '20'],
  ]
  as_csv = _cli(tmp_path, '--window=10', '--csv')
  table = pd.read_csv(io.StringIO(as_csv.stdout))
  assert list(table['experiment']) == ['a', 'b']
  assert table.loc[0, 'eval_accuracy'] == pytest.approx(lasts['a'], rel=1e-12)
  assert 'eval_accuracy_last10rounds' in table.columns


@pytest.mark.parametrize(
  'argument, message',
  [
    (
      '--columns=rounds,nope',
      'summarize: --columns: unknown nope; valid: all, experiment, rounds,',
    ),
    ('--sort=nope', 'summarize: --sort=nope: no such column; valid: experiment, rounds,'),
    ('--csv=yes', 'summarize: --csv=yes: --csv takes no value'),
  ],
)
def test_bad_view_options_exit_2_with_one_line(tmp_path, argument, message):
  _write_run(tmp_path, 'run', 5, 1)
  result = _cli(tmp_path, argument)
  assert result.returncode == 2 and result.stdout == ''
  assert len(result.stderr.strip().splitlines()) == 1
  assert result.stderr.startswith(message), result.stderr


def test_help_and_an_empty_directory(tmp_path):
  shown = _cli('--help')
  assert shown.returncode == 0 and '--columns' in shown.stdout and shown.stderr == ''
  empty = _cli(tmp_path)
  assert empty.returncode == 1
  assert empty.stderr.strip() == (
    f'summarize: no metrics.csv under {tmp_path} (the trainer writes '
    '<--root_output_dir>/<experiment>/metrics.csv)'
  )
