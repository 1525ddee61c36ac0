"""q-FedAvg: the q-fair federated objective sum_k F_k^{q+1} / (q+1), solved federatedly.

Li, Sanjabi, Beirami, Smith. "Fair Resource Allocation in Federated Learning." ICLR 2020,
Algorithm 2 (q-FedAvg). A baseline of Ju et al. (q = 1, server lr 1). Round t::

    client k: F_k = F_k(x_t) over its training data;  x_k = ClientOpt^K(x_t)
              Delta_k = L (x_t - x_k),  L = 1 / eta_l
              h_k = q F_k^(q-1) ||Delta_k||^2 + L F_k^q
    server:   x_{t+1} = x_t - sum_k F_k^q Delta_k / sum_k h_k

As a weighted mean: client k sends v_k = F_k^q Delta_k / h_k with weight h_k, so that
sum h_k v_k / sum h_k is the step above; the server optimizer applies it (SGD, eta 1: the
paper's). F_k gets + 1e-10 before its powers, as in the authors' code (`np.float_power(loss +
1e-10, q)`), so F_k = 0 is harmless; with q = 0 the first term of h_k is 0 (no 0 * inf), h_k
= L, v_k = x_t - x_k: FedAvg with uniform weights. The weights are h_k: the client weighting
flag is not read (q-FFL's p_k enters through sampling).

`QFedAvgHParams` is defined without TensorFlow in `algorithms.config` and re-exported here.
"""

from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base
from tff_adaptive.algorithms.config import QFedAvgHParams
from tff_adaptive.core import tree
from tff_adaptive.optimizers import client as client_optimizers

LOSS_EPSILON = 1e-10


def qffl_weight(loss: tf.Tensor, delta_norm_sq: tf.Tensor, lipschitz: tf.Tensor, q: float):
  """h_k = q F^(q-1) ||Delta||^2 + L F^q (the q term omitted when q = 0)."""
  h = lipschitz * tf.pow(loss, q)
  if q != 0:
    h += q * tf.pow(loss, q - 1.0) * delta_norm_sq
  return h


class _QFedAvg(base.Algorithm):
  """q-FedAvg (Li et al. 2020, Algorithm 2); see the module docstring.

  The client optimizer must read eta_l (L = 1 / eta_l(t)): sgd, sgdm, adam, adagrad.
  """

  name = 'qfedavg'

  def __init__(self, *args: Any, qfedavg: QFedAvgHParams = QFedAvgHParams(), **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.hparams = qfedavg
    name = self.client.optimizer.name
    registered = client_optimizers.CLIENT_OPTIMIZERS
    if not registered[name].reads_learning_rate:
      raise ValueError(
        f'qfedavg estimates L = 1 / eta_l from the client learning rate; client optimizer '
        f'{name!r} sets its own steps (valid: '
        f'{", ".join(n for n in registered if registered[n].reads_learning_rate)})'
      )

  def full_passes(self):
    return {'initial': base.FullPass()}  # F_k(x_t), all local examples

  def client_result(self, result):
    q = self.hparams.q
    loss = result.passes['initial'].loss
    lipschitz = 1.0 / result.learning_rate
    delta = tree.scale(result.update, lipschitz)
    f = loss + LOSS_EPSILON
    h = qffl_weight(f, tf.square(tree.global_norm(delta)), lipschitz, q)
    weight = tf.where(result.num_examples > 0, h, 0.0)
    value = tree.scale(delta, tf.math.divide_no_nan(tf.pow(f, q), h))
    stats = result.stats.copy()
    stats['initial_loss'] = loss
    stats['qffl_weight'] = weight
    return base.ClientOutput(update=value, weight=weight, stats=stats)


def build_qfedavg(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  qfedavg: QFedAvgHParams = QFedAvgHParams(),
  **kwargs: Any,
) -> base.Algorithm:
  """q-FedAvg with fairness `qfedavg.q`; other arguments as `build_fedopt`."""
  return _QFedAvg(model_fn, client, server_optimizer, qfedavg=qfedavg, **kwargs)
