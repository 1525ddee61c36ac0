"""fmnist: Fashion-MNIST with Dirichlet label skew, the CNN setup of Kim et al. 2024.

Kim, Toghani, Uribe, Kyrillidis. "Adaptive Federated Learning with Auto-Tuned Clients"
(Delta-SGD), ICLR 2024, Sec. 4: 100 clients x 500 examples drawn from the 60,000 training
images with Dirichlet(alpha) label proportions (Hsu et al. 2019), alpha in {1, 0.1, 0.01}; the
shallow CNN of `tasks.models.build_fmnist_cnn`; batch 64; 10% of clients per round.
Each client's 500 examples are split 80/20 into local train/test (as Ju et al. do) for
per-client metrics; the 10,000 test images are the pooled test set.
"""

import collections

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import models

NUM_CLIENTS = 100
EXAMPLES_PER_CLIENT = 500
LOCAL_TEST_FRACTION = 0.2


def _to_model_input(images: np.ndarray, labels: np.ndarray) -> base.ClientArrays:
  return collections.OrderedDict(
    x=(images.astype(np.float32) / 255.0)[..., None], y=labels.astype(np.int32)
  )


DEFAULTS = catalog.TASKS['fmnist'].defaults  # batch 64, 10 clients per round, 1000 rounds


def build_fmnist_task(config: base.TaskConfig) -> base.Task:
  """Loads Fashion-MNIST from config.data_dir (default: the Debian package) and partitions it."""
  data = datasets.load_fashion_mnist(config.data_dir)
  num_clients = config.num_clients or NUM_CLIENTS
  per_client = config.examples_per_client or EXAMPLES_PER_CLIENT
  parts = datasets.dirichlet_label_partition(
    data.y_train, num_clients, per_client, config.dirichlet_alpha, seed=config.seed
  )
  train, local_test = {}, {}
  for k, idx in enumerate(parts):
    tr, te = datasets.split_train_test(len(idx), LOCAL_TEST_FRACTION, seed=config.seed + k)
    client_id = f'f{k:04d}'
    train[client_id] = _to_model_input(data.x_train[idx[tr]], data.y_train[idx[tr]])
    local_test[client_id] = _to_model_input(data.x_train[idx[te]], data.y_train[idx[te]])
  return base.Task(
    name='fmnist',
    train_clients=train,
    client_test=local_test,
    central_test=_to_model_input(data.x_test, data.y_test),
    keras_model_fn=lambda seed=None: models.build_fmnist_cnn(10, seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    defaults=DEFAULTS,
    description=(
      f'Fashion-MNIST, {num_clients} clients x {per_client} examples, '
      f'Dirichlet(alpha={config.dirichlet_alpha}) labels, CNN (Kim et al. 2024)'
    ),
  )
