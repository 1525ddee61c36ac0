"""Kim et al. 2024's published numbers reproduced here: Table 1 (FMNIST column) and Table 4.

Kim, Toghani, Uribe, Kyrillidis, "Adaptive Federated Learning with Auto-Tuned Clients", ICLR
2024. Final test accuracy (%) after 1000 rounds, per client optimizer (`ROWS`, the trainer's
names): Table 1 with the FedAvg server at Dirichlet alpha 1, 0.1, 0.01; Table 4 (App. B.4) with a
FedAdam server at alpha 0.1.
"""

# Client optimizers of both tables, in the paper's row order (decay: step decay of the client lr).
ROWS = ('sgd', 'sgd_decay', 'sgdm', 'sgdm_decay', 'adam', 'adagrad', 'sps', 'delta_sgd')
PAPER_ROUNDS = 1000
FEDADAM_ALPHA = '0.1'

# Table 1, FMNIST column (FedAvg server), by Dirichlet alpha:
TABLE1 = {
  '1': dict(zip(ROWS, (86.5, 86.3, 85.2, 87.2, 71.8, 45.5, 85.9, 87.3))),
  '0.1': dict(zip(ROWS, (83.6, 84.7, 83.6, 86.1, 80.4, 46.3, 85.0, 86.4))),
  '0.01': dict(zip(ROWS, (79.0, 79.3, 75.7, 79.5, 60.6, 45.9, 44.0, 80.2))),
}
# Table 4 (App. B.4, FedAdam server), FMNIST, alpha 0.1:
TABLE4 = dict(zip(ROWS, (83.7, 80.9, 84.6, 81.8, 81.5, 82.1, 85.0, 85.8)))
