#!/usr/bin/env bash
# The training command of the README: sets up (idempotent), then trains FedAdam and, for
# comparison, FedAvg on Fashion-MNIST (100 clients, Dirichlet alpha=0.1, the CNN of Kim et al.)
# for ROUNDS rounds each (default 150, a few minutes on 2 cores), and prints where results went.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
ROUNDS="${ROUNDS:-150}"
OUT="${OUT:-results/demo}"
for opt in adam sgd; do
  .venv/bin/python -m run.federated_trainer --task=fmnist --server_optimizer="$opt" \
    --total_rounds="$ROUNDS" --rounds_per_eval=10 --root_output_dir="$OUT" "$@"
done
.venv/bin/python -m run.summarize "$OUT"
