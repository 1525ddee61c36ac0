"""Al-Shedivat et al. 2021 (FedPA): `python -m reproductions.alshedivat2021_fedpa STUDY [FLAGS]`.

  least_squares  Sec. 3 / Fig. 1 on federated least squares (least_squares.py);
                 results/least_squares/
  fmnist         FedAvg-ME vs FedPA-ME on Fashion-MNIST Dir(0.1) (reproduce_fmnist.py);
                 results/fmnist/
  regimes        FedPA vs FedAvg across E, heterogeneity and rho (regimes.py);
                 results/regimes/<task>/

`--help` lists the studies; `STUDY --help` the study's flags (`reproductions.studies`).
"""

import sys

from reproductions import studies

STUDIES = {
  'least_squares': studies.Study(
    'least_squares', "Fig. 1: FedAvg's biased vs FedPA's fixed point on federated least squares"
  ),
  'fmnist': studies.Study('reproduce_fmnist', 'FedAvg-ME vs FedPA-ME on Fashion-MNIST Dir(0.1)'),
  'regimes': studies.Study(
    'regimes', 'FedPA vs FedAvg across local epochs, heterogeneity and rho (--task=TASK)'
  ),
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  return studies.dispatch('reproductions.alshedivat2021_fedpa', STUDIES, argv, prog)


if __name__ == '__main__':
  sys.exit(main())
