"""The distributed Skellam mechanism's parameters and RDP (pure Python, no TensorFlow).

Agarwal, Kairouz, Liu. "The Skellam Mechanism for Differentially Private Federated Learning."
NeurIPS 2021. What `aggregators.ddp_mean` runs (TFF's `DistributedDpSumFactory`, its defaults)
and `privacy.accounting.SkellamRounds` accounts, from (z, C, m, d, B):

    d' = 2^ceil(log2 d)                                   # the Hadamard transform's length
    k = sqrt(2) erfc^-1(1e-4)                             # std devs of the sum kept in 2^B
    s = min(sqrt(2^(2B) - m k^2) / (2 k sqrt(C^2 m^2 / d' + (z C)^2)), 1e6)    # TFF's scale
    mu = (s z C)^2                                        # the summed Skellam noise's variance
    Delta_2 = s (C + sqrt(d') / s + 1e-5)                 # L2 norm of a rounded clipped update
    Delta_1 = ceil(Delta_2 min(sqrt(d'), Delta_2))        # integers: L1 <= L2^2, L1 <= sqrt(d') L2

Delta_2: rounding s c to integers moves each of the d' coordinates by less than 1, so by less
than sqrt(d') in L2 norm (TFF's `inflated_l2_norm_bound` with beta = 0, plus its 1e-5 leeway).
A client's update replaced by zero moves the noised integer sum by at most (Delta_1, Delta_2),
and the mechanism is (alpha, eps(alpha))-RDP for integer alpha > 1 with

    eps(alpha) = alpha Delta_2^2 / (2 mu)
                 + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2), 3 Delta_1 / (2 mu)),

the Gaussian mechanism's alpha Delta_2^2 / (2 mu) (sensitivity Delta_2, std sqrt(mu)) plus a
term that vanishes as mu grows.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from tff_adaptive.core import validation

__all__ = ['MAX_BITS', 'SkellamParameters', 'check_arguments', 'modular_clip_stddevs']

# TFF's DistributedDpSumFactory constants (tensorflow_federated/python/aggregators/
# distributed_dp.py).
MODCLIP_PROBABILITY = 1e-4
MAX_SCALE = 1e6
NORM_LEEWAY = 1e-5
MAX_BITS = 22  # its arithmetic is float32, exact for integers up to 2^24


def modular_clip_stddevs() -> float:
  """k: the standard deviations of the aggregate kept inside 2^B (probability 1e-4 outside)."""
  return statistics.NormalDist().inv_cdf(1.0 - MODCLIP_PROBABILITY / 2)


def check_arguments(noise_multiplier, clients_per_round, clip, bits) -> None:
  """TFF's checks of (z, m, C, B), as one-line ValueErrors naming the argument."""
  validation.check_nonnegative('noise_multiplier', noise_multiplier)
  validation.check_int('clients_per_round', clients_per_round, 1)
  validation.check_positive('clip', clip)
  if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
    raise ValueError(f'bits={bits!r} is invalid; expected an integer in [1, {MAX_BITS}]')
  k = modular_clip_stddevs()
  if 2.0 ** (2 * bits) < clients_per_round * k**2 or 2**bits < clients_per_round:
    raise ValueError(
      f'bits={bits} is too few for {clients_per_round} clients per round: their sum needs '
      f'2^(2B) >= m k^2 (k = {k:.2f}) and 2^B >= m'
    )


@dataclasses.dataclass(frozen=True)
class SkellamParameters:
  """One round of the distributed Skellam mechanism (module docstring).

  Attributes:
    noise_multiplier: z >= 0.
    clip: C > 0.
    clients_per_round: m.
    dim: d, the number of values of an update (the model's trainable parameters).
    bits: B, 1..22.
  """

  noise_multiplier: float
  clip: float
  clients_per_round: int
  dim: int
  bits: int = 20

  def __post_init__(self):
    check_arguments(self.noise_multiplier, self.clients_per_round, self.clip, self.bits)
    validation.check_int('dim', self.dim, 1)

  @property
  def padded_dim(self) -> int:
    """d'."""
    return 2 ** math.ceil(math.log2(self.dim))

  @property
  def scale(self) -> float:
    """s."""
    k, m = modular_clip_stddevs(), self.clients_per_round
    numerator = math.sqrt(2.0 ** (2 * self.bits) - m * k**2)
    spread = self.clip**2 * m**2 / self.padded_dim + (self.noise_multiplier * self.clip) ** 2
    return min(numerator / (2 * k * math.sqrt(spread)), MAX_SCALE)

  @property
  def variance(self) -> float:
    """mu, in the integer domain."""
    return (self.scale * self.noise_multiplier * self.clip) ** 2

  @property
  def local_stddev(self) -> float:
    """sqrt(mu / m): one client's share, in the integer domain."""
    return math.sqrt(self.variance / self.clients_per_round)

  @property
  def l2_sensitivity(self) -> float:
    """Delta_2."""
    return (self.clip + math.sqrt(self.padded_dim) / self.scale + NORM_LEEWAY) * self.scale

  @property
  def l1_sensitivity(self) -> float:
    """Delta_1."""
    l2 = self.l2_sensitivity
    return float(math.ceil(l2 * min(math.sqrt(self.padded_dim), l2)))

  def rdp(self, alpha: int) -> float:
    """eps(alpha) of one round, for an integer order alpha >= 2 (infinite when z = 0)."""
    validation.check_int('alpha', alpha, 2)
    mu = self.variance
    if mu == 0:
      return math.inf
    l1, l2 = self.l1_sensitivity, self.l2_sensitivity
    correction = min(((2 * alpha - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu))
    return alpha * l2**2 / (2 * mu) + correction
