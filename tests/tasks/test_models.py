"""Tests for the Keras model builders in tasks/models.py."""

import numpy as np
import pytest
import tensorflow as tf

from tff_adaptive.tasks.layers import StatelessDropout
from tff_adaptive.tasks.models import build_emnist_cr_cnn
from tff_adaptive.tasks.models import build_fmnist_cnn
from tff_adaptive.tasks.models import build_softmax_regression


def test_fmnist_cnn_parameter_count_and_shapes():
  model = build_fmnist_cnn()
  assert model.built  # input declared: weights exist without data
  # conv1: 5*5*1*10 + 10 = 260; conv2: 5*5*10*20 + 20 = 5,020;
  # fc1: 320*50 + 50 = 16,050 (320 = 4*4*20); logits: 50*10 + 10 = 510. Total 21,840.
  assert [layer.count_params() for layer in model.layers if layer.weights] == [
    260,
    5020,
    16050,
    510,
  ]
  assert model.count_params() == 21840
  assert model.get_layer('flatten').output_shape == (None, 320)
  assert model.input_shape == (None, 28, 28, 1) and model.output_shape == (None, 10)
  assert model.input.dtype == tf.float32
  assert isinstance(model.get_layer('conv2_drop'), StatelessDropout)
  assert model.get_layer('conv2_drop').spatial and model.get_layer('conv2_drop').rate == 0.5
  assert model.get_layer('fc1_drop').rate == 0.5
  assert model.get_layer('logits').activation is tf.keras.activations.linear


def test_fmnist_cnn_num_classes_and_logits():
  model = build_fmnist_cnn(num_classes=62, seed=0)
  # Only the last layer changes: 50*62 + 62 = 3,162 instead of 510.
  assert model.count_params() == 21840 - 510 + 3162
  x = np.random.default_rng(0).uniform(size=(3, 28, 28, 1)).astype(np.float32)
  logits = model(x, training=False).numpy()
  assert logits.shape == (3, 62)
  # Logits, not probabilities: rows are not normalised and some entries are negative.
  assert np.all(np.abs(logits.sum(axis=1) - 1.0) > 1e-3) and logits.min() < 0
  # Inference is deterministic (dropout off).
  np.testing.assert_array_equal(logits, model(x, training=False).numpy())


def test_seeded_initialisation_is_reproducible():
  a = build_fmnist_cnn(seed=5).get_weights()
  b = build_fmnist_cnn(seed=5).get_weights()
  c = build_fmnist_cnn(seed=6).get_weights()
  assert all(np.array_equal(u, v) for u, v in zip(a, b))
  assert not np.array_equal(a[0], c[0])


def test_emnist_cr_cnn_parameter_count_and_shapes():
  model = build_emnist_cr_cnn(seed=0)
  # Reddi et al. 2021, Table 4. conv1: 3*3*1*32 + 32 = 320; conv2: 3*3*32*64 + 64 = 18,496;
  # fc1: 9,216*128 + 128 = 1,179,776 (9,216 = 12*12*64); logits: 128*62 + 62 = 7,998.
  assert [layer.count_params() for layer in model.layers if layer.weights] == [
    320,
    18496,
    1179776,
    7998,
  ]
  assert model.count_params() == 1206590
  assert model.get_layer('flatten').output_shape == (None, 9216)
  assert model.input_shape == (None, 28, 28, 1) and model.output_shape == (None, 62)
  assert [layer.rate for layer in model.layers if isinstance(layer, StatelessDropout)] == [
    0.25,
    0.5,
  ]
  assert model.get_layer('logits').activation is tf.keras.activations.linear
  x = np.random.default_rng(0).uniform(size=(2, 28, 28, 1)).astype(np.float32)
  np.testing.assert_array_equal(model(x, training=False).numpy(), model(x, training=False).numpy())


def test_softmax_regression():
  model = build_softmax_regression()
  # 60*10 weights + 10 biases = 610.
  assert model.count_params() == 610
  assert model.input_shape == (None, 60) and model.output_shape == (None, 10)
  w, b = model.get_weights()
  x = np.random.default_rng(1).normal(size=(4, 60)).astype(np.float32)
  np.testing.assert_allclose(model(x).numpy(), x @ w + b, rtol=1e-5, atol=1e-5)
  assert build_softmax_regression(num_features=784, num_classes=62).count_params() == 48670


@pytest.mark.parametrize(
  'builder, kwargs, name',
  [
    (build_fmnist_cnn, dict(num_classes=1), 'num_classes=1'),
    (build_softmax_regression, dict(num_features=0), 'num_features=0'),
  ],
)
def test_model_validation(builder, kwargs, name):
  with pytest.raises(ValueError, match=name):
    builder(**kwargs)
