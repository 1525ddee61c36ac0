"""The algorithms' names, hyperparameters and checks: everything but the TensorFlow code.

What the trainer needs to check its flags before it imports TensorFlow and TFF: the registry
`ALGORITHMS` (its builders are `registry.Lazy` references to each module's `build_*`, imported
on first build) and `AlgorithmInputs`; local training (`ClientTrainingConfig`,
`CLIENT_WEIGHTINGS`); each algorithm's hyperparameters with their validation (`FedPAHParams`,
`SOLVERS`, `SHRINKAGE_FORMS` and `check_shrinkage` of `fedpa_math`; `FedProxHParams`;
`QFedAvgHParams`; `AdaFedAdamHParams` and its `ADAFEDADAM_WEIGHTINGS` / `CERTAINTY_FLOORS`) and
FedNova's client optimizers. The TensorFlow modules re-export these under their own names
(`algorithms.fedpa.FedPAHParams`, `algorithms.adafedadam.WEIGHTINGS`,
`algorithms.fednova.CLIENT_OPTIMIZERS`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import math
from typing import TYPE_CHECKING
from typing import Any

from tff_adaptive import registry
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
  epochs: int = 1
  batch_size: int = 20
  lr_schedule: optimizer_config.ScheduleConfig = optimizer_config.ScheduleConfig()
  weighting: str = EXAMPLE_WEIGHTING
  max_epochs: int | None = None

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

  burnin_rounds: int = 0
  burnin_epochs: int = 1
  shrinkage: float = 0.01
  shrinkage_form: str = PAPER
  solver: str = DP

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

  mu: float = 0.01

  def __post_init__(self):
    validation.check_nonnegative('FedProx mu', self.mu)


@dataclasses.dataclass(frozen=True)
class QFedAvgHParams:
  """q >= 0 (0: FedAvg with uniform weights)."""

  q: float = 1.0

  def __post_init__(self):
    validation.check_nonnegative('q-FedAvg q', self.q)


# The client optimizers whose step coefficients FedNova's normalisation is defined for.
FEDNOVA_CLIENT_OPTIMIZERS = ('sgd', 'sgdm')
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

  alpha: float = 1.0
  gradient_examples: int | None = None
  weighting: str = 'paper'
  certainty_floor: str = 'zero'

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
# Differential privacy (`aggregators.dp_mean`, the trainer's --dp).

# The algorithms that refuse a differentially private aggregation, and why. The others send one
# model-shaped value per client and read nothing else from it at the server, so clipping that
# value bounds a client's influence on the round's release (their docstrings say what is
# clipped): fedopt and fedprox (u_i = x_t - x_i), fedpa (the posterior delta).
DP_REFUSALS = {
  'scaffold': "its clients' control-variate changes Delta c_i carry their data too and would "
  'reach the server unclipped and without noise',
  'fednova': "its clients' step counts a_i (which grow with their data) scale the update "
  'through tau_eff unclipped and without noise',
  'qfedavg': "its aggregation weights and normaliser are functions of the clients' losses, "
  'which have no bound: no sensitivity to clip to',
  'adafedadam': 'its aggregation weights p_k I_k^alpha and certainties C_k are functions of the '
  "clients' losses, which have no bound: no sensitivity to clip to",
}


def dp_refusal(name: str) -> str | None:
  """Why algorithm `name` cannot run with a DP aggregation, as one line; None if it can."""
  reason = DP_REFUSALS.get(name)
  return None if reason is None else f'algorithm {name!r} cannot run under DP: {reason}'


# The algorithms that refuse a compressed aggregation (`aggregators.quantized_mean`), and why.
COMPRESSION_REFUSALS = {
  'scaffold': 'its clients also upload Delta c_i, as large as the update, which would stay '
  'float32 (and the bits per client would not count it)',
  'fednova': 'its aggregation is its own (the normalised mean of d_i and a_i), not a weighted '
  'mean of updates to compress',
  'adafedadam': 'its aggregation is its own (the certainty-weighted mean of U_k and C_k), not a '
  'weighted mean of updates to compress',
}


def compression_refusal(name: str) -> str | None:
  """Why algorithm `name` cannot run with a compressed aggregation, as one line; None if it can."""
  reason = COMPRESSION_REFUSALS.get(name)
  return None if reason is None else f'algorithm {name!r} cannot compress its updates: {reason}'


# -------------------------------------------------------------------------------------------
# The registry.


@dataclasses.dataclass(frozen=True)
class AlgorithmInputs:
  """Everything the trainer knows when it builds an algorithm.

  Attributes:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training.
    server_optimizer: the server's `tff.learning.optimizers.Optimizer`.
    server_learning_rate: eta at round 0 (for the server schedule).
    server_lr_schedule: the server learning-rate schedule.
    num_clients: N, the training population.
    fedpa: FedPA's hyperparameters (read by 'fedpa' only).
    fedprox, qfedavg, adafedadam: those algorithms' hyperparameters (read by each only).
    aggregation: an `aggregators.UpdateAggregation` replacing the algorithm's own (e.g.
      `aggregators.dp_mean(...)`); None keeps the algorithm's.
  """

  model_fn: Callable[[], tff.learning.models.VariableModel]
  client: ClientTrainingConfig
  server_optimizer: tff.learning.optimizers.Optimizer
  server_learning_rate: float
  server_lr_schedule: optimizer_config.ScheduleConfig
  num_clients: int
  fedpa: FedPAHParams = FedPAHParams()
  fedprox: FedProxHParams = FedProxHParams()
  qfedavg: QFedAvgHParams = QFedAvgHParams()
  adafedadam: AdaFedAdamHParams = AdaFedAdamHParams()
  aggregation: Any = None

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


_FEDOPT = _builder('fedopt')
_SCAFFOLD = _builder('scaffold')
_FEDPA = _builder('fedpa')
_FEDPROX = _builder('fedprox')
_FEDNOVA = _builder('fednova')
_QFEDAVG = _builder('qfedavg')
_ADAFEDADAM = _builder('adafedadam')
# name -> AlgorithmInputs -> `base.Algorithm`.
ALGORITHMS: registry.Registry[Callable[[AlgorithmInputs], Any]] = registry.Registry(
  'algorithm',
  {
    'fedopt': lambda i: _FEDOPT(i.model_fn, i.client, i.server_optimizer, **i.common()),
    'scaffold': lambda i: _SCAFFOLD(
      i.model_fn, i.client, i.server_optimizer, i.num_clients, **i.common()
    ),
    'fedpa': lambda i: _FEDPA(
      i.model_fn, i.client, i.server_optimizer, fedpa=i.fedpa, **i.common()
    ),
    'fedprox': lambda i: _FEDPROX(
      i.model_fn, i.client, i.server_optimizer, fedprox=i.fedprox, **i.common()
    ),
    'fednova': lambda i: _FEDNOVA(i.model_fn, i.client, i.server_optimizer, **i.common()),
    'qfedavg': lambda i: _QFEDAVG(
      i.model_fn, i.client, i.server_optimizer, qfedavg=i.qfedavg, **i.common()
    ),
    'adafedadam': lambda i: _ADAFEDADAM(
      i.model_fn, i.client, i.server_optimizer, adafedadam=i.adafedadam, **i.common()
    ),
  },
)


def build_algorithm(name: str, inputs: AlgorithmInputs):
  """The registered algorithm `name` (a `base.Algorithm`); unknown names list the valid ones."""
  return ALGORITHMS[name](inputs)
