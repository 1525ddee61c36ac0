"""Prints one line per experiment under a root output directory: its last evaluation and window.

  python -m run.summarize ROOT [--window=ROUNDS] [--targets=0.84,0.86] [--metric=eval_accuracy]

For each <ROOT>/<experiment>/metrics.csv (in name order), with R its last round and W the window
(--window, default 100 rounds: Reddi et al.'s Table 1 reports the validation metric averaged over
the last 100 rounds, and they select hyperparameters by the training loss averaged likewise):

- `rounds` (R), `window_rounds` (the rounds the window covers, min(W, R)), `window_evals` (the
  evaluations in it: W / rounds_per_eval when the run is long enough), `s/round` (the median);
- `train_loss` (round R) and `train_loss_last<W>rounds`, its mean over the rounds (R - W, R];
- every evaluated metric of the file, whatever the task's (eval_accuracy, eval_recall_at_5 for
  so_lr, eval_mse for emnist_ae, ..., then the per-client statistics eval_client_*): its value at
  the last evaluation and `<metric>_last<W>rounds`, the mean of the evaluations in the rounds
  (R - W, R] (the window counts rounds, not evaluations; `tff_adaptive.loop.targets.window_column`
  names it); the test-set metrics eval_final_* (evaluated once, after the last round) as they
  are. The trainer's running average `<metric>_avg10` (`targets.average_column`: at each
  evaluation, the evaluations of the 10 rounds up to it) is not repeated.
- A run shorter than the window (R < W) is averaged over all its rounds: its `window_rounds` is R,
  below W, and a note on stderr names it (a partial window, not Table 1's average).
- With --targets, `rounds_to_<t>`: the first round at which the 10-round running average of
  --metric reached t (FedPA's Table 3 "rounds to accuracy", `tff_adaptive.loop.targets`), empty
  if it never did.

A bad argument is one line naming the value and the valid choices, exit 2; no metrics.csv under
ROOT, exit 1.
"""

import math
import os
import re
import shutil
import sys

import pandas as pd

from tff_adaptive.loop import targets as target_lib

WINDOW_ROUNDS = 100  # Reddi et al. 2021, Table 1: the last 100 rounds
OPTIONS = ('--window', '--targets', '--metric')
USAGE = (
  'usage: python -m run.summarize ROOT_OUTPUT_DIR [--window=ROUNDS] [--targets=T1,T2] '
  '[--metric=NAME]'
)


def _is_running_average(column: str, columns: set[str]) -> bool:
  """Whether `column` is the trainer's `<metric>_avg<N>` of a metric in `columns`."""
  match = re.fullmatch(r'(.+)_avg(\d+)', column)
  return bool(match) and match.group(1) in columns


def eval_metrics(columns) -> tuple[list[str], list[str]]:
  """The evaluated metrics of a metrics.csv header, in its order: (windowed, final).

  Windowed: eval_* (the task's metrics on the validation data) then eval_client_*; final:
  eval_final_* (evaluated once, after the last round). The trainer's running averages
  (`<metric>_avg10`) are left out.
  """
  present = set(columns)
  names = [c for c in columns if c.startswith('eval_') and not _is_running_average(c, present)]
  final = [c for c in names if c.startswith('eval_final_')]
  client = [c for c in names if c.startswith('eval_client_')]
  pooled = [c for c in names if c not in final and c not in client]
  return pooled + client, final


def _history(frame: pd.DataFrame, column: str) -> list[tuple[int, float]]:
  """(round, value) of the rows where `column` has a value, in round order."""
  rows = frame.dropna(subset=[column])
  return list(zip(rows['round_num'].astype(int), rows[column].astype(float)))


def summarize_frame(
  name: str,
  frame: pd.DataFrame,
  window: int = WINDOW_ROUNDS,
  targets: tuple[float, ...] = (),
  metric: str = 'eval_accuracy',
) -> dict:
  """One experiment's row (see the module docstring) from its metrics.csv."""
  frame = frame.dropna(subset=['round_num']).sort_values('round_num')
  last = int(frame['round_num'].max())
  windowed, final = eval_metrics(list(frame.columns))
  in_window = frame[frame['round_num'] > last - window]
  row = {
    'experiment': name,
    'rounds': last,
    'window_rounds': min(window, last),
    'window_evals': int(in_window[windowed].notna().any(axis=1).sum()) if windowed else 0,
    's/round': frame['seconds_per_round'].median() if 'seconds_per_round' in frame else None,
  }
  for column in ('train_loss', *windowed):
    if column not in frame:
      continue
    history = _history(frame, column)
    if not history:
      continue
    row[column] = history[-1][1]
    average = target_lib.running_average(history, last, window)
    row[target_lib.window_column(column, window)] = average
  for column in final:
    history = _history(frame, column)
    if history:
      row[column] = history[-1][1]
  if targets:
    history = _history(frame, metric) if metric in frame else []
    for threshold in targets:
      row[f'rounds_to_{threshold:g}'] = target_lib.rounds_to_target(history, threshold)
  return row


def summarize(
  root: str,
  window: int = WINDOW_ROUNDS,
  targets: tuple[float, ...] = (),
  metric: str = 'eval_accuracy',
) -> pd.DataFrame:
  """One row per <root>/<experiment>/metrics.csv (see the module docstring).

  Raises:
    ValueError: window < 1, or `targets` given and `metric` is an evaluated column of no
      experiment (the message names the valid ones).
  """
  if window < 1:
    raise ValueError(f'--window={window}: expected a whole number of rounds >= 1')
  frames = {}
  for name in sorted(os.listdir(root)):
    path = os.path.join(root, name, 'metrics.csv')
    if os.path.exists(path):
      frame = pd.read_csv(path)
      if not frame.empty:
        frames[name] = frame
  if targets and frames:
    valid = sorted({c for f in frames.values() for c in eval_metrics(list(f.columns))[0]})
    if metric not in valid:
      raise ValueError(f'--metric={metric}: not evaluated in any run; valid: {", ".join(valid)}')
  rows = [summarize_frame(name, f, window, targets, metric) for name, f in frames.items()]
  return pd.DataFrame(rows)


def parse_args(argv: list[str]) -> tuple[str, int, tuple[float, ...], str]:
  """(root, window, thresholds, metric) from the command line; ValueError: one line."""
  options = {'--window': str(WINDOW_ROUNDS), '--targets': '', '--metric': 'eval_accuracy'}
  args = []
  for a in argv[1:]:
    name, has_value, value = a.partition('=')
    if name == '--last':
      raise ValueError(
        f'{a}: --last (the last K evaluations) was replaced by --window=ROUNDS (the evaluations '
        f'of the last ROUNDS rounds, default {WINDOW_ROUNDS})'
      )
    if name in OPTIONS:
      if not has_value:
        raise ValueError(f'{a}: give a value, {name}=...')
      options[name] = value
    elif a.startswith('-'):
      raise ValueError(f'unknown option {name}; valid: {", ".join(OPTIONS)}')
    else:
      args.append(a)
  text = options['--window']
  if not re.fullmatch(r'[0-9]+', text.strip()) or int(text) < 1:
    raise ValueError(f'--window={text}: expected a whole number of rounds >= 1')
  thresholds = []
  for t in (t for t in options['--targets'].split(',') if t.strip()):
    try:
      thresholds.append(float(t))
    except ValueError:
      raise ValueError(f'--targets: {t!r} is not a number') from None
    if not math.isfinite(thresholds[-1]):
      raise ValueError(f'--targets: {t!r} must be finite')
  if len(args) != 1:
    raise ValueError(f'expected one ROOT_OUTPUT_DIR, got {len(args)}')
  if not os.path.isdir(args[0]):
    raise ValueError(f'ROOT_OUTPUT_DIR {args[0]!r} is not a directory')
  return args[0], int(text), tuple(thresholds), options['--metric']


def main(argv: list[str]) -> int:
  try:
    root, window, thresholds, metric = parse_args(argv)
    table = summarize(root, window, thresholds, metric)
  except ValueError as e:
    print(f'summarize: {e}; {USAGE}', file=sys.stderr)
    return 2
  if table.empty:
    print(f'summarize: no metrics.csv under {root}', file=sys.stderr)
    return 1
  short = table[table['window_rounds'] < window]
  if not short.empty:
    runs = ', '.join(f'{n} ({r})' for n, r in zip(short['experiment'], short['rounds']))
    print(
      f'summarize: note: shorter than the {window}-round window, averaged over all their rounds '
      f'(window_rounds < {window}): {runs}',
      file=sys.stderr,
    )
  width = shutil.get_terminal_size((200, 24)).columns
  with pd.option_context('display.float_format', '{:.4f}'.format):
    print(table.to_string(index=False, line_width=max(width, 80)))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
