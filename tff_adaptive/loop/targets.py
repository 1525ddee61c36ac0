"""Rounds to a target: when a run's running-average validation metric first reaches a threshold.

Al-Shedivat et al. 2021 (FedPA), Table 3: "the number of rounds to reach a target accuracy" is
the first round at which the 10-round running average of the validation metric crosses the
threshold (e.g. 84% and 86% on EMNIST-62, 30% and 40% on CIFAR-100). Evaluated rounds only:
the running average at round r is the mean of the evaluations in rounds (r - window, r], so
with an evaluation every round it is the paper's 10-round average, and with one every k rounds
it averages the ceil(10 / k) evaluations of that span. A run extended past its old last round
drops that round's off-cadence evaluation from the history (an uninterrupted run never made it).
"""

from collections.abc import Sequence
import math

History = Sequence[tuple[int, float]]  # (round, metric value) of the evaluated rounds, ordered
WINDOW = 10


def running_average(history: History, round_num: int, window: int = WINDOW) -> float | None:
  """Mean of the evaluations in rounds (round_num - window, round_num]; None if there are none."""
  # Rounds are distinct and increasing: the span holds at most `window` evaluations.
  end = next((i for i in range(len(history) - 1, -1, -1) if history[i][0] <= round_num), -1)
  values = [v for r, v in history[max(0, end - window + 1) : end + 1] if r > round_num - window]
  return sum(values) / len(values) if values else None


def rounds_to_target(history: History, threshold: float, window: int = WINDOW) -> int | None:
  """The first evaluated round whose running average is >= threshold; None if none is."""
  for i, (round_num, _) in enumerate(history):
    values = [v for r, v in history[max(0, i - window + 1) : i + 1] if r > round_num - window]
    if sum(values) / len(values) >= threshold:
      return round_num
  return None


def column(metric: str, threshold: float) -> str:
  """The metrics.csv column of a target, e.g. rounds_to_eval_accuracy_0.84."""
  return f'rounds_to_{metric}_{threshold:g}'


def average_column(metric: str, window: int = WINDOW) -> str:
  """The trainer's metrics.csv column of the running average, e.g. eval_accuracy_avg10.

  Written on every evaluation round r: the mean of the evaluations in rounds (r - window, r]
  (`running_average`; a window of ROUNDS, so with an evaluation every k rounds it averages
  ceil(window / k) evaluations). The name predates `window_column` and stays as it is so that old
  runs resume; tables and summaries name their last-window averages with `window_column`.
  """
  return f'{metric}_avg{window}'


WINDOW_UNITS = ('rounds', 'evals')


def window_column(metric: str, count: int, unit: str = 'rounds') -> str:
  """The one name of a last-window average in a summary or reproduction table.

  unit 'rounds': `<metric>_last<count>rounds`, the mean of the values in the rounds (R - count, R],
  R the run's last round; every evaluation in that span counts, whatever the cadence (Reddi et
  al.'s Table 1 "average over the last 100 rounds" is `eval_accuracy_last100rounds`: 100 values
  when evaluating every round, 10 with --rounds_per_eval=10). `run.summarize` uses it.
  unit 'evals': `<metric>_last<count>evals`, the mean of the last `count` evaluations, whichever
  rounds they fall in (the reproduction tables' `ours_last5evals`).
  Neither is the trainer's `<metric>_avg10` (`average_column`): a running average written on
  each evaluation round, over the evaluations of the 10 rounds up to it.
  """
  if unit not in WINDOW_UNITS:
    raise ValueError(f'unit {unit!r}: valid: {", ".join(WINDOW_UNITS)}')
  if count < 1:
    raise ValueError(f'count must be >= 1, got {count}')
  return f'{metric}_last{count}{unit}'


def parse_thresholds(flag: str, texts: Sequence[str]) -> tuple[float, ...]:
  """Finite floats from a flag's comma-separated values; ValueError naming the flag."""
  values = []
  for text in texts:
    try:
      value = float(text)
    except ValueError:
      raise ValueError(f'--{flag}: {text!r} is not a number') from None
    if not math.isfinite(value):
      raise ValueError(f'--{flag}: {text!r} must be finite')
    values.append(value)
  return tuple(values)
