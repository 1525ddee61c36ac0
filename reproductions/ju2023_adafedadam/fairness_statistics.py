"""Ju et al.'s fairness statistics both ways: over clients and over test examples.

Ju et al. (AdaFedAdam) report, per algorithm, the clients' local test accuracy: its average
(Avg), standard deviation (STD) and the average of the worst 30% of clients, without saying
whether clients or examples are averaged. Each statistic here comes both ways:

  Avg:       mean over clients (1/K sum a_k)  |  example-weighted (sum n_k a_k / sum n_k)
  STD:       population std over clients       |  example-weighted std around the weighted mean
  Worst 30%: mean of the ceil(0.3 K) lowest a_k |  weighted mean over the lowest-accuracy
             clients holding 30% of the test examples (the boundary client counted in part)
"""

import itertools
import math

import numpy as np

STATISTICS = ('avg', 'std', 'worst30')
WAYS = ('clients', 'examples')


def _worst_share_weighted(accuracies: np.ndarray, weights: np.ndarray, share: float) -> float:
  """Weighted mean accuracy of the lowest-accuracy clients holding `share` of the total weight,
  the client at the boundary counted with the part of its weight that fits."""
  order = np.argsort(accuracies, kind='stable')
  a, w = accuracies[order], weights[order]
  budget = share * w.sum()
  taken = np.minimum(w, np.maximum(budget - (np.cumsum(w) - w), 0.0))
  return float((taken * a).sum() / taken.sum())


def statistics_both_ways(accuracies, num_examples) -> dict[str, float]:
  """{'avg_clients', 'avg_examples', 'std_clients', ...: %} of per-client accuracies in [0, 1]."""
  a = np.asarray(accuracies, np.float64)
  n = np.asarray(num_examples, np.float64)
  if a.size == 0 or a.shape != n.shape or (n <= 0).any():
    raise ValueError('need one accuracy and a positive example count per client')
  weighted_mean = float((n * a).sum() / n.sum())
  worst = max(1, math.ceil(0.3 * a.size))
  return {
    'avg_clients': 100 * float(a.mean()),
    'avg_examples': 100 * weighted_mean,
    'std_clients': 100 * float(a.std()),
    'std_examples': 100 * math.sqrt(float((n * (a - weighted_mean) ** 2).sum() / n.sum())),
    'worst30_clients': 100 * float(np.sort(a)[:worst].mean()),
    'worst30_examples': 100 * _worst_share_weighted(a, n, 0.3),
  }


def combinations(rows: list[dict]) -> list[dict]:
  """Per data set and way of averaging (Avg, STD, Worst 30% each over clients or examples): the
  largest |ours - published| over the three statistics and the algorithms with results
  (`largest_difference`), and over the three statistics for each algorithm alone
  (`largest_difference_<algorithm>`)."""
  out = []
  for data_set in dict.fromkeys(r['data_set'] for r in rows):
    group = [r for r in rows if r['data_set'] == data_set and r['seeds']]
    if not group:
      continue
    for ways in itertools.product(WAYS, repeat=3):
      each = {
        r['algorithm']: max(
          abs(r[f'{stat}_{way}'] - r[f'{stat}_published']) for stat, way in zip(STATISTICS, ways)
        )
        for r in group
      }
      out.append(
        {
          'data_set': data_set,
          **{f'{stat}_over': way for stat, way in zip(STATISTICS, ways)},
          'largest_difference': round(max(each.values()), 2),
          'algorithms': len(group),
          **{f'largest_difference_{a}': round(d, 2) for a, d in each.items()},
        }
      )
  return out
