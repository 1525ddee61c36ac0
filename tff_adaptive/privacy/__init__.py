"""Differential privacy of federated training (Issue 22 builds it up; today: the accountant).

* `accounting`: the (epsilon, delta) of T rounds of the Gaussian mechanism on sampled clients
  (`GaussianRounds`, `epsilon`, `calibrated_noise_multiplier`), with Poisson, fixed-size or
  full participation, by Google's `dp_accounting` (RDP or PLD).

Noise and clipping in training (`--dp`) are not implemented yet.
"""

from tff_adaptive.registry import lazy_exports

__all__ = ['GaussianRounds', 'accounting', 'calibrated_noise_multiplier', 'epsilon']

__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    'GaussianRounds': 'accounting',
    'calibrated_noise_multiplier': 'accounting',
    'epsilon': 'accounting',
  },
)
