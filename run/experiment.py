"""A run's configuration and its record: `ExperimentConfig`, hparams.json, experiment names.

What the trainer's flags (`run.flags`) become, and what of it shapes the run: hparams.json's
record (fingerprinted but for `runtime`, compared on a resume) and the default experiment name
(task, parts, seed, DP and compression, and the record's fingerprint). No TensorFlow.
"""

import dataclasses
from typing import Any

from tff_adaptive import settings
from tff_adaptive.aggregators import config as aggregator_config
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.engines import config as engine_config
from tff_adaptive.loop import outputs
from tff_adaptive.loop import sampling
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.privacy import config as privacy_config
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import config as task_config

_MAX_LOCAL_WORKERS = 256
ROUNDS_SECTION = 'Rounds, evaluation and seeds'
WORKERS_SECTION = 'Engine and workers'
SELECTABLE_ENGINES = tuple(name for name, e in engine_config.ENGINES.items() if e.summary)


def _local_workers(flag: str, value: Any) -> None:
  if value is not None and not 1 <= value <= _MAX_LOCAL_WORKERS:
    raise ValueError(f'--{flag} must be an integer in [1, {_MAX_LOCAL_WORKERS}], got {value}')


def _engine_help() -> str:
  parts = [f'{n} ({engine_config.ENGINES[n].summary})' for n in SELECTABLE_ENGINES]
  return f'How rounds run: {", ".join(parts[:-1])} or {parts[-1]}.'


@dataclasses.dataclass(frozen=True)
class RunFlags:
  """The trainer's own flags: what to train, for how long, where to write (declared settings)."""

  task: str = settings.setting(
    'fmnist', 'task', 'Task: one of {choices}.', section='Task and data', choices=catalog.TASKS
  )
  algorithm: str = settings.setting(
    algorithm_config.DEFAULT_ALGORITHM,
    'algorithm',
    'Federated algorithm: one of {choices}.',
    section='Algorithm',
    choices=algorithm_config.ALGORITHMS,
  )
  server_lr_schedule: str = settings.setting(
    'constant',
    'server_lr_schedule',
    'Server lr schedule: one of {choices}.',
    section='Server optimizer',
    choices=optimizer_config.SCHEDULES,
  )
  client_lr_schedule: str = settings.setting(
    'constant',
    'client_lr_schedule',
    'Client lr schedule: one of {choices}.',
    section='Client training',
    choices=optimizer_config.SCHEDULES,
  )
  clients_per_round: int = settings.setting(
    None, 'clients_per_round', "Clients per round (default: task's).", section=ROUNDS_SECTION,
    check=settings.positive,
  )  # fmt: skip
  total_rounds: int = settings.setting(
    None, 'total_rounds', "Rounds to train (default: task's).", section=ROUNDS_SECTION,
    check=settings.positive,
  )  # fmt: skip
  rounds_per_eval: int = settings.setting(
    10, 'rounds_per_eval', 'Evaluate every this many rounds.', section=ROUNDS_SECTION,
    check=settings.positive,
  )  # fmt: skip
  rounds_per_checkpoint: int = settings.setting(
    50, 'rounds_per_checkpoint', 'Checkpoint every this many rounds.', section=ROUNDS_SECTION,
    check=settings.positive,
  )  # fmt: skip
  rounds_to_target: tuple[str, ...] = settings.setting(
    (),
    'rounds_to_target',
    'Thresholds of the 10-round running average of --target_metric; metrics.csv gets '
    'rounds_to_<metric>_<threshold>, the first round reaching each (FedPA Table 3).',
    section=ROUNDS_SECTION,
    flag_default=[],
  )
  target_metric: str = settings.setting(
    'eval_accuracy',
    'target_metric',
    'The evaluated metrics.csv column of --rounds_to_target.',
    section=ROUNDS_SECTION,
  )
  client_sampler: str = settings.setting(
    sampling.DEFAULT_METHOD,
    'client_sampler',
    "Client sampling: tff (TFF's sampler, the published client order, O(population) per "
    'round), fast (O(clients_per_round), another order) or epoch (each client at most once per '
    'epoch of floor(N / m) rounds, shuffled every epoch; the default with --dp=tree).',
    section=ROUNDS_SECTION,
    choices=sampling.SAMPLING_METHODS,
  )
  seed: int = settings.setting(
    1,
    'seed',
    'Seed of client sampling, shuffling, partitioning and init (the published runs sampled '
    'clients with seed 1).',
    section=ROUNDS_SECTION,
    check=settings.nonnegative,
  )
  root_output_dir: str = settings.setting(
    'results', 'root_output_dir', 'Root of all experiment directories.', section='Outputs'
  )
  experiment_name: str = settings.setting(
    None,
    'experiment_name',
    'Experiment directory name (default: <task>_<algorithm>_<server_optimizer>_'
    '<client_optimizer>_seed<seed>_<hash of the other hyperparameters>, and _<engine> for '
    'engines other than tff; the same command finds its run again, a changed setting gets its '
    'own directory).',
    section='Outputs',
  )
  engine: str = settings.setting(
    engine_config.DEFAULT_ENGINE,
    'engine',
    _engine_help(),
    section=WORKERS_SECTION,
    choices=SELECTABLE_ENGINES,
  )
  cells: str = settings.setting(
    None,
    'cells',
    'Grid cells side by side (--engine=vectorised): a file of one cell per line, "NAME '
    "--flag=value ...\", the cell's flags over the command's; the cells (differing only in "
    "--client_learning_rate and the server optimizer's flags) train as one computation, each "
    'into <root_output_dir>/NAME as if run alone.',
    section=WORKERS_SECTION,
  )
  workers: str = settings.setting(
    None,
    'workers',
    "tff engine: run each round's clients across these running TFF workers, host:port,... "
    '(started with `tff-adaptive worker`; plain gRPC, trusted networks only).',
    section=WORKERS_SECTION,
  )
  worker_connect_timeout: float = settings.setting(
    10.0,
    'worker_connect_timeout',
    'Seconds each --workers worker has to accept a gRPC connection at start.',
    section=WORKERS_SECTION,
    check=settings.positive,
  )
  worker_round_timeout: float = settings.setting(
    None,
    'worker_round_timeout',
    '--workers / --local_workers: seconds a worker has to answer its share of a round; one that '
    'does not (hung, while its host still answers) is reported like a lost worker (exit 4, the '
    'round and worker named). Default: no limit (gRPC keepalive notices a vanished host in ~6.5 '
    'minutes).',
    section=WORKERS_SECTION,
    check=settings.positive,
  )
  local_workers: int = settings.setting(
    None,
    'local_workers',
    "tff engine: start this many TFF workers on 127.0.0.1 and spread each round's clients over "
    'them (one-machine parallelism; stopped when the trainer ends).',
    section=WORKERS_SECTION,
    check=_local_workers,
  )


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
  """Settings a resumed run may change (recorded, not fingerprinted).

  Evaluation and checkpoint cadence do not touch the trajectory. The device does not change the
  algorithm, but another device (CPU vs GPU) may round differently, so a run resumed on another
  device is not bitwise the uninterrupted one; likewise the fused loop (`fused_loop`: the same
  per-client arithmetic, compiled by XLA, agreeing with the unfused engines to float rounding).
  """

  rounds_per_eval: int = 10
  rounds_per_checkpoint: int = 50
  device: str | None = None
  clients_per_chunk: int | None = None
  fused_loop: str = 'auto'
  workers: tuple[str, ...] = ()
  worker_connect_timeout: float = 10.0
  worker_round_timeout: float | None = None
  local_workers: int | None = None
  target_metric: str = 'eval_accuracy'
  rounds_to_target: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything that determines a run's trajectory, plus its runtime settings.

  `hparams`: the chosen algorithm's own hyperparameters (its entry's dataclass), None if none.
  """

  task: task_config.TaskConfig
  algorithm: str
  engine: str
  server: optimizer_config.ServerOptimizerConfig
  server_lr_schedule: optimizer_config.ScheduleConfig
  client: algorithm_config.ClientTrainingConfig
  clients_per_round: int
  total_rounds: int
  seed: int
  client_sampler: str = sampling.DEFAULT_METHOD
  xla: bool = False
  runtime: RuntimeConfig = RuntimeConfig()
  hparams: Any = None
  dp: privacy_config.DPConfig | None = None
  compression: aggregator_config.CompressionConfig | None = None

  def algorithm_hparams(self) -> dict[str, Any]:
    """{algorithm name: its hyperparameters} when it has any (hparams.json's section of that
    name, `AlgorithmInputs`' keyword)."""
    return {} if self.hparams is None else {self.algorithm: self.hparams}


def hparams_record(config: ExperimentConfig) -> dict[str, Any]:
  """hparams.json: what shaped the run; only the hyperparameters the chosen parts read.

  `runtime` (total_rounds, evaluation and checkpoint cadence, device) is recorded without being
  fingerprinted (`loop.outputs`).
  """
  client = config.client
  return {
    'task': task_record(config.task),
    'algorithm': config.algorithm,
    'engine': config.engine,
    'server': optimizer_config.server_optimizer_record(config.server),
    'server_lr_schedule': optimizer_config.schedule_record(config.server_lr_schedule),
    'client': {
      'optimizer': optimizer_config.client_optimizer_record(client.optimizer),
      'epochs': client.epochs,
      'batch_size': client.batch_size,
      'lr_schedule': optimizer_config.schedule_record(client.lr_schedule),
      'weighting': client.weighting,
      **({'max_epochs': client.max_epochs} if client.max_epochs is not None else {}),
    },
    'clients_per_round': config.clients_per_round,
    'seed': config.seed,
    'client_sampler': config.client_sampler,
    'xla': config.xla,
    **{name: dataclasses.asdict(h) for name, h in config.algorithm_hparams().items()},
    **({'dp': config.dp.record()} if config.dp is not None else {}),
    **({'compression': config.compression.record()} if config.compression is not None else {}),
    # total_rounds may grow on a rerun (extending a run) unless a schedule depends on it,
    # in which case the schedule's record holds it too (and is fingerprinted).
    # The data's location is not a hyperparameter: the same command from another checkout or
    # machine resumes the run.
    'runtime': {
      'total_rounds': config.total_rounds,
      'data_dir': config.task.data_dir,
      **dataclasses.asdict(config.runtime),
    },
  }


def upgrade_hparams(stored: dict[str, Any]) -> dict[str, Any]:
  """A stored hparams.json in the current format, for `outputs.check_or_write_hparams`.

  Before 87e7419 the task section held every TaskConfig field (data_dir as an absolute path,
  dirichlet_alpha for synthetic, ...); only what the task reads shaped the run, so the rest is
  dropped and such a run resumes (given its --experiment_name: default names changed too).
  """
  task = stored.get('task')
  if not isinstance(task, dict) or task.get('name') not in catalog.TASKS:
    return stored
  reads = set(catalog.TASKS[task['name']].reads) - {'data_dir'}
  kept = {k: v for k, v in task.items() if k in ('name', 'seed') or k in reads}
  return dict(stored, task=kept)


def task_record(config: task_config.TaskConfig) -> dict[str, Any]:
  """The task's part of hparams.json: its name, seed and the options it reads (not data_dir);
  an option at its default recorded only where runs from before it stand (`recorded_if_set`)."""
  defaults = task_config.TaskConfig(config.name)
  return {
    'name': config.name,
    'seed': config.seed,
    **{
      field: getattr(config, field)
      for field in catalog.TASKS[config.name].reads
      if field != 'data_dir'
      and not (
        field in task_config.RECORDED_IF_SET and getattr(config, field) == getattr(defaults, field)
      )
    },
  }


# Why a key of hparams.json cannot change between a run and its rerun, where not obvious.
HPARAMS_HINTS = {
  f'{key}.total_rounds': 'step_decay depends on the total number of rounds, so a run with it '
  'cannot be extended'
  for key in ('server_lr_schedule', 'client.lr_schedule')
}


def experiment_name(config: ExperimentConfig, *, legacy: bool = False) -> str:
  """<task>_<algorithm>_<server opt>_<client opt>_seed<seed>[_<privacy>][_<compression>]_<hash>[_<engine>].

  The hash (`outputs.fingerprint`) covers every fingerprinted hyperparameter, so runs that differ
  in any of them (a sweep over learning rates, say) get directories of their own, and a rerun
  of the same command (even with more rounds, or another evaluation cadence) finds its run.
  --dp and --compression are named too (`dp-fixed-z1`, `dp-adaptive-z0.5`, `dp-tree-z4`,
  `dp-skellam-z1`; `quant8bit`), so that two runs that differ in them read apart. The engine is
  named unless it is tff (the default). `legacy`: the name before DP and compression were named
  (the trainer resumes a run found under it).
  """
  engine = '' if config.engine == engine_config.DEFAULT_ENGINE else f'_{config.engine}'
  named = ''
  if not legacy:
    if config.dp is not None:
      named += f'_dp-{config.dp.short_name}-z{config.dp.noise_multiplier:g}'
    if config.compression is not None:
      named += f'_quant{config.compression.bits}bit'
  return (
    f'{config.task.name}_{config.algorithm}_{config.server.name}_'
    f'{config.client.optimizer.name}_seed{config.seed}{named}_'
    f'{outputs.fingerprint(hparams_record(config))}{engine}'
  )
