"""SPS: the stochastic Polyak step size (Loizou et al. 2021), a client optimizer of Kim et al. 2024.

Loizou, Vaswani, Laradji, Lacoste-Julien. "Stochastic Polyak Step-size for SGD: An Adaptive
Learning Rate for Fast Convergence." AISTATS 2021; the baseline "SPS" of Kim et al. ICLR 2024
Sec. 4 (f* = 0, c = 0.5, "the default setting of the official implementation",
github.com/IssamLaradji/sps). Step k on minibatch k, with f_k(x) its loss and g its gradient::

  p_k   = (f_k(x_{k-1}) - f*) / (c ||g||^2 + eps)          # the Polyak step, eps = 1e-8
  eta_k = min(gamma^(1/n) eta_{k-1}, p_k),  eta_0 = 1     # mode 'smooth_iter' (default)
          (0 if ||g|| < 1e-8, which the next step's cap then starts from)
  eta_k = min(p_k, eta_max)                               # mode 'constant'
  x_k   = x_{k-1} - eta_k g                               (eta_k = 0 whenever f_k < f*)

'smooth_iter' is the official implementation's default (`Sps(adapt_flag='smooth_iter')`,
gamma = 2, n = n_batches_per_epoch = 500, init_step_size = 1, and its rule that a gradient norm
below 1e-8 gives a zero step): the step can grow by at most gamma^(1/n) per step, its cap. The
Delta-SGD authors' federated code instead builds `Sps(adapt_flag='constant')` without eta_max
(no cap) in a copy whose small-gradient rule is disabled: `mode='constant'` here. The step state
starts afresh for every client in every round, as every client optimizer's does.

SPS needs the minibatch loss, not only its gradient, so it is a local-step hook
(`core.local_loop.LocalStep`), not a `tff.learning.optimizers.Optimizer`. With a
`gradient_transform` (SCAFFOLD, FedProx) the transformed gradient is used in p_k and the step;
the loss is the model's.

`SPSHParams` and `MODES` are defined without TensorFlow in `optimizers.config` and re-exported
here.
"""

import collections

import tensorflow as tf

from tff_adaptive.core import local_loop
from tff_adaptive.optimizers.config import MODES  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import SPSHParams

STEP = 'step'
ETA = 'eta'
STEP_SIZE_SUM = 'step_size_sum'


def polyak_step(loss: tf.Tensor, grad_norm_sq: tf.Tensor, hparams: SPSHParams) -> tf.Tensor:
  """p_k = (f_k(x) - f*) / (c ||g||^2 + eps)."""
  return (loss - hparams.f_star) / (hparams.c * grad_norm_sq + hparams.eps)


def step_size(eta_prev: tf.Tensor, loss: tf.Tensor, grad_norm_sq: tf.Tensor, hparams: SPSHParams):
  """eta_k of the chosen mode (see the module docstring)."""
  p = tf.where(loss < hparams.f_star, 0.0, polyak_step(loss, grad_norm_sq, hparams))
  if hparams.mode == 'smooth_iter':
    eta = tf.minimum(hparams.gamma ** (1.0 / hparams.n_batches_per_epoch) * eta_prev, p)
    if hparams.grad_norm_tol is not None:
      eta = tf.where(grad_norm_sq < hparams.grad_norm_tol**2, 0.0, eta)
    return eta
  if hparams.eta_max is not None:
    p = tf.minimum(p, hparams.eta_max)
  return p


def sps_step(
  hparams: SPSHParams = SPSHParams(),
  gradient_transform: local_loop.GradientTransform | None = None,
) -> local_loop.LocalStep:
  """SPS as a local step: x <- x - eta_k g with eta_k from the minibatch loss and gradient."""

  def init(model):
    del model
    return collections.OrderedDict(
      [
        (STEP, tf.constant(0, tf.int32)),
        (ETA, tf.constant(hparams.init_step_size, tf.float32)),
        (STEP_SIZE_SUM, tf.constant(0.0, tf.float32)),
      ]
    )

  def apply(model, batch, step_seed, state):
    loss, grads = local_loop.loss_and_gradients(model, batch, step_seed)
    if gradient_transform is not None:
      grads = tuple(gradient_transform(grads, model))
    norm_sq = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32))) for g in grads])
    eta = step_size(state[ETA], tf.cast(loss, tf.float32), norm_sq, hparams)
    for v, g in zip(model.trainable_variables, grads):
      v.assign_sub(tf.cast(eta, v.dtype) * g)
    return collections.OrderedDict(
      [(STEP, state[STEP] + 1), (ETA, eta), (STEP_SIZE_SUM, state[STEP_SIZE_SUM] + eta)]
    )

  return local_loop.LocalStep(init, apply)


def statistics(state) -> collections.OrderedDict:
  """Per-client statistics of one local training: the mean step size."""
  return collections.OrderedDict(
    step_size=state[STEP_SIZE_SUM] / tf.maximum(tf.cast(state[STEP], tf.float32), 1.0)
  )
