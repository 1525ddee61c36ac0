"""FedOpt: federated averaging with a server optimizer (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021, Algorithms 1, 4 and 5.

Each round t:
  1. broadcast x_t to the sampled clients S;
  2. each client i runs E epochs of minibatch ClientOpt from x_t, learning rate eta_l(t), and
     returns g_i = x_t - x_i with weight n_i (its example count);
  3. the server averages g_t = sum_i n_i g_i / sum_i n_i and applies
     x_{t+1} = ServerOpt(x_t, g_t, eta(t)).

The process is composed from TFF's four template parts: `build_broadcast_process`
(distributor), `client_work.build_local_sgd_client_work` (client work), a weighted
`tff.aggregators.MeanFactory` (aggregator) and `build_apply_optimizer_finalizer` (finalizer).
Only the finalizer's optimizer differs between the five algorithms.
"""

from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import client_work as client_work_lib
from tff_adaptive import schedules


def build_fedopt(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  client_config: client_work_lib.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  server_lr_schedule: schedules.Schedule | None = None,
  model_aggregator: tff.aggregators.WeightedAggregationFactory | None = None,
) -> tff.learning.templates.LearningProcess:
  """Builds a FedOpt `LearningProcess` (Reddi et al. 2021, Algorithm 5).

  Update rule, round t, sampled clients S, n_i examples on client i::

    g_i = x_t - ClientSGD^E(x_t; D_i, eta_l(t), B)
    g_t = sum_{i in S} n_i g_i / sum_{i in S} n_i
    x_{t+1} = ServerOpt(x_t, g_t)      # e.g. x_t - eta * g_t for FedAvg

  Args:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client_config: local training hyperparameters (E, B, eta_l, momentum, schedule).
    server_optimizer: a `tff.learning.optimizers.Optimizer`, e.g. from
      `tff_adaptive.optimizers.build_fedadam`.
    server_lr_schedule: optional round -> server learning rate; wraps the optimizer in
      `tff.learning.optimizers.schedule_learning_rate`.
    model_aggregator: weighted aggregation factory; default `tff.aggregators.MeanFactory()`.

  Returns:
    A `tff.learning.templates.LearningProcess` whose `next` takes a list of client data,
    each an OrderedDict of example tensors plus `client_work.SEED_KEY`.
  """
  if server_lr_schedule is not None:
    server_optimizer = tff.learning.optimizers.schedule_learning_rate(
      server_optimizer, server_lr_schedule
    )
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn())

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  client_work = client_work_lib.build_local_sgd_client_work(model_fn, client_config)
  aggregator = (model_aggregator or tff.aggregators.MeanFactory()).create(
    weights_type.trainable, tff.TensorType(np.float32)
  )
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer, weights_type)
  return tff.learning.templates.compose_learning_process(
    initial_model_weights_fn, distributor, client_work, aggregator, finalizer
  )
