"""Summaries over seeds that the reproduction drivers share: mean and spread, curves, statuses."""

from collections.abc import Iterable
from collections.abc import Sequence
import statistics


def mean_std(values: Iterable[float | None]) -> tuple[float | None, float | None]:
  """The mean and sample standard deviation (n - 1) of the values that are not None; the std is
  None for one value (no spread is measured), both None for none."""
  found = [v for v in values if v is not None]
  if not found:
    return None, None
  return statistics.mean(found), (statistics.stdev(found) if len(found) > 1 else None)


def mean_std_text(
  mean_std: tuple[float | None, float | None], digits: int = 2, sign: bool = False
) -> str:
  """A (mean, std) of `mean_std` as text: 'mean +- std', the mean alone when the std is None (one
  seed), '' when the mean is None (no seed); '' (a table's empty cell) counts as None."""
  mean, std = mean_std
  if mean is None or mean == '':
    return ''
  text = f'{mean:+.{digits}f}' if sign else f'{mean:.{digits}f}'
  return text if std is None or std == '' else f'{text} +- {std:.{digits}f}'


def curve_band(
  curves: Sequence[Sequence[tuple[int, float]]],
) -> tuple[list[int], list[float], list[float], list[float]]:
  """(rounds, mean, min, max) over the seeds' (round, value) curves, at every round any curve
  has, over the curves that have it (a diverged or unfinished seed drops out after its last
  point)."""
  by_round: dict[int, list[float]] = {}
  for curve in curves:
    for round_num, value in curve:
      by_round.setdefault(round_num, []).append(value)
  rounds = sorted(by_round)
  values = [by_round[r] for r in rounds]
  return (
    rounds,
    [statistics.mean(v) for v in values],
    [min(v) for v in values],
    [max(v) for v in values],
  )


def status_summary(statuses: Sequence[str]) -> str:
  """'done' when every seed is; one seed's status as it is; else each status with its count, in
  first-seen order ('2 done; 1 partial 400 of 1000')."""
  if all(s == 'done' for s in statuses):
    return 'done'
  if len(statuses) == 1:
    return statuses[0]
  counts: dict[str, int] = {}
  for status in statuses:
    counts[status] = counts.get(status, 0) + 1
  return '; '.join(f'{n} {s}' for s, n in counts.items())
