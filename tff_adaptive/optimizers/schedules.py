"""Learning-rate schedules as pure functions of the round number.

* constant: lr_t = lr.
* exp_decay: lr_t = lr * 0.1^floor(t / 500), the client ExpDecay of Reddi et al. 2021, App. E.6
  (decay factor and period are arguments).
* step_decay: lr_t = lr until 50% of the rounds, lr/10 until 75%, lr/100 after: the "SGD with
  decay" baseline of Kim et al. 2024, Sec. 4.

Rounds are counted from 0 (the first training round uses lr_0 = lr). Each schedule accepts a
Python int or a tf scalar, so it works inside `tff.tensorflow.computation` and with
`tff.learning.optimizers.schedule_learning_rate`.

`ScheduleConfig`, the registry `SCHEDULES` and `schedule_record` are defined without TensorFlow
in `optimizers.config` and re-exported here.
"""

from collections.abc import Callable

import tensorflow as tf

from tff_adaptive.optimizers.config import SCHEDULES
from tff_adaptive.optimizers.config import ScheduleConfig
from tff_adaptive.optimizers.config import ScheduleEntry  # noqa: F401  (re-exported)
from tff_adaptive.optimizers.config import schedule_record  # noqa: F401  (re-exported)

Schedule = Callable[[tf.Tensor], tf.Tensor]


def constant(lr: float) -> Schedule:
  return lambda t: tf.constant(lr, tf.float32)


def exp_decay(lr: float, decay_rate: float = 0.1, decay_period: int = 500) -> Schedule:
  """lr * decay_rate ** floor(t / decay_period)."""
  if not 0.0 < decay_rate <= 1.0:
    raise ValueError(f'decay_rate must be in (0, 1], got {decay_rate}')
  if decay_period < 1:
    raise ValueError(f'decay_period must be >= 1, got {decay_period}')

  def schedule(t):
    k = tf.math.floordiv(tf.cast(t, tf.int32), decay_period)
    return lr * tf.pow(tf.constant(decay_rate, tf.float32), tf.cast(k, tf.float32))

  return schedule


def step_decay(lr: float, total_rounds: int) -> Schedule:
  """lr, then lr/10 from round floor(0.5 T), then lr/100 from round floor(0.75 T)."""
  if total_rounds < 1:
    raise ValueError(f'total_rounds must be >= 1, got {total_rounds}')
  first, second = total_rounds // 2, (3 * total_rounds) // 4

  def schedule(t):
    t = tf.cast(t, tf.int32)
    factor = tf.where(t >= second, 0.01, tf.where(t >= first, 0.1, 1.0))
    return lr * factor

  return schedule


def build_schedule(lr: float, config: ScheduleConfig) -> Schedule:
  """The schedule `config.name` starting at `lr`; ValueError lists the valid names."""
  return SCHEDULES[config.name].build(lr, config)
