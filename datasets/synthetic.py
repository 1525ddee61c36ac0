"""The Synthetic(alpha, beta) federated classification data of Li et al. / Caldas et al. (LEAF).

Used by Ju et al. 2023 (AdaFedAdam, App. C.1: 100 clients, power-law sizes, x in R^60, 10 classes,
y = argmax(softmax(W x + b))), which cite Caldas et al. 2018 (LEAF, arXiv:1812.01097). The
(alpha, beta) generator is the one of Li et al. 2020 (FedProx, "Federated Optimization in
Heterogeneous Networks", Sec. 5.1), adapted from Shamir et al. 2014. Per client k:

    u_k ~ N(0, alpha),  B_k ~ N(0, beta),
    W_k[j, c] ~ N(u_k, 1),  b_k[c] ~ N(u_k, 1),  v_k[j] ~ N(B_k, 1),
    x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^(-1.2) (j = 1..d),
    y = argmax(softmax(W_k^T x + b_k)).

Choices, following the FedProx authors' generator script (``generate_synthetic.py``):
- the second argument of N(0, alpha) and N(0, beta) is a STANDARD DEVIATION (their code calls
  ``np.random.normal(0, alpha)``); identical to a variance for alpha, beta in {0, 1};
- client sizes are ``floor(lognormal(mean=4, sigma=2)) + 50``, a heavy-tailed (power-law-like)
  distribution with median about e^4 + 50 = 105 and no upper cap (LEAF's own cluster-based
  synthetic generator uses lognormal(3, 2) + 5 capped at 1000, a different data set).

Note on alpha: u_k shifts every entry of W_k and b_k by the same amount, which adds the same
number u_k * (sum(x) + 1) to every class logit and therefore cannot change the argmax. The labels
are thus independent of alpha (up to floating-point ties); only beta (through the feature means)
changes the data. This is a property of the published generator, kept here for fidelity.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ['leaf_cluster_synthetic', 'leaf_synthetic', 'synthetic_client_sizes']


def _logsumexp(z: np.ndarray, axis: int) -> np.ndarray:
  top = z.max(axis=axis, keepdims=True)
  return top + np.log(np.exp(z - top).sum(axis=axis, keepdims=True))


def _check_nonneg(name: str, value) -> float:
  if (
    isinstance(value, bool)
    or not isinstance(value, numbers.Real)
    or not (np.isfinite(value) and value >= 0)
  ):
    raise ValueError(f'{name}={value!r} is invalid; expected a finite number >= 0')
  return float(value)


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return int(value)


def synthetic_client_sizes(num_clients: int, rng: np.random.Generator) -> np.ndarray:
  """Client sizes floor(lognormal(4, 2)) + 50 as in the FedProx generator (int64, [K])."""
  return rng.lognormal(mean=4.0, sigma=2.0, size=num_clients).astype(np.int64) + 50


def leaf_synthetic(
  alpha: float,
  beta: float,
  num_clients: int = 100,
  num_features: int = 60,
  num_classes: int = 10,
  seed: int = 0,
  iid: bool = False,
) -> list[tuple[np.ndarray, np.ndarray]]:
  """Generates Synthetic(alpha, beta), or Synthetic IID: one (x, y) pair per client.

  Args:
      alpha: standard deviation of the per-client model mean u_k, finite and >= 0 (see the
          module docstring: it does not affect the labels).
      beta: standard deviation of the per-client feature mean B_k, finite and >= 0; larger beta
          gives more different feature distributions and more skewed per-client labels.
      num_clients: number of clients K, >= 1.
      num_features: feature dimension d, >= 1.
      num_classes: number of classes C, >= 2.
      seed: seed for ``np.random.default_rng``, >= 0. The output is a deterministic function of
          all arguments.
      iid: Synthetic IID, the generator's ``iid=1`` branch (Li et al. 2020, Sec. 5.1): one model
          W, b ~ N(0, 1) labels every client's data, and client k's features are
          x ~ N(B_k 1, Sigma) (all clients alike for beta = 0, the published IID setting); alpha
          is not used. Client sizes as in the non-IID sets. Even Synthetic(0, 0) draws a model
          per client (W_k ~ N(0, 1)), so only this branch has one labelling function.

  Returns:
      K tuples (x, y): x float32 [n_k, d], y int32 [n_k] with values in [0, C); n_k >= 50.

  Raises:
      ValueError: an argument is out of range.
  """
  alpha = _check_nonneg('alpha', alpha)
  beta = _check_nonneg('beta', beta)
  num_clients = _check_int('num_clients', num_clients, 1)
  num_features = _check_int('num_features', num_features, 1)
  num_classes = _check_int('num_classes', num_classes, 2)
  seed = _check_int('seed', seed, 0)

  rng = np.random.default_rng(seed)
  sizes = synthetic_client_sizes(num_clients, rng)
  # Scale standard normals rather than call normal(0, alpha): alpha = 0 is well defined and the
  # random stream does not depend on alpha or beta, so each changes only what it scales.
  u = alpha * rng.standard_normal(num_clients)
  big_b = beta * rng.standard_normal(num_clients)
  v = big_b[:, None] + rng.standard_normal((num_clients, num_features))
  x_std = np.arange(1, num_features + 1, dtype=np.float64) ** (-1.2 / 2)  # sqrt(Sigma_jj)

  if iid:
    v = np.repeat(big_b[:, None], num_features, axis=1)
    shared = (rng.standard_normal((num_features, num_classes)), rng.standard_normal(num_classes))
  clients = []
  for k in range(num_clients):
    if iid:
      w, b = shared
    else:
      w = u[k] + rng.standard_normal((num_features, num_classes))
      b = u[k] + rng.standard_normal(num_classes)
    x = v[k] + x_std * rng.standard_normal((int(sizes[k]), num_features))
    y = np.argmax(x @ w + b, axis=1)  # softmax is monotone: argmax of the logits
    clients.append((x.astype(np.float32), y.astype(np.int32)))
  return clients


def leaf_cluster_synthetic(
  num_clients: int = 100,
  num_features: int = 60,
  num_classes: int = 10,
  seed: int = 0,
  softmax_over: str = 'classes',
) -> list[tuple[np.ndarray, np.ndarray]]:
  """Generates LEAF's own Synthetic data set (Caldas et al. 2018, LEAF's `data/synthetic`, one
  cluster as its `main.py`): one (x, y) pair per client.

  Where Li et al.'s Synthetic(alpha, beta) draws a labelling model per client, LEAF's draws one
  direction for all of them, scaled per client, with a little label noise:

      Q ~ N(0, 1) of shape [d + 1, C]  (the +1 row is the bias);  mu ~ N(N(0, 1), 1)
      per client k:  s_k ~ N(mu, 0.1^2),  W_k = s_k Q,
                     B_k ~ N(0, 1),  v_k[j] ~ N(B_k, 1),  x ~ N(v_k, Sigma), Sigma_jj = j^(-1.2),
                     y = argmax(softmax([1, x] W_k + e)),  e ~ N(0, 0.1^2) per example and class,
      client sizes min(floor(lognormal(3, 2)) + 5, 1000).

  A positive scale s_k does not change the argmax, so the clients label by one model (up to e);
  they differ in their features and in size (many have 5-10 examples). Ju et al. cite Caldas et
  al. for their Synthetic data set.

  The paper and LEAF's code differ in the softmax: `softmax_over='classes'` is the model as
  stated (a softmax over each example's classes: the argmax of the logits). LEAF's code applies
  its softmax to the client's [n_k, C] logit matrix with Python's sum, which normalises each
  class over the client's examples: `softmax_over='examples'`, y_i = argmax_c(z_ic - log sum_i'
  exp(z_i'c)), a per-client offset per class that evens out each client's labels (and is what
  LEAF's published files hold).

  Args:
      num_clients: number of clients K, >= 1.
      num_features: feature dimension d, >= 1.
      num_classes: number of classes C, >= 2.
      seed: seed for ``np.random.default_rng``, >= 0.
      softmax_over: 'classes' (the paper's model) or 'examples' (LEAF's code), see above.

  Returns:
      K tuples (x, y): x float32 [n_k, d], y int32 [n_k] with values in [0, C); 5 <= n_k <= 1000.
  """
  num_clients = _check_int('num_clients', num_clients, 1)
  num_features = _check_int('num_features', num_features, 1)
  num_classes = _check_int('num_classes', num_classes, 2)
  seed = _check_int('seed', seed, 0)
  if softmax_over not in ('classes', 'examples'):
    raise ValueError(f'softmax_over={softmax_over!r} is invalid; expected classes or examples')
  rng = np.random.default_rng(seed)
  sizes = np.minimum(
    rng.lognormal(mean=3.0, sigma=2.0, size=num_clients).astype(np.int64) + 5, 1000
  )
  q = rng.standard_normal((num_features + 1, num_classes))
  mu = rng.standard_normal() + rng.standard_normal()  # N(loc, 1) with loc ~ N(0, 1)
  x_std = np.arange(1, num_features + 1, dtype=np.float64) ** (-1.2 / 2)  # sqrt(Sigma_jj)
  clients = []
  for k in range(num_clients):
    v = rng.standard_normal() + rng.standard_normal(num_features)  # B_k + N(0, 1) per feature
    x = v + x_std * rng.standard_normal((int(sizes[k]), num_features))
    w = (mu + 0.1 * rng.standard_normal()) * q
    logits = x @ w[1:] + w[0] + 0.1 * rng.standard_normal((int(sizes[k]), num_classes))
    if softmax_over == 'examples':  # LEAF's code: each class normalised over the examples
      logits = logits - _logsumexp(logits, axis=0)
    y = np.argmax(logits, axis=1)  # softmax over classes is monotone: argmax of the logits
    clients.append((x.astype(np.float32), y.astype(np.int32)))
  return clients
