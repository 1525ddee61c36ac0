"""Kim et al. 2024's FMNIST protocol as trainer flags, shared by the studies of this folder.

Task fmnist (100 clients x 500 examples, Dirichlet(alpha) labels, the paper's CNN), 10 clients
per round, batch 64, E = 1, the unweighted server average; the server of Table 1 (FedAvg: SGD at
rate 1) and of Table 4 (FedAdam with PyTorch's default Adam). See reproduce.py for the protocol's
one difference from the paper (the 80% local training split).
"""

COMMON_FLAGS = [
  '--task=fmnist',
  '--engine=inprocess',
  '--clients_per_round=10',
  '--client_batch_size=64',
  '--client_epochs_per_round=1',
  '--client_weighting=uniform',
]
SERVER_FLAGS = {
  'fedavg': ['--server_optimizer=sgd', '--server_learning_rate=1'],
  'fedadam': ['--server_optimizer=adam', '--server_learning_rate=0.001', '--tau=1e-8'],
}
