"""Reddi et al. 2021: `python -m reproductions.reddi2021_fedopt STUDY [FLAGS]`.

  table1  the grid search of Sec. 4 / App. D for a task: Table 1, the heatmaps, the tau figure,
          the tuned curves (reproduce.py: `table1 all --task=TASK`); results/table1/<task>/

`--help` lists the studies; `STUDY --help` the study's flags (`reproductions.studies`).
"""

import sys

from reproductions import studies

STUDIES = {
  'table1': studies.Study(
    'reproduce', 'the grid search: Table 1, heatmaps, tau figure, curves (COMMAND --task=TASK)'
  ),
  'fedexp': studies.Study(
    'fedexp', "FedExP beside Table 1's rows: the same eta_l search, selection and seeds"
  ),
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  return studies.dispatch('reproductions.reddi2021_fedopt', STUDIES, argv, prog)


if __name__ == '__main__':
  sys.exit(main())
