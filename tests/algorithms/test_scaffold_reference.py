"""Tests of the SCAFFOLD / least-squares references themselves (pure NumPy, float64).

tests/reference/scaffold_numpy.py (Reddi et al. 2021, Algorithm 6) is checked against
local_sgd_numpy (FedAvg's client update), against arithmetic done by hand, and against the
closed forms of tests/reference/quadratic_fixed_points.py (SCAFFOLD reaches the optimum of
the example-weighted objective, FedAvg its own drifted fixed point).
"""

import numpy as np
import pytest

from tests.reference import local_sgd_numpy
from tests.reference import quadratic_fixed_points as quad
from tests.reference import scaffold_numpy as scaffold

D, C = 5, 3  # features, classes of the softmax-regression clients
BATCH = 4


def _softmax_clients(num_clients, epochs, seed=0):
  """(id, x, y, perms) with example counts not divisible by BATCH and shuffled epochs."""
  rng = np.random.default_rng(seed)
  clients = []
  for i in range(num_clients):
    n = 5 + 3 * i
    x = rng.normal(size=(n, D))
    y = rng.integers(0, C, size=n)
    perms = [rng.permutation(n) for _ in range(epochs)]
    clients.append((i, x, y, perms))
  return clients


def _softmax_x0(seed=1):
  rng = np.random.default_rng(seed)
  return [rng.normal(scale=0.1, size=(D, C)), rng.normal(scale=0.1, size=C)]


def _max_diff(a, b):
  return max(float(np.max(np.abs(u - v))) for u, v in zip(a, b))


def _full_batch_sampled(clients, local_steps):
  """Full participation, K full-batch GD steps per client (K epochs of one batch each)."""
  return [
    (i, x, y, scaffold.identity_perms(len(x), local_steps)) for i, (x, y) in enumerate(clients)
  ]


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_fedavg_round_matches_local_sgd_reference(momentum):
  """fedavg_round = local_sgd_numpy.local_sgd per client + example-weighted mean + server SGD."""
  clients = _softmax_clients(3, epochs=2)
  x0 = _softmax_x0()
  client_lr, server_lr = 0.3, 0.7
  new_x, diag = scaffold.fedavg_round(x0, clients, client_lr, server_lr, BATCH, momentum)
  deltas, weights, loss_sum = [], [], 0.0
  for _, x, y, perms in clients:
    w, b, mean_loss = local_sgd_numpy.local_sgd(
      x0[0], x0[1], x, y, perms, BATCH, client_lr, momentum
    )
    deltas.append([w - x0[0], b - x0[1]])
    weights.append(len(x))
    loss_sum += mean_loss * len(x) * len(perms)  # every epoch visits all n_i examples
  expected = [
    a + server_lr * d for a, d in zip(x0, local_sgd_numpy.weighted_average(deltas, weights))
  ]
  assert _max_diff(new_x, expected) < 1e-12
  assert diag['num_examples'] == sum(weights)
  assert diag['mean_loss'] == pytest.approx(loss_sum / (2 * sum(weights)), abs=1e-12)
  # ceil(n / BATCH) steps per epoch, the last batch smaller (n = 5, 8, 11 and BATCH = 4).
  assert [diag['clients'][i]['num_steps'] for i in range(3)] == [4, 4, 6]


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_scaffold_with_clients_sampled_once_is_fedavg(momentum):
  """4 rounds x 2 of 8 clients, no repeats: c_i := c makes every correction c - c_i = 0."""
  clients = _softmax_clients(8, epochs=2, seed=3)
  rounds = [clients[2 * t : 2 * t + 2] for t in range(4)]
  x0 = _softmax_x0()
  args = dict(client_lr=0.2, server_lr=1.3, batch_size=BATCH, momentum=momentum)
  xs, cs, states, diags = scaffold.run_scaffold(x0, rounds, num_clients_total=8, **args)
  xf, diags_f = scaffold.run_fedavg(x0, rounds, **args)
  diffs = [_max_diff(a, b) for a, b in zip(xs, xf)]
  assert max(diffs) <= 1e-12, f'max |x_scaffold - x_fedavg| per round: {diffs}'
  assert [d['mean_loss'] for d in diags] == pytest.approx([d['mean_loss'] for d in diags_f])
  # The control variates did move (so the equality is not vacuous): c != 0 after round 1,
  # and every client's state is c_i+ with c_i = the server c of the round it was sampled.
  assert max(float(np.max(np.abs(a))) for a in cs[0]) > 1e-3
  assert sorted(states) == list(range(8))
  for t, d in enumerate(diags):
    c_before = cs[t - 1] if t else [np.zeros_like(a) for a in x0]
    for info in d['clients'].values():
      assert info['first_sampled']
      assert _max_diff(info['c_i'], c_before) == 0.0


def test_fresh_client_control_variate_is_mean_minibatch_gradient():
  """Option II with mu = 0 and c_i = c: x_t - y = eta_l sum_k g_k, so c_i+ = (1/K) sum_k g_k.

  K counts minibatch steps (n = 11, BATCH = 4, 2 epochs: K = 6), not epochs.
  """
  (_, _, (cid, x, y, perms)) = _softmax_clients(3, epochs=2, seed=5)
  x0 = _softmax_x0()
  rng = np.random.default_rng(7)
  c = [rng.normal(size=a.shape) for a in x0]  # any server c: a fresh client starts from it
  client_lr = 0.3
  _, _, states, diag = scaffold.scaffold_round(
    x0, c, {}, [(cid, x, y, perms)], 5, client_lr, 1.0, BATCH
  )
  # Replay the local SGD, collecting the minibatch gradients.
  w, b = x0[0].copy(), x0[1].copy()
  gws, gbs = [], []
  for perm in perms:
    for start in range(0, len(perm), BATCH):
      idx = perm[start : start + BATCH]
      _, gw, gb = local_sgd_numpy.cross_entropy_and_grads(w, b, x[idx], y[idx])
      gws.append(gw)
      gbs.append(gb)
      w, b = w - client_lr * gw, b - client_lr * gb
  assert len(gws) == diag['clients'][cid]['num_steps'] == 6
  assert _max_diff(states[cid], [np.mean(gws, axis=0), np.mean(gbs, axis=0)]) < 1e-12


def test_quadratic_problem_properties():
  """The default heterogeneous problem is stable for eta_l = 0.05 and drifts with K = 20."""
  info = quad.self_check(client_lr=0.05, local_steps=20)
  assert info['client_lr_times_lam_max'] < 1.0, info
  assert info['relative_gap'] > 0.1, info
  # The closed forms' gradients: grad F(w_opt) = 0 with least_squares_loss_and_grads.
  clients = quad.heterogeneous_clients()
  w_opt = quad.global_optimum(clients)
  n = sum(len(x) for x, _ in clients)
  grad = sum(
    len(x) / n * quad.least_squares_loss_and_grads([w_opt], x, y)[1][0] for x, y in clients
  )
  assert np.linalg.norm(grad) < 1e-10, grad


def test_full_participation_fixed_points():
  """Full-batch local GD, K = 20, eta_l = 0.05, server lr 1, all 4 clients every round.

  FedAvg converges to (sum p_i M_i)^{-1} sum p_i M_i w_i*, SCAFFOLD to the global optimum.
  """
  clients = quad.heterogeneous_clients()
  client_lr, local_steps, rounds = 0.05, 20, 100
  w_opt = quad.global_optimum(clients)
  w_fedavg = quad.fedavg_fixed_point(clients, client_lr, local_steps)
  sampled = _full_batch_sampled(clients, local_steps)
  x0 = [np.zeros((clients[0][0].shape[1], 1))]
  args = dict(
    client_lr=client_lr,
    server_lr=1.0,
    batch_size=None,
    loss_and_grads=quad.least_squares_loss_and_grads,
  )
  xf, _ = scaffold.run_fedavg(x0, [sampled] * rounds, **args)
  xs, cs, _, diags = scaffold.run_scaffold(x0, [sampled] * rounds, num_clients_total=4, **args)
  assert all(info['num_steps'] == local_steps for info in diags[0]['clients'].values())
  fedavg_to_fp = np.linalg.norm(xf[-1][0] - w_fedavg)
  fedavg_to_opt = np.linalg.norm(xf[-1][0] - w_opt)
  scaffold_to_opt = np.linalg.norm(xs[-1][0] - w_opt)
  c_norm = np.linalg.norm(cs[-1][0])
  msg = (
    f'after {rounds} rounds: |x_fedavg - w_fedavg| = {fedavg_to_fp:.3e}, '
    f'|x_fedavg - w_opt| = {fedavg_to_opt:.3e} (|w_opt| = {np.linalg.norm(w_opt):.3f}), '
    f'|x_scaffold - w_opt| = {scaffold_to_opt:.3e}, |c| = {c_norm:.3e}'
  )
  print(msg)
  assert fedavg_to_fp < 1e-6, msg
  assert fedavg_to_opt > 0.1 * np.linalg.norm(w_opt), msg
  assert scaffold_to_opt < 1e-6, msg
  assert c_norm < 1e-6, msg  # at the fixed point c = sum_i p_i c_i = grad F(w_opt) = 0


def test_partial_participation_by_hand():
  """1 parameter, N = 3 clients, 5 rounds with repeats; rounds 1-2 computed by hand.

  Every client has x = 1 features, so f_i(w) = mean_j (w - y_j)^2, grad = 2 (w - m_i) with
  m_i = mean(y_i). Full batch, E = 2 epochs => K = 2 steps; eta_l = 0.25, so one step is
    w <- w - 0.25 (2 (w - m_i) + corr) = (w + m_i) / 2 - corr / 4,  corr = c - c_i,
  and c_i+ = c_i - c + (x_t - w_K) / (K eta_l) = c_i - c - 2 Delta y_i. Server eta = 0.5.
  Clients: a: y = [2] (n 1, m 2); b: y = [-4, 0, -2] (n 3, m -2); c: y = [8, 0] (n 2, m 4).

  Round 1, S = {a, b}, x_0 = 0, c = 0, both new: c_a = c_b := 0, corr = 0.
    a: w 0 -> 1 -> 1.5;  Delta y_a = 1.5;  c_a+ = 0 - 0 - 3 = -3;  Delta c_a = -3.
    b: w 0 -> -1 -> -1.5;  Delta y_b = -1.5;  c_b+ = 3;  Delta c_b = 3.
    Delta x = (1 * 1.5 + 3 * -1.5) / 4 = -0.75;  x_1 = 0 + 0.5 * -0.75 = -0.375.
    Delta c = (1 * -3 + 3 * 3) / 4 = 1.5;  c_1 = 0 + (2/3) 1.5 = 1.
    mean loss: a's batches (size 1) 4 at w=0, 1 at w=1; b's (size 3) 20/3 at 0, 11/3 at -1:
    (4 + 1 + 20 + 11) / (1 + 1 + 3 + 3) = 4.5.
  Round 2, S = {b, c}, x_1 = -0.375, c = 1.
    b (stored c_b = 3): corr = 1 - 3 = -2, step w <- (w - 2) / 2 + 0.5:
      -0.375 -> -0.6875 -> -0.84375;  Delta y_b = -0.46875;
      c_b+ = 3 - 1 + 0.9375 = 2.9375;  Delta c_b = -0.0625.
    c (new): c_c := c = 1 (the current server c, not 0), corr = 0, step w <- (w + 4) / 2:
      -0.375 -> 1.8125 -> 2.90625;  Delta y_c = 3.28125;
      c_c+ = 1 - 1 - 6.5625 = -6.5625;  Delta c_c = -7.5625.
    Delta x = (3 * -0.46875 + 2 * 3.28125) / 5 = 1.03125;  x_2 = -0.375 + 0.515625 = 0.140625.
    Delta c = (3 * -0.0625 + 2 * -7.5625) / 5 = -3.0625;  c_2 = 1 - (2/3) 3.0625 = -25/24.
  """
  data = {'a': [2.0], 'b': [-4.0, 0.0, -2.0], 'c': [8.0, 0.0]}

  def client(cid):
    y = np.array(data[cid])
    return (cid, np.ones((len(y), 1)), y, scaffold.identity_perms(len(y), 2))

  schedule = [['a', 'b'], ['b', 'c'], ['a', 'c'], ['a', 'b'], ['c']]
  rounds = [[client(cid) for cid in s] for s in schedule]
  xs, cs, states, diags = scaffold.run_scaffold(
    [np.zeros((1, 1))],
    rounds,
    num_clients_total=3,
    client_lr=0.25,
    server_lr=0.5,
    batch_size=None,
    loss_and_grads=quad.least_squares_loss_and_grads,
  )

  def val(arrays):
    return float(arrays[0].item())

  r1, r2 = diags[0], diags[1]
  # Round 1.
  assert [val(r1['clients'][k]['c_i']) for k in 'ab'] == [0.0, 0.0]
  assert [val(r1['clients'][k]['delta_y']) for k in 'ab'] == pytest.approx([1.5, -1.5], abs=1e-12)
  assert [val(r1['clients'][k]['c_i_plus']) for k in 'ab'] == pytest.approx([-3.0, 3.0], abs=1e-12)
  assert val(r1['delta_x']) == pytest.approx(-0.75, abs=1e-12)
  assert val(r1['delta_c']) == pytest.approx(1.5, abs=1e-12)
  assert val(xs[0]) == pytest.approx(-0.375, abs=1e-12)
  assert val(cs[0]) == pytest.approx(1.0, abs=1e-12)  # the |S|/N = 2/3 factor
  assert r1['mean_loss'] == pytest.approx(4.5, abs=1e-12)
  # Round 2: c enters as the new client's c_i and as b's correction c - c_b = -2.
  assert r2['clients']['c']['first_sampled'] and not r2['clients']['b']['first_sampled']
  assert val(r2['clients']['c']['c_i']) == pytest.approx(1.0, abs=1e-12)
  assert val(r2['clients']['b']['c_i']) == pytest.approx(3.0, abs=1e-12)
  assert [val(r2['clients'][k]['delta_y']) for k in 'bc'] == pytest.approx(
    [-0.46875, 3.28125], abs=1e-12
  )
  assert [val(r2['clients'][k]['c_i_plus']) for k in 'bc'] == pytest.approx(
    [2.9375, -6.5625], abs=1e-12
  )
  assert [val(r2['clients'][k]['delta_c']) for k in 'bc'] == pytest.approx(
    [-0.0625, -7.5625], abs=1e-12
  )
  assert val(r2['delta_x']) == pytest.approx(1.03125, abs=1e-12)
  assert val(r2['delta_c']) == pytest.approx(-3.0625, abs=1e-12)
  assert val(xs[1]) == pytest.approx(0.140625, abs=1e-12)
  assert val(cs[1]) == pytest.approx(-25.0 / 24.0, abs=1e-12)
  # Rounds 3-5: a client's c_i is what it stored the last time it was sampled, and the
  # server's c moves by (|S|/N) Delta c.
  last = {}
  c_prev = 0.0
  for t, d in enumerate(diags):
    for cid, info in d['clients'].items():
      assert info['first_sampled'] == (cid not in last)
      expected_ci = last.get(cid, c_prev)
      assert val(info['c_i']) == pytest.approx(expected_ci, abs=1e-12)
      last[cid] = val(info['c_i_plus'])
    frac = len(schedule[t]) / 3
    assert val(cs[t]) == pytest.approx(c_prev + frac * val(d['delta_c']), abs=1e-12)
    c_prev = val(cs[t])
  assert {k: val(v) for k, v in states.items()} == pytest.approx(last, abs=1e-12)


def test_one_local_step_full_participation_is_fedavg():
  """K = 1, all clients every round: SCAFFOLD's x equals FedAvg's.

  Round 1: c = 0 and c_i := c = 0, so every correction c - c_i is exactly 0 (bitwise equal).
  Later rounds: with full participation c = sum_i p_i c_i stays true (c + Delta c =
  sum_i p_i c_i+), and with K = 1, Delta y_i = -eta_l (g_i + c - c_i) averages to
  Delta x = -eta_l (sum_i p_i g_i + c - sum_i p_i c_i) = -eta_l sum_i p_i g_i: FedAvg's step
  (up to rounding). With K > 1 the corrections act along the trajectory and x differs.
  """
  clients = quad.heterogeneous_clients()
  x0 = [np.zeros((clients[0][0].shape[1], 1))]
  args = dict(
    client_lr=0.05, server_lr=1.0, batch_size=None, loss_and_grads=quad.least_squares_loss_and_grads
  )
  rounds = 10
  sampled = _full_batch_sampled(clients, 1)
  xs, cs, _, _ = scaffold.run_scaffold(x0, [sampled] * rounds, num_clients_total=4, **args)
  xf, _ = scaffold.run_fedavg(x0, [sampled] * rounds, **args)
  assert np.array_equal(xs[0][0], xf[0][0])
  diffs = [_max_diff(a, b) for a, b in zip(xs, xf)]
  assert max(diffs) < 1e-12, diffs
  assert np.linalg.norm(cs[-1][0]) > 1e-2  # the control variates are not trivially 0

  sampled_k = _full_batch_sampled(clients, 5)
  xs_k, _, _, _ = scaffold.run_scaffold(x0, [sampled_k] * 3, num_clients_total=4, **args)
  xf_k, _ = scaffold.run_fedavg(x0, [sampled_k] * 3, **args)
  assert _max_diff(xs_k[0], xf_k[0]) == 0.0  # round 1 is always FedAvg
  assert _max_diff(xs_k[1], xf_k[1]) > 1e-3  # with K = 5 the corrections change round 2


def test_invalid_inputs():
  x0 = _softmax_x0()
  (client,) = _softmax_clients(1, epochs=1)
  with pytest.raises(ValueError, match='sampled twice'):
    scaffold.scaffold_round(x0, x0, {}, [client, client], 2, 0.1, 1.0, BATCH)
  with pytest.raises(ValueError, match='no local steps'):
    scaffold.scaffold_round(x0, x0, {}, [client[:3] + ([],)], 2, 0.1, 1.0, BATCH)
