"""User-level privacy accounting of federated rounds with the Gaussian mechanism.

A DP round (McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR
2018, DP-FedAvg) samples clients, clips each client's update to L2 norm C, sums the clipped
updates and adds N(0, (z C)^2 I): the Gaussian mechanism on a sum whose sensitivity to one
client is C when a client is added or removed (noise multiplier z), and 2C when one is replaced
by another (noise multiplier z / 2: `dp_accounting` measures the noise against the sensitivity of
the neighbouring relation it is given, so `fixed_size` passes it z / 2). What the server does with the
noised sum (FedAvg's division by the round's client count, an adaptive optimizer's step) is
post-processing and costs nothing. Privacy is of a whole client's data (user level), not of
single examples.

`GaussianRounds` describes T such rounds; `epsilon(rounds, delta)` is the epsilon of the
(epsilon, delta) guarantee over all of them, `calibrated_noise_multiplier` the smallest z that
reaches a target epsilon. How the clients of a round are chosen decides the amplification by
sampling, so it is part of the description (`sampling`):

* 'poisson': each of the N clients joins each round independently with probability q = m / N
  (the DP-FedAvg analysis; neighbouring populations differ by adding or removing a client).
  RDP of the sampled Gaussian: Mironov, Talwar and Zhang, "Renyi Differential Privacy of the
  Sampled Gaussian Mechanism" (2019); or the privacy loss distribution ('pld').
* 'fixed_size': exactly m of the N clients, uniformly without replacement, which is what
  `tff_adaptive.loop.sampling` does each round (neighbours: one client replaced by another).
  RDP of sampling without replacement: Wang, Balle and Kasiviswanathan, "Subsampled Renyi
  Differential Privacy and Analytical Moments Accountant" (AISTATS 2019). 'rdp' only.
* 'all': every client in every round (q = 1; cross-silo; add or remove a client).

DP-FTRL's tree aggregation (`aggregators.dp_mean('tree', ...)`) needs no sampling at all;
`TreeRounds` describes T of its rounds with the tree restarted every R rounds, each client
taking part at most once per tree (the trainer's epochs, `loop.sampling` method 'epoch'). One
client's data touches the ceil(log2(R + 1)) nodes on its leaf's path in each tree it is in, each
node noised with std z C, so a tree is a Gaussian mechanism of squared sensitivity
ceil(log2(R + 1)) C^2 and T rounds compose floor(T / R) full trees and one of T mod R rounds:

  RDP(alpha) = alpha (floor(T / R) ceil(log2(R + 1)) + ceil(log2(T mod R + 1))) / (2 z^2)

(Kairouz et al., "Practical and Private (Deep) Learning without Sampling or Shuffling", ICML
2021, App. D; `dp_accounting`'s `SingleEpochTreeAggregationDpEvent`), under neighbouring
populations that differ by one client's clipped update replaced by zero, a null client
(REPLACE_SPECIAL; replacing one client by another doubles the sensitivity: `TreeRounds(z / 2,
...)` accounts that relation).

The distributed Skellam mechanism under secure aggregation (`aggregators.ddp_mean`, TFF's
`DistributedDpSumFactory`): `SkellamRounds` describes T of its rounds. `dp_accounting` has no
Skellam event, so its RDP bound (Agarwal, Kairouz, Liu, NeurIPS 2021; `core.skellam`, integer
orders) is composed here, T times one round's, without amplification by sampling (an upper
bound whatever the sampling), under neighbouring populations that differ by one client's
update replaced by zero (as the tree's), and converted as below.

The accounting itself is Google's `dp_accounting` (the library TFF and TensorFlow Privacy use);
this module builds the DP event of a run and converts. The RDP-to-(epsilon, delta) conversion
of `dp_accounting` 0.4 is Proposition 12 of Canonne, Kamath and Steinke ("The Discrete
Gaussian for Differential Privacy", 2020):

  epsilon = min_alpha  RDP(alpha) + log((alpha - 1) / alpha) - (log delta + log alpha) / (alpha - 1),

taken over `ORDERS`; tests/privacy/test_privacy_accounting.py holds it to an independent NumPy
implementation of these equations.
"""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
from dp_accounting import pld
from dp_accounting import rdp
import numpy as np

from tff_adaptive.core import dp_noise
from tff_adaptive.core import skellam
from tff_adaptive.core import validation

__all__ = [
  'ACCOUNTANTS',
  'EpsilonByRound',
  'ORDERS',
  'SAMPLINGS',
  'GaussianRounds',
  'SkellamEpsilonByRound',
  'SkellamRounds',
  'TreeEpsilonByRound',
  'TreeRounds',
  'calibrated_noise_multiplier',
  'epsilon',
  'for_noise',
]

SAMPLINGS = ('poisson', 'fixed_size', 'all')
ACCOUNTANTS = ('rdp', 'pld')
# RDP orders: fine near 1 (large epsilon or few rounds), integers up to 256 (small epsilon).
ORDERS = tuple(
  [1.0 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [64, 80, 96, 128, 192, 256]
)
_PLD_DISCRETIZATION = 1e-4  # dp_accounting's default; an upper bound on epsilon either way


@dataclasses.dataclass(frozen=True)
class GaussianRounds:
  """T rounds of the Gaussian mechanism on the clipped sum of the sampled clients' updates.

  Attributes:
    noise_multiplier: z, the noise's standard deviation over the clip norm (> 0).
    rounds: T (>= 1).
    clients_per_round: m, the expected (poisson) or exact (fixed_size) clients per round;
      ignored with sampling='all'.
    num_clients: N, the population (>= m).
    sampling: one of `SAMPLINGS` (module docstring).
  """

  noise_multiplier: float
  rounds: int
  clients_per_round: int
  num_clients: int
  sampling: str = 'poisson'

  def __post_init__(self):
    if self.sampling not in SAMPLINGS:
      raise ValueError(f'sampling={self.sampling!r}: valid choices: {", ".join(SAMPLINGS)}')
    validation.check_positive('noise_multiplier', self.noise_multiplier)
    validation.check_int('rounds', self.rounds, 1)
    validation.check_int('num_clients', self.num_clients, 1)
    validation.check_int('clients_per_round', self.clients_per_round, 1)
    if self.clients_per_round > self.num_clients:
      raise ValueError(
        f'clients_per_round={self.clients_per_round} is invalid; expected at most '
        f'num_clients={self.num_clients}'
      )

  @property
  def sampling_rate(self) -> float:
    """q: the probability that a given client takes part in a given round."""
    if self.sampling == 'all':
      return 1.0
    return self.clients_per_round / self.num_clients

  def event(self) -> dp_accounting.DpEvent:
    """The `dp_accounting` event of the whole run."""
    gaussian = dp_accounting.GaussianDpEvent(self.noise_multiplier)
    if self.sampling == 'poisson':
      one_round = dp_accounting.PoissonSampledDpEvent(self.sampling_rate, gaussian)
    elif self.sampling == 'fixed_size':
      # Replace-one neighbours: one client swapped for another moves the clipped sum by up to
      # 2C, and the noise's std z C over that sensitivity is z / 2 (module docstring).
      one_round = dp_accounting.SampledWithoutReplacementDpEvent(
        self.num_clients,
        self.clients_per_round,
        dp_accounting.GaussianDpEvent(self.noise_multiplier / 2),
      )
    else:
      one_round = gaussian
    return dp_accounting.SelfComposedDpEvent(one_round, self.rounds)

  @property
  def neighboring_relation(self) -> dp_accounting.NeighboringRelation:
    if self.sampling == 'fixed_size':
      return dp_accounting.NeighboringRelation.REPLACE_ONE
    return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


@dataclasses.dataclass(frozen=True)
class TreeRounds:
  """T rounds of DP-FTRL's tree aggregation, the tree restarted every R rounds (module docstring).

  Attributes:
    noise_multiplier: z, each tree node's noise std over the clip norm (> 0).
    rounds: T (>= 1).
    rounds_per_tree: R (>= 1), the rounds between restarts; each client takes part at most
      once in each tree.
  """

  noise_multiplier: float
  rounds: int
  rounds_per_tree: int

  def __post_init__(self):
    validation.check_positive('noise_multiplier', self.noise_multiplier)
    validation.check_int('rounds', self.rounds, 1)
    validation.check_int('rounds_per_tree', self.rounds_per_tree, 1)

  def event(self) -> dp_accounting.DpEvent:
    """The `dp_accounting` event: floor(T / R) full trees, then one of T mod R rounds."""
    full, rest = divmod(self.rounds, self.rounds_per_tree)
    tree = dp_accounting.SingleEpochTreeAggregationDpEvent
    events = []
    if full:
      events.append(
        dp_accounting.SelfComposedDpEvent(tree(self.noise_multiplier, self.rounds_per_tree), full)
      )
    if rest:
      events.append(tree(self.noise_multiplier, rest))
    return dp_accounting.ComposedDpEvent(events)

  @property
  def neighboring_relation(self) -> dp_accounting.NeighboringRelation:
    return dp_accounting.NeighboringRelation.REPLACE_SPECIAL


# Integer RDP orders for the Skellam bound (it is stated for integer alpha).
SKELLAM_ORDERS = tuple(range(2, 64)) + (64, 80, 96, 128, 192, 256)


@dataclasses.dataclass(frozen=True)
class SkellamRounds:
  """T rounds of the distributed Skellam mechanism (module docstring; `core.skellam`).

  Attributes:
    parameters: one round's (z, C, m, d, B), `core.skellam.SkellamParameters`; z > 0.
    rounds: T (>= 1).
  """

  parameters: skellam.SkellamParameters
  rounds: int

  def __post_init__(self):
    validation.check_positive('noise_multiplier', self.parameters.noise_multiplier)
    validation.check_int('rounds', self.rounds, 1)

  def rdp(self, orders=SKELLAM_ORDERS) -> np.ndarray:
    """T eps(alpha) at each integer order."""
    return np.array([self.rounds * self.parameters.rdp(int(a)) for a in orders], np.float64)


def _check_delta(delta: float) -> None:
  if not (isinstance(delta, (int, float)) and 0 < delta < 1):
    raise ValueError(f'delta must be in (0, 1), got {delta!r}')


def _accountant(
  rounds: GaussianRounds | TreeRounds, accountant: str, orders
) -> dp_accounting.PrivacyAccountant:
  if accountant not in ACCOUNTANTS:
    raise ValueError(f'accountant={accountant!r}: valid choices: {", ".join(ACCOUNTANTS)}')
  if accountant == 'pld':
    if isinstance(rounds, TreeRounds):
      raise ValueError(
        "accountant='pld' cannot account TreeRounds (dp_accounting has no PLD of tree "
        "aggregation); use accountant='rdp'"
      )
    if rounds.sampling == 'fixed_size':
      raise ValueError(
        "accountant='pld' cannot account sampling='fixed_size' (dp_accounting has no PLD of "
        "sampling without replacement); use accountant='rdp'"
      )
    return pld.PLDAccountant(
      rounds.neighboring_relation, value_discretization_interval=_PLD_DISCRETIZATION
    )
  return rdp.RdpAccountant(list(orders), rounds.neighboring_relation)


def epsilon(
  rounds: GaussianRounds | TreeRounds | SkellamRounds,
  delta: float,
  *,
  accountant: str = 'rdp',
  orders=ORDERS,
) -> float:
  """The epsilon of the (epsilon, delta)-DP guarantee of `rounds` (module docstring).

  `accountant`: 'rdp' (Renyi DP over `orders`, then Proposition 12 of Canonne et al. 2020) or
  'pld' (privacy loss distributions: tighter, slower; not for sampling='fixed_size'). Skellam
  rounds: 'rdp' over `SKELLAM_ORDERS` (or the integer `orders` given).
  """
  _check_delta(delta)
  if isinstance(rounds, SkellamRounds):
    if accountant != 'rdp':
      raise ValueError(f"accountant={accountant!r} cannot account SkellamRounds; use 'rdp'")
    orders = SKELLAM_ORDERS if orders is ORDERS else orders
    return _rdp_epsilon(orders, rounds.rdp(orders), delta)
  account = _accountant(rounds, accountant, orders)
  account.compose(rounds.event())
  return float(account.get_epsilon(delta))


def _rdp_epsilon(orders, rdp_values, delta: float) -> float:
  """`dp_accounting`'s RDP-to-(epsilon, delta) conversion (module docstring)."""
  return float(rdp.rdp_privacy_accountant.compute_epsilon(list(orders), rdp_values, delta)[0])


class EpsilonByRound:
  """epsilon after T rounds for T = 1, 2, ... of one run, each in microseconds ('rdp').

  RDP composes additively: T rounds have T times one round's RDP at every order, so one
  round's RDP is computed once (the sampled Gaussian's RDP takes ~0.6 s without replacement)
  and `epsilon(T)` converts T times it. `epsilon(T)` equals
  `epsilon(GaussianRounds(..., rounds=T, ...), delta)` (tests/privacy/test_privacy_accounting.py).
  """

  def __init__(
    self,
    noise_multiplier: float,
    clients_per_round: int,
    num_clients: int,
    sampling: str,
    delta: float,
    orders=ORDERS,
  ):
    _check_delta(delta)
    self.delta = delta
    self.one_round = GaussianRounds(noise_multiplier, 1, clients_per_round, num_clients, sampling)
    account = _accountant(self.one_round, 'rdp', orders)
    account.compose(self.one_round.event())
    # dp_accounting 0.4 keeps the composed RDP per order in `_rdp` (no public reader).
    self._orders = list(orders)
    self._rdp_one = np.array(account._rdp, dtype=np.float64)  # noqa: SLF001  (no public reader)

  def epsilon(self, rounds: int) -> float:
    """epsilon at `delta` after `rounds` (>= 1) rounds."""
    validation.check_int('rounds', rounds, 1)
    return _rdp_epsilon(self._orders, rounds * self._rdp_one, self.delta)


class TreeEpsilonByRound:
  """epsilon after T rounds for T = 1, 2, ... of one run of tree aggregation restarted every
  `rounds_per_tree` rounds: `epsilon(TreeRounds(z, T, R), delta)` (a closed form in
  `dp_accounting`: no sampled-Gaussian integral to cache)."""

  def __init__(self, noise_multiplier: float, rounds_per_tree: int, delta: float, orders=ORDERS):
    _check_delta(delta)
    TreeRounds(noise_multiplier, 1, rounds_per_tree)  # checks the arguments
    self.delta = delta
    self.noise_multiplier = noise_multiplier
    self.rounds_per_tree = rounds_per_tree
    self._orders = orders

  def epsilon(self, rounds: int) -> float:
    """epsilon at `delta` after `rounds` (>= 1) rounds."""
    run = TreeRounds(self.noise_multiplier, rounds, self.rounds_per_tree)
    return epsilon(run, self.delta, orders=self._orders)


class SkellamEpsilonByRound:
  """epsilon after T rounds for T = 1, 2, ... of one run of the distributed Skellam mechanism:
  `epsilon(SkellamRounds(parameters, T), delta)`, one round's RDP computed once."""

  def __init__(self, parameters: skellam.SkellamParameters, delta: float, orders=SKELLAM_ORDERS):
    _check_delta(delta)
    self.delta = delta
    self._orders = list(orders)
    self._rdp_one = SkellamRounds(parameters, 1).rdp(self._orders)

  def epsilon(self, rounds: int) -> float:
    """epsilon at `delta` after `rounds` (>= 1) rounds."""
    validation.check_int('rounds', rounds, 1)
    return _rdp_epsilon(self._orders, rounds * self._rdp_one, self.delta)


def calibrated_noise_multiplier(
  target_epsilon: float,
  delta: float,
  *,
  rounds: int,
  clients_per_round: int,
  num_clients: int,
  sampling: str = 'poisson',
  accountant: str = 'rdp',
  tolerance: float = 1e-3,
) -> float:
  """The smallest noise multiplier z (to `tolerance`, rounded up) whose run of `rounds` rounds
  has epsilon <= `target_epsilon` at `delta`: bisection on z, epsilon falling as z grows."""
  validation.check_positive('target_epsilon', target_epsilon)
  _check_delta(delta)

  def eps(z: float) -> float:
    run = GaussianRounds(z, rounds, clients_per_round, num_clients, sampling)
    return epsilon(run, delta, accountant=accountant)

  low, high = 0.0, 1.0
  while eps(high) > target_epsilon:
    low, high = high, 2.0 * high
    if high > 1e6:
      raise ValueError(f'no noise multiplier up to 1e6 reaches epsilon {target_epsilon}')
  while high - low > tolerance:
    middle = 0.5 * (low + high)
    if middle > 0 and eps(middle) <= target_epsilon:
      high = middle
    else:
      low = middle
  return round(math.ceil(high / tolerance) * tolerance, 12)


def for_noise(
  noise: dp_noise.DeliveredNoise, num_clients: int, delta: float, *, dim: int | None = None
) -> EpsilonByRound | TreeEpsilonByRound | SkellamEpsilonByRound:
  """epsilon after T rounds (`.epsilon(T)`) of the noise a DP aggregation delivers
  (`UpdateAggregation.privacy`), under the trainer's sampling: exactly m = `clients_per_round`
  of the N = `num_clients` clients every round, uniformly without replacement ('fixed_size'; 'all'
  when m = N); the tree, in epochs of `restart_rounds` rounds (each client at most once per tree);
  distributed Skellam without amplification by sampling (its bound needs the update's `dim`).

  Every noise parameter is read from `noise`, the object the aggregation's queries were built
  from: the Gaussian rounds' noise multiplier is the delivered one, z_v, or for the adaptive clip
  the pair (z_v, sigma_b) as one Gaussian mechanism, z_eff (`DeliveredNoise`).
  """
  validation.check_int('num_clients', num_clients, noise.clients_per_round)
  z = noise.value_noise_multiplier
  if noise.mechanism == dp_noise.TREE:
    if noise.restart_rounds is None:
      raise ValueError('the tree is accounted per epoch: build it with restart_rounds')
    return TreeEpsilonByRound(z, noise.restart_rounds, delta)
  if noise.mechanism == dp_noise.DISTRIBUTED_SKELLAM:
    if dim is None:
      raise ValueError("distributed_skellam's epsilon needs the update's dimension (dim)")
    return SkellamEpsilonByRound(noise.skellam_parameters(dim), delta)
  sampling = 'all' if noise.clients_per_round == num_clients else 'fixed_size'
  return EpsilonByRound(
    noise.effective_noise_multiplier, noise.clients_per_round, num_clients, sampling, delta
  )
