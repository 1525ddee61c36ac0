"""The algorithms as entries that describe themselves: everything but the TensorFlow code.

One `AlgorithmEntry` per algorithm in `ALGORITHMS`, the one place that says what it is: its
builder (a `registry.Lazy` reference to the module's `build_<name>`, imported on first build),
its hyperparameter dataclass (whose fields declare their trainer flags: `settings`), and what it
supports (the server optimizer it needs, the client optimizers it can run, DP and compression
or the reason not, the vectorised engine, its checks against the run's other settings). The
trainer's flags, `AlgorithmInputs`, the engines' and aggregations' refusals all read these
entries; none of them names an algorithm. Also here: local training (`ClientTrainingConfig`,
`CLIENT_WEIGHTINGS`) and each algorithm's hyperparameters with their validation
(`FedPAHParams`, `SOLVERS`, `SHRINKAGE_FORMS`, `check_shrinkage`; `FedProxHParams`;
`QFedAvgHParams`; `AdaFedAdamHParams` and `ADAFEDADAM_WEIGHTINGS`), re-exported by the
TensorFlow modules under their own names (`algorithms.fedpa.FedPAHParams`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import math
from typing import TYPE_CHECKING
from typing import Any

from tff_adaptive import registry
from tff_adaptive import settings
from tff_adaptive.core import validation
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.optimizers.config import CERTAINTY_FLOORS

if TYPE_CHECKING:
  import tensorflow_federated as tff

# -------------------------------------------------------------------------------------------
# Local training (`algorithms.base`).

EXAMPLE_WEIGHTING = 'example'
UNIFORM_WEIGHTING = 'uniform'
CLIENT_WEIGHTINGS = (EXAMPLE_WEIGHTING, UNIFORM_WEIGHTING)
_CLIENT = 'Client training'  # the --help section of local training's flags


@dataclasses.dataclass(frozen=True)
class ClientTrainingConfig:
  """Local training shared by every algorithm.

  Attributes:
    optimizer: the client optimizer and its learning rate eta_l.
    epochs: E, local epochs per round, >= 1.
    batch_size: B, >= 1.
    lr_schedule: eta_l(t) over rounds t = 0, 1, ... (Reddi et al. App. E.6; Kim et al. Sec. 4).
    weighting: the aggregation weight w_i of client i: 'example' (n_i, its number of training
      examples: FedAvg of McMahan et al., Reddi et al.) or 'uniform' (1: the plain average of
      Kim et al. 2024 Algorithm 1 line 13).
    max_epochs: resource heterogeneity (Ju et al. Table 1): when set, client i's local epochs
      in round t are drawn uniformly from {epochs, ..., max_epochs}, a pure function of its
      seed, i.e. of (seed, t, i); None: every client runs `epochs`.
  """

  optimizer: optimizer_config.ClientOptimizerConfig = optimizer_config.ClientOptimizerConfig()
  epochs: int = settings.setting(
    1, 'client_epochs_per_round', 'Local epochs E.', section=_CLIENT, check=settings.positive
  )
  batch_size: int = settings.setting(
    20,
    'client_batch_size',
    "Local batch size B (default: task's).",
    section=_CLIENT,
    check=settings.positive,
    flag_default=None,
  )
  lr_schedule: optimizer_config.ScheduleConfig = optimizer_config.ScheduleConfig()
  weighting: str = settings.setting(
    EXAMPLE_WEIGHTING,
    'client_weighting',
    'Aggregation weight of a client: example (n_i, FedAvg) or uniform (1, the plain average of '
    'Kim et al. 2024).',
    section='Algorithm',
    choices=CLIENT_WEIGHTINGS,
  )
  max_epochs: int | None = settings.setting(
    None,
    'client_epochs_max',
    'Resource heterogeneity (Ju et al. Table 1): each client runs E ~ U{client_epochs_per_round, '
    '..., client_epochs_max} epochs per round, drawn from (seed, round, client).',
    section=_CLIENT,
    check=settings.positive,
  )

  def __post_init__(self):
    validation.check_int('client epochs', self.epochs, 1)
    if self.max_epochs is not None:
      validation.check_int('client max_epochs', self.max_epochs, self.epochs)
    validation.check_int('client batch_size', self.batch_size, 1)
    if self.weighting not in CLIENT_WEIGHTINGS:
      raise ValueError(
        f'unknown client weighting {self.weighting!r}; valid choices: '
        f'{", ".join(CLIENT_WEIGHTINGS)}'
      )
    entry = optimizer_config.CLIENT_OPTIMIZERS[self.optimizer.name]
    if not entry.reads_learning_rate and self.lr_schedule.name != 'constant':
      raise ValueError(
        f'client optimizer {self.optimizer.name!r} sets its own step sizes, so the client '
        f'lr schedule must be constant, got {self.lr_schedule.name!r}'
      )


# -------------------------------------------------------------------------------------------
# FedPA (`algorithms.fedpa`, `algorithms.fedpa_math`).

# The two parametrisations of the shrinkage (see `fedpa_math`).
PAPER = 'paper'
CONVEX = 'convex'
SHRINKAGE_FORMS = (PAPER, CONVEX)
# How a client computes its delta: App. C's dynamic program, or forming Sigma_hat and solving.
DP = 'dp'
EXACT = 'exact'
SOLVERS = (DP, EXACT)
_FEDPA = 'FedPA (Al-Shedivat et al. 2021)'  # the --help section of FedPA's flags
_FAIR = 'AdaFedAdam and its baselines (Ju et al.)'


def check_shrinkage(shrinkage: float, form: str) -> None:
  """ValueError unless `shrinkage` is valid for `form` ('paper': >= 0; 'convex': (0, 1])."""
  if form not in SHRINKAGE_FORMS:
    raise ValueError(
      f'unknown FedPA shrinkage form {form!r}; valid choices: {", ".join(SHRINKAGE_FORMS)}'
    )
  if not math.isfinite(shrinkage):
    raise ValueError(f'FedPA shrinkage must be finite, got {shrinkage}')
  if form == PAPER and not shrinkage >= 0:
    raise ValueError(f'FedPA shrinkage rho must be >= 0 (form paper), got {shrinkage}')
  if form == CONVEX and not 0 < shrinkage <= 1:
    raise ValueError(f'FedPA shrinkage must be in (0, 1] (form convex), got {shrinkage}')


@dataclasses.dataclass(frozen=True)
class FedPAHParams:
  """FedPA's hyperparameters (the paper's Table 6 names).

  Attributes:
    burnin_rounds: rounds whose clients return FedAvg deltas x_t - x_K before FedPA's (the
      paper's "burn-in phase", Sec. 5; Table 6: 100 EMNIST, 400 CIFAR-100, 800 StackOverflow).
    burnin_epochs: local epochs of IASG burn-in in every FedPA round; each later epoch gives
      one sample, the average of that epoch's iterates, so l = E - burnin_epochs (>= 1). 1 is
      the authors' code (its first pass over the data is never a sample).
    shrinkage: rho of the shrinkage covariance, in `shrinkage_form`.
    shrinkage_form: 'paper' (rho >= 0, rho_l = 1 / (1 + (l - 1) rho): the paper's Table 6 and
      the authors' code) or 'convex' (Sigma = rho I + (1 - rho) S, rho in (0, 1]); see
      `fedpa_math`.
    solver: 'dp' (App. C, O(l^2 d) time, O(l d) memory) or 'exact' (forms Sigma_hat and solves:
      O(d^2) memory, O(d^3) time; for checks and the overhead benchmark on small models).
  """

  burnin_rounds: int = settings.setting(
    0,
    'fedpa_burnin_rounds',
    'FedPA: rounds whose clients send FedAvg deltas before posterior-averaged ones (< '
    'total_rounds).',
    section=_FEDPA,
  )
  burnin_epochs: int = settings.setting(
    1,
    'fedpa_burnin_epochs',
    'FedPA: local IASG burn-in epochs per round; each later epoch gives one posterior sample '
    "(l = client_epochs_per_round - fedpa_burnin_epochs >= 1). Default: 1 (the authors' code), or "
    '0 when --client_epochs_per_round=1.',
    section=_FEDPA,
    flag_default=None,
  )
  shrinkage: float = settings.setting(
    0.01,
    'fedpa_shrinkage',
    'FedPA shrinkage rho (form paper: >= 0, rho_l = 1/(1+(l-1) rho); form convex: (0, 1]).',
    section=_FEDPA,
  )
  shrinkage_form: str = settings.setting(
    PAPER,
    'fedpa_shrinkage_form',
    'FedPA shrinkage parametrisation: paper (Theorem 3, Table 6 values) or convex '
    '(Sigma = rho I + (1 - rho) S).',
    section=_FEDPA,
    choices=SHRINKAGE_FORMS,
  )
  solver: str = settings.setting(
    DP,
    'fedpa_solver',
    'FedPA delta: dp (App. C, O(l^2 d)) or exact (d x d solve, small models).',
    section=_FEDPA,
    choices=SOLVERS,
  )

  def __post_init__(self):
    validation.check_int('fedpa burnin_rounds', self.burnin_rounds, 0)
    validation.check_int('fedpa burnin_epochs', self.burnin_epochs, 0)
    check_shrinkage(self.shrinkage, self.shrinkage_form)
    if self.solver not in SOLVERS:
      raise ValueError(f'unknown FedPA solver {self.solver!r}; valid choices: {", ".join(SOLVERS)}')

  def num_samples(self, epochs: int) -> int:
    """l = E - burnin_epochs."""
    return epochs - self.burnin_epochs


# -------------------------------------------------------------------------------------------
# The fair-FL baselines and AdaFedAdam (`fedprox`, `qfedavg`, `fednova`, `adafedadam`).


@dataclasses.dataclass(frozen=True)
class FedProxHParams:
  """mu >= 0 (0: FedAvg)."""

  mu: float = settings.setting(
    0.01,
    'fedprox_mu',
    'FedProx proximal strength mu (>= 0; 0 is FedAvg).',
    section=_FAIR,
    check=settings.nonnegative,
  )

  def __post_init__(self):
    validation.check_nonnegative('FedProx mu', self.mu)


_EXTRAPOLATION = 'FedExP: server extrapolation (Jhunjhunwala et al. 2023)'
EPSILON_SCALINGS = ('per_client', 'paper')
EVAL_AVERAGES = ('last_two', 'none')
EXTRAPOLATED_LOCALS = ('fedavg', 'fedprox', 'scaffold')


def _decay_check(name: str, value: float) -> None:
  if not 0.0 < value <= 1.0:
    raise ValueError(f'{name} must be in (0, 1], got {value}')


@dataclasses.dataclass(frozen=True)
class FedExPHParams:
  """FedExP's hyperparameters (`algorithms.fedexp`). Defaults: the authors' code, which produced
  the published numbers.

  Attributes:
    epsilon: eps >= 0 in eta_g = max(1, mean ||Delta_i||^2 / (2 (||Delta_bar||^2 + eps'))).
    epsilon_scaling: eps' = M eps ('per_client', the code; M the round's clients) or eps ('paper').
    epsilon_decay: eps_t = eps decay^(t + 1) in round t = 0, 1, ..., in (0, 1] (the code:
      0.998^2 with its eta_l decay of 0.998 per round; 1: constant).
    clip_at_one: eta_g >= 1 (the paper's max with 1); False drops it.
    eval_average: the released (evaluated) model: 'last_two' (x_t + x_{t+1}) / 2, the paper's
      remedy for FedExP's oscillating iterates (x_1 after the first round), or 'none' (x_{t+1}).
    local: the clients' training: 'fedavg' (local steps), 'fedprox' (with the proximal term
      prox_mu / 2 ||x - x_t||^2) or 'scaffold' (SCAFFOLD Option II's corrected steps and control
      variates): FedExP, FedProx-ExP and SCAFFOLD-ExP of the paper.
    prox_mu: FedProx's mu >= 0 for local='fedprox'.
  """

  epsilon: float = settings.setting(
    1e-3,
    'fedexp_epsilon',
    "FedExP eps in eta_g = max(1, mean ||Delta_i||^2 / (2 (||mean Delta||^2 + eps'))) (>= 0; the "
    "authors' code: 1e-3 CIFAR, 1e-1 EMNIST).",
    section=_EXTRAPOLATION,
    check=settings.nonnegative,
  )
  epsilon_scaling: str = settings.setting(
    'per_client',
    'fedexp_epsilon_scaling',
    "FedExP eps' = M eps with M the round's clients (per_client: the authors' code) or eps "
    '(paper).',
    section=_EXTRAPOLATION,
    choices=EPSILON_SCALINGS,
  )
  epsilon_decay: float = settings.setting(
    1.0,
    'fedexp_epsilon_decay',
    "FedExP eps_t = eps decay^(t+1), in (0, 1] (the authors' code: 0.996004 = 0.998^2 beside its "
    'client learning-rate decay 0.998; 1: constant).',
    section=_EXTRAPOLATION,
    check=lambda flag, value: _decay_check(f'--{flag}', value),
  )
  clip_at_one: bool = settings.setting(
    True,
    'fedexp_clip_at_one',
    "FedExP eta_g = max(1, ...) (the paper's); --nofedexp_clip_at_one drops the max.",
    section=_EXTRAPOLATION,
  )
  eval_average: str = settings.setting(
    'last_two',
    'fedexp_eval_average',
    'FedExP released (evaluated) model: last_two ((x_t + x_{t+1}) / 2, the paper) or none '
    '(x_{t+1}). Training continues from x_{t+1} either way.',
    section=_EXTRAPOLATION,
    choices=EVAL_AVERAGES,
  )
  local: str = settings.setting(
    'fedavg',
    'fedexp_local',
    "FedExP clients' training: fedavg (FedExP), fedprox (FedProx-ExP, --fedexp_prox_mu) or "
    'scaffold (SCAFFOLD-ExP).',
    section=_EXTRAPOLATION,
    choices=EXTRAPOLATED_LOCALS,
  )
  prox_mu: float = settings.setting(
    0.01,
    'fedexp_prox_mu',
    'FedProx-ExP proximal strength mu (>= 0; with --fedexp_local=fedprox).',
    section=_EXTRAPOLATION,
    check=settings.nonnegative,
  )

  def __post_init__(self):
    validation.check_nonnegative('FedExP epsilon', self.epsilon)
    _decay_check('FedExP epsilon_decay', self.epsilon_decay)
    validation.check_nonnegative('FedExP prox_mu', self.prox_mu)
    for name, value, valid in (
      ('epsilon_scaling', self.epsilon_scaling, EPSILON_SCALINGS),
      ('eval_average', self.eval_average, EVAL_AVERAGES),
      ('local', self.local, EXTRAPOLATED_LOCALS),
    ):
      if value not in valid:
        raise ValueError(f'unknown FedExP {name} {value!r}; valid choices: {", ".join(valid)}')


@dataclasses.dataclass(frozen=True)
class QFedAvgHParams:
  """q >= 0 (0: FedAvg with uniform weights)."""

  q: float = settings.setting(
    1.0,
    'qfedavg_q',
    'q-FedAvg fairness q (>= 0; 0 is uniform FedAvg).',
    section=_FAIR,
    check=settings.nonnegative,
  )

  def __post_init__(self):
    validation.check_nonnegative('q-FedAvg q', self.q)


def fednova_steps(name: str, entry: optimizer_config.ClientOptimizerEntry) -> bool:
  """Whether FedNova's normalisation is defined for client optimizer `name`: plain or heavy-ball
  SGD at the client learning rate (the step coefficients a_i of Wang et al. 2020), which reads
  no options of its own but a momentum."""
  del name
  return entry.scalar_step and entry.reads_learning_rate and entry.options is None


FEDNOVA_CLIENT_OPTIMIZERS = tuple(
  n for n, e in optimizer_config.CLIENT_OPTIMIZERS.items() if fednova_steps(n, e)
)
# AdaFedAdam's aggregation weights: the paper's p_k I_k^alpha, or the authors' p_k F_k^alpha.
ADAFEDADAM_WEIGHTINGS = ('paper', 'loss')


@dataclasses.dataclass(frozen=True)
class AdaFedAdamHParams:
  """AdaFedAdam's hyperparameters besides the server optimizer's.

  Attributes:
    alpha: fairness exponent >= 0 (1 in the paper's tables; 0: p-weighted).
    gradient_examples: F_k and grad F_k over at most this many examples (None: all; the
      authors' code: 512).
    weighting: 'paper' (p_k I_k^alpha) or 'loss' (p_k F_k(x_t)^alpha, the authors' code).
    certainty_floor: 'zero' (C <= 0 applied as 0) or 'none' (as the authors' code).
  """

  alpha: float = settings.setting(
    1.0,
    'fairness_alpha',
    'AdaFedAdam fairness exponent alpha (>= 0): weights p_k I_k^alpha.',
    section=_FAIR,
    check=settings.nonnegative,
  )
  gradient_examples: int | None = settings.setting(
    None,
    'adafedadam_gradient_examples',
    "AdaFedAdam: F_k and grad F_k over at most this many local examples (default all; authors' "
    'code 512).',
    section=_FAIR,
    check=settings.positive,
    always=True,
  )
  weighting: str = settings.setting(
    'paper',
    'adafedadam_weighting',
    "AdaFedAdam aggregation weight: paper (p_k (F_k(x_t)/F_k(x_0))^alpha) or loss (the authors' "
    'code: p_k F_k(x_t)^alpha).',
    section=_FAIR,
    choices=ADAFEDADAM_WEIGHTINGS,
  )
  certainty_floor: str = settings.setting(
    'zero',
    'adafedadam_certainty_floor',
    'AdaFedAdam when the aggregate certainty C <= 0: zero (no server step, AdaAdam state kept) '
    "or none (applied as it is, the authors' code; a non-finite step stops the run).",
    section=_FAIR,
    choices=CERTAINTY_FLOORS,
  )

  def __post_init__(self):
    validation.check_nonnegative('fairness alpha', self.alpha)
    if self.gradient_examples is not None:
      validation.check_int('AdaFedAdam gradient_examples', self.gradient_examples, 1)
    for name, value, valid in (
      ('weighting', self.weighting, ADAFEDADAM_WEIGHTINGS),
      ('certainty_floor', self.certainty_floor, CERTAINTY_FLOORS),
    ):
      if value not in valid:
        raise ValueError(f'unknown AdaFedAdam {name} {value!r}; valid choices: {", ".join(valid)}')


# -------------------------------------------------------------------------------------------
# The registry.


@dataclasses.dataclass(frozen=True)
class RunContext:
  """What an algorithm's checks may read of the run besides its own hyperparameters.

  Attributes:
    total_rounds: the rounds the run trains.
    client_epochs: E, local epochs per round.
    client_epochs_max: resource heterogeneity's largest E (None: every client runs E).
  """

  total_rounds: int
  client_epochs: int
  client_epochs_max: int | None = None


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
  """A registered algorithm: how it is built and what it supports (module docstring).

  Attributes:
    build: its `build_<name>(model_fn, client, server_optimizer, [num_clients,] [<name>=hparams,]
      **common)`, a `registry.Lazy` reference.
    hparams: its hyperparameter dataclass (passed to the builder as the keyword of its name);
      its fields declare their trainer flags (`settings`). None: it has none.
    takes_num_clients: the builder takes the population size N (SCAFFOLD's control variates).
    hparams_from_flags: (the flag values of `hparams`' fields, RunContext) -> hparams, for
      settings whose defaults or checks read the run (FedPA's burn-in); None: the dataclass of
      the values.
    check: RunContext -> None, raising a one-line ValueError (in flag terms) when the run's
      other settings cannot go with the algorithm; None: none.
    server_optimizer: the only server optimizer it steps with (and then its default); None: any.
    server_reason: why, completing `--algorithm=<name> <server_reason>: valid --server_optimizer`.
    client_optimizers: (name, client optimizer entry) -> whether it can run under the algorithm;
      None: every one.
    client_reason: why not, with '{valid}' the client optimizers that can.
    dp_refusal: why a differentially private aggregation cannot run under it (one line); None:
      it can (the one value it sends is clipped).
    compression_refusal: why its updates cannot be compressed; None: they can.
  """

  build: registry.Lazy
  hparams: type | None = None
  takes_num_clients: bool = False
  hparams_from_flags: Callable[[dict[str, Any], RunContext], Any] | None = None
  check: Callable[[RunContext], None] | None = None
  server_optimizer: str | None = None
  server_reason: str = ''
  client_optimizers: Callable[[str, Any], bool] | None = None
  client_reason: str = ''
  dp_refusal: str | None = None
  compression_refusal: str | None = None

  @property
  def module(self) -> str:
    """The module that defines it, relative to `tff_adaptive.algorithms`."""
    return self.build.target.partition(':')[0].rpartition('.')[2]

  def client_refusal(self, name: str) -> str | None:
    """Why client optimizer `name` cannot run under the algorithm; None if it can."""
    if self.client_optimizers is None:
      return None
    entries = optimizer_config.CLIENT_OPTIMIZERS
    if self.client_optimizers(name, entries[name]):
      return None
    valid = ', '.join(n for n, e in entries.items() if self.client_optimizers(n, e))
    return self.client_reason.format(valid=valid)


class AlgorithmInputs:
  """Everything the trainer knows when it builds an algorithm.

  Attributes:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training.
    server_optimizer: the server's `tff.learning.optimizers.Optimizer`.
    server_learning_rate: eta at round 0 (for the server schedule).
    server_lr_schedule: the server learning-rate schedule.
    num_clients: N, the training population.
    aggregation: an `aggregators.UpdateAggregation` replacing the algorithm's own (e.g.
      `aggregators.dp_mean(...)`); None keeps the algorithm's.
    hparams: algorithm name -> its hyperparameters (keywords of the constructor, e.g.
      `fedpa=FedPAHParams(...)`); an algorithm without an entry here gets its defaults.
  """

  def __init__(
    self,
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client: ClientTrainingConfig,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_learning_rate: float,
    server_lr_schedule: optimizer_config.ScheduleConfig,
    num_clients: int,
    aggregation: Any = None,
    **hparams: Any,
  ):
    for name, value in hparams.items():
      entry = ALGORITHMS[name]
      if entry.hparams is None or not isinstance(value, entry.hparams):
        expected = entry.hparams.__name__ if entry.hparams else 'no hyperparameters'
        raise TypeError(f'AlgorithmInputs: {name}= expects {expected}, got {value!r}')
    self.model_fn = model_fn
    self.client = client
    self.server_optimizer = server_optimizer
    self.server_learning_rate = server_learning_rate
    self.server_lr_schedule = server_lr_schedule
    self.num_clients = num_clients
    self.aggregation = aggregation
    self.hparams = dict(hparams)

  def common(self) -> dict:
    out = dict(
      server_lr_schedule=self.server_lr_schedule, server_learning_rate=self.server_learning_rate
    )
    if self.aggregation is not None:
      out['aggregation'] = self.aggregation
    return out


def _builder(name: str) -> registry.Lazy:
  """`build_<name>` of module `algorithms.<name>`, imported on first build."""
  return registry.Lazy(f'tff_adaptive.algorithms.{name}:build_{name}')


def _fedpa_from_flags(values: dict[str, Any], run: RunContext) -> FedPAHParams:
  """FedPA's hyperparameters from their flags, the burn-in checked against the run."""
  # One burn-in epoch, as the authors' code (the paper's Table 6 does not print it); with one
  # epoch per round that would leave no sample, so the default then samples from the start.
  burnin_rounds = values['fedpa_burnin_rounds']
  burnin_epochs = values['fedpa_burnin_epochs']
  burnin_epochs = min(1, run.client_epochs - 1) if burnin_epochs is None else burnin_epochs
  for name, value in (
    ('fedpa_burnin_rounds', burnin_rounds),
    ('fedpa_burnin_epochs', burnin_epochs),
  ):
    if value < 0:
      raise ValueError(f'--{name} must be >= 0, got {value}')
  if burnin_rounds >= run.total_rounds:
    raise ValueError(
      f'--fedpa_burnin_rounds={burnin_rounds} must be < --total_rounds='
      f'{run.total_rounds}: FedPA would never leave its FedAvg burn-in'
    )
  if burnin_epochs >= run.client_epochs:
    raise ValueError(
      f'--fedpa_burnin_epochs={burnin_epochs} leaves no posterior sample: it must be '
      f'< --client_epochs_per_round={run.client_epochs} (one sample per epoch after the burn-in)'
    )
  try:
    check_shrinkage(values['fedpa_shrinkage'], values['fedpa_shrinkage_form'])
  except ValueError as e:
    raise ValueError(f'--fedpa_shrinkage/--fedpa_shrinkage_form: {e}') from None
  return FedPAHParams(
    burnin_rounds=burnin_rounds,
    burnin_epochs=burnin_epochs,
    shrinkage=values['fedpa_shrinkage'],
    shrinkage_form=values['fedpa_shrinkage_form'],
    solver=values['fedpa_solver'],
  )


def _fedpa_check(run: RunContext) -> None:
  if run.client_epochs_max is not None:
    raise ValueError(
      '--client_epochs_max cannot run under --algorithm=fedpa: FedPA takes one posterior '
      'sample per epoch into a fixed-size state'
    )


# The algorithms refuse a differentially private or a compressed aggregation where they send
# more than one model-shaped value per client, or read more of it at the server (their
# docstrings say what is clipped: fedopt and fedprox u_i = x_t - x_i, fedpa the posterior delta).
_THEIR_OWN = 'its aggregation is its own ({}), not a weighted mean of updates to compress'
# name -> its entry.
DEFAULT_ALGORITHM = 'fedopt'  # --algorithm's default: Reddi et al.'s FedOpt family
ALGORITHMS: registry.Registry[AlgorithmEntry] = registry.Registry(
  'algorithm',
  {
    DEFAULT_ALGORITHM: AlgorithmEntry(_builder(DEFAULT_ALGORITHM)),
    'scaffold': AlgorithmEntry(
      _builder('scaffold'),
      takes_num_clients=True,
      client_optimizers=lambda name, entry: entry.scalar_step,
      client_reason='its control variates need scalar client steps ({valid})',
      dp_refusal="its clients' control-variate changes Delta c_i carry their data too and would "
      'reach the server unclipped and without noise',
      compression_refusal='its clients also upload Delta c_i, as large as the update, which would '
      'stay float32 (and the bits per client would not count it)',
    ),
    'fedpa': AlgorithmEntry(
      _builder('fedpa'), FedPAHParams, hparams_from_flags=_fedpa_from_flags, check=_fedpa_check
    ),
    'fedprox': AlgorithmEntry(_builder('fedprox'), FedProxHParams),
    'fednova': AlgorithmEntry(
      _builder('fednova'),
      client_optimizers=fednova_steps,
      client_reason='its normalisation is defined for {valid}',
      dp_refusal="its clients' step counts a_i (which grow with their data) scale the update "
      'through tau_eff unclipped and without noise',
      compression_refusal=_THEIR_OWN.format('the normalised mean of d_i and a_i'),
    ),
    'qfedavg': AlgorithmEntry(
      _builder('qfedavg'),
      QFedAvgHParams,
      client_optimizers=lambda name, entry: entry.reads_learning_rate,
      client_reason='it estimates L = 1 / eta_l from the client learning rate (valid: {valid})',
      dp_refusal="its aggregation weights and normaliser are functions of the clients' losses, "
      'which have no bound: no sensitivity to clip to',
    ),
    'fedexp': AlgorithmEntry(
      _builder('fedexp'),
      FedExPHParams,
      takes_num_clients=True,
      dp_refusal="its server step size eta_g reads every client's ||Delta_i||^2 and their count, "
      'which would reach the server unclipped and without noise',
      compression_refusal=_THEIR_OWN.format('the extrapolated mean of Delta_i and ||Delta_i||^2'),
    ),
    'adafedadam': AlgorithmEntry(
      _builder('adafedadam'),
      AdaFedAdamHParams,
      server_optimizer='adaadam',
      server_reason='steps with the certainty-adaptive AdaAdam',
      dp_refusal='its aggregation weights p_k I_k^alpha and certainties C_k are functions of the '
      "clients' losses, which have no bound: no sensitivity to clip to",
      compression_refusal=_THEIR_OWN.format('the certainty-weighted mean of U_k and C_k'),
    ),
  },
)


def dp_refusal(name: str) -> str | None:
  """Why algorithm `name` cannot run with a DP aggregation, as one line; None if it can."""
  reason = ALGORITHMS[name].dp_refusal if name in ALGORITHMS else None
  return None if reason is None else f'algorithm {name!r} cannot run under DP: {reason}'


def compression_refusal(name: str) -> str | None:
  """Why algorithm `name` cannot run with a compressed aggregation, as one line; None if it can."""
  reason = ALGORITHMS[name].compression_refusal if name in ALGORITHMS else None
  return None if reason is None else f'algorithm {name!r} cannot compress its updates: {reason}'


# Read by the tests and the docs: the algorithms that refuse each, and why.
DP_REFUSALS = {n: e.dp_refusal for n, e in ALGORITHMS.items() if e.dp_refusal}
COMPRESSION_REFUSALS = {
  n: e.compression_refusal for n, e in ALGORITHMS.items() if e.compression_refusal
}


def hparams_from_flags(name: str, values: dict[str, Any], run: RunContext) -> Any:
  """Algorithm `name`'s hyperparameters from the flag values of its fields; None if it has none."""
  entry = ALGORITHMS[name]
  if entry.hparams is None:
    return None
  if entry.hparams_from_flags is not None:
    return entry.hparams_from_flags(values, run)
  return settings.from_flags(entry.hparams, values)


def build_algorithm(name: str, inputs: AlgorithmInputs):
  """The registered algorithm `name` (a `base.Algorithm`); unknown names list the valid ones."""
  entry = ALGORITHMS[name]
  args = [inputs.model_fn, inputs.client, inputs.server_optimizer]
  if entry.takes_num_clients:
    args.append(inputs.num_clients)
  kwargs = inputs.common()
  if entry.hparams is not None:
    kwargs[name] = inputs.hparams.get(name, entry.hparams())
  return entry.build(*args, **kwargs)


def builder_exports() -> dict[str, str]:
  """`build_<name>` -> its module and each hyperparameter dataclass -> 'config', for
  `algorithms.__init__`'s lazy exports: a registered algorithm is exported with its entry."""
  exports = {f'build_{name}': entry.module for name, entry in ALGORITHMS.items()}
  exports.update((e.hparams.__name__, 'config') for e in ALGORITHMS.values() if e.hparams)
  return exports
