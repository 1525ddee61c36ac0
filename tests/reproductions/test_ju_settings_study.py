"""reproductions.ju2023_adafedadam.settings_study: the statistics both ways, and the driver.

The driver runs as a subprocess (its flags are absl flags, as the trainer's; this file imports
only its flag-free modules)."""

import csv
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from reproductions import publish
from reproductions.ju2023_adafedadam import fairness_statistics as study
from reproductions.ju2023_adafedadam.published import PUBLISHED
from tests import trainer_processes
from tff_adaptive import tasks
from tff_adaptive.run import provenance

REPO = pathlib.Path(__file__).resolve().parents[2]
COMMITTED = REPO / 'reproductions' / 'ju2023_adafedadam' / 'results'


def test_statistics_over_clients_and_over_examples_by_hand():
  """Four clients, accuracies (0, 0.5, 1, 1) on (10, 10, 40, 40) test examples.

  Avg: (0 + .5 + 1 + 1) / 4 = .625 | (0 + 5 + 40 + 40) / 100 = .85.
  STD: population std around .625: sqrt((.390625 + .015625 + 2 * .140625) / 4) = .414578 |
       around .85, weighted: sqrt((10 * .7225 + 10 * .1225 + 80 * .0225) / 100) = .320156.
  Worst 30%: ceil(1.2) = 2 lowest, (0 + .5) / 2 = .25 | 30 of 100 examples: the two lowest
       clients (20) and 10 of the next one's 40, (0 + 5 + 10) / 30 = .5.
  """
  stats = study.statistics_both_ways([1.0, 0.0, 1.0, 0.5], [40, 10, 40, 10])
  assert stats == pytest.approx(
    {
      'avg_clients': 62.5,
      'avg_examples': 85.0,
      'std_clients': 41.4578,
      'std_examples': 32.0156,
      'worst30_clients': 25.0,
      'worst30_examples': 50.0,
    },
    abs=1e-4,
  )


def test_weighted_statistics_with_equal_sizes_are_the_unweighted_ones():
  rng = np.random.default_rng(0)
  accuracies = rng.uniform(size=20)  # 30% of 20 clients: exactly 6, no boundary client
  stats = study.statistics_both_ways(accuracies, np.full(20, 7))
  for name in ('avg', 'std', 'worst30'):
    assert stats[f'{name}_examples'] == pytest.approx(stats[f'{name}_clients'], rel=1e-12)
  assert stats['worst30_clients'] == pytest.approx(100 * np.sort(accuracies)[:6].mean())
  with pytest.raises(ValueError, match='positive example count'):
    study.statistics_both_ways([0.5, 0.5], [3, 0])


def test_combinations_take_the_largest_difference_over_statistics_and_algorithms():
  def row(algorithm, clients, examples):
    published = dict(zip(study.STATISTICS, PUBLISHED[algorithm]))
    out = {'data_set': 'synthetic_iid', 'algorithm': algorithm, 'seeds': 3}
    for stat in study.STATISTICS:
      out[f'{stat}_published'] = published[stat]
      out[f'{stat}_clients'] = published[stat] + clients
      out[f'{stat}_examples'] = published[stat] + examples
    return out

  combos = study.combinations([row('FedAvg', 10.0, -1.0), row('AdaFedAdam', 3.0, 2.5)])
  assert len(combos) == 8
  by_ways = {(c['avg_over'], c['std_over'], c['worst30_over']): c for c in combos}
  assert by_ways['examples', 'examples', 'examples']['largest_difference'] == 2.5
  assert by_ways['clients', 'examples', 'examples']['largest_difference'] == 10.0
  assert by_ways['examples', 'examples', 'examples']['largest_difference_FedAvg'] == 1.0
  assert by_ways['clients', 'examples', 'examples']['largest_difference_AdaFedAdam'] == 3.0


def test_the_settings_study_driver(tmp_path):
  """2 rounds, one seed, LEAF's generator as its paper and as its code state it, with FedAvg,
  typed in tmp_path with the default --runs_dir and --out: both cells run, each trainer records
  its generator, client_eval has each client's test-set size, the table (with the pooled fits), the
  combinations and the figure are written under runs/; a rerun resumes; bad flags are one
  line with exit 2; --publish with these settings is refused and the committed results stay."""
  committed = publish.digests(str(COMMITTED))
  command = [
    sys.executable,
    '-m',
    'reproductions.ju2023_adafedadam.settings_study',
    '--rounds=2',
    '--seeds=1',
    '--data_sets=leaf,leaf_code',
    '--algorithms=FedAvg',
    '--rounds_per_eval=1',
    '--engine=inprocess',
  ]
  env = trainer_processes.driver_env()

  def run(args, cwd=tmp_path, timeout=600):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

  done = run(command)
  assert done.returncode == 0, done.stderr[-3000:]
  assert os.listdir(tmp_path) == ['runs']
  runs = tmp_path / 'runs' / 'ju_settings'
  for generator in ('leaf', 'leaf_code'):
    record = json.loads((runs / f'{generator}_fedavg_seed1' / 'hparams.json').read_text())
    assert record['task']['synthetic_generator'] == generator
  with open(runs / 'leaf_code_fedavg_seed1' / 'client_eval' / 'round_00002.csv') as f:
    clients = list(csv.DictReader(f))
  task = tasks.build_task(tasks.TaskConfig('synthetic', seed=1, synthetic_generator='leaf_code'))
  assert {r['client_id']: int(r['num_examples']) for r in clients} == {
    cid: len(data['y']) for cid, data in task.client_test.items()
  }
  out = runs / 'report'
  with open(out / 'settings_study.csv') as f:
    table = list(csv.DictReader(f))
  assert [(r['data_set'], r['algorithm'], r['seeds']) for r in table] == [
    ('leaf', 'FedAvg', '1'),
    ('leaf_code', 'FedAvg', '1'),
    ('leaf', 'pooled fit', '1'),
    ('leaf_code', 'pooled fit', '1'),
  ]
  # One direction labels LEAF's data as its paper states it: fitted centrally, one softmax
  # regression is right on most test examples (seed 1: 95.8%); LEAF's code's per-client label
  # offsets leave it far below (42.4%).
  assert float(table[2]['avg_examples']) > 90 > 50 > float(table[3]['avg_examples'])
  assert table[2]['avg_published'] == ''
  assert json.loads((runs / 'pooled_fit_leaf_seed1.json').read_text()) == pytest.approx(
    {k: float(table[2][k]) for k in study.statistics_both_ways([1.0], [1])}, abs=0.006
  )
  expected = study.statistics_both_ways(
    [float(r['accuracy']) for r in clients], [int(r['num_examples']) for r in clients]
  )
  assert {k: float(table[1][k]) for k in expected} == pytest.approx(expected, abs=0.006)
  assert float(table[1]['avg_published']) == 90.08
  with open(out / 'settings_combinations.csv') as f:
    assert len(list(csv.DictReader(f))) == 16
  markdown = (out / 'settings_study.md').read_text()
  assert f'; code version {provenance.code_version(str(REPO))}' in markdown  # and the date
  assert '| LEAF (code) | FedAvg | 1 | 90.08 |' in markdown and str(tmp_path) not in markdown
  assert '| LEAF (paper) | 1 | ' in markdown  # the pooled fit's row
  assert re.search(r'code version [0-9a-f]{7,}', markdown)
  assert (out / 'settings_study.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  again = run(command)
  assert again.returncode == 0 and 'had already finished' not in again.stderr
  with open(out / 'settings_study.csv') as f:
    assert list(csv.DictReader(f)) == table
  bad = run([*command, '--data_sets=synthetic_2_2'], timeout=300)
  assert (bad.returncode, bad.stdout) == (2, '')
  assert bad.stderr.strip() == (
    "settings_study: error: --data_sets: 'synthetic_2_2' is not one of synthetic_0_0, "
    'synthetic_0.5_0.5, synthetic_1_1, synthetic_iid, leaf, leaf_code'
  )
  refused = run([*command, '--publish'], timeout=300)
  assert refused.returncode == 2 and refused.stdout == ''
  assert refused.stderr.startswith('settings_study: error: --publish: not the committed settings')
  assert publish.digests(str(COMMITTED)) == committed
  # The documented publish command (README, publish.json) is accepted as is (--dry_run).
  entry = json.loads((COMMITTED / 'publish.json').read_text())['settings_study']
  readme = (REPO / 'reproductions' / 'ju2023_adafedadam' / 'README.md').read_text()
  assert entry['command'] in re.sub(r' *\\\n *', ' ', readme)
  dry = run([sys.executable, *entry['command'].split()[1:], '--dry_run'], cwd=REPO)
  assert dry.returncode == 0, dry.stderr
  assert dry.stdout.splitlines()[-1] == f'# then the table and figure into {REPO}/{entry["out"]}'
  assert len([l for l in dry.stdout.splitlines() if 'run.federated_trainer' in l]) == 36
