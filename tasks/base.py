"""What a task is: federated data, a Keras model, its loss and metrics, and the paper's defaults.

A task's client data is a `Mapping[client_id, OrderedDict[feature, np.ndarray]]` of
preprocessed examples (leading dimension = examples). In-memory tasks use a dict; a task over a
large SQLite file can supply a lazy Mapping that loads a client on access, so a round costs
O(clients per round).
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

ClientArrays = collections.OrderedDict  # feature name -> np.ndarray [examples, ...]


def _default_server_learning_rates() -> dict[str, float]:
  return {'sgd': 1.0, 'sgdm': 0.3, 'adagrad': 0.1, 'adam': 0.01, 'yogi': 0.01}


@dataclasses.dataclass(frozen=True)
class TaskDefaults:
  """The paper's per-task settings, used when the matching flag is not given.

  server_learning_rate maps each server optimizer name to its default eta.
  """
  clients_per_round: int = 10
  client_batch_size: int = 20
  total_rounds: int = 100
  client_learning_rate: float = 0.1
  server_learning_rate: Mapping[str, float] = dataclasses.field(
      default_factory=_default_server_learning_rates)


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Options every task builder receives.

  Attributes:
    name: registry key.
    data_dir: where the task's files are; None for the task's default location.
    seed: seed of any partitioning or generation.
    dirichlet_alpha: label-skew concentration for Dirichlet-partitioned tasks.
    synthetic_alpha, synthetic_beta: LEAF Synthetic(alpha, beta).
    num_clients: population size for generated/partitioned tasks (None: task default).
  """
  name: str
  data_dir: Optional[str] = None
  seed: int = 0
  dirichlet_alpha: float = 0.1
  synthetic_alpha: float = 1.0
  synthetic_beta: float = 1.0
  num_clients: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Task:
  """A federated learning task.

  Attributes:
    name: registry key.
    train_clients: client id -> training examples.
    central_test: pooled test examples (the "validation" of Reddi et al.).
    client_test: optional client id -> that client's held-out examples (per-client metrics).
    keras_model_fn: builds a fresh, uncompiled Keras model (seeded by its argument).
    loss_fn: builds the training loss.
    metrics_fn: builds the list of Keras metrics reported for train and eval.
    defaults: the paper's per-task settings.
    description: one line for --help and logs.
  """
  name: str
  train_clients: Mapping[str, ClientArrays]
  central_test: ClientArrays
  keras_model_fn: Callable[[Optional[int]], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  metrics_fn: Callable[[], list[tf.keras.metrics.Metric]]
  defaults: TaskDefaults
  client_test: Optional[Mapping[str, ClientArrays]] = None
  description: str = ''

  @property
  def client_ids(self) -> Sequence[str]:
    return list(self.train_clients.keys())

  @property
  def input_spec(self) -> collections.OrderedDict:
    """Batch spec (leading None) of the model's input, from the central test arrays."""
    return collections.OrderedDict(
        (k, tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)))
        for k, v in self.central_test.items())

  def model_fn(self, seed: Optional[int] = None) -> tff.learning.models.VariableModel:
    """A `tff.learning.models.VariableModel` wrapping a fresh Keras model."""
    return tff.learning.models.from_keras_model(
        self.keras_model_fn(seed), loss=self.loss_fn(), input_spec=self.input_spec,
        metrics=self.metrics_fn())


def arrays_from_indices(features: Mapping[str, np.ndarray],
                        indices: np.ndarray) -> ClientArrays:
  """The examples at `indices` of each feature array, as a new OrderedDict."""
  return collections.OrderedDict((k, v[indices]) for k, v in features.items())
