"""Tests of tasks/metrics.py against closed forms and an independent NumPy implementation.

Formulas (tasks/metrics.py): yhat = [z > logit(t)]; over all (example, label) pairs TP, FP,
FN; precision = TP / (TP + FP); micro-F1 = 2 TP / (2 TP + FP + FN); macro-F1 = mean over labels
of 2 TP_l / (2 TP_l + FP_l + FN_l), 0 for a label never true and never predicted; recall@k =
sum_i |top_k(z_i) & Y_i| / sum_i |Y_i|; masked accuracy = correct / counted target positions.
"""

import numpy as np
import pytest
import tensorflow as tf

from tff_adaptive.tasks import metrics

# 3 examples x 5 labels. Predictions at t = 0.5 (z > 0):
#   yhat = [[1,0,0,1,0],[0,1,0,0,0],[1,0,0,0,0]]
#   y    = [[1,0,1,0,0],[0,1,0,0,0],[1,0,0,0,0]]
# Per label (TP, FP, FN): l0 (2,0,0) F1 1; l1 (1,0,0) F1 1; l2 (0,0,1) F1 0; l3 (0,1,0) F1 0;
# l4 (0,0,0) F1 0 by convention. Totals TP 3, FP 1, FN 1.
Y = np.array([[1, 0, 1, 0, 0], [0, 1, 0, 0, 0], [1, 0, 0, 0, 0]], np.float32)
Z = np.array(
  [[2.0, -1.0, -3.0, 0.5, -2.0], [-1.0, 1.0, -2.0, -2.0, -4.0], [3.0, -1.0, -1.0, -1.0, -0.5]],
  np.float32,
)


def _result(metric, y_true, y_pred):
  metric.update_state(y_true, y_pred)
  return float(metric.result())


def test_precision_and_f1_closed_form():
  assert _result(metrics.MultiLabelPrecision(5), Y, Z) == pytest.approx(3 / 4)  # 3 / (3 + 1)
  assert _result(metrics.MultiLabelF1(5, 'micro'), Y, Z) == pytest.approx(6 / 8)  # 6/(6+1+1)
  assert _result(metrics.MultiLabelF1(5, 'macro'), Y, Z) == pytest.approx(2 / 5)  # (1+1)/5
  # The same on probabilities; and Keras' own micro precision (the authors' metric) agrees.
  probs = tf.sigmoid(Z).numpy()
  assert _result(metrics.MultiLabelPrecision(5, from_logits=False), Y, probs) == pytest.approx(0.75)
  assert _result(tf.keras.metrics.Precision(), Y, probs) == pytest.approx(0.75)


def test_threshold_is_strict_and_exact_at_zero_logit():
  # z = 0 is probability exactly 0.5: not predicted (Keras: y_pred > threshold).
  y = np.array([[1.0, 0.0]], np.float32)
  z = np.array([[0.0, 1e-7]], np.float32)  # sigmoid(1e-7) rounds to 0.5 in float32
  m = metrics.MultiLabelF1(2, 'micro')
  m.update_state(y, z)
  np.testing.assert_array_equal(m.tp.numpy(), [0, 0])
  np.testing.assert_array_equal(m.fp.numpy(), [0, 1])  # logit 1e-7 > 0: predicted
  np.testing.assert_array_equal(m.fn.numpy(), [1, 0])
  # At threshold 0.9 the cut is logit(0.9) = log 9 ~ 2.197.
  m9 = metrics.MultiLabelPrecision(1, threshold=0.9)
  m9.update_state(np.ones((2, 1)), np.array([[2.19], [2.21]], np.float32))
  assert m9.tp.numpy()[0] == 1.0 and m9.fp.numpy()[0] == 0.0


def test_recall_at_k_closed_form_and_keras_agreement():
  y = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]], np.float32)
  z = np.array([[0.9, 0.8, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]], np.float32)
  # Top-2: {0, 1} -> 1 hit of 2 positives; {3, 2} -> 0 of 1; no positives. 1 / 3.
  assert _result(metrics.RecallAtK(2), y, z) == pytest.approx(1 / 3)
  assert metrics.RecallAtK(5).name == 'recall_at_5'
  rng = np.random.default_rng(0)
  y = (rng.uniform(size=(40, 30)) < 0.1).astype(np.float32)
  z = rng.normal(size=(40, 30)).astype(np.float32)
  keras = tf.keras.metrics.Recall(top_k=5)
  assert _result(metrics.RecallAtK(5), y, z) == pytest.approx(
    _result(keras, y, tf.sigmoid(z).numpy()), rel=1e-6
  )


def _numpy_reference(y, z, k=5):
  yhat = z > 0
  y = y > 0.5
  tp = (y & yhat).sum(0).astype(np.float64)
  fp = (~y & yhat).sum(0).astype(np.float64)
  fn = (y & ~yhat).sum(0).astype(np.float64)
  denom = 2 * tp + fp + fn
  per_label = np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)
  top = np.argsort(-z, axis=1, kind='stable')[:, :k]
  hits = np.take_along_axis(y, top, 1).sum()
  return dict(
    precision=tp.sum() / (tp.sum() + fp.sum()),
    micro_f1=2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()),
    macro_f1=per_label.mean(),
    recall_at_5=hits / y.sum(),
  )


def _all_metrics(num_labels):
  return [
    metrics.MultiLabelPrecision(num_labels),
    metrics.MultiLabelF1(num_labels, 'micro'),
    metrics.MultiLabelF1(num_labels, 'macro'),
    metrics.RecallAtK(5),
  ]


def test_multilabel_metrics_match_numpy_and_sum_over_batches_and_clients():
  rng = np.random.default_rng(1)
  y = (rng.uniform(size=(60, 25)) < 0.15).astype(np.float32)
  z = (rng.normal(size=(60, 25)) - 1.0).astype(np.float32)
  y[:, -3:] = 0.0  # three labels never true and never predicted (macro-F1 counts them as 0)
  z[:, -3:] = -5.0
  expected = _numpy_reference(y, z)
  # One pass over all examples.
  whole = {m.name: _result(m, y, z) for m in _all_metrics(25)}
  for name, value in expected.items():
    assert whole[name] == pytest.approx(value, rel=1e-9), name
  # The three empty labels count 0: macro over 25 labels is 22/25 of macro over the other 22.
  assert whole['macro_f1'] == pytest.approx(
    22 / 25 * _numpy_reference(y[:, :22], z[:, :22])['macro_f1'], rel=1e-9
  )
  # Two "clients": summing their state variables (TFF's sum_then_finalize) is exact.
  parts = [_all_metrics(25), _all_metrics(25)]
  for ms, (lo, hi) in zip(parts, ((0, 17), (17, 60))):
    for m in ms:
      m.update_state(y[lo:hi], z[lo:hi])
  for a, b in zip(*parts):
    merged = type(a).from_config(a.get_config())
    for v, va, vb in zip(merged.variables, a.variables, b.variables):
      v.assign(va + vb)
    assert float(merged.result()) == pytest.approx(whole[a.name], rel=1e-12), a.name
    # reset_state zeroes every (vector) accumulator; the metric then counts afresh.
    merged.reset_state()
    assert all(not v.numpy().any() for v in merged.variables)
    assert _result(merged, y, z) == pytest.approx(whole[a.name], rel=1e-12)


def test_masked_accuracy_closed_form():
  y = np.array([[1, 2, 0, 0], [3, 0, 0, 0]], np.int32)
  pred = np.array([[1, 5, 0, 2], [3, 3, 0, 0]])
  logits = tf.one_hot(pred, 6).numpy()
  # Counted (target != 0): (0,0) correct, (0,1) wrong (5 != 2), (1,0) correct -> 2 / 3.
  assert _result(metrics.MaskedAccuracy([0]), y, logits) == pytest.approx(2 / 3)
  # Also masking token 1 leaves (0,1) wrong and (1,0) right: 1 / 2. Masking nothing adds the
  # five pad targets, predicted 0, 2, 3, 0, 0 at (0,2), (0,3), (1,1), (1,2), (1,3): 3 more
  # correct, (2 + 3) / 8.
  assert _result(metrics.MaskedAccuracy([0, 1]), y, logits) == pytest.approx(1 / 2)
  assert _result(metrics.MaskedAccuracy([]), y, logits) == pytest.approx(5 / 8)
  # Nothing counted: 0, not NaN.
  assert _result(metrics.MaskedAccuracy([0, 1, 2, 3]), y, logits) == 0.0


def test_metric_configs_round_trip_and_invalid_arguments():
  for m in (
    metrics.MaskedAccuracy([0, 7], name='acc'),
    metrics.RecallAtK(3),
    metrics.MultiLabelPrecision(4, threshold=0.3),
    metrics.MultiLabelF1(4, 'micro', from_logits=False),
  ):
    clone = type(m).from_config(m.get_config())
    assert clone.get_config() == m.get_config()
  with pytest.raises(ValueError, match='threshold'):
    metrics.MultiLabelPrecision(3, threshold=1.0)
  with pytest.raises(ValueError, match='average'):
    metrics.MultiLabelF1(3, average='weighted')
  with pytest.raises(ValueError, match='k=0'):
    metrics.RecallAtK(0)
  with pytest.raises(ValueError, match='num_labels'):
    metrics.MultiLabelF1(0)
