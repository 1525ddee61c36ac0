"""Per-client train/test splits.

Ju et al. 2023 (AdaFedAdam, App. C.1): "each client is associated with a partition and randomly
split the local partition with a ratio of 8 : 2 acting as its local training and testing set
before federated training starts". ``split_train_test(n, 0.2, seed)`` gives that split for one
client; use a different seed per client (e.g. ``seed + client_index``) for independent splits.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ['split_train_test']


def split_train_test(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Randomly splits ``range(n)`` into train and test index arrays.

  The test part has ``floor(test_fraction * n)`` examples (a 1e-9 slack absorbs floating-point
  error, so 0.2 * 10 gives 2), capped at ``n - 1`` so at least one training example remains.
  E.g. n = 105, test_fraction = 0.2 -> 84 train / 21 test; n = 3 -> 3 / 0; n = 1 -> 1 / 0.

  Args:
      n: number of examples, >= 1.
      test_fraction: fraction for the test part, in [0, 1).
      seed: seed for ``np.random.default_rng``, >= 0.

  Returns:
      (train_idx, test_idx): sorted, disjoint int64 arrays whose union is ``range(n)``.

  Raises:
      ValueError: an argument is out of range.
  """
  if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
    raise ValueError(f'n={n!r} is invalid; expected an integer >= 1')
  if (
    isinstance(test_fraction, bool)
    or not isinstance(test_fraction, numbers.Real)
    or not (0.0 <= test_fraction < 1.0)
  ):
    raise ValueError(f'test_fraction={test_fraction!r} is invalid; expected 0 <= value < 1')
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
    raise ValueError(f'seed={seed!r} is invalid; expected an integer >= 0')
  n = int(n)
  num_test = min(math.floor(test_fraction * n + 1e-9), n - 1)
  perm = np.random.default_rng(int(seed)).permutation(n)
  return np.sort(perm[num_test:]).astype(np.int64), np.sort(perm[:num_test]).astype(np.int64)
