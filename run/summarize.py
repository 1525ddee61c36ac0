"""Summarises runs: one line per experiment under a directory, its metric at the end and over a window.

  tff-adaptive summarize ROOT [--window=ROUNDS] [--metric=NAME] [--columns=A,B|all] [--sort=COL]
                              [--csv] [--targets=T1,T2]
  (.venv/bin/python -m run.summarize ROOT ... in a checkout: the same program)

ROOT is searched for every metrics.csv, at any depth (the demo writes results/demo/<experiment>/,
a reproduction runs/<study>/<cell>/); an experiment is named by its directory relative to ROOT
(ROOT itself when it is one run). With R its last round and W the window (--window, default 100
rounds: Reddi et al.'s Table 1 reports the validation metric averaged over the last 100 rounds,
and they select hyperparameters by the training loss averaged likewise), the full table has:

- `rounds` (R), `window_rounds` (the rounds the window covers, min(W, R)), `window_evals` (the
  evaluations in it: W / rounds_per_eval when the run is long enough), `s/round` (the median),
  `wall` (seconds: the sum of the rounds' times, evaluations and checkpoints included);
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

What is printed: by default one line per run, `experiment`, `rounds`, the metric (--metric, else
the task's headline: the first of eval_accuracy, eval_recall_at_5, eval_mse, eval_loss that the
run evaluated) at the end and over the window, `wall`, and with --targets the rounds to each;
experiment names are shortened so that a line fits the terminal (80 columns when there is none):
the part all names start (or end) with is cut first, shown as '..' and named on a line above the
table, then, if still too long, the middle of each name ('...'). --columns picks columns
of the full table (`all`: every one), --sort orders by a column (`-COL`: descending), --csv prints
the full table (or --columns) as CSV, unshortened.

A bad argument is one line naming the value and the valid choices, exit 2; no metrics.csv under
ROOT, exit 1.
"""

import dataclasses
import math
import os
import re
import shutil
import sys

import pandas as pd

from tff_adaptive.loop import targets as target_lib

WINDOW_ROUNDS = 100  # Reddi et al. 2021, Table 1: the last 100 rounds
OPTIONS = ('--window', '--targets', '--metric', '--columns', '--sort', '--csv', '--help')
USAGE = (
  'usage: tff-adaptive summarize ROOT_OUTPUT_DIR [--window=ROUNDS] [--metric=NAME] '
  '[--columns=A,B|all] [--sort=[-]COLUMN] [--csv] [--targets=T1,T2]'
)
# The task's headline metric, the first of these that a run evaluated (Reddi et al.'s Table 1:
# accuracy, Recall@5 for Stack Overflow LR, MSE for the EMNIST autoencoder).
HEADLINE_METRICS = ('eval_accuracy', 'eval_recall_at_5', 'eval_mse', 'eval_loss')


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
    'wall': frame['seconds_per_round'].sum() if 'seconds_per_round' in frame else None,
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


def find_runs(root: str) -> list[tuple[str, str]]:
  """(experiment, metrics.csv path) of every run under `root`, at any depth, in name order; the
  experiment is the run's directory relative to `root` (`root`'s own name when it is a run)."""
  found = []
  for directory, subdirectories, files in os.walk(root):
    subdirectories.sort()
    if 'metrics.csv' in files:
      name = os.path.relpath(directory, root)
      if name == '.':
        name = os.path.basename(os.path.abspath(root))
      found.append((name, os.path.join(directory, 'metrics.csv')))
  return sorted(found)


def summarize(
  root: str,
  window: int = WINDOW_ROUNDS,
  targets: tuple[float, ...] = (),
  metric: str = 'eval_accuracy',
) -> pd.DataFrame:
  """One row per metrics.csv under `root` (see the module docstring).

  Raises:
    ValueError: window < 1, or `targets` given and `metric` is an evaluated column of no
      experiment (the message names the valid ones).
  """
  if window < 1:
    raise ValueError(f'--window={window}: expected a whole number of rounds >= 1')
  frames = {}
  for name, path in find_runs(root):
    frame = pd.read_csv(path)
    if not frame.empty:
      frames[name] = frame
  if targets and frames:
    valid = sorted({c for f in frames.values() for c in eval_metrics(list(f.columns))[0]})
    if metric not in valid:
      raise ValueError(f'--metric={metric}: not evaluated in any run; valid: {", ".join(valid)}')
  rows = [summarize_frame(name, f, window, targets, metric) for name, f in frames.items()]
  return pd.DataFrame(rows)


@dataclasses.dataclass(frozen=True)
class Options:
  """The command line (see the module docstring)."""

  root: str
  window: int = WINDOW_ROUNDS
  targets: tuple[float, ...] = ()
  metric: str | None = None  # None: each run's headline metric
  columns: tuple[str, ...] | None = None  # None: the one-line view; ('all',): every column
  sort: str | None = None
  csv: bool = False


def parse_args(argv: list[str]) -> Options:
  """The command line's `Options`; ValueError: one line."""
  options = {'--window': str(WINDOW_ROUNDS), '--targets': '', '--metric': '', '--columns': ''}
  options['--sort'] = ''
  flags_given = set()
  args = []
  for a in argv[1:]:
    name, has_value, value = a.partition('=')
    if name == '--last':
      raise ValueError(
        f'{a}: --last (the last K evaluations) was replaced by --window=ROUNDS (the evaluations '
        f'of the last ROUNDS rounds, default {WINDOW_ROUNDS})'
      )
    if name in ('--csv', '--help'):
      if has_value:
        raise ValueError(f'{a}: {name} takes no value')
      flags_given.add(name)
    elif name in OPTIONS:
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
  columns = tuple(c.strip() for c in options['--columns'].split(',') if c.strip()) or None
  return Options(
    root=args[0],
    window=int(text),
    targets=tuple(thresholds),
    metric=options['--metric'] or None,
    columns=columns,
    sort=options['--sort'] or None,
    csv='--csv' in flags_given,
  )


def _headline(row: pd.Series, metric: str | None, window: int) -> tuple[str, float, float]:
  """(metric, its last value, its window mean) of one run: --metric, else the first headline."""
  names = [metric] if metric else [m for m in HEADLINE_METRICS if pd.notna(row.get(m))]
  name = names[0] if names else 'train_loss'
  return name, row.get(name), row.get(target_lib.window_column(name, window))


def one_line_view(table: pd.DataFrame, window: int, metric: str | None) -> pd.DataFrame:
  """experiment, rounds, the metric at the end and over the window, wall time (mm:ss)."""
  headlines = [_headline(row, metric, window) for _, row in table.iterrows()]
  names = {name for name, _, _ in headlines}
  label = names.pop() if len(names) == 1 else None
  view = pd.DataFrame(
    {
      'experiment': table['experiment'],
      'rounds': table['rounds'],
      **({} if label else {'metric': [n for n, _, _ in headlines]}),
      (label or 'final'): [v for _, v, _ in headlines],
      f'last{window}': [w for _, _, w in headlines],
      'wall': [_duration(s) for s in table.get('wall', [None] * len(table))],
      **{c: table[c] for c in table.columns if c.startswith('rounds_to_')},  # --targets
    }
  )
  return view


def _duration(seconds) -> str:
  if seconds is None or pd.isna(seconds):
    return ''
  seconds = int(round(float(seconds)))
  hours, rest = divmod(seconds, 3600)
  return f'{hours}:{rest // 60:02d}:{rest % 60:02d}' if hours else f'{rest // 60}:{rest % 60:02d}'


def _shorten(name: str, width: int) -> str:
  """`name` cut in the middle to `width` characters (an ellipsis marks the cut)."""
  if len(name) <= width:
    return name
  keep = max(width - 3, 2)
  return name[: (keep + 1) // 2] + '...' + name[len(name) - keep // 2 :]


def _common_affixes(names: list[str]) -> tuple[str, str]:
  """The longest prefix and suffix that all `names` share, each ending (starting) at a '_' or '/'
  (a whole part of an experiment name), not overlapping within any name."""
  if len(names) < 2:
    return '', ''
  prefix = os.path.commonprefix(names)
  prefix = prefix[: max(prefix.rfind('_'), prefix.rfind('/')) + 1]
  rest = [n[len(prefix) :] for n in names]
  suffix = os.path.commonprefix([n[::-1] for n in rest])[::-1]
  cut = min([i for i in (suffix.find('_'), suffix.find('/')) if i >= 0], default=len(suffix))
  suffix = suffix[cut:]
  if any(len(n) <= len(suffix) for n in rest):
    suffix = ''
  return prefix, suffix


def _fit(view: pd.DataFrame, width: int) -> tuple[pd.DataFrame, str]:
  """The one-line view with experiment names shortened so that a line fits `width`, and a line
  saying what was cut ('' when nothing): first the part all names start with, then the part
  they end with, each shown as '..'; then each name in the middle ('...')."""

  def longest(v):
    return max(len(line) for line in _render(v).splitlines())

  if longest(view) <= width:
    return view, ''
  names = list(view['experiment'])
  prefix, suffix = _common_affixes(names)
  notes = []
  if prefix:
    names = ['..' + n[len(prefix) :] for n in names]
    notes.append(f'{prefix} at the start')
  if suffix and longest(view.assign(experiment=names)) > width:
    names = [n[: len(n) - len(suffix)] + '..' for n in names]
    notes.append(f'{suffix} at the end')
  view = view.assign(experiment=names)
  over = longest(view) - width
  if over > 0:
    target = max(int(view['experiment'].str.len().max()) - over, 12)
    view = view.assign(experiment=[_shorten(n, target) for n in view['experiment']])
  return view, f'.. stands for {", ".join(notes)}' if notes else ''


def _cell(value) -> str:
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return ''
  if isinstance(value, float):
    return f'{value:.4f}'
  return str(value)


def _render(view: pd.DataFrame) -> str:
  """A plain table: text columns left-aligned, numbers right-aligned, two spaces apart."""
  columns = list(view.columns)
  cells = [[_cell(v) for v in view[c].tolist()] for c in columns]
  numeric = [pd.api.types.is_numeric_dtype(view[c]) for c in columns]
  widths = [max([len(c), *map(len, col)]) for c, col in zip(columns, cells)]

  def line(values):
    parts = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric)]
    return '  '.join(parts).rstrip()

  rows = [line(columns)] + [line([col[i] for col in cells]) for i in range(len(view))]
  return '\n'.join(rows)


def select(table: pd.DataFrame, options: Options) -> pd.DataFrame:
  """The table's --columns (in order) and --sort; ValueError naming a column not in it."""
  valid = list(table.columns)
  if options.sort:
    column = options.sort.lstrip('-')
    if column not in valid and column not in ('metric',):
      raise ValueError(f'--sort={options.sort}: no such column; valid: {", ".join(valid)}')
    if column in valid:
      table = table.sort_values(
        column, ascending=not options.sort.startswith('-'), kind='stable', na_position='last'
      )
  if options.columns and options.columns != ('all',):
    unknown = [c for c in options.columns if c not in valid]
    if unknown:
      raise ValueError(f'--columns: unknown {", ".join(unknown)}; valid: all, {", ".join(valid)}')
    table = table[list(options.columns)]
  return table


def main(argv: list[str]) -> int:
  if any(a in ('--help', '-h') for a in argv[1:]):
    print(__doc__.strip())
    return 0
  try:
    options = parse_args(argv)
    full = summarize(options.root, options.window, options.targets, options.metric or '')
    table = select(full, options) if not full.empty else full
  except ValueError as e:
    print(f'summarize: {e}; {USAGE}', file=sys.stderr)
    return 2
  if full.empty:
    print(
      f'summarize: no metrics.csv under {options.root} (the trainer writes '
      '<--root_output_dir>/<experiment>/metrics.csv)',
      file=sys.stderr,
    )
    return 1
  short = full[full['window_rounds'] < options.window]
  if not short.empty:
    runs = ', '.join(f'{n} ({r})' for n, r in zip(short['experiment'], short['rounds']))
    print(
      f'summarize: note: shorter than the {options.window}-round window, averaged over all '
      f'their rounds (window_rounds < {options.window}): {runs}',
      file=sys.stderr,
    )
  if options.csv:
    table.to_csv(sys.stdout, index=False)
  elif options.columns:
    print(_render(table))
  else:
    width = shutil.get_terminal_size((80, 24)).columns
    view, note = _fit(one_line_view(table, options.window, options.metric), width)
    if note:
      print(f'({note})')
    print(_render(view))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
