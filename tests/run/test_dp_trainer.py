"""The trainer's --dp: epsilon after every round, both engines, an exact resume, one-line refusals."""

import csv
import json
import math
import os
import pathlib
import subprocess
import sys
import types

import pytest
import tensorflow as tf

from tests import trainer_processes
from tests.metrics_close import assert_rows_close
from tff_adaptive.aggregators import compression
from tff_adaptive.core import skellam
from tff_adaptive.privacy import accounting
from tff_adaptive.run import provenance
from tff_adaptive.tasks import models

ROUNDS = 4
# Adaptive clipping with noise on 10 of synthetic's 100 clients: both the value noise and the
# clip's count noise are drawn, so an exact resume shows both are functions of (seed, round).
ARGS = [
  '--task=synthetic',
  '--clients_per_round=10',
  '--dp=gaussian_adaptive',
  '--dp_noise_multiplier=0.5',
  '--dp_clip=0.1',
  '--rounds_per_eval=1',
  '--rounds_per_checkpoint=1',
]


def _train(tmp_path, name, *extra, args=ARGS):
  result = trainer_processes.run(
    [*args, f'--root_output_dir={tmp_path}', f'--experiment_name={name}', *extra], timeout=600
  )
  assert result.returncode == 0, result.stderr
  assert trainer_processes.stderr_lines(result.stderr) == [], result.stderr
  with open(tmp_path / name / 'metrics.csv') as f:
    return result, list(csv.DictReader(f))


@pytest.fixture(scope='module')
def inprocess_run(tmp_path_factory):
  tmp_path = tmp_path_factory.mktemp('dp')
  return tmp_path, *_train(tmp_path, 'whole', '--engine=inprocess', f'--total_rounds={ROUNDS}')


def test_epsilon_after_every_round_is_the_accountants(inprocess_run):
  _, result, rows = inprocess_run
  delta = 100**-1.1  # 1 / N^1.1
  by_round = accounting.EpsilonByRound(0.5, 10, 100, 'fixed_size', delta)
  assert [float(r['dp_epsilon']) for r in rows] == pytest.approx(
    [by_round.epsilon(t) for t in range(1, ROUNDS + 1)], rel=1e-12
  )
  # The same as composing T rounds from scratch (the reference computation of dp_accounting).
  run = accounting.GaussianRounds(0.5, ROUNDS, 10, 100, 'fixed_size')
  assert float(rows[-1]['dp_epsilon']) == pytest.approx(accounting.epsilon(run, delta), rel=1e-12)
  epsilon = accounting.epsilon(run, delta)
  # The line states the total z and what the aggregation adds: z_v = (z^-2 - (2 sigma_b)^-2)^-1/2
  # on the updates, sigma_b = m / 20 on the clip's count (the accountant's inputs).
  z_v = (0.5**-2 - 1.0**-2) ** -0.5
  assert (
    f'DP: gaussian_adaptive, noise multiplier 0.5 (updates z_v {z_v:.4g}, clip count sigma_b '
    '0.5: together worth z 0.5), clip 0.1, 10 of 100 clients per round; '
    f'epsilon after {ROUNDS} rounds: {epsilon:.4g} at delta {delta:.3g} (RDP, sampling fixed_size)'
  ) in result.stdout
  assert f'dp_epsilon={epsilon:.4f}' in result.stdout.splitlines()[-2]  # the final line
  clips = [float(r['dp_clip']) for r in rows]
  assert len(set(clips)) == ROUNDS and clips[0] != 0.1  # the clip adapts every round


def test_hparams_json_records_the_noise_the_aggregation_adds(inprocess_run):
  tmp_path, _, _ = inprocess_run
  with open(tmp_path / 'whole' / 'hparams.json') as f:
    record = json.load(f)
  assert record['dp']['noise_multiplier'] == 0.5
  assert record['dp_noise'] == {
    'mechanism': 'gaussian_adaptive',
    'noise_multiplier': 0.5,
    'value_noise_multiplier': pytest.approx((0.5**-2 - 1.0**-2) ** -0.5, rel=1e-12),
    'clip': 0.1,
    'clients_per_round': 10,
    'count_noise_stddev': 0.5,
    'count_noise_multiplier': 1.0,
    'effective_noise_multiplier': pytest.approx(0.5, rel=1e-12),
  }


def test_the_tff_engine_writes_the_same_metrics(inprocess_run, tmp_path):
  _, _, rows = inprocess_run
  _, tff_rows = _train(tmp_path, 'tff', '--engine=tff', f'--total_rounds={ROUNDS}')
  assert_rows_close(tff_rows, rows, n_examples=1)


@pytest.mark.parametrize('engine', ['inprocess', 'tff'])
def test_a_resumed_run_adds_the_same_noise(inprocess_run, engine):
  # The DP query's state (clip, noise round) is in the checkpoint on both engines: the resumed
  # run's rows are the uninterrupted run's (engine tff: to TFF's rounding, see its parity test).
  tmp_path, _, rows = inprocess_run
  name = f'resumed_{engine}'
  _train(tmp_path, name, f'--engine={engine}', '--total_rounds=2')
  result, resumed = _train(tmp_path, name, f'--engine={engine}', f'--total_rounds={ROUNDS}')
  assert 'after round 2' in result.stdout  # it resumed, not restarted
  if engine == 'tff':
    assert_rows_close(resumed, rows, n_examples=1)
    return
  for whole, again in zip(rows, resumed):
    whole, again = dict(whole), dict(again)
    del whole['seconds_per_round'], again['seconds_per_round']
    assert whole == again


@pytest.mark.parametrize(
  'args,message',
  [
    (['--algorithm=qfedavg'], "--dp=gaussian_adaptive: algorithm 'qfedavg' cannot run under DP"),
    (['--dp_noise_multiplier=1.0'], '--dp_noise_multiplier=1 is too large for gaussian_adaptive'),
    (['--dp_target_quantile=1.5'], '--dp_target_quantile=1.5 is invalid; expected (0, 1)'),
    (['--dp_delta=0'], '--dp_delta=0.0 is invalid; expected (0, 1)'),
    (
      ['--dp=tree', '--client_sampler=fast'],
      '--dp=tree needs --client_sampler=epoch (each client at most once per tree',
    ),
    (
      ['--dp=gaussian_fixed', '--client_sampler=epoch'],
      '--dp=gaussian_fixed accounts m clients drawn afresh every round',
    ),
    (
      ['--dp=tree', '--dp_noise_aware_server', '--server_optimizer=adam'],
      '--dp_noise_aware_server needs --dp=gaussian_fixed: with tree',
    ),
    (
      ['--dp=distributed_skellam', '--engine=inprocess'],
      '--dp=distributed_skellam needs --engine=tff (got --engine=inprocess): secure aggregation',
    ),
    (['--dp=distributed_skellam', '--dp_bits=3'], '--dp_bits=3 is too few for 10 clients'),
    (['--dp=distributed_skellam', '--dp_bits=23'], '--dp_bits=23 is invalid; expected an integer'),
    (
      ['--dp=distributed_skellam', '--local_workers=2'],
      '--dp=distributed_skellam runs on one TFF worker: secure aggregation is simulated',
    ),
  ],
)
def test_bad_dp_input_is_one_line_and_exit_2(tmp_path, args, message):
  result = trainer_processes.run([*ARGS, f'--root_output_dir={tmp_path}', *args], timeout=120)
  assert result.returncode == 2
  lines = trainer_processes.stderr_lines(result.stderr)
  assert len(lines) == 1 and lines[0].startswith('federated_trainer: error: '), lines
  assert message in lines[0], lines[0]
  assert not any(tmp_path.iterdir())  # nothing written


# DP-FTRL's tree on 30 of synthetic's 100 clients: epochs of 3 rounds, so round 4 starts a new
# tree (and a new shuffle of the clients).
TREE_ARGS = [
  '--task=synthetic',
  '--clients_per_round=30',
  '--dp=tree',
  '--dp_noise_multiplier=0.8',
  '--dp_clip=0.1',
  '--rounds_per_eval=2',
  '--rounds_per_checkpoint=1',
]


def _train_tree(tmp_path, name, *extra):
  return _train(tmp_path, name, *extra, args=TREE_ARGS)


def test_the_trainer_restarts_the_tree_every_epoch():
  from tff_adaptive.privacy import config as privacy_config  # pylint: disable=g-import-not-at-top
  from tff_adaptive.run import federated_trainer  # pylint: disable=g-import-not-at-top

  config = types.SimpleNamespace(
    dp=privacy_config.DPConfig('tree', noise_multiplier=0.8, clip=0.1),
    compression=None,
    clients_per_round=30,
    seed=1,
  )
  aggregation = federated_trainer._aggregation(config, 100)  # pylint: disable=protected-access
  assert aggregation.name == 'dp_mean(tree, z=0.8, C=0.1, m=30, restarted every 3 rounds)'
  assert aggregation.differentially_private


def test_tree_runs_in_epochs_with_the_trees_epsilon_and_resumes_on_tff_exactly(tmp_path):
  result, rows = _train_tree(tmp_path, 'whole', '--engine=inprocess', f'--total_rounds={ROUNDS}')
  delta = 100**-1.1
  by_round = accounting.TreeEpsilonByRound(0.8, 3, delta)
  assert [float(r['dp_epsilon']) for r in rows] == pytest.approx(
    [by_round.epsilon(t) for t in range(1, ROUNDS + 1)], rel=1e-12
  )
  epsilon = by_round.epsilon(ROUNDS)
  assert (
    'DP: tree, noise multiplier 0.8, clip 0.1, 30 of 100 clients per round, each at most once '
    'per epoch of 3 rounds (the tree restarted every epoch); epsilon after 4 rounds: '
    f'{epsilon:.4g} at delta {delta:.3g} (RDP of the tree restarts'
  ) in result.stdout
  hparams = (tmp_path / 'whole' / 'hparams.json').read_text()
  assert '"client_sampler": "epoch"' in hparams and '"mechanism": "tree"' in hparams
  # The TFF engine, stopped after round 2 and resumed: the tree's state (its level buffer, noise
  # seeds and restart counter) is in the checkpoint; the same rows to TFF's rounding.
  _train_tree(tmp_path, 'tff', '--engine=tff', '--total_rounds=2')
  resumed, tff_rows = _train_tree(tmp_path, 'tff', '--engine=tff', f'--total_rounds={ROUNDS}')
  assert 'after round 2' in resumed.stdout
  assert_rows_close(tff_rows, rows, n_examples=1)


# Distributed DP on 10 of synthetic's 100 clients, 14 bits: the rounding inflates the
# sensitivity by a visible 1.2%.
DDP_ARGS = [
  '--task=synthetic',
  '--clients_per_round=10',
  '--dp=distributed_skellam',
  '--dp_noise_multiplier=0.7',
  '--dp_clip=0.1',
  '--dp_bits=14',
  '--rounds_per_eval=2',
  '--rounds_per_checkpoint=1',
]


def test_distributed_skellam_trains_on_tff_with_its_epsilon_and_resumes_exactly(tmp_path):
  result, rows = _train(tmp_path, 'whole', '--total_rounds=3', args=DDP_ARGS)
  # synthetic's softmax regression: 60 x 10 + 10 = 610 values, padded to 1024.
  p = skellam.SkellamParameters(0.7, 0.1, 10, 610, 14)
  delta = 100**-1.1
  by_round = accounting.SkellamEpsilonByRound(p, delta)
  assert [float(r['dp_epsilon']) for r in rows] == pytest.approx(
    [by_round.epsilon(t) for t in (1, 2, 3)], rel=1e-12
  )
  assert {int(float(r['ddp_padded_dim'])) for r in rows} == {1024}
  assert float(rows[0]['ddp_scale_factor']) == pytest.approx(p.scale, rel=1e-6)
  assert float(rows[0]['ddp_scaled_inflated_l2']) == pytest.approx(p.l2_sensitivity, rel=1e-6)
  assert p.l2_sensitivity / (p.scale * 0.1) == pytest.approx(1.0118, abs=1e-4)
  assert (
    'DP: distributed_skellam, noise multiplier 0.7, clip 0.1, 10 of 100 clients per round, '
    '14-bit secure aggregation (scale '
  ) in result.stdout
  assert f'epsilon after 3 rounds: {by_round.epsilon(3):.4g} at delta {delta:.3g}' in result.stdout
  losses = [float(r['train_loss']) for r in rows]
  assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
  # Stopped after round 2 and resumed: the rotation's seed and counter are in the checkpoint and
  # the rounding and the noise are functions of (seed, client update): the same rows.
  _train(tmp_path, 'resumed', '--total_rounds=2', args=DDP_ARGS)
  again, resumed = _train(tmp_path, 'resumed', '--total_rounds=3', args=DDP_ARGS)
  assert 'after round 2' in again.stdout
  for whole, other in zip(rows, resumed):
    whole, other = dict(whole), dict(other)
    del whole['seconds_per_round'], other['seconds_per_round']
    assert whole == other


def test_the_dp_study_driver(tmp_path):
  """reproductions.dp_fedopt.reproduce on 2 rounds, one noise level, 100 clients: every cell
  runs, the table and figure are written under runs/ where it was typed, a rerun resumes, and
  --publish with these settings is refused."""
  from reproductions import publish  # pylint: disable=g-import-not-at-top

  repo = pathlib.Path(__file__).resolve().parents[2]
  committed_dir = repo / 'reproductions' / 'dp_fedopt' / 'results'
  committed = publish.digests(str(committed_dir))
  args = [
    sys.executable,
    '-m',
    'reproductions.dp_fedopt.reproduce',
    '--rounds=2',
    '--rounds_per_eval=1',
    '--noise_multipliers=0.5',
    '--compression_bits=4',
    '--num_clients=100',
    '--clients_per_round=10',
  ]
  env = trainer_processes.driver_env()
  for _ in range(2):
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
  report = tmp_path / 'runs' / 'dp_fmnist' / 'report'
  assert os.listdir(tmp_path) == ['runs']
  with open(report / 'dp_fmnist.csv') as f:
    rows = list(csv.DictReader(f))
  assert [
    (r['clip_rule'], r['server'], r['noise_multiplier'], r['compression_bits']) for r in rows
  ] == [
    ('none', 'fedavg', '', ''),
    ('none', 'fedadam', '', ''),
    ('fixed', 'fedavg', '0.5', ''),
    ('fixed', 'fedadam', '0.5', ''),
    ('fixed', 'fedadam_aware', '0.5', ''),
    ('adaptive', 'fedavg', '0.5', ''),
    ('adaptive', 'fedadam', '0.5', ''),
    ('tree', 'fedavg', '0.5', ''),
    ('none', 'fedavg', '', '4'),
    ('none', 'fedadam', '', '4'),
  ]
  assert all(r['rounds'] == '2' and r['final_accuracy'] for r in rows)
  epsilon = accounting.EpsilonByRound(0.5, 10, 100, 'fixed_size', 100**-1.1).epsilon(2)
  assert {r['epsilon'] for r in rows[2:7]} == {f'{epsilon:.2f}'} and rows[0]['epsilon'] == ''
  tree_epsilon = accounting.TreeEpsilonByRound(0.5, 10, 100**-1.1).epsilon(2)  # epochs of 10
  assert rows[7]['epsilon'] == f'{tree_epsilon:.2f}' != f'{epsilon:.2f}'
  # The CNN's tensors at 4 bits (what test_compression holds to the encoder's output).
  specs = [
    tf.TensorSpec(w.shape, tf.float32) for w in models.build_fmnist_cnn(10).trainable_weights
  ]
  expected = compression.bits_per_client(specs, 4)
  assert [int(r['upload_bits_per_client']) for r in rows[8:]] == [expected, expected]
  assert expected < 32 * 21_841 / 6
  assert '| fedavg | 4 | ' in (report / 'dp_fmnist.md').read_text()
  assert '| FedAvg (tree, DP-FTRL) | ' in (report / 'dp_fmnist.md').read_text()
  assert f' (eps {tree_epsilon:.2f}) |' in (report / 'dp_fmnist.md').read_text()
  assert rows[2]['final_clip'] == '' and rows[5]['final_clip'] != ''  # adaptive: its clip
  table = (report / 'dp_fmnist.md').read_text()
  assert f'; code version {provenance.code_version(str(repo))}' in table  # and the date
  assert 'Noise-aware minus plain DP-FedAdam (fixed clip; accuracy points): ' in table
  assert str(tmp_path) not in table and '--dp_noise_aware_server' in table
  assert (report / 'dp_fmnist.png').stat().st_size > 10000
  refused = subprocess.run(
    [*args, '--publish'], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
  )
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.startswith('reproduce: error: --publish: not the committed settings')
  assert publish.digests(str(committed_dir)) == committed and len(committed) >= 4


def test_a_dp_run_under_its_earlier_name_is_resumed_there(tmp_path):
  """Before --dp was part of experiment names, a DP run was named without it: rerunning its
  command resumes it in that directory (not a fresh run under the new name)."""
  args = [*ARGS, '--engine=inprocess', f'--root_output_dir={tmp_path}']
  named = subprocess.run(
    [
      sys.executable,
      '-c',
      'import sys\nfrom absl import flags\nfrom tff_adaptive.run import flags as f\n'
      "flags.FLAGS(['t', *sys.argv[1:]])\nc = f.experiment_config_from_flags()\n"
      'print(f.experiment_name(c), f.experiment_name(c, legacy=True))',
      *args,
    ],
    capture_output=True,
    text=True,
    check=True,
  )
  name, legacy = named.stdout.split()
  assert '_dp-adaptive-z0.5_' in name and name.replace('_dp-adaptive-z0.5', '') == legacy
  _train(tmp_path, legacy, '--engine=inprocess', '--total_rounds=1')
  result = trainer_processes.run([*args, '--total_rounds=2'], timeout=600)
  assert result.returncode == 0, result.stderr
  assert 'after round 1' in result.stdout and f'output: {tmp_path / legacy}' in result.stdout
  assert not (tmp_path / name).exists()
