#!/usr/bin/env bash
# The demo of the README: sets up (idempotent), then trains FedAdam and, for comparison, FedAvg on
# Fashion-MNIST (100 clients, Dirichlet alpha=0.1, the CNN of Kim et al.) for ROUNDS rounds each
# (default 100) on the in-process engine (the TFF engine's numbers, faster: docs/engines_and_workers.md),
# writes them to OUT (default results/demo/) and prints one line per run. Measured on an idle
# 2-core machine: 1 min 5 s for both runs (expect up to about 3 minutes on a loaded one).
# Extra arguments are passed to the trainer (e.g. --engine=tff).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
ROUNDS="${ROUNDS:-100}"
OUT="${OUT:-results/demo}"
for opt in adam sgd; do
  .venv/bin/tff-adaptive train --task=fmnist --server_optimizer="$opt" --engine=inprocess \
    --total_rounds="$ROUNDS" --rounds_per_eval=10 --root_output_dir="$OUT" "$@"
done
WINDOW=$(( ROUNDS < 50 ? ROUNDS : 50 ))
echo "demo: $OUT/ holds both runs; accuracy at the end and over the last $WINDOW rounds:"
.venv/bin/tff-adaptive summarize "$OUT" --window="$WINDOW"
