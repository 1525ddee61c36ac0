"""Client optimizers on stacked clients: one local step of K clients at once (engine vectorised).

The K clients' weights, gradients and minibatch losses come stacked on a leading axis; each
client's step is the one its client optimizer takes alone (`optimizers.client`), in one of
three forms:

* `SharedOptimizer` (sgd, sgdm, adam, adagrad): the TFF optimizer's `next` once on the stacked
  tensors. Its accumulators are stacked like the weights; its hyperparameters and step count
  are shared, which is exact: every client still training has taken the same number of steps,
  and a client whose steps are done is never active again.
* `PerClientSteps` (delta_sgd): the optimizer's step on per-client norms (||x_k - x_{k-1}||,
  ||g_k - g_{k-1}||, [K]) with its whole state stacked, because its step size is per client.
  With `gradient='same_batch'` the engine also evaluates each client's gradient at its
  previous iterate on the step's minibatch.
* `PolyakSteps` (sps): the stochastic Polyak step of `optimizers.sps` (`sps.step_size`, the
  same function) on the clients' minibatch losses and gradient norms, elementwise over [K].

A client whose steps are done (`active` false) keeps its weights and, where the state feeds
its statistics, its optimizer state. `statistics(state)` gives the client rule's per-client
statistics (e.g. Delta-SGD's mean step size) as [K] tensors, from the stacked state.
"""

import collections
import dataclasses
from typing import Any

import tensorflow as tf

from tff_adaptive.core import local_loop
from tff_adaptive.core import tree
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.optimizers import delta_sgd
from tff_adaptive.optimizers import dog
from tff_adaptive.optimizers import sps


def _stack(value: tf.Tensor, num_clients: tf.Tensor) -> tf.Tensor:
  return tf.repeat(tf.convert_to_tensor(value)[None], num_clients, axis=0)


def per_client(mask: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
  """A [K] mask reshaped to broadcast against a [K, ...] tensor."""
  return tf.reshape(mask, tf.concat([[-1], tf.ones([like.shape.rank - 1], tf.int32)], 0))


def per_client_sq_norm(tensors) -> tf.Tensor:
  """The squared global norm of each client's slice of stacked tensors, [K]."""
  return tf.add_n(
    [tf.reduce_sum(tf.reshape(tf.square(t), [tf.shape(t)[0], -1]), axis=1) for t in tensors]
  )


def per_client_norm(tensors) -> tf.Tensor:
  """The global norm of each client's slice of stacked tensors, [K]."""
  return tf.sqrt(per_client_sq_norm(tensors))


def keep_active(active: tf.Tensor, new: Any, old: Any) -> Any:
  """`new` for the clients still training, `old` for the others (leaves stacked [K, ...])."""
  return tf.nest.map_structure(lambda n, o: tf.where(per_client(active, n), n, o), new, old)


class SharedOptimizer:
  """A `tff.learning.optimizers.Optimizer` stepped once on the stacked clients."""

  needs_previous_gradient = False

  def __init__(self, optimizer, rule_statistics):
    self.optimizer = optimizer
    self._statistics = rule_statistics

  def init(self, params, specs, learning_rate, num_clients):
    del params
    state = self.optimizer.initialize(specs)
    state[local_loop.LEARNING_RATE_KEY] = learning_rate
    state = tf.nest.map_structure(tf.convert_to_tensor, state)
    return tf.nest.map_structure(lambda t: _stack(t, num_clients) if t.shape.rank else t, state)

  def step(self, state, params, grads, losses, previous_grads, active):
    del losses, previous_grads
    state, new_params = self.optimizer.next(state, params, grads)
    frozen = lambda: tuple(keep_active(active, tuple(new_params), tuple(params)))
    return state, tf.cond(tf.reduce_all(active), lambda: tuple(new_params), frozen)

  def statistics(self, state):
    return self._statistics(state)


class PerClientSteps:
  """Delta-SGD on the stacked clients: its step (`delta_sgd._DeltaSGD.step_from_norms`, the same
  function) on per-client norms ||x_k - x_{k-1}||, ||g_k - g_{k-1}|| ([K]), its state stacked."""

  def __init__(self, optimizer, rule_statistics, same_batch: bool):
    self.optimizer = optimizer
    self._statistics = rule_statistics
    self.needs_previous_gradient = same_batch

  def init(self, params, specs, learning_rate, num_clients):
    state = self.optimizer.initialize(specs)
    state[local_loop.LEARNING_RATE_KEY] = learning_rate  # as `local_loop.optimizer_step`
    state = tf.nest.map_structure(lambda t: _stack(t, num_clients), state)
    if self.needs_previous_gradient:  # x_prev := x_0, as `delta_sgd.delta_sgd_step`
      state[delta_sgd.X_PREV] = tuple(params)
    return state

  def previous_point(self, state):
    """x_{k-1} of every client (stacked), where 'same_batch' evaluates its previous gradient."""
    return tuple(state[delta_sgd.X_PREV])

  def step(self, state, params, grads, losses, previous_grads, active):
    del losses
    previous = state[delta_sgd.G_PREV] if previous_grads is None else tuple(previous_grads)
    params, grads = tuple(params), tuple(grads)
    new_state, new_params = self.optimizer.step_from_norms(
      state,
      params,
      list(params),
      list(grads),
      per_client_norm(tree.sub(params, tuple(state[delta_sgd.X_PREV]))),
      per_client_norm(tree.sub(grads, tuple(previous))),
      scale=per_client,
    )
    return (
      keep_active(active, new_state, state),
      tuple(keep_active(active, tuple(new_params), params)),
    )

  def statistics(self, state):
    return self._statistics(state)


class PolyakSteps:
  """SPS on the stacked clients: eta_k per client from its minibatch loss and gradient norm."""

  needs_previous_gradient = False

  def __init__(self, hparams: sps.SPSHParams):
    self.hparams = hparams

  def init(self, params, specs, learning_rate, num_clients):
    del params, specs, learning_rate
    return collections.OrderedDict(
      [
        (sps.STEP, tf.zeros([num_clients], tf.int32)),
        (sps.ETA, tf.fill([num_clients], tf.constant(self.hparams.init_step_size, tf.float32))),
        (sps.STEP_SIZE_SUM, tf.zeros([num_clients], tf.float32)),
      ]
    )

  def step(self, state, params, grads, losses, previous_grads, active):
    del previous_grads
    norm_sq = per_client_sq_norm(grads)
    eta = sps.step_size(state[sps.ETA], tf.cast(losses, tf.float32), norm_sq, self.hparams)
    new_params = tuple(x - tf.cast(per_client(eta, x), x.dtype) * g for x, g in zip(params, grads))
    new_state = collections.OrderedDict(
      [
        (sps.STEP, state[sps.STEP] + 1),
        (sps.ETA, eta),
        (sps.STEP_SIZE_SUM, state[sps.STEP_SIZE_SUM] + eta),
      ]
    )
    return keep_active(active, new_state, state), keep_active(active, new_params, tuple(params))

  def statistics(self, state):
    return sps.statistics(state)


class DoGSteps:
  """DoG / L-DoG on K stacked clients: `optimizers.dog.dog_step` with per-client norms ([K]
  from the stacked tensors) and its whole state stacked, every client its own step sizes."""

  needs_previous_gradient = False

  def __init__(self, optimizer):
    self.optimizer = optimizer

  def init(self, params, specs, learning_rate, num_clients):
    del params, learning_rate  # x_0 is set on the first step; DoG reads no learning rate
    state = self.optimizer.initialize(specs)
    return tf.nest.map_structure(lambda t: _stack(tf.convert_to_tensor(t), num_clients), state)

  def step(self, state, params, grads, losses, previous_grads, active):
    del losses, previous_grads
    params = tuple(params)
    new_state, new_params = dog.dog_step(
      state,
      list(params),
      list(grads),
      self.optimizer.hparams,
      self.optimizer.layerwise,
      sq_norm=lambda t: per_client_sq_norm([t]),
      scale=per_client,
    )
    return keep_active(active, new_state, state), keep_active(active, tuple(new_params), params)

  def statistics(self, state):
    return dog.statistics(state)


# The stacked forms a client optimizer's entry names (`ClientOptimizerEntry.stacked`):
# (its config, its rule) -> a stepper.


def shared_optimizer(config, rule) -> SharedOptimizer:
  """A TFF optimizer whose `next` runs on the stacked weights (sgd, sgdm, adam, adagrad)."""
  del config
  return SharedOptimizer(rule.optimizer, rule.statistics)


def polyak_steps(config, rule) -> PolyakSteps:
  """SPS's Polyak step from each client's minibatch loss and gradient norm."""
  del rule
  return PolyakSteps(config.sps)


def delta_sgd_steps(config, rule) -> PerClientSteps:
  """Delta-SGD's per-client step sizes; with 'same_batch' a second gradient at each client's
  previous iterate."""
  hparams = config.delta_sgd
  # The optimizer's step is the rule for either gradient option; 'same_batch' differs only
  # in the previous gradient it is given (evaluated by the engine on the step's minibatch).
  return PerClientSteps(
    delta_sgd.build_delta_sgd(dataclasses.replace(hparams, gradient='paper')),
    rule.statistics,
    same_batch=hparams.gradient == 'same_batch',
  )


def dog_steps(config, rule) -> DoGSteps:
  """DoG's and L-DoG's per-client step sizes (the rule's optimizer)."""
  del config
  return DoGSteps(rule.optimizer)


def build(client_optimizer_config, client_rule):
  """The stacked form of a client optimizer (`optimizers.ClientOptimizerConfig` and its rule),
  as its registry entry names it."""
  entry = optimizer_config.CLIENT_OPTIMIZERS[client_optimizer_config.name]
  if entry.stacked is None:
    raise ValueError(f'client optimizer {client_optimizer_config.name!r} has no stacked form')
  return entry.stacked(client_optimizer_config, client_rule)
