"""Entry point of Bazel pytest targets (see pytest.bzl): runs pytest on the files given.

Bazel starts it in the runfiles copy of the workspace, where //:pytest.ini also lies, so pytest
uses the repository's configuration. Exits with pytest's status, so a failing test fails the
Bazel target.
"""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import pytest  # pylint: disable=g-import-not-at-top


def main() -> int:
  """Runs pytest on sys.argv[1:] and returns its exit status."""
  return int(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))


if __name__ == '__main__':
  sys.exit(main())
