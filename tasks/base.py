"""What a task is: federated data, a Keras model, its loss and metrics, and the paper's defaults.

A task's client data is a `Mapping[client_id, OrderedDict[feature, np.ndarray]]` of
preprocessed examples (leading dimension = examples). In-memory tasks use a dict; a task over a
large SQLite file can supply a lazy Mapping that loads a client on access, so a round costs
O(clients per round).

`TaskConfig` and `TaskDefaults` are defined without TensorFlow in `tasks.config` and re-exported
here.
"""

import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.datasets import ClientArrays  # feature name -> np.ndarray [examples, ...]
from tff_adaptive.tasks.config import TaskConfig  # noqa: F401  (re-exported)
from tff_adaptive.tasks.config import TaskDefaults


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
    validation_sample: optional round_num -> the examples to evaluate on in that round, a pure
      function of (task seed, round_num). Reddi et al. App. E.2: Stack Overflow's per-round
      validation is 10,000 random test examples. None: `central_test` every round. When set,
      `central_test` is `validation_sample(0)` (a fixed sample for loops that do not resample).
    eval_sample_size: the number of examples `validation_sample` draws (None if unset).
    final_test: optional no-arg callable yielding the FULL test split in chunks (each a
      ClientArrays), for one evaluation after the last round (Reddi et al. Table 10); set when
      the test split is too large for memory. None: `central_test` is the full test split.
  """

  name: str
  train_clients: Mapping[str, ClientArrays]
  central_test: ClientArrays
  keras_model_fn: Callable[[int | None], tf.keras.Model]
  loss_fn: Callable[[], tf.keras.losses.Loss]
  metrics_fn: Callable[[], list[tf.keras.metrics.Metric]]
  defaults: TaskDefaults
  client_test: Mapping[str, ClientArrays] | None = None
  description: str = ''
  validation_sample: Callable[[int], ClientArrays] | None = None
  eval_sample_size: int | None = None
  final_test: Callable[[], Iterator[ClientArrays]] | None = None

  @property
  def client_ids(self) -> Sequence[str]:
    return list(self.train_clients.keys())

  @property
  def input_spec(self) -> collections.OrderedDict:
    """Batch spec (leading None) of the model's input, from the central test arrays."""
    return collections.OrderedDict(
      (k, tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)))
      for k, v in self.central_test.items()
    )

  def model_fn(self, seed: int | None = None) -> tff.learning.models.VariableModel:
    """A `tff.learning.models.VariableModel` wrapping a fresh Keras model."""
    return tff.learning.models.from_keras_model(
      self.keras_model_fn(seed),
      loss=self.loss_fn(),
      input_spec=self.input_spec,
      metrics=self.metrics_fn(),
    )


def concat_clients(
  clients: Mapping[str, Mapping[str, np.ndarray]], client_ids: Iterable[str] | None = None
) -> ClientArrays:
  """All examples of `clients` (or of `client_ids`, in that order) pooled into one ClientArrays.

  Raises:
    ValueError: there are no clients to pool.
  """
  return pool_clients(clients, client_ids)[0]


def pool_clients(
  clients: Mapping[str, Mapping[str, np.ndarray]],
  client_ids: Iterable[str] | None = None,
) -> tuple[ClientArrays, dict[str, ClientArrays]]:
  """Reads every client once: (pooled arrays, client id -> views into the pooled arrays).

  For a lazy test split that is both the pooled test set and the per-client evaluation data:
  one copy in memory, no re-reading per evaluation.

  Raises:
    ValueError: there are no clients to pool.
  """
  ids = list(clients if client_ids is None else client_ids)
  parts = [clients[cid] for cid in ids]
  if not parts:
    raise ValueError('pool_clients needs at least one client')
  pooled = collections.OrderedDict((k, np.concatenate([p[k] for p in parts])) for k in parts[0])
  starts = np.cumsum([0] + [len(next(iter(p.values()))) for p in parts])
  views = {
    cid: collections.OrderedDict((k, v[a:b]) for k, v in pooled.items())
    for cid, a, b in zip(ids, starts[:-1], starts[1:])
  }
  return pooled, views
