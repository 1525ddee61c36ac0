"""The one federated trainer: parse flags, build the task and process, run the shared loop.

  python -m run.federated_trainer --task=fmnist --server_optimizer=adam
  bazel run //run:federated_trainer -- --task=synthetic --server_optimizer=yogi

Exit codes: 0 done; 2 bad input (flag, data, or a different run in the experiment
directory); 3 training diverged; 130 interrupted (rerun the same command to resume).
"""

import dataclasses
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff

import datasets
from run import flags as trainer_flags
import tasks
from tff_adaptive import evaluation
from tff_adaptive import fedopt
from tff_adaptive import optimizers

# runtime's atexit hook also stops TFF's import-time context cleanly when a bad flag exits
# early (otherwise TFF prints "Exception ignored ... 'Popen'").
from tff_adaptive import runtime
from tff_adaptive import sampling
from tff_adaptive import schedules
from tff_adaptive import training_loop

FLAGS = flags.FLAGS


def _fail(message: str, code: int) -> None:
  print(f'federated_trainer: error: {message}', file=sys.stderr, flush=True)
  sys.exit(code)


def main(argv):
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}; flags look like --name=value', 2)
  try:
    config = trainer_flags.experiment_config_from_flags()
  except ValueError as e:
    _fail(str(e), 2)

  # Under `bazel run` the working directory is the runfiles tree: resolve relative paths
  # against the directory the command was typed in.
  base_dir = os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd())
  output_dir = os.path.join(base_dir, FLAGS.root_output_dir, trainer_flags.experiment_name(config))
  if config.task.data_dir is not None:
    config = dataclasses.replace(
      config,
      task=dataclasses.replace(config.task, data_dir=os.path.join(base_dir, config.task.data_dir)),
    )
  try:
    task = tasks.build_task(config.task)
    sampler = sampling.build_client_sampler(
      task.client_ids, config.clients_per_round, config.seed, config.client_sampler
    )
    training_loop.check_or_write_hparams(output_dir, dataclasses.asdict(config))
  except (datasets.DataNotFoundError, datasets.DataFormatError, ValueError) as e:
    _fail(str(e), 2)

  tf.keras.utils.set_random_seed(config.seed)
  initial_weights = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(config.seed))
  server_lr = config.server.learning_rate
  server_schedule = (
    None
    if config.server_lr_schedule.name == 'constant'
    else schedules.build_schedule(server_lr, config.server_lr_schedule)
  )
  print(f'{task.description}\noutput: {output_dir}', flush=True)
  try:
    with runtime.local_execution():
      process = fedopt.build_fedopt(
        lambda: task.model_fn(config.seed),
        config.client,
        optimizers.build_server_optimizer(config.server),
        server_schedule,
      )
      final = training_loop.run_training(
        process,
        initial_weights,
        task.train_clients,
        sampler,
        evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn),
        task.validation_sample or (lambda round_num: task.central_test),
        task.client_test,
        training_loop.LoopConfig(
          total_rounds=config.total_rounds,
          clients_per_round=config.clients_per_round,
          rounds_per_eval=FLAGS.rounds_per_eval,
          rounds_per_checkpoint=FLAGS.rounds_per_checkpoint,
          seed=config.seed,
          output_dir=output_dir,
        ),
        final_test=task.final_test,
      )
  except training_loop.DivergenceError as e:
    _fail(str(e), 3)
  except (datasets.DataNotFoundError, datasets.DataFormatError) as e:
    # Clients load lazily: a damaged client surfaces in the round that samples it.
    _fail(f'{e}; checkpoints and metrics written so far are intact in {output_dir}', 2)
  except KeyboardInterrupt:
    _fail(
      f'interrupted; rerun the same command to resume from the last checkpoint in {output_dir}', 130
    )
  summary = ', '.join(
    f'{k}={v:.4f}'
    for k, v in final.items()
    if k.startswith('eval_') and not k.startswith('eval_client_') or k == 'train_loss'
  )
  print(f'done: {summary}\nresults: {output_dir}/metrics.csv', flush=True)


if __name__ == '__main__':
  app.run(main)
