"""User-level DP with adaptive servers: `python -m reproductions.dp_fedopt STUDY [FLAGS]`.

  fmnist  DP-FedAvg vs DP-FedAdam vs noise-aware DP-FedAdam, fixed and adaptive clips, DP-FTRL,
          and quantised uploads, on Fashion-MNIST with 1000 clients (reproduce.py);
          results/fmnist/

`--help` lists the studies; `STUDY --help` the study's flags (`reproductions.studies`).
"""

import sys

from reproductions import studies

STUDIES = {
  'fmnist': studies.Study(
    'reproduce', 'DP-FedAvg vs DP-FedAdam (and noise-aware), clip rules, quantised uploads'
  ),
}


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
  return studies.dispatch('reproductions.dp_fedopt', STUDIES, argv, prog)


if __name__ == '__main__':
  sys.exit(main())
