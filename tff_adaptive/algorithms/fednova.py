"""FedNova: normalized averaging, so clients with more local steps do not pull harder.

Wang, Liu, Liang, Joshi, Poor. "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization." NeurIPS 2020, eq. (6)-(7) and Sec. 4. A baseline of Ju et al.

Client i runs tau_i local steps of SGD (momentum rho: SGDM as TFF's, v <- rho v + g,
x <- x - eta v). Its update is x_t - x_i = eta G_i a_i with G_i the stacked gradients and a_i
the steps' coefficients; the normalised update is d_i = (x_t - x_i) / ||a_i||_1 and

    x_{t+1} = x_t - tau_eff sum_i p_i d_i,   tau_eff = sum_i p_i ||a_i||_1,  p_i = w_i / sum w_j.

||a_i||_1 (`local_steps_norm`): SGD: gradient s of tau contributes eta, so ||a||_1 = tau.
SGDM: gradient s (0-based) enters v_s, v_{s+1}, ... with weights 1, rho, rho^2, ..., so its
total coefficient is sum_{j=0}^{tau-1-s} rho^j = (1 - rho^(tau-s)) / (1 - rho), and summing
over s: ||a||_1 = [tau - rho (1 - rho^tau) / (1 - rho)] / (1 - rho).

`CLIENT_OPTIMIZERS` is defined without TensorFlow in `algorithms.config`
(`FEDNOVA_CLIENT_OPTIMIZERS`) and re-exported here.
"""

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive.algorithms import base
from tff_adaptive.algorithms.config import FEDNOVA_CLIENT_OPTIMIZERS as CLIENT_OPTIMIZERS
from tff_adaptive.core import tree
from tff_adaptive.optimizers import config as optimizer_config


def local_steps_norm(tau: tf.Tensor, momentum: float) -> tf.Tensor:
  """||a_i||_1 for tau steps of SGD (momentum 0) or SGDM (see the module docstring)."""
  tau = tf.cast(tau, tf.float32)
  if momentum == 0:
    return tau
  rho = tf.constant(momentum, tf.float32)
  return (tau - rho * (1.0 - tf.pow(rho, tau)) / (1.0 - rho)) / (1.0 - rho)


class _FedNova(base.Algorithm):
  """FedNova (Wang et al. 2020) with the aggregation `aggregators.normalized_mean()`::

    client i: tau_i = K local steps;  a_i = ||a_i||_1;  d_i = (x_t - x_i) / a_i
    server:   g_t = (sum p_i a_i) sum p_i d_i;  x_{t+1} = ServerOpt(x_t, g_t)   (SGD, eta 1)

  With equal tau_i (and equal momentum) a_i is the same for every client and g_t is FedAvg's
  update exactly (up to float rounding). Client optimizers: sgd, sgdm (a_i is defined for
  them); client weights p_i from `ClientTrainingConfig.weighting`.
  """

  name = 'fednova'

  def __init__(self, *args: Any, **kwargs: Any):
    kwargs.setdefault('aggregation', aggregators.normalized_mean())
    super().__init__(*args, **kwargs)
    name = self.client.optimizer.name
    if name not in CLIENT_OPTIMIZERS:
      raise ValueError(
        f"fednova normalises by the client optimizer's step coefficients, defined for "
        f'{", ".join(CLIENT_OPTIMIZERS)}; got client optimizer {name!r}'
      )
    reads_momentum = 'momentum' in optimizer_config.CLIENT_OPTIMIZERS[name].hparams
    self.momentum = self.client.optimizer.momentum if reads_momentum else 0.0

  def client_result(self, result):
    a = local_steps_norm(result.num_steps, self.momentum)
    stats = result.stats.copy()
    stats['steps_norm'] = a
    return base.ClientOutput(
      update=collections.OrderedDict(
        [(aggregators.UPDATE_KEY, tree.divide_no_nan(result.update, a)), (aggregators.STEPS_KEY, a)]
      ),
      weight=self.weight_of(result.num_examples),
      stats=stats,
    )


def build_fednova(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  **kwargs: Any,
) -> base.Algorithm:
  """FedNova; arguments as `build_fedopt` (server SGD with eta = 1 is the paper's)."""
  return _FedNova(model_fn, client, server_optimizer, **kwargs)
