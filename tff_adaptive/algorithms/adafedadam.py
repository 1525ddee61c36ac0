"""AdaFedAdam: certainty-weighted, alpha-fair aggregation of normalised updates into AdaAdam.

Ju, Zhang, Fodor, Pan, Li, Tang. "Accelerating Fair Federated Learning: Adaptive Federated
Adam" (AdaFedAdam), Algorithms 1 and 2. Round t, model x_t, initial model x_0, clients S:

    client k:  F_k(x_t), grad F_k(x_t)       (over its local training data, before training)
               x_k = LocalSolver(x_t, eta_k)  (any client optimizer of the project)
               Delta_k = x_k - x_t
               eta'_k = ||Delta_k|| / ||grad F_k(x_t)||
               U_k = -Delta_k / eta'_k        (the update rescaled to ||grad F_k(x_t)||)
               C_k = log(eta'_k / eta_k) + 1  (its certainty)
               I_k = F_k(x_t) / F_k(x_0)      (its inverse training rate)
    server:    g = sum p_k I_k^alpha U_k / sum p_k I_k^alpha,  C = the same mean of C_k
               x_{t+1} = AdaAdam(x_t; g, C)    (`optimizers.adaadam`)

Parts: the aggregation is `aggregators.certainty_weighted_mean(alpha)` (TFF face
`aggregators.CertaintyWeightedMeanFactory`), the server `optimizers.build_adaadam` stepped by
`optimizers.adaadam.certainty_step` (TFF face: `build_finalizer`, which passes
`certainty_floor`); `client_update` computes (U_k, C_k, I_k) (TFF face:
`engines.build_client_work`, a `ClientWorkProcess` whose state holds x_0). The three TFF faces
composed with TFF's broadcast in `tff.learning.templates.compose_learning_process` give the
model of our own LearningProcess (tests/engines/test_tff_composition.py).

How F_k(x_0) is known: the server keeps x_0 (the model training starts from) in its state,
checkpointed with the model, and broadcasts it with x_t; each sampled client evaluates
F_k(x_0) on its data in the same pass that evaluates F_k(x_t). (In the ClientWorkProcess, whose
clients receive only x_t, x_0 is the model the first round receives, kept in the client work's
state.) Nothing is stored per client,
so a resumed run continues exactly, a client sampled for the first time in round 500 uses the
same x_0 as one sampled in round 1, and the cost is one extra forward pass over the client's
data per round (its gradient at x_t costs one forward-backward pass; local training E of them).
eta_k is eta_l(t), or the client's mean step size for client optimizers that choose their own
(SPS, Delta-SGD).

Degenerate clients (documented, tested): a client whose ||Delta_k|| or ||grad F_k(x_t)|| is 0,
whose F_k(x_0) is 0, or whose quantities are not finite carries no direction or certainty: it
is sent with weight 0 (U_k = 0, C_k = 0, I_k = 1), counted in the `invalid` statistic. (The
training loop stops the run with a message naming the client and the round when a client's
F_k(x_0) is 0 or its loss is not finite, see `tff_adaptive.loop.training_loop`.) The aggregate
C <= 0 (possible when updates are much shorter than one local step at x_t, or when every
client of the round is degenerate): by default (`certainty_floor='zero'`) the round makes no
server step, the model and AdaAdam's whole state (moments, running products, step count) kept,
as C = 0 would mean (beta^0 = 1, eta_t = 0) without its 0/0 bias correction on a first step;
`certainty_floor='none'` (the authors' code) applies C as it is (C < 0 steps uphill), and a
non-finite result is rejected like any non-finite update (and stops the trainer).

Paper vs the authors' public code, each code behaviour an option (defaults: the paper):
- `gradient_examples`: F_k and grad F_k over all local examples (None) or the first 512;
- `weighting='loss'`: aggregation weight p_k F_k(x_t)^alpha (their size x raw loss) instead
  of p_k (F_k(x_t) / F_k(x_0))^alpha;
- `certainty_lr_from_step` (server optimizer option): eta_t = C eta only from step 6 on;
- `certainty_floor='none'`.
Not offered: their persistent client momentum with weight decay (a client state across rounds);
a momentum client optimizer restarted each round (`--client_optimizer=sgdm`) is.

`AdaFedAdamHParams`, `WEIGHTINGS` and `CERTAINTY_FLOORS` are defined without TensorFlow in
`algorithms.config` / `optimizers.config` and re-exported here.
"""

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive.algorithms import base
from tff_adaptive.algorithms.config import ADAFEDADAM_WEIGHTINGS as WEIGHTINGS  # noqa: F401
from tff_adaptive.algorithms.config import AdaFedAdamHParams
from tff_adaptive.core import tree
from tff_adaptive.optimizers import adaadam
from tff_adaptive.optimizers.config import CERTAINTY_FLOORS  # noqa: F401  (re-exported)

AUTHORS_GRADIENT_EXAMPLES = 512


def normalized_update(update: Any, grad_norm: tf.Tensor, update_norm: tf.Tensor) -> Any:
  """U_k = -Delta_k / eta'_k = u_k ||grad F_k|| / ||u_k||  (u_k = x_t - x_k = -Delta_k)."""
  return tree.scale(update, grad_norm / update_norm)


def update_scale(update_norm: tf.Tensor, grad_norm: tf.Tensor) -> tf.Tensor:
  """eta'_k = ||Delta_k|| / ||grad F_k(x_t)||."""
  return update_norm / grad_norm


def certainty(eta_prime: tf.Tensor, learning_rate: tf.Tensor) -> tf.Tensor:
  """C_k = log(eta'_k / eta_k) + 1."""
  return tf.math.log(eta_prime / learning_rate) + 1.0


def loss_ratio(loss_t: tf.Tensor, loss_0: tf.Tensor) -> tf.Tensor:
  """I_k = F_k(x_t) / F_k(x_0)."""
  return loss_t / loss_0


class _AdaFedAdam(base.Algorithm):
  """AdaFedAdam (Ju et al., Algorithms 1-2); see the module docstring."""

  name = 'adafedadam'

  @property
  def needs_positive_initial_loss(self) -> bool:
    """I_k = F_k(x_t) / F_k(x_0) is read: a client with F_k(x_0) = 0 stops the run."""
    return self.hparams.weighting == 'paper'

  def __init__(
    self, *args: Any, adafedadam: AdaFedAdamHParams = AdaFedAdamHParams(), **kwargs: Any
  ):
    kwargs.setdefault('aggregation', aggregators.certainty_weighted_mean(adafedadam.alpha))
    super().__init__(*args, **kwargs)
    self.hparams = adafedadam
    try:
      self.server_optimizer.get_hparams(self.server_optimizer.initialize(()))[adaadam.CERTAINTY_KEY]
    except (KeyError, TypeError, AttributeError):
      raise ValueError(
        'adafedadam needs the AdaAdam server optimizer (optimizers.build_adaadam, '
        '--server_optimizer=adaadam), whose step reads the certainty C'
      ) from None

  # x_0, kept for the clients' F_k(x_0).
  def server_extra_init(self, specs):
    return tuple(tf.zeros(s.shape, s.dtype) for s in specs)

  def server_extra_for_model(self, server_extra, model_weights):
    del server_extra
    return tuple(tf.identity(w) for w in model_weights.trainable)

  def client_broadcast(self, server_extra, round_num):
    del round_num
    return server_extra

  def full_passes(self):
    """F_k(x_0) (the 'paper' weighting reads it), then F_k(x_t) and grad F_k(x_t)."""
    hp = self.hparams
    passes = {}
    if hp.weighting == 'paper':
      passes['x_0'] = base.FullPass(max_examples=hp.gradient_examples, at_broadcast=True)
    passes['x_t'] = base.FullPass(gradient=True, max_examples=hp.gradient_examples)
    return passes

  def client_result(self, result):
    hp = self.hparams
    loss_0 = result.passes['x_0'].loss if 'x_0' in result.passes else tf.constant(1.0)
    loss_t, grad = result.passes['x_t']
    update = result.update
    stats = result.stats.copy()
    eta_k = stats.get('step_size', result.learning_rate)

    update_norm, grad_norm = tree.global_norm(update), tree.global_norm(grad)
    eta_prime = update_scale(update_norm, grad_norm)
    u = normalized_update(update, grad_norm, update_norm)
    c = certainty(eta_prime, eta_k)
    i = loss_ratio(loss_t, loss_0)
    weight = self.weight_of(result.num_examples)
    if hp.weighting == 'loss':  # p_k F_k(x_t)^alpha: I_k := F_k(x_t)
      i = loss_t
    valid = tf.reduce_all(
      [
        update_norm > 0,
        grad_norm > 0,
        loss_0 > 0,
        tf.math.is_finite(c),
        tf.math.is_finite(i),
        tree.all_finite(u),
        weight > 0,
      ]
    )
    keep = lambda value, fallback: tf.where(valid, value, fallback)
    stats.update(
      certainty=keep(c, 0.0),
      loss_ratio=keep(i, 0.0),
      update_scale=keep(eta_prime, 0.0),
      gradient_norm=grad_norm,
      invalid=1.0 - tf.cast(valid, tf.float32),
    )
    value = collections.OrderedDict(
      [
        (aggregators.UPDATE_KEY, tuple(keep(t, tf.zeros_like(t)) for t in u)),
        (aggregators.CERTAINTY_KEY, keep(c, 0.0)),
        (aggregators.LOSS_RATIO_KEY, keep(i, 1.0)),
      ]
    )
    return base.ClientOutput(update=value, weight=keep(weight, 0.0), stats=stats)

  def server_update(self, optimizer_state, trainable, aggregate):
    """x_{t+1} = AdaAdam(x_t; g, C); with `certainty_floor='zero'` no step when C <= 0.

    No step: the model and the whole optimizer state (moments, running products, step count)
    stay as they were, as if the round had not happened (C = 0: no certainty at all); it is
    not a rejected (non-finite) update. The rule is `adaadam.certainty_step`'s.
    """
    return adaadam.certainty_step(
      self.server_optimizer, optimizer_state, trainable, aggregate, self.hparams.certainty_floor
    )

  def build_finalizer(self, weights_type) -> tff.learning.templates.FinalizerProcess:
    """`server_update` as a TFF finalizer: `adaadam.build_finalizer` with `certainty_floor`."""
    return adaadam.build_finalizer(
      self.server_optimizer, weights_type, self.hparams.certainty_floor
    )


def build_adafedadam(
  model_fn: base.ModelFn,
  client: base.ClientTrainingConfig,
  server_optimizer: tff.learning.optimizers.Optimizer | None = None,
  adafedadam: AdaFedAdamHParams = AdaFedAdamHParams(),
  **kwargs: Any,
) -> base.Algorithm:
  """AdaFedAdam; server_optimizer defaults to `optimizers.build_adaadam()` (eta 1e-3)."""
  if server_optimizer is None:
    server_optimizer = adaadam.build_adaadam()
  return _AdaFedAdam(model_fn, client, server_optimizer, adafedadam=adafedadam, **kwargs)
