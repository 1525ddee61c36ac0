"""Learning-rate schedules: closed forms at and around their boundaries."""

import pytest

from tff_adaptive.optimizers import schedules


def test_exp_decay_is_x01_every_500_rounds():
  # Reddi et al. App. E.6: lr * 0.1^floor(t / 500).
  f = schedules.exp_decay(0.5)
  assert [float(f(t)) for t in (0, 499, 500, 999, 1000)] == pytest.approx(
    [0.5, 0.5, 0.05, 0.05, 0.005]
  )


def test_step_decay_divides_by_10_at_half_and_three_quarters():
  # T = 100: lr until round 49, lr/10 from 50, lr/100 from 75 (Kim et al. Sec. 4).
  f = schedules.step_decay(2.0, 100)
  assert [float(f(t)) for t in (0, 49, 50, 74, 75, 99)] == pytest.approx(
    [2.0, 2.0, 0.2, 0.2, 0.02, 0.02]
  )


def test_registry_and_errors():
  assert float(
    schedules.build_schedule(0.3, schedules.ScheduleConfig('constant'))(7)
  ) == pytest.approx(0.3)
  with pytest.raises(ValueError, match="unknown learning-rate schedule 'cosine'.*constant"):
    schedules.build_schedule(0.3, schedules.ScheduleConfig('cosine'))
  with pytest.raises(ValueError, match='decay_rate'):
    schedules.exp_decay(0.1, decay_rate=0.0)
  with pytest.raises(ValueError, match='total_rounds'):
    schedules.step_decay(0.1, 0)
