"""Federated algorithms, one module each, written once as pure TF parts (see `base`).

* `fedopt`: FedAvg / FedAvgM / FedAdagrad / FedAdam / FedYogi (Reddi et al. 2021);
* `scaffold`: SCAFFOLD Option II (Karimireddy et al. 2020; Reddi et al. 2021 Alg. 6);
* `fedpa`: federated posterior averaging (Al-Shedivat et al. 2021), its math in `fedpa_math`;
* `adafedadam`: AdaFedAdam (Ju et al.), certainty-weighted alpha-fair aggregation into AdaAdam;
* the fair-FL baselines of Ju et al.: `fedprox` (Li et al. 2020, the proximal gradient with
  the right sign), `fednova` (Wang et al. 2020), `qfedavg` (q-FFL, Li et al. 2020).

`ALGORITHMS` maps the trainer's `--algorithm` names to builders taking `AlgorithmInputs`.
"""

from collections.abc import Callable
import dataclasses

import tensorflow_federated as tff

from tff_adaptive import registry
from tff_adaptive.algorithms.adafedadam import AdaFedAdamHParams
from tff_adaptive.algorithms.adafedadam import build_adafedadam
from tff_adaptive.algorithms.base import CLIENT_WEIGHTINGS
from tff_adaptive.algorithms.base import Algorithm
from tff_adaptive.algorithms.base import ClientOutput
from tff_adaptive.algorithms.base import ClientTrainingConfig
from tff_adaptive.algorithms.fednova import build_fednova
from tff_adaptive.algorithms.fedopt import build_fedopt
from tff_adaptive.algorithms.fedpa import FedPAHParams
from tff_adaptive.algorithms.fedpa import build_fedpa
from tff_adaptive.algorithms.fedprox import FedProxHParams
from tff_adaptive.algorithms.fedprox import build_fedprox
from tff_adaptive.algorithms.qfedavg import QFedAvgHParams
from tff_adaptive.algorithms.qfedavg import build_qfedavg
from tff_adaptive.algorithms.scaffold import build_scaffold
from tff_adaptive.optimizers import schedules


@dataclasses.dataclass(frozen=True)
class AlgorithmInputs:
  """Everything the trainer knows when it builds an algorithm.

  Attributes:
    model_fn: no-arg callable returning a new `tff.learning.models.VariableModel`.
    client: local training.
    server_optimizer: the server's `tff.learning.optimizers.Optimizer`.
    server_learning_rate: eta at round 0 (for the server schedule).
    server_lr_schedule: the server learning-rate schedule.
    num_clients: N, the training population.
    fedpa: FedPA's hyperparameters (read by 'fedpa' only).
    fedprox, qfedavg, adafedadam: those algorithms' hyperparameters (read by each only).
  """

  model_fn: Callable[[], tff.learning.models.VariableModel]
  client: ClientTrainingConfig
  server_optimizer: tff.learning.optimizers.Optimizer
  server_learning_rate: float
  server_lr_schedule: schedules.ScheduleConfig
  num_clients: int
  fedpa: FedPAHParams = FedPAHParams()
  fedprox: FedProxHParams = FedProxHParams()
  qfedavg: QFedAvgHParams = QFedAvgHParams()
  adafedadam: AdaFedAdamHParams = AdaFedAdamHParams()

  def common(self) -> dict:
    return dict(
      server_lr_schedule=self.server_lr_schedule, server_learning_rate=self.server_learning_rate
    )


ALGORITHMS: registry.Registry[Callable[[AlgorithmInputs], Algorithm]] = registry.Registry(
  'algorithm',
  {
    'fedopt': lambda i: build_fedopt(i.model_fn, i.client, i.server_optimizer, **i.common()),
    'scaffold': lambda i: build_scaffold(
      i.model_fn, i.client, i.server_optimizer, i.num_clients, **i.common()
    ),
    'fedpa': lambda i: build_fedpa(
      i.model_fn, i.client, i.server_optimizer, fedpa=i.fedpa, **i.common()
    ),
    'fedprox': lambda i: build_fedprox(
      i.model_fn, i.client, i.server_optimizer, fedprox=i.fedprox, **i.common()
    ),
    'fednova': lambda i: build_fednova(i.model_fn, i.client, i.server_optimizer, **i.common()),
    'qfedavg': lambda i: build_qfedavg(
      i.model_fn, i.client, i.server_optimizer, qfedavg=i.qfedavg, **i.common()
    ),
    'adafedadam': lambda i: build_adafedadam(
      i.model_fn, i.client, i.server_optimizer, adafedadam=i.adafedadam, **i.common()
    ),
  },
)


def build_algorithm(name: str, inputs: AlgorithmInputs) -> Algorithm:
  """The registered algorithm `name`; unknown names list the valid ones."""
  return ALGORITHMS[name](inputs)


__all__ = [
  'ALGORITHMS',
  'AdaFedAdamHParams',
  'FedProxHParams',
  'QFedAvgHParams',
  'build_adafedadam',
  'build_fednova',
  'build_fedprox',
  'build_qfedavg',
  'CLIENT_WEIGHTINGS',
  'Algorithm',
  'AlgorithmInputs',
  'ClientOutput',
  'ClientTrainingConfig',
  'FedPAHParams',
  'build_algorithm',
  'build_fedopt',
  'build_fedpa',
  'build_scaffold',
]
