"""cifar10 and cifar100: ResNet-18 with GroupNorm on federated CIFAR, Reddi et al. 2021, App. C.1.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021.

* cifar100: TFF's ``cifar100.sqlite`` (``datasets.load_federated('cifar100', data_dir)``), which
  is the authors' published split: 500 training clients x 100 images made by Pachinko allocation
  over coarse and fine labels (App. F; ``datasets.pachinko_allocation_partition`` re-creates
  such splits), 100 test clients x 100 images. Labels: the 100 fine labels.
* cifar10: CIFAR-10 from a prepared tensorflow-datasets directory (``datasets.federated_cifar10``),
  500 clients x 100 training images with Dirichlet(alpha = ``--dirichlet_alpha``, paper 0.1)
  label proportions (Hsu et al. 2019), partition seeded by ``--seed``.

Client arrays hold the raw uint8 images [n, 32, 32, 3]; the model's first layer
(``tasks.layers.CifarPreprocessing``) does C.1's preprocessing: when training, a random 24x24
crop and horizontal flip per image and step drawn from the client-training step seed (so a run
is a pure function of its seed and every local epoch sees new crops, as the authors'
``shuffle().repeat().map(random crop)`` pipeline); at evaluation, the central 24x24 crop; then
per-image standardisation. Model: ``reddi_models.build_resnet18_gn`` with 2 groups per
GroupNorm (11,181,642 parameters for CIFAR-10, 11,227,812 for CIFAR-100), including the
authors' L2 weight decay 1e-4 in the training loss. Validation: the full 10,000-image test set
(for cifar100 also per test client, ``client_test``).
Defaults: 10 clients/round, batch 20, 4000 rounds; CIFAR-100 learning rates and tau of Tables
8-9 (CIFAR-10 has no published learning rates: ``tasks.published``).
"""

import collections

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.datasets import checks
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import reddi_models

DEFAULT_TFF_DATA_DIR = catalog.TFF_DATA_DIR
DEFAULT_TFDS_DATA_DIR = catalog.TFDS_DATA_DIR
CIFAR10_CLIENTS = 500
CIFAR10_EXAMPLES_PER_CLIENT = 100

CIFAR10_DEFAULTS = catalog.TASKS['cifar10'].defaults  # Reddi et al.'s (`tasks.published`)
CIFAR100_DEFAULTS = catalog.TASKS['cifar100'].defaults


def _arrays(images: np.ndarray, labels: np.ndarray) -> base.ClientArrays:
  return collections.OrderedDict(
    x=np.asarray(images, np.uint8), y=np.asarray(labels).astype(np.int32)
  )


def cifar100_arrays(raw: collections.OrderedDict) -> base.ClientArrays:
  """TFF CIFAR-100 features -> x uint8 [n, 32, 32, 3], y = fine label int32 [n]."""
  # No range check of `image`: TFF's parser casts the stored int64 values to uint8 (they wrap).
  checks.check_labels('label', raw['label'], 100)
  return _arrays(raw['image'], raw['label'])


def _task(
  name: str,
  train,
  central_test,
  client_test,
  num_classes: int,
  defaults: base.TaskDefaults,
  description: str,
) -> base.Task:
  return base.Task(
    name=name,
    train_clients=train,
    central_test=central_test,
    client_test=client_test,
    keras_model_fn=lambda seed=None: reddi_models.build_resnet18_gn(num_classes, seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    defaults=defaults,
    description=description,
  )


def build_cifar100_task(config: base.TaskConfig) -> base.Task:
  """CIFAR-100 (TFF's Pachinko split), ResNet-18 with GroupNorm(2)."""
  splits = datasets.load_federated('cifar100', config.data_dir or DEFAULT_TFF_DATA_DIR)
  train = datasets.MappedClients(splits.train, cifar100_arrays)
  central_test, client_test = base.pool_clients(
    datasets.MappedClients(splits.test, cifar100_arrays)
  )
  return _task(
    'cifar100',
    train,
    central_test,
    client_test,
    100,
    CIFAR100_DEFAULTS,
    f'CIFAR-100 (Reddi et al. 2021), {len(train)} Pachinko clients, ResNet-18 '
    f'GroupNorm(2), {splits.path}',
  )


def build_cifar10_task(config: base.TaskConfig) -> base.Task:
  """CIFAR-10 with Dirichlet(alpha) labels over 500 x 100 images, ResNet-18 with GroupNorm(2)."""
  fed = datasets.federated_cifar10(
    config.data_dir or DEFAULT_TFDS_DATA_DIR,
    num_clients=config.num_clients or CIFAR10_CLIENTS,
    examples_per_client=config.examples_per_client or CIFAR10_EXAMPLES_PER_CLIENT,
    alpha=config.dirichlet_alpha,
    seed=config.seed,
  )
  train = {f'c{k:04d}': _arrays(*fed.client(k)) for k in range(fed.num_clients)}
  return _task(
    'cifar10',
    train,
    _arrays(fed.data.x_test, fed.data.y_test),
    None,
    10,
    CIFAR10_DEFAULTS,
    f'CIFAR-10 (Reddi et al. 2021), {fed.num_clients} x '
    f'{len(fed.client_indices[0])} images, Dirichlet(alpha={config.dirichlet_alpha})'
    ' labels, ResNet-18 GroupNorm(2)',
  )
