"""FedPA's client delta: Delta = Sigma_hat^-1 (x_0 - mu_hat), by the dynamic program of App. C.

Al-Shedivat, Gillenwater, Xing, Rostamizadeh. "Federated Learning via Posterior Averaging: A New
Perspective and Practical Algorithms." ICLR 2021, Theorem 3 and Appendix C.

Given l approximate posterior samples x_1..x_l of a client (flattened to vectors of size d),
xbar_t is the mean of the first t samples and S_t their sample covariance (1/(t-1)). The
shrinkage estimator is

    Sigma_l = rho_l I + (1 - rho_l) S_l,     rho_l = 1 / (1 + (l - 1) rho),  rho >= 0,

which is rho_l times Sigma~_l = I + rho (l - 1) S_l. Since (t-1) S_t = (t-2) S_{t-1} +
((t-1)/t) u_t u_t^T with u_t = x_t - xbar_{t-1} (App. C eq. 15), Sigma~ grows by rank one:

    Sigma~_1 = I,   Sigma~_t = Sigma~_{t-1} + gamma_t u_t u_t^T,   gamma_t = rho (t - 1) / t.

Sherman-Morrison gives, with v_t = Sigma~_{t-1}^-1 u_t and Delta~_t = Sigma~_t^-1 (x_0 - xbar_t):

    Delta~_1 = x_0 - x_1
    Delta~_t = Delta~_{t-1} - (1 + c_t) v_t / t,
               c_t = gamma_t (t u_t^T Delta~_{t-1} - u_t^T v_t) / (1 + gamma_t u_t^T v_t)
    v_t = u_t - sum_{k=2}^{t-1} gamma_k (v_k^T u_t) / (1 + gamma_k u_k^T v_k) v_k
    Delta = Delta~_l / rho_l = (1 + (l - 1) rho) Delta~_l

(derivation of the Delta~ step: x_0 - xbar_t = (x_0 - xbar_{t-1}) - u_t / t, and
Sigma~_t^-1 = Sigma~_{t-1}^-1 - gamma_t v_t v_t^T / (1 + gamma_t u_t^T v_t); expand and use
v_t^T (x_0 - xbar_{t-1}) = u_t^T Delta~_{t-1} by symmetry). Each new sample costs O(t d) time;
the state holds the v_k and u_k^T v_k, O(l d) memory; no d x d matrix is ever formed.

Two parametrisations of the shrinkage (`SHRINKAGE_FORMS`): 'paper' takes the rho of Theorem 3
(the values of the paper's Table 6 and of the authors' code: rho = 0 is Sigma = I, larger rho
trusts the samples more); 'convex' takes rho_l itself, Sigma = s I + (1 - s) S with s in (0, 1]
(s = 1 is Sigma = I), converted to the paper's rho = (1/s - 1) / (l - 1). With one sample no
covariance can be estimated and both give Sigma = I (the paper's rho_1 = 1): Delta = x_0 - x_1.

Vectors are nests (tuples) of tensors shaped like a model's trainable weights; inner products
sum over all of them, so the flattened d-vector never needs to be built.

`SHRINKAGE_FORMS` and `check_shrinkage` are defined without TensorFlow in `algorithms.config`
and re-exported here.
"""

from typing import Any
from typing import NamedTuple

import tensorflow as tf

from tff_adaptive.algorithms.config import CONVEX  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import PAPER
from tff_adaptive.algorithms.config import SHRINKAGE_FORMS  # noqa: F401  (re-exported)
from tff_adaptive.algorithms.config import check_shrinkage

Weights = tuple[tf.Tensor, ...]


def paper_rho(shrinkage: float, num_samples: int, form: str = PAPER) -> float:
  """The rho of Theorem 3 for `shrinkage` given in `form`, with l = `num_samples` samples."""
  check_shrinkage(shrinkage, form)
  if form == PAPER:
    return float(shrinkage)
  if num_samples <= 1:
    return 0.0
  return (1.0 / shrinkage - 1.0) / (num_samples - 1)


def shrinkage_weight(rho: float, num_samples: int) -> float:
  """rho_l = 1 / (1 + (l - 1) rho): the weight of I in Sigma_l."""
  return 1.0 / (1.0 + (num_samples - 1) * rho)


def _scalar(value: Any, dtype: tf.DType) -> tf.Tensor:
  """`value` as a `dtype` scalar; a Python float is converted directly (tf.cast of a Python
  float would round it to float32 first)."""
  if isinstance(value, (tf.Tensor, tf.Variable)):
    return tf.cast(value, dtype)
  return tf.constant(value, dtype)


def _dot(a: Weights, b: Weights) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(x * y) for x, y in zip(a, b)])


class DPState(NamedTuple):
  """The dynamic program after t samples.

  Attributes:
    count: t, int32 scalar.
    mean: xbar_t (before the first sample: zeros).
    delta: Delta~_t = Sigma~_t^-1 (x_0 - xbar_t) (before the first sample: x_0).
    v: v_k for k = 2..l in slots k - 2, each leaf shaped [l - 1, *weight shape].
    dot_uv: u_k^T v_k in slots k - 2, [l - 1].
  """

  count: tf.Tensor
  mean: Weights
  delta: Weights
  v: Weights
  dot_uv: tf.Tensor


def dp_init(x0: Weights, num_samples: int) -> DPState:
  """The state before any sample, for at most `num_samples` (l >= 1) samples."""
  x0 = tuple(tf.convert_to_tensor(x) for x in x0)
  slots = max(num_samples - 1, 0)
  return DPState(
    count=tf.constant(0, tf.int32),
    mean=tuple(tf.zeros_like(x) for x in x0),
    delta=x0,
    v=tuple(tf.zeros([slots] + x.shape.as_list(), x.dtype) for x in x0),
    dot_uv=tf.zeros([slots], x0[0].dtype),
  )


def _first_sample(state: DPState, sample: Weights) -> DPState:
  """Delta~_1 = x_0 - x_1, xbar_1 = x_1."""
  return state._replace(
    count=state.count + 1,
    mean=tuple(sample),
    delta=tuple(d - s for d, s in zip(state.delta, sample)),
  )


def _next_sample(state: DPState, sample: Weights, rho: tf.Tensor) -> DPState:
  """Sample t >= 2: the Sherman-Morrison steps of the module docstring."""
  dtype = state.dot_uv.dtype
  rho = _scalar(rho, dtype)
  count = state.count + 1
  t = tf.cast(count, dtype)
  u = tuple(s - m for s, m in zip(sample, state.mean))
  slots = tf.shape(state.dot_uv)[0]
  # v_t = u_t - sum_k gamma_k (v_k^T u_t) / (1 + gamma_k u_k^T v_k) v_k over the filled slots.
  k = tf.cast(tf.range(slots) + 2, dtype)
  filled = tf.cast(tf.range(slots) < count - 2, dtype)
  gamma_k = rho * (k - 1.0) / k
  dot_vk_u = tf.add_n(
    [
      tf.reshape(tf.reshape(vk, [slots, -1]) @ tf.reshape(x, [-1, 1]), [-1])
      for vk, x in zip(state.v, u)
    ]
  )
  coeff = filled * gamma_k * dot_vk_u / (1.0 + gamma_k * state.dot_uv)
  v = tuple(
    x - tf.reshape(tf.reshape(coeff, [1, -1]) @ tf.reshape(vk, [slots, -1]), x.shape)
    for x, vk in zip(u, state.v)
  )
  dot_uv = _dot(u, v)
  dot_ud = _dot(u, state.delta)
  gamma = rho * (t - 1.0) / t
  c = gamma * (t * dot_ud - dot_uv) / (1.0 + gamma * dot_uv)
  delta = tuple(d - (1.0 + c) * x / t for d, x in zip(state.delta, v))
  is_slot = tf.equal(tf.range(slots), count - 2)  # slot t - 2 holds v_t

  def write(stored, value):
    mask = tf.reshape(is_slot, [slots] + [1] * value.shape.rank)
    return tf.where(mask, value[tf.newaxis], stored)

  return DPState(
    count=count,
    mean=tuple(m + x / t for m, x in zip(state.mean, u)),
    delta=delta,
    v=tuple(write(vk, x) for vk, x in zip(state.v, v)),
    dot_uv=write(state.dot_uv, dot_uv),
  )


def dp_update(state: DPState, sample: Weights, rho: Any) -> DPState:
  """The state after one more sample x_t (rho: the paper's, `paper_rho`).

  At most the `num_samples` given to `dp_init` may be added (the state has room for no more).
  """
  sample = tuple(tf.convert_to_tensor(s) for s in sample)
  if state.v[0].shape[0] == 0:  # room for one sample only: no v_k is ever needed
    return _first_sample(state, sample)
  return tf.cond(
    state.count > 0,
    lambda: _next_sample(state, sample, rho),
    lambda: _first_sample(state, sample),
  )


def dp_delta(state: DPState, rho: Any) -> Weights:
  """Delta = (1 + (t - 1) rho) Delta~_t = Sigma_t^-1 (x_0 - xbar_t), after t >= 1 samples."""
  dtype = state.dot_uv.dtype
  scale = 1.0 + (tf.cast(state.count, dtype) - 1.0) * _scalar(rho, dtype)
  return tuple(scale * d for d in state.delta)


def posterior_delta(x0: Weights, samples: Weights, rho: Any) -> Weights:
  """Sigma_l^-1 (x_0 - mu_hat) by the dynamic program.

  Args:
    x0: the broadcast model x_0, a tuple of tensors.
    samples: the samples, one tensor per leaf of `x0` with a leading dimension l >= 1.
    rho: the paper's shrinkage rho >= 0 (`paper_rho` converts the convex form).

  Returns:
    Delta, shaped like `x0`.
  """
  x0 = tuple(tf.convert_to_tensor(x) for x in x0)
  samples = tuple(tf.convert_to_tensor(s) for s in samples)
  num_samples = samples[0].shape[0]
  state = dp_init(x0, num_samples)
  for j in range(num_samples):
    state = dp_update(state, tuple(s[j] for s in samples), rho)
  return dp_delta(state, rho)


def posterior_delta_exact(x0: Weights, samples: Weights, rho: Any) -> Weights:
  """The same Delta by forming Sigma_l (d x d) and solving: O(d^2) memory, O(d^3) time.

  For checks and the overhead benchmark only (the paper's "exact" column of Table 1).
  """
  x0 = tuple(tf.convert_to_tensor(x) for x in x0)
  samples = tuple(tf.convert_to_tensor(s) for s in samples)
  num_samples = samples[0].shape[0]
  dtype = x0[0].dtype
  flat = tf.concat([tf.reshape(s, [num_samples, -1]) for s in samples], axis=1)  # [l, d]
  mean = tf.reduce_mean(flat, axis=0)
  centered = flat - mean
  d = tf.shape(flat)[1]
  if num_samples > 1:
    weight = 1.0 / (1.0 + (num_samples - 1) * _scalar(rho, dtype))  # rho_l
    cov = tf.transpose(centered) @ centered / (num_samples - 1)
    sigma = weight * tf.eye(d, dtype=dtype) + (1.0 - weight) * cov
  else:
    sigma = tf.eye(d, dtype=dtype)
  x0_flat = tf.concat([tf.reshape(x, [-1]) for x in x0], axis=0)
  delta = tf.reshape(tf.linalg.solve(sigma, (x0_flat - mean)[:, tf.newaxis]), [-1])
  sizes = tf.stack([tf.size(x) for x in x0])  # static or not (x_t inside a compiled round)
  parts = tf.split(delta, sizes, num=len(x0))
  return tuple(
    tf.reshape(p, x.shape if x.shape.is_fully_defined() else tf.shape(x)) for p, x in zip(parts, x0)
  )
