"""The shared training loop: sample, train a round, evaluate, release metrics, checkpoint.

One loop for every algorithm and task. Outputs under <root_output_dir>/<experiment_name>/:

* hparams.json: the full configuration; a rerun with different values refuses to resume;
* metrics.csv: one row per round (round_num, train_*, eval_*, eval_client_*), written
  atomically through `tff.program.CSVFileReleaseManager` (WRITE mode: temp file + rename);
* tensorboard/: the same metrics through `tff.program.TensorBoardReleaseManager`;
* checkpoints/: the full `LearningAlgorithmState` through `tff.program.FileProgramStateManager`;
* client_eval/round_NNNNN.csv: per-client evaluation on each client's own test data.

Randomness is a function of (seed, round): client sampling through `sampling`, and each
client's shuffling through a seed derived from (seed, round, client index). Resuming from the
checkpoint of round r therefore reproduces rounds r+1.. exactly.
"""

import asyncio
import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
import csv
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any
from typing import TextIO

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import client_work as client_work_lib
from tff_adaptive import evaluation


class DivergenceError(RuntimeError):
  """Training produced a non-finite loss, update or model in a round."""


class ConfigMismatchError(ValueError):
  """An experiment directory holds a run with different hyperparameters."""


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Round bookkeeping of a run.

  Attributes:
    total_rounds: rounds to train, >= 1.
    clients_per_round: clients sampled per round.
    rounds_per_eval: evaluate every this many rounds (and after the last), >= 1.
    rounds_per_checkpoint: checkpoint every this many rounds (and after the last), >= 1.
    seed: the run's seed (client sampling, client shuffling).
    output_dir: the experiment directory.
  """

  total_rounds: int
  clients_per_round: int
  rounds_per_eval: int
  rounds_per_checkpoint: int
  seed: int
  output_dir: str


def client_seed(seed: int, round_num: int, client_index: int, population: int) -> np.ndarray:
  """int64[2] seed of one client's local shuffling in one round: (seed, round * N + index)."""
  return np.array([seed, round_num * population + client_index], np.int64)


def _write_json_atomically(path: str, value: Any) -> None:
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(value, f, indent=2, sort_keys=True)
  os.replace(tmp, path)


def _leaves(value: Any, prefix: str = '') -> dict[str, Any]:
  """{'a.b': leaf} of a nested JSON mapping (an empty mapping is a leaf)."""
  if not isinstance(value, Mapping) or not value:
    return {prefix: value}
  leaves = {}
  for key, item in value.items():
    leaves.update(_leaves(item, f'{prefix}.{key}' if prefix else str(key)))
  return leaves


def check_or_write_hparams(output_dir: str, hparams: Mapping[str, Any]) -> None:
  """Writes hparams.json, or checks an existing one matches `hparams`.

  Raises:
    ConfigMismatchError: naming the differing keys (dotted paths such as
      `server.learning_rate`), their stored and new values.
  """
  path = os.path.join(output_dir, 'hparams.json')
  hparams = json.loads(json.dumps(hparams))  # normalise tuples, numpy scalars
  if os.path.exists(path):
    with open(path) as f:
      stored = _leaves(json.load(f))
    new = _leaves(hparams)
    missing = object()
    diffs = sorted(
      k for k in set(stored) | set(new) if stored.get(k, missing) != new.get(k, missing)
    )
    if diffs:
      detail = ', '.join(
        f'{k}: {stored.get(k, "<absent>")!r} -> {new.get(k, "<absent>")!r}' for k in diffs
      )
      raise ConfigMismatchError(
        f'{output_dir} holds a run with different hyperparameters ({detail}); use a new '
        '--experiment_name or delete that directory'
      )
    return
  os.makedirs(output_dir, exist_ok=True)
  _write_json_atomically(path, hparams)


def _flatten(prefix: str, metrics: Mapping[str, Any]) -> collections.OrderedDict:
  return collections.OrderedDict((f'{prefix}_{k}', float(v)) for k, v in metrics.items())


def _write_client_eval(
  output_dir: str, round_num: int, per_client: Mapping[str, Mapping[str, float]]
) -> None:
  directory = os.path.join(output_dir, 'client_eval')
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f'round_{round_num:05d}.csv')
  tmp = f'{path}.tmp'
  names = list(next(iter(per_client.values())))
  with open(tmp, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['client_id'] + names)
    for cid, results in per_client.items():
      writer.writerow([cid] + [results[n] for n in names])
  os.replace(tmp, path)


def _is_finite_structure(value) -> bool:
  return all(np.all(np.isfinite(np.asarray(x))) for x in tf.nest.flatten(value))


def run_training(
  process: tff.learning.templates.LearningProcess,
  initial_weights: tff.learning.models.ModelWeights,
  train_clients: Mapping[str, Mapping[str, np.ndarray]],
  sampler: Callable[[int], list[str]],
  evaluator: evaluation.Evaluator,
  validation_data: Callable[[int], Mapping[str, np.ndarray]],
  client_test: Mapping[str, Mapping[str, np.ndarray]] | None,
  config: LoopConfig,
  final_test: Callable[[], Iterable[Mapping[str, np.ndarray]]] | None = None,
  log: TextIO = sys.stdout,
) -> collections.OrderedDict:
  """Trains `process` for config.total_rounds, resuming from the latest checkpoint if any.

  Evaluation rounds evaluate the global model on `validation_data(round_num)` (eval_*), e.g.
  the full test split, or Reddi et al.'s seeded 10,000-example sample for Stack Overflow, and
  on each client of `client_test` (eval_client_*). After the last round, `final_test` (the
  full test split in chunks), if given, is evaluated too (eval_final_*).

  Returns:
    The metrics of the last round (including its evaluation).

  Raises:
    DivergenceError: a round produced a non-finite loss, update or model; everything
      written before that round stays as it was.
  """
  output_dir = config.output_dir
  state_manager = tff.program.FileProgramStateManager(
    os.path.join(output_dir, 'checkpoints'), keep_total=2, keep_first=False
  )
  csv_manager = tff.program.CSVFileReleaseManager(
    os.path.join(output_dir, 'metrics.csv'),
    save_mode=tff.program.CSVSaveMode.WRITE,
    key_fieldname='round_num',
  )
  tb_manager = tff.program.TensorBoardReleaseManager(os.path.join(output_dir, 'tensorboard'))

  initial_state = process.set_model_weights(process.initialize(), initial_weights)
  state, start_round = asyncio.run(state_manager.load_latest(initial_state))
  if state is None:
    state, start_round = initial_state, 0
  else:
    print(f'Resuming {output_dir} after round {start_round}', file=log, flush=True)
  client_index = {cid: i for i, cid in enumerate(train_clients)}
  population = len(client_index)

  row = collections.OrderedDict()
  round_times = []
  for round_num in range(start_round + 1, config.total_rounds + 1):
    started = time.perf_counter()
    sampled = sampler(round_num)
    client_data = []
    for cid in sampled:
      arrays = collections.OrderedDict(train_clients[cid])
      arrays[client_work_lib.SEED_KEY] = client_seed(
        config.seed, round_num, client_index[cid], population
      )
      client_data.append(tf.data.Dataset.from_tensors(arrays))
    output = process.next(state, client_data)
    train = output.metrics['client_work']['train']
    row = collections.OrderedDict(_flatten('train', train))
    row['train_update_non_finite'] = float(output.metrics['finalizer']['update_non_finite'])
    new_weights = process.get_model_weights(output.state)
    diverged = (
      not math.isfinite(row['train_loss'])
      or row['train_update_non_finite'] > 0
      or not _is_finite_structure(new_weights.trainable)
    )
    if diverged:
      asyncio.run(csv_manager.release(row, round_num))
      raise DivergenceError(
        f'training diverged in round {round_num} (train_loss={row["train_loss"]}); '
        f'checkpoints and metrics up to round {round_num - 1} are intact in {output_dir}; '
        'try a smaller learning rate'
      )
    state = output.state
    last = round_num == config.total_rounds
    if round_num % config.rounds_per_eval == 0 or last:
      # A finite model can still have infinite losses (e.g. after a huge server step): they
      # are recorded as inf/nan, without numpy's RuntimeWarnings on stderr.
      with np.errstate(over='ignore', invalid='ignore'):
        row.update(_flatten('eval', evaluator.evaluate(new_weights, validation_data(round_num))))
        if last and final_test is not None:
          row.update(_flatten('eval_final', evaluator.evaluate_chunks(new_weights, final_test())))
        if client_test is not None:
          summary, per_client = evaluator.evaluate_clients(new_weights, client_test)
          row.update(_flatten('eval_client', summary))
          _write_client_eval(output_dir, round_num, per_client)
    round_times.append(time.perf_counter() - started)
    row['seconds_per_round'] = round_times[-1]
    asyncio.run(csv_manager.release(row, round_num))
    asyncio.run(tb_manager.release(row, round_num))
    if round_num % config.rounds_per_checkpoint == 0 or last:
      asyncio.run(state_manager.save(state, round_num))
    recent = float(np.median(round_times[-20:]))
    eta = recent * (config.total_rounds - round_num)
    shown = ' '.join(
      f'{k}={v:.4g}'
      for k, v in row.items()
      if k in ('train_loss', 'train_accuracy')
      or (k.startswith('eval_') and not k.startswith('eval_client_'))
      or k == 'eval_client_accuracy_worst30'
    )
    print(
      f'round {round_num}/{config.total_rounds} {shown} '
      f'{round_times[-1]:.2f}s/round eta {eta:.0f}s',
      file=log,
      flush=True,
    )
  return row
