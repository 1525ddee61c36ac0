"""Server and client optimizers and learning-rate schedules, one registry each.

* `server`: the FedOpt family (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi; Reddi et al.
  2021), `SERVER_OPTIMIZERS`;
* `client`: local update rules, `CLIENT_OPTIMIZERS` (SGD, SGDM, Adam, Adagrad, SPS, Delta-SGD,
  DoG, L-DoG);
* `delta_sgd`: Delta-SGD (Kim et al. 2024), a TFF optimizer and a local-step hook;
* `dog`: DoG and L-DoG (Ivgi et al. 2023), TFF optimizers (`dog.build_dog`, `dog.build_ldog`);
* `adaadam`: AdaAdam of AdaFedAdam (Ju et al.), Adam adapted to the update's certainty;
* `sps`: the stochastic Polyak step size (Loizou et al. 2021), a local-step hook;
* `schedules`: round -> learning rate, `SCHEDULES`;
* `fedopt_math`: the server rules as pure TF functions;
* `config` (no TensorFlow): the registries, hyperparameter configs, their checks and records.

The names below are loaded on first use (`registry.lazy_exports`): importing this package, or its
`config`, imports no TensorFlow.
"""

from tff_adaptive import registry

__all__ = [
  'ALGORITHM2',
  'build_adaadam',
  'CLIENT_OPTIMIZERS',
  'ClientOptimizerConfig',
  'ClientRule',
  'DeltaSGDHParams',
  'DoGHParams',
  'LEARNING_RATE_KEY',
  'PUBLISHED',
  'SCHEDULES',
  'SERVER_OPTIMIZERS',
  'SPSHParams',
  'ScheduleConfig',
  'ServerOptimizerConfig',
  'VARIANTS',
  'build_client_optimizer',
  'build_client_rule',
  'build_delta_sgd',
  'build_fedadagrad',
  'build_fedadam',
  'build_fedavg_sgd',
  'build_fedavgm',
  'build_fedyogi',
  'build_schedule',
  'build_server_optimizer',
  'delta_sgd_step',
  'sps_step',
]

__getattr__, __dir__ = registry.lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      (
        'ALGORITHM2',
        'CLIENT_OPTIMIZERS',
        'ClientOptimizerConfig',
        'DeltaSGDHParams',
        'DoGHParams',
        'PUBLISHED',
        'SCHEDULES',
        'SERVER_OPTIMIZERS',
        'SPSHParams',
        'ScheduleConfig',
        'ServerOptimizerConfig',
        'VARIANTS',
      ),
      'config',
    ),
    'build_adaadam': 'adaadam',
    **dict.fromkeys(('ClientRule', 'build_client_optimizer', 'build_client_rule'), 'client'),
    **dict.fromkeys(('build_delta_sgd', 'delta_sgd_step'), 'delta_sgd'),
    'build_schedule': 'schedules',
    **dict.fromkeys(
      (
        'LEARNING_RATE_KEY',
        'build_fedadagrad',
        'build_fedadam',
        'build_fedavg_sgd',
        'build_fedavgm',
        'build_fedyogi',
        'build_server_optimizer',
      ),
      'server',
    ),
    'sps_step': 'sps',
  },
)
