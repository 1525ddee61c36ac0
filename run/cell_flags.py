"""The trainer flags that grid cells (`--cells`, `engines.grid_cells`) may set apart.

A module of its own, defining no absl flags, so that drivers with flags of their own
(`reproductions.cell_runner`) can group cells by it without importing `run.flags`; and the
reading of a --cells file (`read_cells`).
"""

import dataclasses
import shlex

from tff_adaptive import settings
from tff_adaptive.optimizers import config as optimizer_config

# What grid cells may set differently from one another: the client learning rate and the
# server optimizer with its hyperparameters (their settings say so); everything else is one
# computation's.
CELL_FLAGS = tuple(
  found.flag
  for cls in (optimizer_config.ClientOptimizerConfig, optimizer_config.ServerOptimizerConfig)
  for _, found in settings.declared(cls)
  if found.cells
)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One line of a --cells file: its experiment name and flags."""

  name: str
  args: tuple[str, ...]


def read_cells(path: str) -> list[Cell]:
  """The cells of a --cells file: "NAME --flag=value ..." per line; blank and # lines skipped.

  Raises:
    ValueError: one line naming the file, the line and what is wrong (a missing file, a
      repeated name, a flag other than `CELL_FLAGS`).
  """
  try:
    with open(path) as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise ValueError(f'--cells: cannot read {path} ({e.strerror})') from None
  cells = []
  for number, line in enumerate(lines, 1):
    words = shlex.split(line, comments=True)
    if not words:
      continue
    name, args = words[0], tuple(words[1:])
    if name.startswith('-'):
      raise ValueError(f'--cells: {path} line {number}: starts with a flag, not a cell name')
    for arg in args:
      flag = arg.split('=', 1)[0].lstrip('-')
      if not arg.startswith('--') or '=' not in arg or flag not in CELL_FLAGS:
        raise ValueError(
          f'--cells: {path} line {number}: {arg!r}; a cell sets only --name=value of '
          f'{", ".join(CELL_FLAGS)}'
        )
    if name in {c.name for c in cells}:
      raise ValueError(f'--cells: {path} line {number}: cell {name!r} named twice')
    cells.append(Cell(name, args))
  if not cells:
    raise ValueError(f'--cells: {path} has no cells')
  return cells
