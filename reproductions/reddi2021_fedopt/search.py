"""Reddi et al. 2021's grid search: its cells, their last-window statistics, its selection rule.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021, Sec. 4 and App. D-E:

* A cell is one run of FedOpt with SGD clients: a server optimizer (sgd = FedAvg, sgdm = FedAvgM
  with momentum 0.9, adagrad, adam, yogi), a client learning rate eta_l, a server learning rate
  eta (both on base-10 log grids of step 0.5, App. D.2) and, for the adaptive three, tau in
  {1e-5, ..., 1e-1}.
* Selection: the cell whose TRAINING loss averaged over the last 100 rounds is smallest (App.
  D.1: "we select the best hyperparameters based on the average training loss over the last 100
  communication rounds"). Reported: the validation metric averaged over the last 100 rounds
  (Table 1).
* Heatmaps (Fig. 2, Figs. 5-11): the validation metric of every (eta_l, eta) at tau = 1e-3.
* Fig. 3: for each tau, the validation metric of the (eta_l, eta) selected at that tau.

Searches: `full` runs eta_l x eta x tau for the adaptive optimizers (what Fig. 3 needs exactly);
`staged` runs eta_l x eta at tau = 1e-3 (the heatmap cells), then tau over its grid at the pair
selected there, so Fig. 3's "(eta_l, eta) tuned for each tau" is tuned only at tau = 1e-3 (said
in the figure).

Pure functions over metrics.csv rows; nothing here runs a trainer.
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import math

from reproductions.reddi2021_fedopt import published
from tff_adaptive.loop import targets

SEARCHES = ('staged', 'full')
OPTIMIZERS = ('adagrad', 'adam', 'yogi', 'sgdm', 'sgd')  # Table 1's column order
ADAPTIVE = ('adagrad', 'adam', 'yogi')


@dataclasses.dataclass(frozen=True)
class Metric:
  """A task's Table 1 metric: its metrics.csv column and how the paper prints it."""

  column: str
  label: str
  scale: float
  higher_is_better: bool = True

  def better(self, a: float, b: float) -> bool:
    return a > b if self.higher_is_better else a < b


_ACCURACY = Metric('eval_accuracy', published.TABLE1_METRIC['emnist_cr'], 100.0)
# Table 1: Recall@5 x 100 for Stack Overflow LR, MSE x 1000 for EMNIST AE.
METRICS = {
  'so_lr': Metric('eval_recall_at_5', published.TABLE1_METRIC['so_lr'], 100.0),
  'emnist_ae': Metric('eval_mse', published.TABLE1_METRIC['emnist_ae'], 1000.0, False),
}


def task_metric(task: str) -> Metric:
  """The metric Table 1 reports for `task` (accuracy for tasks outside the paper)."""
  return METRICS.get(task, _ACCURACY)


def log_grid(low: float, high: float, step: float) -> tuple[float, ...]:
  """low, low + step, ..., up to high inclusive (base-10 logs, rounded to 6 digits)."""
  if step <= 0 or high < low:
    raise ValueError(f'empty grid {low:g}..{high:g} step {step:g}')
  count = int(math.floor((high - low) / step + 1e-9)) + 1
  return tuple(round(low + k * step, 6) for k in range(count))


def log_text(value: float) -> str:
  """A base-10 log as the paper writes it: -1.5, 0, 0.5."""
  return f'{value:g}'


@dataclasses.dataclass(frozen=True)
class Cell:
  """One run of the search: optimizer, log10 eta_l, log10 eta, log10 tau (adaptive only), seed."""

  optimizer: str
  log_client: float
  log_server: float
  log_tau: float | None
  seed: int

  @property
  def name(self) -> str:
    tau = '' if self.log_tau is None else f'_t{log_text(self.log_tau)}'
    return (
      f'{self.optimizer}_c{log_text(self.log_client)}_s{log_text(self.log_server)}{tau}'
      f'_seed{self.seed}'
    )

  @property
  def point(self) -> tuple[float, float, float | None]:
    return (self.log_client, self.log_server, self.log_tau)

  def with_seed(self, seed: int) -> 'Cell':
    return dataclasses.replace(self, seed=seed)

  def with_tau(self, log_tau: float) -> 'Cell':
    return dataclasses.replace(self, log_tau=log_tau)

  def trainer_flags(self) -> list[str]:
    """The trainer flags of this cell's optimizer and rates (as the presets write them)."""
    flags = [
      '--algorithm=fedopt',
      f'--server_optimizer={self.optimizer}',
      f'--client_learning_rate={10.0**self.log_client!r}',
      f'--server_learning_rate={10.0**self.log_server!r}',
      f'--seed={self.seed}',
    ]
    if self.log_tau is not None:
      flags += [f'--tau={10.0**self.log_tau!r}', '--adaptive_variant=published']
    if self.optimizer == 'sgdm':
      flags.append('--server_momentum=0.9')
    return flags


@dataclasses.dataclass(frozen=True)
class Grid:
  """The search space of one task: log10 eta_l and eta values, log10 taus."""

  client: tuple[float, ...]
  server: tuple[float, ...]
  taus: tuple[float, ...] = published.LOG10_TAUS
  heatmap_tau: float = published.HEATMAP_LOG10_TAU


def paper_grid(task: str, step: float = published.GRID_STEP) -> Grid:
  """App. D.2's grid of `task` (DEFAULT_GRID for tasks outside the paper) at `step`."""
  ranges = published.GRIDS.get(task, published.DEFAULT_GRID)
  return Grid(log_grid(*ranges['client'], step), log_grid(*ranges['server'], step))


def heatmap_cells(optimizers: Sequence[str], grid: Grid, seed: int) -> list[Cell]:
  """Every (eta_l, eta) of every optimizer, the adaptive ones at the heatmap tau."""
  return [
    Cell(opt, c, s, grid.heatmap_tau if opt in ADAPTIVE else None, seed)
    for opt in optimizers
    for s in grid.server
    for c in grid.client
  ]


def full_cells(optimizers: Sequence[str], grid: Grid, seed: int) -> list[Cell]:
  """Every (eta_l, eta), and for the adaptive optimizers every tau too."""
  cells = heatmap_cells(optimizers, grid, seed)
  cells += [
    cell.with_tau(tau)
    for cell in heatmap_cells([o for o in optimizers if o in ADAPTIVE], grid, seed)
    for tau in grid.taus
    if tau != grid.heatmap_tau
  ]
  return cells


def tau_cells(selected: Cell, grid: Grid) -> list[Cell]:
  """The staged search's second stage: every tau at the pair selected at the heatmap tau."""
  return [selected.with_tau(tau) for tau in grid.taus if tau != selected.log_tau]


@dataclasses.dataclass
class CellStats:
  """What a cell's metrics.csv says over its last `window` rounds.

  Attributes:
    rounds: the last round written.
    finished: it ran all its rounds (and did not diverge).
    train_loss: mean training loss over rounds (R - window, R], R = rounds.
    metric: mean of the task metric (scaled as Table 1) over the evaluations in that window.
    evaluations: how many evaluations `metric` averages.
    drift: how far the metric still moved within the window (`window_drift`).
    curve: (round, metric scaled) of every evaluation.
    examples: (round, examples processed so far by the clients) of every evaluation.
  """

  rounds: int = 0
  finished: bool = False
  train_loss: float | None = None
  metric: float | None = None
  evaluations: int = 0
  drift: float | None = None
  curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  examples: list[tuple[int, float]] = dataclasses.field(default_factory=list)


def _number(value) -> float | None:
  try:
    number = float(value)
  except (TypeError, ValueError):
    return None
  return number if math.isfinite(number) else None


def window_stats(
  rows: Iterable[Mapping[str, str]], metric: Metric, window: int, total_rounds: int
) -> CellStats:
  """The last-`window`-rounds averages of one run's metrics.csv rows (Table 1's statistic;
  `targets.running_average` at the last round, the window of `run.summarize`).

  A run shorter than `window` averages what it has; `finished` says whether it ran exactly
  `total_rounds` (a longer one was another setting). A non-finite training loss in the window
  leaves `train_loss` None (the cell cannot be selected).
  """
  by_round = {}
  for row in rows:
    number = _number(row.get('round_num'))
    if number is not None:
      by_round[int(number)] = row
  stats = CellStats()
  if not by_round:
    return stats
  stats.rounds = max(by_round)
  stats.finished = stats.rounds == total_rounds
  start = stats.rounds - window  # the window is rounds (start, rounds]
  losses = [(r, _number(by_round[r].get('train_loss'))) for r in sorted(by_round)]
  if all(v is not None for r, v in losses if r > start):
    stats.train_loss = targets.running_average(losses, stats.rounds, window)
  seen = 0.0
  for r, row in sorted(by_round.items()):
    seen += _number(row.get('train_num_examples')) or 0.0
    value = _number(row.get(metric.column))
    if value is not None:
      stats.curve.append((r, metric.scale * value))
      stats.examples.append((r, seen))
  stats.metric = targets.running_average(stats.curve, stats.rounds, window)
  stats.evaluations = sum(1 for r, _ in stats.curve if r > start)
  stats.drift = window_drift(stats.curve, stats.rounds, window)
  return stats


def window_drift(curve: Sequence[tuple[int, float]], rounds: int, window: int) -> float | None:
  """The mean of the evaluations in the second half of the window (R - w/2, R] minus the mean
  of those in its first half (R - w, R - w/2], R = `rounds`, w = `window`: about 0 when the
  window lies on a plateau, where Table 1's last-window average is meant to be taken; a curve
  still rising by s per round gives about s * w / 2. None without an evaluation in each half."""
  start, middle = rounds - window, rounds - window / 2
  first = [v for r, v in curve if start < r <= middle]
  second = [v for r, v in curve if middle < r <= rounds]
  if not first or not second:
    return None
  return sum(second) / len(second) - sum(first) / len(first)


def select(cells: Iterable[Cell], stats: Mapping[str, CellStats]) -> Cell | None:
  """The finished cell with the smallest last-window training loss (first in order on ties)."""
  best = None
  for cell in cells:
    s = stats.get(cell.name)
    if s is None or not s.finished or s.train_loss is None:
      continue
    if best is None or s.train_loss < stats[best.name].train_loss:
      best = cell
  return best


# --- the paper's claims, as numbers ---


def good_region(
  values: Mapping[tuple[float, float], float], metric: Metric, within: float
) -> set[tuple[float, float]]:
  """The (eta_l, eta) whose metric is within `within` (relative) of the best cell's."""
  if not values:
    return set()
  best = max(values.values()) if metric.higher_is_better else min(values.values())
  if metric.higher_is_better:
    return {p for p, v in values.items() if v >= best - within * abs(best)}
  return {p for p, v in values.items() if v <= best + within * abs(best)}


def rectangularity(good: set[tuple[float, float]], grid: Grid) -> float:
  """|good| / the cells of its bounding box on the grid: 1 for a rectangle, small for a thin
  diagonal band (Fig. 2: "rectangular regions" of the adaptive methods vs FedAvg's diagonal)."""
  if not good:
    return math.nan
  clients = [c for c, _ in good]
  servers = [s for _, s in good]
  width = sum(1 for c in grid.client if min(clients) <= c <= max(clients))
  height = sum(1 for s in grid.server if min(servers) <= s <= max(servers))
  return len(good) / (width * height)


def diagonal_correlation(good: set[tuple[float, float]]) -> float:
  """Pearson correlation of log eta_l and log eta over the good cells: near -1 for a diagonal
  band (eta_l * eta about constant), near 0 for a rectangle; nan under 3 cells or a line."""
  if len(good) < 3:
    return math.nan
  xs = [c for c, _ in good]
  ys = [s for _, s in good]
  mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
  sxx = sum((x - mx) ** 2 for x in xs)
  syy = sum((y - my) ** 2 for y in ys)
  if sxx == 0 or syy == 0:
    return math.nan
  return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)
