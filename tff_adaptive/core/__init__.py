"""Pure TF building blocks shared by every algorithm and both engines (no TFF computations).

* `skellam`: the distributed Skellam mechanism's parameters and RDP (no TensorFlow);
* `seeds`: per-(seed, round, client) seeds, epoch permutations, the step-seed context;
* `local_loop`: the local loop (E epochs of seeded minibatches) with a `LocalStep` hook;
* `tree`: arithmetic on nests of tensors (weighted sums, norms, finiteness);
* `validation`: argument checks raising ValueError that names the argument.
"""

__all__ = ['local_loop', 'seeds', 'skellam', 'tree', 'validation']
