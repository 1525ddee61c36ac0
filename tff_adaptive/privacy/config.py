"""The trainer's differential-privacy settings and their checks (no TensorFlow).

What `--dp` and its flags become before TensorFlow is imported; the mechanisms themselves are
`tff_adaptive.aggregators.dp` (TensorFlow Privacy queries under TFF's
`DifferentiallyPrivateFactory`) and the accounting is `privacy.accounting`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tff_adaptive import registry
from tff_adaptive import settings
from tff_adaptive.core import dp_noise
from tff_adaptive.core import skellam
from tff_adaptive.core import validation

NO_DP = 'none'
_SECTION = 'Differential privacy'  # the --help section of --dp's flags
_ADAPTIVE = 'gaussian_adaptive'
TREE = 'tree'
DISTRIBUTED_SKELLAM = 'distributed_skellam'
# 'none', then the mechanisms of `aggregators.dp.MECHANISMS` (a test holds the two together),
# then distributed DP (`aggregators.ddp_mean`).
DP_MECHANISMS: registry.Registry[str] = registry.Registry(
  'DP mechanism',
  {
    NO_DP: 'no differential privacy',
    'gaussian_fixed': 'clip to C, Gaussian noise z C on the sum (McMahan et al. 2018)',
    _ADAPTIVE: 'the clip follows a quantile of the update norms (Andrew et al. 2021)',
    TREE: "clip to C, DP-FTRL's tree noise, restarted every epoch (Kairouz et al. 2021)",
    DISTRIBUTED_SKELLAM: (
      'clip to C, round to integers, each client adds its share of Skellam noise, secure '
      'aggregation mod 2^B (Agarwal et al. 2021; engine tff)'
    ),
  },
)


_SHORT_NAMES = {
  'gaussian_fixed': 'fixed',
  _ADAPTIVE: 'adaptive',
  DISTRIBUTED_SKELLAM: 'skellam',
}
# --dp's flags read by some mechanisms only (`ignored_flags`).
_ADAPTIVE_FIELDS = ('target_quantile', 'clip_learning_rate')
_DISTRIBUTED_FIELDS = ('bits',)


def ignored_flags(dp: DPConfig | None, present: dict[str, bool]) -> list[str]:
  """One line per --dp flag given (`present`: flag -> given) that the chosen mechanism (or no
  DP) does not read."""
  lines = []
  for field, found in settings.declared(DPConfig):
    if field == 'mechanism' or not present[found.flag]:
      continue
    if dp is None:
      lines.append(f'--{found.flag} is ignored without --dp')
    elif (field in _ADAPTIVE_FIELDS and not dp.adaptive) or (
      field in _DISTRIBUTED_FIELDS and not dp.distributed
    ):
      lines.append(f'--{found.flag} is ignored by --dp={dp.mechanism}')
  return lines


def dp_from_flags(
  values: dict[str, Any],
  clients_per_round: int,
  algorithm_refusal: str | None,
  engine: tuple[str, tuple[str, ...], bool],
) -> DPConfig | None:
  """--dp's config from its flags' values (None for --dp=none), checked against the algorithm
  (`algorithm_refusal`: why it cannot run under DP), the clients per round and the engine
  (its name, the engines that compute secure aggregation, whether TFF workers run it).

  Raises:
    ValueError: one line, in the trainer's flags.
  """
  if values['dp'] == NO_DP:
    return None
  if algorithm_refusal is not None:
    raise ValueError(f'--dp={values["dp"]}: {algorithm_refusal}')
  try:
    dp = settings.from_flags(DPConfig, values)
    dp.check_clients_per_round(clients_per_round)
  except ValueError as e:
    raise ValueError(settings.flag_message(str(e), DPConfig)) from None
  name, secure, on_workers = engine
  if dp.distributed and name not in secure:
    raise ValueError(
      f'--dp={dp.mechanism} needs --engine={" or ".join(secure)} (got --engine={name}): secure '
      "aggregation is a TFF intrinsic, which only TFF's runtime computes"
    )
  if dp.distributed and on_workers:
    raise ValueError(
      f'--dp={dp.mechanism} runs on one TFF worker: secure aggregation is simulated by TFF on '
      'one worker, not merged across --workers or --local_workers'
    )
  return dp


def client_sampler(dp: DPConfig | None, sampler: str, given: bool) -> str:
  """The client sampler a run with `dp` accounts (`sampler`: --client_sampler, `given`: whether
  it was given): 'epoch' for tree, whose accounting needs each client at most once per tree
  (another sampler given explicitly is refused), not 'epoch' for the Gaussian mechanisms, whose
  accounting needs a fresh uniform draw every round; any for distributed DP, accounted without
  amplification by sampling."""
  if dp is None or dp.distributed:
    return sampler
  if not dp.tree:
    if sampler == 'epoch':
      raise ValueError(
        f'--dp={dp.mechanism} accounts m clients drawn afresh every round (amplification by '
        'sampling), which --client_sampler=epoch does not do: use --client_sampler=tff or fast, '
        'or --dp=tree'
      )
    return sampler
  if given and sampler != 'epoch':
    raise ValueError(
      f'--dp=tree needs --client_sampler=epoch (each client at most once per tree, the tree '
      f'restarted every epoch), got --client_sampler={sampler}'
    )
  return 'epoch'


def noise_variance(
  dp: DPConfig | None, server: str, clients_per_round: int, second_moment_servers: tuple
) -> float:
  """sigma^2 = (z C / m)^2 for the noise-aware server (`DPConfig.noise_aware_server`) of one of
  `second_moment_servers`, else 0 (the server as published).

  Raises:
    ValueError: a mechanism whose noise variance changes from round to round, or a server
      optimizer without a second moment (one line, in the trainer's flags).
  """
  if dp is None or not dp.noise_aware_server:
    return 0.0
  why = {
    _ADAPTIVE: 'with gaussian_adaptive the clip, and so the noise variance, changes every round',
    DISTRIBUTED_SKELLAM: 'with distributed_skellam the noise has the rounding in it too, and '
    'secure aggregation may wrap it around',
    TREE: "with tree a round's noise is a difference of two tree estimates, its variance "
    'changes from round to round',
  }.get(dp.mechanism)
  if why is not None:
    raise ValueError(f'--dp_noise_aware_server needs --dp=gaussian_fixed: {why}')
  if server not in second_moment_servers:
    valid = ', '.join(second_moment_servers)
    raise ValueError(
      f'--dp_noise_aware_server corrects an adaptive second moment: valid --server_optimizer: '
      f'{valid} (got {server!r})'
    )
  return (dp.noise_multiplier * dp.clip / clients_per_round) ** 2


def adaptive_count_stddev(clients_per_round: int, clipped_count_stddev: float | None) -> float:
  """sigma_b, the noise of the adaptive clip's count: m / 20 unless given (TFF's default)."""
  if clipped_count_stddev is None:
    return dp_noise.default_count_stddev(clients_per_round)
  return clipped_count_stddev


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """User-level DP of a run (`aggregators.dp` has the update rule).

  Attributes:
    mechanism: one of `DP_MECHANISMS`.
    noise_multiplier: z >= 0, the total noise multiplier (0: clipping without noise, no privacy).
    clip: C > 0, the fixed clip, or the adaptive clip's initial value.
    target_quantile: gaussian_adaptive: the quantile of the clients' update norms that the
      clip tracks, in (0, 1).
    clip_learning_rate: gaussian_adaptive: eta_C >= 0 of the geometric clip update.
    clipped_count_stddev: gaussian_adaptive: sigma_b (None: m / 20).
    delta: the delta of the reported (epsilon, delta), in (0, 1); None: 1 / N^1.1.
    bits: distributed_skellam: B, secure aggregation's modulus 2^B, 1..22.
    noise_aware_server: remove the known noise variance from the adaptive server's second
      moment (gaussian_fixed; the server optimizer's `noise_variance`).
  """

  mechanism: str = settings.setting(
    NO_DP,
    'dp',
    "User-level differential privacy: none, gaussian_fixed (every client's update clipped to "
    'L2 norm --dp_clip, Gaussian noise of std z C added to their sum, divided by the clients per '
    'round, then the server optimizer), gaussian_adaptive (the clip follows a quantile of the '
    "update norms, Andrew et al. 2021), tree (DP-FTRL, Kairouz et al. 2021: the clipped sums' "
    'running total noised through a binary tree, restarted every epoch; clients sampled in '
    'epochs, --client_sampler=epoch) or distributed_skellam (distributed DP, Agarwal et al. '
    '2021: each client clips, rounds to integers and adds its share of Skellam noise, secure '
    'aggregation sums modulo 2^--dp_bits; --engine=tff only). Every client counts once '
    '(--client_weighting=uniform); metrics.csv gets dp_epsilon after every round. fedopt, '
    'fedprox and fedpa only.',
    section=_SECTION,
    choices=DP_MECHANISMS,
  )
  noise_multiplier: float = settings.setting(
    1.0,
    'dp_noise_multiplier',
    '--dp: noise multiplier z >= 0 (0: clipping only, not private).',
    section=_SECTION,
  )
  clip: float = settings.setting(
    1.0,
    'dp_clip',
    "--dp: clip C > 0 of a client's update (gaussian_adaptive: its initial value).",
    section=_SECTION,
  )
  target_quantile: float = settings.setting(
    0.5,
    'dp_target_quantile',
    '--dp=gaussian_adaptive: the quantile of the update norms the clip tracks, in (0, 1).',
    section=_SECTION,
  )
  clip_learning_rate: float = settings.setting(
    0.2,
    'dp_clip_learning_rate',
    '--dp=gaussian_adaptive: learning rate (>= 0) of the clip.',
    section=_SECTION,
  )
  clipped_count_stddev: float | None = None
  delta: float | None = settings.setting(
    None,
    'dp_delta',
    '--dp: the delta of the reported (epsilon, delta), in (0, 1). Default: 1 / N^1.1 for N '
    'training clients.',
    section=_SECTION,
  )
  bits: int = settings.setting(
    20,
    'dp_bits',
    "--dp=distributed_skellam: B, 1..22, secure aggregation's modulus 2^B (fewer bits: coarser "
    'rounding, a larger sensitivity, a larger epsilon).',
    section=_SECTION,
  )
  noise_aware_server: bool = settings.setting(
    False,
    'dp_noise_aware_server',
    '--dp=gaussian_fixed with --server_optimizer=adagrad/adam/yogi: remove the known noise '
    'variance (z C / m)^2 from the second moment, v_t on g_t^2 - (z C / m)^2, clamped at 0.',
    section=_SECTION,
  )

  def __post_init__(self):
    if self.mechanism not in DP_MECHANISMS:
      raise ValueError(
        f'mechanism={self.mechanism!r} is invalid; valid choices: {", ".join(DP_MECHANISMS)}'
      )
    validation.check_nonnegative('noise_multiplier', self.noise_multiplier)
    validation.check_positive('clip', self.clip)
    if not 0 < self.target_quantile < 1:
      raise ValueError(f'target_quantile={self.target_quantile!r} is invalid; expected (0, 1)')
    validation.check_nonnegative('clip_learning_rate', self.clip_learning_rate)
    if self.clipped_count_stddev is not None:
      validation.check_positive('clipped_count_stddev', self.clipped_count_stddev)
    if self.delta is not None and not 0 < self.delta < 1:
      raise ValueError(f'delta={self.delta!r} is invalid; expected (0, 1)')
    if self.distributed:
      skellam.check_arguments(self.noise_multiplier, 1, self.clip, self.bits)

  @property
  def short_name(self) -> str:
    """The mechanism as experiment names show it (`dp-<short name>-z<z>`)."""
    return _SHORT_NAMES.get(self.mechanism, self.mechanism)

  @property
  def enabled(self) -> bool:
    return self.mechanism != NO_DP

  @property
  def adaptive(self) -> bool:
    return self.mechanism == _ADAPTIVE

  @property
  def tree(self) -> bool:
    return self.mechanism == TREE

  @property
  def distributed(self) -> bool:
    """Distributed DP under secure aggregation (engine tff only)."""
    return self.mechanism == DISTRIBUTED_SKELLAM

  def check_clients_per_round(self, clients_per_round: int) -> None:
    """The adaptive clip's budget split needs z < 2 sigma_b (`aggregators.dp`), distributed
    DP's sum needs enough bits for m clients (`core.skellam`); else ValueError."""
    if self.distributed:
      skellam.check_arguments(self.noise_multiplier, clients_per_round, self.clip, self.bits)
    if not self.adaptive or self.noise_multiplier == 0:
      return
    sigma_b = adaptive_count_stddev(clients_per_round, self.clipped_count_stddev)
    if self.noise_multiplier >= 2 * sigma_b:
      raise ValueError(
        f'noise_multiplier={self.noise_multiplier:g} is too large for gaussian_adaptive with '
        f'{clients_per_round} clients per round: the clip count takes noise sigma_b = '
        f'{sigma_b:g} (m / 20), which leaves nothing for the update unless z < 2 sigma_b = '
        f'{2 * sigma_b:g}; sample more clients per round or use gaussian_fixed'
      )

  def delta_for(self, num_clients: int) -> float:
    """The reported delta: `delta`, or 1 / N^1.1 for a population of N."""
    if self.delta is not None:
      return self.delta
    validation.check_int('num_clients', num_clients, 1)
    return float(num_clients) ** -1.1

  def record(self) -> dict[str, Any]:
    """hparams.json's 'dp': the fields the mechanism reads, and delta (what dp_epsilon means:
    a resume with another delta would change the column midway)."""
    out = {
      'mechanism': self.mechanism,
      'noise_multiplier': self.noise_multiplier,
      'clip': self.clip,
      'delta': self.delta,
    }
    if self.distributed:
      out['bits'] = self.bits
    if self.adaptive:
      out.update(
        target_quantile=self.target_quantile,
        clip_learning_rate=self.clip_learning_rate,
        clipped_count_stddev=self.clipped_count_stddev,
      )
    return out
