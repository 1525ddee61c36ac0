"""DP-FedAvg vs DP-FedAdam vs noise-aware DP-FedAdam on Fashion-MNIST with many small clients.

Issue 22's study of the library's user-level DP (`--dp`, docs/privacy.md): no paper publishes
this setting, so the table has no "published" column; it sets the two servers, the noise-aware
second moment and the two clip rules side by side against the epsilon they spend.

Population: Fashion-MNIST as 1000 clients x 60 examples (48 to train), Dirichlet(1.0) labels,
the CNN of Kim et al. 2024 (21,840 weights); 50 clients a round (q = 0.05), one local epoch of
SGD (batch 16, lr 0.1). Many small clients because user-level DP needs them: the noise on the
mean, z C / m per coordinate, falls with the clients per round m, and epsilon with the sampling
rate q = m / N. Cells (each at every --noise_multipliers z, plus both servers without DP):

* fixed clip C = --clip: FedAvg (server SGD, lr 1), FedAdam (lr --fedadam_lr, tau --tau) and
  FedAdam with the noise-aware second moment (`--dp_noise_aware_server`);
* adaptive clip from --initial_clip to the median update norm (Andrew et al. 2021): FedAvg, FedAdam;
* DP-FTRL (Kairouz et al. 2021, `--dp=tree`): the fixed clip, tree noise restarted every epoch of
  N / m rounds, clients in epochs (no amplification by sampling, so more epsilon for the same z):
  FedAvg (server SGD, lr 1, which is what FTRL's prefix sums are for);
* without DP, uploads quantised to each of --compression_bits (`--compression=uniform`): FedAvg,
  FedAdam, against the float32 cells.

Every client counts once (uniform weights, as DP requires; the no-DP cells too, so that the only
difference is the noise and the clip). Epsilon is the trainer's `dp_epsilon` of the last round:
RDP of sampling exactly m of N clients without replacement (the tree: of its restarts, each
client once per epoch), delta = 1 / N^1.1.

  .venv/bin/python -m reproductions.dp_fedopt.reproduce --parallel=2
  .venv/bin/python -m reproductions.dp_fedopt.reproduce --publish --parallel=2  # the committed run

Cells are `run.federated_trainer` processes (`reproductions.cell_runner`: resumable, a progress
line with ETA every 30 s, one TF thread per trainer). Afterwards it writes into --out (default
runs/dp_fmnist/report; with --publish, reproductions/dp_fedopt/results/fmnist): dp_fmnist.csv
and .md (per cell: epsilon, final accuracy, the mean of the last 5 evaluations) and
dp_fmnist.png (accuracy against epsilon; the curves at the middle noise level).
"""

import csv
import dataclasses
import os
import statistics
import sys

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions.dp_fedopt.published import SETTINGS as STUDY

# The defaults of the flags that change the numbers: the study's fixed setting (published.py).
flags.DEFINE_integer('rounds', STUDY['rounds'], 'Rounds per cell.')
flags.DEFINE_list(
  'noise_multipliers', list(STUDY['noise_multipliers']), 'Noise multipliers z of the DP cells.'
)
flags.DEFINE_list(
  'compression_bits',
  list(STUDY['compression_bits']),
  'Bits of the quantised-upload cells (no DP), one cell each per server.',
)
flags.DEFINE_integer('num_clients', STUDY['num_clients'], 'Clients N.')
flags.DEFINE_integer(
  'examples_per_client', STUDY['examples_per_client'], 'Examples per client (80% to train).'
)
flags.DEFINE_float('dirichlet_alpha', STUDY['dirichlet_alpha'], 'Dirichlet label concentration.')
flags.DEFINE_integer('clients_per_round', STUDY['clients_per_round'], 'Clients per round m.')
flags.DEFINE_float(
  'client_learning_rate', STUDY['client_learning_rate'], 'Client SGD learning rate.'
)
flags.DEFINE_float('clip', STUDY['clip'], 'Fixed clip C.')
flags.DEFINE_float('initial_clip', STUDY['initial_clip'], "The adaptive clip's initial C.")
flags.DEFINE_float(
  'fedadam_lr',
  STUDY['fedadam_lr'],
  "FedAdam's server learning rate (a 60-round pilot at z = 1: see the README).",
)
flags.DEFINE_float('tau', STUDY['tau'], "FedAdam's tau.")
flags.DEFINE_integer('seed', STUDY['seed'], 'Seed of every cell (data partition, sampling, noise).')
flags.DEFINE_integer('parallel', 2, 'Trainers at once (each on one TF thread).')
flags.DEFINE_integer(
  'rounds_per_eval', STUDY['rounds_per_eval'], 'Evaluate every this many rounds.'
)
flags.DEFINE_integer('rounds_per_checkpoint', 25, 'Checkpoint every this many rounds.')
cell_runner.define_output_flags('runs/dp_fmnist')
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = (
  'rounds',
  'noise_multipliers',
  'compression_bits',
  'num_clients',
  'examples_per_client',
  'dirichlet_alpha',
  'clients_per_round',
  'client_learning_rate',
  'clip',
  'initial_clip',
  'fedadam_lr',
  'tau',
  'seed',
  'rounds_per_eval',
)
LAST_EVALS = 5
# What a client sends without compression: the CNN's 21,840 float32 weights and its weight w_i.
FLOAT32_BITS = 32 * (21_840 + 1)

# (server, noise-aware second moment) by configuration name.
SERVERS = {
  'fedavg': ('sgd', False),
  'fedadam': ('adam', False),
  'fedadam_aware': ('adam', True),
}
# The configurations of each clip rule (the noise-aware server needs the fixed clip's known
# variance); 'none': without DP.
CLIP_RULES = {
  'none': ('fedavg', 'fedadam'),
  'fixed': ('fedavg', 'fedadam', 'fedadam_aware'),
  'adaptive': ('fedavg', 'fedadam'),
  'tree': ('fedavg',),
}
DP_RULES = ('fixed', 'adaptive', 'tree')
RULE_NAMES = {
  'none': 'no DP',
  'fixed': 'fixed clip',
  'adaptive': 'adaptive clip',
  'tree': 'tree, DP-FTRL',
}

UsageError = cell_runner.UsageError


@dataclasses.dataclass(frozen=True)
class Cell:
  name: str
  clip_rule: str
  config: str
  noise_multiplier: float | None
  bits: int | None = None  # quantised uploads (--compression=uniform), no DP


def noise_multipliers() -> list[float]:
  values = []
  for text in FLAGS.noise_multipliers:
    try:
      value = float(text)
    except ValueError:
      raise UsageError(f'--noise_multipliers: {text!r} is not a number') from None
    if not value > 0:
      raise UsageError(f'--noise_multipliers: {text!r} must be > 0')
    values.append(value)
  if not values:
    raise UsageError('--noise_multipliers: give at least one')
  return list(dict.fromkeys(values))


def compression_bits() -> list[int]:
  values = []
  for text in FLAGS.compression_bits:
    if not text.isdigit() or not 1 <= int(text) <= 16:
      raise UsageError(f'--compression_bits: {text!r} is not an integer in [1, 16]')
    values.append(int(text))
  return list(dict.fromkeys(values))


def build_cells() -> list[Cell]:
  cells = [Cell(f'nodp_{c}', 'none', c, None) for c in CLIP_RULES['none']]
  for z in noise_multipliers():
    for rule in DP_RULES:
      cells += [Cell(f'{rule}_{c}_z{z:g}', rule, c, z) for c in CLIP_RULES[rule]]
  for bits in compression_bits():
    cells += [Cell(f'uniform{bits}_{c}', 'none', c, None, bits) for c in CLIP_RULES['none']]
  return cells


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  server, aware = SERVERS[cell.config]
  args = [
    '--task=fmnist',
    f'--num_clients={FLAGS.num_clients}',
    f'--examples_per_client={FLAGS.examples_per_client}',
    f'--dirichlet_alpha={FLAGS.dirichlet_alpha}',
    '--engine=inprocess',
    '--client_optimizer=sgd',
    f'--client_learning_rate={FLAGS.client_learning_rate}',
    '--client_batch_size=16',
    '--client_weighting=uniform',
    f'--clients_per_round={FLAGS.clients_per_round}',
    f'--server_optimizer={server}',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={FLAGS.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
  ]
  if server == 'adam':
    args += [f'--server_learning_rate={FLAGS.fedadam_lr}', f'--tau={FLAGS.tau}']
  else:
    args.append('--server_learning_rate=1.0')
  if cell.clip_rule == 'fixed':
    args += ['--dp=gaussian_fixed', f'--dp_clip={FLAGS.clip}']
  elif cell.clip_rule == 'adaptive':
    args += ['--dp=gaussian_adaptive', f'--dp_clip={FLAGS.initial_clip}']
  elif cell.clip_rule == 'tree':
    args += ['--dp=tree', f'--dp_clip={FLAGS.clip}']
  if cell.noise_multiplier is not None:
    args.append(f'--dp_noise_multiplier={cell.noise_multiplier:g}')
  if aware:
    args.append('--dp_noise_aware_server')
  if cell.bits is not None:
    args += ['--compression=uniform', f'--compression_bits={cell.bits}']
  return [sys.executable, '-m', 'run.federated_trainer', *args]


@dataclasses.dataclass
class CellResult:
  rounds: int = 0
  curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  epsilon: float | None = None
  clip: float | None = None
  upload_bits: float | None = None

  @property
  def final(self) -> float | None:
    return 100 * self.curve[-1][1] if self.curve else None

  @property
  def last5(self) -> float | None:
    return 100 * statistics.mean(a for _, a in self.curve[-LAST_EVALS:]) if self.curve else None


def cell_result(runs_dir: str, cell: Cell) -> CellResult:
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  result = CellResult(rounds=cell_runner.last_round(rows))
  for row in sorted(rows, key=lambda r: cell_runner.to_float(r.get('round_num')) or 0):
    accuracy = cell_runner.to_float(row.get('eval_accuracy'))
    if accuracy is not None:
      result.curve.append((int(cell_runner.to_float(row['round_num'])), accuracy))
    result.epsilon = cell_runner.to_float(row.get('dp_epsilon'))
    result.clip = cell_runner.to_float(row.get('dp_clip'))
    result.upload_bits = cell_runner.to_float(row.get('compression_bits_per_client'))
  return result


def _fmt(value, digits=2) -> str:
  return '' if value is None else f'{value:.{digits}f}'


def _label(cell: Cell) -> str:
  names = {'fedavg': 'FedAvg', 'fedadam': 'FedAdam', 'fedadam_aware': 'FedAdam, noise-aware'}
  rule = RULE_NAMES[cell.clip_rule]
  if cell.bits is not None:
    rule = f'no DP, {cell.bits}-bit uploads'
  return f'{names[cell.config]} ({rule})'


def table_rows(cells: list[Cell], results: dict[str, CellResult]) -> list[dict]:
  rows = []
  for cell in cells:
    r = results[cell.name]
    rows.append(
      {
        'clip_rule': cell.clip_rule,
        'server': cell.config,
        'noise_multiplier': '' if cell.noise_multiplier is None else f'{cell.noise_multiplier:g}',
        'compression_bits': '' if cell.bits is None else cell.bits,
        'upload_bits_per_client': '' if r.upload_bits is None else int(r.upload_bits),
        'epsilon': _fmt(r.epsilon),
        'rounds': r.rounds,
        'final_accuracy': _fmt(r.final),
        f'accuracy_last{LAST_EVALS}evals': _fmt(r.last5),
        'final_clip': _fmt(r.clip, 4),
      }
    )
  return rows


def summary_lines(cells: list[Cell], results: dict[str, CellResult]) -> list[str]:
  zs = noise_multipliers()
  epsilons = {}
  for z in zs:  # the Gaussian mechanisms' (the tree's is given in its cells)
    found = [
      results[c.name].epsilon for c in cells if c.noise_multiplier == z and c.clip_rule != 'tree'
    ]
    epsilons[z] = next((e for e in found if e is not None), None)
  head = ['configuration', 'no DP'] + [f'z = {z:g} (eps {_fmt(epsilons[z])})' for z in zs]
  lines = [
    f'Mean test accuracy of the last {LAST_EVALS} evaluations (%), by noise multiplier z and '
    'the epsilon it spends (the tree spends more for the same z: its epsilon is in its cells):',
    '',
  ]
  body = []
  for rule in DP_RULES:
    for config in CLIP_RULES[rule]:
      cols = [_label(Cell('', rule, config, None))]
      base = results.get(f'nodp_{config if config != "fedadam_aware" else "fedadam"}')
      cols.append(_fmt(base.last5) if base else '')
      for z in zs:
        r = results[f'{rule}_{config}_z{z:g}']
        tree_eps = f' (eps {_fmt(r.epsilon)})' if rule == 'tree' and r.epsilon is not None else ''
        cols.append(_fmt(r.last5) + tree_eps)
      body.append(cols)
  lines += publish.markdown_table(head, body)
  aware = []
  for z in zs:
    plain, fixed = (
      results[f'fixed_fedadam_z{z:g}'].last5,
      results[f'fixed_fedadam_aware_z{z:g}'].last5,
    )
    if plain is not None and fixed is not None:
      aware.append(f'{fixed - plain:+.2f} at z = {z:g}')
  lines += [
    '',
    'Noise-aware minus plain DP-FedAdam (fixed clip; accuracy points): '
    + (', '.join(aware) or 'not run yet')
    + '.',
    '',
    f'Quantised uploads, no DP (float32: {FLOAT32_BITS} bits per client and round):',
    '',
    '| server | bits per value | bits per client and round | vs float32 | accuracy % | '
    'minus float32 (points) |',
    '|---|---|---|---|---|---|',
  ]
  for bits in compression_bits():
    for config in CLIP_RULES['none']:
      r, base = results[f'uniform{bits}_{config}'], results[f'nodp_{config}']
      sent = '' if r.upload_bits is None else f'{int(r.upload_bits)}'
      ratio = '' if r.upload_bits is None else f'{FLOAT32_BITS / r.upload_bits:.1f}x fewer'
      diff = '' if r.last5 is None or base.last5 is None else f'{r.last5 - base.last5:+.2f}'
      lines.append(f'| {config} | {bits} | {sent} | {ratio} | {_fmt(r.last5)} | {diff} |')
  return lines


def write_report(cells: list[Cell], runs_dir: str, out: str) -> None:
  os.makedirs(out, exist_ok=True)
  results = {c.name: cell_result(runs_dir, c) for c in cells}
  rows = table_rows(cells, results)
  with publish.atomic_output(os.path.join(out, 'dp_fmnist.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  example = next(c for c in cells if c.config == 'fedadam_aware')
  delta = FLAGS.num_clients**-1.1
  lines = [
    '# DP-FedAvg vs DP-FedAdam vs noise-aware DP-FedAdam, fixed vs adaptive clipping '
    '(Fashion-MNIST, 1000 small clients)',
    '',
    f'- Command: `{cell_runner.command_line("//reproductions/dp_fedopt:reproduce")}`',
    f'- {FLAGS.num_clients} clients x {FLAGS.examples_per_client} examples (80% train), '
    f'Dirichlet({FLAGS.dirichlet_alpha:g}); {FLAGS.clients_per_round} clients a round; '
    f'{FLAGS.rounds} rounds; seed {FLAGS.seed}; client SGD lr {FLAGS.client_learning_rate:g}, '
    f'batch 16, 1 epoch; FedAvg server lr 1; FedAdam lr {FLAGS.fedadam_lr:g}, tau {FLAGS.tau:g}; '
    f'fixed clip {FLAGS.clip:g}; adaptive clip from {FLAGS.initial_clip:g} to the median norm '
    f'(rate 0.2); the tree with the fixed clip, restarted every '
    f'{FLAGS.num_clients // FLAGS.clients_per_round} rounds. Epsilon at delta = 1/N^1.1 = '
    f'{delta:.3g} (RDP; sampling without replacement every round, the tree: its restarts, each '
    'client once per epoch).',
    f'- Trainer command of a cell: `{cell_runner.shown_command(trainer_command(example, runs_dir))}`',
    f'- Evaluation every {FLAGS.rounds_per_eval} rounds on the 10,000 test images.',
    cell_runner.stamp_line(),
    '',
    *summary_lines(cells, results),
    '',
    *publish.markdown_table(rows[0], [row.values() for row in rows]),
  ]
  with publish.atomic_output(os.path.join(out, 'dp_fmnist.md')) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(summary_lines(cells, results)), flush=True)
  print(f'wrote {out}/dp_fmnist.csv and .md', flush=True)
  write_figure(cells, results, out)


def write_figure(cells: list[Cell], results: dict[str, CellResult], out: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (ax, curves) = plt.subplots(1, 2, figsize=(13, 4.8))
  colors = {'fedavg': 'tab:blue', 'fedadam': 'tab:red', 'fedadam_aware': 'tab:green'}

  def color(rule: str, config: str) -> str:
    return 'tab:purple' if rule == 'tree' else colors[config]

  styles = {'fixed': '-', 'adaptive': '--', 'tree': '-.'}
  zs = noise_multipliers()
  for rule in DP_RULES:
    for config in CLIP_RULES[rule]:
      points = [
        (results[f'{rule}_{config}_z{z:g}'].epsilon, results[f'{rule}_{config}_z{z:g}'].last5)
        for z in zs
      ]
      points = [(e, a) for e, a in points if e is not None and a is not None]
      if points:
        ax.plot(
          *zip(*points),
          marker='o',
          color=color(rule, config),
          linestyle=styles[rule],
          label=_label(Cell('', rule, config, None)),
        )
  for config in CLIP_RULES['none']:
    base = results[f'nodp_{config}'].last5
    if base is not None:
      ax.axhline(
        base, color=colors[config], linestyle=':', label=f'{_label(Cell("", "none", config, None))}'
      )
  ax.set_xscale('log')
  ax.set_xlabel(f'epsilon after {FLAGS.rounds} rounds (delta = 1/N^1.1)')
  ax.set_ylabel(f'test accuracy, mean of last {LAST_EVALS} evals (%)')
  ax.set_title('accuracy against privacy (one point per noise multiplier)')
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  middle = zs[len(zs) // 2]
  for cell in cells:
    if cell.noise_multiplier not in (None, middle) or cell.bits is not None:
      continue
    curve = results[cell.name].curve
    if curve:
      curves.plot(
        [r for r, _ in curve],
        [100 * a for _, a in curve],
        color=color(cell.clip_rule, cell.config),
        linestyle=styles.get(cell.clip_rule, ':'),
        label=_label(cell),
      )
  curves.set_xlabel('round')
  curves.set_ylabel('test accuracy (%)')
  curves.set_title(f'training curves at z = {middle:g} (dotted: no DP)')
  curves.grid(alpha=0.3)
  curves.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(out, 'dp_fmnist.png')
  publish.save_figure(fig, path, dpi=120)
  plt.close(fig)
  print(f'wrote {path}', flush=True)


def main(argv: list[str]) -> int:
  return cell_runner.run_main('reproduce', _main, argv)


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  cells = build_cells()
  runs_dir = publish.resolve(FLAGS.runs_dir)
  out = publish.output_from_flags('reproductions.dp_fedopt.reproduce', FLAGS, SETTINGS)
  return cell_runner.drive('reproduce', FLAGS, cells, runs_dir, out, trainer_command, write_report)


if __name__ == '__main__':
  cell_runner.app_run(main)
