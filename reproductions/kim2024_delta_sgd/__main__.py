"""Kim et al. 2024 (Delta-SGD): `python -m reproductions.kim2024_delta_sgd STUDY [FLAGS]`.

  table1      Table 1 FMNIST column and Table 4 (reproduce.py); results/table1/, with
              --seeds > 1 results/table1/seeds/
  step_sizes  one client's Delta-SGD step sizes, Fig. 7 style (plot_step_sizes.py);
              results/step_sizes/
  dog         DoG and L-DoG (Ivgi et al. 2023) as clients, beside Table 1's rows (dog.py);
              results/dog/

`--help` lists the studies; `STUDY --help` the study's flags (`reproductions.studies`).
"""

import sys

from reproductions import studies

STUDIES = {
  'table1': studies.Study(
    'reproduce', 'Table 1 FMNIST column and Table 4 (FedAdam server), 1 or more seeds'
  ),
  'step_sizes': studies.Study(
    'plot_step_sizes', "one client's Delta-SGD step sizes over its local steps (Fig. 7 style)"
  ),
  'dog': studies.Study('dog', "DoG and L-DoG clients (reps_rel piloted) beside Table 1's rows"),
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  return studies.dispatch('reproductions.kim2024_delta_sgd', STUDIES, argv, prog)


if __name__ == '__main__':
  sys.exit(main())
