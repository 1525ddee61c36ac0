"""Pure TF building blocks shared by every algorithm and both engines (no TFF computations).

* `skellam`: the distributed Skellam mechanism's parameters and RDP (no TensorFlow);
* `dp_noise`: `DeliveredNoise`, the noise a DP aggregation adds, read by its queries and by the
  accountant alike (no TensorFlow);
* `seeds`: per-(seed, round, client) seeds, epoch permutations, the step-seed context;
* `local_loop`: the local loop (E epochs of seeded minibatches) with a `LocalStep` hook;
* `tree`: arithmetic on nests of tensors (weighted sums, norms, finiteness);
* `validation`: argument checks raising ValueError that names the argument.
"""

__all__ = ['dp_noise', 'local_loop', 'seeds', 'skellam', 'tree', 'validation']
