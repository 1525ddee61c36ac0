"""The trainer flags that grid cells (`--cells`, `engines.grid_cells`) may set apart.

A module of its own, defining no absl flags, so that drivers with flags of their own
(`reproductions.cell_runner`) can group cells by it without importing `run.flags`.
"""

# What grid cells may set differently from one another: the client learning rate and the
# server optimizer with its hyperparameters; everything else is one computation's.
CELL_FLAGS = (
  'client_learning_rate',
  'server_optimizer',
  'server_learning_rate',
  'server_momentum',
  'tau',
  'server_beta_1',
  'server_beta_2',
  'initial_accumulator_value',
  'adaptive_variant',
)
