"""FedProx: local training on the client loss plus a proximal term mu/2 ||x - x_t||^2.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith. "Federated Optimization in Heterogeneous
Networks." MLSys 2020, Algorithm 2. A baseline of Ju et al. (AdaFedAdam), mu tuned over
{0.001, 0.005, 0.01, 0.1, 1}.

The gradient of mu/2 ||x - x_t||^2 is mu (x - x_t): it pulls the local iterate back to the
broadcast model. TFF 0.87's `tff.learning.algorithms.build_weighted_fed_prox` adds
mu (x_t - x) instead (`proximal_client_work`: `delta_l2_regularizer * (y - x)` with y the
initial weights), which pushes the iterate away; tests/algorithms/test_fair_algorithms.py shows the
difference on a quadratic whose K-step result has a closed form.

`FedProxHParams` is defined without TensorFlow in `algorithms.config` and re-exported here.
"""

from typing import Any

import tensorflow_federated as tff

from tff_adaptive.algorithms import base
from tff_adaptive.algorithms import fedopt
from tff_adaptive.algorithms.config import FedProxHParams
from tff_adaptive.core import tree

MU_GRID = (0.001, 0.005, 0.01, 0.1, 1.0)  # Ju et al. App. C.1


def proximal_gradient(gradient: Any, x: Any, x_t: Any, mu: float) -> Any:
  """grad f(x) + mu (x - x_t): the gradient of f(x) + mu/2 ||x - x_t||^2."""
  return tree.add_scaled(gradient, tree.sub(x, x_t), mu)


class _FedProx(fedopt.FedOpt):
  """FedProx (Li et al. 2020, Algorithm 2). Round t, sampled clients S::

    x_i = ClientOpt^K(x_t) on f_i(x) + mu/2 ||x - x_t||^2   # gradient g + mu (x - x_t)
    u_i = x_t - x_i,  w_i = n_i (or 1)
    x_{t+1} = ServerOpt(x_t, sum w_i u_i / sum w_i)         # server SGD, eta = 1, in the paper

  FedOpt whose local gradients get the proximal term before the client optimizer sees them,
  so any client optimizer of the project can run it (the paper: SGD). mu = 0 is FedAvg bit
  for bit. Under differential privacy, as FedOpt: u_i is clipped, w_i is not read.
  """

  name = 'fedprox'

  def __init__(self, *args: Any, fedprox: FedProxHParams = FedProxHParams(), **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.hparams = fedprox

  def transforms_gradient(self) -> bool:
    return self.hparams.mu != 0  # mu = 0: FedAvg's local steps exactly

  def transform_gradient(self, gradient, x, x_t, broadcast, client_state):
    """g + mu (x - x_t)."""
    del broadcast, client_state
    return proximal_gradient(gradient, x, x_t, self.hparams.mu)


def build_fedprox(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  fedprox: FedProxHParams = FedProxHParams(),
  **kwargs: Any,
) -> base.Algorithm:
  """FedProx with proximal strength `fedprox.mu`; other arguments as `build_fedopt`."""
  return _FedProx(model_fn, client, server_optimizer, fedprox=fedprox, **kwargs)
