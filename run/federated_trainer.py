"""The one federated trainer: parse flags, build the task and algorithm, run the loop on an engine.

  tff-adaptive train --task=fmnist --server_optimizer=adam
  tff-adaptive train --task=fmnist --local_workers=2          # 2 owned TFF workers
  tff-adaptive train --task=fmnist --workers=10.0.0.5:8000,10.0.0.6:8000

In a checkout set up by tools/setup.sh (nothing activated): `.venv/bin/tff-adaptive train ...`, or
the same program as `.venv/bin/python -m run.federated_trainer ...`, or
`bazel run //run:federated_trainer -- --task=synthetic --server_optimizer=yogi`.

The flags (and the task's data files) are checked before TensorFlow and TFF are imported, which
takes ~9 s: --help and a mistake in a flag are answered at once. --device, the one check that
needs TensorFlow (the devices it sees), comes right after the imports, before anything is
written.

Exit codes: 0 done (or already done); 2 bad input (flag, data, experiment directory held by
another run, a different run in it, unreadable checkpoints or metrics, a worker of --workers
not reachable); 3 training diverged; 4 a remote worker stopped answering mid-run; 5 no space
left on the device of the experiment directory (the file is named; nothing half-written is
kept); 130 interrupted, 143 terminated (rerun the same command to resume: after 4 with the
worker back, after 5 with space freed).
"""

import contextlib
import dataclasses
import importlib
import os
import pkgutil
import signal
import sys

import tff_adaptive  # noqa: F401  (first: quiets TensorFlow's C++ logging before TF loads)

# isort: split
from absl import app
from absl import flags
from absl import logging

from tff_adaptive import datasets
from tff_adaptive import runtime
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.engines import config as engine_config
from tff_adaptive.loop import client_states
from tff_adaptive.loop import outputs
from tff_adaptive.loop import run_dir
from tff_adaptive.loop import sampling

# Up to `_train`, nothing imported here imports TensorFlow or TFF (`runtime` and the packages
# load their TensorFlow modules on first use).
from tff_adaptive.run import experiment
from tff_adaptive.run import flag_reference
from tff_adaptive.run import flags as trainer_flags
from tff_adaptive.run import provenance
from tff_adaptive.tasks import catalog

FLAGS = flags.FLAGS

# The library's packages whose modules a run imports once its flags are checked; with TensorFlow
# and TFF, what `import_training_modules` loads.
TRAINING_PACKAGES = (
  'tff_adaptive.aggregators',
  'tff_adaptive.algorithms',
  'tff_adaptive.engines',
  'tff_adaptive.loop',
  'tff_adaptive.optimizers',
  'tff_adaptive.privacy',
  'tff_adaptive.runtime',
  'tff_adaptive.tasks',
)


def import_training_modules() -> None:
  """Imports TensorFlow, TFF and every module of TRAINING_PACKAGES (~9 s, once per process).

  For a process that starts trainers from itself: `run.preload`'s server imports this module
  (which calls this function, see the end of the file) and forks one trainer per run, each of
  which then finds these modules loaded.
  """
  importlib.import_module('tensorflow')
  importlib.import_module('tensorflow_federated')
  for package in TRAINING_PACKAGES:
    path = importlib.import_module(package).__path__
    for module in pkgutil.iter_modules(path, prefix=f'{package}.'):
      importlib.import_module(module.name)


class Terminated(KeyboardInterrupt):
  """SIGTERM (e.g. from a batch scheduler), handled like Ctrl-C."""


def _on_sigterm(signum, frame):
  del signum, frame
  raise Terminated()


def _fail(message: str, code: int) -> None:
  print(f'federated_trainer: error: {message}', file=sys.stderr, flush=True)
  sys.exit(code)


def _fail_disk_full(path: str, output_dir: str) -> None:
  _fail(
    f'no space left on device writing {path}; checkpoints and metrics written before it are '
    f'intact in {output_dir}: free space, then rerun the same command to resume',
    5,
  )


def _summary(row) -> str:
  return ', '.join(
    f'{k}={v:.4f}'
    for k, v in row.items()
    if k.startswith('eval_')
    and not k.startswith('eval_client_')
    or k in ('train_loss', 'dp_epsilon')
  )


def _aggregation(config, num_clients: int):
  """--dp's `aggregators.dp_mean` or --compression's `quantized_mean`; None: the algorithm's."""
  if config.compression is not None:
    from tff_adaptive import aggregators  # pylint: disable=g-import-not-at-top

    return aggregators.quantized_mean(config.compression.bits, config.compression.threshold)
  return _dp_aggregation(config, num_clients)


def _dp_aggregation(config, num_clients: int):
  """`aggregators.dp_mean` of --dp (None without it), its noise seeded by --seed."""
  if config.dp is None:
    return None
  from tff_adaptive import aggregators  # pylint: disable=g-import-not-at-top

  dp = config.dp
  if dp.distributed:
    return aggregators.ddp_mean(
      dp.noise_multiplier, config.clients_per_round, dp.clip, dp.bits, noise_seed=config.seed
    )
  kwargs = {'noise_seed': config.seed}
  if dp.tree:  # restarted every epoch of the 'epoch' sampler (trainer_flags checked it)
    kwargs['restart_rounds'] = sampling.rounds_per_epoch(num_clients, config.clients_per_round)
  if dp.adaptive:
    kwargs.update(
      target_quantile=dp.target_quantile,
      clip_learning_rate=dp.clip_learning_rate,
      clipped_count_stddev=dp.clipped_count_stddev,
    )
  aggregation = aggregators.dp_mean(
    dp.mechanism, dp.noise_multiplier, config.clients_per_round, dp.clip, **kwargs
  )
  noise = aggregation.privacy  # the split z -> (z_v, sigma_b) the queries add
  if dp.adaptive and noise.private and noise.value_noise_multiplier >= 2 * noise.noise_multiplier:
    value_z = noise.value_noise_multiplier
    print(
      f'federated_trainer: warning: --dp=gaussian_adaptive: the clip count takes most of the '
      f'budget; the updates get noise multiplier {value_z:.3g}, {value_z / dp.noise_multiplier:.1f}x '
      f'--dp_noise_multiplier={dp.noise_multiplier:g}: sample more --clients_per_round or use '
      '--dp=gaussian_fixed',
      file=sys.stderr,
      flush=True,
    )
  return aggregation


def _epsilon_by_round(config, task, aggregation):
  """(round T -> epsilon of T rounds, a one-line description) of a --dp run; (None, '') without.

  Every noise parameter is the aggregation's own (`aggregation.privacy`, what its queries add;
  `privacy.accounting.for_noise`). The sampling accounted is the trainer's: exactly m of the N
  clients, uniformly without replacement, every round (all N when m = N); with --dp=tree,
  epochs of floor(N / m) rounds in which each client takes part at most once; with
  --dp=distributed_skellam, no amplification by sampling (the Skellam bound needs the update's
  dimension: the task model's trainable parameters). z = 0 is not private: epsilon is infinite.
  """
  if config.dp is None:
    return None, ''
  from tff_adaptive.privacy import accounting  # pylint: disable=g-import-not-at-top

  noise = aggregation.privacy
  num_clients = len(task.client_ids)
  dp, m = config.dp, noise.clients_per_round
  delta = dp.delta_for(num_clients)
  described = (
    f'DP: {noise.mechanism}, {noise.describe()}, clip {noise.clip:g}, '
    f'{m} of {num_clients} clients per round'
  )
  if not noise.private:
    return (lambda rounds: float('inf')), f'{described}; z = 0: clipping only, not private'
  rounds = f'{config.total_rounds} round{"s" * (config.total_rounds != 1)}'
  if noise.mechanism == 'tree':
    tree = accounting.for_noise(noise, num_clients, delta)
    return tree.epsilon, (
      f'{described}, each at most once per epoch of {noise.restart_rounds} rounds (the tree '
      f'restarted every epoch); epsilon after {rounds}: {tree.epsilon(config.total_rounds):.4g} '
      f"at delta {delta:.3g} (RDP of the tree restarts, neighbours: one client's update "
      'replaced by zero)'
    )
  if noise.mechanism == 'distributed_skellam':
    dim = sum(w.shape.num_elements() for w in task.keras_model_fn(config.seed).trainable_weights)
    by_round = accounting.for_noise(noise, num_clients, delta, dim=dim)
    parameters = noise.skellam_parameters(dim)
    return by_round.epsilon, (
      f'{described}, {noise.bits}-bit secure aggregation (scale {parameters.scale:.4g}, '
      f'sensitivity {parameters.l2_sensitivity / (parameters.scale * noise.clip):.4f} C after '
      f'rounding); epsilon after {rounds}: {by_round.epsilon(config.total_rounds):.4g} at delta '
      f'{delta:.3g} (RDP of the Skellam mechanism, no amplification by sampling, neighbours: '
      "one client's update replaced by zero)"
    )
  by_round = accounting.for_noise(noise, num_clients, delta)
  return by_round.epsilon, (
    f'{described}; epsilon after {rounds}: {by_round.epsilon(config.total_rounds):.4g} at '
    f'delta {delta:.3g} (RDP, sampling {by_round.one_round.sampling})'
  )


def _build_algorithm(config, task):
  from tff_adaptive.optimizers import server as server_optimizers  # pylint: disable=g-import-not-at-top

  return algorithm_config.build_algorithm(
    config.algorithm,
    algorithm_config.AlgorithmInputs(
      model_fn=lambda: task.model_fn(config.seed),
      client=config.client,
      server_optimizer=server_optimizers.build_server_optimizer(config.server),
      server_learning_rate=config.server.learning_rate,
      server_lr_schedule=config.server_lr_schedule,
      num_clients=len(task.client_ids),
      aggregation=_aggregation(config, len(task.client_ids)),
      **config.algorithm_hparams(),
    ),
  )


def _execution(config):
  """The TFF context of the run: remote workers, owned local workers, one local worker, none."""
  if not engine_config.ENGINES[config.engine].runs_workers:  # not on TFF's runtime
    return contextlib.nullcontext()
  if config.runtime.workers:
    return runtime.remote_execution(
      config.runtime.workers,
      connect_timeout_s=config.runtime.worker_connect_timeout,
      round_timeout_s=config.runtime.worker_round_timeout,
    )
  if config.runtime.local_workers is not None:
    return runtime.local_workers_execution(
      config.runtime.local_workers, round_timeout_s=config.runtime.worker_round_timeout
    )
  return runtime.local_execution()


def main(argv):
  logging.set_verbosity(logging.WARNING)
  signal.signal(signal.SIGTERM, _on_sigterm)
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}; flags look like --name=value', 2)
  # Under `bazel run` the working directory is the runfiles tree: resolve relative paths
  # against the directory the command was typed in.
  base_dir = os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd())
  try:
    config = trainer_flags.experiment_config_from_flags()
    cells = None
    if FLAGS.cells is None:
      ignored = trainer_flags.ignored_flags(config)
    else:
      cells = trainer_flags.read_cells(os.path.join(base_dir, FLAGS.cells))
      if FLAGS.experiment_name is not None:
        raise ValueError('--experiment_name: with --cells each cell is named by its line')
      if engine_config.ENGINES[config.engine].cells is None:
        with_cells = ' or '.join(n for n, e in engine_config.ENGINES.items() if e.cells)
        raise ValueError(
          f'--cells trains the cells side by side on engine {with_cells}; got '
          f'--engine={config.engine}'
        )
      if FLAGS.clients_per_chunk is not None:
        raise ValueError('--clients_per_chunk: grid cells (--cells) train all clients at once')
      configs, ignored = trainer_flags.cell_configs(_PARSED_ARGV, cells)
  except ValueError as e:
    _fail(str(e), 2)
  for line in ignored:
    print(f'federated_trainer: warning: {line} (not recorded)', file=sys.stderr, flush=True)

  root = os.path.join(base_dir, FLAGS.root_output_dir)
  try:
    if cells is None:
      configs = [config]
      output_dirs = [_experiment_dir(root, config)]
    else:
      output_dirs = [run_dir.experiment_dir(root, cell.name) for cell in cells]
  except run_dir.RunDirError as e:
    _fail(str(e), 2)
  if config.task.data_dir is not None:
    data_dir = os.path.join(base_dir, config.task.data_dir)
    configs = [
      dataclasses.replace(c, task=dataclasses.replace(c.task, data_dir=data_dir)) for c in configs
    ]
  try:
    catalog.check_data(configs[0].task)  # every missing file in one message
  except datasets.DataNotFoundError as e:
    _fail(str(e), 2)
  if cells is None:
    _train(configs[0], output_dirs[0])
  else:
    _train_cells(configs, output_dirs)


def _experiment_dir(root: str, config) -> str:
  """root/<experiment name>; a run that a rerun of the same command started under the name of
  an earlier version (before --dp and --compression were named) is resumed where it is."""
  path = run_dir.experiment_dir(root, trainer_flags.experiment_name(config))
  legacy = run_dir.experiment_dir(root, trainer_flags.experiment_name(config, legacy=True))
  if legacy != path and not os.path.exists(path) and os.path.isdir(legacy):
    return legacy
  return path


@contextlib.contextmanager
def _setup_errors(output_dir: str):
  """Building the run and preparing its directory: a user mistake exits 2, a full disk 5."""
  try:
    yield
  except (
    datasets.DataNotFoundError,
    datasets.DataFormatError,
    ValueError,
    runtime.WorkerUnreachableError,
  ) as e:
    _fail(str(e), 2)
  except outputs.DiskFullError as e:  # hparams.json
    _fail_disk_full(e.path, output_dir)
  except OSError as e:  # the directory or its lock
    if not outputs.is_disk_full(e):
      raise
    _fail_disk_full(e.filename or output_dir, output_dir)


@contextlib.contextmanager
def _training_errors(output_dir: str):
  """Training: each way a run stops early, in one line with its exit code (module docstring)."""
  from tff_adaptive.loop import training_loop  # pylint: disable=g-import-not-at-top

  try:
    yield
  except training_loop.DivergenceError as e:
    _fail(str(e), 3)
  except outputs.DiskFullError as e:
    _fail_disk_full(e.path, output_dir)
  except (datasets.DataNotFoundError, datasets.DataFormatError) as e:
    # Clients load lazily: a damaged client surfaces in the round that samples it.
    _fail(f'{e}; checkpoints and metrics written so far are intact in {output_dir}', 2)
  except client_states.ClientStateError as e:
    _fail(
      f'{e}; the stored client states of {output_dir} are damaged: delete that directory (or '
      'its client_states/ and checkpoints/) to start over',
      2,
    )
  except training_loop.ResumeError as e:
    _fail(str(e), 2)
  except runtime.WorkerUnreachableError as e:  # gone between the check and the start
    _fail(f'{e}; nothing was trained', 2)
  except runtime.WorkerStartError as e:
    _fail(f'--local_workers: {e}; nothing was trained', 2)
  except training_loop.WorkerLostError as e:
    _fail(str(e), 4)
  except runtime.WorkerLostError as e:  # outside a round's computation
    _fail(
      f'{e}; checkpoints and metrics written so far are intact in {output_dir}; rerun the same '
      'command once it is back (or with other workers) to resume',
      4,
    )
  except Terminated:
    _fail(
      f'terminated (SIGTERM); rerun the same command to resume from the last checkpoint in '
      f'{output_dir}',
      143,
    )
  except KeyboardInterrupt:
    _fail(
      f'interrupted; rerun the same command to resume from the last checkpoint in {output_dir}',
      130,
    )


def _prepare_dir(config, output_dir: str, noise=None):
  """The directory, its lock (returned: held until this process ends), then the hparams check
  and first write under the lock: two trainers on one experiment cannot both run.

  With --dp, hparams.json's `dp_noise` is the noise the aggregation adds as the accountant reads
  it (`core.dp_noise.DeliveredNoise.record`), derived from the checked `dp` section.
  """
  run_dir.prepare(output_dir)
  lock = run_dir.RunLock(output_dir)
  record = experiment.hparams_record(config)
  record['runtime']['code_version'] = provenance.code_version()  # of this start
  if noise is not None:
    record[outputs.DP_NOISE_SECTION] = noise.record()
  outputs.check_or_write_hparams(
    output_dir,
    record,
    experiment.HPARAMS_HINTS,
    upgrade=experiment.upgrade_hparams,
  )
  return lock


def _loop_config(config, output_dir: str, epsilon):
  from tff_adaptive.loop import training_loop  # pylint: disable=g-import-not-at-top

  return training_loop.LoopConfig(
    total_rounds=config.total_rounds,
    rounds_per_eval=config.runtime.rounds_per_eval,
    rounds_per_checkpoint=config.runtime.rounds_per_checkpoint,
    seed=config.seed,
    output_dir=output_dir,
    target_metric=config.runtime.target_metric,
    targets=config.runtime.rounds_to_target,
    epsilon=epsilon,
  )


def _loop_data(task, initial_weights, sampler) -> tuple:
  """The loop's arguments after the engine: x_0, the clients, the sampler, the evaluator and
  what it evaluates (Reddi et al.'s validation sample where the task has one)."""
  from tff_adaptive.loop import evaluation  # pylint: disable=g-import-not-at-top

  return (
    initial_weights,
    task.train_clients,
    sampler,
    evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn),
    task.validation_sample or (lambda round_num: task.central_test),
    task.client_test,
  )


def _check_device(config) -> None:
  from tff_adaptive.engines import inprocess  # pylint: disable=g-import-not-at-top

  try:
    inprocess.check_device(config.runtime.device)
  except ValueError as e:
    _fail(f'--device: {e}', 2)


def _train(config, output_dir: str) -> None:
  """Builds the run of a checked `config` and trains it into `output_dir`; exits on errors.

  The first to import TensorFlow and TFF (see the module docstring).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff

  from tff_adaptive.loop import training_loop
  # pylint: enable=g-import-not-at-top

  _check_device(config)
  with _setup_errors(output_dir):
    task = catalog.build_task(config.task)
    sampler = sampling.build_client_sampler(
      task.client_ids, config.clients_per_round, config.seed, config.client_sampler
    )
    algorithm = _build_algorithm(config, task)  # e.g. a model too big for FedPA's exact solver
    engine_config.check_engine(config.engine, algorithm)  # e.g. a model without a batched form
    epsilon, dp_line = _epsilon_by_round(config, task, algorithm.aggregation)
    if config.runtime.workers:  # before anything is written
      runtime.check_reachable(config.runtime.workers, config.runtime.worker_connect_timeout)
    lock = _prepare_dir(config, output_dir, algorithm.aggregation.privacy)  # noqa: F841

  tf.keras.utils.set_random_seed(config.seed)
  initial_weights = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(config.seed))
  header = [
    task.description,
    f'{config.algorithm} ({config.server.name} server) on engine {config.engine}',
  ]
  header += [dp_line] if dp_line else []
  print('\n'.join([*header, f'output: {output_dir}']), flush=True)
  with _training_errors(output_dir), _execution(config):
    engine = engine_config.build_engine(
      config.engine,
      algorithm,
      engine_config.EngineOptions(
        clients_per_round=config.clients_per_round,
        device=config.runtime.device,
        jit_compile=config.xla,
        chunk_size=config.runtime.clients_per_chunk,
        fused_loop=config.runtime.fused_loop,
      ),
    )
    if getattr(engine, 'fused', None) is not None:
      print(
        "local training: the round's local steps as one XLA computation "
        f'(--fused_loop={config.runtime.fused_loop}; --fused_loop=off for the unfused engine)',
        flush=True,
      )
    final = training_loop.run_training(
      engine,
      *_loop_data(task, initial_weights, sampler),
      _loop_config(config, output_dir, epsilon),
      final_test=task.final_test,
      warn=sys.stderr,
    )
  if final.finished_before:
    print(
      f'{output_dir} had already finished {final.rounds} rounds; its last metrics: '
      f'{_summary(final.row)}\nresults: {output_dir}/metrics.csv',
      flush=True,
    )
  else:
    print(f'done: {_summary(final.row)}\nresults: {output_dir}/metrics.csv', flush=True)


def _train_cells(configs, output_dirs: list[str]) -> None:
  """--cells: the checked cells' configs trained side by side (`engines.grid_cells`), each into
  its directory; exits 0 when every cell finished, 3 when some diverged (the others finished),
  else as a single run does."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff

  from tff_adaptive.loop import training_loop
  # pylint: enable=g-import-not-at-top

  first = configs[0]
  root = os.path.dirname(output_dirs[0])
  _check_device(first)
  with _setup_errors(root):
    if first.dp is not None or first.compression is not None:
      raise ValueError('--cells: --dp and --compression do not run as grid cells yet')
    task = catalog.build_task(first.task)
    sampler = sampling.build_client_sampler(
      task.client_ids, first.clients_per_round, first.seed, first.client_sampler
    )
    algorithms = [_build_algorithm(c, task) for c in configs]
    engine_config.check_engine(first.engine, algorithms[0])  # the model's batched form
    engine_config.check_engine(engine_config.ENGINES[first.engine].cells, algorithms)
    locks = [_prepare_dir(c, d) for c, d in zip(configs, output_dirs)]  # noqa: F841

  tf.keras.utils.set_random_seed(first.seed)
  initial_weights = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(first.seed))
  names = [os.path.basename(d) for d in output_dirs]
  print(
    f'{task.description}\n{len(configs)} cells of {first.algorithm} side by side on engine '
    f'vectorised: {", ".join(names)}\noutput: {root}',
    flush=True,
  )
  with _training_errors(root):
    engine = engine_config.build_engine(
      engine_config.ENGINES[first.engine].cells,
      algorithms,
      engine_config.EngineOptions(device=first.runtime.device),
    )
    results = training_loop.run_cells(
      engine,
      *_loop_data(task, initial_weights, sampler),
      [_loop_config(c, d, None) for c, d in zip(configs, output_dirs)],
      final_test=task.final_test,
      warn=sys.stderr,
      names=names,
    )
  diverged = 0
  for name, result in zip(names, results):
    if isinstance(result, training_loop.DivergenceError):
      diverged += 1
      print(f'{name}: diverged in round {result.round_num}: {result}', flush=True)
    else:
      print(f'{name}: done: {_summary(result.row)}', flush=True)
  print(f'results: {root}/<cell>/metrics.csv', flush=True)
  if diverged:
    _fail(f'{diverged} of {len(names)} cells diverged (the others finished)', 3)


def _flagfiles_from(base_dir: str, argv: list[str]) -> list[str]:
  """argv with each relative `--flagfile=PATH` (or `--flagfile PATH`) joined onto base_dir.

  Under `bazel run` the working directory is the runfiles tree, and absl opens flag files before
  main() can resolve paths: without this, `--flagfile=reproductions/.../x.flags` typed at the
  repository root is not found.
  """
  out = list(argv[:1])
  rest = iter(argv[1:])
  for arg in rest:
    for prefix in ('--flagfile=', '-flagfile='):
      if arg.startswith(prefix):
        arg = prefix + os.path.join(base_dir, os.path.expanduser(arg[len(prefix) :]))
    if arg in ('--flagfile', '-flagfile'):
      out.append(arg)
      arg = os.path.join(base_dir, os.path.expanduser(next(rest, '')))
    out.append(arg)
  return out


_HELP = ('--help', '-help', '-h', '--helpshort', '-helpshort', '-?')
_PARSED_ARGV: list[str] = []  # what absl parsed: --cells parses it again under each cell's flags


def _parse_flags(argv):
  """absl's parsing, with a bad flag or value reported in one line and exit code 2.

  --help (-h, --helpshort) prints this module's usage and the trainer's flags by concern and
  exits 0; --helpfull is absl's: every flag defined so far, absl's and the trainer's (TensorFlow,
  whose modules define a few more, is imported only after the flags are checked).
  """
  args = argv[1 : argv.index('--')] if '--' in argv else argv[1:]
  if any(arg in _HELP for arg in args):
    sys.stdout.write(flag_reference.help_text(__doc__))
    sys.exit(0)
  if 'BUILD_WORKING_DIRECTORY' in os.environ:
    argv = _flagfiles_from(os.environ['BUILD_WORKING_DIRECTORY'], argv)
  _PARSED_ARGV[:] = argv
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _fail(f'{e}; see --help', 2)


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
else:
  # Imported rather than run: by `run.preload`'s server, which forks one trainer per run from
  # this process (each finds TensorFlow, TFF and the library loaded: ~9 s saved per run), or by
  # a program that calls `main` itself. `python -m run.federated_trainer` imports them in
  # `_train`, after the flags are checked.
  import_training_modules()
