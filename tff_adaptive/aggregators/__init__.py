"""How client updates are combined, with one face per engine.

An `UpdateAggregation` is the same arithmetic twice: a `tff.aggregators` factory (what the TFF
engine composes into a LearningProcess, and what a user puts into their own TFF pipeline) and a
decomposable fold `zero / accumulate / report` over the round's clients, which the in-process
engine runs inside its compiled round. Parity tests hold the two faces to the same numbers.
A client's value is its `ClientOutput.update`: the model-shaped u_i for most algorithms, or a
larger nest (FedNova's (d_i, a_i), AdaFedAdam's (U_k, C_k, I_k)) that the aggregation reduces to
what the server step reads.

* `weighted_mean()`: g = sum_i w_i u_i / sum_i w_i (0 when every weight is 0), TFF's
  `tff.aggregators.MeanFactory` (FedAvg's example-weighted average when w_i = n_i);
* `normalized_mean()`: FedNova's g = tau_eff sum_i p_i d_i, tau_eff = sum_i p_i a_i
  (`NormalizedMeanFactory`);
* `certainty_weighted_mean(alpha)`: AdaFedAdam's (g, C) with weights p_k I_k^alpha
  (`CertaintyWeightedMeanFactory`);
* `quantized_mean(bits)` (module `compression`): the weighted mean of b-bit stochastically
  quantised updates, TFF's `MeanFactory` over its `EncodedSumFactory`;
* `dp_mean(...)` (module `dp`): user-level differential privacy, each client's update clipped
  to L2 norm C, summed, N(0, (z C)^2) added, divided by the clients per round m: TFF's
  `tff.aggregators.DifferentiallyPrivateFactory` over a TensorFlow Privacy query whose noise is
  a function of (seed, round), or ('tree') DP-FTRL's tree noise on the running sum. The weights
  are not read (every client counts once);
* `ddp_mean(...)` (module `ddp`): distributed DP, TFF's `DistributedDpSumFactory`: each client
  clips, rotates, scales and rounds its update to integers and adds its share of Skellam noise,
  and secure aggregation sums them modulo 2^B (engine tff only: no fold).

The fold may keep state across rounds (the DP query's clip and noise counter): `initialize(specs)`
is the state before round 0, `zero(specs, state)` the round's empty accumulator, and
`report(acc, state)` returns (result, new state, measurements), the measurements structured as
the TFF face's. The in-process engine carries the state in its server state, as TFF's
LearningProcess carries the factory's process state.
"""

from tff_adaptive.registry import lazy_exports

__all__ = [
  'CERTAINTY_KEY',
  'CertaintyWeightedMeanFactory',
  'LOSS_RATIO_KEY',
  'NormalizedMeanFactory',
  'STEPS_KEY',
  'UPDATE_KEY',
  'UpdateAggregation',
  'certainty_weight',
  'certainty_weighted_mean',
  'ddp_mean',
  'dp_mean',
  'normalized_mean',
  'quantized_mean',
  'weighted_mean',
]

# Loaded on first use (PEP 562): `aggregators.config` (the trainer's compression settings)
# answers without TensorFlow.
__getattr__, __dir__ = lazy_exports(
  __name__,
  {
    **dict.fromkeys(
      (
        'CERTAINTY_KEY',
        'CertaintyWeightedMeanFactory',
        'LOSS_RATIO_KEY',
        'NormalizedMeanFactory',
        'STEPS_KEY',
        'UPDATE_KEY',
        'certainty_weight',
      ),
      'factories',
    ),
    'UpdateAggregation': 'update_aggregation',
    **dict.fromkeys(('certainty_weighted_mean', 'normalized_mean', 'weighted_mean'), 'means'),
    'ddp_mean': 'ddp',
    'dp_mean': 'dp',
    'quantized_mean': 'compression',
  },
)
