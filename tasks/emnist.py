"""emnist_cr and emnist_ae: federated EMNIST-62 (3,400 writers), Reddi et al. 2021, App. C.2.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Data: TFF's ``emnist_all.sqlite`` (Caldas et al.'s LEAF split by
writer), read by ``datasets.load_federated('emnist', data_dir)``. TFF's pixels are floats in
[0, 1] with 1.0 the BACKGROUND (TFF's docstring: the inverse of MNIST's convention).

* emnist_cr (character recognition): x = pixels [28, 28, 1] as stored, y = label in 0..61; the
  CNN of Table 4 (``tasks.models.build_emnist_cr_cnn``, 1,206,590 parameters); cross-entropy;
  accuracy. Defaults (Table 7 and the authors' docs): 10 clients/round, batch 20, 1500 rounds,
  learning rates and tau of Tables 8-9 per server optimizer (``tasks.published``).
* emnist_ae (autoencoder): x = y = 1 - pixels flattened to 784 (the authors' code inverts, so
  the background is 0); the autoencoder of Table 3 (``reddi_models.build_emnist_autoencoder``,
  2,837,314 parameters); squared error with Keras' ``MeanSquaredError(reduction=SUM)``: the
  per-example loss is the mean over 784 pixels and a batch's loss is the SUM over its examples,
  which the published learning rates assume (a mean-reduced loss would need the client rate
  scaled by about the batch size); metric ``mse`` (mean over pixels and examples; Table 1 reports
  it x 1000). Defaults: 10 clients/round, batch 20, 3000 rounds.

Validation: the full test split (77,483 examples) pooled; per-client metrics on each writer's own
test examples (``client_test``, views into the pooled arrays: the split is read once).
"""

import collections

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.datasets import checks
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import models
from tff_adaptive.tasks import reddi_models

DEFAULT_DATA_DIR = catalog.TFF_DATA_DIR
NUM_CLASSES = 62

CR_DEFAULTS = catalog.TASKS['emnist_cr'].defaults  # Reddi et al.'s (`tasks.published`)
AE_DEFAULTS = catalog.TASKS['emnist_ae'].defaults


def cr_arrays(raw: collections.OrderedDict) -> base.ClientArrays:
  """TFF EMNIST features -> x float32 [n, 28, 28, 1] (as stored), y int32 [n]."""
  checks.check_in_range('pixels', raw['pixels'], 0.0, 1.0)
  checks.check_labels('label', raw['label'], NUM_CLASSES)
  return collections.OrderedDict(
    x=raw['pixels'].astype(np.float32)[..., None], y=raw['label'].astype(np.int32)
  )


def ae_arrays(raw: collections.OrderedDict) -> base.ClientArrays:
  """TFF EMNIST features -> x = y = 1 - pixels, float32 [n, 784]."""
  checks.check_in_range('pixels', raw['pixels'], 0.0, 1.0)
  x = 1.0 - raw['pixels'].astype(np.float32).reshape(-1, 28 * 28)
  return collections.OrderedDict(x=x, y=x.copy())


def _build(
  config: base.TaskConfig,
  name: str,
  to_arrays,
  keras_model_fn,
  loss_fn,
  metrics_fn,
  defaults: base.TaskDefaults,
  what: str,
) -> base.Task:
  data_dir = config.data_dir or DEFAULT_DATA_DIR
  splits = datasets.load_federated('emnist', data_dir)
  train = datasets.MappedClients(splits.train, to_arrays)
  central_test, client_test = base.pool_clients(datasets.MappedClients(splits.test, to_arrays))
  return base.Task(
    name=name,
    train_clients=train,
    central_test=central_test,
    client_test=client_test,
    keras_model_fn=keras_model_fn,
    loss_fn=loss_fn,
    metrics_fn=metrics_fn,
    defaults=defaults,
    description=(
      f'EMNIST-62 {what} (Reddi et al. 2021), {len(train)} train writers, {splits.path}'
    ),
  )


def build_emnist_cr_task(config: base.TaskConfig) -> base.Task:
  """EMNIST-62 character recognition with the CNN of Reddi et al. Table 4."""
  return _build(
    config,
    'emnist_cr',
    cr_arrays,
    keras_model_fn=lambda seed=None: models.build_emnist_cr_cnn(seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    defaults=CR_DEFAULTS,
    what='character recognition, CNN (Table 4)',
  )


def build_emnist_ae_task(config: base.TaskConfig) -> base.Task:
  """EMNIST-62 autoencoding with the network of Reddi et al. Table 3, SUM-reduced MSE."""
  return _build(
    config,
    'emnist_ae',
    ae_arrays,
    keras_model_fn=lambda seed=None: reddi_models.build_emnist_autoencoder(seed=seed),
    loss_fn=lambda: tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.SUM),
    metrics_fn=lambda: [tf.keras.metrics.MeanSquaredError(name='mse')],
    defaults=AE_DEFAULTS,
    what='autoencoder (Table 3), sum-reduced MSE',
  )
