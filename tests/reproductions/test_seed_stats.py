"""reproductions.seed_stats against NumPy: what the drivers print as mean +- std over seeds."""

import numpy as np
import pytest

from reproductions import seed_stats


def test_mean_and_sample_std_skip_missing_seeds():
  values = [81.5, None, 79.25, 84.0]
  mean, std = seed_stats.mean_std(values)
  present = np.array([81.5, 79.25, 84.0])
  assert mean == pytest.approx(present.mean())
  assert std == pytest.approx(present.std(ddof=1))  # n - 1, not NumPy's default n
  assert std != pytest.approx(present.std())
  assert seed_stats.mean_std([70.0, None]) == (70.0, None)  # one seed: no spread measured
  assert seed_stats.mean_std([None, None]) == (None, None)
  assert seed_stats.mean_std(iter([1.0, 3.0])) == (2.0, pytest.approx(2**0.5))


def test_curve_band_over_the_seeds_that_reached_each_round():
  """Seed 3 diverged after round 20: rounds 30 and 40 average seeds 1 and 2 only."""
  curves = [
    [(10, 50.0), (20, 60.0), (30, 70.0), (40, 72.0)],
    [(10, 40.0), (20, 64.0), (30, 66.0), (40, 76.0)],
    [(10, 45.0), (20, 10.0)],
  ]
  rounds, mean, low, high = seed_stats.curve_band(curves)
  assert rounds == [10, 20, 30, 40]
  np.testing.assert_allclose(mean, [45.0, (60 + 64 + 10) / 3, 68.0, 74.0])
  assert low == [40.0, 10.0, 66.0, 72.0] and high == [50.0, 64.0, 70.0, 76.0]
  assert seed_stats.curve_band([[], []]) == ([], [], [], [])
  one = [(5, 1.0), (10, 2.0)]
  assert seed_stats.curve_band([one]) == ([5, 10], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0])


def test_status_summary_counts_what_is_not_done():
  assert seed_stats.status_summary(['done', 'done', 'done']) == 'done'
  assert (
    seed_stats.status_summary(['done', 'partial 400 of 1000', 'done', 'diverged at round 7'])
    == '2 done; 1 partial 400 of 1000; 1 diverged at round 7'
  )
  assert seed_stats.status_summary(['partial 400 of 1000']) == 'partial 400 of 1000'  # one seed


def test_mean_std_text_shows_a_spread_only_where_one_was_measured():
  assert seed_stats.mean_std_text(seed_stats.mean_std([80.0, 82.0, 84.0])) == '82.00 +- 2.00'
  assert seed_stats.mean_std_text(seed_stats.mean_std([80.0, None])) == '80.00'  # one seed
  assert seed_stats.mean_std_text(seed_stats.mean_std([None])) == ''
  assert seed_stats.mean_std_text((0.5, 0.0), digits=1, sign=True) == '+0.5 +- 0.0'
  assert seed_stats.mean_std_text((-1.234, 0.5), sign=True) == '-1.23 +- 0.50'
  # a table's empty cell ('') is no number
  assert seed_stats.mean_std_text((81.0, '')) == '81.00'
  assert seed_stats.mean_std_text(('', '')) == ''
