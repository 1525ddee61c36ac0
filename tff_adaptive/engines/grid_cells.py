"""Grid cells side by side: K runs that differ only in their hyperparameters, as one computation.

A learning-rate grid (Reddi et al. 2021, App. D.2: eta_l x eta x tau per server optimizer) is
many runs of one task that share everything else: the model, the data, the clients of every
round and their seeds. `GridCellsEngine` trains K such cells' rounds in one compiled function:

* local training: the K cells' C clients as K x C stacked clients of the vectorised engine
  (`vectorised.VectorisedEngine`: the model's batched form, every client's own minibatches,
  steps and dropout seeds), client i of cell k starting from cell k's x_t and stepping with
  cell k's eta_l(t):  x <- x - eta_l[k] g  (client SGD, TFF's `build_sgdm` without momentum);
* per cell: its clients' `client_result`, the aggregation fold and the server step of the
  cell's own algorithm (its server optimizer, whose hyperparameters, eta and tau among them,
  are in the cell's optimizer state, as TFF's optimizers keep them), and its own training
  metrics, so that each cell's round is the one it would have alone (tested equal, cell by
  cell, to the vectorised and in-process engines).

The engine's state holds the cells' server states and which of them the next round advances
(`CellsState`); `next(state, clients)`, as every engine's, returns every cell's result (an
inactive cell's state unchanged: a cell that diverged, finished, or is at another round). The
cells talk to their vectorised engines through those engines' round parts (`round_inputs`,
`schedule`, `fold_clients`, `server_step`, ...: `inprocess.InProcessEngine`'s docstring). Cells must agree on everything but the client
learning rate (and its schedule), the server optimizer and its hyperparameters; a plain
(not DP, not compressed) aggregation; clients that only take local steps (no full passes, gradient transforms, epoch
means or client states: FedOpt's FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi, and FedNova)
with client optimizer sgd. Anything else is refused in one line naming why (`check_cells`).

The loop that keeps each cell's run directory (metrics.csv, checkpoints, resume) is
`loop.training_loop.run_cells`; the trainer's `--cells` runs it.
"""

import collections
from collections.abc import Sequence
import dataclasses
from typing import Any
from typing import NamedTuple

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.algorithms import base as algorithm_base
from tff_adaptive.core import seeds
from tff_adaptive.engines import base
from tff_adaptive.engines import stacked_steps
from tff_adaptive.engines import vectorised
from tff_adaptive.optimizers import config as optimizer_config


def _shared_settings(algorithm: algorithm_base.Algorithm) -> tuple:
  """What cells must share: the algorithm and the client configuration but its learning rate."""
  client = algorithm.client
  optimizer = dataclasses.replace(client.optimizer, learning_rate=1.0)
  return algorithm.name, dataclasses.replace(client, optimizer=optimizer, lr_schedule=None)


def cell_refusal(algorithm: algorithm_base.Algorithm) -> str | None:
  """Why `algorithm` cannot be a grid cell; None if it can."""
  name = algorithm.name
  optimizer = algorithm.client.optimizer.name
  entries = optimizer_config.CLIENT_OPTIMIZERS
  if not entries[optimizer].grid_cells:
    supported = ', '.join(n for n, e in entries.items() if e.grid_cells)
    return (
      f'client optimizer {optimizer!r} cannot run as a grid cell (supported: {supported}); '
      'run the cells one by one'
    )
  if algorithm.stateful_clients:
    return (
      f'algorithm {name!r} keeps client states, which cells do not share; run the cells one by one'
    )
  aggregation = algorithm.aggregation
  if aggregation.differentially_private or aggregation.compressed:
    return (
      f'aggregation {aggregation.name!r} (DP or compression) does not run as a grid cell yet; '
      'run the cells one by one'
    )
  if algorithm.full_passes() or algorithm.transforms_gradient() or algorithm.epoch_means():
    return (
      f"algorithm {name!r}'s clients do more than local steps (full passes, gradient "
      'transforms or epoch means); run the cells one by one'
    )
  return vectorised.check_algorithm_reason(algorithm)


def check_cells(algorithms: Sequence[algorithm_base.Algorithm]) -> None:
  """Raises ValueError (one line) unless `algorithms` can train side by side as grid cells."""
  if not algorithms:
    raise ValueError('grid cells: no cells given')
  for algorithm in algorithms:
    reason = cell_refusal(algorithm)
    if reason is not None:
      raise ValueError(f'grid cells: {reason}')
  first = _shared_settings(algorithms[0])
  for k, algorithm in enumerate(algorithms[1:], 1):
    if _shared_settings(algorithm) != first:
      raise ValueError(
        f'grid cells: cell {k} differs from cell 0 in more than the client learning rate and '
        f'the server optimizer ({_shared_settings(algorithm)} vs {first})'
      )


class CellsState(NamedTuple):
  """The state of K cells (`GridCellsEngine`): each cell's own server state, and which cells the
  next round advances (a cell that diverged, finished, or is at another round waits)."""

  cells: tuple
  active: tuple[bool, ...]


class GridCellsEngine(base.Engine):
  """K cells' rounds as one computation (module docstring); engine 'grid_cells'.

  Its state is a `CellsState`; `next` returns every cell's `RoundResult` in
  `RoundResult.cells` (an inactive cell's state is the one given, its metrics those of a round
  it did not keep). `algorithm` is cell 0's.

  Attributes:
    cells: one `vectorised.VectorisedEngine` per cell (its algorithm, workspace model and
      metrics); `cells[k]` is the engine of cell k for the training loop (`initialize`,
      `model_weights`, `algorithm`).
  """

  def __init__(self, algorithms: Sequence[algorithm_base.Algorithm], device: str | None = None):
    """Checks the cells (`check_cells`) and builds each cell's workspace.

    Raises:
      ValueError: the cells cannot train side by side (one line naming why).
    """
    check_cells(algorithms)
    super().__init__(algorithms[0])
    self.cells = [vectorised.VectorisedEngine(a, device=device) for a in algorithms]
    specs = [c.specs for c in self.cells]
    if any(s != specs[0] for s in specs):
      raise ValueError('grid cells: the cells have models of different shapes')
    self.device = self.cells[0].device
    self._round_fn = None

  def initialize(self, initial_weights: tff.learning.models.ModelWeights) -> CellsState:
    """Every cell's server state at round 0, each from `initial_weights`, all active."""
    states = tuple(cell.initialize(initial_weights) for cell in self.cells)
    return CellsState(states, (True,) * len(states))

  def model_weights(self, state: Any) -> tff.learning.models.ModelWeights:
    """The model of one cell's state (every cell's has the same structure)."""
    return self.cells[0].model_weights(state)

  def next(self, state: CellsState, clients: Sequence[base.RoundClient]) -> base.RoundResult:
    """One round on `clients` for the cells `state.active` marks; `RoundResult.cells` holds
    every cell's result, `RoundResult.state` their new states."""
    if not clients:
      raise ValueError('a round needs at least one client')
    if len(state.cells) != len(self.cells) or len(state.active) != len(self.cells):
      raise ValueError(f'expected {len(self.cells)} cell states and active flags')
    lead = self.cells[0]
    features, splits, seeds_, _, _ = lead.round_inputs(clients)
    active = tf.constant(list(state.active), tf.bool)
    with tf.device(self.device):
      if self._round_fn is None:
        self._round_fn = self._build_round_fn(tuple(state.cells), features)
      outputs = self._round_fn(tuple(state.cells), features, splits, seeds_, active)
    results = tuple(cell.round_result(clients, *out) for cell, out in zip(self.cells, outputs))
    new_state = CellsState(tuple(r.state for r in results), tuple(state.active))
    return base.RoundResult(new_state, collections.OrderedDict(), None, results)

  def _build_round_fn(self, states, features):
    signature = (
      tuple(cell.state_spec(s) for cell, s in zip(self.cells, states)),
      collections.OrderedDict(
        (k, tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype))) for k, v in features.items()
      ),
      tf.TensorSpec([None], tf.int32),
      tf.TensorSpec([None, 2], tf.int64),
      tf.TensorSpec([len(self.cells)], tf.bool),
    )
    return tf.function(self._round, input_signature=signature, autograph=False)

  def _round(self, states, features, splits, seeds_, active):
    cells, lead = self.cells, self.cells[0]
    sizes = splits[1:] - splits[:-1]
    num_clients = tf.shape(sizes)[0]
    lrs = [
      tf.cast(cell.algorithm.client_lr_schedule(s['client_round']), tf.float32)
      for cell, s in zip(cells, states)
    ]
    broadcasts = [
      cell.algorithm.client_broadcast(s['extra'], s['client_round'])
      for cell, s in zip(cells, states)
    ]
    for cell in cells:
      cell.reset_metrics()
    steps, (rows, valid) = lead.schedule(splits, seeds_)
    start = tuple(
      tf.repeat(tf.stack([s['model'].trainable[j] for s in states]), num_clients, axis=0)
      for j in range(len(lead.specs))
    )
    updates = self._train(cells, features, steps, rows, valid, seeds_, start, lrs, num_clients)
    num_examples = tf.cast(sizes, tf.float32)
    outputs = []
    for k, (cell, state) in enumerate(zip(cells, states)):
      offset = k * num_clients
      x_k = tuple(state['model'].trainable)

      def client_output(i, cell=cell, offset=offset, k=k, x_k=x_k):
        return cell.algorithm.client_result(
          algorithm_base.LocalResult(
            update=tuple(u[offset + i] for u in updates),
            num_steps=steps[i],
            stats=collections.OrderedDict(local_steps=tf.cast(steps[i], tf.float32)),
            num_examples=num_examples[i],
            learning_rate=lrs[k],
            passes=collections.OrderedDict(),
            broadcast=broadcasts[k],
            client_state=(),
            initial=x_k,
            epoch_means=(),
          )
        )

      spec = cell.output_spec(broadcasts[k])
      carry, new_states = cell.fold_clients(state, spec, num_clients, client_output)
      new_state, *rest = cell.server_step(state, spec, num_clients, carry, new_states)
      kept = tf.nest.map_structure(lambda n, o, k=k: tf.where(active[k], n, o), new_state, state)
      outputs.append((kept, *rest))
    return tuple(outputs)

  def _train(self, cells, features, steps, rows, valid, seeds_, start, lrs, num_clients):
    """Every cell's clients' local SGD from its own x_t, side by side; their u = x_t - x_K,
    stacked cell by cell ([K C, ...]), each cell's training metrics updated on its slice."""
    lead = cells[0]
    num_cells = len(cells)
    repeat = lambda t: tf.tile(t, tf.concat([[num_cells], tf.ones([tf.rank(t) - 1], tf.int32)], 0))
    all_steps = repeat(steps)
    all_seeds = repeat(seeds_)
    lr = tf.repeat(tf.stack(lrs), num_clients)

    def body(s, params):
      active = s < all_steps
      step_valid = valid[:, s]
      count = tf.reduce_sum(tf.cast(step_valid, tf.int32), axis=1)
      batch = collections.OrderedDict(
        (name, repeat(tf.gather(v, rows[:, s]))) for name, v in features.items()
      )
      all_valid, all_count = repeat(step_valid), repeat(count)
      with tf.GradientTape() as tape:
        tape.watch(params)
        predictions = lead.functional.apply(
          params, batch['x'], True, seeds.local_step_seed(all_seeds, s)
        )
        losses = lead.client_losses(batch['y'], predictions, all_valid, all_count)
        total = tf.reduce_sum(losses)
      grads = tape.gradient(total, params)
      stepped = tuple(
        p - tf.cast(stacked_steps.per_client(lr, p), p.dtype) * g for p, g in zip(params, grads)
      )
      params = stacked_steps.keep_active(active, stepped, tuple(params))
      for k, cell in enumerate(cells):
        part = lambda t, k=k: t[k * num_clients : (k + 1) * num_clients]
        cell.update_metrics(
          part(batch['y']), part(predictions), part(losses), step_valid, count, part(active)
        )
      return s + 1, tuple(params)

    _, params = tf.while_loop(lambda s, _: s < tf.reduce_max(steps), body, (tf.constant(0), start))
    return tuple(w - p for w, p in zip(start, params))
