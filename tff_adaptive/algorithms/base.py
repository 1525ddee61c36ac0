"""What a federated algorithm is: four parts written once as pure TF, run by either engine.

An `Algorithm` says WHAT a round computes; an engine (`tff_adaptive.engines`) says HOW clients
are run: as a `tff.learning.templates.LearningProcess` on TFF's runtime, or in one compiled TF
function in this process (CPU or GPU). Round t, model x_t, sampled clients S:

1. broadcast: every client receives x_t, the round's client learning rate eta_l(t) and
   `client_broadcast(server_extra, t)` (e.g. SCAFFOLD's server control variate c, FedPA's
   "past the burn-in rounds" flag);
2. client update (`client_update`): client i trains from x_t on its data and returns a
   `ClientOutput`: the update u_i = x_t - x_i (TFF's sign: initial minus trained), its weight
   w_i, per-client statistics, extras for the server, and its new state (stateful algorithms);
3. aggregation: g_t = the `UpdateAggregation` of (u_i, w_i) (weighted mean by default), extras
   averaged with the same weights, statistics summarised as mean/min/max over clients;
4. server update: x_{t+1} = ServerOpt(x_t, g_t) (a `tff.learning.optimizers.Optimizer`), then
   `server_extra_update(server_extra, mean extras, |S|)`. A non-finite g_t rejects the round's
   server update: x_t, the optimizer state and the extra server state are kept, as TFF's
   finalizer keeps the model and optimizer state (`apply_server_optimizer`,
   `Algorithm.next_server_extra`).

Stateful algorithms (`stateful_clients = True`) receive each client's stored state, or
`initial_client_state(broadcast)` for a client sampled for the first time, and return the new
state, which the training loop stores by client id (`tff_adaptive.loop.client_states`).

`ClientTrainingConfig` and the client weightings are defined without TensorFlow in
`algorithms.config` and re-exported here.
"""

import collections
from collections.abc import Callable
import functools
from typing import Any
from typing import NamedTuple

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.algorithms.config import CLIENT_WEIGHTINGS  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import EXAMPLE_WEIGHTING  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import UNIFORM_WEIGHTING
from tff_adaptive.algorithms.config import ClientTrainingConfig
from tff_adaptive.core import local_loop
from tff_adaptive.core import seeds
from tff_adaptive.core import tree
from tff_adaptive.core import validation
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers import schedules

ModelFn = Callable[[], tff.learning.models.VariableModel]


class ClientOutput(NamedTuple):
  """What one client returns.

  Attributes:
    update: u_i = x_t - x_i, a tuple of tensors shaped like the model's trainable weights.
    weight: w_i, float32 scalar (n_i, the client's number of examples, for FedAvg).
    stats: OrderedDict of float32 scalars (e.g. `local_steps`), reported as their mean, min
      and max over the round's clients (`client_<name>_<stat>` in metrics.csv).
    extras: a nest of float32 tensors aggregated as the w-weighted mean for the server update
      (e.g. SCAFFOLD's control-variate change); () if none.
    state: the client's new state (stateful algorithms), () otherwise.
  """

  update: Any
  weight: tf.Tensor
  stats: collections.OrderedDict
  extras: Any = ()
  state: Any = ()


class FullPass(NamedTuple):
  """A pass over a client's local data before its local training (`Algorithm.full_passes`):
  F_k and optionally grad F_k, as `core.local_loop.full_loss_and_gradient` computes them.

  Attributes:
    gradient: also grad F_k (else the pass gives the loss only).
    max_examples: over the first min(n_k, max_examples) examples (None: all).
    at_broadcast: at the trainable weights the client receives as its broadcast (AdaFedAdam's
      x_0) instead of x_t.
  """

  gradient: bool = False
  max_examples: int | None = None
  at_broadcast: bool = False


class EpochMeans(NamedTuple):
  """Iterate means a client's local training collects for `client_result` (`Algorithm.epoch_means`):
  FedPA's IASG posterior samples.

  In a round where `active(broadcast)` is true, epoch e of a client with examples, for
  first_epoch <= e < first_epoch + count, gives the mean of the iterates after each of its local
  steps, x_bar_e = (1 / K_e) sum_k x_k (K_e = ceil(n_i / B) steps). They reach `client_result` as
  `LocalResult.epoch_means` = (n, means): n (int32) means collected, means[j] (stacked on a leading
  axis of `count`, zeros past n) the one of epoch first_epoch + j.

  Attributes:
    first_epoch: the first epoch whose mean is collected (0-based; FedPA's burn-in epochs).
    count: how many epochs' means, at most.
    active: broadcast -> bool scalar, whether the round collects them.
  """

  first_epoch: int
  count: int
  active: Callable[[Any], tf.Tensor]


class Evaluation(NamedTuple):
  """A `FullPass`'s result: F_k (float32 scalar) and grad F_k (tuple of tensors, or None)."""

  loss: tf.Tensor
  gradient: Any = None


class LocalResult(NamedTuple):
  """What `Algorithm.client_result` makes a client's output from.

  Attributes:
    update: u_i = x_t - x_i after local training (tuple of tensors).
    num_steps: K_i, the local steps taken (int32 scalar).
    stats: `local_steps` and the client optimizer's statistics (OrderedDict of float32).
    num_examples: n_i, float32.
    learning_rate: eta_l(t), float32.
    passes: OrderedDict name -> `Evaluation`, the algorithm's `full_passes`.
    broadcast: what the client received besides x_t.
    client_state: the client's state on entry (stateful algorithms), else ().
    initial: x_t's trainable weights (tuple of tensors).
    epoch_means: (n, means) as `EpochMeans` says, for an algorithm with `epoch_means`; else ().
  """

  update: Any
  num_steps: tf.Tensor
  stats: collections.OrderedDict
  num_examples: tf.Tensor
  learning_rate: tf.Tensor
  passes: collections.OrderedDict
  broadcast: Any = ()
  client_state: Any = ()
  initial: Any = ()
  epoch_means: Any = ()


class Algorithm:
  """A federated algorithm as pure TF parts (see the module docstring).

  Subclasses say what their clients compute in three parts (`full_passes`,
  `transform_gradient` and `epoch_means` around the local steps, `client_result`; or override
  `client_update` as a whole, which the vectorised engine then refuses) and, where
  they keep more than the model and the server optimizer's state, the `server_extra_*`,
  `client_broadcast` and client-state methods.
  """

  name: str = 'algorithm'
  stateful_clients: bool = False
  # Whether a client's loss at the initial model must be > 0 (AdaFedAdam's I_k): the training
  # loop then names a client with F_k(x_0) = 0 when a round reports an unusable client.
  needs_positive_initial_loss: bool = False

  def __init__(
    self,
    model_fn: ModelFn,
    client: ClientTrainingConfig,
    server_optimizer: tff.learning.optimizers.Optimizer,
    server_lr_schedule: schedules.ScheduleConfig | None = None,
    server_learning_rate: float | None = None,
    aggregation: aggregators.UpdateAggregation | None = None,
  ):
    """Builds the algorithm's parts.

    Args:
      model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
      client: local training configuration.
      server_optimizer: a `tff.learning.optimizers.Optimizer` applied to g_t.
      server_lr_schedule: optional schedule of the server learning rate over rounds; wraps the
        optimizer in `tff.learning.optimizers.schedule_learning_rate` (needs
        `server_learning_rate`, the rate at round 0).
      server_learning_rate: eta at round 0, for `server_lr_schedule`.
      aggregation: how updates are combined; default `aggregators.weighted_mean()`.
    """
    builder = f'build_{self.name}'
    check = functools.partial(validation.check_type, builder)
    check(
      'model_fn', model_fn, callable, 'a no-arg callable returning a tff.learning VariableModel'
    )
    check('client', client, ClientTrainingConfig, 'an algorithms.ClientTrainingConfig')
    check(
      'server_optimizer',
      server_optimizer,
      tff.learning.optimizers.Optimizer,
      'a tff.learning.optimizers.Optimizer (e.g. optimizers.build_fedadam(0.01) or '
      'tff.learning.optimizers.build_sgdm(1.0)), not a Keras optimizer',
    )
    check(
      'server_lr_schedule',
      server_lr_schedule,
      (schedules.ScheduleConfig, type(None)),
      'None or an optimizers.ScheduleConfig',
    )
    check(
      'aggregation',
      aggregation,
      (aggregators.UpdateAggregation, type(None)),
      'None or an aggregators.UpdateAggregation (e.g. aggregators.weighted_mean())',
    )
    self.model_fn = model_fn
    self.client = client
    self.client_rule = client_optimizers.build_client_rule(client.optimizer)
    # The client optimizer as a TFF optimizer; None for rules that need more than gradients.
    self.client_optimizer = self.client_rule.optimizer
    self.client_lr_schedule = schedules.build_schedule(
      client.optimizer.learning_rate, client.lr_schedule
    )
    if server_lr_schedule is not None and server_lr_schedule.name != 'constant':
      if server_learning_rate is None:
        raise ValueError('server_learning_rate is needed with a server_lr_schedule')
      server_optimizer = tff.learning.optimizers.schedule_learning_rate(
        server_optimizer, schedules.build_schedule(server_learning_rate, server_lr_schedule)
      )
    self.server_optimizer = server_optimizer
    self.aggregation = aggregation or aggregators.weighted_mean()
    if self.aggregation.differentially_private and algorithm_config.dp_refusal(self.name):
      raise ValueError(f'{builder}: {algorithm_config.dp_refusal(self.name)}')
    if self.aggregation.compressed and algorithm_config.compression_refusal(self.name):
      raise ValueError(f'{builder}: {algorithm_config.compression_refusal(self.name)}')

  # -- Server-held state besides the model and the server optimizer's state. -----------------

  def server_extra_init(self, specs: tuple[tf.TensorSpec, ...]) -> Any:
    """The algorithm's extra server state at round 0, given the trainable weights' specs."""
    del specs
    return ()

  def client_broadcast(self, server_extra: Any, round_num: tf.Tensor) -> Any:
    """What every sampled client receives besides x_t and eta_l(t).

    Args:
      server_extra: the extra server state (() for algorithms without one).
      round_num: t, int32 scalar, 0 for the first round.
    """
    del server_extra, round_num
    return ()

  def server_extra_update(self, server_extra: Any, extras_mean: Any, num_clients: tf.Tensor) -> Any:
    """The extra server state after a round, from the clients' weighted-mean extras."""
    del extras_mean, num_clients
    return server_extra

  def next_server_extra(
    self, server_extra: Any, extras_mean: Any, num_clients: tf.Tensor, update_non_finite: tf.Tensor
  ) -> Any:
    """`server_extra_update`, or `server_extra` unchanged when the round was rejected."""
    updated = self.server_extra_update(server_extra, extras_mean, num_clients)
    rejected = tf.cast(update_non_finite, tf.bool)
    return tf.nest.map_structure(
      lambda new, old: tf.where(rejected, old, new), updated, server_extra
    )

  def server_extra_for_model(
    self, server_extra: Any, model_weights: tff.learning.models.ModelWeights
  ) -> Any:
    """The extra server state once the model that training starts from, x_0, is set.

    Engines call it when the initial model weights are set (`Engine.initialize`, the TFF
    process's `set_model_weights`); e.g. AdaFedAdam keeps x_0 for the clients' F_k(x_0).
    """
    del model_weights
    return server_extra

  def released_weights(
    self, model_weights: tff.learning.models.ModelWeights, server_optimizer_state: Any
  ) -> tff.learning.models.ModelWeights:
    """The model the algorithm releases (evaluated, exported) from the trained model x_{t+1}
    and the server optimizer's state; training continues from x_{t+1} either way. Default:
    x_{t+1}. FedExP releases the average of its last two iterates (`algorithms.fedexp`)."""
    del server_optimizer_state
    return model_weights

  # -- The server step. ------------------------------------------------------------------------

  def server_update(self, optimizer_state: Any, trainable: Any, aggregate: Any):
    """x_{t+1} = ServerOpt(x_t, g_t) from the aggregation's result; see `apply_server_optimizer`.

    Returns (optimizer state, trainable weights, update_non_finite int32). Algorithms whose
    aggregate carries more than g_t (AdaFedAdam's certainty C) override it and
    `build_finalizer`.
    """
    return apply_server_optimizer(self.server_optimizer, optimizer_state, trainable, aggregate)

  def build_finalizer(self, weights_type) -> tff.learning.templates.FinalizerProcess:
    """The server step as a TFF finalizer: `build_apply_optimizer_finalizer` by default."""
    return tff.learning.templates.build_apply_optimizer_finalizer(
      self.server_optimizer, weights_type
    )

  @property
  def fits_templates(self) -> bool:
    """Whether the algorithm is TFF's four template parts: no extra server or client state.

    True unless clients keep state or the class overrides an extra-server-state method. A
    `client_broadcast` that reads only the round number fits: the client work's state is t.
    """
    own = type(self)
    return not self.stateful_clients and all(
      getattr(own, name) is getattr(Algorithm, name)
      for name in ('server_extra_init', 'server_extra_update', 'server_extra_for_model')
    )

  @property
  def extra_from_initial_model(self) -> bool:
    """Whether the extra server state is set from x_0 alone and no round changes it.

    True when clients keep no state, `server_extra_for_model` is overridden and neither
    `server_extra_update` nor `next_server_extra` is (AdaFedAdam: x_0 for F_k(x_0)). Such an
    algorithm has a `ClientWorkProcess` too: its state keeps the extra state, set from the
    model that its first round's clients receive (x_0), see `engines.build_client_work`.
    """
    own = type(self)
    return (
      not self.stateful_clients
      and own.server_extra_for_model is not Algorithm.server_extra_for_model
      and all(
        getattr(own, name) is getattr(Algorithm, name)
        for name in ('server_extra_update', 'next_server_extra')
      )
    )

  # -- Clients. --------------------------------------------------------------------------------

  def initial_client_state(self, broadcast: Any) -> Any:
    """The state of a client sampled for the first time (stateful algorithms)."""
    del broadcast
    return ()

  def full_passes(self) -> dict[str, 'FullPass']:
    """The passes over a client's data before its local training, by name (default: none).

    E.g. q-FedAvg's F_k(x_t), AdaFedAdam's F_k(x_0) and (F_k, grad F_k)(x_t). They are
    evaluated in this order, and `client_result` receives them as `LocalResult.passes`.
    """
    return {}

  def transforms_gradient(self) -> bool:
    """Whether `transform_gradient` changes the local gradients (default: no)."""
    return False

  def transform_gradient(
    self, gradient: Any, x: Any, x_t: Any, broadcast: Any, client_state: Any
  ) -> Any:
    """What the client optimizer sees instead of the local gradient g at x (default: g).

    Pure and elementwise in the weights, so the same function serves one client's tensors or
    a stack of clients' (x with a leading client axis; x_t, broadcast broadcast over it).
    """
    del x, x_t, broadcast, client_state
    return gradient

  def epoch_means(self) -> EpochMeans | None:
    """The iterate means local training collects for `client_result` (FedPA); None: none."""
    return None

  def client_result(self, result: 'LocalResult') -> ClientOutput:
    """Client i's output from its local training (default: FedOpt's u_i, w_i, statistics)."""
    return ClientOutput(
      update=result.update, weight=self.weight_of(result.num_examples), stats=result.stats
    )

  def client_update(
    self,
    model: tff.learning.models.VariableModel,
    initial_weights: tff.learning.models.ModelWeights,
    data: collections.OrderedDict,
    seed: tf.Tensor,
    learning_rate: tf.Tensor,
    broadcast: Any,
    client_state: Any,
  ) -> ClientOutput:
    """Client i's work in one round (traced inside a TF function by either engine).

    The `full_passes`, then local training on the `transform_gradient`-ed gradients
    (collecting the `epoch_means`), then `client_result`; the engine "vectorised" runs the same
    parts for all of a round's clients at once. An algorithm whose client work has another shape
    may override it as a whole (the vectorised engine then refuses it).

    Args:
      model: the workspace model; its variables hold nothing meaningful on entry.
      initial_weights: x_t (trainable and non-trainable tensors).
      data: OrderedDict of the client's per-example tensors.
      seed: int64[2], the client's seed for this round.
      learning_rate: eta_l(t).
      broadcast: `client_broadcast(server_extra, t)`.
      client_state: the client's state (stateful algorithms), else ().

    Returns:
      A `ClientOutput`.
    """
    passes = collections.OrderedDict()
    for name, full_pass in self.full_passes().items():
      at = initial_weights
      if full_pass.at_broadcast:
        at = tff.learning.models.ModelWeights(tuple(broadcast), initial_weights.non_trainable)
      assign_weights(model, at)
      passes[name] = Evaluation(
        *local_loop.full_loss_and_gradient(
          model, data, full_pass.max_examples, gradient=full_pass.gradient
        )
      )
    transform = None
    if self.transforms_gradient():
      x_t = tuple(initial_weights.trainable)
      transform = lambda g, model: self.transform_gradient(
        g, tuple(model.trainable_variables), x_t, broadcast, client_state
      )
    step = self.local_step(learning_rate, transform)
    x_t = tuple(tf.convert_to_tensor(x) for x in initial_weights.trainable)
    means = self.epoch_means()
    if means is not None:
      batches = local_loop.steps_per_epoch(local_loop.num_examples(data), self.client.batch_size)
      step = collecting_epoch_means(step, means, means.active(broadcast), x_t, batches)
    state, update, num_steps = self.local_training(model, initial_weights, data, seed, step)
    collected = ()
    if means is not None:
      state, _, _, collected = state
    return self.client_result(
      LocalResult(
        update=update,
        num_steps=num_steps,
        stats=self.client_statistics(state, num_steps),
        num_examples=example_weight(data),
        learning_rate=tf.cast(learning_rate, tf.float32),
        passes=passes,
        broadcast=broadcast,
        client_state=client_state,
        initial=x_t,
        epoch_means=collected,
      )
    )

  # -- Shared helpers for subclasses. ----------------------------------------------------------

  def local_step(
    self,
    learning_rate: tf.Tensor,
    gradient_transform: local_loop.GradientTransform | None = None,
  ) -> local_loop.LocalStep:
    """One local step of the client optimizer at eta_l(t), optionally on transformed gradients."""
    return self.client_rule.local_step(learning_rate, gradient_transform)

  def client_statistics(self, step_state: Any, num_steps: tf.Tensor) -> collections.OrderedDict:
    """K (`local_steps`) and the client optimizer's own statistics (e.g. `step_size`)."""
    stats = collections.OrderedDict(local_steps=tf.cast(num_steps, tf.float32))
    stats.update(self.client_rule.statistics(step_state))
    return stats

  def client_epochs(self, seed: tf.Tensor) -> tf.Tensor | None:
    """E_i: None (every client runs `epochs`) or, with `max_epochs`, U{epochs..max_epochs}.

    Drawn from the client's round seed (a function of the run's seed, the round and the
    client), so it is reproducible and independent of the engine.
    """
    if self.client.max_epochs is None or self.client.max_epochs == self.client.epochs:
      return None
    return seeds.client_epochs(seed, self.client.epochs, self.client.max_epochs)

  def client_weight(self, data: collections.OrderedDict) -> tf.Tensor:
    """w_i: n_i ('example' weighting) or 1 ('uniform'), float32; 0 for a client without data."""
    return self.weight_of(example_weight(data))

  def weight_of(self, n: tf.Tensor) -> tf.Tensor:
    """w from n, float32 (any shape, e.g. one per client): n, or min(n, 1) for 'uniform'."""
    if self.client.weighting == UNIFORM_WEIGHTING:
      return tf.minimum(n, 1.0)
    return n

  def local_training(
    self,
    model: tff.learning.models.VariableModel,
    initial_weights: tff.learning.models.ModelWeights,
    data: collections.OrderedDict,
    seed: tf.Tensor,
    local_step: local_loop.LocalStep,
  ) -> tuple[Any, Any, tf.Tensor]:
    """Starts `model` at x_t and runs the local loop; returns (step state, u_i, K).

    With `ClientTrainingConfig.max_epochs` the client's epochs are `client_epochs(seed)`.
    """
    assign_weights(model, initial_weights)
    state, num_steps = local_loop.run_local_steps(
      model,
      data,
      seed,
      self.client.batch_size,
      self.client.max_epochs or self.client.epochs,
      local_step,
      num_epochs=self.client_epochs(seed),
    )
    trained = tf.nest.pack_sequence_as(initial_weights.trainable, model.trainable_variables)
    update = tf.nest.map_structure(tf.subtract, initial_weights.trainable, trained)
    return state, update, num_steps


def collecting_epoch_means(
  inner: local_loop.LocalStep,
  means: EpochMeans,
  active: tf.Tensor,
  x_t: tuple[tf.Tensor, ...],
  steps_per_epoch: tf.Tensor,
) -> local_loop.LocalStep:
  """`inner`, also collecting the `EpochMeans` (`active`: this round's `means.active`).

  Its state is (inner's state, w_e, the running sum, (n, means)); each step adds w_e x
  to a running sum (w_e = 1 in a collected epoch, 0 otherwise: no branch per step), and the
  epoch's end divides it by K_e into means[n] (a client without examples takes no step and
  collects nothing).
  """
  first, count = means.first_epoch, means.count
  dtype = x_t[0].dtype

  def collects(epoch):
    return tf.logical_and(active, tf.logical_and(epoch >= first, epoch < first + count))

  def init(model):
    zeros = tuple(tf.zeros_like(x) for x in x_t)
    slots = tuple(tf.zeros([count, *x.shape], x.dtype) for x in x_t)
    return inner.init(model), tf.cast(collects(0), dtype), zeros, (tf.constant(0), slots)

  def apply(model, batch, step_seed, state):
    inner_state, weight, sums, collected = state
    inner_state = inner.apply(model, batch, step_seed, inner_state)
    sums = tuple(s + weight * v.read_value() for s, v in zip(sums, model.trainable_variables))
    return inner_state, weight, sums, collected

  def end_epoch(model, epoch, state):
    inner_state, _, sums, (n, slots) = state
    if inner.end_epoch is not None:
      inner_state = inner.end_epoch(model, epoch, inner_state)

    def add():
      k = tf.cast(steps_per_epoch, dtype)
      return n + 1, tuple(
        tf.tensor_scatter_nd_update(m, [[n]], (s / k)[tf.newaxis]) for m, s in zip(slots, sums)
      )

    collected = tf.cond(
      tf.logical_and(collects(epoch), steps_per_epoch > 0), add, lambda: (n, slots)
    )
    zeros = tuple(tf.zeros_like(s) for s in sums)
    return inner_state, tf.cast(collects(epoch + 1), dtype), zeros, collected

  return local_loop.LocalStep(init, apply, end_epoch)


def assign_weights(
  model: tff.learning.models.VariableModel, weights: tff.learning.models.ModelWeights
) -> None:
  """Writes `weights` (trainable and non-trainable) into the model's variables."""
  for v, w in zip(model.trainable_variables, weights.trainable):
    v.assign(w)
  for v, w in zip(model.non_trainable_variables, weights.non_trainable):
    v.assign(w)


def example_weight(data: collections.OrderedDict) -> tf.Tensor:
  """n_i as float32: FedAvg's aggregation weight."""
  return tf.cast(local_loop.num_examples(data), tf.float32)


def apply_server_optimizer(optimizer, opt_state, trainable, update):
  """x_{t+1} = ServerOpt(x_t, g_t), or (state, x_t) unchanged if g_t has a non-finite value.

  The rule of TFF's `build_apply_optimizer_finalizer` (`reject_non_finite_update`), for the
  engines that do not use that finalizer. Returns (state, trainable, update_non_finite int32).
  """
  update = tf.nest.pack_sequence_as(trainable, tf.nest.flatten(update))
  finite = tree.all_finite(update)
  new_state, new_trainable = optimizer.next(opt_state, trainable, update)
  keep = lambda new, old: tf.nest.map_structure(lambda a, b: tf.where(finite, a, b), new, old)
  opt_state = keep(new_state, opt_state)
  trainable = keep(new_trainable, trainable)
  return opt_state, trainable, tf.cast(tf.logical_not(finite), tf.int32)
