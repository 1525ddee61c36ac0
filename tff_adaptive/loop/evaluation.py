"""Centralized evaluation of the global model and per-client metric distributions.

Reddi et al. 2021 report the global model's metrics on the pooled test split. Fairness-minded
papers (Ju et al., AdaFedAdam; Li et al., q-FFL) report the distribution of a metric over
clients' own test data: average, standard deviation, and the average of the worst 30%, and
(Ju et al. Fig. 3) the relative standard deviation of the error (`<accuracy>_error_rsd`).

Evaluation runs in-process in one compiled tf.function over in-memory batches; it is not a
federated computation, so it costs no TFF runtime overhead.
"""

import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

DISTRIBUTION_STATS = ('mean', 'std', 'worst30', 'min', 'p10', 'p50', 'p90')


def lower_is_better(metric_name: str) -> bool:
  """Losses and errors improve downwards; accuracies, recalls and F1 upwards."""
  return any(word in metric_name for word in ('loss', 'error', 'mse', 'perplexity'))


def distribution_summary(
  values: np.ndarray, higher_is_better: bool = True
) -> collections.OrderedDict:
  """Mean, population std, worst-30% mean, min, and 10/50/90th percentiles over clients.

  "worst30" is the average over the ceil(0.3 K) (at least one) worst clients: those with the
  smallest values when higher is better (the "Worst 30%" accuracy of Ju et al.), the largest
  when lower is better (losses).
  """
  values = np.sort(np.asarray(values, np.float64))
  if values.size == 0:
    raise ValueError('distribution_summary needs at least one value')
  k = max(1, int(np.ceil(0.3 * values.size)))
  worst = values[:k] if higher_is_better else values[-k:]
  return collections.OrderedDict(
    mean=float(values.mean()),
    std=float(values.std()),
    worst30=float(worst.mean()),
    min=float(values[0]),
    p10=float(np.percentile(values, 10)),
    p50=float(np.percentile(values, 50)),
    p90=float(np.percentile(values, 90)),
  )


class Evaluator:
  """Evaluates model weights on arrays with one Keras model reused across calls."""

  def __init__(
    self,
    keras_model_fn: Callable[[], tf.keras.Model],
    loss_fn: Callable[[], tf.keras.losses.Loss],
    metrics_fn: Callable[[], list[tf.keras.metrics.Metric]],
    batch_size: int = 1000,
  ):
    self._model = keras_model_fn()
    self._loss = loss_fn()
    self._loss.reduction = tf.keras.losses.Reduction.NONE
    self._metrics = metrics_fn()
    self._batch_size = batch_size
    self._batch_step = tf.function(self._batch_step_impl, reduce_retracing=True, autograph=False)

  def _batch_step_impl(self, x, y):
    predictions = self._model(x, training=False)
    for metric in self._metrics:
      metric.update_state(y, predictions)
    per_element = self._loss(y, predictions)  # [batch] or [batch, time] for sequences
    return tf.reduce_sum(per_element), tf.cast(tf.size(per_element), tf.float64)

  def evaluate(
    self, weights: tff.learning.models.ModelWeights, data: Mapping[str, np.ndarray]
  ) -> collections.OrderedDict:
    """Returns OrderedDict(loss=mean loss per example (per token for sequences), <metric>=...)."""
    weights.assign_weights_to(self._model)
    return self._evaluate_assigned(data)

  def evaluate_chunks(
    self, weights: tff.learning.models.ModelWeights, chunks: Iterable[Mapping[str, np.ndarray]]
  ) -> collections.OrderedDict:
    """Like `evaluate`, over data too large for memory, given as consecutive chunks."""
    weights.assign_weights_to(self._model)
    return self._evaluate_assigned(*chunks)

  def _evaluate_assigned(self, *chunks):
    for metric in self._metrics:
      metric.reset_state()
    count, loss_sum = 0.0, 0.0
    for data in chunks:
      x, y = data['x'], data['y']
      for start in range(0, len(y), self._batch_size):
        batch_sum, batch_count = self._batch_step(
          x[start : start + self._batch_size], y[start : start + self._batch_size]
        )
        loss_sum += float(batch_sum)
        count += float(batch_count)
    # Mean loss per loss element: per example, or per token for sequence models. (A task
    # whose training loss is SUM-reduced, e.g. emnist_ae and so_lr, reports its train_loss
    # as a per-batch sum; eval_loss is always the per-element mean.)
    results = collections.OrderedDict(loss=loss_sum / max(count, 1.0))
    for metric in self._metrics:
      results[metric.name] = float(metric.result())
    return results

  def evaluate_clients(
    self,
    weights: tff.learning.models.ModelWeights,
    clients: Mapping[str, Mapping[str, np.ndarray]],
    client_ids: list[str] | None = None,
  ) -> tuple[collections.OrderedDict, dict[str, collections.OrderedDict]]:
    """Evaluates on each client's data; returns (summary per metric, per-client results).

    The summary has keys '<metric>_<stat>' for each stat of `DISTRIBUTION_STATS`.
    """
    ids = client_ids if client_ids is not None else list(clients.keys())
    weights.assign_weights_to(self._model)
    per_client = {cid: self._evaluate_assigned(clients[cid]) for cid in ids}
    summary = collections.OrderedDict()
    for name in next(iter(per_client.values())):
      stats = distribution_summary(
        [r[name] for r in per_client.values()], higher_is_better=not lower_is_better(name)
      )
      for stat, value in stats.items():
        summary[f'{name}_{stat}'] = value
      if 'accuracy' in name:
        summary[f'{name}_error_rsd'] = error_rsd([r[name] for r in per_client.values()])
    return summary, per_client


def error_rsd(accuracies) -> float:
  """RSD of the error over clients: std(1 - a) / mean(1 - a) (Ju et al. Fig. 3); 0 if no error.

  The fairness axis of AdaFedAdam's Pareto plot: 0 when every client's error is the same.
  """
  errors = 1.0 - np.asarray(accuracies, np.float64)
  mean = errors.mean()
  return float(errors.std() / mean) if mean > 0 else 0.0
