"""Float64 NumPy references of local (client-side) optimizers, written from the papers.

Independent of `tff_adaptive`: every rule below is transcribed from the cited equations (or,
where named, from the authors' public code), in float64, to check the TF implementation.

Notation: local steps k = 1, ..., K; step k uses minibatch k, g_k = grad f(x_{k-1}; k); the
weights x are a flat list of arrays and every norm ||.|| is the global L2 norm over all entries
of all arrays. Every function returns a dict with 'x' = [x_0, ..., x_K] (x_0 the start),
'eta' = the K step sizes used, and 'grad_evals' = the number of gradient evaluations.

* SGD / SGDM (heavy ball, TF/Keras/PyTorch form): u_k = mu u_{k-1} + g_k, u_0 = 0,
  x_k = x_{k-1} - lr u_k.
* Adam (Kingma & Ba, ICLR 2015, Algorithm 1): m_k = b1 m_{k-1} + (1 - b1) g_k,
  v_k = b2 v_{k-1} + (1 - b2) g_k^2, m_0 = v_0 = 0.
  Keras/TFF form (eps outside the bias correction, Kingma & Ba Sec. 2 "efficiency" remark):
    x_k = x_{k-1} - lr sqrt(1 - b2^k) / (1 - b1^k) m_k / (sqrt(v_k) + eps).
  PyTorch form (Algorithm 1 as printed):
    x_k = x_{k-1} - lr (m_k / (1 - b1^k)) / (sqrt(v_k / (1 - b2^k)) + eps).
* Adagrad (Duchi, Hazan & Singer, JMLR 2011, diagonal form; PyTorch without lr decay):
  G_k = G_{k-1} + g_k^2, G_0 = initial_accumulator_value,
  x_k = x_{k-1} - lr g_k / (sqrt(G_k) + eps).
* SPS (Loizou, Vaswani, Laradji & Lacoste-Julien, AISTATS 2021, the SPS_max rule, and the official
  implementation github.com/IssamLaradji/sps): the Polyak candidate
    p_k = (f(x_{k-1}; k) - f_star) / (c ||g_k||^2 + eps),
  'constant': eta_k = min(p_k, eta_max) (eta_k = 0 if f < f_star; no min if eta_max is None);
  'smooth_iter' (official default): eta_k = min(gamma^(1/n_batches_per_epoch) eta_{k-1}, p_k),
  eta_0 = init_step_size. x_k = x_{k-1} - eta_k g_k.
* Delta-SGD (Kim, Toghani, Uribe & Kyrillidis, "Adaptive Federated Learning with Auto-Tuned
  Clients", ICLR 2024), Algorithm 1 lines 8-10 with the delta of Sec. 4 (after Malitsky &
  Mishchenko 2020):
    x_k   = x_{k-1} - eta_{k-1} g(x_{k-1}),
    eta_k = min{ gamma ||x_k - x_{k-1}|| / (2 ||g(x_k) - g(x_{k-1})||),
                 sqrt(1 + delta theta_{k-1}) eta_{k-1} },
    theta_k = eta_k / eta_{k-1},
  eta_0 = 0.2, theta_0 = 1, gamma = 2, delta = 0.1 (Sec. 4 and footnote 3), state reset at the
  start of every round (line 6). The authors' PyTorch code differs in three switchable ways
  (see `delta_sgd`): the gradient difference is taken on the current minibatch, the first step
  already uses the grown step size, and a zero difference falls back to the growth bound; it
  also adds eps = 1e-8 to the min. `delta_sgd_authors_code` transcribes that code separately.

Test problems: `quadratic` (constant curvature L, closed-form curvature candidate) and
`logistic_problem` (L2-regularized logistic regression, a different seeded minibatch per step).
"""

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any

import numpy as np

Arrays = list[np.ndarray]
GradFn = Callable[[Arrays, int], Arrays]
LossFn = Callable[[Arrays, int], float]

SPS_MODES = ('constant', 'smooth_iter')
DELTA_GRADIENTS = ('paper', 'same_batch')
DELTA_FIRST_STEPS = ('paper', 'grown')
DELTA_ZERO_RULES = ('paper', 'grow')


def _as64(arrays: Sequence[np.ndarray]) -> Arrays:
  return [np.array(a, dtype=np.float64) for a in arrays]


def global_norm(arrays: Sequence[np.ndarray]) -> float:
  """sqrt of the sum of squares of every entry of every array."""
  return math.sqrt(sum(float(np.sum(np.square(np.asarray(a, np.float64)))) for a in arrays))


def _sub(a: Arrays, b: Arrays) -> Arrays:
  return [ai - bi for ai, bi in zip(a, b, strict=True)]


def _step(x: Arrays, eta: float, d: Arrays) -> Arrays:
  """x - eta * d, as new arrays."""
  return [xi - eta * di for xi, di in zip(x, d, strict=True)]


def _check(name: str, value: str, allowed: tuple[str, ...]) -> None:
  if value not in allowed:
    raise ValueError(f'{name} must be one of {allowed}, got {value!r}')


# ---------------------------------------------------------------------------------------------
# SGD, SGDM, Adam, Adagrad
# ---------------------------------------------------------------------------------------------


def sgd(x0: Sequence[np.ndarray], grad_fn: GradFn, num_steps: int, lr: float) -> dict[str, Any]:
  """Plain SGD: x_k = x_{k-1} - lr g_k."""
  return sgdm(x0, grad_fn, num_steps, lr, momentum=0.0)


def sgdm(
  x0: Sequence[np.ndarray], grad_fn: GradFn, num_steps: int, lr: float, momentum: float
) -> dict[str, Any]:
  """Heavy ball (TF/Keras/PyTorch form): u_k = mu u_{k-1} + g_k, u_0 = 0; x_k = x_{k-1} - lr u_k.

  Args:
    x0: initial weights, a list of arrays.
    grad_fn: (x, k) -> gradient on minibatch k.
    num_steps: K.
    lr: learning rate.
    momentum: mu (0 gives SGD).

  Returns:
    {'x': [x_0, ..., x_K], 'eta': [lr] * K, 'grad_evals': K}.
  """
  x = _as64(x0)
  u = [np.zeros_like(a) for a in x]
  iterates, etas = [x], []
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(x, k))
    u = [momentum * ui + gi for ui, gi in zip(u, g, strict=True)]
    x = _step(x, lr, u)
    iterates.append(x)
    etas.append(float(lr))
  return {'x': iterates, 'eta': etas, 'grad_evals': num_steps}


def _adam(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float,
  beta_1: float,
  beta_2: float,
  eps: float,
  form: str,
) -> dict[str, Any]:
  x = _as64(x0)
  m = [np.zeros_like(a) for a in x]
  v = [np.zeros_like(a) for a in x]
  iterates, etas = [x], []
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(x, k))
    m = [beta_1 * mi + (1.0 - beta_1) * gi for mi, gi in zip(m, g, strict=True)]
    v = [beta_2 * vi + (1.0 - beta_2) * gi * gi for vi, gi in zip(v, g, strict=True)]
    c1, c2 = 1.0 - beta_1**k, 1.0 - beta_2**k
    if form == 'keras':
      lr_k = lr * math.sqrt(c2) / c1
      d = [mi / (np.sqrt(vi) + eps) for mi, vi in zip(m, v, strict=True)]
      x = _step(x, lr_k, d)
    else:
      d = [(mi / c1) / (np.sqrt(vi / c2) + eps) for mi, vi in zip(m, v, strict=True)]
      x = _step(x, lr, d)
    iterates.append(x)
    etas.append(float(lr))
  return {'x': iterates, 'eta': etas, 'grad_evals': num_steps}


def adam_keras(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  eps: float = 1e-8,
) -> dict[str, Any]:
  """Adam, Keras/TFF form: x_k = x_{k-1} - lr sqrt(1-b2^k)/(1-b1^k) m_k / (sqrt(v_k) + eps).

  'eta' holds the base lr of each step (not the bias-corrected lr_k).
  """
  return _adam(x0, grad_fn, num_steps, lr, beta_1, beta_2, eps, 'keras')


def adam_torch(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float,
  beta_1: float = 0.9,
  beta_2: float = 0.999,
  eps: float = 1e-8,
) -> dict[str, Any]:
  """Adam, PyTorch form: x_k = x_{k-1} - lr (m_k/(1-b1^k)) / (sqrt(v_k/(1-b2^k)) + eps)."""
  return _adam(x0, grad_fn, num_steps, lr, beta_1, beta_2, eps, 'torch')


def adagrad_torch(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float,
  eps: float = 1e-10,
  initial_accumulator_value: float = 0.0,
) -> dict[str, Any]:
  """PyTorch Adagrad, lr_decay = 0: G_k = G_{k-1} + g_k^2; x_k -= lr g_k / (sqrt(G_k) + eps)."""
  x = _as64(x0)
  acc = [np.full_like(a, initial_accumulator_value) for a in x]
  iterates, etas = [x], []
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(x, k))
    acc = [ai + gi * gi for ai, gi in zip(acc, g, strict=True)]
    d = [gi / (np.sqrt(ai) + eps) for gi, ai in zip(g, acc, strict=True)]
    x = _step(x, lr, d)
    iterates.append(x)
    etas.append(float(lr))
  return {'x': iterates, 'eta': etas, 'grad_evals': num_steps}


# ---------------------------------------------------------------------------------------------
# SPS
# ---------------------------------------------------------------------------------------------


def sps(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  loss_fn: LossFn,
  num_steps: int,
  c: float = 0.5,
  f_star: float = 0.0,
  eps: float = 1e-8,
  mode: str = 'smooth_iter',
  init_step_size: float = 1.0,
  gamma: float = 2.0,
  n_batches_per_epoch: int = 500,
  eta_max: float | None = None,
  grad_norm_tol: float | None = None,
) -> dict[str, Any]:
  """Stochastic Polyak step size (Loizou et al. 2021; official code IssamLaradji/sps).

  p_k = (f(x_{k-1}; k) - f_star) / (c ||g_k||^2 + eps), then
    'constant':    eta_k = 0 if f < f_star else p_k; eta_k = min(eta_k, eta_max) if eta_max set,
    'smooth_iter': eta_k = min(gamma^(1/n_batches_per_epoch) eta_{k-1}, p_k),
                   eta_0 = init_step_size,
  and x_k = x_{k-1} - eta_k g_k. (The official 'smooth_iter' uses the raw loss, i.e. f_star = 0,
  the default here.)

  Args:
    x0: initial weights.
    grad_fn: (x, k) -> gradient on minibatch k.
    loss_fn: (x, k) -> loss on minibatch k.
    num_steps: K.
    c, f_star, eps: the Polyak candidate's constants.
    mode: 'constant' or 'smooth_iter'.
    init_step_size: eta_0 of 'smooth_iter'.
    gamma, n_batches_per_epoch: the per-step growth cap gamma^(1/n) of 'smooth_iter'.
    eta_max: upper bound of 'constant' (None: no bound).
    grad_norm_tol: None (default) ignores it; a number (the official code hard-codes 1e-8) makes
      a step with ||g_k|| < grad_norm_tol use eta_k = 0, which also becomes eta_{k-1} of the next
      'smooth_iter' step, as in the official code.

  Returns:
    {'x', 'eta', 'grad_evals', 'loss_evals', 'polyak': the K candidates p_k}.
  """
  _check('mode', mode, SPS_MODES)
  x = _as64(x0)
  iterates, etas, polyak = [x], [], []
  eta_prev = float(init_step_size)
  coeff = gamma ** (1.0 / n_batches_per_epoch)
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(x, k))
    f = float(loss_fn(x, k))
    gnorm = global_norm(g)
    p = (f - f_star) / (c * gnorm**2 + eps)
    polyak.append(p)
    if grad_norm_tol is not None and gnorm < grad_norm_tol:
      eta = 0.0
    elif mode == 'constant':
      eta = 0.0 if f < f_star else p
      if eta_max is not None:
        eta = min(eta, float(eta_max))
    else:
      eta = min(coeff * eta_prev, p)
    x = _step(x, eta, g)
    iterates.append(x)
    etas.append(eta)
    eta_prev = eta
  return {
    'x': iterates,
    'eta': etas,
    'grad_evals': num_steps,
    'loss_evals': num_steps,
    'polyak': polyak,
  }


# ---------------------------------------------------------------------------------------------
# Delta-SGD
# ---------------------------------------------------------------------------------------------


def delta_sgd(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  eta0: float = 0.2,
  theta0: float = 1.0,
  gamma: float = 2.0,
  delta: float = 0.1,
  gradient: str = 'paper',
  first_step: str = 'paper',
  zero_rule: str = 'paper',
  eps: float = 0.0,
) -> dict[str, Any]:
  """Delta-SGD (Kim et al. ICLR 2024, Algorithm 1 with Sec. 4's delta), one client, one round.

  Step k uses eta_{k-1}: x_k = x_{k-1} - eta_{k-1} g_k, and after step k-1 the next step size is
    eta = min{curvature = gamma ||dx|| / (2 ||dg||), growth = sqrt(1 + delta theta_prev) eta_prev},
  with dx = x_{k-1} - x_{k-2} and theta = eta / eta_prev. In local-step terms:

  * step 1: eta_0 and theta_0 (first_step='paper'); with first_step='grown' (authors' code)
    eta' = eta0 sqrt(1 + delta theta0), theta = eta'/eta0 (branch 'initial' either way);
  * step k >= 2: g_k = grad_fn(x_{k-1}, k) and
      gradient='paper':      dg = g_k - g_{k-1}, g_{k-1} = grad_fn(x_{k-2}, k-1) (already computed);
      gradient='same_batch': dg = g_k - grad_fn(x_{k-2}, k) (one extra evaluation per step);
      zero_rule='paper': ||dg|| = 0 -> eta = growth (no eps), else eta = min(...) + eps;
      zero_rule='grow':  ||dx|| = 0 or ||dg|| = 0 -> eta = growth (no eps), else min(...) + eps;
    theta = eta / eta_prev (0 if eta_prev == 0); x_k = x_{k-1} - eta g_k.
  Ties in the min count as 'curvature'.

  Args:
    x0: initial weights (the round's server model).
    grad_fn: (x, k) -> stochastic gradient on minibatch k.
    num_steps: K local steps.
    eta0, theta0, gamma, delta: Algorithm 1's constants (defaults of Sec. 4, footnote 3).
    gradient, first_step, zero_rule: 'paper' or the authors' code variant (see above).
    eps: added to the min when the curvature bound is defined (authors' code: 1e-8).

  Returns:
    {'x': [x_0..x_K], 'eta': [eta used by steps 1..K], 'theta': [theta after each step],
     'grad_evals', 'branch': ['initial' | 'curvature' | 'growth'] per step,
     'curvature': the candidate gamma||dx||/(2||dg||) per step (None at step 1 and for 0/0;
     +inf when ||dg|| = 0 < ||dx||), 'growth_candidate': per step (None at step 1)}.
  """
  _check('gradient', gradient, DELTA_GRADIENTS)
  _check('first_step', first_step, DELTA_FIRST_STEPS)
  _check('zero_rule', zero_rule, DELTA_ZERO_RULES)
  x = _as64(x0)
  iterates = [x]
  etas: list[float] = []
  thetas: list[float] = []
  branches: list[str] = []
  curvatures: list[float | None] = []
  growths: list[float | None] = []
  grad_evals = 0
  g_prev: Arrays | None = None
  eta_prev = theta_prev = 0.0
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(x, k))
    grad_evals += 1
    if k == 1:
      if first_step == 'paper':
        eta, theta = float(eta0), float(theta0)
      else:
        eta = eta0 * math.sqrt(1.0 + delta * theta0)
        theta = eta / eta0
      branch, curvature, growth = 'initial', None, None
    else:
      x_before = iterates[-2]
      dx_norm = global_norm(_sub(x, x_before))
      if gradient == 'paper':
        dg = _sub(g, g_prev)
      else:
        dg = _sub(g, _as64(grad_fn(x_before, k)))
        grad_evals += 1
      dg_norm = global_norm(dg)
      growth = math.sqrt(1.0 + delta * theta_prev) * eta_prev
      if dg_norm > 0.0:
        curvature = gamma * dx_norm / (2.0 * dg_norm)
      elif dx_norm > 0.0:
        curvature = math.inf
      else:
        curvature = None
      if dg_norm == 0.0 or (zero_rule == 'grow' and dx_norm == 0.0):
        eta, branch = growth, 'growth'
      elif curvature <= growth:
        eta, branch = curvature + eps, 'curvature'
      else:
        eta, branch = growth + eps, 'growth'
      theta = eta / eta_prev if eta_prev != 0.0 else 0.0
    x = _step(x, eta, g)
    iterates.append(x)
    etas.append(eta)
    thetas.append(theta)
    branches.append(branch)
    curvatures.append(curvature)
    growths.append(growth)
    g_prev, eta_prev, theta_prev = g, eta, theta
  return {
    'x': iterates,
    'eta': etas,
    'theta': thetas,
    'grad_evals': grad_evals,
    'branch': branches,
    'curvature': curvatures,
    'growth_candidate': growths,
  }


def delta_sgd_authors_code(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float = 0.2,
  amplifier: float = 0.1,
  theta: float = 1.0,
  damping: float = 1.0,
  eps: float = 1e-8,
) -> dict[str, Any]:
  """Transcription of the Delta-SGD authors' PyTorch step, independent of `delta_sgd`.

  Keeps prev (initially x0); per minibatch k: g_prev = grad(prev, k), g = grad(x, k),
  param_dif = ||x - prev||, grad_dif = ||g - g_prev||, prev <- x;
  lr_new = min(lr sqrt(1 + amplifier theta), param_dif / (damping grad_dif)) + eps if both
  differences are > 0, else lr sqrt(1 + amplifier theta); theta = lr_new / lr; lr = lr_new;
  x <- x - lr_new g. Two gradient evaluations per step. Equals `delta_sgd(gradient='same_batch',
  first_step='grown', zero_rule='grow', eps=eps, gamma=2 / damping)` in 'x' and 'eta' (that
  one skips the redundant evaluation at step 1, so 'grad_evals' differs by one).
  """
  x = _as64(x0)
  prev = [a.copy() for a in x]
  iterates, etas = [x], []
  for k in range(1, num_steps + 1):
    g_prev = _as64(grad_fn(prev, k))
    g = _as64(grad_fn(x, k))
    param_dif = global_norm(_sub(x, prev))
    grad_dif = global_norm(_sub(g, g_prev))
    prev = [a.copy() for a in x]
    grown = lr * math.sqrt(1.0 + amplifier * theta)
    if param_dif > 0.0 and grad_dif > 0.0:
      lr_new = min(grown, param_dif / (damping * grad_dif)) + eps
    else:
      lr_new = grown
    theta = lr_new / lr
    lr = lr_new
    x = _step(x, lr_new, g)
    iterates.append(x)
    etas.append(lr_new)
  return {'x': iterates, 'eta': etas, 'grad_evals': 2 * num_steps}


# ---------------------------------------------------------------------------------------------
# Test problems
# ---------------------------------------------------------------------------------------------


def quadratic(L: float, dim: int) -> tuple[LossFn, GradFn]:  # noqa: N803
  """f(x) = L/2 ||x||^2 (the same on every minibatch k); gradient L x.

  Closed form: g(x_k) - g(x_{k-1}) = L (x_k - x_{k-1}), so whenever x_k != x_{k-1},
  ||g(x_k) - g(x_{k-1})|| = L ||x_k - x_{k-1}|| and Delta-SGD's curvature candidate
  gamma ||dx|| / (2 ||dg||) = gamma / (2 L), i.e. 1/L at gamma = 2 (0.25 for L = 4).
  `dim` is the size of the single array x is expected to hold (x = [array of shape [dim]]);
  the functions accept any list of arrays.
  """
  del dim  # The formulas do not depend on the shape.

  def loss_fn(x: Arrays, k: int) -> float:
    del k
    return 0.5 * L * global_norm(x) ** 2

  def grad_fn(x: Arrays, k: int) -> Arrays:
    del k
    return [L * np.asarray(a, np.float64) for a in x]

  return loss_fn, grad_fn


def logistic_problem(
  seed: int, num_steps: int, dim: int = 5, batch: int = 8
) -> tuple[LossFn, GradFn, Arrays]:
  """Binary logistic regression with L2 = 0.05/2 ||w||^2, a different minibatch per step.

  Data: a seeded pool of 16 * batch rows A ~ N(0, 1), column j scaled by linspace(1, 6)[j] so
  that the curvature is anisotropic and, with Delta-SGD's defaults, both the curvature and the
  growth bounds bind within ~30 steps in every variant; labels y in {0, 1} from a noisy seeded
  teacher (not separable). Minibatch k (k = 1..num_steps; other k raise ValueError) is `batch`
  distinct rows drawn by a generator keyed on (seed, k), so the curvature changes from step to
  step. Weights x = [w (shape [dim]), b (shape [1])], z = A_k w + b,
    loss_k(x) = mean(log(1 + e^z) - y z) + 0.05/2 ||w||^2   (the bias is not regularized),
    grad_k(x) = [A_k^T (s - y) / batch + 0.05 w, [sum(s - y) / batch]],  s = sigmoid(z).
  Returns (loss_fn, grad_fn, x0) with x0 a seeded small random start.
  """
  l2 = 0.05
  rng = np.random.default_rng(seed)
  pool = 16 * batch
  scales = np.linspace(1.0, 6.0, dim)
  features = rng.standard_normal((pool, dim)) * scales
  teacher = rng.standard_normal(dim)
  logits = features @ teacher + 0.3 + rng.standard_normal(pool)
  labels = (logits > 0.0).astype(np.float64)
  x0 = [0.1 * rng.standard_normal(dim), np.array([0.05])]
  rows = {
    k: np.random.default_rng([seed, k]).choice(pool, size=batch, replace=False)
    for k in range(1, num_steps + 1)
  }

  def _batch(k: int) -> tuple[np.ndarray, np.ndarray]:
    if k not in rows:
      raise ValueError(f'minibatch index k must be in 1..{num_steps}, got {k}')
    return features[rows[k]], labels[rows[k]]

  def loss_fn(x: Arrays, k: int) -> float:
    a, y = _batch(k)
    w, b = np.asarray(x[0], np.float64), np.asarray(x[1], np.float64)
    z = a @ w + b[0]
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * np.dot(w, w))

  def grad_fn(x: Arrays, k: int) -> Arrays:
    a, y = _batch(k)
    w, b = np.asarray(x[0], np.float64), np.asarray(x[1], np.float64)
    z = a @ w + b[0]
    r = (0.5 * (1.0 + np.tanh(0.5 * z)) - y) / len(y)
    return [a.T @ r + l2 * w, np.array([np.sum(r)])]

  return loss_fn, grad_fn, x0
