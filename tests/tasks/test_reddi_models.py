"""Tests of the Reddi et al. 2021 models (tasks/reddi_models.py): sizes, outputs, preprocessing.

Parameter counts are the paper's Tables 3-6 (and 10,000 x 500 + 500 for SO LR); per layer:
Dense d_in -> d_out has d_in d_out + d_out, an LSTM of n units on d inputs 4 n (d + n + 1), an
Embedding V x d has V d, a bias-free conv k x k from c to f channels k^2 c f, GroupNorm over C
channels 2 C (scale and offset).
"""

import numpy as np
import pytest
import tensorflow as tf

from tff_adaptive.core import seeds
from tff_adaptive.tasks import layers as task_layers
from tff_adaptive.tasks import reddi_models


def _weighted_counts(model):
  return [layer.count_params() for layer in model.layers if layer.weights]


def test_emnist_autoencoder_matches_table_3():
  model = reddi_models.build_emnist_autoencoder(seed=0)
  # Table 3: 784*1000 + 1000 = 785,000; 1000*500 + 500 = 500,500; ...; 1000*784 + 784 = 784,784.
  assert _weighted_counts(model) == [785000, 500500, 125250, 7530, 7750, 125500, 501000, 784784]
  assert model.count_params() == 2837314
  activations = [layer.activation for layer in model.layers]
  # The authors' code: sigmoid everywhere except the 30-unit code layer (linear).
  assert (
    activations
    == [tf.keras.activations.sigmoid] * 3
    + [tf.keras.activations.linear]
    + [tf.keras.activations.sigmoid] * 4
  )
  literal = reddi_models.build_emnist_autoencoder(code_activation='sigmoid')
  assert all(layer.activation is tf.keras.activations.sigmoid for layer in literal.layers)
  x = np.random.default_rng(0).uniform(size=(5, 784)).astype(np.float32)
  y = model(x).numpy()
  assert y.shape == (5, 784) and y.min() > 0.0 and y.max() < 1.0


def test_shakespeare_lstm_matches_table_5():
  model = reddi_models.build_shakespeare_lstm(seed=0)
  # 90*8 = 720; 4*256*(8 + 256 + 1) = 271,360; 4*256*(256 + 256 + 1) = 525,312;
  # 256*90 + 90 = 23,130.
  assert _weighted_counts(model) == [720, 271360, 525312, 23130]
  assert model.count_params() == 820522
  assert model.input_shape == (None, 80) and model.output_shape == (None, 80, 90)


def test_so_nwp_lstm_matches_table_6():
  model = reddi_models.build_so_nwp_lstm(seed=0)
  # 10,004*96 = 960,384; 4*670*(96 + 670 + 1) = 2,055,560; 670*96 + 96 = 64,416;
  # 96*10,004 + 10,004 = 970,388.
  assert _weighted_counts(model) == [960384, 2055560, 64416, 970388]
  assert model.count_params() == 4050748
  assert model.input_shape == (None, 20) and model.output_shape == (None, 20, 10004)


def test_so_lr_is_one_vs_rest_logistic_regression():
  model = reddi_models.build_so_lr(seed=0)
  assert model.count_params() == 10000 * 500 + 500 == 5000500
  x = np.random.default_rng(1).uniform(size=(3, 10000)).astype(np.float32)
  kernel, bias = model.get_weights()
  np.testing.assert_allclose(model(x).numpy(), x @ kernel + bias, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('num_classes,total,dense', [(10, 11181642, 5130), (100, 11227812, 51300)])
def test_resnet18_gn_parameter_count(num_classes, total, dense):
  model = reddi_models.build_resnet18_gn(num_classes, seed=0)
  by_type = {}
  for layer in model.layers:
    by_type[type(layer).__name__] = by_type.get(type(layer).__name__, 0) + layer.count_params()
  # Convolutions: stem 7*7*3*64 = 9,408; stage 1: 4 x 3*3*64*64 = 147,456; stage s >= 2 with
  # f filters: 3*3*(f/2)*f + 3 x 3*3*f*f + a 1x1 shortcut (f/2)*f -> 516,096 + 8,192,
  # 2,064,384 + 32,768, 8,257,536 + 131,072. Sum 11,166,912.
  assert by_type['Conv2D'] == 11166912
  # GroupNorm (2 per channel): stem 64; stage 1: 3 x 64; stage s >= 2: (f/2) + 4 f ... = 9,600.
  assert by_type['GroupNormalization'] == 9600
  assert by_type['Dense'] == dense == 513 * num_classes
  assert model.count_params() == total
  gn = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.GroupNormalization)]
  assert len(gn) == 20 and all(layer.groups == 2 for layer in gn)
  # Weight decay 1e-4 on the 20 convolutions and the dense kernel and bias (authors' code).
  assert len(model.losses) == 22
  # Groups and stage strides change no parameter count; strides change the spatial size
  # (24 -> 12 by the stem conv -> 6 by the pool; stride-2 stages -> 3, 2, 1).
  assert reddi_models.build_resnet18_gn(num_classes, groups=32).count_params() == total
  he = reddi_models.build_resnet18_gn(num_classes, stage_strides=(1, 2, 2, 2))
  assert he.count_params() == total
  assert model.get_layer('stage4_block2_add').output_shape == (None, 6, 6, 512)
  assert he.get_layer('stage4_block2_add').output_shape == (None, 1, 1, 512)


def test_resnet18_gn_rejects_bad_arguments():
  with pytest.raises(ValueError, match='groups=3'):
    reddi_models.build_resnet18_gn(10, groups=3)
  with pytest.raises(ValueError, match='stage_strides'):
    reddi_models.build_resnet18_gn(10, stage_strides=(1, 3, 1, 1))
  with pytest.raises(ValueError, match='num_classes'):
    reddi_models.build_resnet18_gn(1)
  with pytest.raises(ValueError, match='code_activation'):
    reddi_models.build_emnist_autoencoder(code_activation='relu')


def test_sequence_models_expose_no_mask_and_copy_state_over_padding():
  model = reddi_models.build_shakespeare_lstm(seed=3)
  x = np.array(
    [[88, 5, 6, 7, 89, 0, 0, 0] + [0] * 72, [88, 9, 9, 9, 9, 9, 9, 9] + [9] * 72], np.int32
  )
  out = model(x)
  assert getattr(out, '_keras_mask', None) is None
  logits = out.numpy()
  # The embedding's mask freezes the LSTM over the padded tail (as in the authors' model):
  # every padded position repeats the logits of the last real position (index 4).
  np.testing.assert_array_equal(logits[0, 5:], np.broadcast_to(logits[0, 4], (75, 90)))
  # Causal: changing the tail does not change earlier outputs.
  x2 = x.copy()
  x2[1, 40:] = 3
  np.testing.assert_allclose(model(x2).numpy()[1, :40], logits[1, :40], rtol=1e-5, atol=1e-6)
  assert not np.allclose(model(x2).numpy()[1, 40:], logits[1, 40:])


def test_sequence_loss_covers_every_position_including_padding():
  model = reddi_models.build_so_nwp_lstm(seed=1)
  x = np.zeros((2, 20), np.int32)
  x[:, 0] = 10002
  x[0, 1:4] = [5, 17, 10003]
  x[1, 1:21] = np.arange(100, 119)
  y = np.concatenate([x[:, 1:], np.zeros((2, 1), np.int32)], axis=1)
  # A large pad logit makes pad targets cheap, so averaging over them is visible.
  kernel, bias = model.get_layer('logits').get_weights()
  bias[0] = 8.0
  model.get_layer('logits').set_weights([kernel, bias])
  logits = model(x)
  loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits)
  z = logits.numpy().astype(np.float64)
  log_p = (
    z
    - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
    - z.max(-1, keepdims=True)
  )
  per_position = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
  # Mean over all 2 x 20 positions; a mask-applying loss would average 3 + 20 = 23 of them.
  assert float(loss) == pytest.approx(per_position.mean(), rel=1e-5)
  valid = np.ones_like(y, bool)
  valid[0, 4:] = False
  assert per_position.mean() < per_position[valid].mean() - 1.0


def _reference_window(image, off_y, off_x, flip, size=24):
  window = image[off_y : off_y + size, off_x : off_x + size].astype(np.float64)
  if flip:
    window = window[:, ::-1]
  std = max(window.std(), 1.0 / np.sqrt(window.size))
  return (window - window.mean()) / std


def _find_window(image, out):
  matches = [
    (a, b, f)
    for a in range(9)
    for b in range(9)
    for f in (0, 1)
    if np.allclose(_reference_window(image, a, b, f), out, atol=1e-4)
  ]
  assert len(matches) == 1, matches
  return matches[0]


def test_cifar_preprocessing_inference_is_central_crop_and_standardisation():
  images = np.random.default_rng(2).integers(0, 256, size=(3, 32, 32, 3), dtype=np.uint8)
  layer = task_layers.CifarPreprocessing()
  out = layer(images, training=False).numpy()
  expected = tf.image.per_image_standardization(
    tf.image.resize_with_crop_or_pad(tf.cast(images, tf.float32), 24, 24)
  ).numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  for k in range(3):
    assert _find_window(images[k], out[k]) == (4, 4, 0)


def test_cifar_preprocessing_training_is_a_pure_function_of_the_step_seed():
  images = np.random.default_rng(3).integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)
  layer = task_layers.CifarPreprocessing()

  def augment(seed):
    with seeds.step_seeds(tf.constant(seed, tf.int64)):
      return layer(images, training=True).numpy()

  a, b, c = augment([7, 1]), augment([7, 1]), augment([7, 2])
  np.testing.assert_array_equal(a, b)
  assert not np.allclose(a, c)
  # Every output is the standardised 24x24 window of its own image, possibly flipped.
  for k in range(4):
    _find_window(images[k], a[k])


def test_cifar_preprocessing_draws_all_offsets_and_flips_uniformly():
  image = np.random.default_rng(4).integers(0, 256, size=(1, 32, 32, 3), dtype=np.uint8)
  batch = np.repeat(image, 400, axis=0)
  layer = task_layers.CifarPreprocessing()
  with seeds.step_seeds(tf.constant([11, 5], tf.int64)):
    out = layer(batch, training=True).numpy()
  # Recover (off_y, off_x, flip) of each image through a flattened, unnormalised lookup:
  # standardisation is invertible per window, so compare standardised windows directly.
  keys = {
    (a, b, f): _reference_window(image[0], a, b, f)
    for a in range(9)
    for b in range(9)
    for f in (0, 1)
  }
  found = []
  for k in range(len(batch)):
    found.append(next(key for key, ref in keys.items() if np.allclose(ref, out[k], atol=1e-4)))
  found = np.array(found)
  # 400 draws of offsets uniform on 0..8: every value appears (P(a value is missing)
  # < 9 (8/9)^400 ~ 3e-20), and the flip rate is 1/2 within 5 standard errors (0.125).
  assert set(found[:, 0]) == set(range(9)) and set(found[:, 1]) == set(range(9))
  assert abs(found[:, 2].mean() - 0.5) < 0.125


def test_drop_mask_removes_the_keras_mask():
  embedded = tf.keras.layers.Embedding(5, 2, mask_zero=True)(np.array([[1, 0]]))
  assert embedded._keras_mask is not None  # pylint: disable=protected-access
  out = reddi_models.DropMask()(embedded)
  assert getattr(out, '_keras_mask', None) is None
  np.testing.assert_array_equal(out.numpy(), embedded.numpy())
