#!/bin/sh
# Python interpreter for Bazel py_binary/py_test targets: runs the project's virtualenv,
# <workspace>/.venv/bin/python, wherever the workspace lives (no absolute paths in the repo).
#
# Bazel places this script in the runfiles tree as a symlink to the checked-in source file, so
# its real location is <workspace>/tools/bazel_python/venv_python.sh. Lookup order:
#   1. $TFF_ADAPTIVE_PYTHON (explicit override, e.g. a different virtualenv);
#   2. <workspace>/.venv/bin/python, the workspace found from this script's real path;
#   3. $BUILD_WORKSPACE_DIRECTORY/.venv/bin/python (set by `bazel run`).
# The venv's bin/python is exec'd as is (not resolved further), so Python sees the venv.
if [ -n "${TFF_ADAPTIVE_PYTHON:-}" ]; then
  exec "$TFF_ADAPTIVE_PYTHON" "$@"
fi
here="$(dirname "$(readlink -f "$0")")"
for candidate in "$here/../../.venv/bin/python" \
                 "${BUILD_WORKSPACE_DIRECTORY:-/nonexistent}/.venv/bin/python"; do
  if [ -x "$candidate" ]; then
    exec "$candidate" "$@"
  fi
done
echo "venv_python.sh: no virtualenv interpreter at $here/../../.venv/bin/python;" \
     "run tools/setup.sh first or set TFF_ADAPTIVE_PYTHON" >&2
exit 127
