"""The shared training loop: sample, run a round on an engine, evaluate, release, checkpoint.

One loop for every algorithm, task and engine. It speaks to the engine only through the round
protocol of `tff_adaptive.engines.base` (clients in, flat metrics and client states out).
Outputs under <root_output_dir>/<experiment_name>/:

* hparams.json: the full configuration (`outputs.check_or_write_hparams`);
* metrics.csv: one row per round (round_num, train_*, client_*, eval_*, eval_client_*),
  written atomically (temp + rename) through `metrics_release.MetricsReleaseManager`, TFF's
  `tff.program.CSVFileReleaseManager` in WRITE mode without its two re-reads of the file;
* tensorboard/: the same metrics through `tff.program.TensorBoardReleaseManager`;
* checkpoints/: the engine's server state through `tff.program.FileProgramStateManager`;
* client_states/: stateful algorithms' per-client states (`client_states.ClientStateStore`),
  committed with every checkpoint so that a resume sees exactly the states of that round;
* client_eval/round_NNNNN.csv: per-client evaluation on each client's own test data.

Randomness is a function of (seed, round): client sampling (`sampling`) and each client's seed
(`core.seeds.client_seed`). Resuming from the checkpoint of round r reproduces rounds r+1..
exactly.

Ctrl-C and SIGTERM stop the loop after the round in progress, with a checkpoint of that round
(`stopping.StopAtRoundEnd`); a second one stops at once.

A full disk while any of these is written stops the loop with `outputs.DiskFullError` naming
the file; every file is written whole or not at all, so the latest checkpoint stays the last
complete one and a rerun resumes from it. Temporaries of interrupted writes (a kill mid-write)
are removed when the loop starts, in one line on `warn`.
"""

import asyncio
import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import csv
import dataclasses
import math
import os
import sys
import threading
import time
from typing import NamedTuple
from typing import TextIO

import numpy as np
import tensorflow_federated as tff

from tff_adaptive import runtime
from tff_adaptive.core import seeds
from tff_adaptive.engines import base as engine_base
from tff_adaptive.engines import grid_cells
from tff_adaptive.loop import client_states
from tff_adaptive.loop import evaluation
from tff_adaptive.loop import metrics_release
from tff_adaptive.loop import outputs
from tff_adaptive.loop import stopping
from tff_adaptive.loop import targets


class _EventLoop(threading.local):
  """This thread's event loop, kept for the process that made it (`_run_coroutine`)."""

  loop: asyncio.AbstractEventLoop | None = None
  pid: int | None = None


_EVENT_LOOP = _EventLoop()


def _run_coroutine(coroutine):
  """`asyncio.run(coroutine)` on one event loop kept per process and thread. TFF's release and
  state managers are coroutines whose file writes go through the loop's thread pool, which
  `asyncio.run` makes and shuts down on every call: about 4 ms a metrics.csv row on a 2-core
  CPU, as much as a small model's round (a grid of cells pays it once per cell and round). A
  forked child (the drivers' preloaded trainers) makes its own: the parent's pool threads do
  not exist in it."""
  if _EVENT_LOOP.loop is None or _EVENT_LOOP.pid != os.getpid() or _EVENT_LOOP.loop.is_closed():
    _EVENT_LOOP.loop, _EVENT_LOOP.pid = asyncio.new_event_loop(), os.getpid()
  return _EVENT_LOOP.loop.run_until_complete(coroutine)


# Checkpoints kept; the client-state store keeps the same number of snapshots, so that every
# kept checkpoint can be resumed with its client states.
KEEP_CHECKPOINTS = 2


class DivergenceError(RuntimeError):
  """Training produced a non-finite loss, update or model in a round.

  Attributes:
    round_num: the round, where the loop that raised it says (`run_cells`), else None.
  """

  round_num: int | None = None


class WorkerLostError(RuntimeError):
  """A remote worker stopped answering during a round; what earlier rounds wrote is intact."""


class ClientLossError(DivergenceError):
  """A client's loss makes its round's quantities undefined (e.g. AdaFedAdam's F_k(x_0) = 0)."""


def _client_loss_problem(
  evaluator: evaluation.Evaluator,
  weights: tff.learning.models.ModelWeights,
  initial_weights: tff.learning.models.ModelWeights,
  client_ids: Iterable[str],
  train_clients: Mapping[str, Mapping[str, np.ndarray]],
  check_initial_loss: bool,
) -> str | None:
  """The first of `client_ids` whose loss at x_t is not finite or at x_0 is 0, described.

  Run on the host only when a round reports an unusable client (`client_invalid_max` > 0,
  AdaFedAdam) or a non-finite training loss, to name the client. The x_0 check only for
  algorithms that divide by F_k(x_0) (`Algorithm.needs_positive_initial_loss`).
  """
  with np.errstate(over='ignore', invalid='ignore'):
    for cid in client_ids:
      data = train_clients[cid]
      loss_t = evaluator.evaluate(weights, data)['loss']
      if not math.isfinite(loss_t):
        return f"client {cid} has a non-finite loss ({loss_t}) at the round's model"
      if check_initial_loss and evaluator.evaluate(initial_weights, data)['loss'] == 0:
        return (
          f'client {cid} has loss 0 at the initial model x_0, so its I_k = F_k(x_t) / F_k(x_0) '
          'is undefined'
        )
  return None


class ResumeError(ValueError):
  """The experiment directory cannot be resumed: no checkpoint loads, or metrics.csv is lost."""


class TrainingResult(NamedTuple):
  """What `run_training` returns.

  Attributes:
    row: the metrics of the last round (including its evaluation), as floats.
    rounds: the number of rounds the experiment holds.
    finished_before: the run had already reached total_rounds before this call.
  """

  row: collections.OrderedDict
  rounds: int
  finished_before: bool = False


def _one_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f'{type(error).__name__}: {text[0] if text else ""}'.rstrip(': ')


def _load_checkpoint(state_manager, checkpoint_dir, initial_state, warn):
  """(state, round) of the newest checkpoint that loads, or (None, 0) if there is none.

  A checkpoint that does not load (truncated, emptied) is reported in one line and moved
  aside as `unreadable_program_state_<N>` (kept for inspection); the previous one is tried.

  Raises:
    ResumeError: there are checkpoints and none of them loads.
  """
  versions = _run_coroutine(state_manager.get_versions()) or []
  for version in sorted(versions, reverse=True):
    try:
      return _run_coroutine(state_manager.load(version, initial_state)), version
    except Exception as e:  # pylint: disable=broad-except  (any unreadable file)
      path = os.path.join(checkpoint_dir, f'program_state_{version}')
      aside = os.path.join(checkpoint_dir, f'unreadable_program_state_{version}')
      suffix = 0
      while os.path.exists(aside + (f'.{suffix}' if suffix else '')):
        suffix += 1
      os.replace(path, aside + (f'.{suffix}' if suffix else ''))
      print(
        f'warning: checkpoint {path} does not load ({_one_line(e)}); moved it to '
        f'{os.path.basename(aside)} and trying the previous one',
        file=warn,
        flush=True,
      )
  if versions:
    raise ResumeError(
      f'no checkpoint in {checkpoint_dir} loads (tried rounds {sorted(versions, reverse=True)}); '
      'delete the experiment directory to start over'
    )
  return None, 0


def _read_metrics(path: str, rounds: int) -> list[dict]:
  """The rows of metrics.csv, checked to hold rounds 1..rounds.

  Raises:
    ResumeError: the file is missing, unreadable, or lacks some of those rounds.
  """
  expected = f'it should hold rounds 1-{rounds}, the rounds of the checkpoint being resumed'
  try:
    with open(path, newline='') as f:
      rows = list(csv.DictReader(f))
    found = {int(float(r['round_num'])) for r in rows}
  except FileNotFoundError:
    raise ResumeError(f'{path} is missing; {expected}') from None
  except (OSError, ValueError, KeyError, TypeError, csv.Error, UnicodeDecodeError) as e:
    raise ResumeError(f'{path} is unreadable ({_one_line(e)}); {expected}') from None
  missing = sorted(set(range(1, rounds + 1)) - found)
  if missing:
    raise ResumeError(f'{path} lacks rounds {_ranges(missing)}; {expected}')
  return rows


def _ranges(numbers: list[int]) -> str:
  spans, start = [], numbers[0]
  for prev, cur in zip(numbers, numbers[1:] + [None]):
    if cur != prev + 1:
      spans.append(f'{start}' if start == prev else f'{start}-{prev}')
      start = cur
  return ', '.join(spans)


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Round bookkeeping of a run.

  Attributes:
    total_rounds: rounds to train, >= 1.
    rounds_per_eval: evaluate every this many rounds (and after the last), >= 1.
    rounds_per_checkpoint: checkpoint every this many rounds (and after the last), >= 1.
    seed: the run's seed (client seeds).
    output_dir: the experiment directory.
    target_metric: the evaluated column whose 10-round running average is written as
      `<metric>_avg10` on evaluation rounds (`loop.targets`).
    targets: thresholds of that average; `rounds_to_<metric>_<threshold>` holds the first round
      that reached each (written once reached), the "rounds to accuracy" of FedPA's Table 3.
    epsilon: differentially private runs: round T -> the epsilon of the first T rounds at the
      run's delta (`privacy.EpsilonByRound.epsilon`), written as `dp_epsilon` every round (a
      function of the round number, so a resumed run continues it exactly).
  """

  total_rounds: int
  rounds_per_eval: int
  rounds_per_checkpoint: int
  seed: int
  output_dir: str
  target_metric: str = 'eval_accuracy'
  targets: tuple[float, ...] = ()
  epsilon: Callable[[int], float] | None = None


def _flatten(prefix: str, metrics: Mapping[str, float]) -> collections.OrderedDict:
  return collections.OrderedDict((f'{prefix}_{k}', float(v)) for k, v in metrics.items())


def _target_history(rows: list[dict], config: LoopConfig, up_to: int) -> list[tuple[int, float]]:
  """(round, value) of the target metric in metrics.csv rows of rounds <= up_to, in round order.

  Only rounds on the evaluation cadence: an evaluation off it is the last round of a shorter
  run being extended, which an uninterrupted run would not have made.
  """
  history = []
  for r in rows:
    round_num = int(float(r['round_num']))
    value = r.get(config.target_metric)
    if round_num <= up_to and round_num % config.rounds_per_eval == 0 and value not in (None, ''):
      history.append((round_num, float(value)))
  return sorted(history)


class _Targets:
  """The running average of the target metric and the rounds its thresholds were reached."""

  def __init__(self, history: list[tuple[int, float]], config: LoopConfig, warn: TextIO):
    self.history, self.config, self.warn = history, config, warn
    self.reached = {t: targets.rounds_to_target(history, t) for t in config.targets}
    self.warned = False

  def add(self, row: dict, round_num: int) -> None:
    """Appends this evaluation; writes `<metric>_avg10` and the reached `rounds_to_*`."""
    metric = self.config.target_metric
    if metric not in row:
      if (self.config.targets or metric != 'eval_accuracy') and not self.warned:
        evaluated = ', '.join(k for k in row if k.startswith('eval_') and '_client_' not in k)
        print(
          f'warning: target metric {metric!r} is not evaluated (evaluated: {evaluated}); no '
          'running average or rounds to target is written',
          file=self.warn,
          flush=True,
        )
        self.warned = True
      return
    self.history.append((round_num, row[metric]))
    average = targets.running_average(self.history, round_num)
    row[targets.average_column(metric)] = average
    for threshold, reached in self.reached.items():
      if reached is None and average >= threshold:
        self.reached[threshold] = reached = round_num
      if reached is not None:
        row[targets.column(metric, threshold)] = float(reached)


def _all_finite(arrays) -> bool:
  return all(np.all(np.isfinite(np.asarray(x))) for x in arrays)


def _progress_fields(row: Mapping[str, float]) -> str:
  return ' '.join(
    f'{k}={v:.4g}'
    for k, v in row.items()
    if k in ('train_loss', 'train_accuracy', 'eval_client_accuracy_worst30', 'dp_epsilon')
    or (k.startswith('eval_') and not k.startswith('eval_client_'))
  )


class _Run:
  """One experiment directory's side of the loop: resume, then each round's record.

  `run_training` drives one with its engine; `run_cells` drives one per grid cell, all with
  one `grid_cells.GridCellsEngine`. `engine` here is the run's own engine (for a cell: its
  cell's), used for `initialize`, `model_weights` and `algorithm`.
  """

  def __init__(
    self,
    engine,
    initial_weights,
    train_clients,
    evaluator,
    validation_data,
    client_test,
    config: LoopConfig,
    final_test,
    log: TextIO,
    warn: TextIO,
    prefix: str = '',
  ):
    self.engine, self.initial_weights = engine, initial_weights
    self.train_clients, self.evaluator = train_clients, evaluator
    self.validation_data, self.client_test = validation_data, client_test
    self.config, self.final_test = config, final_test
    self.log, self.warn, self.prefix = log, warn, prefix
    output_dir = self.output_dir = config.output_dir
    stale = outputs.remove_stale_temporaries(output_dir)
    if stale:
      print(
        f'removed what interrupted writes left in {output_dir}: {", ".join(stale)}',
        file=warn,
        flush=True,
      )
    self.state_manager = tff.program.FileProgramStateManager(
      os.path.join(output_dir, 'checkpoints'), keep_total=KEEP_CHECKPOINTS, keep_first=False
    )
    initial_state = engine.initialize(initial_weights)
    state, start_round = _load_checkpoint(
      self.state_manager, os.path.join(output_dir, 'checkpoints'), initial_state, warn
    )
    self.metrics_path = metrics_path = os.path.join(output_dir, 'metrics.csv')
    self.finished = None  # the TrainingResult of a run that had already finished
    history = []  # (round, target metric) of the evaluated rounds
    if state is None:
      state = initial_state
      if os.path.exists(metrics_path):
        try:
          _read_metrics(metrics_path, 0)
        except ResumeError as e:  # rows of a run that never checkpointed: recomputed anyway
          os.replace(metrics_path, metrics_path + '.unreadable')
          print(f'warning: {e}; moved it to metrics.csv.unreadable', file=warn, flush=True)
    else:
      rows = _read_metrics(metrics_path, start_round)
      history = _target_history(rows, config, start_round)
      if start_round >= config.total_rounds:
        last = next(r for r in rows if int(float(r['round_num'])) == start_round)
        row = collections.OrderedDict(
          (k, float(v)) for k, v in last.items() if v not in ('', None) and k != 'round_num'
        )
        self.finished = TrainingResult(row, start_round, finished_before=True)
      else:
        print(f'{prefix}Resuming {output_dir} after round {start_round}', file=log, flush=True)
    self.state, self.round = state, start_round
    if self.finished is not None:  # nothing to write: no writers (TensorBoard's makes a file)
      return
    self.csv_manager = metrics_release.MetricsReleaseManager(metrics_path)
    self.tb_manager = tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard'))
    self.store = None
    if engine.algorithm.stateful_clients:
      self.store = client_states.ClientStateStore(
        os.path.join(output_dir, 'client_states'), keep_commits=KEEP_CHECKPOINTS
      )
      self.store.restore(start_round)
    self.client_index = {cid: i for i, cid in enumerate(train_clients)}
    self.tracker = _Targets(history, config, warn)
    self.row = collections.OrderedDict()
    self.round_times = []
    self.checkpointed = start_round

  def clients(self, round_num: int, sampled: list[str]) -> list[engine_base.RoundClient]:
    """The round's `RoundClient`s: examples, seeds of (seed, round, client), stored states."""
    population = len(self.client_index)
    return [
      engine_base.RoundClient(
        cid,
        self.train_clients[cid],
        seeds.client_seed(self.config.seed, round_num, self.client_index[cid], population),
        self.store.get(cid) if self.store is not None else None,
      )
      for cid in sampled
    ]

  def check(self, round_num: int, sampled: list[str], result: engine_base.RoundResult):
    """The round's metrics row and new model; `ClientLossError` naming a client to blame."""
    row = collections.OrderedDict(result.metrics)
    if row.get('client_invalid_max', 0) > 0 or not math.isfinite(row['train_loss']):
      problem = _client_loss_problem(
        self.evaluator,
        self.engine.model_weights(self.state),
        self.initial_weights,
        sampled,
        self.train_clients,
        self.engine.algorithm.needs_positive_initial_loss,
      )
      if problem is not None:
        raise ClientLossError(
          f'round {round_num}: {problem}; checkpoints and metrics up to round {round_num - 1} '
          f'are intact in {self.output_dir}'
        )
    return row, self.engine.model_weights(result.state)

  def record(self, round_num, sampled, result, row, new_weights, seconds: float) -> None:
    """Keeps the round: its state and client states, evaluation, metrics.csv, TensorBoard,
    checkpoint (on the cadence and after the last round), progress line.

    Raises:
      DivergenceError: a non-finite loss, update or model; nothing of the round is kept.
    """
    config, output_dir = self.config, self.output_dir
    diverged = (
      not math.isfinite(row['train_loss'])
      or row['train_update_non_finite'] > 0
      or not _all_finite(new_weights.trainable)
    )
    if diverged:
      raise DivergenceError(
        f'training diverged in round {round_num} (train_loss={row["train_loss"]}); '
        f'checkpoints and metrics up to round {round_num - 1} are intact in {output_dir}; '
        'try a smaller learning rate'
      )
    started = time.perf_counter()
    self.state, self.round = result.state, round_num
    if self.store is not None:
      with outputs.writing(self.store.root):
        for cid, client_state in zip(sampled, result.client_states):
          self.store.put(cid, client_state, round_num)
    last = round_num == config.total_rounds
    if round_num % config.rounds_per_eval == 0 or last:
      self._evaluate(row, round_num, new_weights, last)
    if config.epsilon is not None:
      row['dp_epsilon'] = config.epsilon(round_num)
    self.round_times.append(seconds + time.perf_counter() - started)
    row['seconds_per_round'] = self.round_times[-1]
    with outputs.writing(self.metrics_path):
      _run_coroutine(self.csv_manager.release(row, round_num))
    with outputs.writing(os.path.join(output_dir, 'tensorboard')):
      _run_coroutine(self.tb_manager.release(row, round_num))
      # The writer would flush on its own schedule, where a failure (a full disk) is only
      # logged: flushed here, it raises in the round that wrote, and TensorBoard shows each
      # round as it ends.
      self.tb_manager._summary_writer.flush()  # noqa: SLF001  (TFF keeps its writer private)
    if round_num % config.rounds_per_checkpoint == 0 or last:
      self.checkpoint()
    self.row = row
    recent = float(np.median(self.round_times[-20:]))
    eta = recent * (config.total_rounds - round_num)
    print(
      f'{self.prefix}round {round_num}/{config.total_rounds} {_progress_fields(row)} '
      f'{self.round_times[-1]:.2f}s/round eta {eta:.0f}s',
      file=self.log,
      flush=True,
    )

  def _evaluate(self, row, round_num, new_weights, last) -> None:
    evaluator, client_test = self.evaluator, self.client_test
    # A finite model can still have infinite losses (e.g. after a huge server step): they
    # are recorded as inf/nan, without numpy's RuntimeWarnings on stderr.
    with np.errstate(over='ignore', invalid='ignore'):
      row.update(_flatten('eval', evaluator.evaluate(new_weights, self.validation_data(round_num))))
      if last and self.final_test is not None:
        row.update(
          _flatten('eval_final', evaluator.evaluate_chunks(new_weights, self.final_test()))
        )
      if client_test is not None:
        summary, per_client = evaluator.evaluate_clients(new_weights, client_test)
        row.update(_flatten('eval_client', summary))
        for cid, results in per_client.items():  # for example-weighted summaries
          results['num_examples'] = len(client_test[cid]['y'])
        client_eval = os.path.join(self.output_dir, 'client_eval', f'round_{round_num:05d}.csv')
        with outputs.writing(client_eval):
          outputs.write_client_eval(self.output_dir, round_num, per_client)
    self.tracker.add(row, round_num)

  def checkpoint(self) -> None:
    """Checkpoints the state of the last recorded round (and commits its client states)."""
    round_num = self.round
    if self.store is not None:
      with outputs.writing(self.store.root):
        self.store.commit(round_num)  # before the checkpoint: every checkpoint has its snapshot
    path = os.path.join(self.output_dir, 'checkpoints', f'program_state_{round_num}')
    with outputs.writing(path):
      _run_coroutine(self.state_manager.save(self.state, round_num))
    self.checkpointed = round_num

  def worker_lost(self, round_num: int, error: Exception) -> WorkerLostError:
    return WorkerLostError(
      f'round {round_num}: {error}; checkpoints and metrics up to round {round_num - 1} are '
      f'intact in {self.output_dir}; rerun the same command once it is back (or with other '
      'workers) to resume'
    )

  def stop(self, stop: stopping.StopAtRoundEnd) -> None:
    """After a Ctrl-C / SIGTERM: the checkpoint of the last recorded round, one line."""
    if self.checkpointed != self.round:
      self.checkpoint()
    print(
      f'{self.prefix}stopped after round {self.round} ({stop.requested_name}); its checkpoint '
      'is saved',
      file=self.log,
      flush=True,
    )


def run_training(
  engine: engine_base.Engine,
  initial_weights: tff.learning.models.ModelWeights,
  train_clients: Mapping[str, Mapping[str, np.ndarray]],
  sampler: Callable[[int], list[str]],
  evaluator: evaluation.Evaluator,
  validation_data: Callable[[int], Mapping[str, np.ndarray]],
  client_test: Mapping[str, Mapping[str, np.ndarray]] | None,
  config: LoopConfig,
  final_test: Callable[[], Iterable[Mapping[str, np.ndarray]]] | None = None,
  log: TextIO = sys.stdout,
  warn: TextIO = sys.stderr,
) -> TrainingResult:
  """Trains with `engine` for config.total_rounds, resuming from the latest checkpoint if any.

  Evaluation rounds evaluate the global model on `validation_data(round_num)` (eval_*), e.g.
  the full test split, or Reddi et al.'s seeded 10,000-example sample for Stack Overflow, and
  on each client of `client_test` (eval_client_*). After the last round, `final_test` (the
  full test split in chunks), if given, is evaluated too (eval_final_*).

  Resuming: the newest checkpoint that loads is used (an unreadable one is reported on `warn`
  and moved aside), and metrics.csv must hold every round up to it. A run that already reached
  config.total_rounds returns its last metrics without training; a larger total_rounds extends
  it.

  Returns:
    A `TrainingResult` (the metrics of the last round, including its evaluation).

  Raises:
    DivergenceError: a round produced a non-finite loss, update or model; everything
      written before that round stays as it was (that round's row is not written).
      `ClientLossError` (a DivergenceError) names the client when one is to blame.
    ResumeError: no checkpoint loads, or metrics.csv does not hold the checkpointed rounds.
    WorkerLostError: a remote worker (`runtime.remote_execution`) died during a round, named with the
      round; the round's row is not written.
    outputs.DiskFullError: a file of the run could not be written for want of space, named;
      its temporaries are removed and the previous checkpoint is the latest.
  """
  data = (initial_weights, train_clients, evaluator, validation_data, client_test)
  run = _Run(engine, *data, config, final_test, log, warn)
  if run.finished is not None:
    return run.finished
  with stopping.StopAtRoundEnd(log) as stop:
    for round_num in range(run.round + 1, config.total_rounds + 1):
      started = time.perf_counter()
      sampled = sampler(round_num)
      try:
        result = engine.next(run.state, run.clients(round_num, sampled))
        row, new_weights = run.check(round_num, sampled, result)
      except runtime.WorkerLostError as e:
        raise run.worker_lost(round_num, e) from None
      run.record(round_num, sampled, result, row, new_weights, time.perf_counter() - started)
      if stop.requested is not None and round_num != config.total_rounds:
        run.stop(stop)
        stop.deliver()
  return TrainingResult(run.row, config.total_rounds)


def run_cells(
  engine,
  initial_weights: tff.learning.models.ModelWeights,
  train_clients: Mapping[str, Mapping[str, np.ndarray]],
  sampler: Callable[[int], list[str]],
  evaluator: evaluation.Evaluator,
  validation_data: Callable[[int], Mapping[str, np.ndarray]],
  client_test: Mapping[str, Mapping[str, np.ndarray]] | None,
  configs: list[LoopConfig],
  final_test: Callable[[], Iterable[Mapping[str, np.ndarray]]] | None = None,
  log: TextIO = sys.stdout,
  warn: TextIO = sys.stderr,
  names: list[str] | None = None,
) -> list[TrainingResult | DivergenceError]:
  """`run_training` for K grid cells at once, on one `grid_cells.GridCellsEngine`.

  Each cell keeps its own experiment directory (`configs[k].output_dir`) exactly as
  `run_training` keeps it: metrics.csv, checkpoints, evaluation, resume; a cell trained here
  and one trained alone by `run_training` hold the same files and can be resumed by either.
  The cells share the sampler and the seed, so every round's clients; the cells at the
  lowest round train together (the others wait: after a kill between two cells' checkpoints
  they catch up first). A cell that diverges stops (its `DivergenceError` is its result, its
  files as `run_training` leaves them); the others go on. Progress lines carry each cell's
  name (`names`, default the directory's name).

  Returns:
    Per cell: its `TrainingResult`, or the `DivergenceError` that stopped it.
  """
  if len(configs) != len(engine.cells):
    raise ValueError(f'{len(engine.cells)} cells but {len(configs)} loop configs')
  shared = {(c.total_rounds, c.seed) for c in configs}
  if len(shared) != 1:
    raise ValueError(f'grid cells must share total_rounds and seed, got {sorted(shared)}')
  names = names or [os.path.basename(os.path.normpath(c.output_dir)) for c in configs]
  data = (initial_weights, train_clients, evaluator, validation_data, client_test)
  runs = [
    _Run(cell, *data, config, final_test, log, warn, prefix=f'[{name}] ')
    for cell, config, name in zip(engine.cells, configs, names)
  ]
  results: list[TrainingResult | DivergenceError | None] = [r.finished for r in runs]
  total = configs[0].total_rounds
  with stopping.StopAtRoundEnd(log) as stop:
    while any(r is None for r in results):
      live = [k for k, r in enumerate(results) if r is None]
      round_num = min(runs[k].round for k in live) + 1
      group = [k for k in live if runs[k].round + 1 == round_num]
      started = time.perf_counter()
      sampled = sampler(round_num)
      cells = grid_cells.CellsState(
        tuple(run.state for run in runs), tuple(k in group for k in range(len(runs)))
      )
      outcomes = engine.next(cells, runs[group[0]].clients(round_num, sampled)).cells
      seconds = (time.perf_counter() - started) / len(group)  # the round's time, shared
      for k in group:
        run = runs[k]
        try:
          row, new_weights = run.check(round_num, sampled, outcomes[k])
          run.record(round_num, sampled, outcomes[k], row, new_weights, seconds)
        except DivergenceError as e:
          print(f'{run.prefix}{e}', file=warn, flush=True)
          e.round_num = round_num
          results[k] = e
          continue
        if round_num == total:
          results[k] = TrainingResult(run.row, total)
      if stop.requested is not None and any(r is None for r in results):
        for k, r in enumerate(results):
          if r is None:
            runs[k].stop(stop)
        stop.deliver()
  return results
