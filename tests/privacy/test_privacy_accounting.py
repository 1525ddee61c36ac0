"""tff_adaptive.privacy.accounting against independent implementations of the equations.

* Full participation: T rounds of the Gaussian mechanism with noise multiplier z are one
  Gaussian mechanism with sensitivity sqrt(T) / z in units of the noise (Dong, Roth and Su 2019,
  mu-GDP with mu = sqrt(T) / z), whose exact (epsilon, delta) curve is Balle and Wang 2018,
  Theorem 8: delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2). Its RDP is
  T alpha / (2 z^2) at every order (Mironov 2017, Proposition 7).
* Poisson sampling at rate q, integer orders alpha: the sampled Gaussian's RDP is
  log(A_alpha) / (alpha - 1) with A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k
  exp((k^2 - k) / (2 z^2)) (Mironov, Talwar and Zhang 2019, Section 3.3), T times.
* Tree aggregation restarted every R rounds (DP-FTRL, Kairouz et al. 2021, App. D), each client
  at most once per tree: a tree is the Gaussian mechanism with squared sensitivity
  ceil(log2(R + 1)) (the nodes on a leaf's path), so T rounds have RDP
  alpha (floor(T / R) ceil(log2(R + 1)) + ceil(log2(T mod R + 1))) / (2 z^2); also held to
  TensorFlow Privacy's own `compute_rdp_tree_restart`.
* RDP to (epsilon, delta): Canonne, Kamath and Steinke 2020, Proposition 12.
"""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import special
from scipy import stats

from tff_adaptive.privacy import accounting

INTEGER_ORDERS = tuple(range(2, 129))


def _rdp_to_epsilon(orders, rdp, delta) -> float:
  orders = np.asarray(orders, np.float64)
  eps = rdp + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
  return float(np.min(eps))


def _gaussian_rdp(z, rounds, orders):
  return rounds * np.asarray(orders, np.float64) / (2 * z * z)


def _poisson_rdp(q, z, rounds, orders):
  values = []
  for alpha in orders:
    k = np.arange(alpha + 1)
    log_terms = (
      special.gammaln(alpha + 1)
      - special.gammaln(k + 1)
      - special.gammaln(alpha - k + 1)
      + (alpha - k) * np.log1p(-q)
      + k * np.log(q)
      + (k * k - k) / (2 * z * z)
    )
    values.append(rounds * special.logsumexp(log_terms) / (alpha - 1))
  return np.asarray(values)


def _exact_gaussian_epsilon(z, rounds, delta) -> float:
  """Balle and Wang 2018, Theorem 8, for mu = sqrt(T) / z, solved for epsilon by bisection."""
  mu = math.sqrt(rounds) / z

  def delta_of(eps):
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)

  low, high = 0.0, 1.0
  while delta_of(high) > delta:
    high *= 2
  for _ in range(200):
    middle = (low + high) / 2
    low, high = (middle, high) if delta_of(middle) > delta else (low, middle)
  return high


@pytest.mark.parametrize(('z', 'rounds', 'delta'), [(1.0, 100, 1e-5), (5.0, 1000, 1e-6)])
def test_full_participation_rdp_is_the_gaussians_t_alpha_over_2z2(z, rounds, delta):
  run = accounting.GaussianRounds(z, rounds, 10, 10, 'all')
  ours = accounting.epsilon(run, delta, orders=INTEGER_ORDERS)
  expected = _rdp_to_epsilon(INTEGER_ORDERS, _gaussian_rdp(z, rounds, INTEGER_ORDERS), delta)
  assert ours == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(('z', 'rounds', 'delta'), [(1.0, 100, 1e-5), (5.0, 1000, 1e-6)])
def test_full_participation_pld_is_the_exact_gaussian_and_rdp_bounds_it(z, rounds, delta):
  run = accounting.GaussianRounds(z, rounds, 10, 10, 'all')
  exact = _exact_gaussian_epsilon(z, rounds, delta)
  pld = accounting.epsilon(run, delta, accountant='pld')
  assert pld == pytest.approx(exact, rel=1e-6)  # dp_accounting: the Gaussian analytically
  rdp = accounting.epsilon(run, delta)
  assert pld < rdp <= exact * 1.3  # RDP's conversion is an upper bound, and a loose one


@pytest.mark.parametrize(
  ('z', 'rounds', 'm', 'n', 'delta'),
  [(1.1, 1000, 100, 10_000, 1e-5), (0.8, 200, 10, 500, 1e-6), (3.0, 1500, 50, 342_477, 1e-7)],
)
def test_poisson_sampling_rdp_is_mironov_talwar_zhang(z, rounds, m, n, delta):
  run = accounting.GaussianRounds(z, rounds, m, n, 'poisson')
  assert run.sampling_rate == m / n
  ours = accounting.epsilon(run, delta, orders=INTEGER_ORDERS)
  expected = _rdp_to_epsilon(INTEGER_ORDERS, _poisson_rdp(m / n, z, rounds, INTEGER_ORDERS), delta)
  assert ours == pytest.approx(expected, rel=1e-6)
  # Sampling amplifies: the same rounds with every client are far less private.
  everyone = accounting.epsilon(accounting.GaussianRounds(z, rounds, n, n, 'all'), delta)
  assert accounting.epsilon(run, delta) < everyone / 5


def test_abadi_et_al_2016_published_epsilon():
  """Abadi et al., "Deep Learning with Differential Privacy" (CCS 2016), Sec. 3.1: sampling
  rate q = 0.01, noise sigma = 4, delta = 1e-5 and T = 10,000 steps give epsilon ~ 1.26 with the
  moments accountant: log moments at integer lambda <= 32, epsilon = min_lambda (T alpha(lambda)
  + log(1 / delta)) / lambda, alpha(lambda) = lambda RDP(lambda + 1) (Mironov 2017), i.e. the
  RDP at order a = lambda + 1 converted as T RDP(a) + log(1 / delta) / (a - 1). Our Poisson
  rounds' event, so converted, gives the published number; the library's own conversion
  (Canonne et al.) and PLD are tighter."""
  run = accounting.GaussianRounds(4.0, 10_000, 600, 60_000, 'poisson')
  orders = list(range(2, 34))
  account = dp_accounting.rdp.RdpAccountant(orders)
  account.compose(run.event())
  classic = np.asarray(account._rdp) + math.log(1e5) / (np.asarray(orders) - 1.0)  # pylint: disable=protected-access
  assert round(float(classic.min()), 2) == 1.26
  ours = accounting.epsilon(run, 1e-5)
  assert 0.9 < accounting.epsilon(run, 1e-5, accountant='pld') < ours < 1.26  # 0.947, 1.035


def test_fixed_size_sampling_lies_between_amplified_and_unamplified_replace_one():
  """Sampling m of N without replacement (our sampler): less private than nothing sampled away
  is impossible, so its epsilon is below the full-participation bound for neighbours that
  replace one client (sensitivity 2C: RDP 4 T alpha / (2 z^2)), and well above zero."""
  z, rounds, m, n, delta = 1.0, 500, 20, 2_000, 1e-5
  ours = accounting.epsilon(accounting.GaussianRounds(z, rounds, m, n, 'fixed_size'), delta)
  replace_one_all = _rdp_to_epsilon(
    accounting.ORDERS, 4 * _gaussian_rdp(z, rounds, accounting.ORDERS), delta
  )
  poisson = accounting.epsilon(accounting.GaussianRounds(z, rounds, m, n, 'poisson'), delta)
  # Replace-one doubles the sensitivity: well above Poisson's add-or-remove epsilon.
  assert 2 * poisson < ours < replace_one_all / 10


@pytest.mark.parametrize('z', [0.8, 2.0])
def test_fixed_size_sampling_of_everyone_is_the_replace_one_gaussian(z):
  """m = N: no amplification, so the epsilon is that of the Gaussian mechanism whose
  sensitivity under replace-one neighbours is 2C: RDP T alpha (2C)^2 / (2 (z C)^2), converted by
  the independent NumPy reference."""
  rounds, n, delta = 50, 100, 1e-5
  ours = accounting.epsilon(accounting.GaussianRounds(z, rounds, n, n, 'fixed_size'), delta)
  expected = _rdp_to_epsilon(
    accounting.ORDERS, 4 * _gaussian_rdp(z, rounds, accounting.ORDERS), delta
  )
  assert ours == pytest.approx(expected, rel=1e-6)


def test_calibrated_noise_multiplier_is_the_smallest_that_reaches_the_target():
  kwargs = {'rounds': 200, 'clients_per_round': 10, 'num_clients': 1_000}
  z = accounting.calibrated_noise_multiplier(2.0, 1e-5, **kwargs)
  reached = accounting.epsilon(accounting.GaussianRounds(z, 200, 10, 1_000), 1e-5)
  assert reached <= 2.0
  slightly_less = accounting.GaussianRounds(z - 2e-3, 200, 10, 1_000)
  assert accounting.epsilon(slightly_less, 1e-5) > 2.0


@pytest.mark.parametrize(
  ('kwargs', 'message'),
  [
    ({'sampling': 'uniform'}, "sampling='uniform': valid choices: poisson, fixed_size, all"),
    ({'noise_multiplier': 0.0}, 'noise_multiplier=0.0 is invalid; expected a finite number > 0'),
    ({'rounds': 0}, 'rounds=0 is invalid; expected an integer >= 1'),
    ({'clients_per_round': 11}, 'clients_per_round=11 is invalid; expected at most num_clients=10'),
  ],
)
def test_bad_rounds_are_one_line_naming_the_value(kwargs, message):
  args = {'noise_multiplier': 1.0, 'rounds': 5, 'clients_per_round': 2, 'num_clients': 10}
  with pytest.raises(ValueError) as raised:
    accounting.GaussianRounds(**{**args, **kwargs})
  assert message in str(raised.value) and '\n' not in str(raised.value)


@pytest.mark.parametrize(
  ('sampling', 'delta', 'accountant', 'message'),
  [
    ('poisson', 1.0, 'rdp', 'delta must be in (0, 1), got 1.0'),
    ('poisson', 1e-5, 'moments', "accountant='moments': valid choices: rdp, pld"),
    ('fixed_size', 1e-5, 'pld', "accountant='pld' cannot account sampling='fixed_size'"),
  ],
)
def test_bad_accounting_is_one_line_naming_the_value(sampling, delta, accountant, message):
  run = accounting.GaussianRounds(1.0, 5, 2, 10, sampling)
  with pytest.raises(ValueError) as raised:
    accounting.epsilon(run, delta, accountant=accountant)
  assert message in str(raised.value) and '\n' not in str(raised.value)


@pytest.mark.parametrize('sampling', ['poisson', 'fixed_size', 'all'])
def test_epsilon_by_round_is_the_epsilon_of_that_many_rounds(sampling):
  by_round = accounting.EpsilonByRound(0.9, 20, 400, sampling, 1e-4)
  for rounds in (1, 7, 150):
    run = accounting.GaussianRounds(0.9, rounds, 20, 400, sampling)
    assert by_round.epsilon(rounds) == pytest.approx(accounting.epsilon(run, 1e-4), rel=1e-12)
  assert by_round.epsilon(2) > by_round.epsilon(1)


def _tree_rdp(z, rounds, per_tree, orders):
  full, rest = divmod(rounds, per_tree)
  nodes = full * math.ceil(math.log2(per_tree + 1)) + math.ceil(math.log2(rest + 1))
  return nodes * np.asarray(orders, np.float64) / (2 * z * z)


@pytest.mark.parametrize(
  ('z', 'rounds', 'per_tree', 'delta'),
  [(1.0, 35, 10, 1e-5), (2.5, 1000, 100, 1e-6), (0.8, 7, 1, 1e-5), (4.0, 3, 16, 1e-5)],
)
def test_tree_restarts_are_the_closed_form_and_tensorflow_privacys(z, rounds, per_tree, delta):
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_privacy.privacy.analysis import tree_aggregation_accountant

  eps = accounting.epsilon(accounting.TreeRounds(z, rounds, per_tree), delta)
  orders = accounting.ORDERS
  assert eps == pytest.approx(
    _rdp_to_epsilon(orders, _tree_rdp(z, rounds, per_tree, orders), delta), rel=1e-9
  )
  full, rest = divmod(rounds, per_tree)
  theirs = tree_aggregation_accountant.compute_rdp_tree_restart(
    z, [per_tree] * full + [rest] * (rest > 0), orders
  )
  assert eps == pytest.approx(_rdp_to_epsilon(orders, np.asarray(theirs), delta), rel=1e-9)
  # One tree per round (R = 1) is one Gaussian per round: the full-participation RDP.
  if per_tree == 1:
    assert eps == pytest.approx(
      _rdp_to_epsilon(orders, _gaussian_rdp(z, rounds, orders), delta), rel=1e-9
    )


def test_tree_epsilon_by_round_is_the_epsilon_of_that_many_rounds():
  by_round = accounting.TreeEpsilonByRound(1.3, 8, 1e-5)
  for rounds in (1, 7, 8, 9, 100):
    run = accounting.TreeRounds(1.3, rounds, 8)
    assert by_round.epsilon(rounds) == pytest.approx(accounting.epsilon(run, 1e-5), rel=1e-12)
  # A restart costs a new tree: round 9 adds a depth-1 tree to a full depth-4 one.
  assert by_round.epsilon(9) > by_round.epsilon(8) > by_round.epsilon(7)


@pytest.mark.parametrize(
  ('kwargs', 'accountant', 'message'),
  [
    ({'rounds_per_tree': 0}, 'rdp', 'rounds_per_tree=0 is invalid; expected an integer >= 1'),
    ({'noise_multiplier': -1.0}, 'rdp', 'noise_multiplier=-1.0 is invalid'),
    ({}, 'pld', "accountant='pld' cannot account TreeRounds"),
  ],
)
def test_bad_tree_accounting_is_one_line_naming_the_value(kwargs, accountant, message):
  with pytest.raises(ValueError) as raised:
    run = accounting.TreeRounds(
      **{'noise_multiplier': 1.0, 'rounds': 5, 'rounds_per_tree': 2, **kwargs}
    )
    accounting.epsilon(run, 1e-5, accountant=accountant)
  assert message in str(raised.value) and '\n' not in str(raised.value)
