"""Keras metrics of the Reddi et al. 2021 language and tag-prediction tasks.

* ``MaskedAccuracy``: top-1 accuracy over the positions whose TARGET is not a masked token.
  Shakespeare masks padding; Stack Overflow NWP masks padding, OOV, BOS and EOS ("top-1
  accuracy over the proper 10,000-word vocabulary", Reddi et al. App. C.4).
* Multi-label metrics of Stack Overflow tag prediction, on logits z (probability sigmoid(z)),
  labels Y in {0, 1}^L, prediction at threshold t: yhat = [sigmoid(z) > t] = [z > logit(t)]:

  - ``RecallAtK`` (Reddi et al.'s "Recall@5", as ``tf.keras.metrics.Recall(top_k=5)``):
    sum_i |top_k(z_i) intersect Y_i| / sum_i |Y_i|.
  - ``MultiLabelPrecision`` (the authors' ``tf.keras.metrics.Precision()``, micro):
    TP / (TP + FP), counted over all (example, label) pairs.
  - ``MultiLabelF1`` (Al-Shedivat et al. 2021, FedPA, Table 3c): micro-F1
    = 2 TP / (2 TP + FP + FN) over all pairs; macro-F1 = (1 / L) sum_l 2 TP_l / (2 TP_l + FP_l
    + FN_l), a label with 2 TP_l + FP_l + FN_l = 0 (never true, never predicted) counting 0,
    as in ``tfa.metrics.F1Score(average='macro')``.

Every metric keeps sums only (counts in float64, exact far beyond float32's 2^24), so TFF's
``sum_then_finalize`` aggregates them across clients exactly, and ``get_config`` carries every
constructor argument (TFF rebuilds metrics from their config).
"""

from __future__ import annotations

from collections.abc import Sequence
import math

import tensorflow as tf

__all__ = ['MaskedAccuracy', 'MultiLabelF1', 'MultiLabelPrecision', 'RecallAtK']


def _check_threshold(threshold: float) -> float:
  if not 0.0 < threshold < 1.0:
    raise ValueError(f'threshold={threshold!r} is invalid; expected a probability in (0, 1)')
  return float(threshold)


class MaskedAccuracy(tf.keras.metrics.Metric):
  """Fraction of target positions, other than ``masked_tokens``, where argmax(logits) = target.

  update_state(y_true int [..., T], y_pred logits [..., T, V]); ties in argmax go to the
  smallest id. Result 0 when no position counts.
  """

  def __init__(self, masked_tokens: Sequence[int] = (), name: str = 'accuracy', dtype=None):
    super().__init__(name=name, dtype=dtype)
    self.masked_tokens = [int(t) for t in masked_tokens]
    self.correct = self.add_weight('correct', shape=(), initializer='zeros', dtype=tf.float64)
    self.count = self.add_weight('count', shape=(), initializer='zeros', dtype=tf.float64)

  def update_state(self, y_true, y_pred, sample_weight=None):
    y_true = tf.cast(y_true, tf.int64)
    keep = tf.ones_like(y_true, tf.bool)
    for token in self.masked_tokens:
      keep &= tf.not_equal(y_true, token)
    hit = tf.equal(tf.argmax(y_pred, axis=-1), y_true) & keep
    self.correct.assign_add(tf.reduce_sum(tf.cast(hit, tf.float64)))
    self.count.assign_add(tf.reduce_sum(tf.cast(keep, tf.float64)))

  def result(self):
    return tf.math.divide_no_nan(self.correct, self.count)

  def get_config(self):
    return {**super().get_config(), 'masked_tokens': list(self.masked_tokens)}


class RecallAtK(tf.keras.metrics.Metric):
  """sum_i |top_k(z_i) intersect Y_i| / sum_i |Y_i| (Keras' Recall(top_k=k) on logits).

  Ties in the top k go to the smallest label index (``tf.math.top_k``). Monotone in z, so
  logits and probabilities give the same value.
  """

  def __init__(self, k: int = 5, name: str | None = None, dtype=None):
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
      raise ValueError(f'k={k!r} is invalid; expected an integer >= 1')
    super().__init__(name=name or f'recall_at_{k}', dtype=dtype)
    self.k = k
    self.hits = self.add_weight('hits', shape=(), initializer='zeros', dtype=tf.float64)
    self.positives = self.add_weight('positives', shape=(), initializer='zeros', dtype=tf.float64)

  def update_state(self, y_true, y_pred, sample_weight=None):
    y_true = tf.cast(y_true, tf.float64)
    top = tf.math.top_k(y_pred, k=self.k, sorted=False).indices
    self.hits.assign_add(tf.reduce_sum(tf.gather(y_true, top, batch_dims=1)))
    self.positives.assign_add(tf.reduce_sum(y_true))

  def result(self):
    return tf.math.divide_no_nan(self.hits, self.positives)

  def get_config(self):
    return {**super().get_config(), 'k': self.k}


class _LabelCounts(tf.keras.metrics.Metric):
  """Per-label true positives, false positives and false negatives at a threshold."""

  def __init__(self, num_labels: int, threshold: float, from_logits: bool, name: str, dtype=None):
    super().__init__(name=name, dtype=dtype)
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
      raise ValueError(f'num_labels={num_labels!r} is invalid; expected an integer >= 1')
    self.num_labels = num_labels
    self.threshold = _check_threshold(threshold)
    self.from_logits = bool(from_logits)
    # [z > logit(t)] equals [sigmoid(z) > t] without float32 sigmoid rounding at 0.5.
    self._cut = (
      math.log(self.threshold / (1.0 - self.threshold)) if self.from_logits else self.threshold
    )
    self.tp, self.fp, self.fn = (
      self.add_weight(n, shape=(num_labels,), initializer='zeros', dtype=tf.float64)
      for n in ('tp', 'fp', 'fn')
    )

  def update_state(self, y_true, y_pred, sample_weight=None):
    truth = tf.cast(y_true, tf.float64) > 0.5
    predicted = tf.cast(y_pred, tf.float64) > self._cut

    def count(mask):
      return tf.reduce_sum(tf.cast(mask, tf.float64), axis=0)

    self.tp.assign_add(count(truth & predicted))
    self.fp.assign_add(count(~truth & predicted))
    self.fn.assign_add(count(truth & ~predicted))

  def reset_state(self):
    # Keras' default assigns a scalar 0, which fails for these [num_labels] vectors.
    for v in self.variables:
      v.assign(tf.zeros_like(v))

  def get_config(self):
    return {
      **super().get_config(),
      'num_labels': self.num_labels,
      'threshold': self.threshold,
      'from_logits': self.from_logits,
    }


class MultiLabelPrecision(_LabelCounts):
  """Micro precision sum_l TP_l / sum_l (TP_l + FP_l); 0 when nothing is predicted."""

  def __init__(
    self,
    num_labels: int,
    threshold: float = 0.5,
    from_logits: bool = True,
    name: str = 'precision',
    dtype=None,
  ):
    super().__init__(num_labels, threshold, from_logits, name, dtype)

  def result(self):
    tp = tf.reduce_sum(self.tp)
    return tf.math.divide_no_nan(tp, tp + tf.reduce_sum(self.fp))


class MultiLabelF1(_LabelCounts):
  """Micro- or macro-averaged F1 (see the module docstring for both formulas)."""

  def __init__(
    self,
    num_labels: int,
    average: str = 'macro',
    threshold: float = 0.5,
    from_logits: bool = True,
    name: str | None = None,
    dtype=None,
  ):
    if average not in ('micro', 'macro'):
      raise ValueError(f"average={average!r} is invalid; expected 'micro' or 'macro'")
    super().__init__(num_labels, threshold, from_logits, name or f'{average}_f1', dtype)
    self.average = average

  def result(self):
    if self.average == 'micro':
      tp = tf.reduce_sum(self.tp)
      return tf.math.divide_no_nan(2 * tp, 2 * tp + tf.reduce_sum(self.fp + self.fn))
    per_label = tf.math.divide_no_nan(2 * self.tp, 2 * self.tp + self.fp + self.fn)
    return tf.reduce_mean(per_label)

  def get_config(self):
    return {**super().get_config(), 'average': self.average}
