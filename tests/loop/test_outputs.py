"""hparams.json: the fingerprint behind default experiment names, and the refusal's wording."""

import json

import pytest

from tff_adaptive.loop import outputs

_RECORD = {
  'task': {'name': 'synthetic', 'seed': 1},
  'algorithm': 'fedopt',
  'server': {'name': 'adam', 'learning_rate': 0.01, 'tau': 0.001},
  'client': {
    'optimizer': {'name': 'delta_sgd', 'delta_sgd': {'eta0': 0.2, 'gamma': 2.0, 'delta': 0.1}},
    'epochs': 1,
  },
  'runtime': {'total_rounds': 8, 'data_dir': '/a/checkout/data'},
}


def _with(record, path, value):
  record = json.loads(json.dumps(record))
  *parents, leaf = path.split('.')
  node = record
  for key in parents:
    node = node[key]
  node[leaf] = value
  return record


def test_fingerprint_ignores_the_runtime_section_and_key_order():
  base = outputs.fingerprint(_RECORD)
  assert len(base) == 6 and int(base, 16) >= 0
  assert outputs.fingerprint(_with(_RECORD, 'runtime.total_rounds', 100)) == base
  assert outputs.fingerprint(_with(_RECORD, 'runtime.data_dir', '/elsewhere')) == base
  assert outputs.fingerprint(dict(reversed(list(_RECORD.items())))) == base


@pytest.mark.parametrize(
  'path,value',
  [('server.learning_rate', 0.02), ('client.epochs', 2), ('task.seed', 2), ('algorithm', 'x')],
)
def test_fingerprint_changes_with_every_fingerprinted_setting(path, value):
  assert outputs.fingerprint(_with(_RECORD, path, value)) != outputs.fingerprint(_RECORD)


def test_refusal_names_the_changed_part_first_and_counts_its_settings(tmp_path):
  outputs.check_or_write_hparams(str(tmp_path), _RECORD)
  new = _with(_RECORD, 'client.optimizer', {'name': 'sps', 'sps': {'c': 0.5, 'mode': 'constant'}})
  new = _with(new, 'server.learning_rate', 0.02)
  with pytest.raises(outputs.ConfigMismatchError) as e:
    outputs.check_or_write_hparams(str(tmp_path), new)
  assert str(e.value) == (
    f'{tmp_path} holds a run with different hyperparameters ('
    "client.optimizer.name: 'delta_sgd' -> 'sps' (and 5 of its settings); "
    'server.learning_rate: 0.01 -> 0.02); use a new --experiment_name or delete that directory'
  )


def test_refusal_lists_four_other_keys_then_counts_the_rest(tmp_path):
  outputs.check_or_write_hparams(str(tmp_path), _RECORD)
  new = _RECORD
  for i, path in enumerate(['server.learning_rate', 'server.tau', 'client.epochs', 'task.seed']):
    new = _with(new, path, 10 + i)
  new = _with(new, 'client.optimizer.delta_sgd.gamma', 3.0)
  with pytest.raises(outputs.ConfigMismatchError) as e:
    outputs.check_or_write_hparams(str(tmp_path), new, hints={'client.epochs': 'why'})
  message = str(e.value)
  shown = (  # sorted; the fifth, task.seed, is counted
    'client.epochs: 1 -> 12 (why); client.optimizer.delta_sgd.gamma: 2.0 -> 3.0; '
    'server.learning_rate: 0.01 -> 10; server.tau: 0.001 -> 11; and 1 more key)'
  )
  assert f'different hyperparameters ({shown}; use a new' in message, message
  assert 'task.seed' not in message


def test_a_runtime_change_resumes_and_is_rewritten(tmp_path):
  outputs.check_or_write_hparams(str(tmp_path), _RECORD)
  moved = _with(_RECORD, 'runtime.data_dir', '/another/checkout/data')
  outputs.check_or_write_hparams(str(tmp_path), moved)
  stored = json.loads((tmp_path / 'hparams.json').read_text())
  assert stored['runtime']['data_dir'] == '/another/checkout/data'


def test_an_upgraded_record_resumes_and_is_rewritten_in_the_current_format(tmp_path):
  old_format = _with(
    _RECORD, 'task', {'name': 'synthetic', 'seed': 1, 'data_dir': '/x', 'alpha': 1}
  )
  (tmp_path / 'hparams.json').write_text(json.dumps(old_format))
  with pytest.raises(outputs.ConfigMismatchError, match='task.alpha: 1 -> <absent>; task.data_dir'):
    outputs.check_or_write_hparams(str(tmp_path), _RECORD)
  drop = lambda stored: _with(stored, 'task', {'name': 'synthetic', 'seed': 1})
  outputs.check_or_write_hparams(str(tmp_path), _RECORD, upgrade=drop)
  assert json.loads((tmp_path / 'hparams.json').read_text()) == _RECORD
