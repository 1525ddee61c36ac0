"""The cost of writing metrics.csv each round: TFF's release manager against ours.

  python -m benchmarks.metrics_release [--rounds=1500] [--columns=30]

Infrastructure script (no paper of its own). Releases one row of `--columns` metrics per
round, `--rounds` rounds, into two files side by side in one process, round by round:
`tff.program.CSVFileReleaseManager` in WRITE mode called through `asyncio.run` (what the loop
did before) and `tff_adaptive.loop.metrics_release.MetricsReleaseManager` on one kept event
loop (what it does now). Checks that both files have the same bytes, then prints milliseconds
per row over each fifth of the run and the ratio. Both rewrite the whole file every round
(atomically: a temporary and a rename), so both grow with the round; TFF's also reads it twice.
"""

import asyncio
import collections
import os
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow_federated as tff

from tff_adaptive.loop import metrics_release

_ROUNDS = flags.DEFINE_integer('rounds', 1500, 'Rows released (rounds).')
_COLUMNS = flags.DEFINE_integer('columns', 30, 'Metrics per row (the trainer writes 20-40).')


def main(argv):
  del argv
  row = collections.OrderedDict(
    (f'metric_{i:02d}', 0.1234567 * (i + 1)) for i in range(_COLUMNS.value)
  )
  folder = tempfile.mkdtemp()
  theirs_path, ours_path = os.path.join(folder, 'tff.csv'), os.path.join(folder, 'ours.csv')
  theirs = tff.program.CSVFileReleaseManager(
    theirs_path, save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname='round_num'
  )
  ours = metrics_release.MetricsReleaseManager(ours_path)
  loop = asyncio.new_event_loop()
  span = max(1, _ROUNDS.value // 5)
  seconds = {'tff': 0.0, 'ours': 0.0}
  print(f'{_COLUMNS.value} metrics a row; ms per row, mean over the rounds of each line')
  print('rounds       | TFF, asyncio.run | ours, kept loop | TFF / ours')
  for round_num in range(1, _ROUNDS.value + 1):
    start = time.perf_counter()
    asyncio.run(theirs.release(row, round_num))
    middle = time.perf_counter()
    loop.run_until_complete(ours.release(row, round_num))
    seconds['tff'] += middle - start
    seconds['ours'] += time.perf_counter() - middle
    if round_num % span == 0 or round_num == _ROUNDS.value:
      n = span if round_num % span == 0 else round_num % span
      tff_ms, ours_ms = 1e3 * seconds['tff'] / n, 1e3 * seconds['ours'] / n
      print(
        f'{round_num - n + 1:5d}-{round_num:<6d} | {tff_ms:16.2f} | {ours_ms:15.2f} | '
        f'{tff_ms / ours_ms:9.2f}x'
      )
      seconds = {'tff': 0.0, 'ours': 0.0}
  with open(theirs_path, 'rb') as a, open(ours_path, 'rb') as b:
    same = a.read() == b.read()
  print(f'same bytes: {same}')
  return 0 if same else 1


if __name__ == '__main__':
  app.run(main)
