"""The trainer's --compression: the bits each client sends, in metrics.csv, on both engines."""

import csv
import json

import pytest

from tests import trainer_processes

ARGS = ['--task=synthetic', '--total_rounds=2', '--rounds_per_eval=1', '--compression=uniform']


@pytest.mark.parametrize('engine', ['inprocess', 'tff'])
def test_a_compressed_run_reports_the_bits_it_sends(tmp_path, engine):
  result = trainer_processes.run(
    [
      *ARGS,
      '--compression_bits=4',
      f'--engine={engine}',
      f'--root_output_dir={tmp_path}',
      '--experiment_name=c',
    ],
    timeout=600,
  )
  assert result.returncode == 0, result.stderr
  assert trainer_processes.stderr_lines(result.stderr) == [], result.stderr
  with open(tmp_path / 'c' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  # Softmax regression 60 x 10 + 10: ceil(600 * 4 / 28) and ceil(10 * 4 / 28) int32 words, two
  # (min, max) pairs and the weight.
  expected = 32 * (86 + 2) + 2 * 64 + 32
  assert [float(r['compression_bits_per_client']) for r in rows] == [expected, expected]
  assert expected < 32 * 610 / 6.5  # 4 bits: 6.6x fewer than float32 (8x less the overheads)
  record = json.loads((tmp_path / 'c' / 'hparams.json').read_text())
  assert record['compression'] == {'name': 'uniform', 'bits': 4, 'threshold': 0}
