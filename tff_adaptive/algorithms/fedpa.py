"""FedPA: federated posterior averaging (IASG samples, shrinkage covariance, DP client deltas).

Al-Shedivat, Gillenwater, Xing, Rostamizadeh. "Federated Learning via Posterior Averaging: A New
Perspective and Practical Algorithms." ICLR 2021, Algorithms 1, 3 and 4, Theorem 3, App. C.

The server is FedOpt's (any server optimizer on the weighted mean of the client deltas); what
changes is the client delta. FedAvg's x_t - x_K estimates the global posterior mode as if every
local posterior covariance were I, which biases it under heterogeneity; FedPA's clients return
Sigma_hat^-1 (x_t - mu_hat), mu_hat and Sigma_hat estimated from approximate samples of their
local posterior, which makes the server's fixed point the global posterior mode (Prop. 2).

`FedPAHParams` and the `SOLVERS` are defined without TensorFlow in `algorithms.config` and
re-exported here.
"""

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base
from tff_adaptive.algorithms import fedpa_math
from tff_adaptive.algorithms.config import DP
from tff_adaptive.algorithms.config import EXACT  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import SOLVERS  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import FedPAHParams
from tff_adaptive.core import tree

EXACT_MAX_DIM = 20_000  # d x d float32 = 1.6 GB


class _Samples:
  """A client's posterior samples for its delta: the DP state, or the samples themselves."""

  def __init__(self, solver: str, num_samples: int, rho: float):
    self.solver, self.num_samples, self.rho = solver, num_samples, rho

  def accumulate(self, n: tf.Tensor, means: tuple[tf.Tensor, ...], x0: tuple[tf.Tensor, ...]):
    """From the n collected samples (means[:n], stacked): the DP state after each of them in
    turn (`fedpa_math.dp_update`, one traced step in a loop), or (n, the stack)."""
    if self.solver != DP:
      return n, means

    def add(j, state):
      return j + 1, fedpa_math.dp_update(state, tuple(m[j] for m in means), self.rho)

    state = fedpa_math.dp_init(x0, self.num_samples)
    return tf.while_loop(lambda j, _: j < n, add, (tf.constant(0), state))[1]

  def delta(self, acc: Any, x0: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, ...]:
    if self.solver == DP:
      return fedpa_math.dp_delta(acc, self.rho)
    return fedpa_math.posterior_delta_exact(x0, acc[1], self.rho)


class _FedPA(base.Algorithm):
  """FedPA (Al-Shedivat et al. 2021, Algorithms 1, 3, 4). Round t, client i, K local steps::

    x <- ClientOpt(x, grad f_i(x; batch))      E epochs from x_t (IASG, Algorithm 4)
    x_1..x_l: x_s = the mean of the iterates after every step of epoch b + s - 1
              (b = burnin_epochs, l = E - b: one sample per epoch after the burn-in)
    mu_hat = mean_s x_s;  Sigma_hat = rho_l I + (1 - rho_l) S_l   (shrinkage, Theorem 3)
    u_i = Sigma_hat^-1 (x_t - mu_hat)          by the DP of App. C (rounds t >= burnin_rounds)
    u_i = x_t - x_K                            (FedAvg, rounds t < burnin_rounds)
    g_t = sum w_i u_i / sum w_i,  x_{t+1} = ServerOpt(x_t, g_t)

  u_i has TFF's sign (initial minus trained, as FedAvg's x_t - x_K; the paper's
  Sigma^-1 (theta - mu)). With l = 1, u_i = x_t - x_1; with Sigma_hat = I (rho = 0 in the paper
  form, 1 in the convex form), u_i = x_t - mu_hat. A client whose u_i has a non-finite value
  sends zeros with weight 0 (as the authors' code), counted in `delta_non_finite`; if every
  client does, g_t = 0 (a stateful server optimizer, e.g. momentum, may still move x by its
  state; never by a NaN). Client statistics: `local_steps`, the client optimizer's own,
  `delta_non_finite` and `delta_correction` = ||u_i - (x_t - x_K)|| / ||x_t - x_K|| (0 in
  burn-in rounds and for clients without examples, so its mean over a round's clients counts
  those as 0).

  Under differential privacy (`aggregation=aggregators.dp_mean(...)`): the posterior delta u_i
  (or the burn-in's x_t - x_K) is clipped to norm C, the only value of client i the model update
  reads; a client with a non-finite delta sends zeros, which count as one client of m.
  """

  name = 'fedpa'

  def __init__(self, *args: Any, fedpa: FedPAHParams = FedPAHParams(), **kwargs: Any):
    """As `base.Algorithm`, plus `fedpa`: FedPA's hyperparameters."""
    super().__init__(*args, **kwargs)
    self.fedpa = fedpa
    if self.client_epochs(tf.zeros([2], tf.int64)) is not None:
      raise ValueError(
        'FedPA takes one posterior sample per epoch into a fixed-size state: client max_epochs '
        '(resource heterogeneity) is not supported'
      )
    self.num_samples = fedpa.num_samples(self.client.epochs)
    if self.num_samples < 1:
      raise ValueError(
        f'FedPA needs at least one posterior sample: client epochs ({self.client.epochs}) must '
        f'exceed fedpa burnin_epochs ({fedpa.burnin_epochs})'
      )
    self.rho = fedpa_math.paper_rho(fedpa.shrinkage, self.num_samples, fedpa.shrinkage_form)
    if fedpa.solver == EXACT:
      with tf.Graph().as_default():
        d = sum(int(v.shape.num_elements()) for v in self.model_fn().trainable_variables)
      if d > EXACT_MAX_DIM:
        raise ValueError(
          f"FedPA solver 'exact' forms a d x d matrix and the model has d = {d:,} parameters "
          f"(limit {EXACT_MAX_DIM:,}); use solver 'dp' (the same delta in O(l^2 d))"
        )

  def client_broadcast(self, server_extra, round_num):
    """Clients learn whether the round is past the server burn-in (t >= burnin_rounds)."""
    del server_extra
    return tf.greater_equal(round_num, self.fedpa.burnin_rounds)

  def epoch_means(self) -> base.EpochMeans:
    """IASG (Algorithm 4): in rounds past the server burn-in, the mean iterate of each epoch
    after the first `burnin_epochs` is a posterior sample (l = E - burnin_epochs of them)."""
    return base.EpochMeans(
      self.fedpa.burnin_epochs,
      self.num_samples,
      lambda broadcast: tf.convert_to_tensor(broadcast, tf.bool),
    )

  def client_result(self, result: base.LocalResult) -> base.ClientOutput:
    """u_i from the client's samples (the class docstring), weight and statistics."""
    x0 = tuple(result.initial)
    num_samples, means = result.epoch_means
    samples = _Samples(self.fedpa.solver, self.num_samples, self.rho)
    acc = samples.accumulate(num_samples, means, x0)
    fedavg_delta = tuple(result.update)
    use_pa = num_samples > 0  # collected only in rounds past the server burn-in
    delta = tf.cond(use_pa, lambda: tuple(samples.delta(acc, x0)), lambda: fedavg_delta)
    finite = tree.all_finite(delta)
    delta = tuple(tf.where(finite, d, tf.zeros_like(d)) for d in delta)
    weight = tf.where(finite, self.weight_of(result.num_examples), 0.0)
    stats = collections.OrderedDict(result.stats)
    stats['delta_non_finite'] = 1.0 - tf.cast(finite, tf.float32)
    correction = tf.linalg.global_norm(list(tree.sub(delta, fedavg_delta)))
    fedavg_norm = tf.linalg.global_norm(list(fedavg_delta))
    stats['delta_correction'] = tf.where(
      tf.logical_and(use_pa, finite), tf.math.divide_no_nan(correction, fedavg_norm), 0.0
    )
    return base.ClientOutput(update=delta, weight=weight, stats=stats)


def build_fedpa(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer,
  fedpa: FedPAHParams = FedPAHParams(),
  **kwargs: Any,
) -> base.Algorithm:
  """FedPA with the given server optimizer (the paper: SGDM 0.9 for EMNIST and CIFAR-100).

  Args:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training (optimizer, eta_l, E, B); l = E - fedpa.burnin_epochs samples.
    server_optimizer: a `tff.learning.optimizers.Optimizer` applied to the mean delta.
    fedpa: FedPA's hyperparameters.
    **kwargs: `server_lr_schedule`, `server_learning_rate`, `aggregation` (`base.Algorithm`).
  """
  return _FedPA(model_fn, client, server_optimizer, fedpa=fedpa, **kwargs)
