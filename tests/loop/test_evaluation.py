"""Evaluation: per-client distribution statistics and the Evaluator against NumPy."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import local_sgd_numpy as ref
from tff_adaptive.loop import evaluation


def test_distribution_summary_closed_form():
  # Ten clients 0.0, 0.1, ..., 0.9: mean 0.45; population std sqrt(mean(x^2) - mean^2)
  # = sqrt(0.285 - 0.2025) = 0.28723; worst 30% = the 3 smallest = mean(0, .1, .2) = 0.1;
  # numpy's linear percentiles: p10 = 0.09, p50 = 0.45, p90 = 0.81.
  s = evaluation.distribution_summary(np.arange(10) / 10)
  assert s['mean'] == pytest.approx(0.45)
  assert s['std'] == pytest.approx(0.287228, abs=1e-6)
  assert s['worst30'] == pytest.approx(0.1)
  assert s['min'] == 0.0
  assert (s['p10'], s['p50'], s['p90']) == pytest.approx((0.09, 0.45, 0.81))


def test_worst30_of_a_loss_is_its_largest_values():
  # For losses the worst clients have the LARGEST values: mean(0.7, 0.8, 0.9) = 0.8.
  s = evaluation.distribution_summary(np.arange(10) / 10, higher_is_better=False)
  assert s['worst30'] == pytest.approx(0.8)
  assert evaluation.lower_is_better('loss') and not evaluation.lower_is_better('accuracy')


def test_worst30_uses_at_least_one_client_and_rounds_up():
  assert evaluation.distribution_summary([0.5])['worst30'] == 0.5
  # ceil(0.3 * 4) = 2 clients: mean(0.1, 0.2).
  assert evaluation.distribution_summary([0.4, 0.1, 0.3, 0.2])['worst30'] == pytest.approx(0.15)


def _softmax_regression():
  return tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])


def test_evaluator_matches_numpy_loss_and_accuracy_over_chunks_and_clients():
  rng = np.random.default_rng(0)
  w = rng.normal(size=(5, 3)).astype(np.float32)
  b = rng.normal(size=(3,)).astype(np.float32)
  x = rng.normal(size=(25, 5)).astype(np.float32)
  y = rng.integers(0, 3, 25).astype(np.int32)
  evaluator = evaluation.Evaluator(
    _softmax_regression,
    lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    batch_size=7,
  )
  weights = tff.learning.models.ModelWeights(trainable=[w, b], non_trainable=[])
  logits = x @ w + b
  loss, _, _ = ref.cross_entropy_and_grads(w.astype(np.float64), b.astype(np.float64), x, y)
  accuracy = np.mean(np.argmax(logits, axis=1) == y)
  data = collections.OrderedDict(x=x, y=y)
  result = evaluator.evaluate(weights, data)
  assert result['loss'] == pytest.approx(loss, rel=1e-5)
  assert result['accuracy'] == pytest.approx(accuracy)
  chunks = [
    collections.OrderedDict(x=x[:11], y=y[:11]),
    collections.OrderedDict(x=x[11:], y=y[11:]),
  ]
  chunked = evaluator.evaluate_chunks(weights, iter(chunks))
  assert chunked['loss'] == pytest.approx(loss, rel=1e-5)
  assert chunked['accuracy'] == pytest.approx(accuracy)
  summary, per_client = evaluator.evaluate_clients(weights, {'a': chunks[0], 'b': chunks[1]})
  acc_a = np.mean(np.argmax(logits[:11], axis=1) == y[:11])
  acc_b = np.mean(np.argmax(logits[11:], axis=1) == y[11:])
  assert per_client['a']['accuracy'] == pytest.approx(acc_a)
  assert summary['accuracy_mean'] == pytest.approx((acc_a + acc_b) / 2)
  assert summary['accuracy_worst30'] == pytest.approx(min(acc_a, acc_b))
