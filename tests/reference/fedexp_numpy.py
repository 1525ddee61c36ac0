"""Float64 NumPy reference of FedExP (Jhunjhunwala, Wang & Joshi, ICLR 2023, arXiv 2301.09604).

Written from the paper's Algorithm 1 and checked against the authors' public code
(github.com/Divyansh03/FedExP, main.py and util_general.py at commit 56dfaf9), independently of
`tff_adaptive`. Notation of the paper: round t, M participating clients, client i starts from
the global model w^(t) and runs tau local steps to w_i^(t,tau); everything is a list of arrays
and ||.|| is the global L2 norm over all entries of all arrays.

  Delta_i   = w^(t) - w_i^(t,tau)                  (a pseudo-gradient: descent direction is -)
  Delta_bar = (1/M) sum_i Delta_i
  eta_g     = max{1, sum_i ||Delta_i||^2 / (2 M (||Delta_bar||^2 + eps))}    (Algorithm 1)
  w^(t+1)   = w^(t) - eta_g Delta_bar

and the model the paper evaluates is the average of the last two iterates (the paper's remedy
for FedExP's oscillating iterates; the paper's equation numbers are not cited here because only
its abstract and Algorithm-level content could be checked, against the authors' code):
  w_eval^(t+1) = (w^(t) + w^(t+1)) / 2,  except after the very first round (w_eval^(1) = w^(1)),
as main.py lines 414-421 and 428-431 do.

The authors' code differs from the paper in three ways, each a named option here:

* `weights`: main.py weights client i by p_i = n_i / sum_j n_j (lines 247-252) and renormalises
  over the round's participants (lines 347-362): Delta_bar = sum p_i Delta_i / sum p_i and the
  numerator's mean is sum p_i ||Delta_i||^2 / sum p_i. With equal client sizes (its CIFAR/CINIC
  partitions are equal-sized) this is the paper's uniform mean; EMNIST clients are unequal.
* `eps_times_clients`: main.py line 404 divides by (||Delta_bar||^2 + S eps) with S the number of
  participating clients, i.e. the paper's eps equals S times the code's `epsilon`.
* eps (and the client learning rate) decay every round, *before* the round is run (lines 307-308):
  eta_l^(t) = eta_l 0.998^(t+1), eps^(t) = eps 0.998^(2(t+1)) for t = 0, 1, ... (`authors_decay`).

Combinations (main.py's 'scaffold(exp)', 'fedprox(exp)', 'fedavgm(exp)'): the clients run
SCAFFOLD (Option II) or FedProx locally and the server applies the same eta_g rule to their
Delta_i (`scaffold_delta`, `fedprox_delta`, `run_fedexp`, `run_scaffold_exp`). FedAvgM with
extrapolation is special in the code (lines 366-410, `fedavgm_exp_round`): the numerator is a
running sum R_t = A_t + 0.45 R_{t-1} of A_t = mean ||Delta_i||^2, eta_g is *not* clipped at 1, and
because of the misspelt test `alg == 'fedavgm(ep)'` (line 370) the momentum is never applied to
the step of 'fedavgm(exp)': the published numbers come from x - eta_g Delta_bar with that eta_g.
"""

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any

import numpy as np

Arrays = list[np.ndarray]
# (x_t, t) -> Delta_i = x_t - x_i, the paper's sign.
ClientUpdate = Callable[[Arrays, int], Arrays]
# (x, k) -> gradient at x for local step k = 1, ..., K.
GradFn = Callable[[Arrays, int], Arrays]
Participants = Callable[[int], Sequence[int]]


def _as64(arrays: Sequence[np.ndarray]) -> Arrays:
  return [np.array(a, dtype=np.float64) for a in arrays]


def sq_norm(arrays: Sequence[np.ndarray]) -> float:
  """Sum of squares of every entry of every array (||.||^2 over the whole model)."""
  return float(sum(np.sum(np.square(np.asarray(a, np.float64))) for a in arrays))


def _axpy(alpha: float, x: Sequence[np.ndarray], y: Sequence[np.ndarray]) -> Arrays:
  """alpha x + y, as new arrays."""
  return [alpha * xi + yi for xi, yi in zip(x, y, strict=True)]


def _weighted_mean(items: Sequence[Sequence[np.ndarray]], q: np.ndarray) -> Arrays:
  return [sum(qi * it[j] for qi, it in zip(q, items, strict=True)) for j in range(len(items[0]))]


def _normalised(weights: Sequence[float] | None, m: int) -> np.ndarray:
  if weights is None:
    return np.full(m, 1.0 / m)
  w = np.asarray(weights, np.float64)
  if w.shape != (m,) or np.any(w < 0) or w.sum() <= 0:
    raise ValueError(f'need {m} non-negative weights with a positive sum, got {weights!r}')
  return w / w.sum()


def deltas_from_models(
  x_t: Sequence[np.ndarray], client_models: Sequence[Sequence[np.ndarray]]
) -> list[Arrays]:
  """The paper's Delta_i = x_t - x_i for each client's final local model x_i."""
  return [[a - b for a, b in zip(_as64(x_t), _as64(m), strict=True)] for m in client_models]


def fedexp_step_size(
  deltas: Sequence[Sequence[np.ndarray]],
  eps: float,
  weights: Sequence[float] | None = None,
  eps_times_clients: bool = False,
  clip_at_one: bool = True,
) -> tuple[float, Arrays, float]:
  """eta_g of Algorithm 1: max{1, sum_i ||Delta_i||^2 / (2 M (||Delta_bar||^2 + eps))}.

  Written as mean_i ||Delta_i||^2 / (2 (||Delta_bar||^2 + eps')), which is the same expression;
  the mean and Delta_bar use the normalised `weights` when given (authors' code), and
  eps' = M eps when `eps_times_clients` (authors' code, main.py line 404), else eps' = eps.
  `clip_at_one=False` drops the max with 1 (the code's 'fedavgm(exp)', line 409).

  Returns:
    (eta_g, Delta_bar, mean_i ||Delta_i||^2).
  """
  m = len(deltas)
  if m == 0:
    raise ValueError('no client updates')
  d = [_as64(x) for x in deltas]
  q = _normalised(weights, m)
  delta_bar = _weighted_mean(d, q)
  mean_sq = float(sum(qi * sq_norm(di) for qi, di in zip(q, d, strict=True)))
  eps_eff = eps * m if eps_times_clients else eps
  denom = 2.0 * (sq_norm(delta_bar) + eps_eff)
  eta = mean_sq / denom if denom > 0 else math.inf
  if clip_at_one:
    eta = max(1.0, eta)
  return eta, delta_bar, mean_sq


def fedexp_round(
  x_t: Sequence[np.ndarray],
  deltas: Sequence[Sequence[np.ndarray]],
  eps: float,
  weights: Sequence[float] | None = None,
  eps_times_clients: bool = False,
  clip_at_one: bool = True,
  first_round: bool = False,
) -> dict[str, Any]:
  """One FedExP server round (Algorithm 1): w^(t+1) = w^(t) - eta_g Delta_bar.

  Args:
    x_t: the global model w^(t) the clients started from.
    deltas: the M participants' Delta_i = w^(t) - w_i^(t,tau) (paper sign).
    eps: the paper's eps (or the code's `epsilon` with eps_times_clients=True).
    weights: optional client weights (e.g. example counts n_i), renormalised over the round.
    eps_times_clients: denominator ||Delta_bar||^2 + M eps (authors' code) instead of + eps.
    clip_at_one: take max(1, .) (paper); False only for the code's FedAvgM variant.
    first_round: True for round t = 0, where the code evaluates w^(1) itself; otherwise the
      evaluated model is the average of the last two iterates (w^(t) + w^(t+1)) / 2.

  Returns:
    {'x': w^(t+1), 'eta_g': float, 'delta_bar': Delta_bar, 'mean_sq_norm': mean ||Delta_i||^2,
     'x_eval': the model the paper evaluates after this round}.
  """
  x = _as64(x_t)
  eta, delta_bar, mean_sq = fedexp_step_size(deltas, eps, weights, eps_times_clients, clip_at_one)
  x_next = _axpy(-eta, delta_bar, x)
  return {
    'x': x_next,
    'eta_g': eta,
    'delta_bar': delta_bar,
    'mean_sq_norm': mean_sq,
    'x_eval': eval_average(None if first_round else x, x_next),
  }


def eval_average(x_t: Sequence[np.ndarray] | None, x_next: Sequence[np.ndarray]) -> Arrays:
  """The average of the last two iterates (x_t + x_{t+1}) / 2; x_{t+1} when x_t is None.

  main.py lines 414-421: w_vec_avg = (w_vec_estimate + w_vec_prev) / 2 for t > 0, else the new
  iterate. The averaged model is only evaluated; the next round starts from x_{t+1}.
  """
  if x_t is None:
    return _as64(x_next)
  return [(a + b) / 2.0 for a, b in zip(_as64(x_t), _as64(x_next), strict=True)]


def authors_decay(t: int, value: float, decay: float = 0.998, power: int = 1) -> float:
  """value * decay^(power (t+1)) for 0-based round t (main.py lines 307-308).

  The client learning rate uses power=1 and eps power=2; both are decayed before round 0 runs.
  """
  return value * decay ** (power * (t + 1))


# ---------------------------------------------------------------------------------------------
# Clients: local SGD (FedAvg/FedExP), FedProx, SCAFFOLD (Option II), as in util_general.py.
# ---------------------------------------------------------------------------------------------


def local_sgd_delta(
  x_t: Sequence[np.ndarray], grad_fn: GradFn, num_steps: int, lr: float
) -> Arrays:
  """tau steps y <- y - lr g(y); returns Delta = x_t - y_tau."""
  x0 = _as64(x_t)
  y = [a.copy() for a in x0]
  for k in range(1, num_steps + 1):
    y = _axpy(-lr, _as64(grad_fn(y, k)), y)
  return [a - b for a, b in zip(x0, y, strict=True)]


def fedprox_delta(
  x_t: Sequence[np.ndarray], grad_fn: GradFn, num_steps: int, lr: float, mu: float
) -> Arrays:
  """FedProx local steps on F_i(y) + mu/2 ||y - x_t||^2: y <- y - lr (g(y) + mu (y - x_t))."""
  x0 = _as64(x_t)
  y = [a.copy() for a in x0]
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(y, k))
    g = [gi + mu * (yi - xi) for gi, yi, xi in zip(g, y, x0, strict=True)]
    y = _axpy(-lr, g, y)
  return [a - b for a, b in zip(x0, y, strict=True)]


def scaffold_delta(
  x_t: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  lr: float,
  c: Sequence[np.ndarray],
  c_i: Sequence[np.ndarray],
) -> tuple[Arrays, Arrays]:
  """SCAFFOLD client (Option II): y <- y - lr (g(y) - c_i + c); c_i+ = c_i - c + Delta/(K lr).

  util_general.py LocalUpdate_scaffold adds <y, c - c_i> to the loss (same gradient) and sets
  mem_mat[i] = (c_i - c) - (y - x_t) / (K eta_l), i.e. the update above with Delta = x_t - y.

  Returns:
    (Delta = x_t - y_K, c_i+).
  """
  x0, cc, ci = _as64(x_t), _as64(c), _as64(c_i)
  y = [a.copy() for a in x0]
  for k in range(1, num_steps + 1):
    g = _as64(grad_fn(y, k))
    g = [gj - cij + cj for gj, cij, cj in zip(g, ci, cc, strict=True)]
    y = _axpy(-lr, g, y)
  delta = [a - b for a, b in zip(x0, y, strict=True)]
  c_new = [cij - cj + dj / (num_steps * lr) for cij, cj, dj in zip(ci, cc, delta, strict=True)]
  return delta, c_new


# ---------------------------------------------------------------------------------------------
# Several rounds.
# ---------------------------------------------------------------------------------------------


def run_fedexp(
  x0: Sequence[np.ndarray],
  client_updates: Sequence[ClientUpdate],
  num_rounds: int,
  eps: float | Callable[[int], float],
  participants: Participants | None = None,
  weights: Sequence[float] | None = None,
  eps_times_clients: bool = False,
  extrapolate: bool = True,
) -> dict[str, Any]:
  """T rounds of FedExP (or FedAvg with eta_g = 1 when `extrapolate` is False).

  Args:
    x0: initial global model w^(0).
    client_updates: one function per client, (x_t, t) -> Delta_i = x_t - x_i. Local SGD, FedProx
      or any other local rule (for SCAFFOLD, whose clients keep state, use `run_scaffold_exp`).
    num_rounds: T.
    eps: the eps of every round, or t -> eps^(t) (e.g. `authors_decay(t, 1e-3, power=2)`).
    participants: t -> the client ids of round t (None: every client every round).
    weights: one weight per client id (e.g. n_i), renormalised over each round's participants.
    eps_times_clients: the authors' code's eps placement (see `fedexp_step_size`).
    extrapolate: False gives FedAvg (eta_g = 1, evaluated at the iterate itself).

  Returns:
    {'x': [w^(0), ..., w^(T)], 'x_eval': [model evaluated after round 1, ..., T],
     'eta_g': [eta_g of rounds 0..T-1]}.
  """
  x = _as64(x0)
  xs, evals, etas = [x], [], []
  for t in range(num_rounds):
    ids = list(range(len(client_updates))) if participants is None else list(participants(t))
    deltas = [_as64(client_updates[i](x, t)) for i in ids]
    w = None if weights is None else [weights[i] for i in ids]
    if extrapolate:
      e = eps(t) if callable(eps) else eps
      out = fedexp_round(x, deltas, e, w, eps_times_clients, first_round=t == 0)
      x_next, x_eval, eta = out['x'], out['x_eval'], out['eta_g']
    else:
      delta_bar = _weighted_mean(deltas, _normalised(w, len(ids)))
      x_next = _axpy(-1.0, delta_bar, x)
      x_eval, eta = x_next, 1.0
    xs.append(x_next)
    evals.append(x_eval)
    etas.append(eta)
    x = x_next
  return {'x': xs, 'x_eval': evals, 'eta_g': etas}


def run_scaffold_exp(
  x0: Sequence[np.ndarray],
  grad_fns: Sequence[GradFn],
  num_rounds: int,
  num_steps: int,
  lr: float,
  eps: float | Callable[[int], float],
  participants: Participants | None = None,
  weights: Sequence[float] | None = None,
  eps_times_clients: bool = False,
  extrapolate: bool = True,
) -> dict[str, Any]:
  """SCAFFOLD clients with the FedExP server step ('scaffold(exp)'; SCAFFOLD if not extrapolate).

  As main.py lines 336-338: c = sum over *all* N clients of p_i c_i (p_i = n_i / n, uniform
  without `weights`), recomputed at the start of every round from the stored c_i (all zero
  initially); the participants' c_i are replaced by c_i+ and the server step is FedExP's on
  their Delta_i. For uniform p this is SCAFFOLD's c <- c + (|S| / N) mean_i (c_i+ - c_i).
  """
  n = len(grad_fns)
  p = _normalised(weights, n)
  x = _as64(x0)
  c_store = [[np.zeros_like(a) for a in x] for _ in range(n)]
  xs, evals, etas = [x], [], []
  for t in range(num_rounds):
    ids = list(range(n)) if participants is None else list(participants(t))
    c = _weighted_mean(c_store, p)
    deltas, new_c = [], {}
    for i in ids:
      d, ci = scaffold_delta(x, grad_fns[i], num_steps, lr, c, c_store[i])
      deltas.append(d)
      new_c[i] = ci
    for i, ci in new_c.items():
      c_store[i] = ci
    w = None if weights is None else [weights[i] for i in ids]
    if extrapolate:
      e = eps(t) if callable(eps) else eps
      out = fedexp_round(x, deltas, e, w, eps_times_clients, first_round=t == 0)
      x_next, x_eval, eta = out['x'], out['x_eval'], out['eta_g']
    else:
      x_next = _axpy(-1.0, _weighted_mean(deltas, _normalised(w, len(ids))), x)
      x_eval, eta = x_next, 1.0
    xs.append(x_next)
    evals.append(x_eval)
    etas.append(eta)
    x = x_next
  return {'x': xs, 'x_eval': evals, 'eta_g': etas}


def fedavgm_exp_round(
  x_t: Sequence[np.ndarray],
  deltas: Sequence[Sequence[np.ndarray]],
  state: dict[str, Any] | None,
  eps: float,
  weights: Sequence[float] | None = None,
  beta: float = 0.9,
  running_decay: float = 0.45,
  apply_momentum: bool = False,
  eps_times_clients: bool = True,
) -> dict[str, Any]:
  """The authors' code's 'fedavgm(exp)' server round (main.py lines 366-416), as executed.

    A_t   = mean_i ||Delta_i||^2 (weighted as in `fedexp_step_size`)
    R_t   = A_t + 0.45 R_{t-1},  R_{-1} = 0            (line 366: 0.9 * 0.5 * running)
    v_t   = Delta_bar_t + beta v_{t-1}                   (only if apply_momentum, see below)
    eta_g = 0.5 R_t / (||u_t||^2 + M eps),  u_t = v_t if apply_momentum else Delta_bar_t
    x     = x - eta_g u_t                                (no max with 1, line 409)

  apply_momentum=False is what the published code does: line 370 tests 'fedavgm(ep)', so the
  momentum buffer is never used by 'fedavgm(exp)'. apply_momentum=True is the evident intent.
  The paper's own statement of this combination could not be checked against its text.
  `state` is None on the first round, then the returned 'state'.
  """
  state = state or {'running': 0.0, 'v': None}
  x = _as64(x_t)
  m = len(deltas)
  _, delta_bar, mean_sq = fedexp_step_size(deltas, 0.0, weights, False, False)
  running = mean_sq + running_decay * state['running']
  v = state['v']
  if apply_momentum:
    u = delta_bar if v is None else _axpy(beta, v, delta_bar)
    v = u
  else:
    u = delta_bar
  eps_eff = eps * m if eps_times_clients else eps
  eta = 0.5 * running / (sq_norm(u) + eps_eff)
  return {'x': _axpy(-eta, u, x), 'eta_g': eta, 'state': {'running': running, 'v': v}}


def fedavgm_round(
  x_t: Sequence[np.ndarray],
  deltas: Sequence[Sequence[np.ndarray]],
  v: Sequence[np.ndarray] | None,
  weights: Sequence[float] | None = None,
  beta: float = 0.9,
  eta_g: float = 1.0,
) -> tuple[Arrays, Arrays]:
  """The code's plain 'fedavgm' (lines 370-374): v = Delta_bar + beta v; x = x - eta_g v."""
  delta_bar = _weighted_mean([_as64(d) for d in deltas], _normalised(weights, len(deltas)))
  v_new = delta_bar if v is None else _axpy(beta, _as64(v), delta_bar)
  return _axpy(-eta_g, v_new, _as64(x_t)), v_new


# ---------------------------------------------------------------------------------------------
# A transcription of the authors' server block, to check the options above against it.
# ---------------------------------------------------------------------------------------------


def authors_code_round(
  w_init: np.ndarray,
  client_grads: Sequence[np.ndarray],
  p: Sequence[float],
  epsilon: float,
  num_participating: int,
) -> tuple[np.ndarray, float]:
  """main.py lines 343-424 for alg 'fedexp', on flat vectors; client_grads are x_i - x_t."""
  grad_avg = np.zeros_like(w_init)
  grad_norm_sum = 0.0
  p_sum = 0.0
  for g, pi in zip(client_grads, p, strict=True):
    grad_norm_sum += pi * np.linalg.norm(g) ** 2
    grad_avg = grad_avg + pi * g
    p_sum += pi
  grad_avg = grad_avg / p_sum
  grad_norm_avg = grad_norm_sum / p_sum
  grad_avg_norm = np.linalg.norm(grad_avg) ** 2
  eta_g = 0.5 * grad_norm_avg / (grad_avg_norm + num_participating * epsilon)
  eta_g = max(1, eta_g)
  return w_init + eta_g * grad_avg, float(eta_g)


def _least_squares_clients(seed: int, n: int, d: int, s: int):
  """Overparameterised consistent least squares (the paper's linear-regression setting)."""
  rng = np.random.default_rng(seed)
  w_star = rng.normal(size=d)
  mats, rhs = [], []
  for _ in range(n):
    a = rng.normal(size=(s, d))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    mats.append(a)
    rhs.append(a @ w_star)

  def grad_fn_for(i):
    return lambda x, k: [mats[i].T @ (mats[i] @ x[0] - rhs[i])]

  def loss(x):
    return float(sum(np.sum((a @ x[0] - b) ** 2) for a, b in zip(mats, rhs, strict=True)) / n)

  return [grad_fn_for(i) for i in range(n)], loss


def self_check() -> dict[str, float]:
  """Small checks of the formulas; each is asserted. Returns the measured quantities."""
  out = {}
  rng = np.random.default_rng(0)
  x = [rng.normal(size=(3, 2)), rng.normal(size=(4,))]
  # One client: sum ||D||^2 / (2 (||D||^2 + eps)) < 1/2, so eta_g = max(1, .) = 1.
  d1 = [[rng.normal(size=(3, 2)), rng.normal(size=(4,))]]
  r = fedexp_round(x, d1, eps=1e-3, first_round=True)
  raw = fedexp_step_size(d1, 1e-3, clip_at_one=False)[0]
  assert r['eta_g'] == 1.0 and 0.49 < raw < 0.5, (r['eta_g'], raw)
  assert np.allclose(r['x'][0], x[0] - d1[0][0]) and np.allclose(r['x_eval'][1], r['x'][1])
  out['one_client_unclipped_eta'] = raw
  # M orthogonal updates of equal norm: ||D_bar||^2 = r^2 / M, so eta_g = M / 2 (eps = 0).
  m = 6
  orth = [[np.eye(m)[i] * 2.0] for i in range(m)]
  eta = fedexp_step_size(orth, 0.0)[0]
  assert abs(eta - m / 2) < 1e-12, eta
  out['orthogonal_eta_minus_M_over_2'] = eta - m / 2
  # Identical updates: eta_g = max(1, 1/2 * ||D||^2/(||D||^2 + eps)) = 1.
  assert fedexp_step_size([d1[0]] * 4, 0.0)[0] == 1.0
  # Paper form with weights and eps' = M eps equals a line-by-line transcription of main.py.
  dim, k = 7, 5
  w0 = rng.normal(size=dim)
  client_grads = [rng.normal(size=dim) * (i + 1) for i in range(k)]  # x_i - x_t
  p = rng.uniform(0.1, 1.0, size=k)
  w1_code, eta_code = authors_code_round(w0, client_grads, p, 1e-3, k)
  ref = fedexp_round([w0], [[-g] for g in client_grads], 1e-3, p, eps_times_clients=True)
  out['authors_code_vs_reference'] = float(np.max(np.abs(ref['x'][0] - w1_code)))
  assert abs(ref['eta_g'] - eta_code) < 1e-12 and out['authors_code_vs_reference'] < 1e-12
  # Uniform weights: the code's epsilon is the paper's eps / M.
  ref_u = fedexp_round([w0], [[-g] for g in client_grads], k * 1e-3)
  _, eta_u = authors_code_round(w0, client_grads, np.ones(k), 1e-3, k)
  assert abs(ref_u['eta_g'] - eta_u) < 1e-12
  # Two rounds: x_eval is x_1, then (x_1 + x_2) / 2.
  grad_fns, loss = _least_squares_clients(1, n=10, d=40, s=3)
  clients = [(lambda x_t, t, g=g: local_sgd_delta(x_t, g, num_steps=20, lr=0.1)) for g in grad_fns]
  zero = [np.zeros(40)]
  run = run_fedexp(zero, clients, 2, eps=0.0)
  assert np.allclose(run['x_eval'][0][0], run['x'][1][0])
  assert np.allclose(run['x_eval'][1][0], (run['x'][1][0] + run['x'][2][0]) / 2)
  # Overparameterised least squares (Section 3's regime): FedExP beats FedAvg after 50 rounds.
  fedexp = run_fedexp(zero, clients, 50, eps=0.0)
  fedavg = run_fedexp(zero, clients, 50, eps=0.0, extrapolate=False)
  out['fedexp_loss_50'] = loss(fedexp['x_eval'][-1])
  out['fedavg_loss_50'] = loss(fedavg['x'][-1])
  out['fedexp_mean_eta_g'] = float(np.mean(fedexp['eta_g']))
  assert out['fedexp_loss_50'] < out['fedavg_loss_50'] and min(fedexp['eta_g']) >= 1.0
  # SCAFFOLD without extrapolation and with eta_g = 1 reduces to FedAvg when K = 1 and c starts 0
  # in round 0; with extrapolation eta_g >= 1 every round.
  sc = run_scaffold_exp(zero, grad_fns, 3, num_steps=1, lr=0.1, eps=0.0, extrapolate=False)
  fa = run_fedexp(
    zero,
    [(lambda x_t, t, g=g: local_sgd_delta(x_t, g, 1, 0.1)) for g in grad_fns],
    3,
    eps=0.0,
    extrapolate=False,
  )
  out['scaffold_k1_vs_fedavg'] = float(np.max(np.abs(sc['x'][-1][0] - fa['x'][-1][0])))
  assert out['scaffold_k1_vs_fedavg'] < 1e-12
  sce = run_scaffold_exp(zero, grad_fns, 5, num_steps=20, lr=0.1, eps=0.0)
  assert min(sce['eta_g']) >= 1.0
  # FedProx with mu = 0 is local SGD.
  g0 = grad_fns[0]
  assert np.allclose(fedprox_delta(zero, g0, 5, 0.1, 0.0)[0], local_sgd_delta(zero, g0, 5, 0.1)[0])
  # The code's fedavgm(exp), first round, one client: R_0 = ||D||^2, eta_g = ||D||^2 / (2 (..)).
  st = fedavgm_exp_round(x, d1, None, eps=0.0)
  assert abs(st['eta_g'] - 0.5) < 1e-12 and st['state']['v'] is None
  out['authors_decay_eps_round0'] = authors_decay(0, 1e-3, power=2)
  assert abs(out['authors_decay_eps_round0'] - 1e-3 * 0.998**2) < 1e-18
  return out


if __name__ == '__main__':
  for key, value in self_check().items():
    print(f'{key}: {value:.6g}')
