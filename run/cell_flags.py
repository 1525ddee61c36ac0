"""The trainer flags that grid cells (`--cells`, `engines.grid_cells`) may set apart.

A module of its own, defining no absl flags, so that drivers with flags of their own
(`reproductions.cell_runner`) can group cells by it without importing `run.flags`.
"""

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
