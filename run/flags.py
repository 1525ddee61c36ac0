"""All command-line flags of the trainer, and their translation into typed configs.

Flag names follow google-research/federated's `optimization` trainer where it has one.
Flags left unset take the task's published defaults (`tasks.TaskDefaults`), then the
registries' (`SERVER_OPTIMIZERS[name].default_learning_rate`). Every choice flag is checked
against its registry, with one message: `unknown <kind> 'x'; valid choices: ...`.

This module imports no TensorFlow or TFF (importing them takes ~9 s): it reads the registries,
hyperparameter configs and checks from the TensorFlow-free modules (`algorithms.config`,
`engines.config`, `optimizers.config`, `tasks.config`, `tasks.catalog`, `runtime.addresses`,
`loop.sampling`), so --help and every flag mistake are answered at once. The one flag check
that needs TensorFlow, whether TF sees the --device, is the trainer's, after the imports.
"""

import dataclasses
import math
import shlex
import textwrap
from typing import Any

from absl import flags

from tff_adaptive import registry
from tff_adaptive.aggregators import config as aggregator_config
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.engines import config as engine_config
from tff_adaptive.loop import outputs
from tff_adaptive.loop import sampling
from tff_adaptive.loop import targets
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.privacy import config as privacy_config
from tff_adaptive.run import cell_flags
from tff_adaptive.runtime import addresses
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import config as task_config

# Task and data.
flags.DEFINE_string('task', 'fmnist', f'Task: one of {", ".join(catalog.TASKS)}.')
flags.DEFINE_string(
  'data_dir',
  None,
  "Directory with the task's data files (default: the task's own location, e.g. the Debian "
  'package for fmnist).',
)
flags.DEFINE_float('dirichlet_alpha', 0.1, 'Dirichlet label-skew concentration (fmnist).')
flags.DEFINE_float('synthetic_alpha', 1.0, 'LEAF Synthetic alpha (synthetic).')
flags.DEFINE_float('synthetic_beta', 1.0, 'LEAF Synthetic beta (synthetic).')
flags.DEFINE_bool(
  'synthetic_iid',
  False,
  'Synthetic IID (synthetic): one labelling model W, b for every client, features '
  'N(B_k, Sigma) with B_k ~ N(0, --synthetic_beta); --synthetic_alpha is not used.',
)
flags.DEFINE_enum(
  'synthetic_generator',
  'fedprox',
  ['fedprox', 'leaf', 'leaf_code'],
  "Synthetic data's generator (synthetic): fedprox (Li et al.'s Synthetic(alpha, beta), or IID "
  "with --synthetic_iid), leaf (LEAF's own: one labelling direction scaled per client; as its "
  "paper states the model) or leaf_code (as LEAF's code labels: softmax over each class's "
  'examples). The leaf generators read none of --synthetic_alpha/beta/iid.',
)
flags.DEFINE_integer(
  'num_clients', None, "Population size of generated/partitioned tasks (default: task's)."
)
flags.DEFINE_integer(
  'examples_per_client',
  None,
  "Examples per client of a partitioned task (fmnist; default: task's), 80% of them for "
  'training; num_clients x examples_per_client must fit the dataset (60,000 for fmnist).',
)
# Differential privacy.
flags.DEFINE_string(
  'dp',
  'none',
  "User-level differential privacy: none, gaussian_fixed (every client's update clipped to "
  'L2 norm --dp_clip, Gaussian noise of std z C added to their sum, divided by the clients per '
  'round, then the server optimizer), gaussian_adaptive (the clip follows a quantile of the '
  "update norms, Andrew et al. 2021), tree (DP-FTRL, Kairouz et al. 2021: the clipped sums' "
  'running total noised through a binary tree, restarted every epoch; clients sampled in '
  'epochs, --client_sampler=epoch) or distributed_skellam (distributed DP, Agarwal et al. '
  '2021: each client clips, rounds to integers and adds its share of Skellam noise, secure '
  'aggregation sums modulo 2^--dp_bits; --engine=tff only). Every client counts once '
  '(--client_weighting=uniform); metrics.csv gets dp_epsilon after every round. fedopt, '
  'fedprox and fedpa only.',
)
flags.DEFINE_float(
  'dp_noise_multiplier', 1.0, '--dp: noise multiplier z >= 0 (0: clipping only, not private).'
)
flags.DEFINE_float(
  'dp_clip', 1.0, "--dp: clip C > 0 of a client's update (gaussian_adaptive: its initial value)."
)
flags.DEFINE_float(
  'dp_target_quantile',
  0.5,
  '--dp=gaussian_adaptive: the quantile of the update norms the clip tracks, in (0, 1).',
)
flags.DEFINE_float(
  'dp_clip_learning_rate', 0.2, '--dp=gaussian_adaptive: learning rate (>= 0) of the clip.'
)
flags.DEFINE_bool(
  'dp_noise_aware_server',
  False,
  '--dp=gaussian_fixed with --server_optimizer=adagrad/adam/yogi: remove the known noise '
  'variance (z C / m)^2 from the second moment, v_t on g_t^2 - (z C / m)^2, clamped at 0.',
)
flags.DEFINE_integer(
  'dp_bits',
  20,
  "--dp=distributed_skellam: B, 1..22, secure aggregation's modulus 2^B (fewer bits: coarser "
  'rounding, a larger sensitivity, a larger epsilon).',
)
flags.DEFINE_float(
  'dp_delta',
  None,
  '--dp: the delta of the reported (epsilon, delta), in (0, 1). Default: 1 / N^1.1 for N '
  'training clients.',
)
# Compression.
flags.DEFINE_string(
  'compression',
  'none',
  "Clients' uploads: none (float32) or uniform (each tensor of more than "
  '--compression_threshold values stochastically quantised to --compression_bits between its '
  'min and max, Suresh et al. 2017; metrics.csv gets compression_bits_per_client). Not with '
  '--dp; not for scaffold, fednova, adafedadam.',
)
flags.DEFINE_integer('compression_bits', 8, '--compression=uniform: bits per value, 1..16.')
flags.DEFINE_integer(
  'compression_threshold',
  0,
  '--compression=uniform: tensors of at most this many values are sent as float32 (TFF '
  'compression_aggregator: 20000).',
)
# Algorithm and engine.
flags.DEFINE_string(
  'algorithm', 'fedopt', f'Federated algorithm: one of {", ".join(algorithm_config.ALGORITHMS)}.'
)
flags.DEFINE_string(
  'engine',
  'tff',
  "How rounds run: tff (a TFF LearningProcess on TFF's runtime), inprocess (one compiled TF "
  'function per round in this process; CPU or GPU) or vectorised (as inprocess, with the '
  "round's clients trained side by side as one batched computation; every algorithm).",
)
flags.DEFINE_string(
  'device',
  None,
  "inprocess and vectorised engines: TF device, e.g. 'CPU:0' or 'GPU:0' (default: TF's choice).",
)
flags.DEFINE_integer(
  'clients_per_chunk',
  None,
  "vectorised engine: train the round's clients this many at a time, grouped by their number "
  'of local steps (for clients of very unequal sizes; default: all at once).',
)
flags.DEFINE_bool('xla', False, 'inprocess engine: compile every local step with XLA.')
flags.DEFINE_string(
  'workers',
  None,
  "tff engine: run each round's clients across these running TFF workers, host:port,... "
  '(started with `tff-adaptive worker`; plain gRPC, trusted networks only).',
)
flags.DEFINE_float(
  'worker_connect_timeout',
  10.0,
  'Seconds each --workers worker has to accept a gRPC connection at start.',
)
flags.DEFINE_float(
  'worker_round_timeout',
  None,
  '--workers / --local_workers: seconds a worker has to answer its share of a round; one that '
  'does not (hung, while its host still answers) is reported like a lost worker (exit 4, the '
  'round and worker named). Default: no limit (gRPC keepalive notices a vanished host in ~6.5 '
  'minutes).',
)
flags.DEFINE_integer(
  'local_workers',
  None,
  "tff engine: start this many TFF workers on 127.0.0.1 and spread each round's clients over "
  'them (one-machine parallelism; stopped when the trainer ends).',
)
# Server optimizer.
flags.DEFINE_string(
  'server_optimizer',
  'sgd',
  f'Server optimizer: one of {", ".join(optimizer_config.SERVER_OPTIMIZERS)}.',
)
flags.DEFINE_float('server_learning_rate', None, "Server learning rate (default: task's).")
flags.DEFINE_float('server_momentum', 0.9, 'Server momentum (sgdm).')
flags.DEFINE_float(
  'tau',
  None,
  "Adaptivity tau (adagrad, adam, yogi); default: the task's published value for the optimizer, "
  'else 1e-3.',
)
flags.DEFINE_float(
  'server_beta_1', None, 'First-moment decay (default 0 for adagrad, 0.9 for adam/yogi).'
)
flags.DEFINE_float('server_beta_2', 0.999, 'Second-moment decay (adam, yogi).')
flags.DEFINE_float(
  'initial_accumulator_value', None, 'v_{-1} (default: 0 for published, tau^2 for algorithm2).'
)
flags.DEFINE_string(
  'adaptive_variant',
  optimizer_config.PUBLISHED,
  f"One of {', '.join(optimizer_config.VARIANTS)}: the authors' code that produced the "
  'published tables, or Algorithm 2 as printed.',
)
flags.DEFINE_string(
  'server_lr_schedule',
  'constant',
  f'Server lr schedule: one of {", ".join(optimizer_config.SCHEDULES)}.',
)
# Client optimizer.
flags.DEFINE_string(
  'client_optimizer', 'sgd', f'One of {", ".join(optimizer_config.CLIENT_OPTIMIZERS)}.'
)
flags.DEFINE_float('client_learning_rate', None, "Client learning rate (default: task's).")
flags.DEFINE_float('client_momentum', 0.9, 'Client momentum (sgdm).')
flags.DEFINE_string(
  'client_lr_schedule',
  'constant',
  f'Client lr schedule: one of {", ".join(optimizer_config.SCHEDULES)}.',
)
flags.DEFINE_float('client_beta_1', 0.9, 'Client Adam beta_1.')
flags.DEFINE_float('client_beta_2', 0.999, 'Client Adam beta_2.')
flags.DEFINE_float(
  'client_epsilon', None, "Client Adam/Adagrad epsilon (default PyTorch's: 1e-8 / 1e-10)."
)
flags.DEFINE_string(
  'client_weighting',
  'example',
  'Aggregation weight of a client: example (n_i, FedAvg) or uniform (1, the plain average of '
  'Kim et al. 2024).',
)
# SPS (Loizou et al. 2021) and Delta-SGD (Kim et al. 2024), tff_adaptive/optimizers/.
flags.DEFINE_float('sps_c', 0.5, 'SPS c (> 0).')
flags.DEFINE_string(
  'sps_mode',
  'smooth_iter',
  "SPS step rule: smooth_iter (the official implementation's default, growth capped at "
  "2^(1/500) per step) or constant (the Delta-SGD authors' federated code: no cap).",
)
flags.DEFINE_float('sps_eta_max', None, "SPS 'constant' mode: optional step cap (> 0).")
flags.DEFINE_float('delta_sgd_eta0', 0.2, 'Delta-SGD eta_0 (> 0).')
flags.DEFINE_float('delta_sgd_theta0', 1.0, 'Delta-SGD theta_0 (> 0).')
flags.DEFINE_float('delta_sgd_gamma', 2.0, 'Delta-SGD gamma (> 0).')
flags.DEFINE_float(
  'delta_sgd_delta', 0.1, "Delta-SGD delta (>= 0; the authors' code default 0.02)."
)
flags.DEFINE_string(
  'delta_sgd_gradient',
  'paper',
  "Delta-SGD gradient difference: paper (consecutive steps' gradients, one gradient per step) "
  "or same_batch (the authors' code: the previous iterate's gradient recomputed on the current "
  'minibatch, two per step).',
)
flags.DEFINE_string(
  'delta_sgd_first_step',
  'paper',
  "Delta-SGD first step: paper (eta_0) or grown (the authors' code: eta_0 sqrt(1 + delta theta_0)).",
)
flags.DEFINE_string(
  'delta_sgd_zero_rule',
  'paper',
  'Delta-SGD when a norm difference is 0: paper (zero gradient difference: no curvature bound) '
  "or grow (the authors' code: either zero -> the growth candidate).",
)
flags.DEFINE_float(
  'delta_sgd_eps', 0.0, "Delta-SGD: added to the step when the min is taken (authors' code 1e-8)."
)
flags.DEFINE_integer('client_epochs_per_round', 1, 'Local epochs E.')
# FedPA (Al-Shedivat et al. 2021), --algorithm=fedpa.
flags.DEFINE_integer(
  'fedpa_burnin_rounds',
  0,
  'FedPA: rounds whose clients send FedAvg deltas before posterior-averaged ones (< total_rounds).',
)
flags.DEFINE_integer(
  'fedpa_burnin_epochs',
  None,
  'FedPA: local IASG burn-in epochs per round; each later epoch gives one posterior sample '
  "(l = client_epochs_per_round - fedpa_burnin_epochs >= 1). Default: 1 (the authors' code), or 0 "
  'when --client_epochs_per_round=1.',
)
flags.DEFINE_float(
  'fedpa_shrinkage',
  0.01,
  'FedPA shrinkage rho (form paper: >= 0, rho_l = 1/(1+(l-1) rho); form convex: (0, 1]).',
)
flags.DEFINE_string(
  'fedpa_shrinkage_form',
  'paper',
  'FedPA shrinkage parametrisation: paper (Theorem 3, Table 6 values) or convex '
  '(Sigma = rho I + (1 - rho) S).',
)
flags.DEFINE_string(
  'fedpa_solver', 'dp', 'FedPA delta: dp (App. C, O(l^2 d)) or exact (d x d solve, small models).'
)
flags.DEFINE_integer(
  'client_epochs_max',
  None,
  'Resource heterogeneity (Ju et al. Table 1): each client runs E ~ U{client_epochs_per_round, '
  '..., client_epochs_max} epochs per round, drawn from (seed, round, client).',
)
# FedProx, q-FedAvg, AdaFedAdam (Ju et al. and its baselines).
flags.DEFINE_float('fedprox_mu', 0.01, 'FedProx proximal strength mu (>= 0; 0 is FedAvg).')
flags.DEFINE_float('qfedavg_q', 1.0, 'q-FedAvg fairness q (>= 0; 0 is uniform FedAvg).')
flags.DEFINE_float(
  'fairness_alpha', 1.0, 'AdaFedAdam fairness exponent alpha (>= 0): weights p_k I_k^alpha.'
)
flags.DEFINE_integer(
  'adafedadam_gradient_examples',
  None,
  "AdaFedAdam: F_k and grad F_k over at most this many local examples (default all; authors' "
  'code 512).',
)
flags.DEFINE_string(
  'adafedadam_weighting',
  'paper',
  "AdaFedAdam aggregation weight: paper (p_k (F_k(x_t)/F_k(x_0))^alpha) or loss (the authors' "
  'code: p_k F_k(x_t)^alpha).',
)
flags.DEFINE_string(
  'adafedadam_certainty_floor',
  'zero',
  'AdaFedAdam when the aggregate certainty C <= 0: zero (no server step, AdaAdam state kept) '
  "or none (applied as it is, the authors' code; a non-finite step stops the run).",
)
flags.DEFINE_integer(
  'adaadam_certainty_lr_from_step',
  0,
  "AdaAdam server: eta_t = C eta from this 0-based step on, eta before (authors' code: 6).",
)
flags.DEFINE_integer('client_batch_size', None, "Local batch size B (default: task's).")
# Loop.
flags.DEFINE_integer('clients_per_round', None, "Clients per round (default: task's).")
flags.DEFINE_integer('total_rounds', None, "Rounds to train (default: task's).")
flags.DEFINE_integer('rounds_per_eval', 10, 'Evaluate every this many rounds.')
flags.DEFINE_integer('rounds_per_checkpoint', 50, 'Checkpoint every this many rounds.')
flags.DEFINE_list(
  'rounds_to_target',
  [],
  'Thresholds of the 10-round running average of --target_metric; metrics.csv gets '
  'rounds_to_<metric>_<threshold>, the first round reaching each (FedPA Table 3).',
)
flags.DEFINE_string(
  'target_metric', 'eval_accuracy', 'The evaluated metrics.csv column of --rounds_to_target.'
)
flags.DEFINE_string('root_output_dir', 'results', 'Root of all experiment directories.')
flags.DEFINE_string(
  'experiment_name',
  None,
  'Experiment directory name (default: <task>_<algorithm>_<server_optimizer>_<client_optimizer>'
  '_seed<seed>_<hash of the other hyperparameters>, and _<engine> for engines other than tff; '
  'the same command finds its run again, a changed setting gets its own directory).',
)
flags.DEFINE_string(
  'cells',
  None,
  'Grid cells side by side (--engine=vectorised): a file of one cell per line, "NAME '
  "--flag=value ...\", the cell's flags over the command's; the cells (differing only in "
  "--client_learning_rate and the server optimizer's flags) train as one computation, each "
  'into <root_output_dir>/NAME as if run alone.',
)
flags.DEFINE_string(
  'client_sampler',
  'tff',
  "Client sampling: tff (TFF's sampler, the published client order, O(population) per round), "
  'fast (O(clients_per_round), another order) or epoch (each client at most once per epoch of '
  'floor(N / m) rounds, shuffled every epoch; the default with --dp=tree).',
)
flags.DEFINE_integer(
  'seed',
  1,
  'Seed of client sampling, shuffling, partitioning and init (the published runs sampled '
  'clients with seed 1).',
)

# The flags by concern, in the order of the flag reference (docs/flags.md, written from these
# definitions by `python -m run.flag_reference`; tests/test_docs.py fails when it is stale).
SECTIONS = (
  (
    'Task and data',
    (
      'task',
      'data_dir',
      'dirichlet_alpha',
      'synthetic_alpha',
      'synthetic_beta',
      'synthetic_iid',
      'synthetic_generator',
      'num_clients',
      'examples_per_client',
    ),
  ),
  ('Algorithm', ('algorithm', 'client_weighting')),
  (
    'Server optimizer',
    (
      'server_optimizer',
      'server_learning_rate',
      'server_lr_schedule',
      'server_momentum',
      'tau',
      'server_beta_1',
      'server_beta_2',
      'initial_accumulator_value',
      'adaptive_variant',
    ),
  ),
  (
    'Client training',
    (
      'client_optimizer',
      'client_learning_rate',
      'client_lr_schedule',
      'client_momentum',
      'client_beta_1',
      'client_beta_2',
      'client_epsilon',
      'client_epochs_per_round',
      'client_epochs_max',
      'client_batch_size',
    ),
  ),
  (
    'SPS and Delta-SGD client optimizers (Kim et al. 2024)',
    (
      'sps_c',
      'sps_mode',
      'sps_eta_max',
      'delta_sgd_eta0',
      'delta_sgd_theta0',
      'delta_sgd_gamma',
      'delta_sgd_delta',
      'delta_sgd_gradient',
      'delta_sgd_first_step',
      'delta_sgd_zero_rule',
      'delta_sgd_eps',
    ),
  ),
  (
    'FedPA (Al-Shedivat et al. 2021)',
    (
      'fedpa_burnin_rounds',
      'fedpa_burnin_epochs',
      'fedpa_shrinkage',
      'fedpa_shrinkage_form',
      'fedpa_solver',
    ),
  ),
  (
    'AdaFedAdam and its baselines (Ju et al.)',
    (
      'fairness_alpha',
      'adafedadam_gradient_examples',
      'adafedadam_weighting',
      'adafedadam_certainty_floor',
      'adaadam_certainty_lr_from_step',
      'fedprox_mu',
      'qfedavg_q',
    ),
  ),
  (
    'Rounds, evaluation and seeds',
    (
      'clients_per_round',
      'total_rounds',
      'rounds_per_eval',
      'rounds_per_checkpoint',
      'rounds_to_target',
      'target_metric',
      'client_sampler',
      'seed',
    ),
  ),
  (
    'Differential privacy',
    (
      'dp',
      'dp_noise_multiplier',
      'dp_clip',
      'dp_target_quantile',
      'dp_clip_learning_rate',
      'dp_noise_aware_server',
      'dp_bits',
      'dp_delta',
    ),
  ),
  ('Compression', ('compression', 'compression_bits', 'compression_threshold')),
  ('Outputs', ('root_output_dir', 'experiment_name')),
  (
    'Engine and workers',
    (
      'engine',
      'cells',
      'device',
      'xla',
      'clients_per_chunk',
      'workers',
      'worker_connect_timeout',
      'worker_round_timeout',
      'local_workers',
    ),
  ),
)


def default_text(flag: flags.Flag) -> str:
  """A flag's default as the help and docs/flags.md show it ("task's": the task's published one)."""
  if flag.default is None:
    return "task's" if "task's" in flag.help else '(none)'
  if isinstance(flag.default, list):
    return ','.join(flag.default) if flag.default else '(empty)'
  return str(flag.default)


def help_text(usage: str, width: int = 100) -> str:
  """`usage`, then the trainer's own flags by SECTIONS, each with its default and help."""
  lines = [
    usage.rstrip(),
    '',
    "Flags (--flagfile=FILE reads more, one per line; --helpfull: absl's too):",
  ]
  for title, names in SECTIONS:
    lines += ['', f'{title}:']
    for name in names:
      flag = flags.FLAGS[name]
      lines.append(f'  --{name} (default: {default_text(flag)})')
      lines += textwrap.wrap(
        ' '.join(flag.help.split()), width, initial_indent=' ' * 6, subsequent_indent=' ' * 6
      )
  return '\n'.join(lines) + '\n'


FLAGS = flags.FLAGS
_FLOAT32_MAX = 3.4028234663852886e38
_MAX_LOCAL_WORKERS = 256


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
  """Settings a resumed run may change (recorded, not fingerprinted).

  Evaluation and checkpoint cadence do not touch the trajectory. The device does not change the
  algorithm, but another device (CPU vs GPU) may round differently, so a run resumed on another
  device is not bitwise the uninterrupted one.
  """

  rounds_per_eval: int = 10
  rounds_per_checkpoint: int = 50
  device: str | None = None
  clients_per_chunk: int | None = None
  workers: tuple[str, ...] = ()
  worker_connect_timeout: float = 10.0
  worker_round_timeout: float | None = None
  local_workers: int | None = None
  target_metric: str = 'eval_accuracy'
  rounds_to_target: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything that determines a run's trajectory, plus its runtime settings."""

  task: task_config.TaskConfig
  algorithm: str
  engine: str
  server: optimizer_config.ServerOptimizerConfig
  server_lr_schedule: optimizer_config.ScheduleConfig
  client: algorithm_config.ClientTrainingConfig
  clients_per_round: int
  total_rounds: int
  seed: int
  client_sampler: str = 'tff'
  xla: bool = False
  runtime: RuntimeConfig = RuntimeConfig()
  fedpa: algorithm_config.FedPAHParams | None = None
  fedprox: algorithm_config.FedProxHParams | None = None
  qfedavg: algorithm_config.QFedAvgHParams | None = None
  adafedadam: algorithm_config.AdaFedAdamHParams | None = None
  dp: privacy_config.DPConfig | None = None
  compression: aggregator_config.CompressionConfig | None = None

  def algorithm_hparams(self) -> dict[str, Any]:
    """{'fedpa': FedPAHParams, ...}: the chosen algorithm's own hyperparameters, if any."""
    names = ('fedpa', 'fedprox', 'qfedavg', 'adafedadam')
    return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


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
  """The task's part of hparams.json: its name, seed and the options it reads (not data_dir)."""
  return {
    'name': config.name,
    'seed': config.seed,
    **{
      field: getattr(config, field)
      for field in catalog.TASKS[config.name].reads
      if field != 'data_dir'
      # Recorded when set: the records of runs from before the option stand.
      and not (field == 'examples_per_client' and config.examples_per_client is None)
      and not (field == 'synthetic_iid' and not config.synthetic_iid)
      and not (field == 'synthetic_generator' and config.synthetic_generator == 'fedprox')
    },
  }


# Why a key of hparams.json cannot change between a run and its rerun, where not obvious.
HPARAMS_HINTS = {
  'server_lr_schedule.total_rounds': 'step_decay depends on the total number of rounds, so a '
  'run with it cannot be extended',
  'client.lr_schedule.total_rounds': 'step_decay depends on the total number of rounds, so a '
  'run with it cannot be extended',
}


# Optimizer flags -> the config field they set; set but unread by the chosen optimizer, they are
# warned about (and not recorded in hparams.json).
_SERVER_FLAG_FIELDS = {
  'server_momentum': 'momentum',
  'tau': 'tau',
  'server_beta_1': 'beta_1',
  'server_beta_2': 'beta_2',
  'initial_accumulator_value': 'initial_accumulator_value',
  'adaptive_variant': 'variant',
  'adaadam_certainty_lr_from_step': 'certainty_lr_from_step',
}
_CLIENT_FLAG_FIELDS = {
  'client_momentum': 'momentum',
  'client_beta_1': 'beta_1',
  'client_beta_2': 'beta_2',
  'client_epsilon': 'epsilon',
  'sps_c': 'sps',
  'sps_mode': 'sps',
  'sps_eta_max': 'sps',
  'delta_sgd_eta0': 'delta_sgd',
  'delta_sgd_theta0': 'delta_sgd',
  'delta_sgd_gamma': 'delta_sgd',
  'delta_sgd_delta': 'delta_sgd',
  'delta_sgd_gradient': 'delta_sgd',
  'delta_sgd_first_step': 'delta_sgd',
  'delta_sgd_zero_rule': 'delta_sgd',
  'delta_sgd_eps': 'delta_sgd',
}


def ignored_flags(config: ExperimentConfig) -> list[str]:
  """One line per flag given on the command line that the chosen task or parts do not read."""
  server = optimizer_config.SERVER_OPTIMIZERS[config.server.name].hparams
  client_entry = optimizer_config.CLIENT_OPTIMIZERS[config.client.optimizer.name]
  client = client_entry.hparams + (('learning_rate',) if client_entry.reads_learning_rate else ())
  lines = []
  for flag in _TASK_FLAGS:
    if FLAGS[flag].present and flag not in catalog.TASKS[config.task.name].reads:
      lines.append(f'--{flag} is ignored by task {config.task.name!r}')
  for flag, field in _SERVER_FLAG_FIELDS.items():
    if FLAGS[flag].present and field not in server:
      lines.append(f'--{flag} is ignored by server optimizer {config.server.name!r}')
  for flag, field in {'client_learning_rate': 'learning_rate', **_CLIENT_FLAG_FIELDS}.items():
    if FLAGS[flag].present and field not in client:
      lines.append(f'--{flag} is ignored by client optimizer {config.client.optimizer.name!r}')
  for flag in ('compression_bits', 'compression_threshold'):
    if FLAGS[flag].present and config.compression is None:
      lines.append(f'--{flag} is ignored without --compression')
  for flag in _DP_FLAGS:
    if FLAGS[flag].present and config.dp is None:
      lines.append(f'--{flag} is ignored without --dp')
  for flag in _ADAPTIVE_DP_FLAGS:
    if FLAGS[flag].present and config.dp is not None and not config.dp.adaptive:
      lines.append(f'--{flag} is ignored by --dp={config.dp.mechanism}')
  if FLAGS['dp_bits'].present and config.dp is not None and not config.dp.distributed:
    lines.append(f'--dp_bits is ignored by --dp={config.dp.mechanism}')
  if config.dp is not None and FLAGS.client_weighting != algorithm_config.UNIFORM_WEIGHTING:
    if FLAGS['client_weighting'].present:
      lines.append(
        f'--client_weighting={FLAGS.client_weighting} is ignored under --dp: every client counts '
        'once (a weight that grows with the data would raise the sensitivity)'
      )
  for algorithm, names in _ALGORITHM_FLAGS.items():
    if config.algorithm != algorithm:
      for flag in names:
        if FLAGS[flag].present:
          lines.append(f'--{flag} is ignored by algorithm {config.algorithm!r}')
  return lines


# Task flags, each the `task_config.TaskConfig` field of its name; a task reads those of its entry.
_TASK_FLAGS = (
  'data_dir',
  'dirichlet_alpha',
  'synthetic_alpha',
  'synthetic_beta',
  'synthetic_iid',
  'synthetic_generator',
  'num_clients',
  'examples_per_client',
)

# --dp's own flags; those read by gaussian_adaptive only.
_ADAPTIVE_DP_FLAGS = ('dp_target_quantile', 'dp_clip_learning_rate')
_DP_FLAGS = (
  'dp_noise_multiplier',
  'dp_clip',
  'dp_delta',
  'dp_bits',
  'dp_noise_aware_server',
  *_ADAPTIVE_DP_FLAGS,
)
_DP_FIELD_FLAGS = {
  'noise_multiplier': '--dp_noise_multiplier',
  'clip': '--dp_clip',
  'target_quantile': '--dp_target_quantile',
  'clip_learning_rate': '--dp_clip_learning_rate',
  'delta': '--dp_delta',
  'bits': '--dp_bits',
}

# Flags read by one algorithm only.
_ALGORITHM_FLAGS = {
  'fedpa': (
    'fedpa_burnin_rounds',
    'fedpa_burnin_epochs',
    'fedpa_shrinkage',
    'fedpa_shrinkage_form',
    'fedpa_solver',
  ),
  'fedprox': ('fedprox_mu',),
  'qfedavg': ('qfedavg_q',),
  'adafedadam': (
    'fairness_alpha',
    'adafedadam_gradient_examples',
    'adafedadam_weighting',
    'adafedadam_certainty_floor',
  ),
}


def _dp_from_flags(clients_per_round: int) -> privacy_config.DPConfig | None:
  """--dp's config (None for --dp=none), checked against the algorithm and clients per round."""
  _choice('dp', FLAGS.dp, privacy_config.DP_MECHANISMS)
  if FLAGS.dp == privacy_config.NO_DP:
    return None
  refusal = algorithm_config.dp_refusal(FLAGS.algorithm)
  if refusal is not None:
    raise ValueError(f'--dp={FLAGS.dp}: {refusal}')
  try:
    dp = privacy_config.DPConfig(
      mechanism=FLAGS.dp,
      noise_multiplier=FLAGS.dp_noise_multiplier,
      clip=FLAGS.dp_clip,
      target_quantile=FLAGS.dp_target_quantile,
      clip_learning_rate=FLAGS.dp_clip_learning_rate,
      delta=FLAGS.dp_delta,
      bits=FLAGS.dp_bits,
    )
    dp.check_clients_per_round(clients_per_round)
  except ValueError as e:
    raise ValueError(_name_the_flag(str(e), _DP_FIELD_FLAGS)) from None
  return dp


def _sampler_from_flags(dp: privacy_config.DPConfig | None) -> str:
  """--client_sampler; 'epoch' for --dp=tree, whose accounting needs each client at most once
  per tree (another sampler given explicitly is refused), and not 'epoch' for the Gaussian
  mechanisms, whose accounting needs a fresh uniform draw every round; any for distributed DP,
  accounted without amplification by sampling."""
  if dp is None:
    return FLAGS.client_sampler
  if dp.distributed:  # accounted without amplification by sampling: any sampler
    return FLAGS.client_sampler
  if not dp.tree:
    if FLAGS.client_sampler == 'epoch':
      raise ValueError(
        f'--dp={dp.mechanism} accounts m clients drawn afresh every round (amplification by '
        'sampling), which --client_sampler=epoch does not do: use --client_sampler=tff or fast, '
        'or --dp=tree'
      )
    return FLAGS.client_sampler
  if FLAGS['client_sampler'].present and FLAGS.client_sampler != 'epoch':
    raise ValueError(
      f'--dp=tree needs --client_sampler=epoch (each client at most once per tree, the tree '
      f'restarted every epoch), got --client_sampler={FLAGS.client_sampler}'
    )
  return 'epoch'


def _compression_from_flags(dp) -> aggregator_config.CompressionConfig | None:
  """--compression's config (None for none), checked against --dp and the algorithm."""
  _choice('compression', FLAGS.compression, aggregator_config.COMPRESSIONS)
  if FLAGS.compression == aggregator_config.NO_COMPRESSION:
    return None
  if dp is not None:
    raise ValueError(
      f'--compression={FLAGS.compression} cannot run with --dp={dp.mechanism}: quantising a '
      'clipped update can raise its norm above the clip, and with it the sensitivity'
    )
  refusal = algorithm_config.compression_refusal(FLAGS.algorithm)
  if refusal is not None:
    raise ValueError(f'--compression={FLAGS.compression}: {refusal}')
  try:
    return aggregator_config.CompressionConfig(
      FLAGS.compression, FLAGS.compression_bits, FLAGS.compression_threshold
    )
  except ValueError as e:
    raise ValueError(
      _name_the_flag(str(e), {'bits': '--compression_bits', 'threshold': '--compression_threshold'})
    ) from None


def _noise_variance_from_flags(
  dp: privacy_config.DPConfig | None, server_name: str, clients_per_round: int
) -> float:
  """sigma^2 = (z C / m)^2 for --dp_noise_aware_server, else 0 (the server as published)."""
  if not FLAGS.dp_noise_aware_server or dp is None:
    return 0.0
  if dp.adaptive:
    raise ValueError(
      '--dp_noise_aware_server needs --dp=gaussian_fixed: with gaussian_adaptive the clip, and '
      'so the noise variance, changes every round'
    )
  if dp.distributed:
    raise ValueError(
      '--dp_noise_aware_server needs --dp=gaussian_fixed: with distributed_skellam the noise '
      'has the rounding in it too, and secure aggregation may wrap it around'
    )
  if dp.tree:
    raise ValueError(
      "--dp_noise_aware_server needs --dp=gaussian_fixed: with tree a round's noise is a "
      'difference of two tree estimates, its variance changes from round to round'
    )
  if server_name not in optimizer_config.NOISE_AWARE_SERVER_OPTIMIZERS:
    valid = ', '.join(optimizer_config.NOISE_AWARE_SERVER_OPTIMIZERS)
    raise ValueError(
      f'--dp_noise_aware_server corrects an adaptive second moment: valid --server_optimizer: '
      f'{valid} (got {server_name!r})'
    )
  return (dp.noise_multiplier * dp.clip / clients_per_round) ** 2


def _nonnegative(name: str) -> float:
  if FLAGS[name].value < 0:
    raise ValueError(f'--{name} must be >= 0, got {FLAGS[name].value}')
  return FLAGS[name].value


def _fair_hparams_from_flags() -> dict[str, Any]:
  """FedProx's, q-FedAvg's or AdaFedAdam's hyperparameters, for the chosen algorithm."""
  if FLAGS.algorithm == 'fedprox':
    return {'fedprox': algorithm_config.FedProxHParams(mu=_nonnegative('fedprox_mu'))}
  if FLAGS.algorithm == 'qfedavg':
    return {'qfedavg': algorithm_config.QFedAvgHParams(q=_nonnegative('qfedavg_q'))}
  if FLAGS.algorithm == 'adafedadam':
    return {
      'adafedadam': algorithm_config.AdaFedAdamHParams(
        alpha=_nonnegative('fairness_alpha'),
        gradient_examples=FLAGS.adafedadam_gradient_examples,
        weighting=FLAGS.adafedadam_weighting,
        certainty_floor=FLAGS.adafedadam_certainty_floor,
      )
    }
  return {}


def _fedpa_from_flags(total_rounds: int, epochs: int) -> algorithm_config.FedPAHParams | None:
  """FedPA's hyperparameters from the flags (None for other algorithms)."""
  if FLAGS.algorithm != 'fedpa':
    return None
  # One burn-in epoch, as the authors' code (the paper's Table 6 does not print it); with one
  # epoch per round that would leave no sample, so the default then samples from the start.
  burnin_epochs = _or(FLAGS.fedpa_burnin_epochs, min(1, epochs - 1))
  for name, value in (
    ('fedpa_burnin_rounds', FLAGS.fedpa_burnin_rounds),
    ('fedpa_burnin_epochs', burnin_epochs),
  ):
    if value < 0:
      raise ValueError(f'--{name} must be >= 0, got {value}')
  if FLAGS.fedpa_burnin_rounds >= total_rounds:
    raise ValueError(
      f'--fedpa_burnin_rounds={FLAGS.fedpa_burnin_rounds} must be < --total_rounds='
      f'{total_rounds}: FedPA would never leave its FedAvg burn-in'
    )
  if burnin_epochs >= epochs:
    raise ValueError(
      f'--fedpa_burnin_epochs={burnin_epochs} leaves no posterior sample: it must be '
      f'< --client_epochs_per_round={epochs} (one sample per epoch after the burn-in)'
    )
  form = FLAGS.fedpa_shrinkage_form
  try:
    algorithm_config.check_shrinkage(FLAGS.fedpa_shrinkage, form)
  except ValueError as e:
    raise ValueError(f'--fedpa_shrinkage/--fedpa_shrinkage_form: {e}') from None
  return algorithm_config.FedPAHParams(
    burnin_rounds=FLAGS.fedpa_burnin_rounds,
    burnin_epochs=burnin_epochs,
    shrinkage=FLAGS.fedpa_shrinkage,
    shrinkage_form=form,
    solver=FLAGS.fedpa_solver,
  )


def _choice(name: str, value: str, valid) -> str:
  fedopt = optimizer_config.FEDOPT_NAMES.get(value)
  if fedopt is not None and name in ('algorithm', 'server_optimizer') and value not in valid:
    raise ValueError(
      f'--{name}={value}: {value} is --algorithm=fedopt --server_optimizer={fedopt} '
      '(fedopt, the default algorithm, is the FedOpt family of Reddi et al. 2021: FedAvg, '
      'FedAvgM, FedAdagrad, FedAdam and FedYogi by their server optimizer)'
    )
  if value not in valid:
    kind = getattr(valid, 'kind', name.replace('_', ' '))
    raise ValueError(f'--{name}: {registry.unknown_message(kind, value, valid)}')
  return value


def _positive(name: str, value) -> Any:
  if value is not None and not value > 0:
    raise ValueError(f'--{name} must be > 0, got {value}')
  return value


def _or(value, default):
  return default if value is None else value


# The names the optimizers' own checks use -> the flag that sets them.
_SERVER_FIELD_FLAGS = {
  'learning_rate': '--server_learning_rate',
  'momentum': '--server_momentum',
  'tau': '--tau',
  'beta_1': '--server_beta_1',
  'beta_2': '--server_beta_2',
  'initial_accumulator_value': '--initial_accumulator_value',
  'variant': '--adaptive_variant',
}
_CLIENT_FIELD_FLAGS = {
  'client learning_rate': '--client_learning_rate',
  'client momentum': '--client_momentum',
  'client beta_1': '--client_beta_1',
  'client beta_2': '--client_beta_2',
  'client epsilon': '--client_epsilon',
  'client epochs': '--client_epochs_per_round',
  'client max_epochs': '--client_epochs_max',
  'client batch_size': '--client_batch_size',
}


def _name_the_flag(message: str, field_flags: dict[str, str]) -> str:
  """'momentum must be in [0, 1), got 1.5' -> '--server_momentum must be in [0, 1), got 1.5'."""
  for field in sorted(field_flags, key=len, reverse=True):
    if message.startswith((f'{field} ', f'{field}=')):
      return field_flags[field] + message[len(field) :]
  return message


def experiment_config_from_flags() -> ExperimentConfig:
  """Validates the flags and builds the run's config (no data, TensorFlow or TFF work).

  Every check but --device's (whether TensorFlow sees that device: the trainer's, once it has
  imported TensorFlow).

  Raises:
    ValueError: one line naming the bad flag, its value and the valid choices/range.
  """
  _choice('task', FLAGS.task, catalog.TASKS)
  _choice('algorithm', FLAGS.algorithm, algorithm_config.ALGORITHMS)
  _choice('engine', FLAGS.engine, engine_config.ENGINES)
  _choice('server_optimizer', FLAGS.server_optimizer, optimizer_config.SERVER_OPTIMIZERS)
  _choice('client_optimizer', FLAGS.client_optimizer, optimizer_config.CLIENT_OPTIMIZERS)
  _choice('adaptive_variant', FLAGS.adaptive_variant, optimizer_config.VARIANTS)
  _choice('server_lr_schedule', FLAGS.server_lr_schedule, optimizer_config.SCHEDULES)
  _choice('client_lr_schedule', FLAGS.client_lr_schedule, optimizer_config.SCHEDULES)
  _choice('client_sampler', FLAGS.client_sampler, sampling.SAMPLING_METHODS)
  _choice('client_weighting', FLAGS.client_weighting, algorithm_config.CLIENT_WEIGHTINGS)
  _choice('sps_mode', FLAGS.sps_mode, optimizer_config.MODES)
  _choice('delta_sgd_gradient', FLAGS.delta_sgd_gradient, optimizer_config.GRADIENTS)
  _choice('delta_sgd_first_step', FLAGS.delta_sgd_first_step, optimizer_config.FIRST_STEPS)
  _choice('delta_sgd_zero_rule', FLAGS.delta_sgd_zero_rule, optimizer_config.ZERO_RULES)
  _choice('fedpa_shrinkage_form', FLAGS.fedpa_shrinkage_form, algorithm_config.SHRINKAGE_FORMS)
  _choice('fedpa_solver', FLAGS.fedpa_solver, algorithm_config.SOLVERS)
  _choice(
    'adafedadam_weighting', FLAGS.adafedadam_weighting, algorithm_config.ADAFEDADAM_WEIGHTINGS
  )
  _choice(
    'adafedadam_certainty_floor',
    FLAGS.adafedadam_certainty_floor,
    optimizer_config.CERTAINTY_FLOORS,
  )
  for name in FLAGS:
    flag = FLAGS[name]
    if isinstance(flag.parser, flags.FloatParser) and flag.value is not None:
      if not math.isfinite(flag.value):
        raise ValueError(f'--{name} must be a finite number, got {flag.value}')
      if abs(flag.value) > _FLOAT32_MAX:  # the computations run in float32
        raise ValueError(
          f'--{name} must be at most {_FLOAT32_MAX:.4g} in magnitude, got {flag.value}'
        )
  for name in (
    'server_learning_rate',
    'client_learning_rate',
    'tau',
    'client_batch_size',
    'clients_per_round',
    'total_rounds',
    'rounds_per_eval',
    'rounds_per_checkpoint',
    'client_epochs_per_round',
    'dirichlet_alpha',
    'num_clients',
    'examples_per_client',
    'client_epsilon',
    'sps_c',
    'sps_eta_max',
    'delta_sgd_eta0',
    'delta_sgd_theta0',
    'delta_sgd_gamma',
    'client_epochs_max',
    'adafedadam_gradient_examples',
    'worker_connect_timeout',
    'worker_round_timeout',
  ):
    _positive(name, FLAGS[name].value)
  if FLAGS.adaadam_certainty_lr_from_step < 0:
    raise ValueError(
      f'--adaadam_certainty_lr_from_step must be >= 0, got {FLAGS.adaadam_certainty_lr_from_step}'
    )
  for name in ('server_beta_1', 'server_beta_2'):
    if FLAGS[name].value is not None and not 0 <= FLAGS[name].value < 1:
      raise ValueError(f'--{name} must be in [0, 1), got {FLAGS[name].value}')
  if (
    FLAGS.client_epochs_max is not None and FLAGS.client_epochs_max < FLAGS.client_epochs_per_round
  ):
    raise ValueError(
      f'--client_epochs_max={FLAGS.client_epochs_max} must be >= --client_epochs_per_round='
      f'{FLAGS.client_epochs_per_round}'
    )
  if FLAGS.client_epochs_max is not None and FLAGS.algorithm == 'fedpa':
    raise ValueError(
      '--client_epochs_max cannot run under --algorithm=fedpa: FedPA takes one posterior '
      'sample per epoch into a fixed-size state'
    )
  for name in ('delta_sgd_delta', 'delta_sgd_eps'):
    if FLAGS[name].value < 0:
      raise ValueError(f'--{name} must be >= 0, got {FLAGS[name].value}')
  for name in ('client_beta_1', 'client_beta_2'):
    if not 0 <= FLAGS[name].value < 1:
      raise ValueError(f'--{name} must be in [0, 1), got {FLAGS[name].value}')
  if FLAGS.sps_eta_max is not None and FLAGS.sps_mode != 'constant':
    raise ValueError(
      f'--sps_eta_max caps --sps_mode=constant only, got --sps_mode={FLAGS.sps_mode}'
    )
  client_entry = optimizer_config.CLIENT_OPTIMIZERS[FLAGS.client_optimizer]
  if not client_entry.reads_learning_rate and FLAGS.client_lr_schedule != 'constant':
    raise ValueError(
      f'--client_lr_schedule={FLAGS.client_lr_schedule}: client optimizer '
      f"'{FLAGS.client_optimizer}' sets its own step sizes; valid: constant "
      f"(got '{FLAGS.client_lr_schedule}')"
    )
  if FLAGS.algorithm == 'scaffold' and not client_entry.scalar_step:
    raise ValueError(
      f'--client_optimizer={FLAGS.client_optimizer} cannot run under --algorithm=scaffold: its '
      'control variates need scalar client steps (sgd, sgdm, sps, delta_sgd)'
    )
  for name in ('synthetic_alpha', 'synthetic_beta'):
    if FLAGS[name].value < 0:
      raise ValueError(f'--{name} must be >= 0, got {FLAGS[name].value}')
  if FLAGS.seed < 0:
    raise ValueError(f'--seed must be >= 0, got {FLAGS.seed}')
  if FLAGS.engine not in ('inprocess', 'vectorised') and FLAGS.device is not None:
    raise ValueError('--device needs --engine=inprocess or --engine=vectorised')
  if FLAGS.engine != 'inprocess' and FLAGS.xla:
    raise ValueError('--xla needs --engine=inprocess')
  if FLAGS.clients_per_chunk is not None:
    if FLAGS.engine != 'vectorised':
      raise ValueError('--clients_per_chunk needs --engine=vectorised')
    if FLAGS.clients_per_chunk < 1:
      raise ValueError(f'--clients_per_chunk must be >= 1, got {FLAGS.clients_per_chunk}')
  if FLAGS.engine == 'vectorised':
    refusal = engine_config.vectorised_refusal(FLAGS.algorithm, FLAGS.client_optimizer)
    if refusal is not None:
      raise ValueError(f'--engine=vectorised: {refusal}')
  workers = ()
  if FLAGS.workers is not None:
    workers = addresses.parse_worker_addresses(FLAGS.workers)
  if FLAGS.local_workers is not None and not 1 <= FLAGS.local_workers <= _MAX_LOCAL_WORKERS:
    raise ValueError(
      f'--local_workers must be an integer in [1, {_MAX_LOCAL_WORKERS}], got {FLAGS.local_workers}'
    )
  if workers and FLAGS.local_workers is not None:
    raise ValueError('--workers and --local_workers exclude each other: choose one')
  if FLAGS.engine != 'tff' and (workers or FLAGS.local_workers is not None):
    raise ValueError(
      f"--workers and --local_workers need --engine=tff (TFF's runtime), got "
      f'--engine={FLAGS.engine}'
    )
  defaults = catalog.TASKS[FLAGS.task].defaults
  total_rounds = _or(FLAGS.total_rounds, defaults.total_rounds)
  clients_per_round = _or(FLAGS.clients_per_round, defaults.clients_per_round)
  dp = _dp_from_flags(clients_per_round)
  compression = _compression_from_flags(dp)
  if dp is not None and dp.distributed and FLAGS.engine != 'tff':
    raise ValueError(
      f'--dp={dp.mechanism} needs --engine=tff (got --engine={FLAGS.engine}): secure '
      "aggregation is a TFF intrinsic, which only TFF's runtime computes"
    )
  if dp is not None and dp.distributed and (workers or FLAGS.local_workers is not None):
    raise ValueError(
      f'--dp={dp.mechanism} runs on one TFF worker: secure aggregation is simulated by TFF on '
      'one worker, not merged across --workers or --local_workers'
    )
  server_name = FLAGS.server_optimizer
  if FLAGS.algorithm == 'adafedadam':
    if not FLAGS['server_optimizer'].present:
      server_name = 'adaadam'
    if server_name != 'adaadam':
      raise ValueError(
        f'--algorithm=adafedadam steps with the certainty-adaptive AdaAdam: valid '
        f'--server_optimizer: adaadam (got {server_name!r})'
      )
  noise_variance = _noise_variance_from_flags(dp, server_name, clients_per_round)
  try:
    server = optimizer_config.ServerOptimizerConfig(
      name=server_name,
      learning_rate=_or(
        FLAGS.server_learning_rate,
        defaults.server_learning_rate.get(
          server_name, optimizer_config.SERVER_OPTIMIZERS[server_name].default_learning_rate
        ),
      ),
      momentum=FLAGS.server_momentum,
      tau=_or(
        FLAGS.tau,
        defaults.tau.get(server_name, optimizer_config.SERVER_OPTIMIZERS[server_name].default_tau),
      ),
      beta_1=FLAGS.server_beta_1,
      beta_2=FLAGS.server_beta_2,
      initial_accumulator_value=FLAGS.initial_accumulator_value,
      variant=FLAGS.adaptive_variant,
      certainty_lr_from_step=FLAGS.adaadam_certainty_lr_from_step,
      noise_variance=noise_variance,
    )
    optimizer_config.check_server_optimizer(server)  # the builder's checks, without building
  except ValueError as e:
    raise ValueError(_name_the_flag(str(e), _SERVER_FIELD_FLAGS)) from None
  try:
    client = algorithm_config.ClientTrainingConfig(
      optimizer=optimizer_config.ClientOptimizerConfig(
        name=FLAGS.client_optimizer,
        learning_rate=_or(
          FLAGS.client_learning_rate,
          defaults.client_learning_rates.get(server_name, defaults.client_learning_rate),
        ),
        momentum=FLAGS.client_momentum,
        beta_1=FLAGS.client_beta_1,
        beta_2=FLAGS.client_beta_2,
        epsilon=FLAGS.client_epsilon,
        sps=optimizer_config.SPSHParams(
          c=FLAGS.sps_c, mode=FLAGS.sps_mode, eta_max=FLAGS.sps_eta_max
        ),
        delta_sgd=optimizer_config.DeltaSGDHParams(
          eta_0=FLAGS.delta_sgd_eta0,
          theta_0=FLAGS.delta_sgd_theta0,
          gamma=FLAGS.delta_sgd_gamma,
          delta=FLAGS.delta_sgd_delta,
          gradient=FLAGS.delta_sgd_gradient,
          first_step=FLAGS.delta_sgd_first_step,
          zero_rule=FLAGS.delta_sgd_zero_rule,
          eps=FLAGS.delta_sgd_eps,
        ),
      ),
      epochs=FLAGS.client_epochs_per_round,
      batch_size=_or(FLAGS.client_batch_size, defaults.client_batch_size),
      lr_schedule=optimizer_config.ScheduleConfig(
        FLAGS.client_lr_schedule, total_rounds=total_rounds
      ),
      weighting=algorithm_config.UNIFORM_WEIGHTING if dp is not None else FLAGS.client_weighting,
      max_epochs=FLAGS.client_epochs_max,
    )
  except ValueError as e:
    raise ValueError(_name_the_flag(str(e), _CLIENT_FIELD_FLAGS)) from None
  fedpa_hparams = _fedpa_from_flags(total_rounds, FLAGS.client_epochs_per_round)
  fair_hparams = _fair_hparams_from_flags()
  if (
    FLAGS.algorithm == 'fednova'
    and FLAGS.client_optimizer not in algorithm_config.FEDNOVA_CLIENT_OPTIMIZERS
  ):
    raise ValueError(
      f'--client_optimizer={FLAGS.client_optimizer} cannot run under --algorithm=fednova: its '
      f'normalisation is defined for {", ".join(algorithm_config.FEDNOVA_CLIENT_OPTIMIZERS)}'
    )
  if FLAGS.algorithm == 'qfedavg' and not client_entry.reads_learning_rate:
    raise ValueError(
      f'--client_optimizer={FLAGS.client_optimizer} cannot run under --algorithm=qfedavg: it '
      'estimates L = 1 / eta_l from the client learning rate (valid: sgd, sgdm, adam, adagrad)'
    )
  return ExperimentConfig(
    task=task_config.TaskConfig(
      name=FLAGS.task,
      seed=FLAGS.seed,
      # Only the options the task reads: the others keep TaskConfig's defaults (and are warned
      # about by `ignored_flags` when given).
      **{field: FLAGS[field].value for field in catalog.TASKS[FLAGS.task].reads},
    ),
    algorithm=FLAGS.algorithm,
    engine=FLAGS.engine,
    server=server,
    server_lr_schedule=optimizer_config.ScheduleConfig(
      FLAGS.server_lr_schedule, total_rounds=total_rounds
    ),
    client=client,
    clients_per_round=clients_per_round,
    total_rounds=total_rounds,
    seed=FLAGS.seed,
    client_sampler=_sampler_from_flags(dp),
    xla=FLAGS.xla,
    runtime=RuntimeConfig(
      rounds_per_eval=FLAGS.rounds_per_eval,
      rounds_per_checkpoint=FLAGS.rounds_per_checkpoint,
      device=FLAGS.device,
      clients_per_chunk=FLAGS.clients_per_chunk,
      workers=workers,
      worker_connect_timeout=FLAGS.worker_connect_timeout,
      worker_round_timeout=FLAGS.worker_round_timeout,
      local_workers=FLAGS.local_workers,
      target_metric=FLAGS.target_metric,
      rounds_to_target=targets.parse_thresholds('rounds_to_target', FLAGS.rounds_to_target),
    ),
    fedpa=fedpa_hparams,
    dp=dp,
    compression=compression,
    **fair_hparams,
  )


def experiment_name(config: ExperimentConfig, *, legacy: bool = False) -> str:
  """--experiment_name, or
  <task>_<algorithm>_<server opt>_<client opt>_seed<seed>[_<privacy>][_<compression>]_<hash>[_<engine>].

  The hash (`outputs.fingerprint`) covers every fingerprinted hyperparameter, so runs that differ
  in any of them (a sweep over learning rates, say) get directories of their own, and a rerun
  of the same command (even with more rounds, or another evaluation cadence) finds its run.
  --dp and --compression are named too (`dp-fixed-z1`, `dp-adaptive-z0.5`, `dp-tree-z4`,
  `dp-skellam-z1`; `quant8bit`), so that two runs that differ in them read apart. The engine is
  named unless it is tff (the default). `legacy`: the name before DP and compression were named
  (the trainer resumes a run found under it).
  """
  if FLAGS.experiment_name:
    return FLAGS.experiment_name
  engine = '' if config.engine == 'tff' else f'_{config.engine}'
  named = ''
  if not legacy:
    if config.dp is not None:
      mechanism = _DP_NAMES.get(config.dp.mechanism, config.dp.mechanism)
      named += f'_dp-{mechanism}-z{config.dp.noise_multiplier:g}'
    if config.compression is not None:
      named += f'_quant{config.compression.bits}bit'
  return (
    f'{config.task.name}_{config.algorithm}_{config.server.name}_'
    f'{config.client.optimizer.name}_seed{config.seed}{named}_'
    f'{outputs.fingerprint(hparams_record(config))}{engine}'
  )


# --dp mechanisms as experiment names show them.
_DP_NAMES = {
  'gaussian_fixed': 'fixed',
  'gaussian_adaptive': 'adaptive',
  'tree': 'tree',
  'distributed_skellam': 'skellam',
}


CELL_FLAGS = cell_flags.CELL_FLAGS  # what grid cells (--cells) may set apart


@dataclasses.dataclass(frozen=True)
class Cell:
  """One line of a --cells file: its experiment name and flags."""

  name: str
  args: tuple[str, ...]


def read_cells(path: str) -> list[Cell]:
  """The cells of a --cells file: "NAME --flag=value ..." per line; blank and # lines skipped.

  Raises:
    ValueError: one line naming the file, the line and what is wrong (a missing file, a
      repeated name, a flag other than `CELL_FLAGS`).
  """
  try:
    with open(path) as f:
      lines = f.read().splitlines()
  except OSError as e:
    raise ValueError(f'--cells: cannot read {path} ({e.strerror})') from None
  cells = []
  for number, line in enumerate(lines, 1):
    words = shlex.split(line, comments=True)
    if not words:
      continue
    name, args = words[0], tuple(words[1:])
    if name.startswith('-'):
      raise ValueError(f'--cells: {path} line {number}: starts with a flag, not a cell name')
    for arg in args:
      flag = arg.split('=', 1)[0].lstrip('-')
      if not arg.startswith('--') or '=' not in arg or flag not in CELL_FLAGS:
        raise ValueError(
          f'--cells: {path} line {number}: {arg!r}; a cell sets only --name=value of '
          f'{", ".join(CELL_FLAGS)}'
        )
    if name in {c.name for c in cells}:
      raise ValueError(f'--cells: {path} line {number}: cell {name!r} named twice')
    cells.append(Cell(name, args))
  if not cells:
    raise ValueError(f'--cells: {path} has no cells')
  return cells


def cell_configs(argv: list[str], cells: list[Cell]) -> tuple[list[ExperimentConfig], list[str]]:
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
