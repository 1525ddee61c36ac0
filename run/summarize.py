"""Prints one line per experiment under a root output directory: its last evaluation.

  python -m run.summarize results/demo [--last=K] [--targets=0.84,0.86] [--metric=eval_accuracy]

For each <root>/<experiment>/metrics.csv: rounds trained, the final train loss, and the
eval_* metrics of the last evaluated round (and their mean over the last K evaluations,
the "average of the last 100 rounds" style of Reddi et al. Table 1 when evaluating every round).
With --targets, `rounds_to_<t>`: the first round at which the 10-round running average of
--metric reached t (FedPA's Table 3 "rounds to accuracy", `tff_adaptive.loop.targets`), empty if
it never did.
"""

import math
import os
import sys

import pandas as pd

from tff_adaptive.loop import targets as target_lib

SHOWN = (
  'eval_loss',
  'eval_accuracy',
  'eval_client_accuracy_mean',
  'eval_client_accuracy_std',
  'eval_client_accuracy_worst30',
)


def summarize(
  root: str, last: int = 5, targets: tuple[float, ...] = (), metric: str = 'eval_accuracy'
) -> pd.DataFrame:
  rows = []
  for name in sorted(os.listdir(root)):
    path = os.path.join(root, name, 'metrics.csv')
    if not os.path.exists(path):
      continue
    frame = pd.read_csv(path)
    if frame.empty:
      continue
    evals = frame.dropna(subset=['eval_loss']) if 'eval_loss' in frame else frame.iloc[:0]
    row = {
      'experiment': name,
      'rounds': int(frame['round_num'].max()),
      'train_loss': frame['train_loss'].iloc[-1],
      's/round': frame['seconds_per_round'].median(),
    }
    for column in SHOWN:
      if column in evals and not evals.empty:
        row[column] = evals[column].iloc[-1]
        row[f'{column}_last{last}'] = evals[column].tail(last).mean()
    if targets:
      history = []
      if metric in frame:
        evaluated = frame.dropna(subset=[metric]).sort_values('round_num')
        history = list(zip(evaluated['round_num'].astype(int), evaluated[metric].astype(float)))
      for threshold in targets:
        row[f'rounds_to_{threshold:g}'] = target_lib.rounds_to_target(history, threshold)
    rows.append(row)
  return pd.DataFrame(rows)


USAGE = (
  'usage: python -m run.summarize ROOT_OUTPUT_DIR [--last=K] [--targets=T1,T2] [--metric=NAME]'
)


def main(argv: list[str]) -> int:
  options = {'--last': '5', '--targets': '', '--metric': 'eval_accuracy'}
  args = []
  for a in argv[1:]:
    name = a.split('=', 1)[0]
    if name in options and '=' in a:
      options[name] = a.split('=', 1)[1]
    else:
      args.append(a)
  try:
    last = int(options['--last'])
    thresholds = tuple(float(t) for t in options['--targets'].split(',') if t)
    if not all(math.isfinite(t) for t in thresholds):
      raise ValueError(f'--targets must be finite numbers, got {options["--targets"]}')
  except ValueError as e:
    print(f'summarize: {e}; {USAGE}', file=sys.stderr)
    return 2
  if len(args) != 1 or not os.path.isdir(args[0]):
    print(USAGE, file=sys.stderr)
    return 2
  table = summarize(args[0], last, thresholds, options['--metric'])
  if table.empty:
    print(f'summarize: no metrics.csv under {args[0]}', file=sys.stderr)
    return 1
  with pd.option_context(
    'display.width', 200, 'display.max_columns', 20, 'display.float_format', '{:.4f}'.format
  ):
    print(table.to_string(index=False))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
