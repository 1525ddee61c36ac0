"""The trainer's compression settings and their checks (no TensorFlow).

What `--compression` and its flags become before TensorFlow is imported; the quantiser itself
is `aggregators.compression`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tff_adaptive import registry
from tff_adaptive import settings

NO_COMPRESSION = 'none'
COMPRESSIONS: registry.Registry[str] = registry.Registry(
  'compression',
  {
    NO_COMPRESSION: 'float32 updates',
    'uniform': 'stochastic uniform quantisation to --compression_bits (Suresh et al. 2017)',
  },
)


@dataclasses.dataclass(frozen=True)
class CompressionConfig:
  """How clients' updates are compressed (`aggregators.compression.quantized_mean`).

  Attributes:
    name: one of `COMPRESSIONS`.
    bits: b, 1..16 ('uniform').
    threshold: tensors of at most this many values are sent as float32 ('uniform').
  """

  name: str = settings.setting(
    NO_COMPRESSION,
    'compression',
    "Clients' uploads: none (float32) or uniform (each tensor of more than "
    '--compression_threshold values stochastically quantised to --compression_bits between its '
    'min and max, Suresh et al. 2017; metrics.csv gets compression_bits_per_client). Not with '
    '--dp; not for scaffold, fednova, adafedadam.',
    section='Compression',
    choices=COMPRESSIONS,
  )
  bits: int = settings.setting(
    8, 'compression_bits', '--compression=uniform: bits per value, 1..16.', section='Compression'
  )
  threshold: int = settings.setting(
    0,
    'compression_threshold',
    '--compression=uniform: tensors of at most this many values are sent as float32 (TFF '
    'compression_aggregator: 20000).',
    section='Compression',
  )

  def __post_init__(self):
    if self.name not in COMPRESSIONS:
      raise ValueError(registry.unknown_message('compression', self.name, COMPRESSIONS))
    if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 1 <= self.bits <= 16:
      raise ValueError(f'bits={self.bits!r} is invalid; expected an integer in [1, 16]')
    if (
      isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or self.threshold < 0
    ):
      raise ValueError(f'threshold={self.threshold!r} is invalid; expected an integer >= 0')

  @property
  def enabled(self) -> bool:
    return self.name != NO_COMPRESSION

  def record(self) -> dict[str, Any]:
    return {'name': self.name, 'bits': self.bits, 'threshold': self.threshold}


def compression_from_flags(
  values: dict[str, Any], dp: Any, algorithm_refusal: str | None
) -> CompressionConfig | None:
  """--compression's config from its flags' values (None for none), checked against --dp (a
  `DPConfig` or None) and the algorithm (`algorithm_refusal`: why it cannot compress).

  Raises:
    ValueError: one line, in the trainer's flags.
  """
  name = values['compression']
  if name == NO_COMPRESSION:
    return None
  if dp is not None:
    raise ValueError(
      f'--compression={name} cannot run with --dp={dp.mechanism}: quantising a clipped update '
      'can raise its norm above the clip, and with it the sensitivity'
    )
  if algorithm_refusal is not None:
    raise ValueError(f'--compression={name}: {algorithm_refusal}')
  try:
    return settings.from_flags(CompressionConfig, values)
  except ValueError as e:
    raise ValueError(settings.flag_message(str(e), CompressionConfig)) from None
