"""All command-line flags of the trainer, and their translation into typed configs.

The flags are the components' own: every field of a component's hyperparameter dataclass that
the trainer sets declares its flag, help, section and check (`tff_adaptive.settings`), and this
module defines one absl flag per declared field of the dataclasses it finds in the registries
(the task's, the server and client optimizers' and each client optimizer's own options, local
training's, each algorithm's, --dp's, --compression's, the engines') and of its own `RunFlags`.
It names no algorithm, optimizer or engine: what each supports and refuses is read from its
registry entry. Flag names follow google-research/federated's `optimization` trainer where it
has one. Flags left unset take the task's published defaults (`tasks.TaskDefaults`), then the
registries' (`SERVER_OPTIMIZERS[name].default_learning_rate`). Every choice flag is checked
against its registry, with one message: `unknown <kind> 'x'; valid choices: ...`.

This module imports no TensorFlow or TFF (importing them takes ~9 s): the registries and
dataclasses live in TensorFlow-free modules, so --help and every flag mistake are answered at
once. The one check that needs TensorFlow, whether TF sees the --device, is the trainer's.
"""

import dataclasses
import math
from typing import Any

from absl import flags

from tff_adaptive import registry
from tff_adaptive import settings
from tff_adaptive.aggregators import config as aggregator_config
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.engines import config as engine_config
from tff_adaptive.loop import targets
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.privacy import config as privacy_config
from tff_adaptive.run import cell_flags
from tff_adaptive.run import experiment
from tff_adaptive.run.experiment import ExperimentConfig
from tff_adaptive.runtime import addresses
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import config as task_config

FLAGS = flags.FLAGS
_FLOAT32_MAX = 3.4028234663852886e38


# Every dataclass whose fields declare flags: (class, owner kind) with the owner kind deciding
# when its checks run ('algorithm': when it is the chosen algorithm, else always).
def _components() -> list[tuple[type, str]]:
  client_options = [e.options for e in optimizer_config.CLIENT_OPTIMIZERS.values() if e.options]
  algorithms = [e.hparams for e in algorithm_config.ALGORITHMS.values() if e.hparams]
  return [
    (experiment.RunFlags, ''),
    (task_config.TaskConfig, ''),
    (optimizer_config.ServerOptimizerConfig, ''),
    (optimizer_config.ClientOptimizerConfig, ''),
    (algorithm_config.ClientTrainingConfig, ''),
    *[(cls, '') for cls in dict.fromkeys(client_options)],
    *[(cls, 'algorithm') for cls in dict.fromkeys(algorithms)],
    (privacy_config.DPConfig, ''),
    (aggregator_config.CompressionConfig, ''),
    (engine_config.EngineOptions, ''),
  ]


COMPONENTS = _components()
DECLARED = {found.flag: found for cls, _ in COMPONENTS for _, found in settings.declared(cls)}
_DEFINE = {
  'float': flags.DEFINE_float,
  'int': flags.DEFINE_integer,
  'str': flags.DEFINE_string,
  'bool': flags.DEFINE_bool,
  'list': flags.DEFINE_list,
}
for _found in DECLARED.values():
  if _found.kind == 'enum':
    flags.DEFINE_enum(_found.flag, _found.flag_default, list(_found.choices), _found.help)
  else:
    _DEFINE[_found.kind](_found.flag, _found.flag_default, _found.help)

# The flags by concern, in the order of the flag reference (docs/flags.md, written from these
# definitions by `run.flag_reference`; tests/test_docs.py fails when it is stale).
_SECTION_ORDER = (
  'Task and data',
  'Algorithm',
  'Server optimizer',
  'Client training',
  'SPS and Delta-SGD client optimizers (Kim et al. 2024)',
  'FedPA (Al-Shedivat et al. 2021)',
  'AdaFedAdam and its baselines (Ju et al.)',
  experiment.ROUNDS_SECTION,
  'Differential privacy',
  'Compression',
  'Outputs',
  experiment.WORKERS_SECTION,
)
SECTIONS = tuple(
  (title, tuple(f for f, s in DECLARED.items() if s.section == title))
  for title in dict.fromkeys(
    [*_SECTION_ORDER, *(s.section for s in DECLARED.values() if s.section not in _SECTION_ORDER)]
  )
)


def ignored_flags(config: ExperimentConfig) -> list[str]:
  """One line per flag given on the command line that the chosen task or parts do not read."""
  server = optimizer_config.SERVER_OPTIMIZERS[config.server.name]
  client = optimizer_config.CLIENT_OPTIMIZERS[config.client.optimizer.name]
  by_client = f'by client optimizer {config.client.optimizer.name!r}'
  parts = [  # (component, why its flags are ignored, the fields read)
    (
      task_config.TaskConfig,
      f'by task {config.task.name!r}',
      catalog.TASKS[config.task.name].reads,
    ),
    (
      optimizer_config.ServerOptimizerConfig,
      f'by server optimizer {config.server.name!r}',
      ('name', 'learning_rate', *server.hparams),
    ),
    (
      optimizer_config.ClientOptimizerConfig,
      by_client,
      ('name', *client.hparams, *(('learning_rate',) if client.reads_learning_rate else ())),
    ),
    *[  # each options class once (entries may share one: DoG and L-DoG)
      (
        options,
        by_client,
        [f.name for f in dataclasses.fields(options)] if options is client.options else (),
      )
      for options in dict.fromkeys(
        e.options for e in optimizer_config.CLIENT_OPTIMIZERS.values() if e.options is not None
      )
    ],
    (
      aggregator_config.CompressionConfig,
      'without --compression',
      ('name', *(('bits', 'threshold') if config.compression is not None else ())),
    ),
  ]
  lines = [
    f'--{found.flag} is ignored {why}'
    for cls, why, read in parts
    for field, found in settings.declared(cls)
    if FLAGS[found.flag].present and field not in read
  ]
  lines += privacy_config.ignored_flags(config.dp, {f: FLAGS[f].present for f in DECLARED})
  if config.dp is not None and FLAGS.client_weighting != algorithm_config.UNIFORM_WEIGHTING:
    if FLAGS['client_weighting'].present:
      lines.append(
        f'--client_weighting={FLAGS.client_weighting} is ignored under --dp: every client counts '
        'once (a weight that grows with the data would raise the sensitivity)'
      )
  for name, entry in algorithm_config.ALGORITHMS.items():
    if entry.hparams is not None and name != config.algorithm:
      for _, found in settings.declared(entry.hparams):
        if FLAGS[found.flag].present:
          lines.append(f'--{found.flag} is ignored by algorithm {config.algorithm!r}')
  return lines


def _values(cls: type) -> dict[str, Any]:
  """The flag values of `cls`'s declared fields (by flag name)."""
  return {found.flag: FLAGS[found.flag].value for _, found in settings.declared(cls)}


def _check_flags(algorithm: str) -> None:
  """Every flag's own check, in declaration order: choices, finite float32, range (an
  algorithm's own ranges only when it is the chosen one, unless `Setting.always`)."""
  chosen = algorithm_config.ALGORITHMS[algorithm].hparams
  for cls, _ in COMPONENTS:
    for _, found in settings.declared(cls):
      if found.choices is not None:
        settings.check(
          dataclasses.replace(found, check=None), FLAGS[found.flag].value, registry.unknown_message
        )
  for name in FLAGS:
    value = FLAGS[name].value
    if isinstance(FLAGS[name].parser, flags.FloatParser) and value is not None:
      if not math.isfinite(value):
        raise ValueError(f'--{name} must be a finite number, got {value}')
      if abs(value) > _FLOAT32_MAX:  # the computations run in float32
        raise ValueError(f'--{name} must be at most {_FLOAT32_MAX:.4g} in magnitude, got {value}')
  for cls, kind in COMPONENTS:
    for _, found in settings.declared(cls):
      if found.check is not None and (kind != 'algorithm' or cls is chosen or found.always):
        found.check(found.flag, FLAGS[found.flag].value)
    if hasattr(cls, 'check_flags'):
      cls.check_flags(_values(cls))


def _choice(name: str) -> str:
  """The value of a choice flag; Reddi et al.'s names of the FedOpt family (fedavg, fedadam,
  ...) given to --algorithm or --server_optimizer are answered with the flags they are."""
  value = FLAGS[name].value
  fedopt = optimizer_config.FEDOPT_NAMES.get(value)
  if fedopt is not None and value not in DECLARED[name].choices:
    raise ValueError(
      f'--{name}={value}: {value} is --algorithm=fedopt --server_optimizer={fedopt} '
      '(fedopt, the default algorithm, is the FedOpt family of Reddi et al. 2021: FedAvg, '
      'FedAvgM, FedAdagrad, FedAdam and FedYogi by their server optimizer)'
    )
  return settings.check(DECLARED[name], value, registry.unknown_message)


def _engine_options(engine: str) -> engine_config.EngineOptions:
  """--engine's options, each refused with an engine that does not read it."""
  given = settings.from_flags(engine_config.EngineOptions, _values(engine_config.EngineOptions))
  defaults = engine_config.EngineOptions()
  for field, found in settings.declared(engine_config.EngineOptions):
    if (
      getattr(given, field) not in (None, False, getattr(defaults, field))
      and field not in engine_config.ENGINES[engine].reads
    ):
      readers = [
        n for n in experiment.SELECTABLE_ENGINES if field in engine_config.ENGINES[n].reads
      ]
      raise ValueError(f'--{found.flag} needs ' + ' or '.join(f'--engine={n}' for n in readers))
  if given.chunk_size is not None and given.chunk_size < 1:
    raise ValueError(f'--clients_per_chunk must be >= 1, got {given.chunk_size}')
  if given.jit_compile and given.fused_loop == 'on':
    raise ValueError('--fused_loop=on and --xla exclude each other: choose one')
  return given


def _runtime(engine: str, options: engine_config.EngineOptions) -> experiment.RuntimeConfig:
  """The run's runtime settings: evaluation, checkpoints, targets, TFF workers."""
  workers = addresses.parse_worker_addresses(FLAGS.workers) if FLAGS.workers is not None else ()
  if workers and FLAGS.local_workers is not None:
    raise ValueError('--workers and --local_workers exclude each other: choose one')
  if not engine_config.ENGINES[engine].runs_workers and (workers or FLAGS.local_workers):
    runs = [n for n, e in engine_config.ENGINES.items() if e.runs_workers]
    raise ValueError(
      f"--workers and --local_workers need --engine={' or '.join(runs)} (TFF's runtime), got "
      f'--engine={engine}'
    )
  return experiment.RuntimeConfig(
    rounds_per_eval=FLAGS.rounds_per_eval,
    rounds_per_checkpoint=FLAGS.rounds_per_checkpoint,
    device=options.device,
    clients_per_chunk=options.chunk_size,
    fused_loop=options.fused_loop,
    workers=workers,
    worker_connect_timeout=FLAGS.worker_connect_timeout,
    worker_round_timeout=FLAGS.worker_round_timeout,
    local_workers=FLAGS.local_workers,
    target_metric=FLAGS.target_metric,
    rounds_to_target=targets.parse_thresholds('rounds_to_target', FLAGS.rounds_to_target),
  )


def _server(
  algorithm: str, dp, clients_per_round: int, defaults
) -> optimizer_config.ServerOptimizerConfig:
  """The server optimizer of the flags (the algorithm's own where it needs one), checked as its
  builder checks it; the DP noise variance when --dp_noise_aware_server."""
  entry = algorithm_config.ALGORITHMS[algorithm]
  name = FLAGS.server_optimizer
  if entry.server_optimizer is not None:
    name = name if FLAGS['server_optimizer'].present else entry.server_optimizer
    if name != entry.server_optimizer:
      raise ValueError(
        f'--algorithm={algorithm} {entry.server_reason}: valid --server_optimizer: '
        f'{entry.server_optimizer} (got {name!r})'
      )
  registered = optimizer_config.SERVER_OPTIMIZERS[name]
  values = _values(optimizer_config.ServerOptimizerConfig)
  values.update(
    server_optimizer=name,
    server_learning_rate=_or(
      FLAGS.server_learning_rate,
      defaults.server_learning_rate.get(name, registered.default_learning_rate),
    ),
    tau=_or(FLAGS.tau, defaults.tau.get(name, registered.default_tau)),
  )
  noise_variance = privacy_config.noise_variance(
    dp, name, clients_per_round, optimizer_config.NOISE_AWARE_SERVER_OPTIMIZERS
  )
  try:
    server = settings.from_flags(
      optimizer_config.ServerOptimizerConfig, values, noise_variance=noise_variance
    )
    optimizer_config.check_server_optimizer(server)  # the builder's checks, without building
  except ValueError as e:
    raise ValueError(
      settings.flag_message(str(e), optimizer_config.ServerOptimizerConfig)
    ) from None
  return server


def _client(
  server_name: str, dp, total_rounds: int, defaults
) -> algorithm_config.ClientTrainingConfig:
  """Local training: the client optimizer (and its own options) and E, B, the schedule."""
  entry = optimizer_config.CLIENT_OPTIMIZERS[FLAGS.client_optimizer]
  if not entry.reads_learning_rate and FLAGS.client_lr_schedule != 'constant':
    raise ValueError(
      f'--client_lr_schedule={FLAGS.client_lr_schedule}: client optimizer '
      f"'{FLAGS.client_optimizer}' sets its own step sizes; valid: constant "
      f"(got '{FLAGS.client_lr_schedule}')"
    )
  values = _values(optimizer_config.ClientOptimizerConfig)
  values['client_learning_rate'] = _or(
    FLAGS.client_learning_rate,
    defaults.client_learning_rates.get(server_name, defaults.client_learning_rate),
  )
  if (
    FLAGS.client_epochs_max is not None and FLAGS.client_epochs_max < FLAGS.client_epochs_per_round
  ):
    raise ValueError(
      f'--client_epochs_max={FLAGS.client_epochs_max} must be >= --client_epochs_per_round='
      f'{FLAGS.client_epochs_per_round}'
    )
  options = {
    field: settings.from_flags(e.options, _values(e.options))
    for e in optimizer_config.CLIENT_OPTIMIZERS.values()
    if e.options is not None
    for field in e.hparams
  }
  try:
    optimizer = settings.from_flags(optimizer_config.ClientOptimizerConfig, values, **options)
    training = _values(algorithm_config.ClientTrainingConfig)
    training['client_batch_size'] = _or(FLAGS.client_batch_size, defaults.client_batch_size)
    training['client_weighting'] = (
      algorithm_config.UNIFORM_WEIGHTING if dp is not None else FLAGS.client_weighting
    )
    return settings.from_flags(
      algorithm_config.ClientTrainingConfig,
      training,
      optimizer=optimizer,
      lr_schedule=optimizer_config.ScheduleConfig(
        FLAGS.client_lr_schedule, total_rounds=total_rounds
      ),
    )
  except ValueError as e:
    message = settings.flag_message(str(e), optimizer_config.ClientOptimizerConfig, 'client ')
    raise ValueError(
      settings.flag_message(message, algorithm_config.ClientTrainingConfig, 'client ')
    ) from None


def _or(value, default):
  return default if value is None else value


def _algorithm_hparams(
  algorithm: str, run: algorithm_config.RunContext, client_optimizer: str
) -> Any:
  """The chosen algorithm's own hyperparameters, and its checks against the run and the client
  optimizer (its entry's)."""
  entry = algorithm_config.ALGORITHMS[algorithm]
  if entry.check is not None:
    entry.check(run)
  refusal = entry.client_refusal(client_optimizer)
  if refusal is not None:
    raise ValueError(
      f'--client_optimizer={client_optimizer} cannot run under --algorithm={algorithm}: {refusal}'
    )
  values = _values(entry.hparams) if entry.hparams is not None else {}
  return algorithm_config.hparams_from_flags(algorithm, values, run)


def experiment_config_from_flags() -> ExperimentConfig:
  """Validates the flags and builds the run's config (no data, TensorFlow or TFF work).

  Every check but --device's (whether TensorFlow sees that device: the trainer's, once it has
  imported TensorFlow).

  Raises:
    ValueError: one line naming the bad flag, its value and the valid choices/range.
  """
  algorithm, engine = _choice('algorithm'), _choice('engine')
  _choice('server_optimizer')
  _check_flags(algorithm)
  options = _engine_options(engine)
  refusal = engine_config.refusal(engine, algorithm, FLAGS.client_optimizer)
  if refusal is not None:
    raise ValueError(f'--engine={engine}: {refusal}')
  runtime = _runtime(engine, options)
  defaults = catalog.TASKS[FLAGS.task].defaults
  total_rounds = _or(FLAGS.total_rounds, defaults.total_rounds)
  clients_per_round = _or(FLAGS.clients_per_round, defaults.clients_per_round)
  secure = tuple(n for n, e in engine_config.ENGINES.items() if e.secure_aggregation)
  dp = privacy_config.dp_from_flags(
    _values(privacy_config.DPConfig),
    clients_per_round,
    algorithm_config.dp_refusal(algorithm),
    (engine, secure, bool(runtime.workers or runtime.local_workers is not None)),
  )
  compression = aggregator_config.compression_from_flags(
    _values(aggregator_config.CompressionConfig),
    dp,
    algorithm_config.compression_refusal(algorithm),
  )
  server = _server(algorithm, dp, clients_per_round, defaults)
  client = _client(server.name, dp, total_rounds, defaults)
  run = algorithm_config.RunContext(total_rounds, client.epochs, client.max_epochs)
  return ExperimentConfig(
    task=task_config.TaskConfig(
      name=FLAGS.task,
      seed=FLAGS.seed,
      # Only the options the task reads: the others keep TaskConfig's defaults (and are warned
      # about by `ignored_flags` when given).
      **{field: FLAGS[field].value for field in catalog.TASKS[FLAGS.task].reads},
    ),
    algorithm=algorithm,
    engine=engine,
    server=server,
    server_lr_schedule=optimizer_config.ScheduleConfig(
      FLAGS.server_lr_schedule, total_rounds=total_rounds
    ),
    client=client,
    clients_per_round=clients_per_round,
    total_rounds=total_rounds,
    seed=FLAGS.seed,
    client_sampler=privacy_config.client_sampler(
      dp, FLAGS.client_sampler, FLAGS['client_sampler'].present
    ),
    xla=options.jit_compile,
    runtime=runtime,
    hparams=_algorithm_hparams(algorithm, run, client.optimizer.name),
    dp=dp,
    compression=compression,
  )


def experiment_name(config: ExperimentConfig, *, legacy: bool = False) -> str:
  """--experiment_name, or the default name of `config` (`experiment.experiment_name`)."""
  if FLAGS.experiment_name:
    return FLAGS.experiment_name
  return experiment.experiment_name(config, legacy=legacy)


CELL_FLAGS = cell_flags.CELL_FLAGS  # what grid cells (--cells) may set apart
Cell, read_cells = cell_flags.Cell, cell_flags.read_cells


def cell_configs(
  argv: list[str], cells: list[cell_flags.Cell]
) -> tuple[list[ExperimentConfig], list[str]]:
  """Each cell's `ExperimentConfig`: `argv` (the command's flags) with the cell's over them,
  checked as the trainer checks one run's (`experiment_config_from_flags`), and the
  `ignored_flags` lines of every cell (prefixed with its name); FLAGS are left as the last
  cell's.

  Raises:
    ValueError: one line naming the cell and its bad flag.
  """
  command = argv[: argv.index('--')] if '--' in argv else list(argv)
  configs, ignored = [], []
  for cell in cells:
    FLAGS.unparse_flags()
    try:
      rest = FLAGS([*command, *cell.args, f'--experiment_name={cell.name}'])
      if len(rest) > 1:
        raise ValueError(f'unexpected arguments {rest[1:]}')
      configs.append(experiment_config_from_flags())
    except (flags.Error, ValueError) as e:
      raise ValueError(f'--cells: cell {cell.name!r}: {e}') from None
    ignored += [f'cell {cell.name}: {line}' for line in ignored_flags(configs[-1])]
  return configs, ignored
