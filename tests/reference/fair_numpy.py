"""Float64 NumPy references of AdaFedAdam, q-FedAvg, FedNova, FedProx and FedAvg.

Written from the papers' equations, independently of `tff_adaptive`:

* AdaFedAdam: Ju, Zhang, Chen, Schwarz, Ngai. "Accelerating Fair Federated Learning: Adaptive
  Federated Adam." (TMLR submission, 2023), Algorithm 1 (server) and Algorithm 2 (pseudo-
  gradient), Sec. 5.1; plain Adam is Algorithm 3 (App. B).
* q-FedAvg: Li, Sanjabi, Beirami, Smith. "Fair Resource Allocation in Federated Learning."
  ICLR 2020, Algorithm 2 (q-FedAvg), with the authors' code's F_k + 1e-10.
* FedNova: Wang, Liu, Liang, Joshi, Poor. "Tackling the Objective Inconsistency Problem in
  Heterogeneous Federated Optimization." NeurIPS 2020, Sec. 4 (Eq. 5-6) and the appendix on
  local momentum.
* FedProx: Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith. "Federated Optimization in
  Heterogeneous Networks." MLSys 2020: client objective F_k(x) + mu/2 ||x - x_t||^2.

Model (every end-to-end function). Client k holds X_k [n_k, d], y_k [n_k]; the parameters are
theta = concat(W, [b]) (W [d], bias last) and the loss is the Keras mean squared error (no 1/2)

  F_k(theta) = (1/n_k) sum_i (X_k[i] @ W + b - y_k[i])^2,
  r = X W + b - y,   grad_W = (2/n_k) X^T r,   grad_b = (2/n_k) sum(r).

Norms are Euclidean norms of the whole theta. Local training is FULL-BATCH gradient descent:
one local "epoch" is one step on all n_k examples, so `epochs` = number of local steps and no
shuffling is involved. The client optimizer is SGD, or SGD with heavy-ball momentum in the
TF/Keras/TFF form v <- rho v + g, theta <- theta - lr v (v = 0 at the start of every client run).

Sign conventions (they differ between papers, so each function states its own):
* AdaFedAdam: delta_k = x_k - x_t (trained minus start, Algorithm 2), U_k = -delta_k / eta'_k,
  so U_k points along +gradient and the server subtracts it.
* q-FedAvg, FedNova, FedAvg: the local progress is x_t - x_k (start minus trained), a
  gradient-like direction the server subtracts.

Every `*_train` function uses full participation and returns the models after each round
(theta_1, ..., theta_R), never theta_0.
"""

from collections.abc import Sequence

import numpy as np

Client = tuple[np.ndarray, np.ndarray]


def _f64(a) -> np.ndarray:
  return np.asarray(a, dtype=np.float64)


def _theta(theta) -> np.ndarray:
  return _f64(theta).reshape(-1).copy()


def _xy(X, y) -> tuple[np.ndarray, np.ndarray]:
  X = _f64(X)
  y = _f64(y).reshape(-1)
  if X.ndim != 2 or X.shape[0] != y.shape[0]:
    raise ValueError(f'X must be [n, d] and y [n]; got {X.shape} and {y.shape}')
  return X, y


# --------------------------------------------------------------------------------------------
# Model and local solvers.


def mse_loss(X, y, theta) -> float:
  """F(theta) = mean_i (X[i] @ W + b - y[i])^2, theta = [W, b] (Keras MSE, no 1/2)."""
  X, y = _xy(X, y)
  theta = _theta(theta)
  r = X @ theta[:-1] + theta[-1] - y
  return float(np.mean(r * r))


def mse_grad(X, y, theta) -> np.ndarray:
  """grad F = [(2/n) X^T r, (2/n) sum(r)], r = X W + b - y; [d + 1]."""
  X, y = _xy(X, y)
  theta = _theta(theta)
  r = X @ theta[:-1] + theta[-1] - y
  n = y.shape[0]
  return np.concatenate([2.0 / n * (X.T @ r), [2.0 / n * r.sum()]])


def local_sgd(
  X,
  y,
  theta0,
  lr: float,
  epochs: int,
  momentum: float = 0.0,
  mu: float = 0.0,
  anchor=None,
) -> np.ndarray:
  """`epochs` full-batch steps of SGD(M) from theta0, optionally with FedProx's term.

  g_s = grad F(theta_s) + mu (theta_s - anchor)   (FedProx: grad of F + mu/2 ||theta - anchor||^2)
  v_s = momentum v_{s-1} + g_s,  v_{-1} = 0       (TF/TFF SGDM; momentum = 0 gives v_s = g_s)
  theta_{s+1} = theta_s - lr v_s.

  anchor defaults to theta0 (the broadcast model x_t). Returns theta_epochs [d + 1].
  """
  X, y = _xy(X, y)
  theta = _theta(theta0)
  anc = theta.copy() if anchor is None else _theta(anchor)
  vel = np.zeros_like(theta)
  for _ in range(int(epochs)):
    g = mse_grad(X, y, theta)
    if mu:
      g = g + mu * (theta - anc)
    vel = momentum * vel + g
    theta = theta - lr * vel
  return theta


def fedprox_quadratic_closed_form(
  A,
  c,
  x_t,
  mu: float,
  lr: float,
  K: int,
  sign: int = +1,
) -> np.ndarray:
  """x_K after K GD steps from x_t on f(x) + sign mu/2 ||x - x_t||^2, f = 1/2 (x-c)^T A (x-c).

  sign = +1 is FedProx; sign = -1 is TFF 0.87's flipped proximal term (the gradient gets
  mu (x_t - x) added instead of mu (x - x_t)). A must be symmetric and M = A + sign mu I
  nonsingular (sign = -1 with mu an eigenvalue of A has no x*; use the iterate instead).
  """
  # Derivation. grad = A (x - c) + s mu (x - x_t) = M x - b with M = A + s mu I and
  # b = A c + s mu x_t, so the stationary point is x* = M^{-1} b. One step:
  #   x_{k+1} - x* = x_k - lr (M x_k - b) - x* = x_k - x* - lr M (x_k - x*)   (b = M x*)
  #                = (I - lr M)(x_k - x*),
  # hence x_K = x* + (I - lr M)^K (x_0 - x*) with x_0 = x_t.
  A = _f64(A)
  c, x_t = _theta(c), _theta(x_t)
  eye = np.eye(A.shape[0])
  m = A + sign * mu * eye
  x_star = np.linalg.solve(m, A @ c + sign * mu * x_t)
  return x_star + np.linalg.matrix_power(eye - lr * m, int(K)) @ (x_t - x_star)


def fedprox_quadratic_iterate(
  A,
  c,
  x_t,
  mu: float,
  lr: float,
  K: int,
  sign: int = +1,
) -> np.ndarray:
  """The same K steps by loop: x <- x - lr (A (x - c) + sign mu (x - x_t)); [d]."""
  A = _f64(A)
  c, x_t = _theta(c), _theta(x_t)
  x = x_t.copy()
  for _ in range(int(K)):
    x = x - lr * (A @ (x - c) + sign * mu * (x - x_t))
  return x


# --------------------------------------------------------------------------------------------
# AdaFedAdam (Ju et al. 2023).


def adafedadam_client(delta, grad, lr: float, loss_t: float, loss_0: float) -> dict:
  """Algorithm 2's client quantities.

  delta = x_k - x_t (trained minus start), grad = grad F_k(x_t), lr = eta_k (local solver):

    eta'_k = ||delta||_2 / ||grad F_k(x_t)||_2
    U_k    = -delta / eta'_k                    (so ||U_k|| = ||grad F_k(x_t)||)
    C_k    = log(eta'_k / eta_k) + 1            (natural log)
    I_k    = F_k(x_t) / F_k(x_0)                (inverse training rate)

  Returns {'eta_prime', 'U', 'C', 'I'} (U an array, the rest floats). No guard: a zero
  gradient gives eta' = inf, a zero delta gives C = -inf.
  """
  delta, grad = _theta(delta), _theta(grad)
  eta_prime = float(np.linalg.norm(delta) / np.linalg.norm(grad))
  return {
    'eta_prime': eta_prime,
    'U': -delta / eta_prime,
    'C': float(np.log(eta_prime / lr) + 1.0),
    'I': float(loss_t) / float(loss_0),
  }


def certainty_weighted_mean(Us, Cs, Is, ps, alpha: float) -> tuple[np.ndarray, float]:
  """Algorithm 2's aggregation with w_k = p_k I_k^alpha:

  g = sum_k w_k U_k / sum_k w_k,   C = sum_k w_k C_k / sum_k w_k.
  """
  w = _f64(ps).reshape(-1) * np.power(_f64(Is).reshape(-1), alpha)
  return _weighted_direction(Us, Cs, w)


def _weighted_direction(Us, Cs, w) -> tuple[np.ndarray, float]:
  u = _f64(Us)
  w = _f64(w).reshape(-1)
  total = w.sum()
  return (w @ u) / total, float(w @ _f64(Cs).reshape(-1) / total)


def adaadam_init(dim: int) -> dict:
  """Algorithm 1's state: m_0 = v_0 = 0, c_{0,m} = c_{0,v} = 1."""
  return {'m': np.zeros(dim), 'v': np.zeros(dim), 'c_m': 1.0, 'c_v': 1.0}


def adaadam_step(
  state: dict,
  x,
  g,
  C: float,
  eta: float,
  beta1: float,
  beta2: float,
  eps: float,
  step_index: int,
  lr_certainty_from_step: int = 0,
) -> tuple[dict, np.ndarray]:
  """One server step of Algorithm 1 (AdaAdam) with pseudo-gradient g and certainty C:

    beta_{t,1} = beta1^C,  beta_{t,2} = beta2^C,  eta_t = C eta
    c_{t+1,m} = c_{t,m} beta_{t,1},   c_{t+1,v} = c_{t,v} beta_{t,2}
    m_{t+1} = (1 - beta_{t,1}) g + beta_{t,1} m_t
    v_{t+1} = (1 - beta_{t,2}) g * g + beta_{t,2} v_t
    mhat = m_{t+1} / (1 - c_{t+1,m}),  vhat = v_{t+1} / (1 - c_{t+1,v})
    x_{t+1} = x_t - eta_t mhat / (sqrt(vhat) + eps).

  Algorithm 1's last line prints eta, not eta_t, but the text (Sec. 5.1, "eta_t <- C eta:
  The base stepsize ... is adjusted") and the eta_t line say the adapted step is used; so is it
  here. eta_t = C eta only when step_index >= lr_certainty_from_step (0-based server step);
  before that eta_t = eta (the authors' code: 6). The betas always use C. Returns a new state.
  """
  x, g = _theta(x), _theta(g)
  b1, b2 = beta1**C, beta2**C
  eta_t = C * eta if step_index >= lr_certainty_from_step else eta
  c_m, c_v = state['c_m'] * b1, state['c_v'] * b2
  m = (1.0 - b1) * g + b1 * state['m']
  v = (1.0 - b2) * g * g + b2 * state['v']
  m_hat = m / (1.0 - c_m)
  v_hat = v / (1.0 - c_v)
  x = x - eta_t * m_hat / (np.sqrt(v_hat) + eps)
  return {'m': m, 'v': v, 'c_m': c_m, 'c_v': c_v}, x


def adam_init(dim: int) -> dict:
  """Plain Adam's state: m_0 = v_0 = 0."""
  return {'m': np.zeros(dim), 'v': np.zeros(dim)}


def adam_bias_corrected_step(
  state: dict, x, g, eta: float, beta1: float, beta2: float, eps: float, step_index: int
) -> tuple[dict, np.ndarray]:
  """Adam (Algorithm 3) at 0-based step t = step_index:

    m = (1 - beta1) g + beta1 m,  v = (1 - beta2) g^2 + beta2 v,
    x -= eta (m / (1 - beta1^(t+1))) / (sqrt(v / (1 - beta2^(t+1))) + eps).

  AdaAdam with C = 1 at every step reduces to this (c_{t+1,m} = beta1^(t+1)).
  """
  x, g = _theta(x), _theta(g)
  t = int(step_index) + 1
  m = (1.0 - beta1) * g + beta1 * state['m']
  v = (1.0 - beta2) * g * g + beta2 * state['v']
  m_hat = m / (1.0 - beta1**t)
  v_hat = v / (1.0 - beta2**t)
  return {'m': m, 'v': v}, x - eta * m_hat / (np.sqrt(v_hat) + eps)


def _client_weights(clients: Sequence[Client], weighting: str) -> np.ndarray:
  """p_k = n_k ('example') or 1 ('uniform'); not normalised."""
  if weighting == 'example':
    return np.array([float(_f64(y).reshape(-1).shape[0]) for _, y in clients])
  if weighting == 'uniform':
    return np.ones(len(clients))
  raise ValueError(f"weighting must be 'example' or 'uniform'; got {weighting!r}")


def _epochs_for(epochs, epochs_per_client, rnd: int, k: int) -> int:
  if epochs_per_client is None:
    return int(epochs)
  return int(epochs_per_client[rnd][k])


def adafedadam_train(
  clients: Sequence[Client],
  theta0,
  rounds: int,
  epochs: int,
  lr_local: float,
  eta: float = 1e-3,
  beta1: float = 0.9,
  beta2: float = 0.999,
  eps: float = 1e-8,
  alpha: float = 1.0,
  weighting: str = 'example',
  epochs_per_client=None,
  weight_mode: str = 'paper',
  lr_certainty_from_step: int = 0,
) -> dict[str, list]:
  """AdaFedAdam (Algorithms 1-2), full participation, plain full-batch SGD as local solver.

  Round t (x_t the broadcast model, x_0 = theta0): client k computes F_k(x_t) and
  grad F_k(x_t) on all its data, runs `local_sgd` for epochs (or epochs_per_client[t][k]) steps
  at lr_local to get x_k, and reports `adafedadam_client(x_k - x_t, grad, lr_local, F_k(x_t),
  F_k(x_0))`, F_k(x_0) being the loss at theta0 (computed once). The weights are

    'paper': w_k = p_k I_k^alpha, p_k = n_k ('example') or 1 ('uniform')   (Algorithm 2)
    'loss' : w_k = n_k F_k(x_t)^alpha (the authors' code; `weighting` is ignored),

  g, C = sum w_k (U_k, C_k) / sum w_k, then `adaadam_step` at step_index t.

  Returns per-round lists: 'theta' (x_{t+1}), 'g', 'C', 'U' ([K, d+1]), 'C_k' ([K]), 'I' ([K]),
  'eta_prime' ([K]), 'loss' (F_k(x_t), [K]), 'weights' (w_k, [K]).
  """
  if weight_mode not in ('paper', 'loss'):
    raise ValueError(f"weight_mode must be 'paper' or 'loss'; got {weight_mode!r}")
  theta = _theta(theta0)
  p = _client_weights(clients, weighting)
  n = _client_weights(clients, 'example')
  loss0 = np.array([mse_loss(X, y, theta) for X, y in clients])
  state = adaadam_init(theta.shape[0])
  keys = ('theta', 'g', 'C', 'U', 'C_k', 'I', 'eta_prime', 'loss', 'weights')
  out: dict[str, list] = {key: [] for key in keys}
  for rnd in range(int(rounds)):
    reports = []
    losses = []
    for k, (X, y) in enumerate(clients):
      loss_t = mse_loss(X, y, theta)
      grad = mse_grad(X, y, theta)
      x_k = local_sgd(X, y, theta, lr_local, _epochs_for(epochs, epochs_per_client, rnd, k))
      reports.append(adafedadam_client(x_k - theta, grad, lr_local, loss_t, loss0[k]))
      losses.append(loss_t)
    us = np.array([r['U'] for r in reports])
    cs = np.array([r['C'] for r in reports])
    inv = np.array([r['I'] for r in reports])
    losses = np.array(losses)
    if weight_mode == 'paper':
      w = p * np.power(inv, alpha)
    else:
      w = n * np.power(losses, alpha)
    g, c = _weighted_direction(us, cs, w)
    state, theta = adaadam_step(
      state, theta, g, c, eta, beta1, beta2, eps, rnd, lr_certainty_from_step
    )
    eta_prime = np.array([r['eta_prime'] for r in reports])
    for key, val in zip(keys, (theta, g, c, us, cs, inv, eta_prime, losses, w)):
      out[key].append(val)
  return out


# --------------------------------------------------------------------------------------------
# q-FedAvg (Li, Sanjabi, Beirami, Smith 2020).


def qfedavg_aggregate(deltas, losses, q: float, L: float, loss_eps: float = 1e-10) -> np.ndarray:
  """One q-FedAvg server step (Algorithm 2); returns the step s with x_{t+1} = x_t - s.

  deltas[k] = x_t - x_k (start minus trained, NOT yet scaled by L), losses[k] = F_k(x_t).
  With F_k <- F_k + loss_eps (the authors' np.float_power(loss + 1e-10, q)):

    Delta_k = L (x_t - x_k)
    h_k     = q F_k^(q-1) ||Delta_k||^2 + L F_k^q
    s       = sum_k F_k^q Delta_k / sum_k h_k.

  q = 0: the first term of h_k is set to 0 exactly (F^q = 1, so s = mean_k (x_t - x_k)).
  """
  d = L * _f64(deltas)
  f = _f64(losses).reshape(-1) + loss_eps
  fq = np.float_power(f, q)
  if q == 0:
    h = L * fq
  else:
    h = q * np.float_power(f, q - 1.0) * np.sum(d * d, axis=1) + L * fq
  return (fq @ d) / h.sum()


def qfedavg_train(
  clients: Sequence[Client],
  theta0,
  rounds: int,
  epochs: int,
  lr_local: float,
  q: float,
  loss_eps: float = 1e-10,
) -> list[np.ndarray]:
  """q-FedAvg, full participation, L = 1 / lr_local; F_k(x_t) on all of client k's data.

  x_{t+1} = x_t - qfedavg_aggregate([x_t - x_k], [F_k(x_t)], q, L, loss_eps), x_k from
  `local_sgd` (epochs full-batch steps). Returns [x_1, ..., x_R].
  """
  theta = _theta(theta0)
  big_l = 1.0 / lr_local
  out = []
  for _ in range(int(rounds)):
    deltas, losses = [], []
    for X, y in clients:
      losses.append(mse_loss(X, y, theta))
      deltas.append(theta - local_sgd(X, y, theta, lr_local, epochs))
    theta = theta - qfedavg_aggregate(deltas, losses, q, big_l, loss_eps)
    out.append(theta)
  return out


# --------------------------------------------------------------------------------------------
# FedNova (Wang et al. 2020) and FedAvg.


def fednova_a(tau: int, momentum: float = 0.0) -> float:
  """||a_i||_1 for tau local steps: tau (SGD) or, for SGDM (v <- rho v + g, x -= lr v),

  ||a||_1 = [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho).
  """
  # Derivation (rho = momentum, steps s = 0..tau-1, v_{-1} = 0). v_s = sum_{j<=s} rho^{s-j} g_j,
  # so x_0 - x_tau = lr sum_s v_s = lr sum_j g_j sum_{s=j}^{tau-1} rho^{s-j}
  #                = lr sum_j g_j (1 - rho^{tau-j}) / (1 - rho),
  # i.e. a_j = (1 - rho^{tau-j}) / (1 - rho) and
  # ||a||_1 = [tau - sum_{i=1}^{tau} rho^i] / (1 - rho) = [tau - rho (1 - rho^tau)/(1 - rho)]
  #           / (1 - rho). rho -> 0 gives tau.
  tau = int(tau)
  rho = float(momentum)
  if rho == 0.0:
    return float(tau)
  return (tau - rho * (1.0 - rho**tau) / (1.0 - rho)) / (1.0 - rho)


def fednova_train(
  clients: Sequence[Client],
  theta0,
  rounds: int,
  lr_local: float,
  momentum: float = 0.0,
  epochs_per_client=None,
) -> list[np.ndarray]:
  """FedNova, full participation, server lr 1; epochs_per_client[t][k] = tau_k (required).

  p_k = n_k / sum n; client k runs tau_k full-batch SGD(M) steps to x_k, a_k = fednova_a(tau_k,
  momentum), d_k = (x_t - x_k) / a_k (= lr G_k a_k / ||a_k||_1), tau_eff = sum_k p_k a_k,

    x_{t+1} = x_t - tau_eff sum_k p_k d_k.

  Equal tau_k gives FedAvg with example weights exactly. Returns [x_1, ..., x_R].
  """
  if epochs_per_client is None:
    raise ValueError('epochs_per_client (tau_k per round and client) is required')
  theta = _theta(theta0)
  p = _client_weights(clients, 'example')
  p = p / p.sum()
  out = []
  for rnd in range(int(rounds)):
    taus = [int(t) for t in epochs_per_client[rnd]]
    a = np.array([fednova_a(t, momentum) for t in taus])
    if np.any(a <= 0):
      raise ValueError(f'every tau_k must be >= 1; got {taus}')
    d = np.array(
      [
        (theta - local_sgd(X, y, theta, lr_local, tau, momentum)) / a_k
        for (X, y), tau, a_k in zip(clients, taus, a)
      ]
    )
    tau_eff = float(p @ a)
    theta = theta - tau_eff * (p @ d)
    out.append(theta)
  return out


def fedavg_train(
  clients: Sequence[Client],
  theta0,
  rounds: int,
  epochs: int,
  lr_local: float,
  weighting: str = 'example',
) -> list[np.ndarray]:
  """FedAvg, server lr 1: x_{t+1} = x_t - sum_k p_k (x_t - x_k) / sum_k p_k.

  p_k = n_k ('example') or 1 ('uniform'); x_k = `local_sgd` (epochs full-batch SGD steps).
  Returns [x_1, ..., x_R].
  """
  theta = _theta(theta0)
  p = _client_weights(clients, weighting)
  p = p / p.sum()
  out = []
  for _ in range(int(rounds)):
    d = np.array([theta - local_sgd(X, y, theta, lr_local, epochs) for X, y in clients])
    theta = theta - p @ d
    out.append(theta)
  return out
