"""The trainer's differential-privacy settings and their checks (no TensorFlow).

What `--dp` and its flags become before TensorFlow is imported; the mechanisms themselves are
`tff_adaptive.aggregators.dp` (TensorFlow Privacy queries under TFF's
`DifferentiallyPrivateFactory`) and the accounting is `privacy.accounting`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tff_adaptive import registry
from tff_adaptive.core import dp_noise
from tff_adaptive.core import skellam
from tff_adaptive.core import validation

NO_DP = 'none'
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
  """

  mechanism: str = NO_DP
  noise_multiplier: float = 1.0
  clip: float = 1.0
  target_quantile: float = 0.5
  clip_learning_rate: float = 0.2
  clipped_count_stddev: float | None = None
  delta: float | None = None
  bits: int = 20

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
