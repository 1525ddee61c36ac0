"""tff-adaptive: adaptive federated optimization on TensorFlow Federated 0.87.

Algorithms, optimizers and aggregators of four papers, as parts that compose with TFF's own
(`tff.learning.templates`, `tff.learning.optimizers`, `tff.aggregators`):

* Reddi et al., "Adaptive Federated Optimization", ICLR 2021: FedAvg, FedAvgM, FedAdagrad,
  FedAdam, FedYogi (`optimizers`, `algorithms.build_fedopt`), SCAFFOLD (`algorithms`).
* Ju et al., "Accelerating Fair Federated Learning: Adaptive Federated Adam": AdaFedAdam
  (`algorithms`, `aggregators.CertaintyWeightedMeanFactory`, `optimizers.build_adaadam`) and its
  baselines FedProx, FedNova, q-FedAvg.
* Kim et al., "Adaptive Federated Learning with Auto-Tuned Clients", ICLR 2024: Delta-SGD and
  SPS client optimizers (`optimizers`).
* Al-Shedivat et al., "Federated Learning via Posterior Averaging", ICLR 2021: FedPA
  (`algorithms`).

Subpackages, lowest floor first (imports only point down): `commands` (how to type the console
command `tff-adaptive` so that it runs as pasted), `core` (pure TF: seeds, local loop,
tree math), `datasets` (TFF-format loaders, partitioners), `optimizers`, `aggregators`,
`algorithms`, `privacy` (the accountant of DP rounds), `tasks` (data + Keras model + metrics per task), `engines` (an algorithm as a TFF
LearningProcess or as one compiled round in process), `runtime` (where TFF computations run),
`loop` (the training loop behind `run/federated_trainer.py`), `run` (the trainer, summarize and
worker programs, and `tff-adaptive`, their console command).

Importing the package quiets TensorFlow's C++ logging if TensorFlow is not loaded yet
(`_quiet_tensorflow`; import it first, or set TF_CPP_MIN_LOG_LEVEL=2 yourself), and registers the
exit hook of `runtime` that stops TFF's workers and drops its import-time context cleanly.

The subpackages import TensorFlow on first use (`registry.lazy_exports`), so the package, its
registries and configs load without it. First use may come inside an absl `app.run` main, where
TF 2.14's import would create its eager context in graph mode (absl runs the callback TF
registers with `app.call_after_init` at once, before TF turns its 2.x behaviour on), and Keras
then fails to build a model. The package therefore sets TF2_BEHAVIOR=1, which `import
tensorflow` sets itself, before TensorFlow loads.
"""

import os

from tff_adaptive import _quiet_tensorflow
from tff_adaptive import _source_layout
from tff_adaptive import runtime as _runtime  # noqa: F401  (no TF import; registers the exit hook)

__version__ = '0.1.0'

__all__ = [
  'aggregators',
  'algorithms',
  'commands',
  'core',
  'datasets',
  'engines',
  'loop',
  'optimizers',
  'privacy',
  'run',
  'runtime',
  'tasks',
]

os.environ['TF2_BEHAVIOR'] = '1'  # see the docstring
_quiet_tensorflow.install()
_source_layout.install(__path__[0])
