"""FedExP: federated averaging with a server step size extrapolated from the clients' updates.

Jhunjhunwala, Wang, Joshi. "FedExP: Speeding Up Federated Averaging via Extrapolation." ICLR
2023, Algorithm 1. Round t, M participating clients, each trained from x_t (local SGD steps)::

  Delta_i = x_t - x_i                              (this library's sign: initial minus trained)
  Delta_bar = sum_i w_i Delta_i / sum_i w_i
  eta_g = max(1, [sum_i w_i ||Delta_i||^2 / sum_i w_i] / (2 (||Delta_bar||^2 + eps')))
  x_{t+1} = ServerOpt(x_t, eta_g Delta_bar)        (SGD at eta = 1: x_t - eta_g Delta_bar)

With uniform weights the numerator is sum_i ||Delta_i||^2 / M, the paper's. eta_g is the step
that the projections onto the clients' convex sets would allow (POCS, the paper's motivation):
when the updates agree (||Delta_bar||^2 close to their mean squared norm) it is 1/2 and the
max keeps FedAvg's step; when they point apart it grows, up to M/2 for M orthogonal updates of
equal norm. The released (evaluated) model is the average of the last two iterates,
(x_t + x_{t+1}) / 2 (x_1 after the first round), the paper's remedy for the oscillation that
extrapolated steps cause; training continues from x_{t+1}.

Defaults follow the authors' code (github.com/Divyansh03/FedExP, main.py), which produced the
published numbers; each place where it differs from the paper is an option of `FedExPHParams`:

| option | default (code) | paper |
|---|---|---|
| `epsilon_scaling` | 'per_client': eps' = M eps (main.py line 404) | 'paper': eps' = eps |
| client weights (`--client_weighting`) | 'example': w_i = n_i, renormalised over the round (lines 247-252, 345-362) | 'uniform' (the same on the code's equal-sized CIFAR partitions) |
| `epsilon_decay` | 1 (constant; the code: 0.998^2 per round, before the round, with eta_l decaying by 0.998) | constant |

and `eps` itself: the code's 1e-3 (CIFAR-10/100, CINIC-10) or 1e-1 (EMNIST). `clip_at_one`
drops the max with 1, `eval_average='none'` releases x_{t+1}. Flower's FedExP baseline differs
from both (it trains from the averaged model); it is not followed.

Combinations (the paper's Sec. 6): `local='fedprox'` trains the clients on
f_i(x) + mu/2 ||x - x_t||^2 (FedProx-ExP), `local='scaffold'` with SCAFFOLD Option II's
corrected steps and control variates (SCAFFOLD-ExP); the server rule above is unchanged on their
Delta_i. Server momentum (FedAvgM-ExP): any server optimizer receives eta_g Delta_bar, so
`--server_optimizer=sgdm` is momentum on the extrapolated update. The authors' 'fedavgm(exp)'
is different and not offered: its momentum is never applied (a misspelt test, main.py line 370),
its numerator is a running sum A_t + 0.45 R_{t-1} and its eta_g is not capped at 1.

The aggregation is the algorithm's own, `extrapolated_mean` (a fold for the in-process engines
and `ExtrapolatedMeanFactory`, a `tff.aggregators.WeightedAggregationFactory` wrapping TFF's
`MeanFactory`): the client value is OrderedDict(update=Delta_i, sq_norm=||Delta_i||^2), the
result eta_g Delta_bar, its measurement `fedexp_eta_g`. Differential privacy and compression are
refused (`algorithms.config`): eta_g reads every client's ||Delta_i||^2 and their count, which
no DP mechanism here clips or noises. `FedExPHParams` is defined without TensorFlow in
`algorithms.config` and re-exported here.
"""

import collections
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive.algorithms import base
from tff_adaptive.algorithms import fedopt
from tff_adaptive.algorithms import fedprox
from tff_adaptive.algorithms import scaffold
from tff_adaptive.algorithms.config import FedExPHParams
from tff_adaptive.core import tree

UPDATE_KEY = aggregators.UPDATE_KEY
SQ_NORM_KEY = 'sq_norm'
MEASUREMENT = 'fedexp'  # the measurement group: metric `fedexp_eta_g`
ETA_G = 'eta_g'
# The server optimizer's state, wrapped to keep x_t for the released model.
INNER, PREVIOUS, STEPS = 'inner', 'previous', 'steps'


def round_epsilon(hparams: FedExPHParams, round_num: tf.Tensor) -> tf.Tensor:
  """eps_t = eps decay^(t + 1) (the authors' code decays before the round; decay 1: eps)."""
  t = tf.cast(round_num, tf.float32)
  return hparams.epsilon * tf.pow(tf.constant(hparams.epsilon_decay, tf.float32), t + 1.0)


def step_size(
  mean_sq_norm: tf.Tensor,
  delta_bar_sq_norm: tf.Tensor,
  num_clients: tf.Tensor,
  epsilon: tf.Tensor,
  hparams: FedExPHParams,
) -> tf.Tensor:
  """eta_g = max(1, mean ||Delta_i||^2 / (2 (||Delta_bar||^2 + eps'))) (Algorithm 1).

  eps' = M eps ('per_client') or eps ('paper'). 1 where the denominator is 0 (every update
  zero and eps = 0: no step either way).
  """
  if hparams.epsilon_scaling == 'per_client':
    epsilon = epsilon * tf.cast(num_clients, tf.float32)
  denominator = 2.0 * (delta_bar_sq_norm + epsilon)
  positive = denominator > 0
  safe = tf.where(positive, denominator, tf.ones_like(denominator))
  eta = tf.where(positive, mean_sq_norm / safe, tf.ones_like(mean_sq_norm))
  return tf.maximum(eta, 1.0) if hparams.clip_at_one else eta


def extrapolate(means: Any, num_clients: tf.Tensor, round_num: tf.Tensor, hparams: FedExPHParams):
  """(eta_g Delta_bar, eta_g) from the weighted means of Delta_i and ||Delta_i||^2."""
  delta_bar = tuple(means[UPDATE_KEY])
  eta = step_size(
    tf.cast(means[SQ_NORM_KEY], tf.float32),
    tf.cast(sq_norm(delta_bar), tf.float32),
    num_clients,
    round_epsilon(hparams, round_num),
    hparams,
  )
  return tree.scale(delta_bar, eta), eta


def sq_norm(values: Any) -> tf.Tensor:
  """||.||^2 over every entry of every tensor, float32."""
  return tf.add_n([tf.reduce_sum(tf.square(tf.cast(v, tf.float32))) for v in values])


def _measurements(eta: tf.Tensor) -> collections.OrderedDict:
  return collections.OrderedDict([(MEASUREMENT, collections.OrderedDict([(ETA_G, eta)]))])


class ExtrapolatedMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """FedExP's aggregation as a TFF factory: client value OrderedDict(update=Delta_i,
  sq_norm=||Delta_i||^2) with weight w_i -> eta_g Delta_bar (module docstring).

  TFF's `MeanFactory` takes the weighted means of both, a `federated_sum` counts the clients
  with w_i > 0 (M) and the state counts the rounds (for eps_t). Measurement: `fedexp/eta_g`.
  """

  def __init__(self, hparams: FedExPHParams = FedExPHParams()):
    self.hparams = hparams

  def create(self, value_type, weight_type):
    inner = tff.aggregators.MeanFactory().create(value_type, weight_type)
    hparams = self.hparams

    @tff.tensorflow.computation(weight_type)
    def participates(weight):
      return tf.cast(weight > 0, tf.float32)

    @tff.tensorflow.computation(
      inner.next.type_signature.result.result.member, np.float32, np.int32
    )
    def extrapolated(means, num_clients, round_num):
      update, eta = extrapolate(means, num_clients, round_num, hparams)
      return update, _measurements(eta)

    @tff.tensorflow.computation(np.int32)
    def next_round(round_num):
      return round_num + 1

    @tff.federated_computation()
    def initialize():
      return tff.federated_zip((inner.initialize(), tff.federated_value(np.int32(0), tff.SERVER)))

    @tff.federated_computation(
      initialize.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      inner_state, round_num = state[0], state[1]
      out = inner.next(inner_state, value, weight)
      num_clients = tff.federated_sum(tff.federated_map(participates, weight))
      result = tff.federated_map(extrapolated, (out.result, num_clients, round_num))
      return tff.templates.MeasuredProcessOutput(
        tff.federated_zip((out.state, tff.federated_map(next_round, round_num))),
        result[0],
        result[1],
      )

    return tff.templates.AggregationProcess(initialize, next_fn)


def extrapolated_mean(hparams: FedExPHParams = FedExPHParams()) -> aggregators.UpdateAggregation:
  """FedExP's aggregation: a fold for the in-process engines and `ExtrapolatedMeanFactory`."""

  def zero(specs, state):
    del state
    zeros = tuple(tf.zeros(s.shape, s.dtype) for s in specs[UPDATE_KEY])
    return zeros, tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)

  def accumulate(acc, value, weight):
    total, total_sq, weight_sum, count = acc
    weight = tf.cast(weight, tf.float32)
    return (
      tree.add_scaled(total, tuple(value[UPDATE_KEY]), weight),
      total_sq + weight * tf.cast(value[SQ_NORM_KEY], tf.float32),
      weight_sum + weight,
      count + tf.cast(weight > 0, tf.float32),
    )

  def report(acc, round_num):
    total, total_sq, weight_sum, count = acc
    means = collections.OrderedDict(
      [
        (UPDATE_KEY, tree.divide_no_nan(total, weight_sum)),
        (SQ_NORM_KEY, tf.math.divide_no_nan(total_sq, weight_sum)),
      ]
    )
    update, eta = extrapolate(means, count, round_num, hparams)
    return update, round_num + 1, _measurements(eta)

  return aggregators.UpdateAggregation(
    'extrapolated_mean',
    lambda: ExtrapolatedMeanFactory(hparams),
    zero,
    accumulate,
    report,
    initialize=lambda specs: tf.constant(0, tf.int32),
  )


class KeepsPrevious(tff.learning.optimizers.Optimizer):
  """A server optimizer that also keeps the model it stepped from, x_t, for the released model
  (x_t + x_{t+1}) / 2: state OrderedDict(inner=its state, previous=x_t, steps=rounds taken)."""

  def __init__(self, inner: tff.learning.optimizers.Optimizer):
    self.inner = inner

  def initialize(self, specs):
    return collections.OrderedDict(
      [
        (INNER, self.inner.initialize(specs)),
        (PREVIOUS, tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)),
        (STEPS, tf.constant(0, tf.int32)),
      ]
    )

  def next(self, state, weights, gradients):
    inner_state, new_weights = self.inner.next(state[INNER], weights, gradients)
    previous = tf.nest.map_structure(tf.convert_to_tensor, weights)
    return collections.OrderedDict(
      [(INNER, inner_state), (PREVIOUS, previous), (STEPS, state[STEPS] + 1)]
    ), new_weights

  def get_hparams(self, state):
    return self.inner.get_hparams(state[INNER])

  def set_hparams(self, state, hparams):
    new_state = collections.OrderedDict(state)
    new_state[INNER] = self.inner.set_hparams(state[INNER], hparams)
    return new_state


def released_average(model_weights, optimizer_state) -> tff.learning.models.ModelWeights:
  """(x_t + x_{t+1}) / 2 from x_{t+1} and the `KeepsPrevious` state; x_{t+1} itself before the
  second round (x_0, then x_1, as the authors' code evaluates)."""
  averaged = optimizer_state[STEPS] >= 2
  trainable = [
    tf.where(averaged, (tf.cast(p, x.dtype) + x) / 2.0, x)
    for x, p in zip(
      (tf.convert_to_tensor(x) for x in model_weights.trainable),
      tf.nest.flatten(optimizer_state[PREVIOUS]),
    )
  ]
  return tff.learning.models.ModelWeights(trainable, model_weights.non_trainable)


class _Extrapolated:
  """FedExP's server side over any client side (a mixin before a `base.Algorithm` subclass)."""

  name = 'fedexp'

  def _extrapolation(self, hparams: FedExPHParams) -> None:
    self.hparams = hparams
    if hparams.eval_average == 'last_two':
      self.server_optimizer = KeepsPrevious(self.server_optimizer)

  def client_result(self, result):
    """The client's output with update OrderedDict(update=Delta_i, sq_norm=||Delta_i||^2)."""
    out = super().client_result(result)
    update = tuple(out.update)
    value = collections.OrderedDict([(UPDATE_KEY, update), (SQ_NORM_KEY, sq_norm(update))])
    return out._replace(update=value)

  def released_weights(self, model_weights, server_optimizer_state):
    """(x_t + x_{t+1}) / 2 with eval_average='last_two', else x_{t+1}."""
    if self.hparams.eval_average == 'none':
      return model_weights
    return released_average(model_weights, server_optimizer_state)


class _FedExP(_Extrapolated, fedopt.FedOpt):
  """FedExP (local='fedavg') and FedProx-ExP (local='fedprox'; module docstring)::

  client i: x_i = ClientOpt^K(x_t) on f_i (+ mu/2 ||x - x_t||^2);  Delta_i = x_t - x_i
  server:   g_t = eta_g Delta_bar (`extrapolated_mean`);  x_{t+1} = ServerOpt(x_t, g_t)
  """

  def __init__(self, *args: Any, fedexp: FedExPHParams, **kwargs: Any):
    kwargs.setdefault('aggregation', extrapolated_mean(fedexp))
    super().__init__(*args, **kwargs)
    self._extrapolation(fedexp)
    self.mu = fedexp.prox_mu if fedexp.local == 'fedprox' else 0.0

  def transforms_gradient(self) -> bool:
    return self.mu != 0

  def transform_gradient(self, gradient, x, x_t, broadcast, client_state):
    """FedProx's g + mu (x - x_t) (local='fedprox')."""
    del broadcast, client_state
    return fedprox.proximal_gradient(gradient, x, x_t, self.mu)


class _ScaffoldExP(_Extrapolated, scaffold.Scaffold):
  """SCAFFOLD-ExP: SCAFFOLD Option II's clients and control variates, FedExP's server step on
  their Delta_i (module docstring)."""

  def __init__(self, *args: Any, fedexp: FedExPHParams, **kwargs: Any):
    kwargs.setdefault('aggregation', extrapolated_mean(fedexp))
    super().__init__(*args, **kwargs)
    self._extrapolation(fedexp)


def build_fedexp(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  num_clients: int | None = None,
  fedexp: FedExPHParams = FedExPHParams(),
  **kwargs: Any,
) -> base.Algorithm:
  """FedExP (or FedProx-ExP, SCAFFOLD-ExP: `fedexp.local`).

  Args:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training (the paper: SGD; any client optimizer of the project).
    server_optimizer: receives g_t = eta_g Delta_bar; `optimizers.build_fedavg_sgd(1.0)` is the
      paper's x_{t+1} = x_t - eta_g Delta_bar.
    num_clients: N, the population, for local='scaffold' (its c <- c + |S| / N Delta c).
    fedexp: `FedExPHParams`.
    **kwargs: `server_lr_schedule`, `server_learning_rate` (`base.Algorithm`).

  Returns:
    The algorithm; `engines.build_learning_process(alg)` makes it a TFF LearningProcess.
  """
  if fedexp.local == 'scaffold':
    if num_clients is None:
      raise ValueError("build_fedexp: local='scaffold' needs num_clients (the population N)")
    return _ScaffoldExP(
      model_fn, client, server_optimizer, num_clients=num_clients, fedexp=fedexp, **kwargs
    )
  return _FedExP(model_fn, client, server_optimizer, fedexp=fedexp, **kwargs)
