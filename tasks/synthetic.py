"""synthetic: LEAF Synthetic(alpha, beta) softmax regression, as in Ju et al. (AdaFedAdam).

Caldas et al. 2018 (LEAF) / Li et al. 2020 (FedProx) generator, see `datasets.synthetic`:
100 clients with power-law sizes, x in R^60, 10 classes, model softmax(W x + b). Ju et al.
App. C.1: local SGD lr 0.01, batch 10, 1000 rounds, each client's data split 80/20 into local
train/test. The pooled test set is the union of the clients' local test sets.
"""

import collections

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import models

LOCAL_TEST_FRACTION = 0.2
# --synthetic_generator's LEAF variants -> `leaf_cluster_synthetic`'s softmax_over.
GENERATORS = {'leaf': 'classes', 'leaf_code': 'examples'}

DEFAULTS = catalog.TASKS['synthetic'].defaults  # lr 0.01, batch 10, 1000 rounds


def build_synthetic_task(config: base.TaskConfig) -> base.Task:
  """Generates Synthetic(config.synthetic_alpha, config.synthetic_beta), or Synthetic IID with
  config.synthetic_iid, with config.seed."""
  if config.synthetic_generator == 'fedprox':
    clients = datasets.leaf_synthetic(
      config.synthetic_alpha,
      config.synthetic_beta,
      num_clients=config.num_clients or 100,
      seed=config.seed,
      iid=config.synthetic_iid,
    )
    name = (
      'LEAF Synthetic IID'
      if config.synthetic_iid
      else f'LEAF Synthetic({config.synthetic_alpha}, {config.synthetic_beta})'
    )
  elif config.synthetic_generator in GENERATORS:
    clients = datasets.leaf_cluster_synthetic(
      num_clients=config.num_clients or 100,
      seed=config.seed,
      softmax_over=GENERATORS[config.synthetic_generator],
    )
    name = f'LEAF cluster Synthetic ({config.synthetic_generator})'
  else:
    raise ValueError(
      f'synthetic_generator={config.synthetic_generator!r} is invalid; expected one of '
      f'fedprox, {", ".join(GENERATORS)}'
    )
  train, local_test = {}, {}
  for k, (x, y) in enumerate(clients):
    tr, te = datasets.split_train_test(len(y), LOCAL_TEST_FRACTION, seed=config.seed + k)
    client_id = f's{k:04d}'
    train[client_id] = collections.OrderedDict(x=x[tr], y=y[tr])
    local_test[client_id] = collections.OrderedDict(x=x[te], y=y[te])
  central = collections.OrderedDict(
    (key, np.concatenate([c[key] for c in local_test.values()])) for key in ('x', 'y')
  )
  return base.Task(
    name='synthetic',
    train_clients=train,
    client_test=local_test,
    central_test=central,
    keras_model_fn=lambda seed=None: models.build_softmax_regression(60, 10, seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    defaults=DEFAULTS,
    description=f'{name}, {len(clients)} clients, softmax regression (Ju et al.)',
  )
