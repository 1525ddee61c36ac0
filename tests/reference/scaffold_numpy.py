"""Float64 NumPy reference of SCAFFOLD, Option II with batched data (Reddi et al. 2021, Alg. 6).

Reddi et al. 2021, Appendix B.2 / Algorithm 6, adapting Karimireddy et al. 2020 (Option II) to
the batched setting of Algorithm 4/5. Written from the paper's equations, independently of
`tff_adaptive`. Server state: model x and server control variate c (same shapes, c = 0
initially); client i keeps a control variate c_i, set to the *current* server c the first time
client i is sampled. One round t over the sampled set S:

  client i in S, from y = x_t (E epochs of minibatches B, K = number of steps taken):
    g       = grad of the minibatch mean loss at y
    g'      = g - c_i + c                                   (corrected gradient)
    u       = mu u + g';  y = y - eta_l u                    (TF/Keras heavy ball; mu = 0: SGD)
    c_i+    = c_i - c + (x_t - y) / (K eta_l)                (Option II)
    Delta y_i = y - x_t,  Delta c_i = c_i+ - c_i,  c_i = c_i+,  weight n_i (example count)
  server:
    Delta x = sum_i n_i Delta y_i / sum_i n_i,  Delta c = sum_i n_i Delta c_i / sum_i n_i
    x_{t+1} = x_t + eta Delta x                              (server SGD, learning rate eta)
    c       = c + (|S| / N) Delta c                          (N = total number of clients)

Sign convention: Delta y_i and Delta x are model *differences* (new - old), so the server step
is x + eta Delta x; the FedOpt pseudo-gradient of tests/reference/fedopt_numpy.py is -Delta x.

Remarks (each checked in tests/algorithms/test_scaffold_reference.py):
* c_i := c on first sampling makes the correction c - c_i zero for a fresh client, so a run in
  which no client is sampled twice is FedAvg exactly (the c updates never reach x).
* With full participation, p_i = n_i / n fixed and c = sum_i p_i c_i initially (true for
  c = c_i = 0), c + Delta c = sum_i p_i c_i+ keeps that invariant; then the mean correction
  sum_i p_i (c - c_i) is 0, so with K = 1 step SCAFFOLD's Delta x equals FedAvg's every round.
* With full participation on a quadratic, a fixed point has c_i+ = c_i, i.e. the local
  trajectory returns to x_t, so c = 0 and A_i (x - w_i*) = c_i for every i; weighting by p_i,
  grad F(x) = sum_i p_i c_i = c = 0: the fixed point is the global optimum (FedAvg's is not;
  tests/reference/quadratic_fixed_points.py).

Data layout: a sampled client is (client_id, x, y, perms); perms is a list with one index
permutation of range(n_i) per epoch, visited in minibatches of `batch_size` (the last one
smaller when batch_size does not divide n_i; batch_size None = the whole client per step). The
model is a list of arrays, and `loss_and_grads(params, x_batch, y_batch) -> (loss, grads)`
returns the minibatch *mean* loss and its gradients (a list like params). The default is
multinomial logistic regression, params = [W (d, C), b (C,)], from local_sgd_numpy.
"""

from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.reference import local_sgd_numpy

Arrays = list[np.ndarray]
LossAndGrads = Callable[[Sequence[np.ndarray], np.ndarray, np.ndarray], tuple[float, Arrays]]
SampledClient = tuple[Hashable, np.ndarray, np.ndarray, Sequence[Sequence[int]]]


def softmax_regression_loss_and_grads(
  params: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[float, Arrays]:
  """Mean cross-entropy of logits x W + b, params = [W (d, C), b (C,)]; y int labels (m,)."""
  w, b = params
  loss, gw, gb = local_sgd_numpy.cross_entropy_and_grads(w, b, x, y)
  return float(loss), [gw, gb]


def _as64(arrays: Sequence[np.ndarray]) -> Arrays:
  return [np.array(a, dtype=np.float64) for a in arrays]


def identity_perms(n: int, epochs: int) -> list[np.ndarray]:
  """`epochs` copies of arange(n): E epochs in the data's own order (full batch: K = E)."""
  return [np.arange(n) for _ in range(epochs)]


def client_update(
  x_t: Sequence[np.ndarray],
  x: np.ndarray,
  y: np.ndarray,
  perms: Sequence[Sequence[int]],
  batch_size: int | None,
  client_lr: float,
  momentum: float = 0.0,
  correction: Sequence[np.ndarray] | None = None,
  loss_and_grads: LossAndGrads = softmax_regression_loss_and_grads,
) -> tuple[Arrays, int, float, int]:
  """Local SGD(M) with a constant gradient correction; the client half of Algorithm 6.

  y = x_t; per minibatch: g' = g + correction, u = mu u + g', y = y - eta_l u.

  Args:
    x_t: server model at the start of the round.
    x: the client's features (n_i, ...); y: its labels/targets (n_i, ...).
    perms: one permutation of range(n_i) per epoch.
    batch_size: minibatch size (None: the whole permutation is one batch).
    client_lr: eta_l.
    momentum: mu of the heavy ball (0: plain SGD); u starts at 0 every round.
    correction: c - c_i for SCAFFOLD (added to every minibatch gradient); None for FedAvg.
    loss_and_grads: (params, x_batch, y_batch) -> (mean loss, grads).

  Returns:
    (final y, K = number of steps, sum over steps of |batch| * loss, sum of |batch|).
  """
  w = _as64(x_t)
  u = [np.zeros_like(a) for a in w]
  corr = None if correction is None else _as64(correction)
  steps, loss_sum, loss_weight = 0, 0.0, 0
  for perm in perms:
    perm = np.asarray(perm)
    size = len(perm) if batch_size is None else batch_size
    for start in range(0, len(perm), size):
      idx = perm[start : start + size]
      loss, grads = loss_and_grads(w, x[idx], y[idx])
      grads = _as64(grads)
      if corr is not None:
        # g' = g - c_i + c, written g + (c - c_i) so that a fresh client (c_i = c) adds an
        # exact 0 and its trajectory is bitwise FedAvg's.
        grads = [g + k for g, k in zip(grads, corr)]
      u = [momentum * ui + g for ui, g in zip(u, grads)]
      w = [wi - client_lr * ui for wi, ui in zip(w, u)]
      steps += 1
      loss_sum += len(idx) * float(loss)
      loss_weight += len(idx)
  return w, steps, loss_sum, loss_weight


def _weighted_mean(updates: Sequence[Arrays], weights: Sequence[float]) -> Arrays:
  """sum_i n_i u_i / sum_i n_i, per array."""
  total = float(sum(weights))
  return [sum(n * u[j] for u, n in zip(updates, weights)) / total for j in range(len(updates[0]))]


def scaffold_round(
  x: Sequence[np.ndarray],
  c: Sequence[np.ndarray],
  client_states: dict[Hashable, Arrays],
  sampled: Sequence[SampledClient],
  num_clients_total: int,
  client_lr: float,
  server_lr: float,
  batch_size: int | None,
  momentum: float = 0.0,
  loss_and_grads: LossAndGrads = softmax_regression_loss_and_grads,
  use_control_variates: bool = True,
) -> tuple[Arrays, Arrays, dict[Hashable, Arrays], dict[str, Any]]:
  """One round of SCAFFOLD Option II (batched), Algorithm 6 of Reddi et al. 2021.

  Args:
    x: server model x_t (list of arrays).
    c: server control variate (same shapes; zeros before the first round).
    client_states: client_id -> c_i for the clients sampled before; not modified.
    sampled: the round's clients S, each (client_id, x_i, y_i, perms_i); ids must be distinct.
    num_clients_total: N, the population size (the |S|/N of the c update).
    client_lr: eta_l.
    server_lr: eta (server SGD: x_{t+1} = x_t + eta Delta x).
    batch_size: client minibatch size (None: full batch, one step per epoch).
    momentum: client heavy-ball momentum mu (TF/Keras form), on the corrected gradient.
    loss_and_grads: (params, x_batch, y_batch) -> (mean loss, grads).
    use_control_variates: False drops the correction and leaves c and the states alone, i.e.
      this is FedAvg (`fedavg_round`).

  Returns:
    (x_{t+1}, c_{t+1}, client states with the sampled clients' c_i+, diagnostics), arrays in
    float64. diagnostics: 'delta_x', 'delta_c' (the weighted means), 'mean_loss' (minibatch
    losses weighted by minibatch size, over all clients and steps), 'loss_sum',
    'loss_weight', 'num_examples' (sum_i n_i), and 'clients': client_id -> dict with
    'delta_y', 'delta_c', 'c_i' (before), 'c_i_plus', 'weight' (n_i), 'num_steps' (K),
    'first_sampled' (bool).
  """
  x_t, c = _as64(x), _as64(c)
  ids = [cid for cid, *_ in sampled]
  if len(set(ids)) != len(ids):
    raise ValueError(f'a client is sampled twice in one round: {ids}')
  if not sampled:
    raise ValueError('no clients sampled')
  new_states = dict(client_states)
  deltas_y, deltas_c, weights, per_client = [], [], [], {}
  loss_sum, loss_weight = 0.0, 0
  for cid, xi, yi, perms in sampled:
    n_i = len(xi)
    if n_i == 0:
      raise ValueError(f'client {cid!r} has no examples')
    first = cid not in client_states
    # "c_i := c the first time client i is sampled": the server c of *this* round.
    c_i = [a.copy() for a in c] if first else _as64(client_states[cid])
    correction = [cj - cij for cj, cij in zip(c, c_i)] if use_control_variates else None
    y_final, k, ls, lw = client_update(
      x_t, xi, yi, perms, batch_size, client_lr, momentum, correction, loss_and_grads
    )
    if k == 0:
      raise ValueError(f'client {cid!r} took no local steps (empty perms)')
    loss_sum, loss_weight = loss_sum + ls, loss_weight + lw
    delta_y = [yf - xt for yf, xt in zip(y_final, x_t)]
    # Option II: c_i+ = c_i - c + (x_t - y) / (K eta_l).
    c_plus = [cij - cj - dy / (k * client_lr) for cij, cj, dy in zip(c_i, c, delta_y)]
    delta_c = [cp - cij for cp, cij in zip(c_plus, c_i)]
    deltas_y.append(delta_y)
    deltas_c.append(delta_c)
    weights.append(n_i)
    if use_control_variates:
      new_states[cid] = c_plus
    per_client[cid] = {
      'delta_y': delta_y,
      'delta_c': delta_c,
      'c_i': c_i,
      'c_i_plus': c_plus,
      'weight': n_i,
      'num_steps': k,
      'first_sampled': first,
    }
  delta_x = _weighted_mean(deltas_y, weights)
  delta_c_mean = _weighted_mean(deltas_c, weights)
  new_x = [xt + server_lr * dx for xt, dx in zip(x_t, delta_x)]
  if use_control_variates:
    frac = len(sampled) / num_clients_total
    new_c = [cj + frac * dc for cj, dc in zip(c, delta_c_mean)]
  else:
    new_c = c
  diagnostics = {
    'delta_x': delta_x,
    'delta_c': delta_c_mean,
    'mean_loss': loss_sum / loss_weight,
    'loss_sum': loss_sum,
    'loss_weight': loss_weight,
    'num_examples': int(sum(weights)),
    'clients': per_client,
  }
  return new_x, new_c, new_states, diagnostics


def fedavg_round(
  x: Sequence[np.ndarray],
  sampled: Sequence[SampledClient],
  client_lr: float,
  server_lr: float,
  batch_size: int | None,
  momentum: float = 0.0,
  loss_and_grads: LossAndGrads = softmax_regression_loss_and_grads,
) -> tuple[Arrays, dict[str, Any]]:
  """FedAvg (Algorithm 5 with server SGD): local SGD(M), example-weighted mean, x + eta Delta x.

  The same round as `scaffold_round` without control variates (the c's stay untouched and
  play no part); returns (x_{t+1}, diagnostics) with scaffold_round's diagnostics.
  """
  x_t = _as64(x)
  zeros = [np.zeros_like(a) for a in x_t]
  new_x, _, _, diagnostics = scaffold_round(
    x_t,
    zeros,
    {},
    sampled,
    max(len(sampled), 1),
    client_lr,
    server_lr,
    batch_size,
    momentum,
    loss_and_grads,
    use_control_variates=False,
  )
  return new_x, diagnostics


def run_scaffold(
  x0: Sequence[np.ndarray],
  rounds: Sequence[Sequence[SampledClient]],
  num_clients_total: int,
  client_lr: float,
  server_lr: float,
  batch_size: int | None,
  momentum: float = 0.0,
  loss_and_grads: LossAndGrads = softmax_regression_loss_and_grads,
  use_control_variates: bool = True,
  c0: Sequence[np.ndarray] | None = None,
  client_states: dict[Hashable, Arrays] | None = None,
) -> tuple[list[Arrays], list[Arrays], dict[Hashable, Arrays], list[dict[str, Any]]]:
  """len(rounds) rounds of `scaffold_round` from x0 (c0 = 0 and no client states by default).

  Returns:
    ([x_1, ..., x_T], [c_1, ..., c_T], final client states, per-round diagnostics).
    use_control_variates=False gives FedAvg's iterates.
  """
  x = _as64(x0)
  c = [np.zeros_like(a) for a in x] if c0 is None else _as64(c0)
  states = {} if client_states is None else dict(client_states)
  xs, cs, diags = [], [], []
  for sampled in rounds:
    x, c, states, diag = scaffold_round(
      x,
      c,
      states,
      sampled,
      num_clients_total,
      client_lr,
      server_lr,
      batch_size,
      momentum,
      loss_and_grads,
      use_control_variates,
    )
    xs.append(x)
    cs.append(c)
    diags.append(diag)
  return xs, cs, states, diags


def run_fedavg(
  x0: Sequence[np.ndarray],
  rounds: Sequence[Sequence[SampledClient]],
  client_lr: float,
  server_lr: float,
  batch_size: int | None,
  momentum: float = 0.0,
  loss_and_grads: LossAndGrads = softmax_regression_loss_and_grads,
) -> tuple[list[Arrays], list[dict[str, Any]]]:
  """len(rounds) rounds of `fedavg_round`: ([x_1, ..., x_T], per-round diagnostics)."""
  x = _as64(x0)
  xs, diags = [], []
  for sampled in rounds:
    x, diag = fedavg_round(x, sampled, client_lr, server_lr, batch_size, momentum, loss_and_grads)
    xs.append(x)
    diags.append(diag)
  return xs, diags
