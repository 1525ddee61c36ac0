"""The noise a DP aggregation adds, as one object that both the noise and the accountant read.

`aggregators.dp_mean` and `aggregators.ddp_mean` build their queries from a `DeliveredNoise`
and carry it (`UpdateAggregation.privacy`); the trainer's accountant
(`privacy.accounting.for_noise`), its DP line and hparams.json's `dp_noise` read the same object,
never the flags again, so the privacy claimed cannot drift from the noise delivered. tests/aggregators/test_dp_noise.py measures the noise
each mechanism adds against this object and against the paper's equations written in NumPy.

Per round, m the clients per round, C the clip (C_t for the adaptive clip), noise on the sum of
the clipped updates, before the division by m:

* 'gaussian_fixed': N(0, (z C)^2 I): z_v = z.
* 'gaussian_adaptive' (Andrew et al. 2021): the value N(0, (z_v C_t)^2 I) and the clip's count
  of unclipped updates N(0, sigma_b^2), sensitivity 1/2, i.e. noise multiplier 2 sigma_b. Two
  Gaussian mechanisms on the same clients compose in RDP by adding 1 / z^2, so the pair is worth
  one Gaussian mechanism of noise multiplier

      z_eff = (z_v^-2 + (2 sigma_b)^-2)^(-1/2),

  and the split z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2) (TFF's `adaptive_clip_noise_params`) makes
  z_eff = z. The accountant reads z_eff of the delivered pair, not the z asked for.
* 'tree' (DP-FTRL, Kairouz et al. 2021): every tree node N(0, (z C)^2 I), the tree restarted
  every `restart_rounds` rounds.
* 'distributed_skellam' (Agarwal et al. 2021): each of the m clients adds Skellam noise of
  variance mu / m in the integer domain, mu = (s z C)^2: noise of std z C on the sum in the
  updates' units (`core.skellam.SkellamParameters`, which needs the update's dimension).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tff_adaptive.core import skellam
from tff_adaptive.core import validation

GAUSSIAN_FIXED = 'gaussian_fixed'
GAUSSIAN_ADAPTIVE = 'gaussian_adaptive'
TREE = 'tree'
DISTRIBUTED_SKELLAM = 'distributed_skellam'
MECHANISMS = (GAUSSIAN_FIXED, GAUSSIAN_ADAPTIVE, TREE, DISTRIBUTED_SKELLAM)


def default_count_stddev(clients_per_round: int) -> float:
  """sigma_b unless given: m / 20 (TFF's `adaptive_clip_noise_params` default)."""
  return 0.05 * clients_per_round


def split_noise_multiplier(noise_multiplier: float, count_stddev: float) -> float:
  """z_v for a total z and the count's sigma_b: (z^-2 - (2 sigma_b)^-2)^(-1/2) (0 when z = 0).

  Raises:
    ValueError: z >= 2 sigma_b, where the count alone spends the whole budget.
  """
  if noise_multiplier == 0:
    return 0.0
  if noise_multiplier >= 2 * count_stddev:
    raise ValueError(
      f'noise_multiplier={noise_multiplier:g} is too large for gaussian_adaptive: the clip count '
      f'takes noise sigma_b = {count_stddev:g}, which leaves nothing for the update unless '
      f'z < 2 sigma_b = {2 * count_stddev:g}'
    )
  return (noise_multiplier**-2 - (2 * count_stddev) ** -2) ** -0.5


@dataclasses.dataclass(frozen=True)
class DeliveredNoise:
  """What a DP aggregation adds each round (module docstring); build with `for_mechanism`.

  Attributes:
    mechanism: one of `MECHANISMS`.
    noise_multiplier: z >= 0, the total asked for.
    clip: C > 0 (the adaptive clip's initial C_0).
    clients_per_round: m, the denominator of the mean.
    value_noise_multiplier: z_v: the std of the noise on the clipped sum over C (tree: of each
      node; Skellam: of the m shares' sum in the updates' units).
    count_noise_stddev: gaussian_adaptive: sigma_b, the std of the noise on the count of
      unclipped updates (sensitivity 1/2); else None.
    restart_rounds: tree: the rounds between restarts (None: one tree for the whole run).
    bits: distributed_skellam: B, secure aggregation's modulus 2^B.
  """

  mechanism: str
  noise_multiplier: float
  clip: float
  clients_per_round: int
  value_noise_multiplier: float
  count_noise_stddev: float | None = None
  restart_rounds: int | None = None
  bits: int | None = None

  def __post_init__(self):
    if self.mechanism not in MECHANISMS:
      raise ValueError(
        f'mechanism={self.mechanism!r} is invalid; valid choices: {", ".join(MECHANISMS)}'
      )
    validation.check_nonnegative('noise_multiplier', self.noise_multiplier)
    validation.check_positive('clip', self.clip)
    validation.check_int('clients_per_round', self.clients_per_round, 1)
    validation.check_nonnegative('value_noise_multiplier', self.value_noise_multiplier)

  @classmethod
  def for_mechanism(
    cls,
    mechanism: str,
    noise_multiplier: float,
    clients_per_round: int,
    clip: float,
    *,
    clipped_count_stddev: float | None = None,
    restart_rounds: int | None = None,
    bits: int = 20,
  ) -> DeliveredNoise:
    """The noise of `mechanism` for a total z (the adaptive clip's split: module docstring)."""
    count = None
    value = float(noise_multiplier)
    if mechanism == GAUSSIAN_ADAPTIVE:
      validation.check_nonnegative('noise_multiplier', noise_multiplier)
      validation.check_int('clients_per_round', clients_per_round, 1)
      if clipped_count_stddev is not None:
        validation.check_nonnegative('clipped_count_stddev', clipped_count_stddev)
        count = float(clipped_count_stddev)
      elif noise_multiplier > 0:
        count = default_count_stddev(clients_per_round)
      else:  # z = 0 and no sigma_b given: no noise anywhere (TFF's rule)
        count = 0.0
      value = split_noise_multiplier(float(noise_multiplier), count)
    if mechanism == DISTRIBUTED_SKELLAM:
      skellam.check_arguments(noise_multiplier, clients_per_round, clip, bits)
    return cls(
      mechanism,
      float(noise_multiplier),
      float(clip),
      clients_per_round,
      value,
      count,
      restart_rounds if mechanism == TREE else None,
      bits if mechanism == DISTRIBUTED_SKELLAM else None,
    )

  @property
  def private(self) -> bool:
    """Whether any noise is added (z > 0)."""
    return self.noise_multiplier > 0

  def sum_stddev(self, clip: float | None = None) -> float:
    """The std of the value noise on the clipped sum (tree: of one node), per coordinate."""
    return self.value_noise_multiplier * (self.clip if clip is None else clip)

  def mean_stddev(self, clip: float | None = None) -> float:
    """The same on the mean: z_v C / m."""
    return self.sum_stddev(clip) / self.clients_per_round

  @property
  def effective_noise_multiplier(self) -> float:
    """The one Gaussian mechanism a round is worth: z_v, or the adaptive pair's z_eff."""
    if not self.count_noise_stddev or not self.value_noise_multiplier:
      return self.value_noise_multiplier
    return (self.value_noise_multiplier**-2 + (2 * self.count_noise_stddev) ** -2) ** -0.5

  def round_event(self):
    """One round's `dp_accounting` event before sampling, as TensorFlow Privacy's queries emit
    it (Gaussian mechanisms only: the tree and Skellam are accounted by `accounting`)."""
    import dp_accounting  # pylint: disable=g-import-not-at-top

    if self.mechanism not in (GAUSSIAN_FIXED, GAUSSIAN_ADAPTIVE):
      raise ValueError(f'{self.mechanism} has no one-round Gaussian event; see accounting')
    value = dp_accounting.GaussianDpEvent(self.value_noise_multiplier)
    if self.mechanism == GAUSSIAN_FIXED:
      return value
    count = dp_accounting.GaussianDpEvent(2 * self.count_noise_stddev)
    return dp_accounting.ComposedDpEvent([value, count])

  def skellam_parameters(self, dim: int) -> skellam.SkellamParameters:
    """distributed_skellam: one round's (z, C, m, d, B) for an update of `dim` values."""
    if self.mechanism != DISTRIBUTED_SKELLAM:
      raise ValueError(f'{self.mechanism} is not distributed_skellam')
    return skellam.SkellamParameters(
      self.value_noise_multiplier, self.clip, self.clients_per_round, dim, self.bits
    )

  def record(self) -> dict[str, Any]:
    """hparams.json's `dp_noise`: what the aggregation adds, as the accountant reads it."""
    out = {
      'mechanism': self.mechanism,
      'noise_multiplier': self.noise_multiplier,
      'value_noise_multiplier': self.value_noise_multiplier,
      'clip': self.clip,
      'clients_per_round': self.clients_per_round,
    }
    if self.count_noise_stddev is not None:
      out['count_noise_stddev'] = self.count_noise_stddev
      out['count_noise_multiplier'] = 2 * self.count_noise_stddev
      out['effective_noise_multiplier'] = self.effective_noise_multiplier
    if self.restart_rounds is not None:
      out['restart_rounds'] = self.restart_rounds
    if self.bits is not None:
      out['bits'] = self.bits
    return out

  def describe(self) -> str:
    """The noise in words, for the trainer's DP line."""
    z = f'noise multiplier {self.noise_multiplier:g}'
    if self.mechanism == GAUSSIAN_ADAPTIVE and self.private:
      z += (
        f' (updates z_v {self.value_noise_multiplier:.4g}, clip count sigma_b '
        f'{self.count_noise_stddev:.4g}: together worth z {self.effective_noise_multiplier:.4g})'
      )
    return z


__all__ = [
  'DISTRIBUTED_SKELLAM',
  'DeliveredNoise',
  'GAUSSIAN_ADAPTIVE',
  'GAUSSIAN_FIXED',
  'MECHANISMS',
  'TREE',
  'default_count_stddev',
  'split_noise_multiplier',
]
