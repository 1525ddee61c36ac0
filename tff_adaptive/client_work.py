"""Client work of FedOpt: E epochs of local minibatch SGD, returning the model delta.

Reddi et al. 2021, Algorithm 5 (batched FedOpt): client i starts from the broadcast model x_t,
runs E epochs of minibatch ClientOpt (SGD, optionally with momentum) with learning rate
eta_l(t), and sends the pseudo-gradient g_i = x_t - x_i (TFF's sign) with weight n_i, its number
of examples.

How data reaches the client. TFF's own client work takes a `tf.data.Dataset` of minibatches
per client and iterates it inside the computation. Here each client's dataset has ONE element:
all of its examples as tensors (leading dimension = examples) plus a 2-element int64 seed
(`tf.data.Dataset.from_tensors`). The client takes that element and batches by gathering in a
`tf.while_loop`: each epoch visits a seeded permutation of the examples in minibatches of B (the
last one smaller when B does not divide n), the arithmetic of
`dataset.shuffle(n).batch(B).repeat(E)` with a stateless shuffle. A run is then a pure function
of its seeds, and a round avoids the per-batch dataset iteration that dominates TFF's runtime
on small models (see benchmarks/round_time.py).

`local_training` is a pure TF function callable outside TFF; `build_local_sgd_client_work`
wraps it into a `tff.learning.templates.ClientWorkProcess` whose state is the round number
(for the client learning-rate schedule).
"""

import collections
from collections.abc import Callable
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import schedules
from tff_adaptive import stateless_dropout

SEED_KEY = 'seed'
_LR_KEY = tff.learning.optimizers.LEARNING_RATE_KEY


@dataclasses.dataclass(frozen=True)
class ClientTrainingConfig:
  """Hyperparameters of local training.

  Attributes:
    learning_rate: eta_l, > 0.
    momentum: client SGD momentum in [0, 1); 0 is plain SGD.
    epochs: E, local epochs per round, >= 1.
    batch_size: B, >= 1.
    lr_schedule: the client learning-rate schedule over rounds.
  """

  learning_rate: float = 0.1
  momentum: float = 0.0
  epochs: int = 1
  batch_size: int = 20
  lr_schedule: schedules.ScheduleConfig = schedules.ScheduleConfig()

  def __post_init__(self):
    if not self.learning_rate > 0:
      raise ValueError(f'client learning_rate must be > 0, got {self.learning_rate}')
    if not 0.0 <= self.momentum < 1.0:
      raise ValueError(f'client momentum must be in [0, 1), got {self.momentum}')
    if self.epochs < 1:
      raise ValueError(f'client epochs must be >= 1, got {self.epochs}')
    if self.batch_size < 1:
      raise ValueError(f'client batch_size must be >= 1, got {self.batch_size}')

  def optimizer(self) -> tff.learning.optimizers.Optimizer:
    return tff.learning.optimizers.build_sgdm(self.learning_rate, momentum=self.momentum or None)


def epoch_permutations(n: tf.Tensor, epochs: int, seed: tf.Tensor) -> tf.Tensor:
  """[epochs, n] int32: a stateless random permutation of range(n) per epoch."""
  seed = tf.cast(seed, tf.int64)
  perms = []
  for e in range(epochs):
    keys = tf.random.stateless_uniform(
      [n], seed=tf.stack([seed[0], seed[1] * 1009 + e]), dtype=tf.float32
    )
    perms.append(tf.argsort(keys, stable=True))
  return tf.stack(perms)


def local_training(
  model: tff.learning.models.VariableModel,
  optimizer: tff.learning.optimizers.Optimizer,
  learning_rate: tf.Tensor,
  initial_weights: tff.learning.models.ModelWeights,
  data: collections.OrderedDict,
  batch_size: int,
  epochs: int,
) -> tuple[tff.learning.templates.ClientResult, tf.Tensor]:
  """Runs E epochs of minibatch ClientOpt from `initial_weights` on one client's tensors.

  Args:
    model: a VariableModel; its metrics accumulate over the local batches.
    optimizer: the client optimizer (re-initialized every round, as in Algorithm 5).
    learning_rate: eta_l for this round.
    initial_weights: x_t.
    data: OrderedDict of per-example tensors plus SEED_KEY (int64[2]).
    batch_size: B.
    epochs: E.

  Returns:
    (ClientResult(update = x_t - x_i, update_weight = n_i), n_i as float32).
  """
  weights = tff.learning.models.ModelWeights.from_model(model)
  tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
  features = collections.OrderedDict((k, v) for k, v in data.items() if k != SEED_KEY)
  n = tf.shape(tf.nest.flatten(features)[0])[0]
  steps_per_epoch = (n + batch_size - 1) // batch_size
  seed = tf.cast(data[SEED_KEY], tf.int64)
  perms = epoch_permutations(n, epochs, seed)
  trainable = tuple(weights.trainable)
  specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
  opt_state = optimizer.initialize(specs)
  opt_state[_LR_KEY] = tf.cast(learning_rate, tf.float32)

  def step(i, opt_state):
    epoch, b = i // steps_per_epoch, i % steps_per_epoch
    idx = perms[epoch, b * batch_size : tf.minimum((b + 1) * batch_size, n)]
    batch = tf.nest.map_structure(lambda t: tf.gather(t, idx), features)
    step_seed = tf.stack([seed[0], seed[1] * 1_000_003 + tf.cast(i, tf.int64)])
    with tf.GradientTape() as tape, stateless_dropout.step_seeds(step_seed):
      output = model.forward_pass(batch, training=True)
    grads = tape.gradient(output.loss, trainable)
    opt_state, new_weights = optimizer.next(opt_state, trainable, grads)
    for v, w in zip(trainable, new_weights):
      v.assign(w)
    return i + 1, opt_state

  tf.while_loop(lambda i, _: i < steps_per_epoch * epochs, step, (tf.constant(0), opt_state))
  update = tf.nest.map_structure(tf.subtract, initial_weights.trainable, weights.trainable)
  num_examples = tf.cast(n, tf.float32)
  return tff.learning.templates.ClientResult(
    update=update, update_weight=num_examples
  ), num_examples


def client_data_type(model: tff.learning.models.VariableModel) -> tff.Type:
  """The TFF type of one client's data: a sequence of (model batch spec + seed) elements.

  Only the first element is used: it holds all of the client's examples.
  """
  element = collections.OrderedDict(model.input_spec)
  element[SEED_KEY] = tf.TensorSpec([2], tf.int64)
  return tff.SequenceType(tff.types.tensorflow_to_type(element))


def build_local_sgd_client_work(
  model_fn: Callable[[], tff.learning.models.VariableModel],
  config: ClientTrainingConfig,
) -> tff.learning.templates.ClientWorkProcess:
  """FedOpt's client work (Algorithm 5) with a round-indexed client learning rate.

  State: the round number t (starting at 0), which sets eta_l(t) = schedule(t).

  Args:
    model_fn: no-arg callable building a fresh `tff.learning.models.VariableModel`.
    config: `ClientTrainingConfig`.

  Returns:
    A ClientWorkProcess taking CLIENTS-placed `client_data_type(model)` values.
  """
  lr_fn = schedules.build_schedule(config.learning_rate, config.lr_schedule)
  optimizer = config.optimizer()
  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = client_data_type(model)
    metrics_aggregation_fn = tff.learning.metrics.sum_then_finalize(model.metric_finalizers())

  @tff.tensorflow.computation
  def initial_round():
    return tf.constant(0, tf.int32)

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_round, tff.SERVER)

  @tff.tensorflow.computation(np.int32)
  def next_round(t):
    return t + 1

  @tff.tensorflow.computation(np.int32)
  def client_lr(t):
    return tf.cast(lr_fn(t), tf.float32)

  @tff.tensorflow.computation(np.float32, weights_type, data_type)
  def client_update(lr, initial_weights, data):
    local_model = model_fn()

    @tf.function
    def train():
      tensors = data.get_single_element()
      result, _ = local_training(
        local_model, optimizer, lr, initial_weights, tensors, config.batch_size, config.epochs
      )
      return result, local_model.report_local_unfinalized_metrics()

    return train()

  @tff.federated_computation(
    init_fn.type_signature.result,
    tff.FederatedType(weights_type, tff.CLIENTS),
    tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(state, weights, client_data):
    lr = tff.federated_broadcast(tff.federated_map(client_lr, state))
    client_result, model_outputs = tff.federated_map(client_update, (lr, weights, client_data))
    measurements = tff.federated_zip(
      collections.OrderedDict(train=metrics_aggregation_fn(model_outputs))
    )
    return tff.templates.MeasuredProcessOutput(
      tff.federated_map(next_round, state), client_result, measurements
    )

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)
