"""Server and client optimizers and learning-rate schedules, one registry each.

* `server`: the FedOpt family (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi; Reddi et al.
  2021), `SERVER_OPTIMIZERS`;
* `client`: local update rules, `CLIENT_OPTIMIZERS`;
* `schedules`: round -> learning rate, `SCHEDULES`;
* `fedopt_math`: the server rules as pure TF functions.
"""

from tff_adaptive.optimizers.client import CLIENT_OPTIMIZERS
from tff_adaptive.optimizers.client import ClientOptimizerConfig
from tff_adaptive.optimizers.client import build_client_optimizer
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

__all__ = [
  'ALGORITHM2',
  'CLIENT_OPTIMIZERS',
  'ClientOptimizerConfig',
  'LEARNING_RATE_KEY',
  'PUBLISHED',
  'SCHEDULES',
  'SERVER_OPTIMIZERS',
  'ScheduleConfig',
  'ServerOptimizerConfig',
  'VARIANTS',
  'build_client_optimizer',
  'build_fedadagrad',
  'build_fedadam',
  'build_fedavg_sgd',
  'build_fedavgm',
  'build_fedyogi',
  'build_schedule',
  'build_server_optimizer',
]
