"""Ju et al. (AdaFedAdam) App. C.1 as trainer flags: the client training and each algorithm's server.

Shared by the Table 5 driver (`reproduce_synthetic`) and the study of the data setting
(`settings_study`), so that both run exactly the paper's configuration.
"""

SGD1 = ('--server_optimizer=sgd', '--server_learning_rate=1')
# algorithm -> its trainer flags (FedProx's mu, q-FedAvg's q and AdaFedAdam's alpha are added
# per cell).
ARGS = {
  'FedAvg': ('--algorithm=fedopt', *SGD1),
  'FedAdam': (
    '--algorithm=fedopt',
    '--server_optimizer=adam',
    '--server_learning_rate=0.001',
    '--server_beta_1=0.9',
    '--server_beta_2=0.999',
    '--tau=1e-8',
  ),
  'q-FedAvg': ('--algorithm=qfedavg', *SGD1),
  'FedNova': ('--algorithm=fednova', *SGD1),
  'FedProx': ('--algorithm=fedprox', *SGD1),
  'AdaFedAdam': ('--algorithm=adafedadam', '--server_optimizer=adaadam'),
}
# Local SGD lr 0.01, batch 10, E = 1 (App. C.1).
CLIENT_ARGS = (
  '--client_optimizer=sgd',
  '--client_learning_rate=0.01',
  '--client_batch_size=10',
  '--client_epochs_per_round=1',
)
# The parameter a cell sets per algorithm: FedProx's mu, q-FedAvg's q, AdaFedAdam's alpha.
PARAM_FLAGS = {'FedProx': 'fedprox_mu', 'q-FedAvg': 'qfedavg_q', 'AdaFedAdam': 'fairness_alpha'}


def param_flags(algorithm: str, param: float | None) -> list[str]:
  """The trainer flag of `algorithm`'s parameter (none for the others, or without a value)."""
  if algorithm not in PARAM_FLAGS or param is None:
    return []
  return [f'--{PARAM_FLAGS[algorithm]}={param:g}']
