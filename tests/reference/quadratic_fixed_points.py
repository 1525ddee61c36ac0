"""Closed forms for heterogeneous least squares: the global optimum and FedAvg's fixed point.

Client i holds X_i (n_i x d, full column rank) and y_i (n_i), and the loss is Keras's
MeanSquaredError of a bias-free linear model (the kernel of Dense(1, use_bias=False)):

  f_i(w) = (1/n_i) ||X_i w - y_i||^2          (mean over examples of the squared error; no 1/2)

Its gradient and Hessian (derivation: d/dw ||r||^2 = 2 X^T r with r = X w - y):

  grad f_i(w) = (2/n_i) X_i^T (X_i w - y_i) = A_i (w - w_i*),   A_i = (2/n_i) X_i^T X_i,

where w_i* = (X_i^T X_i)^{-1} X_i^T y_i is the client's least-squares solution (the normal
equations X_i^T X_i w_i* = X_i^T y_i turn (2/n_i) X_i^T (X_i w - y_i) into A_i (w - w_i*)).

The federated objective is the example-weighted one, F(w) = sum_i p_i f_i(w), p_i = n_i / n,
n = sum_i n_i. Its minimiser (grad F = 0) is

  w_opt = (sum_i p_i A_i)^{-1} sum_i p_i A_i w_i*.

FedAvg with K full-batch local GD steps (learning rate eta_l) from w is linear: the local
iteration w_{k+1} = w_k - eta_l A_i (w_k - w_i*) gives w_{k+1} - w_i* = (I - eta_l A_i)(w_k - w_i*),
so after K steps

  w_K - w = -M_i (w - w_i*),   M_i = I - (I - eta_l A_i)^K.

With full participation and example-weighted averaging the server moves by
eta sum_i p_i (w_K^i - w) = -eta sum_i p_i M_i (w - w_i*), which vanishes (for any server
learning rate eta > 0) exactly at

  w_fedavg = (sum_i p_i M_i)^{-1} sum_i p_i M_i w_i*.

K = 1 gives M_i = eta_l A_i and hence w_fedavg = w_opt; for K > 1 and heterogeneous A_i,
w_i*, the M_i are not proportional to the A_i and w_fedavg != w_opt (client drift). SCAFFOLD
removes the drift: its fixed point is w_opt (tests/reference/scaffold_numpy.py).

Shapes: every w here is a (d, 1) array (a Dense(1, use_bias=False) kernel); closed forms are
computed in float64 from the exact values of the (float32) inputs.
"""

from collections.abc import Sequence

import numpy as np

Client = tuple[np.ndarray, np.ndarray]


def _xy64(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(n, d) features and (n, 1) targets in float64; y may be (n,) or (n, 1)."""
  x = np.asarray(x, dtype=np.float64)
  y = np.asarray(y, dtype=np.float64).reshape(-1, 1)
  if x.ndim != 2 or x.shape[0] != y.shape[0]:
    raise ValueError(f'x must be (n, d) and y (n,) or (n, 1); got {x.shape}, {y.shape}')
  return x, y


def least_squares_loss_and_grads(
  params: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[float, list[np.ndarray]]:
  """Keras MSE of a bias-free linear model, in scaffold_numpy's `loss_and_grads` format.

  loss = (1/m) ||x w - y||^2 over the m rows of the batch, grad = (2/m) x^T (x w - y).

  Args:
    params: [w], w of shape (d, 1) (a Dense(1, use_bias=False) kernel).
    x: (m, d) features.
    y: (m,) or (m, 1) targets (flattened to a column, as Keras MSE broadcasts them).

  Returns:
    (loss, [dloss/dw]) in float64, the gradient of shape (d, 1).
  """
  (w,) = params
  x, y = _xy64(x, y)
  r = x @ np.asarray(w, dtype=np.float64) - y
  m = x.shape[0]
  return float(np.mean(r * r)), [2.0 / m * (x.T @ r)]


def curvature(x: np.ndarray) -> np.ndarray:
  """A_i = (2/n_i) X_i^T X_i, the (constant) Hessian of f_i; (d, d)."""
  x = np.asarray(x, dtype=np.float64)
  return 2.0 / x.shape[0] * (x.T @ x)


def client_optimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """w_i* = (X_i^T X_i)^{-1} X_i^T y_i (X_i full column rank); (d, 1)."""
  x, y = _xy64(x, y)
  return np.linalg.solve(x.T @ x, x.T @ y)


def _weights(clients: Sequence[Client]) -> np.ndarray:
  n = np.array([len(np.asarray(x)) for x, _ in clients], dtype=np.float64)
  return n / n.sum()


def _weighted_fixed_point(mats: Sequence[np.ndarray], stars, p) -> np.ndarray:
  """Solves sum_i p_i M_i (w - w_i*) = 0 for w."""
  lhs = sum(pi * m for pi, m in zip(p, mats))
  rhs = sum(pi * m @ s for pi, m, s in zip(p, mats, stars))
  return np.linalg.solve(lhs, rhs)


def global_optimum(clients: Sequence[Client]) -> np.ndarray:
  """Minimiser of sum_i p_i f_i, p_i = n_i / n: (sum p_i A_i)^{-1} sum p_i A_i w_i*; (d, 1)."""
  mats = [curvature(x) for x, _ in clients]
  stars = [client_optimum(x, y) for x, y in clients]
  return _weighted_fixed_point(mats, stars, _weights(clients))


def local_gd_map(x: np.ndarray, client_lr: float, local_steps: int) -> np.ndarray:
  """M_i = I - (I - eta_l A_i)^K: K full-batch GD steps move w by -M_i (w - w_i*); (d, d)."""
  a = curvature(x)
  return np.eye(a.shape[0]) - np.linalg.matrix_power(
    np.eye(a.shape[0]) - client_lr * a, local_steps
  )


def fedavg_fixed_point(clients: Sequence[Client], client_lr: float, local_steps: int) -> np.ndarray:
  """Fixed point of FedAvg with K full-batch local GD steps and full participation; (d, 1).

  w_fedavg = (sum p_i M_i)^{-1} sum p_i M_i w_i*, M_i = I - (I - eta_l A_i)^K, for any server
  learning rate > 0 (plain server SGD and no client momentum; see the module docstring).
  """
  mats = [local_gd_map(x, client_lr, local_steps) for x, _ in clients]
  stars = [client_optimum(x, y) for x, y in clients]
  return _weighted_fixed_point(mats, stars, _weights(clients))


def heterogeneous_clients(
  num_clients: int = 4, d: int = 3, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
  """A small least-squares problem whose clients disagree in both curvature and optimum.

  Client i has n_i = 6 + 5 i examples (distinct, so example weighting matters), a random
  orthonormal basis Q_i, and A_i = (2/n_i) X_i^T X_i close to Q_i diag(lam) Q_i^T with
  lam = (8, 1, 0.25, ...) (strong curvature along a client-specific direction, weak along
  the others), and an optimum w_i* near a client-specific N(0, 3^2 I) draw (plus 0.1 noise
  in y). With eta_l = 0.05, K = 20 the local GD is stable (eta_l lam_max(A_i) < 1) and the
  FedAvg fixed point is far from the global optimum (`describe` reports both).

  Returns:
    [(X_i, y_i)], X_i of shape (n_i, d) and y_i of shape (n_i,), both float32 (the closed
    forms above use the exact float64 values of these float32 numbers).
  """
  rng = np.random.default_rng(seed)
  lam = np.array([8.0, 1.0] + [0.25] * max(d - 2, 0))[:d]
  clients = []
  for i in range(num_clients):
    n = 6 + 5 * i
    if n < d:
      raise ValueError(f'need n_i >= d, got n_{i} = {n} < d = {d}')
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    # Z with (1/n) Z^T Z = I exactly (before rounding), so A_i = Q diag(lam) Q^T.
    z, _ = np.linalg.qr(rng.normal(size=(n, d)))
    z *= np.sqrt(n)
    x = z @ np.diag(np.sqrt(lam / 2.0)) @ q.T
    w_star = rng.normal(scale=3.0, size=(d, 1))
    y = (x @ w_star).ravel() + rng.normal(scale=0.1, size=n)
    clients.append((x.astype(np.float32), y.astype(np.float32)))
  return clients


def describe(clients: Sequence[Client], client_lr: float, local_steps: int) -> dict[str, float]:
  """Numbers that make a problem a useful drift test: stability and the FedAvg/optimum gap."""
  w_opt = global_optimum(clients)
  w_fedavg = fedavg_fixed_point(clients, client_lr, local_steps)
  lam_max = max(float(np.linalg.eigvalsh(curvature(x)).max()) for x, _ in clients)
  lam_min = min(float(np.linalg.eigvalsh(curvature(x)).min()) for x, _ in clients)
  return {
    'lam_max': lam_max,
    'lam_min': lam_min,
    'client_lr_times_lam_max': client_lr * lam_max,
    'norm_w_opt': float(np.linalg.norm(w_opt)),
    'fedavg_gap': float(np.linalg.norm(w_fedavg - w_opt)),
    'relative_gap': float(np.linalg.norm(w_fedavg - w_opt) / np.linalg.norm(w_opt)),
  }


def self_check(client_lr: float = 0.05, local_steps: int = 20) -> dict[str, float]:
  """Asserts the default problem's properties (stable local GD, relative gap > 0.1)."""
  clients = heterogeneous_clients()
  info = describe(clients, client_lr, local_steps)
  assert info['client_lr_times_lam_max'] < 1.0, info
  assert info['relative_gap'] > 0.1, info
  # K = 1: FedAvg's fixed point is the global optimum (M_i = eta_l A_i).
  gap_k1 = np.linalg.norm(fedavg_fixed_point(clients, client_lr, 1) - global_optimum(clients))
  assert gap_k1 < 1e-9 * info['norm_w_opt'], gap_k1
  return info


if __name__ == '__main__':
  for key, value in self_check().items():
    print(f'{key}: {value:.6g}')
