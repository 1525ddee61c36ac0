"""FedOpt: federated averaging with a server optimizer (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021, Algorithms 1, 4 and 5. What differs from FedAvg is only the server
optimizer (the TFF finalizer): FedAvg is server SGD with eta = 1.
"""

from typing import Any

import tensorflow_federated as tff

from tff_adaptive.algorithms import base


class FedOpt(base.Algorithm):
  """FedOpt, Reddi et al. 2021 Algorithm 5. Round t, sampled clients S, n_i examples on i::

    x_i = ClientOpt^K(x_t; D_i, eta_l(t), B, E)       # K = E ceil(n_i / B) local steps
    u_i = x_t - x_i,  w_i = n_i (or 1: `ClientTrainingConfig.weighting`)
    g_t = sum_{i in S} w_i u_i / sum_{i in S} w_i
    x_{t+1} = ServerOpt(x_t, g_t)                     # x_t - eta g_t for FedAvg

  ClientOpt is any registered client optimizer (SGD, SGDM, Adam, Adagrad, SPS, Delta-SGD of
  Kim et al. 2024). The client statistics are `local_steps` (K) and the client optimizer's own
  (e.g. the mean local `step_size` of SPS and Delta-SGD).

  Under differential privacy (`aggregation=aggregators.dp_mean(...)`): u_i is what is clipped
  to norm C, and it is the only value of client i the server's model update reads, so one
  client moves the noised sum by at most C; w_i is not read (every client counts once).
  """

  name = 'fedopt'


def build_fedopt(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  **kwargs: Any,
) -> base.Algorithm:
  """FedOpt with the given server optimizer (e.g. `optimizers.build_fedadam(10**-2.5)`).

  Args:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training (optimizer, eta_l, E, B, schedule).
    server_optimizer: a `tff.learning.optimizers.Optimizer`.
    **kwargs: `server_lr_schedule`, `server_learning_rate`, `aggregation` (`base.Algorithm`).

  Returns:
    The algorithm; `tff_adaptive.engines.build_learning_process(alg)` makes it a TFF
    LearningProcess, `engines.InProcessEngine(alg)` runs it in this process.
  """
  return FedOpt(model_fn, client, server_optimizer, **kwargs)
