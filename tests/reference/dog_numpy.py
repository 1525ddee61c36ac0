"""Float64 NumPy reference of DoG and L-DoG (Ivgi, Hinder & Carmon, ICML 2023, arXiv 2302.12022).

Written from the paper's DoG formula and checked against the authors' package `dog-optimizer`
(github.com/formll/dog: src/dog/torch/dog.py, src/dog/jax/dog.py, src/dog/torch/averager.py),
independently of `tff_adaptive`. Steps t = 0, 1, ...; g_t is the (stochastic) gradient at x_t;
the model is a list of arrays and ||.|| is the global L2 norm over all of them.

  DoG:     r_bar_t = max(r_eps, max_{i <= t} ||x_i - x_0||)
           G_t     = sum_{i <= t} ||g_i||^2
           eta_t   = r_bar_t / sqrt(G_t)
           x_{t+1} = x_t - eta_t g_t

r_bar_t includes the *current* iterate x_t (the one g_t was taken at, before the step), and G_t
includes g_t itself; so the first step is eta_0 = r_eps / ||g_0|| and moves exactly r_eps.

  L-DoG:   the same, separately for every array (layer) l of the list: r_bar_t^l, G_t^l,
           eta_t^l = r_bar_t^l / sqrt(G_t^l), x^l_{t+1} = x^l_t - eta_t^l g^l_t.

The package's choices, each a named option of `dog_step` (defaults are the paper's formula):

* r_eps = reps_rel (1 + ||x_0||) (per layer for L-DoG: reps_rel (1 + ||x_0^l||)), reps_rel = 1e-6
  by default, 1e-4 suggested for models with batch normalisation (`reps_rel`; `r_eps` sets it
  directly).
* eps = 1e-8 under the square root, eta_t = r_bar_t / sqrt(G_t + eps) (torch adds eps once to
  G_0, JAX adds it at every step: the same number). The paper's formula has no eps (`eps=0.0`).
* weight decay: g_t <- g_t + lambda x_t *before* G_t and the step (`weight_decay`).
* `init_eta`: a given first step size; the package then sets reps_rel = 0, so r_bar_0 = 0 and
  from t = 1 on r_bar_t = max_{1 <= i <= t} ||x_i - x_0||.
* lr (the paper's c): eta_t is multiplied by it; 1 is recommended.
* `rbar_floor=False`: the package README's piecewise form r_bar_0 = r_eps, r_bar_t =
  max_{i <= t} ||x_i - x_0|| for t >= 1 (no floor). The code keeps the floor: since ||x_1 - x_0||
  = r_eps ||g_0|| / sqrt(||g_0||^2 + eps) <= r_eps, the two differ from t = 1 on when eps > 0.

Iterate averaging (paper and package): polynomial decay averaging (Shamir & Zhang 2013) with
gamma = 8, x_avg_t = (1 - (1 + gamma)/(t + gamma)) x_avg_{t-1} + (1 + gamma)/(t + gamma) x_t for
t = 1, 2, ... over the iterates after each step (torch averager: t starts at 1, so x_avg_1 = x_1).

As a client optimizer in federated learning (`dog_client`) the state starts afresh for every
client every round: x_0 is the global model the client received, r_bar = r_eps and G = 0.
"""

from collections.abc import Callable
from collections.abc import Sequence
import math
from typing import Any

import numpy as np

Arrays = list[np.ndarray]
# (x, k) -> gradient at x for local step k = 1, ..., K.
GradFn = Callable[[Arrays, int], Arrays]

DEFAULT_REPS_REL = 1e-6
BATCH_NORM_REPS_REL = 1e-4
CODE_EPS = 1e-8
DEFAULT_GAMMA = 8.0


def _as64(arrays: Sequence[np.ndarray]) -> Arrays:
  return [np.array(a, dtype=np.float64) for a in arrays]


def _sq(a: np.ndarray) -> float:
  return float(np.sum(np.square(a)))


def r_eps_of(
  x0: Sequence[np.ndarray], reps_rel: float = DEFAULT_REPS_REL, layerwise: bool = False
) -> float | list[float]:
  """The package's r_eps = reps_rel (1 + ||x_0||); per array for L-DoG."""
  x = _as64(x0)
  if layerwise:
    return [reps_rel * (1.0 + math.sqrt(_sq(a))) for a in x]
  return reps_rel * (1.0 + math.sqrt(sum(_sq(a) for a in x)))


def dog_step(
  x: Sequence[np.ndarray],
  g: Sequence[np.ndarray],
  state: dict[str, Any] | None = None,
  layerwise: bool = False,
  reps_rel: float = DEFAULT_REPS_REL,
  r_eps: float | Sequence[float] | None = None,
  eps: float = 0.0,
  lr: float = 1.0,
  weight_decay: float = 0.0,
  init_eta: float | None = None,
  rbar_floor: bool = True,
) -> tuple[Arrays, dict[str, Any], float | list[float]]:
  """One DoG (or L-DoG) step x_t -> x_{t+1} with the gradient g_t taken at x_t.

  Args:
    x: the current iterate x_t (a list of arrays).
    g: the gradient at x_t.
    state: None on the first step (then x_0 = x); afterwards the returned state, a dict with
      'x0' (the list x_0), 'rbar' and 'G' (floats, or one per array for L-DoG), 't', 'r_eps'.
    layerwise: L-DoG (one r_bar, G and eta per array) instead of DoG (one for the whole list).
    reps_rel: r_eps = reps_rel (1 + ||x_0||) (per array for L-DoG), unless `r_eps` is given.
    r_eps: the paper's r_eps directly (a float, or one per array for L-DoG).
    eps: added to G_t under the square root (0 in the paper, 1e-8 in the package).
    lr: the paper's c, a multiplier on eta_t.
    weight_decay: lambda; the package adds lambda x_t to g_t before G_t and the step.
    init_eta: the package's explicit first step size; it also zeroes r_eps (see module doc).
    rbar_floor: keep r_eps as a floor of r_bar at every step (paper and code); False gives the
      README's piecewise form.

  Returns:
    (x_{t+1}, state after the step, eta_t (a float, or a list per array for L-DoG)).
  """
  x = _as64(x)
  g = _as64(g)
  if len(x) != len(g):
    raise ValueError('x and g must have the same number of arrays')
  if weight_decay:
    g = [gi + weight_decay * xi for gi, xi in zip(g, x, strict=True)]
  n = len(x) if layerwise else 1
  if state is None:
    x0 = [a.copy() for a in x]
    if init_eta is not None:
      re = [0.0] * n
    elif r_eps is not None:
      re = list(r_eps) if layerwise else [float(r_eps)]
    else:
      re = r_eps_of(x0, reps_rel, layerwise)
      re = re if layerwise else [re]
    rbar_prev, g_prev, t, first = [None] * n, [0.0] * n, 0, True
  else:
    x0, re, t, first = state['x0'], list(state['r_eps']), state['t'], False
    rbar_prev = list(state['rbar']) if layerwise else [state['rbar']]
    g_prev = list(state['G']) if layerwise else [state['G']]
  if layerwise:
    dist = [math.sqrt(_sq(a - b)) for a, b in zip(x, x0, strict=True)]
    gsq = [_sq(gi) for gi in g]
  else:
    dist = [math.sqrt(sum(_sq(a - b) for a, b in zip(x, x0, strict=True)))]
    gsq = [sum(_sq(gi) for gi in g)]
  rbar, big_g, eta = [], [], []
  for j in range(n):
    if first:
      r = max(re[j], dist[j])
    elif rbar_floor:
      r = max(rbar_prev[j], dist[j], re[j])
    else:
      # The README form: r_eps only at t = 0, then the running max of the distances alone.
      r = dist[j] if t == 1 else max(rbar_prev[j], dist[j])
    gj = g_prev[j] + gsq[j]
    if gj + eps <= 0:
      raise ValueError('DoG needs a nonzero first gradient (G_t + eps > 0)')
    rbar.append(r)
    big_g.append(gj)
    eta.append(lr * r / math.sqrt(gj + eps))
  if first and init_eta is not None:
    eta = [float(init_eta)] * n
  if layerwise:
    x_next = [xi - e * gi for xi, e, gi in zip(x, eta, g, strict=True)]
  else:
    x_next = [xi - eta[0] * gi for xi, gi in zip(x, g, strict=True)]
  new_state = {
    'x0': x0,
    'r_eps': re,
    'rbar': rbar if layerwise else rbar[0],
    'G': big_g if layerwise else big_g[0],
    't': t + 1,
  }
  return x_next, new_state, (eta if layerwise else eta[0])


def polynomial_average_step(
  x_avg: Sequence[np.ndarray] | None, x: Sequence[np.ndarray], t: int, gamma: float = 8.0
) -> Arrays:
  """x_avg_t = (1 - w) x_avg_{t-1} + w x_t with w = (1 + gamma) / (t + gamma), t = 1, 2, ...

  t = 1 gives w = 1 (x_avg_1 = x_1), so x_avg_0 is never used (None is allowed then).
  """
  if t < 1:
    raise ValueError('t counts the iterates after each step from 1')
  w = (1.0 + gamma) / (t + gamma)
  x = _as64(x)
  if x_avg is None:
    if w != 1.0:
      raise ValueError('x_avg is needed for t > 1')
    return x
  return [(1.0 - w) * a + w * b for a, b in zip(_as64(x_avg), x, strict=True)]


def polynomial_average(iterates: Sequence[Sequence[np.ndarray]], gamma: float = 8.0) -> Arrays:
  """The polynomial-decay average of x_1, ..., x_T (the iterates after each step)."""
  avg = None
  for t, x in enumerate(iterates, start=1):
    avg = polynomial_average_step(avg, x, t, gamma)
  if avg is None:
    raise ValueError('no iterates')
  return avg


def dog_client(
  x_start: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  gamma: float | None = DEFAULT_GAMMA,
  **options: Any,
) -> dict[str, Any]:
  """K local DoG/L-DoG steps of one client from the global model, with a fresh state.

  Args:
    x_start: the model the client received (becomes x_0 of DoG).
    grad_fn: (x, k) -> gradient at x on minibatch k = 1, ..., K.
    num_steps: K.
    gamma: the polynomial-decay averaging parameter (None: no averaging).
    **options: `dog_step`'s keyword options (layerwise, reps_rel, r_eps, eps, lr,
      weight_decay, init_eta, rbar_floor).

  Returns:
    {'x': [x_0, ..., x_K], 'eta': [eta_0, ..., eta_{K-1}], 'rbar': [...], 'G': [...],
     'grad_evals': K, 'delta': x_0 - x_K (the paper-sign update sent to the server),
     'x_avg': the polynomial average of x_1..x_K (None when gamma is None or K = 0)}.
  """
  x = _as64(x_start)
  iterates, etas, rbars, gs = [x], [], [], []
  state = None
  for k in range(1, num_steps + 1):
    x, state, eta = dog_step(x, grad_fn(x, k), state, **options)
    iterates.append(x)
    etas.append(eta)
    rbars.append(state['rbar'])
    gs.append(state['G'])
  x_avg = None
  if gamma is not None and num_steps > 0:
    x_avg = polynomial_average(iterates[1:], gamma)
  return {
    'x': iterates,
    'eta': etas,
    'rbar': rbars,
    'G': gs,
    'grad_evals': num_steps,
    'delta': [a - b for a, b in zip(iterates[0], iterates[-1], strict=True)],
    'x_avg': x_avg,
  }


# ---------------------------------------------------------------------------------------------
# A transcription of the package's torch step, to check the options above against it.
# ---------------------------------------------------------------------------------------------


def package_torch_steps(
  x0: Sequence[np.ndarray],
  grad_fn: GradFn,
  num_steps: int,
  layerwise: bool,
  reps_rel: float = DEFAULT_REPS_REL,
  eps: float = CODE_EPS,
  weight_decay: float = 0.0,
  lr: float = 1.0,
) -> list[Arrays]:
  """DoG.step / LDoG._update_group_state of src/dog/torch/dog.py (v1.1.0), one param group."""
  params = _as64(x0)
  init = rbar = big_g = None
  out = [params]
  for k in range(1, num_steps + 1):
    grads = _as64(grad_fn(params, k))
    first = k == 1
    if first:
      init = [p.copy() for p in params]
    if weight_decay > 0:
      grads = [gr + weight_decay * p for gr, p in zip(grads, params, strict=True)]
    norms = np.array([np.linalg.norm(p) for p in params])
    gsq = np.array([np.sum(gr**2) for gr in grads])
    dists = np.array([np.linalg.norm(p - pi) for p, pi in zip(params, init, strict=True)])
    if layerwise:
      if first:
        rbar, big_g = reps_rel * (1 + norms), gsq + eps
      else:
        rbar, big_g = np.maximum(rbar, dists), big_g + gsq
      etas = list(lr * rbar / np.sqrt(big_g))
    else:
      if first:
        rbar, big_g = reps_rel * (1 + np.linalg.norm(norms)), gsq.sum() + eps
      else:
        rbar, big_g = max(rbar, np.linalg.norm(dists)), big_g + gsq.sum()
      etas = [lr * rbar / np.sqrt(big_g)] * len(params)
    params = [p - e * gr for p, e, gr in zip(params, etas, grads, strict=True)]
    out.append(params)
  return out


def _quadratic(seed: int, shapes: Sequence[tuple[int, ...]], scales: Sequence[float]):
  """f(x) = 1/2 sum_l s_l ||x^l - x*^l||^2 with x* drawn from N(0, 1); grad s_l (x^l - x*^l)."""
  rng = np.random.default_rng(seed)
  x_star = [rng.normal(size=s) for s in shapes]

  def grad_fn(x, k):
    return [s * (a - b) for s, a, b in zip(scales, x, x_star, strict=True)]

  def dist(x):
    return math.sqrt(sum(_sq(a - b) for a, b in zip(x, x_star, strict=True)))

  return x_star, grad_fn, dist


def self_check() -> dict[str, float]:
  """Small checks of the formulas; each is asserted. Returns the measured quantities."""
  out = {}
  rng = np.random.default_rng(1)
  shapes, scales = [(5, 3), (3,), (4,)], [1.0, 3.0, 0.5]
  _, grad_fn, dist = _quadratic(0, shapes, scales)
  x0 = [rng.normal(size=s) for s in shapes]
  g0 = grad_fn(x0, 1)
  # First step: eta_0 = r_eps / ||g_0||, so the step moves exactly r_eps (eps = 0).
  x1, st, eta0 = dog_step(x0, g0, None, reps_rel=1e-6)
  r_eps = r_eps_of(x0, 1e-6)
  g0n = math.sqrt(sum(_sq(a) for a in g0))
  moved = math.sqrt(sum(_sq(a - b) for a, b in zip(x1, x0, strict=True)))
  out['first_step_eta_rel_err'] = abs(eta0 - r_eps / g0n) / (r_eps / g0n)
  out['first_step_move_rel_err'] = abs(moved - r_eps) / r_eps
  assert out['first_step_eta_rel_err'] < 1e-12 and out['first_step_move_rel_err'] < 1e-10
  # Second step: r_bar_1 = max(r_eps, ||x_1 - x_0||) uses x_1 (the pre-step iterate) and
  # G_1 = ||g_0||^2 + ||g_1||^2.
  g1 = grad_fn(x1, 2)
  _, st2, eta1 = dog_step(x1, g1, st)
  g1sq = sum(_sq(a) for a in g1)
  assert abs(st2['rbar'] - max(r_eps, moved)) < 1e-18
  assert abs(eta1 - st2['rbar'] / math.sqrt(g0n**2 + g1sq)) < 1e-15
  # The options at the package's values reproduce a transcription of its torch code.
  for layerwise in (False, True):
    ref = dog_client(x0, grad_fn, 60, None, layerwise=layerwise, eps=CODE_EPS, weight_decay=1e-3)
    pkg = package_torch_steps(x0, grad_fn, 60, layerwise, weight_decay=1e-3)
    err = max(float(np.max(np.abs(a - b))) for xr, xp in zip(ref['x'], pkg) for a, b in zip(xr, xp))
    out[f'package_vs_reference_{"ldog" if layerwise else "dog"}'] = err
    assert err < 1e-12, err
  # L-DoG with a single array is DoG.
  one = [x0[0]]
  a = dog_client(one, lambda x, k: [grad_fn([x[0], x0[1], x0[2]], k)[0]], 30, layerwise=True)
  b = dog_client(one, lambda x, k: [grad_fn([x[0], x0[1], x0[2]], k)[0]], 30, layerwise=False)
  assert all(np.allclose(p[0], q[0], rtol=0, atol=1e-14) for p, q in zip(a['x'], b['x']))
  # DoG on the quadratic: eta grows from ~1e-6 and the iterates converge (parameter-free).
  run = dog_client(x0, grad_fn, 300)
  out['dog_eta_first'] = run['eta'][0]
  out['dog_eta_last'] = run['eta'][-1]
  out['dog_dist_ratio_300'] = dist(run['x'][-1]) / dist(x0)
  out['dog_avg_dist_ratio_300'] = dist(run['x_avg']) / dist(x0)
  assert out['dog_eta_last'] > 1e3 * out['dog_eta_first'] and out['dog_dist_ratio_300'] < 1e-2
  ldog = dog_client(x0, grad_fn, 300, layerwise=True)
  out['ldog_dist_ratio_300'] = dist(ldog['x'][-1]) / dist(x0)
  assert out['ldog_dist_ratio_300'] < 1e-2
  # A client's state starts afresh: two calls from the same model give the same trajectory.
  again = dog_client(x0, grad_fn, 300)
  assert all(np.array_equal(p, q) for p, q in zip(run['x'][-1], again['x'][-1]))
  # init_eta: the first step is the given one, and r_eps = 0 afterwards.
  y1, sti, e0 = dog_step(x0, g0, None, init_eta=1e-3)
  assert e0 == 1e-3 and sti['rbar'] == 0.0
  _, sti2, _ = dog_step(y1, grad_fn(y1, 2), sti, init_eta=1e-3)
  assert abs(sti2['rbar'] - 1e-3 * g0n) < 1e-15
  # Polynomial averaging with gamma = 0 is the running mean; gamma = 8 weights recent iterates.
  its = [[rng.normal(size=3)] for _ in range(7)]
  assert np.allclose(polynomial_average(its, 0.0)[0], np.mean([i[0] for i in its], axis=0))
  assert np.array_equal(polynomial_average(its[:1], 8.0)[0], its[0][0])
  # The README form (no floor) differs from the code's floor only through eps > 0.
  c1 = dog_client(x0, grad_fn, 5, None, eps=0.0, rbar_floor=False)
  c2 = dog_client(x0, grad_fn, 5, None, eps=0.0)
  assert np.allclose(c1['rbar'], c2['rbar'], rtol=1e-12)
  return out


if __name__ == '__main__':
  for key, value in self_check().items():
    print(f'{key}: {value:.6g}')
