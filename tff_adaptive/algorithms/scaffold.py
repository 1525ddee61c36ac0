"""SCAFFOLD: stochastic controlled averaging, Option II, batched (the FedOpt paper's baseline).

Karimireddy, Kale, Mohri, Reddi, Stich, Suresh. "SCAFFOLD: Stochastic Controlled Averaging
for Federated Learning." ICML 2020; in the batched form of Reddi et al. 2021 (Adaptive Federated
Optimization), Algorithm 6, App. B.2. What differs from FedAvg: the server keeps a control
variate c and every client a control variate c_i (per-client state kept across rounds); local
steps correct the gradient by c - c_i, which removes client drift.
"""

from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base
from tff_adaptive.core import tree
from tff_adaptive.core import validation
from tff_adaptive.optimizers import client as client_optimizers


class Scaffold(base.Algorithm):
  """SCAFFOLD, Option II (Reddi et al. 2021 Algorithm 6). Round t, clients S of N::

    client i (c_i := c the first time i is sampled):
      y <- x_t;  K local steps  y <- y - eta_l (g_i(y) - c_i + c)     (ClientOpt on g - c_i + c)
      c_i+ = c_i - c + (x_t - y) / (K eta_l)
      Delta y_i = y - x_t,  Delta c_i = c_i+ - c_i
    server:
      Delta x = sum n_i Delta y_i / sum n_i,  Delta c = sum n_i Delta c_i / sum n_i
      x_{t+1} = x_t + eta Delta x                  (ServerOpt on g_t = -Delta x; SGD in the paper)
      c <- c + (|S| / N) Delta c

  In this library's sign the client update is u_i = x_t - y = -Delta y_i, so
  c_i+ = c_i - c + u_i / (K eta_l). K is the number of local steps the client took and eta_l
  the round's client learning rate. With a momentum client optimizer the corrected gradient
  feeds the momentum (the paper assumes SGD). With client optimizers that choose their own
  scalar step sizes (SPS, Delta-SGD), K eta_l is the sum of the steps taken, so u_i / (K eta_l)
  is still the step-weighted mean corrected gradient; per-coordinate preconditioners (Adam,
  Adagrad) have no such mean and are refused. The weights n_i are the client weights (1 with
  uniform weighting).
  """

  name = 'scaffold'
  stateful_clients = True

  def __init__(self, *args: Any, num_clients: int, **kwargs: Any):
    """As `base.Algorithm`, plus num_clients: N, the size of the client population (>= 1)."""
    validation.check_int('num_clients', num_clients, 1)
    super().__init__(*args, **kwargs)
    name, registered = self.client.optimizer.name, client_optimizers.CLIENT_OPTIMIZERS
    if not registered[name].scalar_step:
      raise ValueError(
        f"scaffold's control variates need a client optimizer with scalar steps; client "
        f'optimizer {name!r} preconditions per coordinate (valid: '
        f'{", ".join(n for n in registered if registered[n].scalar_step)})'
      )
    self.num_clients = num_clients

  def server_extra_init(self, specs):
    """c = 0."""
    return tuple(tf.zeros(s.shape, s.dtype) for s in specs)

  def client_broadcast(self, server_extra, round_num):
    """Clients receive c."""
    del round_num
    return server_extra

  def initial_client_state(self, broadcast):
    """c_i := c the first time client i is sampled."""
    return broadcast

  def transforms_gradient(self) -> bool:
    return True

  def transform_gradient(self, gradient, x, x_t, broadcast, client_state):
    """g - c_i + c, the corrected local gradient."""
    del x, x_t
    return tree.add(gradient, tree.sub(tuple(broadcast), tuple(client_state)))

  def client_result(self, result):
    c, c_i = tuple(result.broadcast), tuple(result.client_state)
    # K eta_l; for client optimizers with their own step sizes (SPS, Delta-SGD) the sum of the
    # steps taken, K * mean step size, so that (x_t - y_i) / (K eta) is still the mean
    # corrected gradient.
    step_size = result.stats.get('step_size', result.learning_rate)
    k_eta = tf.cast(result.num_steps, tf.float32) * step_size
    c_i_new = tree.add(tree.sub(c_i, c), tree.divide_no_nan(tuple(result.update), k_eta))
    # A client that took no step (no examples) keeps its c_i (its weight 0 leaves c alone).
    trained = result.num_steps > 0
    c_i_new = tuple(tf.where(trained, new, old) for new, old in zip(c_i_new, c_i))
    return base.ClientOutput(
      update=result.update,
      weight=self.weight_of(result.num_examples),
      stats=result.stats,
      extras=tree.sub(c_i_new, c_i),
      state=c_i_new,
    )

  def server_extra_update(self, server_extra, extras_mean, num_clients):
    """c <- c + (|S| / N) Delta c."""
    fraction = tf.cast(num_clients, tf.float32) / float(self.num_clients)
    return tree.add_scaled(tuple(server_extra), tuple(extras_mean), fraction)


def build_scaffold(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  num_clients: int,
  **kwargs: Any,
) -> base.Algorithm:
  """SCAFFOLD (Option II) over a population of `num_clients` clients.

  Args:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training (optimizer, eta_l, E, B, schedule).
    server_optimizer: applied to g_t = -Delta x; `optimizers.build_fedavg_sgd(eta)` is the
      paper's x_{t+1} = x_t + eta Delta x.
    num_clients: N, the number of clients that can be sampled (for c's |S| / N step).
    **kwargs: `server_lr_schedule`, `server_learning_rate`, `aggregation` (`base.Algorithm`).
  """
  return Scaffold(model_fn, client, server_optimizer, num_clients=num_clients, **kwargs)
