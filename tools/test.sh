#!/usr/bin/env bash
# The test command of the README: sets up (idempotent), runs the whole pytest suite, and fails
# if the suite left a TFF worker_binary process running.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
before="$(pgrep -x worker_binary | sort || true)"
status=0
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m pytest "$@" || status=$?
sleep 1
after="$(pgrep -x worker_binary | sort || true)"
leaked="$(comm -13 <(echo "$before") <(echo "$after") | grep -v '^$' || true)"
if [ -n "$leaked" ]; then
  echo "test.sh: error: the test suite left worker_binary processes running: $leaked" >&2
  exit 1
fi
echo "test.sh: no worker_binary process left behind"
exit "$status"
