"""Prints one line per experiment under a root output directory: its last evaluation.

  python -m run.summarize results/demo [--last=K]

For each <root>/<experiment>/metrics.csv: rounds trained, the final train loss, and the
eval_* metrics of the last evaluated round (and their mean over the last K evaluations,
the "average of the last 100 rounds" style of Reddi et al. Table 1 when evaluating every round).
"""

import os
import sys

import pandas as pd

SHOWN = (
  'eval_loss',
  'eval_accuracy',
  'eval_client_accuracy_mean',
  'eval_client_accuracy_std',
  'eval_client_accuracy_worst30',
)


def summarize(root: str, last: int = 5) -> pd.DataFrame:
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
    rows.append(row)
  return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
  args = [a for a in argv[1:] if not a.startswith('--last=')]
  last = next((int(a.split('=', 1)[1]) for a in argv[1:] if a.startswith('--last=')), 5)
  if len(args) != 1 or not os.path.isdir(args[0]):
    print('usage: python -m run.summarize ROOT_OUTPUT_DIR [--last=K]', file=sys.stderr)
    return 2
  table = summarize(args[0], last)
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
