"""Float64 NumPy reference of FedPA's client delta (Al-Shedivat et al., ICLR 2021).

Written from the paper's equations (Sec. 3-4, Algorithms 3-4, Appendices A and C), independently
of `tff_adaptive`. Notation follows Appendix C: x0 is the broadcast server model, x_1..x_l are
the client's posterior samples, xbar_t = (1/t) sum_{j<=t} x_j and

  S_t = 1/(t-1) sum_{j<=t} (x_j - xbar_t)(x_j - xbar_t)^T     (S_1 = 0),

the sample covariance (the 1/(t-1) follows from Eq. 14, (t-1) S_t = sum_j ...).

Shrinkage estimator (Theorem 3, Eqs. 10, 19), 'paper' form with rho in [0, inf):

  Sigma_l = rho_l I + (1 - rho_l) S_l,   rho_l = 1 / (1 + (l - 1) rho),

so rho_1 = 1 (Sigma_1 = I) and rho = 0 gives Sigma = I for every l. The 'convex' form uses a
fixed rho in (0, 1] as rho_l directly (Eq. 10 with rho_l arbitrary); it is the paper form with
rho = (1/rho_l - 1)/(l - 1) (`convex_to_paper_rho`). The client delta (Eq. 4, Algorithm 3) is

  Delta = Sigma_l^{-1} (x0 - xbar_l);   FedAvg's is x0 - x_K (Sigma = I, mean = final iterate).

Dynamic program (Appendix C). Since 1 - rho_t = rho_t (t-1) rho, Sigma_t = rho_t Sigmatil_t with

  Sigmatil_t = I + rho (t-1) S_t.

Eq. 13: xbar_t = xbar_{t-1} + u_t / t with u_t = x_t - xbar_{t-1}. Eq. 15 (re-derived):
(t-1) S_t = (t-2) S_{t-1} + ((t-1)/t) u_t u_t^T. Multiplying by rho:

  Sigmatil_t = Sigmatil_{t-1} + gamma_t u_t u_t^T,   gamma_t = rho (t-1) / t     (Eq. 18),

a rank-1 update, so Sherman-Morrison gives Sigmatil_t^{-1} from Sigmatil_{t-1}^{-1} (Eq. 20).
With Deltatil_t = Sigmatil_t^{-1} (x0 - xbar_t), v_{k,j} = Sigmatil_k^{-1} u_j, v = v_{t-1,t},
and x0 - xbar_t = (x0 - xbar_{t-1}) - u_t / t, symmetry (v^T (x0 - xbar_{t-1}) = u_t^T
Deltatil_{t-1}) gives Eq. 23:

  Deltatil_1 = x0 - x_1,
  Deltatil_t = Deltatil_{t-1}
               - [1 + gamma_t (t u_t^T Deltatil_{t-1} - u_t^T v) / (1 + gamma_t u_t^T v)] v / t
             ( = Deltatil_{t-1} - (1/t + gamma_t u_t^T Deltatil_{t-1}) / (1 + gamma_t u_t^T v) v ),
  Delta_t = Deltatil_t / rho_t                                                      (Eq. 24).

The matrix-vector product v_{t-1,t} comes from the second recurrence (Eqs. 25-28), again by
Sherman-Morrison on Sigmatil_k = Sigmatil_{k-1} + gamma_k u_k u_k^T (Sigmatil_1 = I):

  v_{1,t} = u_t,
  v_{k,t} = v_{k-1,t} - gamma_k (v_{k-1,k}^T u_t) / (1 + gamma_k v_{k-1,k}^T u_k) v_{k-1,k},
  v_{t-1,t} = u_t - sum_{k=2}^{t-1} gamma_k (v_{k-1,k}^T u_t) / (1 + gamma_k v_{k-1,k}^T u_k)
                                   v_{k-1,k}                                          (Eq. 28).

The state after t samples is (xbar_t, Deltatil_t, {v_{k-1,k}, gamma_k / (1 + gamma_k
v_{k-1,k}^T u_k)}_{k<=t}): O(t d) memory, O(t d) work for sample t, no d x d matrix.

Where the OCR'd text is garbled or inconsistent (resolved by re-deriving; the self-check below
confirms DP == direct solve):
* Eq. 18's t = 2 line reads Sigmatil_2 = Sigmatil_1 + rho (x2 - x1)(x2 - x1)^T, but
  S_2 = (x2 - x1)(x2 - x1)^T / 2, so the coefficient is gamma_2 = rho / 2 (the general line
  gamma_t = rho (t-1)/t and gamma_t = beta_t / t, beta_t = (t-1) rho from Eqs. 16-17 agree).
* Eq. 18's general line reads I + (t-1) rho S_{t-1}; it must be S_t (Eq. 19 uses S_t).
* Theorem 3 and Algorithm 3 print Delta = Sigma (theta - mu); the inverse was lost (Eq. 4).
* Eq. 15's fractions and Eq. 23's nesting are unreadable; both re-derived as above.

IASG (Algorithm 4, Mandt et al. 2017) on a linear-regression client. The paper counts B burn-in
steps and K steps per sample; here both are whole epochs (Appendix A.2: "averaging every K
intermediate iterates ... after skipping the first B iterates"): epochs 0..burnin_epochs-1 are
burn-in, every later epoch gives one sample, the mean of the iterates after each of its steps
(Algorithm 4, lines 7-8: step, then add theta). theta = [w (p), b] (bias last), prediction
features @ w + b, minibatch loss the Keras MeanSquaredError (mean, no 1/2), so with residual
r = X w + b - y over m rows: grad_w = (2/m) X^T r, grad_b = (2/m) sum(r). Client optimizer: SGD
with heavy-ball momentum as in TF/Keras and TFF (v = m v + g; theta -= lr v), v = 0 at the start
of the client's run and carried across all its epochs.

Least squares (Sec. 3, Fig. 1, Appendix A) for f_i(x) = 1/2 (x - mu_i)^T A_i (x - mu_i): see
`quadratic_global_optimum`, `fedavg_gd_fixed_point` and `fedpa_fixed_point`.
"""

from collections.abc import Sequence

import numpy as np


def _f64(a) -> np.ndarray:
  return np.asarray(a, dtype=np.float64)


def _samples(samples) -> np.ndarray:
  xs = _f64(samples)
  if xs.ndim != 2 or xs.shape[0] < 1:
    raise ValueError(f'samples must be [l, d] with l >= 1; got shape {xs.shape}')
  return xs


def sample_mean_cov(samples) -> tuple[np.ndarray, np.ndarray]:
  """(xbar_l [d], S_l [d, d]), S_l normalised by 1/(l - 1), S_1 = 0."""
  xs = _samples(samples)
  l, d = xs.shape
  mean = xs.mean(axis=0)
  if l == 1:
    return mean, np.zeros((d, d))
  c = xs - mean
  return mean, c.T @ c / (l - 1)


def paper_rho_l(rho: float, l: int) -> float:
  """rho_l = 1 / (1 + (l - 1) rho) (Theorem 3); rho_1 = 1."""
  if rho < 0:
    raise ValueError(f'paper rho must be >= 0; got {rho}')
  return 1.0 / (1.0 + (l - 1) * float(rho))


def convex_to_paper_rho(shrinkage: float, l: int) -> float:
  """The paper rho with rho_l = shrinkage: (1/shrinkage - 1)/(l - 1); 0 when l = 1."""
  if not 0.0 < shrinkage <= 1.0:
    raise ValueError(f'convex shrinkage must be in (0, 1]; got {shrinkage}')
  if l <= 1:
    return 0.0
  return (1.0 / float(shrinkage) - 1.0) / (l - 1)


def _shrinkage_weight(rho: float, l: int, form: str) -> float:
  """The weight on I (rho_l) for either form; 1 when l = 1."""
  if form == 'paper':
    return paper_rho_l(rho, l)
  if form == 'convex':
    if not 0.0 < rho <= 1.0:
      raise ValueError(f'convex shrinkage must be in (0, 1]; got {rho}')
    return 1.0 if l == 1 else float(rho)
  raise ValueError(f"form must be 'paper' or 'convex'; got {form!r}")


def shrinkage_covariance(samples, rho: float, form: str = 'paper') -> np.ndarray:
  """Sigma_l = rho_l I + (1 - rho_l) S_l; rho_l from `form` (module docstring); I when l = 1."""
  xs = _samples(samples)
  l, d = xs.shape
  w = _shrinkage_weight(rho, l, form)
  _, s = sample_mean_cov(xs)
  return w * np.eye(d) + (1.0 - w) * s


def posterior_delta_solve(x0, samples, rho: float, form: str = 'paper') -> np.ndarray:
  """Delta = Sigma_l^{-1} (x0 - xbar_l) by a dense solve; [d]."""
  xs = _samples(samples)
  mean, _ = sample_mean_cov(xs)
  sigma = shrinkage_covariance(xs, rho, form)
  return np.linalg.solve(sigma, _f64(x0).reshape(-1) - mean)


def posterior_delta_dp_steps(x0, samples, rho_paper: float) -> list[np.ndarray]:
  """Appendix C's dynamic program; [Delta_1, ..., Delta_l], Delta_t from the first t samples.

  Delta_t equals posterior_delta_solve(x0, samples[:t], rho_paper) (same paper rho for every
  t). Samples are consumed one at a time and only vectors are stored (Eqs. 21-28).
  """
  xs = _samples(samples)
  x0 = _f64(x0).reshape(-1)
  if x0.shape[0] != xs.shape[1]:
    raise ValueError(f'x0 has {x0.shape[0]} entries, samples have {xs.shape[1]}')
  rho = float(rho_paper)
  if rho < 0:
    raise ValueError(f'paper rho must be >= 0; got {rho}')
  mean = xs[0].copy()  # xbar_1
  delta_til = x0 - xs[0]  # Eq. 21: Deltatil_1 = Sigmatil_1^{-1} (x0 - xbar_1), Sigmatil_1 = I
  vs: list[np.ndarray] = []  # v_{k-1,k}, k = 2..t
  coefs: list[float] = []  # gamma_k / (1 + gamma_k v_{k-1,k}^T u_k), k = 2..t
  deltas = [delta_til.copy()]  # rho_1 = 1
  for t in range(2, xs.shape[0] + 1):
    x_t = xs[t - 1]
    u = x_t - mean  # Eq. 22: u_t = x_t - xbar_{t-1}
    gamma = rho * (t - 1) / t
    v = u.copy()  # Eq. 28: v_{t-1,t} = Sigmatil_{t-1}^{-1} u_t
    for v_k, c_k in zip(vs, coefs):
      v -= c_k * (v_k @ u) * v_k
    utv = float(u @ v)
    denom = 1.0 + gamma * utv
    # Eq. 23, in the paper's arrangement.
    delta_til = delta_til - (1.0 + gamma * (t * float(u @ delta_til) - utv) / denom) * v / t
    vs.append(v)
    coefs.append(gamma / denom)
    mean = mean + u / t  # Eq. 13
    deltas.append(delta_til / paper_rho_l(rho, t))  # Eq. 24
  return deltas


def posterior_delta_dp(x0, samples, rho_paper: float) -> np.ndarray:
  """Delta_l from the dynamic program (the last of `posterior_delta_dp_steps`); [d]."""
  return posterior_delta_dp_steps(x0, samples, rho_paper)[-1]


def linear_regression_loss_and_grad(theta, features, targets) -> tuple[float, np.ndarray]:
  """Keras MSE of features @ w + b, theta = [w, b]; returns (loss, grad [p + 1])."""
  theta = _f64(theta).reshape(-1)
  x = _f64(features)
  y = _f64(targets).reshape(-1)
  r = x @ theta[:-1] + theta[-1] - y
  m = y.shape[0]
  grad = np.concatenate([2.0 / m * (x.T @ r), [2.0 / m * r.sum()]])
  return float(np.mean(r * r)), grad


def iasg_linear_regression(
  x0, features, targets, perms, batch_size: int, lr: float, burnin_epochs: int, momentum=0.0
) -> tuple[np.ndarray, np.ndarray, int]:
  """IASG (Algorithm 4) with epoch-sized burn-in and sampling periods.

  Args:
    x0: initial theta [p + 1] (kernel then bias).
    features: [n, p]; targets: [n] or [n, 1].
    perms: int [E, n], the example order of each epoch; minibatches are consecutive chunks of
      `batch_size` (the last one smaller when batch_size does not divide n).
    batch_size, lr, momentum: client SGD(M) (v = m v + g; theta -= lr v).
    burnin_epochs: epochs 0..burnin_epochs-1 produce no sample.

  Returns:
    (samples [l, p + 1] with l = max(E - burnin_epochs, 0), final theta [p + 1], total steps).
  """
  theta = _f64(x0).reshape(-1).copy()
  x = _f64(features)
  y = _f64(targets).reshape(-1)
  vel = np.zeros_like(theta)
  samples = []
  steps = 0
  for epoch, perm in enumerate(np.asarray(perms)):
    acc, count = np.zeros_like(theta), 0
    for start in range(0, len(perm), batch_size):
      idx = perm[start : start + batch_size]
      _, g = linear_regression_loss_and_grad(theta, x[idx], y[idx])
      if momentum:
        vel = momentum * vel + g
        g = vel
      theta = theta - lr * g
      steps += 1
      if epoch >= burnin_epochs:
        acc += theta
        count += 1
    if epoch >= burnin_epochs:
      samples.append(acc / count)
  return np.array(samples).reshape(-1, theta.shape[0]), theta, steps


def fedpa_client_delta(
  x0,
  features,
  targets,
  perms,
  batch_size: int,
  lr: float,
  burnin_epochs: int,
  rho: float,
  momentum=0.0,
  form: str = 'paper',
) -> np.ndarray:
  """IASG, then Delta = Sigma_l^{-1} (x0 - xbar_l) (dense solve); [p + 1].

  With no sample (every epoch is burn-in) this returns FedAvg's x0 - x_K, as the paper says of
  a sampler stopped during burn-in (Appendix C, "any-time property").
  """
  samples, final, _ = iasg_linear_regression(
    x0, features, targets, perms, batch_size, lr, burnin_epochs, momentum
  )
  x0 = _f64(x0).reshape(-1)
  if samples.shape[0] == 0:
    return x0 - final
  return posterior_delta_solve(x0, samples, rho, form)


def fedavg_client_delta(
  x0, features, targets, perms, batch_size: int, lr: float, momentum=0.0
) -> np.ndarray:
  """x0 - x_K after all epochs of the same client SGD(M) (Algorithm 2); [p + 1]."""
  _, final, _ = iasg_linear_regression(
    x0, features, targets, perms, batch_size, lr, len(perms), momentum
  )
  return _f64(x0).reshape(-1) - final


def _weighted_solve(mats: Sequence[np.ndarray], points: Sequence[np.ndarray], weights):
  """Solves sum_i q_i M_i (x - p_i) = 0: (sum q_i M_i)^{-1} sum q_i M_i p_i."""
  q = _f64(weights).reshape(-1)
  lhs = sum(qi * _f64(m) for qi, m in zip(q, mats))
  rhs = sum(qi * _f64(m) @ _f64(p).reshape(-1) for qi, m, p in zip(q, mats, points))
  return np.linalg.solve(lhs, rhs)


def quadratic_global_optimum(As, mus, weights) -> np.ndarray:
  """argmin sum_i q_i f_i, f_i = 1/2 (x - mu_i)^T A_i (x - mu_i) (Eq. 3 with Sigma_i^-1 = A_i).

  grad = sum_i q_i A_i (x - mu_i) = 0 gives (sum q_i A_i)^{-1} sum q_i A_i mu_i; [d].
  """
  return _weighted_solve(As, mus, weights)


def fedavg_gd_fixed_point(As, mus, weights, lr: float, K: int) -> np.ndarray:
  """Fixed point of FedAvg with K full-batch local GD steps on f_i, any server step; [d].

  Local GD x_{k+1} = x_k - lr A_i (x_k - mu_i) gives x_{k+1} - mu_i = (I - lr A_i)(x_k - mu_i),
  so x_K - mu_i = (I - lr A_i)^K (x - mu_i) and the client delta is
  x - x_K = (x - mu_i) - (x_K - mu_i) = B_i (x - mu_i), B_i = I - (I - lr A_i)^K. The server
  moves along -sum_i q_i B_i (x - mu_i) (scaled by any server learning rate), which vanishes at
  x* = (sum q_i B_i)^{-1} sum q_i B_i mu_i (B_i is positive definite when 0 < lr lam(A_i) < 2).
  K = 1: B_i = lr A_i, so x* is `quadratic_global_optimum`.
  """
  mats = []
  for a in As:
    a = _f64(a)
    eye = np.eye(a.shape[0])
    mats.append(eye - np.linalg.matrix_power(eye - lr * a, K))
  return _weighted_solve(mats, mus, weights)


def fedpa_fixed_point(Sigma_inv_list, mean_list, weights) -> np.ndarray:
  """Fixed point of server steps on the FedPA deltas Delta_i = Sigma_i^{-1} (x - mu_hat_i); [d].

  The aggregate sum_i q_i Sigma_i^{-1} (x - mu_hat_i) is the gradient of Prop. 2's quadratic
  Q(x) = 1/2 x^T A x - b^T x (A = sum q_i Sigma_i^{-1}, b = sum q_i Sigma_i^{-1} mu_hat_i,
  Eq. 4); a server step is stationary iff it is zero, i.e. x* = A^{-1} b (Eq. 9), for fixed
  (Sigma_i, mu_hat_i). With exact posteriors (Sigma_i^{-1} = A_i, mu_hat_i = mu_i) this is
  `quadratic_global_optimum`.
  """
  return _weighted_solve(Sigma_inv_list, mean_list, weights)


def _rel(a, b) -> float:
  a, b = _f64(a), _f64(b)
  return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _random_spd(rng, d: int, lo: float, hi: float) -> np.ndarray:
  q, _ = np.linalg.qr(rng.normal(size=(d, d)))
  return q @ np.diag(rng.uniform(lo, hi, size=d)) @ q.T


def self_check() -> dict[str, float]:
  """Asserts the identities above on random data; returns the worst errors (all relative)."""
  rng = np.random.default_rng(0)
  out: dict[str, float] = {}

  # DP == dense solve, for the final delta and after every sample (same paper rho).
  dp_err = steps_err = 0.0
  for d in (3, 50):
    for l in (1, 2, 5, 10):
      center = rng.normal(size=d)
      scale = np.exp(rng.normal(size=d))  # anisotropic samples
      xs = center + scale * rng.normal(size=(l, d))
      x0 = rng.normal(size=d) * 3.0
      for rho in (0.01, 0.1, 0.5, 1.0):
        steps = posterior_delta_dp_steps(x0, xs, rho)
        dp_err = max(
          dp_err, _rel(posterior_delta_dp(x0, xs, rho), posterior_delta_solve(x0, xs, rho))
        )
        for t, delta_t in enumerate(steps, start=1):
          steps_err = max(steps_err, _rel(delta_t, posterior_delta_solve(x0, xs[:t], rho)))
        # The convex form (shrinkage = rho, all in (0, 1]) is the paper form with
        # rho = convex_to_paper_rho(shrinkage, l).
        paper = convex_to_paper_rho(rho, l)
        conv = posterior_delta_solve(x0, xs, rho, form='convex')
        dp_err = max(dp_err, _rel(posterior_delta_dp(x0, xs, paper), conv))
  out['dp_vs_solve'] = dp_err
  out['dp_steps_vs_solve'] = steps_err
  assert dp_err < 1e-10 and steps_err < 1e-10, out

  # Special cases: one sample -> x0 - x_1 (Sigma_1 = I); paper rho = 0 or convex 1 -> x0 - xbar.
  x0, xs = rng.normal(size=7), rng.normal(size=(6, 7))
  one = [
    _rel(f(x0, xs[:1]), x0 - xs[0])
    for f in (
      lambda a, b: posterior_delta_solve(a, b, 0.3),
      lambda a, b: posterior_delta_solve(a, b, 0.3, form='convex'),
      lambda a, b: posterior_delta_dp(a, b, 0.3),
    )
  ]
  out['one_sample'] = max(one)
  mean = xs.mean(axis=0)
  out['identity_cov'] = max(
    _rel(posterior_delta_solve(x0, xs, 0.0), x0 - mean),
    _rel(posterior_delta_solve(x0, xs, 1.0, form='convex'), x0 - mean),
    _rel(posterior_delta_dp(x0, xs, 0.0), x0 - mean),
  )
  # Sigma_l = rho_l (I + rho (l-1) S_l) (Eq. 19) and S_l against np.cov.
  _, s = sample_mean_cov(xs)
  out['eq19_and_cov'] = max(
    _rel(shrinkage_covariance(xs, 0.2), paper_rho_l(0.2, 6) * (np.eye(7) + 0.2 * 5 * s)),
    _rel(s, np.cov(xs, rowvar=False)),
  )
  assert max(out['one_sample'], out['identity_cov'], out['eq19_and_cov']) < 1e-12, out

  # Least squares. (a) K = 1: B_i = lr A_i for any SPD A_i, so FedAvg's fixed point is the
  # optimum. (b) A_i = a I with a common a: B_i = (1 - (1 - lr a)^K) I is the same multiple of
  # every A_i, so the fixed point is the optimum for every K. (c) Different a_i, K > 1: the
  # weights become q_i (1 - (1 - lr a_i)^K) instead of q_i a_i, so the fixed point moves.
  d, n_clients, lr = 3, 4, 0.1
  q = rng.uniform(0.5, 2.0, size=n_clients)
  mus = [rng.normal(scale=3.0, size=d) for _ in range(n_clients)]
  spd = [_random_spd(rng, d, 0.5, 5.0) for _ in range(n_clients)]
  opt = quadratic_global_optimum(spd, mus, q)
  out['fedavg_K1_spd'] = _rel(fedavg_gd_fixed_point(spd, mus, q, lr, 1), opt)
  same = [2.0 * np.eye(d)] * n_clients
  out['fedavg_K10_same_scaled_identity'] = _rel(
    fedavg_gd_fixed_point(same, mus, q, lr, 10), quadratic_global_optimum(same, mus, q)
  )
  mixed = [a * np.eye(d) for a in (0.5, 1.0, 3.0, 6.0)]
  out['fedavg_K10_mixed_scaled_identity_gap'] = _rel(
    fedavg_gd_fixed_point(mixed, mus, q, lr, 10), quadratic_global_optimum(mixed, mus, q)
  )
  assert out['fedavg_K1_spd'] < 1e-12 and out['fedavg_K10_same_scaled_identity'] < 1e-12, out
  assert out['fedavg_K10_mixed_scaled_identity_gap'] > 1e-2, out
  # (d) The closed forms against simulated rounds (full participation, server lr 1 for FedAvg).
  K = 5
  x = np.zeros(d)
  for _ in range(400):
    deltas = []
    for a, mu in zip(spd, mus):
      y = x.copy()
      for _ in range(K):
        y = y - lr * a @ (y - mu)
      deltas.append(x - y)
    x = x - sum(qi * dl for qi, dl in zip(q, deltas)) / q.sum()
  out['fedavg_simulated_vs_closed_form'] = _rel(x, fedavg_gd_fixed_point(spd, mus, q, lr, K))
  out['fedavg_K5_gap_to_optimum'] = _rel(fedavg_gd_fixed_point(spd, mus, q, lr, K), opt)
  x = np.zeros(d)
  for _ in range(400):
    x = x - 0.1 * sum(qi * a @ (x - mu) for qi, a, mu in zip(q, spd, mus)) / q.sum()
  out['fedpa_simulated_vs_closed_form'] = _rel(x, fedpa_fixed_point(spd, mus, q))
  out['fedpa_exact_vs_optimum'] = _rel(fedpa_fixed_point(spd, mus, q), opt)
  assert out['fedavg_simulated_vs_closed_form'] < 1e-10, out
  assert out['fedpa_simulated_vs_closed_form'] < 1e-10 and out['fedpa_exact_vs_optimum'] < 1e-12

  # IASG: gradient against central differences; step/sample counts with a ragged last batch;
  # full-batch GD samples converge to the least-squares solution [w; b].
  n, p = 10, 3
  feats, targ = rng.normal(size=(n, p)), rng.normal(size=n)
  theta = rng.normal(size=p + 1)
  _, g = linear_regression_loss_and_grad(theta, feats, targ)
  eps, fd = 1e-6, np.zeros(p + 1)
  for j in range(p + 1):
    e = np.zeros(p + 1)
    e[j] = eps
    hi = linear_regression_loss_and_grad(theta + e, feats, targ)[0]
    lo = linear_regression_loss_and_grad(theta - e, feats, targ)[0]
    fd[j] = (hi - lo) / (2 * eps)
  out['grad_vs_finite_difference'] = _rel(g, fd)
  perms = np.array([rng.permutation(n) for _ in range(5)])
  samples, final, n_steps = iasg_linear_regression(theta, feats, targ, perms, 4, 0.05, 2, 0.9)
  assert samples.shape == (3, p + 1) and n_steps == 15, (samples.shape, n_steps)
  assert np.allclose(fedavg_client_delta(theta, feats, targ, perms, 4, 0.05, 0.9), theta - final)
  perms = np.array([np.arange(n)] * 600)
  samples, _, _ = iasg_linear_regression(theta, feats, targ, perms, n, 0.1, 500)
  design = np.hstack([feats, np.ones((n, 1))])
  lsq = np.linalg.lstsq(design, targ, rcond=None)[0]
  out['iasg_full_batch_mean_vs_lstsq'] = _rel(samples.mean(axis=0), lsq)
  assert out['grad_vs_finite_difference'] < 1e-7 and out['iasg_full_batch_mean_vs_lstsq'] < 1e-9
  return out


if __name__ == '__main__':
  for key, value in self_check().items():
    print(f'{key}: {value:.3e}')
