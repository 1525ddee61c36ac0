"""Ju et al. (AdaFedAdam): `python -m reproductions.ju2023_adafedadam STUDY [FLAGS]`.

  table5    Table 5 and the fairness figures on a data set (reproduce_synthetic.py);
            results/table5/<data set>/ (synthetic, synthetic_leaf, fmnist_silo)
  settings  which data set and averaging give Table 5's numbers (settings_study.py);
            results/settings/

`--help` lists the studies; `STUDY --help` the study's flags (`reproductions.studies`). The
figures of one's own runs: `python -m reproductions.ju2023_adafedadam.plot_fairness` (a tool,
no study of its own).
"""

import sys

from reproductions import studies

STUDIES = {
  'table5': studies.Study(
    'reproduce_synthetic', 'Table 5 and the fairness figures (Fig. 2, Fig. 3 right) (--data_set)'
  ),
  'settings': studies.Study(
    'settings_study', "which data set and which averaging give Table 5's numbers"
  ),
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  return studies.dispatch('reproductions.ju2023_adafedadam', STUDIES, argv, prog)


if __name__ == '__main__':
  sys.exit(main())
