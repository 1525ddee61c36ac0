"""get_hparams / set_hparams for optimizers that keep their hyperparameters in their state."""

import collections
from collections.abc import Mapping
from typing import Any


def select(state: Mapping[str, Any], keys: tuple[str, ...]) -> collections.OrderedDict:
  """The hyperparameters `keys` of an optimizer state (`Optimizer.get_hparams`)."""
  return collections.OrderedDict((k, state[k]) for k in keys)


def replace(
  state: Mapping[str, Any], hparams: Mapping[str, Any], keys: tuple[str, ...]
) -> collections.OrderedDict:
  """A copy of `state` with `hparams` set (`Optimizer.set_hparams`); unknown keys raise."""
  new_state = collections.OrderedDict(state)
  for key, value in hparams.items():
    if key not in keys:
      raise KeyError(f'unknown hparam {key!r}; valid: {keys}')
    new_state[key] = value
  return new_state
