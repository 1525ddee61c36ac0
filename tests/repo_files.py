"""The repository's files, for tests that read the tree (layout, docs)."""

import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]


def tracked_files(pattern: str = '*') -> list[pathlib.Path]:
  """Files matching `pattern`: git's list in a checkout, else (Bazel's runfiles tree, which holds
  only what the test target declares) every file present."""
  try:
    names = subprocess.run(
      ['git', 'ls-files', pattern], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
  except (OSError, subprocess.CalledProcessError):
    return sorted(p for p in REPO.rglob(pattern) if p.is_file())
  return [REPO / name for name in names]
