#!/usr/bin/env bash
# The test command of the README: sets up (idempotent), runs the whole pytest suite, and fails
# if the suite left a TFF worker_binary process running. Workers are attributed to this run by
# an environment marker they inherit, so other programs' workers on the machine don't count.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# One style for the tree (ruff.toml): formatting and import order/type-hint style, checked only.
.venv/bin/ruff format --check --quiet . || { echo "test.sh: error: run .venv/bin/ruff format ." >&2; exit 1; }
.venv/bin/ruff check --quiet . || { echo "test.sh: error: run .venv/bin/ruff check --fix ." >&2; exit 1; }
export TFF_ADAPTIVE_TEST_RUN="test-run-$$-$(date +%s%N)"
status=0
# Test files run in parallel, one file per worker at a time (--dist loadfile keeps a file's
# shared trainer runs in one process); TEST_WORKERS=0 runs serially. Three workers on two
# cores: part of the suite waits (on its subprocesses, sleeps before a kill, round timeouts),
# and a third worker fills those waits (measured on 2 cores: 19:28 with two, 18:09 with three).
TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python -m pytest -n "${TEST_WORKERS:-3}" --dist loadfile "$@" || status=$?
sleep 1
leaked=""
for pid in $(pgrep -x worker_binary || true); do
  if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "TFF_ADAPTIVE_TEST_RUN=$TFF_ADAPTIVE_TEST_RUN"; then
    leaked="$leaked $pid"
  fi
done
if [ -n "$leaked" ]; then
  echo "test.sh: error: the test suite left worker_binary processes running:$leaked" >&2
  exit 1
fi
echo "test.sh: no worker_binary process left behind"
exit "$status"
