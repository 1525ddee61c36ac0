"""The paper's EMNIST settings (Al-Shedivat et al. 2021, Table 6) as trainer flags.

Shared by the fmnist comparison (`reproduce_fmnist`) and the regime study (`regimes`), so that
both run exactly the same FedAvg-ME and FedPA-ME.
"""

# Server SGDM (0.9) lr 0.5, client SGDM (0.9) lr 0.01, on the in-process engine.
TRAINING_ARGS = (
  '--engine=inprocess',
  '--server_optimizer=sgdm',
  '--server_learning_rate=0.5',
  '--server_momentum=0.9',
  '--client_optimizer=sgdm',
  '--client_learning_rate=0.01',
  '--client_momentum=0.9',
)


def algorithm_args(shrinkage: float | None, burnin_rounds: int) -> list[str]:
  """FedAvg-ME's flags (`shrinkage` None), or FedPA-ME's: `burnin_rounds` server rounds of
  FedAvg deltas, then on each client one burn-in epoch and an IASG sample per epoch after it,
  shrinkage rho = `shrinkage`."""
  if shrinkage is None:
    return ['--algorithm=fedopt']
  return [
    '--algorithm=fedpa',
    f'--fedpa_burnin_rounds={burnin_rounds}',
    '--fedpa_burnin_epochs=1',
    f'--fedpa_shrinkage={shrinkage:g}',
  ]
