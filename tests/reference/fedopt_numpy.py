"""Float64 NumPy references of the FedOpt server optimizers (Reddi et al. 2021).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Algorithm 2 (line 10-14) and App. B/D (beta_1 = 0 for FedAdagrad).

Written from the paper's equations, independently of `tff_adaptive`. Sign convention: the
server receives the pseudo-gradient g_t = x_t - mean_i(x_i) = -Delta_t, so Algorithm 2's
x_{t+1} = x_t + eta * m_t / (sqrt(v_t) + tau), with m_t built from Delta_t, reads

  m_t     = beta_1 m_{t-1} + (1 - beta_1) g_t
  v_t     = v_{t-1} + g_t^2                                   (adagrad)
          = beta_2 v_{t-1} + (1 - beta_2) g_t^2                (adam)
          = v_{t-1} - (1 - beta_2) g_t^2 sign(v_{t-1} - g_t^2) (yogi)
  x_{t+1} = x_t - eta_t m_t / (sqrt(v_t) + tau)

(v only sees g_t^2, so it is the same under either sign.) The two variants:

* ``algorithm2``: as printed, eta_t = eta, v_{-1} = tau^2 (the smallest value allowed),
  m_{-1} = 0.
* ``published`` (the authors' Keras-style code): v_{-1} = 0, and for adam/yogi
  eta_t = eta sqrt(1 - beta_2^t) / (1 - beta_1^t) with t = 1, 2, ...; adagrad has no bias
  correction and beta_1 = 0 by default.

Also TFF's own Adagrad formula (epsilon inside the sqrt), for contrast, and server SGD/SGDM.
Every function takes the weights as a list of arrays (a flat nest) and a sequence of
pseudo-gradients (one list per step) and returns the list of iterates x_1, ..., x_T.
"""

from collections.abc import Callable
from collections.abc import Sequence

import numpy as np

Arrays = list[np.ndarray]
LearningRate = float | Sequence[float] | Callable[[int], float]

RULES = ('adagrad', 'adam', 'yogi')
VARIANTS = ('published', 'algorithm2')


def _as64(arrays: Sequence[np.ndarray]) -> Arrays:
  return [np.array(a, dtype=np.float64) for a in arrays]


def _lr_at(learning_rate: LearningRate, k: int) -> float:
  """Learning rate of the k-th step (k = 0, 1, ...): constant, a list, or a schedule."""
  if callable(learning_rate):
    return float(learning_rate(k))
  if np.ndim(learning_rate) == 0:
    return float(learning_rate)
  return float(learning_rate[k])


def _second_moment(
  rule: str, v: np.ndarray, g: np.ndarray, beta_2: float, noise_variance: float = 0.0
) -> np.ndarray:
  """v_t of `rule`; with noise_variance sigma^2 > 0, on s = g^2 - sigma^2 and clamped at 0."""
  if noise_variance:
    return np.maximum(_second_moment_of(rule, v, g * g - noise_variance, beta_2), 0.0)
  return _second_moment_of(rule, v, g * g, beta_2)


def _second_moment_of(rule: str, v: np.ndarray, g2: np.ndarray, beta_2: float) -> np.ndarray:
  if rule == 'adagrad':
    return v + g2
  if rule == 'adam':
    return beta_2 * v + (1.0 - beta_2) * g2
  if rule == 'yogi':
    # Yogi moves v towards g^2 by (1 - beta_2) |g^2| (|.|: an estimate g^2 - sigma^2 may be < 0).
    return v - (1.0 - beta_2) * np.abs(g2) * np.sign(v - g2)
  raise ValueError(f'rule must be one of {RULES}, got {rule!r}')


def adaptive_server(
  x0: Sequence[np.ndarray],
  grads: Sequence[Sequence[np.ndarray]],
  rule: str,
  learning_rate: LearningRate,
  beta_1: float,
  beta_2: float,
  tau: float,
  v0: float,
  bias_correction: bool,
  noise_variance: float = 0.0,
) -> list[Arrays]:
  """Iterates of x_{t+1} = x_t - eta_t m_t / (sqrt(v_t) + tau), tau outside the sqrt.

  Args:
    x0: initial weights.
    grads: pseudo-gradients g_0, ..., g_{T-1}, each a list like x0.
    rule: 'adagrad', 'adam' or 'yogi' (the v_t line of Algorithm 2).
    learning_rate: eta (constant, per-step list, or schedule k -> eta_k).
    beta_1, beta_2: moment decays (beta_2 unused by adagrad).
    tau: adaptivity, added to sqrt(v_t).
    v0: v_{-1}, the same for every entry.
    bias_correction: multiply eta by sqrt(1 - beta_2^t) / (1 - beta_1^t), t from 1.
    noise_variance: sigma^2 of DP noise known to be in g: v_t's rule applied to g^2 - sigma^2,
      then clamped at 0 (the noise-aware server).

  Returns:
    [x_1, ..., x_T] in float64.
  """
  x = _as64(x0)
  m = [np.zeros_like(a) for a in x]
  v = [np.full_like(a, v0) for a in x]
  iterates = []
  for k, g in enumerate(grads):
    t = k + 1
    eta = _lr_at(learning_rate, k)
    if bias_correction:
      eta *= np.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t)
    g = _as64(g)
    m = [beta_1 * mi + (1.0 - beta_1) * gi for mi, gi in zip(m, g)]
    v = [_second_moment(rule, vi, gi, beta_2, noise_variance) for vi, gi in zip(v, g)]
    x = [xi - eta * mi / (np.sqrt(vi) + tau) for xi, mi, vi in zip(x, m, v)]
    iterates.append(x)
  return iterates


def fedopt(
  x0: Sequence[np.ndarray],
  grads: Sequence[Sequence[np.ndarray]],
  rule: str,
  variant: str,
  learning_rate: LearningRate,
  tau: float,
  beta_1: float | None = None,
  beta_2: float = 0.999,
  v0: float | None = None,
) -> list[Arrays]:
  """FedAdagrad/FedAdam/FedYogi server iterates for a named variant (see module doc).

  beta_1 None means 0 for adagrad, 0.9 otherwise; v0 None means the variant's v_{-1}
  (0 for 'published', tau^2 for 'algorithm2').
  """
  if variant not in VARIANTS:
    raise ValueError(f'variant must be one of {VARIANTS}, got {variant!r}')
  if beta_1 is None:
    beta_1 = 0.0 if rule == 'adagrad' else 0.9
  if v0 is None:
    v0 = 0.0 if variant == 'published' else tau**2
  bias_correction = variant == 'published' and rule != 'adagrad'
  return adaptive_server(x0, grads, rule, learning_rate, beta_1, beta_2, tau, v0, bias_correction)


def tff_adagrad(
  x0: Sequence[np.ndarray],
  grads: Sequence[Sequence[np.ndarray]],
  learning_rate: float,
  initial_value: float = 0.1,
  epsilon: float = 1e-7,
) -> list[Arrays]:
  """TFF's `build_adagrad` formula: v_t = v_{t-1} + g_t^2; x -= eta g / sqrt(v_t + epsilon)."""
  x = _as64(x0)
  v = [np.full_like(a, initial_value) for a in x]
  iterates = []
  for g in grads:
    g = _as64(g)
    v = [vi + gi * gi for vi, gi in zip(v, g)]
    x = [xi - learning_rate * gi / np.sqrt(vi + epsilon) for xi, gi, vi in zip(x, g, v)]
    iterates.append(x)
  return iterates


def server_sgdm(
  x0: Sequence[np.ndarray],
  grads: Sequence[Sequence[np.ndarray]],
  learning_rate: float,
  momentum: float = 0.0,
) -> list[Arrays]:
  """Server SGD with heavy-ball momentum: u_t = mu u_{t-1} + g_t; x -= eta u_t (mu=0: SGD)."""
  x = _as64(x0)
  u = [np.zeros_like(a) for a in x]
  iterates = []
  for g in grads:
    g = _as64(g)
    u = [momentum * ui + gi for ui, gi in zip(u, g)]
    x = [xi - learning_rate * ui for xi, ui in zip(x, u)]
    iterates.append(x)
  return iterates
