"""Ju et al.'s published numbers reproduced here: Table 5, Synthetic row.

Ju, Zhang, Fodor, Pan, Li, Tang, "Accelerating Fair Federated Learning: Adaptive Federated Adam"
(AdaFedAdam). Table 5 reports, per algorithm, the clients' local test accuracy at the end of
training on the Synthetic data set: its average over clients (Avg), standard deviation (STD) and
the average of the worst 30% of clients (Worst 30%), all in %.
"""

# algorithm -> (Avg, STD, Worst 30%), %.
PUBLISHED = {
  'FedAvg': (90.08, 14.23, 39.51),
  'FedAdam': (89.97, 13.52, 53.08),
  'q-FedAvg': (90.64, 10.36, 78.65),
  'FedNova': (92.97, 8.06, 83.16),
  'FedProx': (91.74, 15.53, 28.62),
  'AdaFedAdam': (95.07, 5.5, 88.64),
}
