"""What a FedAvg or FedPA cell's metrics.csv says: its accuracy curve and FedPA's correction.

Read by the fmnist comparison (`reproduce_fmnist`) and the regime study (`regimes`).
"""

import dataclasses
import os
import statistics

from reproductions import cell_runner
from tff_adaptive.loop import targets

LAST_EVALS = 5  # the tables' "last 5 evaluations" mean


@dataclasses.dataclass
class CellResult:
  """One cell's run as far as it went."""

  rounds: int = 0  # the last round in metrics.csv
  curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (round, accuracy)
  worst30: float | None = None  # the last evaluation's worst-30% client accuracy (a fraction)
  loss: float | None = None  # the last evaluation's test loss
  # (round, ||u - (x_t - x_K)|| / ||x_t - x_K||): FedPA's client-delta correction, mean over clients
  corrections: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  diverged: bool = False  # the trainer stopped on a non-finite loss (exit 3)

  @property
  def final(self) -> float | None:
    """The last evaluation's accuracy, %."""
    return 100 * self.curve[-1][1] if self.curve else None

  @property
  def last5(self) -> float | None:
    """The mean of the last LAST_EVALS evaluations' accuracy, %."""
    return 100 * statistics.mean(a for _, a in self.curve[-LAST_EVALS:]) if self.curve else None

  def rounds_to(self, threshold: float) -> int | None:
    """The first evaluated round whose accuracy reached `threshold` (a fraction), if any."""
    return targets.rounds_to_target(self.curve, threshold)

  def correction_after(self, burnin_rounds: int) -> float | None:
    """The mean correction over the rounds after the burn-in (FedAvg's deltas before it)."""
    after = [c for r, c in self.corrections if r > burnin_rounds]
    return statistics.mean(after) if after else None


def read(runs_dir: str, cell) -> CellResult:
  """`cell`'s CellResult from `<runs_dir>/<cell.name>/metrics.csv` and its status file."""
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  status = cell_runner.read_status(runs_dir, cell) or {}
  result = CellResult(
    rounds=cell_runner.last_round(rows),
    diverged=status.get('exit_code') == cell_runner.EXIT_DIVERGED,
  )
  for row in sorted(rows, key=lambda r: cell_runner.to_float(r.get('round_num')) or 0):
    round_num = int(cell_runner.to_float(row['round_num']))
    accuracy = cell_runner.to_float(row.get('eval_accuracy'))
    if accuracy is not None:
      result.curve.append((round_num, accuracy))
      result.worst30 = cell_runner.to_float(row.get('eval_client_accuracy_worst30'))
      result.loss = cell_runner.to_float(row.get('eval_loss'))
    correction = cell_runner.to_float(row.get('client_delta_correction_mean'))
    if correction is not None:
      result.corrections.append((round_num, correction))
  return result
