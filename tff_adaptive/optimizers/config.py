"""The optimizers' names, hyperparameters and checks: everything but the TensorFlow code.

What the trainer needs to check its flags before it imports TensorFlow and TFF: the registries
`SCHEDULES`, `SERVER_OPTIMIZERS` and `CLIENT_OPTIMIZERS` (their entries' builders are
`registry.Lazy` references into `schedules`, `server`, `adaadam` and `client`, imported on first
build), the hyperparameter dataclasses with their validation (`ScheduleConfig`,
`ServerOptimizerConfig`, `ClientOptimizerConfig`, `SPSHParams`, `DeltaSGDHParams`), the named
choices (`VARIANTS`, `sps` `MODES`, Delta-SGD's `GRADIENTS` / `FIRST_STEPS` / `ZERO_RULES`,
AdaAdam's `CERTAINTY_FLOORS`) and the records of hparams.json. The TensorFlow modules re-export
these names (`optimizers.server.ServerOptimizerConfig`, `optimizers.sps.SPSHParams`, ...).

The server optimizers' checks (`check_fedadagrad`, ..., `check_adaadam`) are the ones their
builders run, with the builders' arguments: `check_server_optimizer(config)` runs them on a
config without building anything.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

from tff_adaptive import registry
from tff_adaptive import settings
from tff_adaptive.core import validation

_SERVER_SECTION = 'Server optimizer'  # the --help sections of the optimizers' flags
_CLIENT_SECTION = 'Client training'
_KIM_SECTION = 'SPS and Delta-SGD client optimizers (Kim et al. 2024)'

# -------------------------------------------------------------------------------------------
# Learning-rate schedules (`optimizers.schedules`).

_SCHEDULES = 'tff_adaptive.optimizers.schedules'


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
  """name: one of SCHEDULES; decay_rate/decay_period for exp_decay; total_rounds for step_decay."""

  name: str = 'constant'
  decay_rate: float = 0.1
  decay_period: int = 500
  total_rounds: int = 0


@dataclasses.dataclass(frozen=True)
class ScheduleEntry:
  """A registered schedule: (lr, config) -> Schedule, and the config fields it reads."""

  build: Callable[[float, ScheduleConfig], Any]
  hparams: tuple[str, ...] = ()


_CONSTANT = registry.Lazy(f'{_SCHEDULES}:constant')
_EXP_DECAY = registry.Lazy(f'{_SCHEDULES}:exp_decay')
_STEP_DECAY = registry.Lazy(f'{_SCHEDULES}:step_decay')
SCHEDULES: registry.Registry[ScheduleEntry] = registry.Registry(
  'learning-rate schedule',
  {
    'constant': ScheduleEntry(lambda lr, c: _CONSTANT(lr)),
    'exp_decay': ScheduleEntry(
      lambda lr, c: _EXP_DECAY(lr, c.decay_rate, c.decay_period), ('decay_rate', 'decay_period')
    ),
    'step_decay': ScheduleEntry(lambda lr, c: _STEP_DECAY(lr, c.total_rounds), ('total_rounds',)),
  },
)


def schedule_record(config: ScheduleConfig) -> dict:
  """The config fields that shape the run: the name and the fields the schedule reads."""
  return {k: getattr(config, k) for k in ('name',) + SCHEDULES[config.name].hparams}


# -------------------------------------------------------------------------------------------
# Server optimizers (`optimizers.server`, `optimizers.adaadam`).

PUBLISHED = 'published'
ALGORITHM2 = 'algorithm2'
VARIANTS = (PUBLISHED, ALGORITHM2)


def _check_positive(name: str, value: float) -> None:
  if not value > 0:
    raise ValueError(f'{name} must be > 0, got {value}')


def _check_unit_interval(name: str, value: float) -> None:
  if not 0.0 <= value < 1.0:
    raise ValueError(f'{name} must be in [0, 1), got {value}')


def _check_variant(variant: str) -> None:
  if variant not in VARIANTS:
    raise ValueError(f'variant must be one of {", ".join(VARIANTS)}, got {variant!r}')


def initial_accumulator(variant: str, tau: float, value: float | None) -> float:
  """v_{-1}: 0 in the authors' code, tau^2 in Algorithm 2 (which requires >= tau^2).

  Raises:
    ValueError: `value` below 0, or below tau^2 for the algorithm2 variant.
  """
  if value is None:
    return 0.0 if variant == PUBLISHED else tau**2
  if value < 0:
    raise ValueError(f'initial_accumulator_value must be >= 0, got {value}')
  if variant == ALGORITHM2 and value < tau**2 * (1 - 1e-9):  # float slack: 0.1**2 > 0.01
    raise ValueError(
      f'initial_accumulator_value must be >= tau^2 = {tau**2} for the '
      f'algorithm2 variant (Algorithm 2 requires v_-1 >= tau^2), got {value}'
    )
  return value


def check_fedavg_sgd(learning_rate: float = 1.0) -> None:
  """`server.build_fedavg_sgd`'s check: eta > 0."""
  _check_positive('learning_rate', learning_rate)


def check_fedavgm(learning_rate: float = 1.0, momentum: float = 0.9) -> None:
  """`server.build_fedavgm`'s check: eta > 0, momentum in [0, 1)."""
  _check_positive('learning_rate', learning_rate)
  if not 0.0 <= momentum < 1.0:
    raise ValueError(f'momentum must be in [0, 1), got {momentum}')


def check_fedadagrad(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.0,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
  noise_variance: float = 0.0,
) -> float:
  """`server.build_fedadagrad`'s check; returns v_{-1} (`initial_accumulator`)."""
  _check_variant(variant)
  _check_positive('learning_rate', learning_rate)
  _check_positive('tau', tau)
  _check_unit_interval('beta_1', beta_1)
  _check_noise_variance(noise_variance)
  return initial_accumulator(variant, tau, initial_accumulator_value)


def _check_noise_variance(noise_variance: float) -> None:
  if isinstance(noise_variance, bool) or not (
    isinstance(noise_variance, (int, float)) and 0 <= noise_variance < float('inf')
  ):
    raise ValueError(f'noise_variance must be a finite number >= 0, got {noise_variance}')


def check_adam_like(
  learning_rate: float,
  tau: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  initial_accumulator_value: float | None = None,
  variant: str = PUBLISHED,
  noise_variance: float = 0.0,
) -> float:
  """`server.build_fedadam`'s and `build_fedyogi`'s check; returns v_{-1}."""
  _check_variant(variant)
  _check_positive('learning_rate', learning_rate)
  _check_positive('tau', tau)
  _check_unit_interval('beta_1', beta_1)
  _check_unit_interval('beta_2', beta_2)
  _check_noise_variance(noise_variance)
  return initial_accumulator(variant, tau, initial_accumulator_value)


def check_adaadam(
  learning_rate: float = 1e-3,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  epsilon: float = 1e-8,
  certainty_lr_from_step: int = 0,
) -> None:
  """`adaadam.build_adaadam`'s check: eta, eps > 0, betas in [0, 1), the step an int >= 0."""
  validation.check_positive('AdaAdam learning_rate', learning_rate)
  validation.check_positive('AdaAdam epsilon', epsilon)
  for name, beta in (('beta_1', beta_1), ('beta_2', beta_2)):
    if not 0 <= beta < 1:
      raise ValueError(f'AdaAdam {name} must be in [0, 1), got {beta}')
  validation.check_int('AdaAdam certainty_lr_from_step', certainty_lr_from_step, 0)


# What an AdaAdam step does with an aggregate certainty C <= 0 (`adaadam.certainty_step`):
# 'zero', no step (AdaFedAdam's default; Ju et al. do not discuss C <= 0), or 'none', C applied
# as it is (the authors' code).
CERTAINTY_FLOORS = ('zero', 'none')


def check_certainty_floor(certainty_floor: str) -> None:
  """A ValueError naming the valid choices unless `certainty_floor` is in CERTAINTY_FLOORS."""
  if certainty_floor not in CERTAINTY_FLOORS:
    raise ValueError(
      f'unknown AdaFedAdam certainty_floor {certainty_floor!r}; valid choices: '
      f'{", ".join(CERTAINTY_FLOORS)}'
    )


@dataclasses.dataclass(frozen=True)
class ServerOptimizerConfig:
  """Hyperparameters of a server optimizer, validated by its builder (`check_server_optimizer`).

  Attributes:
    name: one of `SERVER_OPTIMIZERS`.
    learning_rate: eta.
    momentum: sgdm's momentum.
    tau, beta_1, beta_2, initial_accumulator_value, variant: adaptive optimizers'.
      beta_1 None picks 0 for adagrad and 0.9 for adam/yogi/adaadam; tau is AdaAdam's eps.
    certainty_lr_from_step: AdaAdam's (`optimizers.adaadam`).
    noise_variance: adagrad, adam, yogi: the known variance sigma^2 of the noise on every
      coordinate of g_t (user-level DP: (z C / m)^2), removed from the second moment
      (`server.build_fedadam`); 0 (the default) leaves the optimizer as published.
  """

  name: str = settings.setting(
    'sgd',
    'server_optimizer',
    'Server optimizer: one of {choices}.',
    section=_SERVER_SECTION,
    cells=True,
    choices='SERVER_OPTIMIZERS',
  )
  learning_rate: float = settings.setting(
    1.0,
    'server_learning_rate',
    "Server learning rate (default: task's).",
    section=_SERVER_SECTION,
    cells=True,
    check=settings.positive,
    flag_default=None,
  )
  momentum: float = settings.setting(
    0.9, 'server_momentum', 'Server momentum (sgdm).', section=_SERVER_SECTION, cells=True
  )
  tau: float = settings.setting(
    1e-3,
    'tau',
    "Adaptivity tau (adagrad, adam, yogi); default: the task's published value for the "
    'optimizer, else 1e-3.',
    section=_SERVER_SECTION,
    cells=True,
    check=settings.positive,
    flag_default=None,
  )
  beta_1: float | None = settings.setting(
    None,
    'server_beta_1',
    'First-moment decay (default 0 for adagrad, 0.9 for adam/yogi).',
    section=_SERVER_SECTION,
    cells=True,
    check=settings.unit_interval,
  )
  beta_2: float = settings.setting(
    0.999,
    'server_beta_2',
    'Second-moment decay (adam, yogi).',
    section=_SERVER_SECTION,
    cells=True,
    check=settings.unit_interval,
  )
  initial_accumulator_value: float | None = settings.setting(
    None,
    'initial_accumulator_value',
    'v_{-1} (default: 0 for published, tau^2 for algorithm2).',
    section=_SERVER_SECTION,
    cells=True,
  )
  variant: str = settings.setting(
    PUBLISHED,
    'adaptive_variant',
    f"One of {', '.join(VARIANTS)}: the authors' code that produced the published tables, or "
    'Algorithm 2 as printed.',
    section=_SERVER_SECTION,
    cells=True,
    choices=VARIANTS,
  )
  certainty_lr_from_step: int = settings.setting(
    0,
    'adaadam_certainty_lr_from_step',
    "AdaAdam server: eta_t = C eta from this 0-based step on, eta before (authors' code: 6).",
    section='AdaFedAdam and its baselines (Ju et al.)',
    check=settings.nonnegative,
  )
  noise_variance: float = 0.0


@dataclasses.dataclass(frozen=True)
class ServerOptimizerEntry:
  """A registered server optimizer.

  Attributes:
    build: ServerOptimizerConfig -> `tff.learning.optimizers.Optimizer`.
    default_learning_rate: eta when neither the flag nor the task gives one.
    hparams: the `ServerOptimizerConfig` fields this optimizer reads (besides name and
      learning_rate); only these are recorded for a run, so an ignored flag cannot block a resume.
    default_tau: tau when neither the flag nor the task gives one.
    check: ServerOptimizerConfig -> None, raising the ValueError `build` would raise, without
      TensorFlow; None: the config is checked when it is built.
  """

  build: Callable[[ServerOptimizerConfig], Any]
  default_learning_rate: float
  hparams: tuple[str, ...] = ()
  default_tau: float = 1e-3
  check: Callable[[ServerOptimizerConfig], Any] | None = None


def _beta_1(config: ServerOptimizerConfig, default: float) -> float:
  return default if config.beta_1 is None else config.beta_1


def _builtin(
  builder: str,
  arguments: Callable[[ServerOptimizerConfig], dict[str, Any]],
  check: Callable[..., Any],
  default_learning_rate: float,
  hparams: tuple[str, ...] = (),
  default_tau: float = 1e-3,
) -> ServerOptimizerEntry:
  """An entry whose builder ('module:function') and check both take `arguments(config)`."""
  build = registry.Lazy(builder)
  return ServerOptimizerEntry(
    build=lambda c: build(**arguments(c)),
    default_learning_rate=default_learning_rate,
    hparams=hparams,
    default_tau=default_tau,
    check=lambda c: check(**arguments(c)),
  )


_SERVER = 'tff_adaptive.optimizers.server'
_ADAPTIVE_HPARAMS = ('tau', 'beta_1', 'beta_2', 'initial_accumulator_value', 'variant')


def _adagrad_arguments(c: ServerOptimizerConfig) -> dict[str, Any]:
  return dict(
    learning_rate=c.learning_rate,
    tau=c.tau,
    beta_1=_beta_1(c, 0.0),
    initial_accumulator_value=c.initial_accumulator_value,
    variant=c.variant,
    noise_variance=c.noise_variance,
  )


def _adam_like_arguments(c: ServerOptimizerConfig) -> dict[str, Any]:
  return dict(
    learning_rate=c.learning_rate,
    tau=c.tau,
    beta_1=_beta_1(c, 0.9),
    beta_2=c.beta_2,
    initial_accumulator_value=c.initial_accumulator_value,
    variant=c.variant,
    noise_variance=c.noise_variance,
  )


def _adaadam_arguments(c: ServerOptimizerConfig) -> dict[str, Any]:
  return dict(
    learning_rate=c.learning_rate,
    beta_1=_beta_1(c, 0.9),
    beta_2=c.beta_2,
    epsilon=c.tau,
    certainty_lr_from_step=c.certainty_lr_from_step,
  )


SERVER_OPTIMIZERS: registry.Registry[ServerOptimizerEntry] = registry.Registry(
  'server optimizer',
  {
    'sgd': _builtin(
      f'{_SERVER}:build_fedavg_sgd',
      lambda c: dict(learning_rate=c.learning_rate),
      check_fedavg_sgd,
      1.0,
    ),
    'sgdm': _builtin(
      f'{_SERVER}:build_fedavgm',
      lambda c: dict(learning_rate=c.learning_rate, momentum=c.momentum),
      check_fedavgm,
      0.3,
      ('momentum',),
    ),
    'adagrad': _builtin(
      f'{_SERVER}:build_fedadagrad',
      _adagrad_arguments,
      check_fedadagrad,
      0.1,
      ('tau', 'beta_1', 'initial_accumulator_value', 'variant'),
    ),
    'adam': _builtin(
      f'{_SERVER}:build_fedadam', _adam_like_arguments, check_adam_like, 0.01, _ADAPTIVE_HPARAMS
    ),
    'yogi': _builtin(
      f'{_SERVER}:build_fedyogi', _adam_like_arguments, check_adam_like, 0.01, _ADAPTIVE_HPARAMS
    ),
    'adaadam': _builtin(
      'tff_adaptive.optimizers.adaadam:build_adaadam',
      _adaadam_arguments,
      check_adaadam,
      1e-3,
      ('tau', 'beta_1', 'beta_2', 'certainty_lr_from_step'),
      default_tau=1e-8,
    ),
  },
)


def check_server_optimizer(config: ServerOptimizerConfig) -> None:
  """The checks `server.build_server_optimizer(config)` runs, without building (no TensorFlow).

  Raises:
    ValueError: unknown name (listing the valid ones) or an invalid hyperparameter, worded as
      the builder words it. An entry registered without a `check` is checked when built.
  """
  entry = SERVER_OPTIMIZERS[config.name]
  if entry.check is not None:
    entry.check(config)


def server_optimizer_record(config: ServerOptimizerConfig) -> dict[str, Any]:
  """The config fields that shape the run (name, learning_rate and the optimizer's hparams).

  Fields left None take the values the builder uses (beta_1: 0 for adagrad, 0.9 otherwise;
  initial_accumulator_value: the variant's v_{-1}).
  """
  entry = SERVER_OPTIMIZERS[config.name]
  record = {k: getattr(config, k) for k in ('name', 'learning_rate') + entry.hparams}
  if record.get('beta_1', 0.0) is None:
    record['beta_1'] = 0.0 if config.name == 'adagrad' else 0.9
  if 'initial_accumulator_value' in record and record['initial_accumulator_value'] is None:
    record['initial_accumulator_value'] = initial_accumulator(config.variant, config.tau, None)
  if config.noise_variance and config.name in NOISE_AWARE_SERVER_OPTIMIZERS:
    record['noise_variance'] = config.noise_variance  # only when set: older records stand
  return record


# The server optimizers that can remove a known noise variance from their second moment.
NOISE_AWARE_SERVER_OPTIMIZERS = ('adagrad', 'adam', 'yogi')

# Reddi et al.'s names of the FedOpt family -> its server optimizer here: FedX is algorithm
# 'fedopt' (build_fedopt) with the server optimizer X (the names users type for --algorithm).
FEDOPT_NAMES = {
  'fedavg': 'sgd',
  'fedavgm': 'sgdm',
  'fedadagrad': 'adagrad',
  'fedadam': 'adam',
  'fedyogi': 'yogi',
}


# -------------------------------------------------------------------------------------------
# Client optimizers (`optimizers.client`, `optimizers.sps`, `optimizers.delta_sgd`).

# SPS's step rules (`optimizers.sps`).
MODES = ('smooth_iter', 'constant')


@dataclasses.dataclass(frozen=True)
class SPSHParams:
  """Hyperparameters of SPS (defaults: the official implementation's, as Kim et al. used).

  See `optimizers.sps` for the rule.

  Attributes:
    c: > 0 (0.5).
    f_star: the assumed minimum of every minibatch loss (0).
    mode: 'smooth_iter' (official default, step cap) or 'constant' (Delta-SGD authors' code).
    init_step_size: eta_0 of smooth_iter, > 0 (1).
    gamma: smooth_iter's growth factor per epoch, >= 1 (2).
    n_batches_per_epoch: smooth_iter's n, >= 1 (500, the official class default).
    eta_max: optional cap of 'constant', > 0 (None: no cap).
    eps: added to the denominator, >= 0 (1e-8).
    grad_norm_tol: 'smooth_iter' takes a zero step when ||g|| is below it (the official code's
      1e-8); None: never.
  """

  c: float = settings.setting(
    0.5, 'sps_c', 'SPS c (> 0).', section=_KIM_SECTION, check=settings.positive, always=True
  )
  f_star: float = 0.0
  mode: str = settings.setting(
    'smooth_iter',
    'sps_mode',
    "SPS step rule: smooth_iter (the official implementation's default, growth capped at "
    "2^(1/500) per step) or constant (the Delta-SGD authors' federated code: no cap).",
    section=_KIM_SECTION,
    choices=MODES,
  )
  init_step_size: float = 1.0
  gamma: float = 2.0
  n_batches_per_epoch: int = 500
  eta_max: float | None = settings.setting(
    None,
    'sps_eta_max',
    "SPS 'constant' mode: optional step cap (> 0).",
    section=_KIM_SECTION,
    check=settings.positive,
    always=True,
  )
  eps: float = 1e-8
  grad_norm_tol: float | None = 1e-8

  @staticmethod
  def check_flags(values) -> None:
    """The flags' own cross-check (the trainer's wording)."""
    if values['sps_eta_max'] is not None and values['sps_mode'] != 'constant':
      raise ValueError(
        f'--sps_eta_max caps --sps_mode=constant only, got --sps_mode={values["sps_mode"]}'
      )

  def __post_init__(self):
    if not self.c > 0:
      raise ValueError(f'sps c must be > 0, got {self.c}')
    if self.mode not in MODES:
      raise ValueError(f'sps mode {self.mode!r} is unknown; valid choices: {", ".join(MODES)}')
    if not self.init_step_size > 0:
      raise ValueError(f'sps init_step_size must be > 0, got {self.init_step_size}')
    if not self.gamma >= 1:
      raise ValueError(f'sps gamma must be >= 1, got {self.gamma}')
    if not self.n_batches_per_epoch >= 1:
      raise ValueError(f'sps n_batches_per_epoch must be >= 1, got {self.n_batches_per_epoch}')
    if self.eta_max is not None and not self.eta_max > 0:
      raise ValueError(f'sps eta_max must be > 0, got {self.eta_max}')
    if self.eta_max is not None and self.mode != 'constant':
      raise ValueError(f"sps eta_max caps mode 'constant' only; mode is {self.mode!r}")
    if not self.eps >= 0:
      raise ValueError(f'sps eps must be >= 0, got {self.eps}')


# Delta-SGD's options, each the paper's rule or the authors' code (`optimizers.delta_sgd`).
GRADIENTS = ('paper', 'same_batch')
FIRST_STEPS = ('paper', 'grown')
ZERO_RULES = ('paper', 'grow')
_ALWAYS_POSITIVE = dict(section=_KIM_SECTION, check=settings.positive, always=True)
_ALWAYS_NONNEGATIVE = dict(section=_KIM_SECTION, check=settings.nonnegative, always=True)


@dataclasses.dataclass(frozen=True)
class DeltaSGDHParams:
  """Hyperparameters of Delta-SGD (Kim et al. 2024, Algorithm 1 and Sec. 4).

  See `optimizers.delta_sgd` for the rule and the options.

  Attributes:
    eta_0: initial step size, > 0 (paper: 0.2).
    theta_0: initial step-size ratio, > 0 (paper: 1).
    gamma: amplifier of the curvature candidate, > 0 (paper: 2).
    delta: growth factor in sqrt(1 + delta theta), >= 0 (paper: 0.1; authors' code default
      0.02).
    gradient: 'paper' or 'same_batch'.
    first_step: 'paper' or 'grown'.
    zero_rule: 'paper' or 'grow'.
    eps: added to the step whenever the min is taken, >= 0 (paper 0; authors' code 1e-8).
  """

  eta_0: float = settings.setting(
    0.2, 'delta_sgd_eta0', 'Delta-SGD eta_0 (> 0).', **_ALWAYS_POSITIVE
  )
  theta_0: float = settings.setting(
    1.0, 'delta_sgd_theta0', 'Delta-SGD theta_0 (> 0).', **_ALWAYS_POSITIVE
  )
  gamma: float = settings.setting(
    2.0, 'delta_sgd_gamma', 'Delta-SGD gamma (> 0).', **_ALWAYS_POSITIVE
  )
  delta: float = settings.setting(
    0.1,
    'delta_sgd_delta',
    "Delta-SGD delta (>= 0; the authors' code default 0.02).",
    **_ALWAYS_NONNEGATIVE,
  )
  gradient: str = settings.setting(
    'paper',
    'delta_sgd_gradient',
    "Delta-SGD gradient difference: paper (consecutive steps' gradients, one gradient per step) "
    "or same_batch (the authors' code: the previous iterate's gradient recomputed on the current "
    'minibatch, two per step).',
    section=_KIM_SECTION,
    choices=GRADIENTS,
  )
  first_step: str = settings.setting(
    'paper',
    'delta_sgd_first_step',
    "Delta-SGD first step: paper (eta_0) or grown (the authors' code: eta_0 sqrt(1 + delta "
    'theta_0)).',
    section=_KIM_SECTION,
    choices=FIRST_STEPS,
  )
  zero_rule: str = settings.setting(
    'paper',
    'delta_sgd_zero_rule',
    'Delta-SGD when a norm difference is 0: paper (zero gradient difference: no curvature bound) '
    "or grow (the authors' code: either zero -> the growth candidate).",
    section=_KIM_SECTION,
    choices=ZERO_RULES,
  )
  eps: float = settings.setting(
    0.0,
    'delta_sgd_eps',
    "Delta-SGD: added to the step when the min is taken (authors' code 1e-8).",
    **_ALWAYS_NONNEGATIVE,
  )

  def __post_init__(self):
    for name in ('eta_0', 'theta_0', 'gamma'):
      if not getattr(self, name) > 0:
        raise ValueError(f'delta_sgd {name} must be > 0, got {getattr(self, name)}')
    for name in ('delta', 'eps'):
      if not getattr(self, name) >= 0:
        raise ValueError(f'delta_sgd {name} must be >= 0, got {getattr(self, name)}')
    for name, valid in (
      ('gradient', GRADIENTS),
      ('first_step', FIRST_STEPS),
      ('zero_rule', ZERO_RULES),
    ):
      if getattr(self, name) not in valid:
        raise ValueError(
          f'delta_sgd {name} {getattr(self, name)!r} is unknown; valid choices: {", ".join(valid)}'
        )


_DOG_SECTION = 'DoG and L-DoG client optimizers (Ivgi et al. 2023)'


@dataclasses.dataclass(frozen=True)
class DoGHParams:
  """Hyperparameters of DoG and L-DoG (Ivgi, Hinder, Carmon, ICML 2023; `optimizers.dog`).

  Defaults: the authors' package (`dog-optimizer`), which produced the paper's numbers.

  Attributes:
    reps_rel: r_eps = reps_rel (1 + ||x_0||), the first step's length relative to the model's
      norm, > 0 (package: 1e-6; 1e-4 for models with batch norm). As a client optimizer DoG
      starts afresh every round, so a larger value shortens its warm-up (`optimizers.dog`).
    eps: added to the gradients' squared norms under the square root, >= 0 (package: 1e-8; the
      paper's formula: 0).
    init_eta: the first step size instead of r_eps / ||g_0|| (the package's option; r_eps is
      then 0); None: r_eps.
  """

  reps_rel: float = settings.setting(
    1e-6,
    'dog_reps_rel',
    'DoG / L-DoG: r_eps = reps_rel (1 + ||x_0||), the first step relative to the model norm (> 0; '
    "the authors' package: 1e-6, 1e-4 with batch norm).",
    section=_DOG_SECTION,
    check=settings.positive,
    always=True,
  )
  eps: float = settings.setting(
    1e-8,
    'dog_eps',
    "DoG / L-DoG: eps under the square root, eta = rbar / sqrt(G + eps) (>= 0; the authors' "
    "package: 1e-8; the paper's formula: 0).",
    section=_DOG_SECTION,
    check=settings.nonnegative,
    always=True,
  )
  init_eta: float | None = settings.setting(
    None,
    'dog_init_eta',
    "DoG / L-DoG: the first step size instead of r_eps / ||g_0|| (the package's init_eta; "
    'default: none).',
    section=_DOG_SECTION,
    check=settings.positive,
    always=True,
  )

  def __post_init__(self):
    validation.check_positive('dog reps_rel', self.reps_rel)
    validation.check_nonnegative('dog eps', self.eps)
    if self.init_eta is not None:
      validation.check_positive('dog init_eta', self.init_eta)


# Per-optimizer default of `ClientOptimizerConfig.epsilon` (PyTorch's, which Kim et al. used).
DEFAULT_EPSILON = {'adam': 1e-8, 'adagrad': 1e-10}


@dataclasses.dataclass(frozen=True)
class ClientOptimizerConfig:
  """Hyperparameters of a client optimizer.

  Attributes:
    name: one of `CLIENT_OPTIMIZERS`.
    learning_rate: eta_l (before the client schedule), > 0; unused by sps and delta_sgd.
    momentum: mu of sgdm, in [0, 1).
    beta_1, beta_2: Adam's moment decays, in [0, 1).
    epsilon: Adam's / Adagrad's eps, > 0; None takes `DEFAULT_EPSILON`.
    sps: SPS's hyperparameters.
    delta_sgd: Delta-SGD's hyperparameters.
    dog: DoG's and L-DoG's hyperparameters.
  """

  name: str = settings.setting(
    'sgd',
    'client_optimizer',
    'One of {choices}.',
    section=_CLIENT_SECTION,
    choices='CLIENT_OPTIMIZERS',
  )
  learning_rate: float = settings.setting(
    0.1,
    'client_learning_rate',
    "Client learning rate (default: task's).",
    section=_CLIENT_SECTION,
    check=settings.positive,
    flag_default=None,
    cells=True,
  )
  momentum: float = settings.setting(
    0.9, 'client_momentum', 'Client momentum (sgdm).', section=_CLIENT_SECTION
  )
  beta_1: float = settings.setting(
    0.9,
    'client_beta_1',
    'Client Adam beta_1.',
    section=_CLIENT_SECTION,
    check=settings.unit_interval,
  )
  beta_2: float = settings.setting(
    0.999,
    'client_beta_2',
    'Client Adam beta_2.',
    section=_CLIENT_SECTION,
    check=settings.unit_interval,
  )
  epsilon: float | None = settings.setting(
    None,
    'client_epsilon',
    "Client Adam/Adagrad epsilon (default PyTorch's: 1e-8 / 1e-10).",
    section=_CLIENT_SECTION,
    check=settings.positive,
  )
  sps: SPSHParams = SPSHParams()
  delta_sgd: DeltaSGDHParams = DeltaSGDHParams()
  dog: DoGHParams = DoGHParams()

  def __post_init__(self):
    CLIENT_OPTIMIZERS[self.name]  # pylint: disable=pointless-statement
    if not self.learning_rate > 0:
      raise ValueError(f'client learning_rate must be > 0, got {self.learning_rate}')
    for name in ('momentum', 'beta_1', 'beta_2'):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f'client {name} must be in [0, 1), got {getattr(self, name)}')
    if self.epsilon is not None and not self.epsilon > 0:
      raise ValueError(f'client epsilon must be > 0, got {self.epsilon}')

  @property
  def resolved_epsilon(self) -> float:
    return DEFAULT_EPSILON.get(self.name, 1e-8) if self.epsilon is None else self.epsilon


@dataclasses.dataclass(frozen=True)
class ClientOptimizerEntry:
  """A registered client optimizer.

  Attributes:
    build: config -> `client.ClientRule`.
    hparams: the config fields it reads besides the name (recorded in hparams.json).
    reads_learning_rate: False for rules that set their own step sizes (no learning rate, only
      the constant schedule).
    scalar_step: True where x_t - x_K is a sum of scalar steps times (momentum-averaged)
      gradients, so that (x_t - x_K) / (sum of steps) is a mean gradient (SCAFFOLD's control
      variate); False for per-coordinate preconditioners (Adam, Adagrad).
    stacked: its form for clients trained side by side (the vectorised engine, grid cells):
      (config, rule) -> a stepper of `engines.stacked_steps`; None: it has none, and the
      vectorised engine refuses it.
    grid_cells: grid cells (`engines.grid_cells`) train with it: x <- x - eta_l[k] g, each
      cell at its own eta_l (plain SGD, as its cells' one computation writes the step).
  """

  build: Callable[[ClientOptimizerConfig], Any]
  hparams: tuple[str, ...] = ()
  reads_learning_rate: bool = True
  scalar_step: bool = True
  stacked: Callable[[ClientOptimizerConfig, Any], Any] | None = None
  grid_cells: bool = False

  @property
  def options(self) -> type | None:
    """Its own hyperparameter dataclass (a field of `ClientOptimizerConfig` named in `hparams`,
    whose fields declare their flags), if any."""
    for name in self.hparams:
      value = getattr(ClientOptimizerConfig(), name)
      if dataclasses.is_dataclass(value):
        return type(value)
    return None


_STACKED = 'tff_adaptive.engines.stacked_steps'


def _entry(
  rule: str,
  *hparams: str,
  stacked: str = 'shared_optimizer',
  module: str = 'client',
  **kwargs: Any,
) -> ClientOptimizerEntry:
  """An entry built by `optimizers.<module>.<rule>`, stacked by `engines.stacked_steps.<stacked>`."""
  return ClientOptimizerEntry(
    registry.Lazy(f'tff_adaptive.optimizers.{module}:{rule}'),
    hparams,
    stacked=registry.Lazy(f'{_STACKED}:{stacked}'),
    **kwargs,
  )


CLIENT_OPTIMIZERS: registry.Registry[ClientOptimizerEntry] = registry.Registry(
  'client optimizer',
  {
    'sgd': _entry('sgd_rule', grid_cells=True),
    'sgdm': _entry('sgdm_rule', 'momentum'),
    'adam': _entry('adam_rule', 'beta_1', 'beta_2', 'epsilon', scalar_step=False),
    'adagrad': _entry('adagrad_rule', 'epsilon', scalar_step=False),
    'sps': _entry('sps_rule', 'sps', stacked='polyak_steps', reads_learning_rate=False),
    'delta_sgd': _entry(
      'delta_sgd_rule', 'delta_sgd', stacked='delta_sgd_steps', reads_learning_rate=False
    ),
    # DoG / L-DoG (Ivgi et al. 2023): `optimizers.dog`, no learning rate; L-DoG's step size is
    # per tensor (not a scalar step).
    'dog': _entry('dog_rule', 'dog', stacked='dog_steps', reads_learning_rate=False, module='dog'),
    'ldog': _entry(
      'ldog_rule',
      'dog',
      stacked='dog_steps',
      reads_learning_rate=False,
      scalar_step=False,
      module='dog',
    ),
  },
)


def client_optimizer_record(config: ClientOptimizerConfig) -> dict[str, Any]:
  """The config fields that shape the run: the name, the learning rate where the rule reads
  one, and the optimizer's hparams (epsilon resolved)."""
  entry = CLIENT_OPTIMIZERS[config.name]
  record = {'name': config.name}
  if entry.reads_learning_rate:
    record['learning_rate'] = config.learning_rate
  for key in entry.hparams:
    value = config.resolved_epsilon if key == 'epsilon' else getattr(config, key)
    record[key] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
  return record
