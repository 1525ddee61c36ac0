"""The training loop behind `run/federated_trainer.py`: rounds, client state, outputs, evaluation.

* `training_loop`: sample, run a round on an engine, evaluate, release, checkpoint, resume;
* `client_states`: disk-backed per-client state (SCAFFOLD's c_i), committed with checkpoints;
* `outputs`: hparams.json (fingerprint + runtime section), client_eval files;
* `evaluation`: pooled and per-client evaluation, distribution statistics;
* `sampling`: seeded client sampling (TFF's sampler or O(k));
* `run_dir`: the experiment directory and its lock; `targets`: rounds-to-target;
* `stopping`: Ctrl-C/SIGTERM stop the loop after the round in progress, with its checkpoint.
"""

__all__ = [
  'client_states',
  'evaluation',
  'outputs',
  'run_dir',
  'sampling',
  'stopping',
  'targets',
  'training_loop',
]
