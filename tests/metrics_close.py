"""Comparing two runs' metrics.csv (or client_eval) rows to what their arithmetic allows.

Shared by the engine parity tests (tff vs inprocess) and the remote-worker parity tests (one
worker vs several): both compare runs that differ only in the rounding of float sums, so:

* every value to RTOL relative (ATOL absolute);
* accuracies may differ by one example (an example whose top two logits differ by less than
  float rounding): |d accuracy| <= 1 / N, N the examples behind it (also for their std over
  clients, which one flip moves by less than 1 / N);
* standard deviations over clients are ill-conditioned (cancellation), and so is q-FedAvg's
  weight h_k: 100 x RTOL.

The engine parity tests (tff vs inprocess, vectorised vs inprocess) evaluate both runs of a case
with one shared Evaluator (the same Keras model and kernels), so the size of the central test
set tests nothing of the engines: fmnist's runs evaluate on `central_test(task)`, the first 2,000
of its 10,000 test images (evaluating all of them was ~2.4 s of every fmnist case). eval_loss is
still held to RTOL and the accuracies to 1/N, N the smallest client's test examples.
"""

import numpy as np

RTOL = 1e-5
ATOL = 1e-6
# One run on several TFF workers against the same run on one: the workers only reorder the
# aggregation's float sums. Measured: 9.2e-8 (synthetic), 1.6e-7 (fmnist).
WORKERS_RTOL = 1e-6
CENTRAL_EXAMPLES = {'fmnist': 2000}


def central_test(task) -> dict:
  """The task's central test examples, the first CENTRAL_EXAMPLES[task.name] where set."""
  size = CENTRAL_EXAMPLES.get(task.name)
  return {k: v[:size] for k, v in task.central_test.items()}


def _tolerance(row, key, n_examples, rtol=RTOL):
  """(rtol, atol) of one column; see the module docstring."""
  if 'accuracy' in key:
    # One example's flip moves a client's accuracy by 1/n and the std over clients by < 1/n.
    n = float(row['train_num_examples']) if key.startswith('train_') else n_examples
    return 0.0, 1.0 / n + ATOL
  if key.endswith('_std') or 'qffl_weight' in key:
    return 100 * rtol, ATOL
  return rtol, ATOL


def assert_rows_close(a_rows, b_rows, n_examples=1, rtol=RTOL):
  """Every value of every row within its tolerance; returns the largest relative difference.

  n_examples: the fewest examples any accuracy of the rows (other than train_accuracy) is
  computed over.
  """
  assert [list(r) for r in a_rows] == [list(r) for r in b_rows]
  worst = 0.0
  for a, b in zip(a_rows, b_rows):
    for key in a:
      if key in ('seconds_per_round', 'client_id') or a[key] == b[key]:
        continue
      x, y = float(a[key]), float(b[key])
      key_rtol, atol = _tolerance(a, key, n_examples, rtol)
      assert np.isclose(x, y, rtol=key_rtol, atol=atol), (a.get('round_num'), key, x, y)
      worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
  return worst
