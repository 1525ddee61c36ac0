"""Differential privacy of federated training: settings and accounting (docs/privacy.md).

* `accounting`: the (epsilon, delta) of T rounds of the Gaussian mechanism on sampled clients
  (`GaussianRounds`, `epsilon`, `calibrated_noise_multiplier`, `EpsilonByRound`), with Poisson,
  fixed-size or full participation, by Google's `dp_accounting` (RDP or PLD), of DP-FTRL's
  tree aggregation restarted every epoch (`TreeRounds`, `TreeEpsilonByRound`; RDP), and of the
  distributed Skellam mechanism (`SkellamRounds`, `SkellamEpsilonByRound`; RDP);
* `config` (no TensorFlow): `DPConfig`, the trainer's --dp settings and their checks.

The mechanisms (clip, noise) are `tff_adaptive.aggregators.dp_mean`.
"""

from tff_adaptive.registry import lazy_exports

__all__ = [
  'DPConfig',
  'EpsilonByRound',
  'GaussianRounds',
  'SkellamEpsilonByRound',
  'SkellamRounds',
  'TreeEpsilonByRound',
  'TreeRounds',
  'accounting',
  'calibrated_noise_multiplier',
  'config',
  'epsilon',
]

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    'DPConfig': 'config',
    'EpsilonByRound': 'accounting',
    'GaussianRounds': 'accounting',
    'SkellamEpsilonByRound': 'accounting',
    'SkellamRounds': 'accounting',
    'TreeEpsilonByRound': 'accounting',
    'TreeRounds': 'accounting',
    'calibrated_noise_multiplier': 'accounting',
    'epsilon': 'accounting',
  },
)
