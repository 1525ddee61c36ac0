"""Plots one client's Delta-SGD step sizes over its local steps (Kim et al. 2024, Fig. 7 style).

  python -m reproductions.kim2024_delta_sgd.plot_step_sizes --dirichlet_alpha=0.1 --client=0 \\
      --epochs=40   # into runs/kim2024_table1/delta_sgd_step_sizes.png (--out)
  python -m reproductions.kim2024_delta_sgd.plot_step_sizes --publish --dirichlet_alpha=0.1 \\
      --client=0 --epochs=40   # the committed results/step_sizes/delta_sgd_step_sizes.png, .csv

--publish writes the committed figure, and only with its settings (`reproductions.publish`).

One client of the fmnist task (the Table 1 setup: batch 64) trains from the seeded initial model
for --epochs local epochs with Delta-SGD (Algorithm 1, the paper's defaults unless flags say
otherwise), and every local step k records its two candidates, the curvature term
gamma ||x_k - x_{k-1}|| / (2 ||g(x_k) - g(x_{k-1})||) and the growth term
sqrt(1 + delta theta_{k-1}) eta_{k-1}, and eta_k, their minimum. The figure shows the three on a
log scale (the paper plots the first 300 steps), one panel per gradient option: 'paper'
(consecutive steps' gradients, so on different minibatches) and 'same_batch' (the authors'
code). A CSV beside it holds the numbers, and the script prints how often each candidate was
the smaller one.

What it shows: with 'paper', ||g(x_k) - g(x_{k-1})|| includes the minibatch-sampling noise, which
does not shrink with the step, so the curvature candidate (and eta) decays geometrically over
many local steps (to float32's resolution, where x stops moving and eta becomes 0); with
'same_batch' the difference is the curvature alone and eta settles. Within one round of the
Table 1 setup (7 steps) the decay is mild (the mean step size is in metrics.csv).
"""

import csv
import os
import sys

from absl import flags

from reproductions import cell_runner
from reproductions import publish
import tff_adaptive  # noqa: F401  (first: quiets TensorFlow's C++ logging before TF loads)

# TensorFlow, TFF and matplotlib are imported by the functions that use them, after the flags
# and --publish are checked: a refused command answers in a fraction of a second.

flags.DEFINE_float('dirichlet_alpha', 0.1, 'Dirichlet label skew of the fmnist partition.')
flags.DEFINE_integer('client', 0, 'Index of the client (0-99).')
flags.DEFINE_integer('epochs', 40, 'Local epochs (7 steps each at batch 64).')
flags.DEFINE_integer('batch_size', 64, 'Local batch size.')
flags.DEFINE_integer('seed', 1, 'Seed of the partition, the initial model and the shuffling.')
flags.DEFINE_list(
  'gradients',
  ['paper', 'same_batch'],
  'Delta-SGD gradient options to trace, one panel each: paper and/or same_batch.',
)
flags.DEFINE_float('delta', 0.1, 'Delta-SGD delta.')
flags.DEFINE_string(
  'out',
  'runs/kim2024_table1/delta_sgd_step_sizes.png',
  'Output PNG (a CSV is written beside it; not in a committed results folder: see --publish).',
)
flags.DEFINE_bool('publish', False, publish.PUBLISH_HELP)
flags.DEFINE_bool('dry_run', False, 'Check the flags, print where the outputs go; write nothing.')
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = ('dirichlet_alpha', 'client', 'epochs', 'batch_size', 'seed', 'gradients', 'delta')


def trace_step_sizes(model, features, seed, batch_size, epochs, hparams):
  """Runs Delta-SGD local training eagerly; returns one (eta, curvature, growth) per step."""
  # pylint: disable=g-import-not-at-top
  from tff_adaptive.core import local_loop
  from tff_adaptive.optimizers import delta_sgd
  # pylint: enable=g-import-not-at-top

  records = []
  step = delta_sgd.delta_sgd_step(hparams)

  def apply(model, batch, step_seed, state):
    state = step.apply(model, batch, step_seed, state)
    records.append(
      tuple(float(state[k]) for k in (delta_sgd.ETA, delta_sgd.CURVATURE, delta_sgd.GROWTH))
    )
    return state

  local_loop.run_local_steps(
    model, features, seed, batch_size, epochs, local_loop.LocalStep(step.init, apply)
  )
  return records


def main(argv):
  if len(argv) > 1:
    print(f'plot_step_sizes: error: unexpected arguments {argv[1:]}', file=sys.stderr)
    return 2
  try:
    out = publish.output_from_flags(
      'reproductions.kim2024_delta_sgd.plot_step_sizes', FLAGS, SETTINGS
    )
  except publish.PublishError as e:
    print(f'plot_step_sizes: error: {e}', file=sys.stderr)
    return 2
  if FLAGS.dry_run:
    print(f'would write {out} and {os.path.splitext(out)[0]}.csv')
    return 0
  # pylint: disable=g-import-not-at-top
  import matplotlib

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  import tensorflow as tf
  import tensorflow_federated as tff

  from tff_adaptive import tasks
  from tff_adaptive.algorithms import base as algorithm_base
  from tff_adaptive.core import seeds
  from tff_adaptive.optimizers import delta_sgd
  # pylint: enable=g-import-not-at-top

  # Eagerly, TFF's traced forward_pass would keep the first step's dropout masks for every
  # step; running functions eagerly draws each step's masks from its seed, as the engines do.
  tf.config.run_functions_eagerly(True)
  task = tasks.build_task(
    tasks.TaskConfig('fmnist', seed=FLAGS.seed, dirichlet_alpha=FLAGS.dirichlet_alpha)
  )
  client_id = task.client_ids[FLAGS.client]
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(FLAGS.seed))
  seed = seeds.client_seed(FLAGS.seed, 0, FLAGS.client, len(task.client_ids))
  traces = {}
  for gradient in FLAGS.gradients:
    model = task.model_fn(FLAGS.seed)
    algorithm_base.assign_weights(model, initial)  # the seeded initial model x_0
    hparams = delta_sgd.DeltaSGDHParams(gradient=gradient, delta=FLAGS.delta)
    traces[gradient] = trace_step_sizes(
      model, task.train_clients[client_id], seed, FLAGS.batch_size, FLAGS.epochs, hparams
    )
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with publish.atomic_output(os.path.splitext(out)[0] + '.csv', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['gradient', 'local_step', 'eta', 'curvature_candidate', 'growth_candidate'])
    for gradient, records in traces.items():
      for k, row in enumerate(records, start=1):
        writer.writerow([gradient, k, *row])
  fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4), squeeze=False)
  for ax, (gradient, records) in zip(axes[0], traces.items()):
    steps = range(1, len(records) + 1)
    ax.plot(steps[1:], [r[1] for r in records[1:]], color='tab:green', lw=0.8, label='curvature')
    ax.plot(steps[1:], [r[2] for r in records[1:]], color='tab:blue', lw=0.8, label='growth')
    ax.plot(steps, [r[0] for r in records], color='tab:red', lw=1.2, label='eta_k (min)')
    ax.set_yscale('log')
    ax.set_xlabel('local step k')
    ax.set_ylabel('step size')
    ax.set_title(f'gradient={gradient}', fontsize=10)
    ax.legend()
    curvature = sum(1 for r in records[1:] if r[1] <= r[2])
    positive = [r[0] for r in records if r[0] > 0]
    print(
      f'gradient={gradient}: {len(records)} local steps; eta from {min(r[0] for r in records):.3g} '
      f'(smallest positive {min(positive):.3g}) to {max(r[0] for r in records):.3g}, '
      f'{sum(1 for r in records if r[0] == 0)} steps at 0; curvature candidate the smaller in '
      f'{curvature} of {len(records) - 1} steps after the first'
    )
  fig.suptitle(
    f'Delta-SGD step sizes, fmnist client {client_id} (Dir({FLAGS.dirichlet_alpha}), batch '
    f'{FLAGS.batch_size}), {FLAGS.epochs} local epochs from x_0',
    fontsize=10,
  )
  fig.tight_layout()
  publish.save_figure(fig, out, dpi=120)
  print(f'wrote {out}')


if __name__ == '__main__':
  cell_runner.app_run(main)
