"""Server and client optimizers and learning-rate schedules, one registry each.

* `server`: the FedOpt family (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi; Reddi et al.
  2021), `SERVER_OPTIMIZERS`;
* `client`: local update rules, `CLIENT_OPTIMIZERS` (SGD, SGDM, Adam, Adagrad, SPS, Delta-SGD);
* `delta_sgd`: Delta-SGD (Kim et al. 2024), a TFF optimizer and a local-step hook;
* `adaadam`: AdaAdam of AdaFedAdam (Ju et al.), Adam adapted to the update's certainty;
* `sps`: the stochastic Polyak step size (Loizou et al. 2021), a local-step hook;
* `schedules`: round -> learning rate, `SCHEDULES`;
* `fedopt_math`: the server rules as pure TF functions.
"""

from tff_adaptive.optimizers.adaadam import build_adaadam
from tff_adaptive.optimizers.client import CLIENT_OPTIMIZERS
from tff_adaptive.optimizers.client import ClientOptimizerConfig
from tff_adaptive.optimizers.client import ClientRule
from tff_adaptive.optimizers.client import build_client_optimizer
from tff_adaptive.optimizers.client import build_client_rule
from tff_adaptive.optimizers.delta_sgd import DeltaSGDHParams
from tff_adaptive.optimizers.delta_sgd import build_delta_sgd
from tff_adaptive.optimizers.delta_sgd import delta_sgd_step
from tff_adaptive.optimizers.schedules import SCHEDULES
from tff_adaptive.optimizers.schedules import ScheduleConfig
from tff_adaptive.optimizers.schedules import build_schedule
from tff_adaptive.optimizers.server import ALGORITHM2
from tff_adaptive.optimizers.server import LEARNING_RATE_KEY
from tff_adaptive.optimizers.server import PUBLISHED
from tff_adaptive.optimizers.server import SERVER_OPTIMIZERS
from tff_adaptive.optimizers.server import VARIANTS
from tff_adaptive.optimizers.server import ServerOptimizerConfig
from tff_adaptive.optimizers.server import build_fedadagrad
from tff_adaptive.optimizers.server import build_fedadam
from tff_adaptive.optimizers.server import build_fedavg_sgd
from tff_adaptive.optimizers.server import build_fedavgm
from tff_adaptive.optimizers.server import build_fedyogi
from tff_adaptive.optimizers.server import build_server_optimizer
from tff_adaptive.optimizers.sps import SPSHParams
from tff_adaptive.optimizers.sps import sps_step

__all__ = [
  'ALGORITHM2',
  'build_adaadam',
  'CLIENT_OPTIMIZERS',
  'ClientOptimizerConfig',
  'ClientRule',
  'DeltaSGDHParams',
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
