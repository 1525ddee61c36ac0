"""The trainer's programs: `tff_adaptive.run` installed, the folder `run/` in a checkout.

* `cli`: `tff-adaptive`, the console command (train, summarize, worker, samples, fetch, reproduce);
* `federated_trainer`: the one trainer (`tff-adaptive train`, `python -m run.federated_trainer`);
* `flags`, `cell_flags`, `flag_reference`: its flags, grid-cell flags, docs/flags.md;
* `summarize`: one line per run of a results directory (`tff-adaptive summarize`);
* `worker`: one TFF worker for --workers (`tff-adaptive worker`);
* `preload`, `autograph_cache`: trainer processes forked from one that has loaded TensorFlow;
* `provenance`: the code version that runs and reports record.
"""

__all__ = [
  'autograph_cache',
  'cell_flags',
  'cli',
  'federated_trainer',
  'flag_reference',
  'flags',
  'preload',
  'provenance',
  'summarize',
  'worker',
]
