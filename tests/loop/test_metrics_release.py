"""metrics.csv's release manager against TFF's: the same file, byte for byte, without re-reading
it on every release (tff_adaptive/loop/metrics_release.py)."""

import asyncio
import collections

import tensorflow_federated as tff

from tff_adaptive.loop import metrics_release


def _counting(cls):
  """`cls` counting the reads of its whole file (`_read_values`, as TFF's code calls it)."""

  class Counting(cls):
    reads = 0

    def _read_values(self):
      if cls is tff.program.CSVFileReleaseManager or self._rows is None:
        type(self).reads += 1
      return super()._read_values()

  return Counting


def _tff(path):
  return _counting(tff.program.CSVFileReleaseManager)(
    path, save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname='round_num'
  )


def _ours(path):
  return _counting(metrics_release.MetricsReleaseManager)(path)


def _row(r):
  row = collections.OrderedDict(train_loss=1.0 / r, train_accuracy=0.5 + r / 1000)
  if r % 4 == 0:  # evaluation columns appear at round 4: the header grows
    row.update(eval_loss=2.0 / r, eval_accuracy=0.25 + r / 100)
  return row


def _release(manager, rounds):
  for r in rounds:
    asyncio.run(manager.release(_row(r), r))


def test_same_file_as_tffs_manager_through_a_resume_with_one_read(tmp_path):
  theirs, ours = tmp_path / 'tff.csv', tmp_path / 'ours.csv'
  tff_manager, our_manager = _tff(str(theirs)), _ours(str(ours))
  _release(tff_manager, range(1, 13))
  _release(our_manager, range(1, 13))
  assert ours.read_bytes() == theirs.read_bytes()
  assert theirs.read_text().splitlines()[0] == (
    'round_num,train_accuracy,train_loss,eval_accuracy,eval_loss'  # TFF sorts the names
  )
  # TFF's reads the whole file twice a release (once at the first: nothing to remove yet);
  # ours never: it wrote the file (its header at construction) and keeps what it wrote.
  assert type(tff_manager).reads == 2 * 12 - 1
  assert type(our_manager).reads == 0

  # A resume from the checkpoint of round 8: new managers on the files, rows 9-12 replaced.
  tff_manager, our_manager = _tff(str(theirs)), _ours(str(ours))
  _release(tff_manager, range(9, 16))
  _release(our_manager, range(9, 16))
  assert ours.read_bytes() == theirs.read_bytes()
  rounds = [int(line.split(',')[0]) for line in ours.read_text().splitlines()[1:]]
  assert rounds == list(range(1, 16))
  assert type(our_manager).reads == 1  # at construction: the existing file, once
