"""The trainer answers --help and flag mistakes without importing TensorFlow or TFF.

Importing TensorFlow and TFF takes ~9 s; `python -m run.federated_trainer` checks its flags
first (`run.flags` reads the TensorFlow-free registries and configs), so --help and a mistake in
a flag, alone or across flags, are answered at once. Each case runs a fresh process under
`python -X importtime`, which lists on stderr every module the process imports, and checks the
exit code, the message and that neither tensorflow nor tensorflow_federated is among them. A
good flag set builds the config and hparams record it built when the flag module imported them.
No timing is asserted (it depends on the machine).
"""

import dataclasses
import inspect
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tff_adaptive import registry

REPO = pathlib.Path(__file__).resolve().parents[2]
HEAVY = ('tensorflow', 'tensorflow_federated')
ENV = {**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'}


def _run(command: list[str]) -> subprocess.CompletedProcess:
  return subprocess.run(
    command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120, check=False
  )


def _trainer(args: list[str]) -> tuple[subprocess.CompletedProcess, set[str], list[str]]:
  """A fresh `python -X importtime -m run.federated_trainer *args`: the result, the top-level
  packages it imported, and its stderr without the import-time lines."""
  result = _run([sys.executable, '-X', 'importtime', '-m', 'run.federated_trainer', *args])
  imported, stderr = set(), []
  for line in result.stderr.splitlines():
    if line.startswith('import time:'):
      imported.add(line.rsplit('|', 1)[1].strip().split('.')[0])
    elif line.strip():
      stderr.append(line)
  return result, imported, stderr


def test_help_imports_neither_tensorflow_nor_tff():
  result, imported, stderr = _trainer(['--task=synthetic', '--help'])
  assert result.returncode == 0, stderr
  assert result.stdout.startswith('The one federated trainer')
  assert '  --server_optimizer (default: sgd)\n      Server optimizer' in result.stdout
  assert 'absl' in imported  # the importtime listing works
  assert imported.isdisjoint(HEAVY), imported & set(HEAVY)


# argv -> a text of the one error line (as the trainer worded it before it deferred the imports).
_MISTAKES = {
  'unknown_flag': (['--task=synthetic', '--no_such_flag=1'], "'no_such_flag'"),
  'unparsable_number': (['--task=synthetic', '--total_rounds=abc'], '--total_rounds=abc'),
  'bad_choice': (
    ['--task=nope'],
    "--task: unknown task 'nope'; valid choices: fmnist, synthetic, emnist_cr",
  ),
  'bad_number': (['--client_learning_rate=-1'], '--client_learning_rate must be > 0, got -1.0'),
  # The server optimizer's own check, made without building it.
  'server_momentum': (
    ['--task=synthetic', '--server_optimizer=sgdm', '--server_momentum=1.5'],
    '--server_momentum must be in [0, 1), got 1.5',
  ),
  # Across flags.
  'scaffold_adam': (
    ['--task=synthetic', '--algorithm=scaffold', '--client_optimizer=adam'],
    '--client_optimizer=adam cannot run under --algorithm=scaffold',
  ),
  'fedpa_burnin': (
    [
      '--task=synthetic',
      '--algorithm=fedpa',
      '--client_epochs_per_round=3',
      '--total_rounds=5',
      '--fedpa_burnin_rounds=5',
    ],
    '--fedpa_burnin_rounds=5 must be < --total_rounds=5',
  ),
  'round_timeout': (
    ['--task=synthetic', '--local_workers=2', '--worker_round_timeout=0'],
    '--worker_round_timeout must be > 0, got 0.0',
  ),
  'workers_inprocess': (
    ['--task=synthetic', '--engine=inprocess', '--local_workers=2'],
    '--workers and --local_workers need --engine=tff',
  ),
  'dp_algorithm': (
    ['--task=synthetic', '--dp=gaussian_fixed', '--algorithm=scaffold'],
    "--dp=gaussian_fixed: algorithm 'scaffold' cannot run under DP",
  ),
  'dp_noise_aware_adaptive': (
    [
      '--task=synthetic',
      '--dp=gaussian_adaptive',
      '--dp_noise_multiplier=0.5',
      '--server_optimizer=adam',
      '--dp_noise_aware_server',
    ],
    '--dp_noise_aware_server needs --dp=gaussian_fixed',
  ),
  'dp_negative_noise': (
    ['--task=synthetic', '--dp=gaussian_fixed', '--dp_noise_multiplier=-0.1'],
    '--dp_noise_multiplier=-0.1 is invalid; expected a finite number >= 0',
  ),
  'compression_with_dp': (
    ['--task=synthetic', '--dp=gaussian_fixed', '--compression=uniform'],
    '--compression=uniform cannot run with --dp=gaussian_fixed',
  ),
  'compression_bits': (
    ['--task=synthetic', '--compression=uniform', '--compression_bits=0'],
    '--compression_bits=0 is invalid; expected an integer in [1, 16]',
  ),
  # The task's data files are checked before the imports too.
  'data_files': (
    ['--task=so_lr', '--data_dir=/nonexistent'],
    'task so_lr: 3 data files missing: /nonexistent/stackoverflow.sqlite',
  ),
}


@pytest.mark.parametrize('name', list(_MISTAKES))
def test_a_flag_mistake_exits_2_without_tensorflow_or_tff(tmp_path, name):
  args, text = _MISTAKES[name]
  result, imported, stderr = _trainer([*args, f'--root_output_dir={tmp_path / "out"}'])
  assert result.returncode == 2, stderr
  assert len(stderr) == 1 and stderr[0].startswith('federated_trainer: error: '), stderr
  assert text in stderr[0], stderr[0]
  assert result.stdout == ''
  assert not (tmp_path / 'out').exists()
  assert imported.isdisjoint(HEAVY), imported & set(HEAVY)


_DRIVER = """
import json, sys
from absl import flags
from tff_adaptive.run import experiment
from tff_adaptive.run import flags as trainer_flags
flags.FLAGS(['trainer', *sys.argv[1:]])
try:
  config = trainer_flags.experiment_config_from_flags()
  out = {
    'record': experiment.hparams_record(config),
    'name': trainer_flags.experiment_name(config),
    'ignored': trainer_flags.ignored_flags(config),
  }
except ValueError as e:
  out = {'error': str(e)}
out['imported'] = sorted(m for m in %r if m in sys.modules)
print(json.dumps(out))
""" % (HEAVY,)


def _flags_driver(args: list[str]) -> dict:
  """run.flags alone, in a fresh process: the config's record, name and warnings (or the error),
  and which of tensorflow / tensorflow_federated it imported."""
  result = _run([sys.executable, '-c', _DRIVER, *args])
  assert result.returncode == 0, result.stderr
  return json.loads(result.stdout)


# tests/run/test_trainer.py's run A: its default name pins the fingerprint of hparams.json from
# before the imports were deferred.
RUN_A = ['--task=synthetic', '--server_optimizer=adam', '--server_learning_rate=0.01']
RUN_A_NAME = 'synthetic_fedopt_adam_sgd_seed1_d08f19'


def test_a_good_flag_set_builds_the_same_record_without_tensorflow_or_tff():
  out = _flags_driver([*RUN_A, '--total_rounds=8'])
  assert out['imported'] == []
  assert out['name'] == RUN_A_NAME
  assert out['record']['server'] == {
    'name': 'adam',
    'learning_rate': 0.01,
    'tau': 0.001,
    'beta_1': 0.9,
    'beta_2': 0.999,
    'initial_accumulator_value': 0.0,
    'variant': 'published',
  }


def test_names_carry_dp_and_compression_and_keep_the_legacy_name_for_resumes():
  """Two runs that differ in --dp or --compression read apart by name; every other run's name is
  as before (RUN_A), and `legacy=True` gives the name a DP run had before (the trainer resumes a
  run found there)."""
  dp = [*RUN_A, '--dp=gaussian_fixed', '--dp_noise_multiplier=1.5', '--clients_per_round=10']
  out = _flags_driver(dp)
  assert out['name'].startswith('synthetic_fedopt_adam_sgd_seed1_dp-fixed-z1.5_'), out['name']
  skellam = _flags_driver([*dp[:3], '--dp=distributed_skellam', '--clients_per_round=10'])
  assert '_seed1_dp-skellam-z1_' in skellam['name']
  quantised = _flags_driver([*RUN_A, '--compression=uniform', '--compression_bits=4'])
  assert '_seed1_quant4bit_' in quantised['name']
  legacy = _run(
    [
      sys.executable,
      '-c',
      'import sys\nfrom absl import flags\nfrom tff_adaptive.run import flags as f\n'
      "flags.FLAGS(['t', *sys.argv[1:]])\n"
      'print(f.experiment_name(f.experiment_config_from_flags(), legacy=True))',
      *dp,
    ]
  )
  assert legacy.returncode == 0, legacy.stderr
  assert legacy.stdout.strip() == out['name'].replace('_dp-fixed-z1.5', '')


@pytest.mark.parametrize(
  'name, server',
  [('fedavg', 'sgd'), ('fedavgm', 'sgdm'), ('fedadagrad', 'adagrad'), ('fedadam', 'adam')]
  + [('fedyogi', 'yogi')],
)
def test_the_papers_names_are_answered_with_the_flags_to_use(name, server):
  for flag in ('algorithm', 'server_optimizer'):
    out = _flags_driver([f'--{flag}={name}'])
    assert out['error'].startswith(
      f'--{flag}={name}: {name} is --algorithm=fedopt --server_optimizer={server} '
    ), out


@pytest.mark.parametrize(
  'args, task',
  [
    ([], {'synthetic_alpha': 1.0, 'synthetic_beta': 1.0}),
    (
      ['--synthetic_iid', '--synthetic_beta=0'],
      {'synthetic_alpha': 1.0, 'synthetic_beta': 0.0, 'synthetic_iid': True},
    ),
    (
      ['--synthetic_generator=leaf_code'],
      {'synthetic_alpha': 1.0, 'synthetic_beta': 1.0, 'synthetic_generator': 'leaf_code'},
    ),
  ],
)
def test_synthetic_data_options_are_recorded_only_when_set(args, task):
  """--synthetic_iid and --synthetic_generator enter hparams.json only away from their defaults,
  so the records (and default names) of earlier synthetic runs stand."""
  out = _flags_driver(['--task=synthetic', *args])
  assert out['record']['task'] == {'name': 'synthetic', 'seed': 1, 'num_clients': None, **task}
  defaults = _flags_driver(
    ['--task=synthetic', '--synthetic_generator=fedprox', '--nosynthetic_iid']
  )
  assert (out['name'] == defaults['name']) == (not args)


def test_every_part_of_the_config_is_built_without_tensorflow_or_tff():
  """FedPA with SPS clients on a Reddi et al. task: task defaults, every optimizer and
  algorithm config, the schedules, the warnings."""
  out = _flags_driver(
    [
      '--task=emnist_cr',
      '--algorithm=fedpa',
      '--server_optimizer=yogi',
      '--client_optimizer=sps',
      '--client_epochs_per_round=3',
      '--server_lr_schedule=step_decay',
      '--server_momentum=0.5',
    ]
  )
  assert out['imported'] == []
  record = out['record']
  assert record['task'] == {'name': 'emnist_cr', 'seed': 1}
  assert record['server']['name'] == 'yogi' and record['server']['tau'] == pytest.approx(1e-4)
  assert record['server']['learning_rate'] == pytest.approx(10**-2.5)
  assert record['server_lr_schedule'] == {'name': 'step_decay', 'total_rounds': 1500}
  assert record['client']['optimizer']['name'] == 'sps'
  assert record['client']['optimizer']['sps']['mode'] == 'smooth_iter'
  assert record['client']['batch_size'] == 20 and record['clients_per_round'] == 10
  assert record['fedpa'] == {
    'burnin_rounds': 0,
    'burnin_epochs': 1,
    'shrinkage': 0.01,
    'shrinkage_form': 'paper',
    'solver': 'dp',
  }
  assert out['ignored'] == ["--server_momentum is ignored by server optimizer 'yogi'"]
  assert out['name'].startswith('emnist_cr_fedpa_yogi_sps_seed1_')


def test_a_cross_flag_error_from_the_flags_module_alone():
  out = _flags_driver(['--task=synthetic', '--algorithm=fednova', '--client_optimizer=adam'])
  assert out['imported'] == []
  assert out['error'].startswith('--client_optimizer=adam cannot run under --algorithm=fednova')


# -------------------------------------------------------------------------------------------
# The TensorFlow-free registries name builders that exist.


def _lazy_references(value, seen=None):
  """The `registry.Lazy` builders an entry holds: itself, in its fields, or used by a lambda."""
  seen = set() if seen is None else seen
  if id(value) in seen:
    return
  seen.add(id(value))
  if isinstance(value, registry.Lazy):
    yield value
  elif dataclasses.is_dataclass(value) and not isinstance(value, type):
    for field in dataclasses.fields(value):
      yield from _lazy_references(getattr(value, field.name), seen)
  elif inspect.isfunction(value):
    for cell in value.__closure__ or ():
      yield from _lazy_references(cell.cell_contents, seen)
    for name in value.__code__.co_names:
      if isinstance(value.__globals__.get(name), registry.Lazy):
        yield value.__globals__[name]


def test_every_registry_entry_names_an_existing_builder():
  from tff_adaptive.algorithms import config as algorithm_config  # pylint: disable=g-import-not-at-top
  from tff_adaptive.engines import config as engine_config  # pylint: disable=g-import-not-at-top
  from tff_adaptive.optimizers import config as optimizer_config  # pylint: disable=g-import-not-at-top
  from tff_adaptive.tasks import catalog  # pylint: disable=g-import-not-at-top

  registries = (
    algorithm_config.ALGORITHMS,
    engine_config.ENGINES,
    optimizer_config.CLIENT_OPTIMIZERS,
    optimizer_config.SCHEDULES,
    optimizer_config.SERVER_OPTIMIZERS,
    catalog.TASKS,
  )
  for reg in registries:
    for name, entry in reg.items():
      references = list(_lazy_references(entry))
      assert references, (reg.kind, name)
      for reference in references:
        assert callable(reference.resolve()), (reg.kind, name, reference.target)
