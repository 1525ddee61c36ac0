"""Federated algorithms, one module each, written once as pure TF parts (see `base`).

* `fedopt`: FedAvg / FedAvgM / FedAdagrad / FedAdam / FedYogi (Reddi et al. 2021);
* `scaffold`: SCAFFOLD Option II (Karimireddy et al. 2020; Reddi et al. 2021 Alg. 6);
* `fedpa`: federated posterior averaging (Al-Shedivat et al. 2021), its math in `fedpa_math`;
* `adafedadam`: AdaFedAdam (Ju et al.), certainty-weighted alpha-fair aggregation into AdaAdam;
* the fair-FL baselines of Ju et al.: `fedprox` (Li et al. 2020, the proximal gradient with
  the right sign), `fednova` (Wang et al. 2020), `qfedavg` (q-FFL, Li et al. 2020);
* `fedexp`: FedExP (Jhunjhunwala et al. 2023), the server step extrapolated from the updates;
* `config` (no TensorFlow): `ALGORITHMS`, one `AlgorithmEntry` per algorithm (its builder,
  hyperparameters with their flags, what it supports), `AlgorithmInputs`, `build_algorithm`.

The names below are loaded on first use (`registry.lazy_exports`): importing this package, or its
`config`, imports no TensorFlow.
"""

from tff_adaptive import registry
from tff_adaptive.algorithms import config as _config  # no TensorFlow

__all__ = [
  'ALGORITHMS',
  'CLIENT_WEIGHTINGS',
  'Algorithm',
  'AlgorithmInputs',
  'ClientOutput',
  'Evaluation',
  'FullPass',
  'LocalResult',
  'ClientTrainingConfig',
  'build_algorithm',
  *_config.builder_exports(),  # build_<name> and the hyperparameters of every algorithm
]

__getattr__, __dir__ = registry.lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      (
        'ALGORITHMS',
        'AlgorithmInputs',
        'CLIENT_WEIGHTINGS',
        'ClientTrainingConfig',
        'build_algorithm',
      ),
      'config',
    ),
    **dict.fromkeys(('Algorithm', 'ClientOutput', 'Evaluation', 'FullPass', 'LocalResult'), 'base'),
    **_config.builder_exports(),
  },
)
