"""Rounds to a target: when a run's running-average validation metric first reaches a threshold.

Al-Shedivat et al. 2021 (FedPA), Table 3: "the number of rounds to reach a target accuracy" is
the first round at which the 10-round running average of the validation metric crosses the
threshold (e.g. 84% and 86% on EMNIST-62, 30% and 40% on CIFAR-100). Evaluated rounds only:
the running average at round r is the mean of the evaluations in rounds (r - window, r], so
with an evaluation every round it is the paper's 10-round average, and with one every k rounds
it averages the ceil(10 / k) evaluations of that span.
"""

from collections.abc import Sequence

History = Sequence[tuple[int, float]]  # (round, metric value) of the evaluated rounds, ordered
WINDOW = 10


def running_average(history: History, round_num: int, window: int = WINDOW) -> float | None:
  """Mean of the evaluations in rounds (round_num - window, round_num]; None if there are none."""
  values = [v for r, v in history if round_num - window < r <= round_num]
  return sum(values) / len(values) if values else None


def rounds_to_target(history: History, threshold: float, window: int = WINDOW) -> int | None:
  """The first evaluated round whose running average is >= threshold; None if none is."""
  for round_num, _ in history:
    average = running_average(history, round_num, window)
    if average is not None and average >= threshold:
      return round_num
  return None


def column(metric: str, threshold: float) -> str:
  """The metrics.csv column of a target, e.g. rounds_to_eval_accuracy_0.84."""
  return f'rounds_to_{metric}_{threshold:g}'


def average_column(metric: str, window: int = WINDOW) -> str:
  """The metrics.csv column of the running average, e.g. eval_accuracy_avg10."""
  return f'{metric}_avg{window}'
