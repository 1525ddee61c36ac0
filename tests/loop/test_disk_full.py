"""A full disk at each file a run writes, by fault injection in the write path.

Each case runs the training loop (synthetic task, engine "inprocess", a checkpoint every round)
with one write failing the way a full disk fails it -- after the write's temporary was created
and partly written -- in round 2, and checks: `outputs.DiskFullError` names that file; no
temporary is left anywhere in the experiment directory; what round 1 wrote is untouched; and the
same call with the disk "freed" resumes and ends with exactly the metrics and client evaluations
of an uninterrupted run. The trainer's exit code and line on a real full filesystem:
test_robustness.py (`test_a_full_disk_...`).
"""

import csv
import errno
import os
import pathlib

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import tasks
from tff_adaptive.loop import client_states
from tff_adaptive.loop import evaluation
from tff_adaptive.loop import outputs
from tff_adaptive.loop import sampling
from tff_adaptive.loop import training_loop
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers import schedules
from tff_adaptive.optimizers import server as server_optimizers

ROUNDS = 3
FAIL_ROUND = 2


@pytest.fixture(scope='module')
def task():
  return tasks.build_task(tasks.TaskConfig('synthetic', seed=1, num_clients=12))


def _run(task, algorithm_name, output_dir):
  server = server_optimizers.ServerOptimizerConfig('adam', learning_rate=0.01)
  algorithm = algorithms.build_algorithm(
    algorithm_name,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      algorithms.ClientTrainingConfig(
        client_optimizers.ClientOptimizerConfig('sgd', 0.1), batch_size=10
      ),
      server_optimizers.build_server_optimizer(server),
      server.learning_rate,
      schedules.ScheduleConfig(),
      num_clients=len(task.client_ids),
    ),
  )
  training_loop.run_training(
    engines.build_engine('inprocess', algorithm, engines.EngineOptions(clients_per_round=4)),
    tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1)),
    task.train_clients,
    sampling.build_client_sampler(task.client_ids, 4, seed=1),
    evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn),
    lambda round_num: task.central_test,
    task.client_test,
    training_loop.LoopConfig(
      ROUNDS, rounds_per_eval=1, rounds_per_checkpoint=1, seed=1, output_dir=str(output_dir)
    ),
    log=open(os.devnull, 'w'),  # noqa: SIM115
    warn=open(os.devnull, 'w'),  # noqa: SIM115
  )


def _results(directory: pathlib.Path) -> dict:
  """metrics.csv (without seconds_per_round) and every client_eval file."""
  with open(directory / 'metrics.csv', newline='') as f:
    rows = [{k: v for k, v in r.items() if k != 'seconds_per_round'} for r in csv.DictReader(f)]
  evals = {p.name: p.read_text() for p in sorted((directory / 'client_eval').iterdir())}
  return {'metrics': rows, 'client_eval': evals}


_REFERENCES = {}


def _reference(task, algorithm_name, tmp_path_factory):
  if algorithm_name not in _REFERENCES:
    directory = tmp_path_factory.mktemp(f'reference_{algorithm_name}')
    _run(task, algorithm_name, directory)
    _REFERENCES[algorithm_name] = _results(directory)
  return _REFERENCES[algorithm_name]


def _no_space(path='') -> OSError:
  return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


def _tf_no_space(path='') -> tf.errors.OpError:
  # What TF's file writes raise (checkpoints, TensorBoard events, tf.io.gfile).
  return tf.errors.ResourceExhaustedError(None, None, f'{path}; No space left on device')


class _Fault:
  """Makes the write of one kind of file fail from round FAIL_ROUND on, after a partial write."""

  def __init__(self):
    self.round = 0
    self.armed = True

  def due(self) -> bool:
    return self.armed and self.round >= FAIL_ROUND


def _metrics_csv(monkeypatch, fault):
  # TFF's CSVFileReleaseManager: header and rows into metrics.csv_tempNNNN, then a rename.
  original = csv.DictWriter.writerows

  def writerows(self, rows):
    rows = list(rows)
    fault.round = len(rows)
    if fault.due():
      self.writer.writerow(['partial'])
      raise _tf_no_space('metrics.csv_temp')
    return original(self, rows)

  monkeypatch.setattr(csv.DictWriter, 'writerows', writerows)
  return 'metrics.csv'


def _client_eval(monkeypatch, fault):
  original = outputs.write_client_eval

  def write_client_eval(output_dir, round_num, per_client):
    fault.round = round_num
    if fault.due():
      path = os.path.join(output_dir, 'client_eval', f'round_{round_num:05d}.csv.tmp')
      pathlib.Path(path).write_text('client_id,partial')
      raise _no_space(path)
    return original(output_dir, round_num, per_client)

  monkeypatch.setattr(outputs, 'write_client_eval', write_client_eval)
  return f'client_eval/round_{FAIL_ROUND:05d}.csv'


def _checkpoint(monkeypatch, fault):
  # TFF's FileProgramStateManager: tf.saved_model.save into program_state_N_tempNNNN.
  original = tf.saved_model.save

  def save(obj, export_dir, *args, **kwargs):
    fault.round = int(os.path.basename(export_dir).split('_')[2])
    if fault.due():
      pathlib.Path(export_dir, 'saved_model.pb').write_bytes(b'partial')
      raise _tf_no_space(export_dir)
    return original(obj, export_dir, *args, **kwargs)

  monkeypatch.setattr(tf.saved_model, 'save', save)
  return f'checkpoints/program_state_{FAIL_ROUND}'


def _tensorboard(monkeypatch, fault):
  # TFF's TensorBoardReleaseManager writes through a tf.summary file writer; the loop flushes it.
  create = tf.summary.create_file_writer

  def create_file_writer(*args, **kwargs):
    writer = create(*args, **kwargs)
    flush = writer.flush

    def flush_or_fail():
      if fault.due():
        raise _tf_no_space('events.out.tfevents')
      return flush()

    writer.flush = flush_or_fail
    return writer

  monkeypatch.setattr(tf.summary, 'create_file_writer', create_file_writer)
  release = tff.program.TensorBoardReleaseManager.release

  async def release_round(self, value, key):
    fault.round = key
    return await release(self, value, key)

  monkeypatch.setattr(tff.program.TensorBoardReleaseManager, 'release', release_round)
  return 'tensorboard'


def _client_states(monkeypatch, fault):
  # The store writes each client's state into a temp file, then renames it.
  original = client_states.np.savez

  def savez(file, *arrays):
    if fault.due():
      file.write(b'partial')
      raise _no_space(getattr(file, 'name', ''))
    return original(file, *arrays)

  monkeypatch.setattr(client_states.np, 'savez', savez)
  original_put = client_states.ClientStateStore.put

  def put(self, client_id, value, round_num):
    fault.round = round_num
    return original_put(self, client_id, value, round_num)

  monkeypatch.setattr(client_states.ClientStateStore, 'put', put)
  return 'client_states'


CASES = {
  'metrics.csv': ('fedopt', _metrics_csv),
  'client_eval': ('fedopt', _client_eval),
  'checkpoint': ('fedopt', _checkpoint),
  'tensorboard': ('fedopt', _tensorboard),
  'client_states': ('scaffold', _client_states),
}


def _leftovers(directory: pathlib.Path) -> list:
  return sorted(
    str(p.relative_to(directory))
    for p in directory.rglob('*')
    if '_temp' in p.name or '.tmp' in p.name
  )


@pytest.mark.parametrize('case', CASES)
def test_a_full_disk_names_the_file_leaves_nothing_half_written_and_resumes_exactly(
  task, case, tmp_path, tmp_path_factory, monkeypatch
):
  algorithm_name, inject = CASES[case]
  reference = _reference(task, algorithm_name, tmp_path_factory)
  fault = _Fault()
  with monkeypatch.context() as patch:
    expected = inject(patch, fault)
    with pytest.raises(outputs.DiskFullError) as raised:
      _run(task, algorithm_name, tmp_path)
  assert raised.value.path == str(tmp_path / expected)
  assert 'no space left on device' in str(raised.value)
  assert _leftovers(tmp_path) == []
  rows = _results(tmp_path)['metrics']
  # metrics.csv holds round 1, and round 2 where it was written before the failing file.
  assert rows == reference['metrics'][: len(rows)] and len(rows) in (FAIL_ROUND - 1, FAIL_ROUND)
  # Every write of round 2 comes before its checkpoint: round 1's is the latest.
  assert sorted(p.name for p in (tmp_path / 'checkpoints').iterdir()) == ['program_state_1']
  _run(task, algorithm_name, tmp_path)  # space freed: the same call resumes
  assert _results(tmp_path) == reference
  assert _leftovers(tmp_path) == []


def test_temporaries_of_a_killed_run_are_removed_at_the_next_start(task, tmp_path, capsys):
  """What a SIGKILL in the middle of a write leaves (TFF's `_tempNNNN`, our `.tmp*`) goes at
  the next start, in one line; files that only look alike stay."""
  (tmp_path / 'checkpoints' / 'program_state_2_temp4365').mkdir(parents=True)
  (tmp_path / 'checkpoints' / 'program_state_2_temp4365' / 'saved_model.pb').write_bytes(b'x')
  (tmp_path / 'metrics.csv_temp1234').write_text('round_num\n')
  (tmp_path / 'client_eval').mkdir()
  (tmp_path / 'client_eval' / 'round_00002.csv.tmp').write_text('client_id\n')
  (tmp_path / 'notes_temp1.txt').write_text('mine')
  removed = outputs.remove_stale_temporaries(str(tmp_path))
  assert removed == [
    'checkpoints/program_state_2_temp4365',
    'client_eval/round_00002.csv.tmp',
    'metrics.csv_temp1234',
  ]
  assert _leftovers(tmp_path) == ['notes_temp1.txt']


@pytest.mark.parametrize(
  'error, full',
  [
    (OSError(errno.ENOSPC, 'No space left on device'), True),
    (OSError(errno.EDQUOT, 'Disk quota exceeded'), True),
    (OSError(errno.EACCES, 'Permission denied'), False),
    (tf.errors.ResourceExhaustedError(None, None, 'x; No space left on device'), True),
    (tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor'), False),
  ],
)
def test_is_disk_full(error, full):
  assert outputs.is_disk_full(error) is full
  try:
    try:
      raise error
    except Exception as e:
      raise RuntimeError('while saving') from e
  except RuntimeError as chained:
    assert outputs.is_disk_full(chained) is full


def test_hparams_json_on_a_full_disk_is_named_and_leaves_no_temporary(tmp_path, monkeypatch):
  def dump(value, f, **kwargs):
    f.write('{"partial": ')
    raise _no_space()

  monkeypatch.setattr(outputs.json, 'dump', dump)
  path = str(tmp_path / 'hparams.json')
  with pytest.raises(outputs.DiskFullError) as raised:
    outputs.write_json_atomically(path, {'a': 1})
  assert raised.value.path == path and list(tmp_path.iterdir()) == []
