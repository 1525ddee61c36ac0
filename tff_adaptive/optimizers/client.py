"""Client optimizers: the local update rule x <- ClientOpt(x, g) of every algorithm.

Each is a `tff.learning.optimizers.Optimizer` keeping its learning rate under TFF's standard
key, so the local loop (`tff_adaptive.core.local_loop.optimizer_step`) sets the round's
eta_l(t) and a user can pass it to any TFF pipeline. The optimizer is re-initialized for every
client in every round (Reddi et al. 2021, Algorithm 5: no client optimizer state survives a
round).

* sgd: x <- x - eta_l g.
* sgdm: heavy-ball momentum in the TF/Keras form, u <- mu u + g, x <- x - eta_l u.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow_federated as tff

from tff_adaptive import registry


@dataclasses.dataclass(frozen=True)
class ClientOptimizerConfig:
  """Hyperparameters of a client optimizer.

  Attributes:
    name: one of `CLIENT_OPTIMIZERS`.
    learning_rate: eta_l (before the client schedule), > 0.
    momentum: mu of sgdm, in [0, 1).
  """

  name: str = 'sgd'
  learning_rate: float = 0.1
  momentum: float = 0.9

  def __post_init__(self):
    CLIENT_OPTIMIZERS[self.name]  # pylint: disable=pointless-statement
    if not self.learning_rate > 0:
      raise ValueError(f'client learning_rate must be > 0, got {self.learning_rate}')
    if not 0.0 <= self.momentum < 1.0:
      raise ValueError(f'client momentum must be in [0, 1), got {self.momentum}')


@dataclasses.dataclass(frozen=True)
class ClientOptimizerEntry:
  """A registered client optimizer: its builder and the config fields it reads."""

  build: Callable[[ClientOptimizerConfig], tff.learning.optimizers.Optimizer]
  hparams: tuple[str, ...] = ()


CLIENT_OPTIMIZERS: registry.Registry[ClientOptimizerEntry] = registry.Registry(
  'client optimizer',
  {
    'sgd': ClientOptimizerEntry(lambda c: tff.learning.optimizers.build_sgdm(c.learning_rate)),
    'sgdm': ClientOptimizerEntry(
      lambda c: tff.learning.optimizers.build_sgdm(c.learning_rate, momentum=c.momentum),
      ('momentum',),
    ),
  },
)


def build_client_optimizer(config: ClientOptimizerConfig) -> tff.learning.optimizers.Optimizer:
  """Builds the registered client optimizer `config.name`."""
  return CLIENT_OPTIMIZERS[config.name].build(config)


def client_optimizer_record(config: ClientOptimizerConfig) -> dict[str, Any]:
  """The config fields that shape the run (name, learning_rate and the optimizer's hparams)."""
  keys = ('name', 'learning_rate') + CLIENT_OPTIMIZERS[config.name].hparams
  return {k: getattr(config, k) for k in keys}
