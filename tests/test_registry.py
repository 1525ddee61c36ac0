"""Registries: one "unknown X; valid choices" error everywhere; adding a part is one entry."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import registry
from tff_adaptive import tasks
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers import schedules
from tff_adaptive.optimizers import server as server_optimizers

REPO = pathlib.Path(__file__).resolve().parents[1]
REGISTRIES = {
  'task': tasks.TASKS,
  'algorithm': algorithms.ALGORITHMS,
  'engine': engines.ENGINES,
  'server optimizer': server_optimizers.SERVER_OPTIMIZERS,
  'client optimizer': client_optimizers.CLIENT_OPTIMIZERS,
  'learning-rate schedule': schedules.SCHEDULES,
}


@pytest.mark.parametrize('kind', list(REGISTRIES))
def test_every_registry_names_the_kind_and_the_valid_choices(kind):
  reg = REGISTRIES[kind]
  assert reg.kind == kind
  with pytest.raises(ValueError) as error:
    reg['nope']  # pylint: disable=pointless-statement
  assert str(error.value) == f"unknown {kind} 'nope'; valid choices: {', '.join(reg)}"
  assert reg.get('nope') is None  # still a Mapping
  assert 'nope' not in reg and len(reg) == len(list(reg)) >= 2


def test_register_adds_once():
  reg = registry.Registry('widget', {'a': 1})
  assert reg.register('b', 2) == 2 and reg['b'] == 2 and reg.names == ('a', 'b')
  with pytest.raises(ValueError, match="widget 'a' is already registered"):
    reg.register('a', 3)


def test_builders_reject_unknown_names_through_their_registry():
  with pytest.raises(ValueError, match="unknown client optimizer 'adamw'"):
    client_optimizers.ClientOptimizerConfig('adamw')
  with pytest.raises(ValueError, match="unknown server optimizer 'lamb'"):
    server_optimizers.build_server_optimizer(server_optimizers.ServerOptimizerConfig('lamb'))
  with pytest.raises(ValueError, match="unknown learning-rate schedule 'cosine'"):
    schedules.build_schedule(0.1, schedules.ScheduleConfig('cosine'))
  with pytest.raises(ValueError, match="unknown engine 'tpu'"):
    engines.build_engine('tpu', None)


def test_a_new_server_optimizer_is_one_registry_entry_for_the_trainer(tmp_path):
  """Registering an optimizer (no default lr in any task) makes the trainer accept it."""
  script = textwrap.dedent(
    f"""
    import sys
    from absl import app
    from tff_adaptive.run import federated_trainer
    from tff_adaptive.optimizers import server
    server.SERVER_OPTIMIZERS.register(
      'half_sgd', server.ServerOptimizerEntry(lambda c: server.build_fedavg_sgd(0.5), 0.5))
    sys.argv = ['trainer', '--task=synthetic', '--server_optimizer=half_sgd',
                '--total_rounds=2', '--rounds_per_eval=2', '--root_output_dir={tmp_path}']
    app.run(federated_trainer.main)
    """
  )
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run(
    [sys.executable, '-c', script],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'round 2/2' in result.stdout
  [path] = tmp_path.glob('synthetic_fedopt_half_sgd_sgd_seed1_*/hparams.json')
  hparams = path.read_text()
  assert '"learning_rate": 0.5' in hparams
