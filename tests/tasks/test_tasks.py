"""The seven Reddi et al. 2021 tasks from fixture files: preprocessing, model, loss, metrics, a
federated round and evaluation.

Fixtures are TFF-format SQLite files and count archives (tests/fixtures.py) and a tfds-prepared
tiny CIFAR-10 (tests/datasets/test_cifar10.py's archive writer). Preprocessing expectations are derived
in comments from the rules in the task modules' docstrings (the authors' pipelines).
"""

import collections
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from reproductions.reddi2021_fedopt import published as reddi_published
from tests import fixtures
from tests.datasets import test_cifar10
from tff_adaptive import algorithms
from tff_adaptive import datasets
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.core import seeds
from tff_adaptive.loop import evaluation
from tff_adaptive.tasks import emnist
from tff_adaptive.tasks import published
from tff_adaptive.tasks import shakespeare
from tff_adaptive.tasks import stackoverflow

REDDI_TASKS = ('emnist_cr', 'emnist_ae', 'shakespeare', 'so_nwp', 'so_lr', 'cifar10', 'cifar100')
PARAMS = {
  'emnist_cr': 1206590,
  'emnist_ae': 2837314,
  'shakespeare': 820522,
  'so_nwp': 4050748,
  'so_lr': 5000500,
  'cifar10': 11181642,
  'cifar100': 11227812,
}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  root = tmp_path_factory.mktemp('reddi')
  d = str(root / 'tff')
  fixtures.write_emnist(d)
  fixtures.write_shakespeare(d)
  fixtures.write_stackoverflow(d, num_clients=4, test_clients=3, other_examples=(2, 4))
  fixtures.write_stackoverflow_counts(d)
  fixtures.write_cifar100(d)
  # CIFAR-10: 20 training images (every class twice) and 7 test images, prepared by tfds.
  rng = np.random.default_rng(0)
  x_train = rng.integers(0, 256, size=(20, 32, 32, 3), dtype=np.uint8)
  x_test = rng.integers(0, 256, size=(7, 32, 32, 3), dtype=np.uint8)
  manual = root / 'manual'
  manual.mkdir()
  test_cifar10._write_archive(  # pylint: disable=protected-access
    str(manual / 'cifar-10-binary.tar.gz'),
    (x_train, np.arange(20) % 10),
    (x_test, np.arange(7) % 10),
  )
  tfds.builder('cifar10', data_dir=str(root / 'tfds')).download_and_prepare(
    download_config=tfds.download.DownloadConfig(manual_dir=str(manual))
  )
  return {'tff': d, 'tfds': str(root / 'tfds')}


def _config(name, data_dir, **kwargs):
  if name == 'cifar10':
    return tasks.TaskConfig(
      name=name, data_dir=data_dir['tfds'], seed=1, num_clients=4, examples_per_client=5, **kwargs
    )
  return tasks.TaskConfig(name=name, data_dir=data_dir['tff'], seed=1, **kwargs)


@pytest.fixture(scope='module')
def built(data_dir):
  return {name: tasks.build_task(_config(name, data_dir)) for name in REDDI_TASKS}


# ------------------------------------------------------------------------- preprocessing rules


def test_shakespeare_rows_frame_pad_and_split():
  a, b = shakespeare.CHAR_VOCAB.index('a') + 1, shakespeare.CHAR_VOCAB.index('b') + 1
  rows = shakespeare.snippet_rows(b'ab\xff')
  # [BOS, a, b, OOV (byte 0xff), EOS] padded with 0 to 81.
  assert rows.shape == (1, 81)
  np.testing.assert_array_equal(rows[0, :6], [88, a, b, 87, 89, 0])
  assert not rows[0, 5:].any()
  # 79 characters + BOS + EOS = 81: one row, no padding; 80 characters: a second row [EOS, 0..].
  assert shakespeare.snippet_rows(b'a' * 79).shape == (1, 81)
  two = shakespeare.snippet_rows(b'a' * 80)
  assert two.shape == (2, 81) and two[1, 0] == 89 and not two[1, 1:].any()
  arrays = shakespeare.to_arrays(
    collections.OrderedDict(snippets=np.array([b'ab', b'a' * 80], object))
  )
  np.testing.assert_array_equal(arrays['x'][:, 1:], arrays['y'][:, :-1])  # shifted by one
  assert arrays['x'].shape == (3, 80) and arrays['x'].dtype == np.int32
  assert len(set(shakespeare.CHAR_VOCAB)) == 86 and shakespeare.VOCAB_SIZE == 90


def test_so_nwp_arrays_truncate_frame_and_cap():
  word_ids = {b'the': 0, b'a': 1}
  raw = collections.OrderedDict(tokens=np.array([b'the a zzz', b' '.join([b'a'] * 25)], object))
  arrays = stackoverflow.nwp_arrays(raw, word_ids)
  # 'the a zzz' -> BOS, 1, 2, OOV (10,001), EOS (3 < 20 words), then pad; x = [:20], y = [1:].
  np.testing.assert_array_equal(arrays['x'][0, :6], [10002, 1, 2, 10001, 10003, 0])
  np.testing.assert_array_equal(arrays['y'][0, :5], [1, 2, 10001, 10003, 0])
  # 25 words: truncated to 20, no EOS; x = BOS + 19 words, y = 20 words.
  np.testing.assert_array_equal(arrays['x'][1], [10002] + [2] * 19)
  np.testing.assert_array_equal(arrays['y'][1], [2] * 20)
  # Only the first 1000 examples of a client.
  many = collections.OrderedDict(tokens=np.array([b'a'] * 1005, object))
  assert stackoverflow.nwp_arrays(many, word_ids)['x'].shape == (1000, 20)


def test_so_lr_arrays_bag_of_words_and_tags():
  word_ids, tag_ids = {b'the': 0, b'a': 1}, {b'python': 3}
  raw = collections.OrderedDict(
    tokens=np.array([b'the the zzz', b''], object),
    title=np.array([b'a', b''], object),
    tags=np.array([b'python|nope', b''], object),
  )
  arrays = stackoverflow.lr_arrays(raw, word_ids, tag_ids)
  assert arrays['x'].shape == (2, 10000) and arrays['y'].shape == (2, 500)
  # 'the the zzz a': 4 words, OOV included in the count then dropped: the 2/4, a 1/4.
  assert arrays['x'][0, 0] == 0.5 and arrays['x'][0, 1] == 0.25
  assert arrays['x'][0].sum() == pytest.approx(0.75)
  assert not arrays['x'][1].any()  # no words at all: zeros
  assert arrays['y'][0, 3] == 1.0 and arrays['y'][0].sum() == 1.0 and not arrays['y'][1].any()


def test_emnist_preprocessing_keeps_cr_pixels_and_inverts_ae():
  pixels = np.random.default_rng(0).uniform(size=(2, 28, 28)).astype(np.float32)
  raw = collections.OrderedDict(label=np.array([3, 61], np.int32), pixels=pixels)
  cr = emnist.cr_arrays(raw)
  np.testing.assert_array_equal(cr['x'][..., 0], pixels)
  ae = emnist.ae_arrays(raw)
  np.testing.assert_allclose(ae['x'], 1.0 - pixels.reshape(2, 784))
  np.testing.assert_array_equal(ae['x'], ae['y'])


def test_sum_reduced_losses_of_emnist_ae_and_so_lr(built):
  rng = np.random.default_rng(1)
  y, p = rng.uniform(size=(2, 3, 784)).astype(np.float32)
  # EMNIST AE: per example the mean squared error over 784 pixels, summed over the 3 examples.
  assert float(built['emnist_ae'].loss_fn()(y, p)) == pytest.approx(
    ((y - p) ** 2).mean(axis=1).sum(), rel=1e-5
  )
  # SO LR: per example the mean binary cross-entropy over 500 tags (on logits), summed.
  labels = (rng.uniform(size=(3, 500)) < 0.01).astype(np.float32)
  z = rng.normal(size=(3, 500)).astype(np.float32)
  bce = np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))
  assert float(built['so_lr'].loss_fn()(labels, z)) == pytest.approx(
    bce.mean(axis=1).sum(), rel=1e-5
  )


def test_pool_clients_reads_once_and_returns_views():
  clients = {
    'b': collections.OrderedDict(x=np.arange(6).reshape(3, 2), y=np.arange(3)),
    'a': collections.OrderedDict(x=np.arange(6, 10).reshape(2, 2), y=np.arange(3, 5)),
  }
  pooled, views = tasks.base.pool_clients(clients)
  np.testing.assert_array_equal(pooled['x'], np.arange(10).reshape(5, 2))  # mapping order
  np.testing.assert_array_equal(pooled['y'], np.arange(5))
  for cid, arrays in clients.items():
    for k in arrays:
      np.testing.assert_array_equal(views[cid][k], arrays[k])
      assert np.shares_memory(views[cid][k], pooled[k])
  with pytest.raises(ValueError, match='at least one client'):
    tasks.base.pool_clients({})


# ------------------------------------------------------------------------- defaults and registry


def test_registry_defaults_are_the_published_settings():
  for name in REDDI_TASKS:
    d = tasks.TASKS[name].defaults
    assert (d.clients_per_round, d.client_batch_size, d.total_rounds) == published.LOOP[name]
  d = tasks.TASKS['emnist_cr'].defaults
  # Table 8 (log10): client -1.5 for all but FedAvg (-1); server adagrad -1, adam -2.5, ...
  assert d.client_learning_rate == pytest.approx(10**-1.5)
  assert d.client_learning_rates['sgd'] == pytest.approx(0.1)
  assert d.server_learning_rate['adam'] == pytest.approx(10**-2.5)
  assert d.server_learning_rate['sgdm'] == pytest.approx(10**-0.5)
  assert d.tau == pytest.approx({'adagrad': 1e-2, 'adam': 1e-4, 'yogi': 1e-4})
  assert tasks.TASKS['so_lr'].defaults.server_learning_rate['adagrad'] == pytest.approx(10.0)


REDDI = os.path.join(
  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
  'reproductions',
  'reddi2021_fedopt',
)
PRESETS = os.path.join(REDDI, 'presets')


def test_presets_are_the_published_tables_and_parse_as_trainer_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top

  from tff_adaptive.run import flags as trainer_flags  # noqa: F401  (defines the flags)

  pairs = reddi_published.preset_pairs()
  # 6 tasks with published learning rates x 5 optimizers (cifar10 has none).
  assert len(pairs) == 30 and not any(t == 'cifar10' for t, _ in pairs)
  files = sorted(f for f in os.listdir(PRESETS) if f.endswith('.flags'))
  assert files == sorted(f'{t}_{o}.flags' for t, o in pairs)
  readme = open(os.path.join(REDDI, 'README.md')).read()
  for task, optimizer in pairs:
    path = os.path.join(PRESETS, f'{task}_{optimizer}.flags')
    with open(path) as f:
      assert f.read() == reddi_published.preset(task, optimizer), path
    assert f'`{task}_{optimizer}.flags`' in readme
    # absl expands the file (comments dropped) into flags the trainer defines; reading a flag
    # file does not change any flag value.
    args = flags.FLAGS.read_flags_from_files([f'--flagfile={path}'], force_gnu=False)
    values = dict(a[2:].split('=', 1) for a in args)
    assert all(name in flags.FLAGS for name in values), values
    assert values['task'] == task and values['server_optimizer'] == optimizer
    expected = published.tuned(task, optimizer)
    for name, value in expected.items():
      assert float(values[name]) == value
  # Spot check against the paper: FedYogi on Stack Overflow NWP, Table 8 (-0.5, -2), Table 9 -5.
  assert published.tuned('so_nwp', 'yogi') == pytest.approx(
    {'client_learning_rate': 10**-0.5, 'server_learning_rate': 0.01, 'tau': 1e-5}
  )


def test_missing_files_name_the_file_and_fetch_command(tmp_path):
  with pytest.raises(datasets.DataNotFoundError, match='emnist_all.sqlite.*tff-adaptive fetch'):
    tasks.build_task(tasks.TaskConfig(name='emnist_cr', data_dir=str(tmp_path)))
  fixtures.write_stackoverflow(str(tmp_path))
  with pytest.raises(datasets.DataNotFoundError, match='stackoverflow.word_count.tar.bz2'):
    tasks.build_task(tasks.TaskConfig(name='so_nwp', data_dir=str(tmp_path)))


# ------------------------------------------------------------------------- Stack Overflow eval


def test_stackoverflow_validation_sample_and_full_test(built, monkeypatch, data_dir):
  task = built['so_nwp']
  full = [c for c in task.final_test()]
  full = {k: np.concatenate([c[k] for c in full]) for k in full[0]}
  # The full test split read by global index equals TFF's clients, in TFF's order, uncapped.
  splits = datasets.load_federated('stackoverflow', data_dir['tff'])
  word_ids = {w.encode(): k for k, w in enumerate(datasets.load_word_counts(data_dir['tff']))}
  by_client = tasks.base.concat_clients(
    datasets.MappedClients(splits.test, lambda raw: stackoverflow.nwp_arrays(raw, word_ids))
  )
  np.testing.assert_array_equal(np.sort(full['x'], axis=0), np.sort(by_client['x'], axis=0))
  total = len(full['x'])
  assert task.eval_sample_size == total  # fewer than 10,000 test examples in the fixture
  np.testing.assert_array_equal(task.central_test['x'], by_client['x'])  # all, in order
  # With a smaller sample: a pure function of (seed, round), distinct examples, rounds differ.
  monkeypatch.setattr(stackoverflow, 'NUM_VALIDATION_EXAMPLES', 3)
  small = tasks.build_task(_config('so_nwp', data_dir))
  first, again = small.validation_sample(5), small.validation_sample(5)
  np.testing.assert_array_equal(first['x'], again['x'])
  assert first['x'].shape == (3, 20) and small.eval_sample_size == 3
  rows = {r.tobytes() for r in by_client['x']}
  samples = [small.validation_sample(r)['x'] for r in range(1, 9)]
  assert all(r.tobytes() in rows for s in samples for r in s)
  assert len({s.tobytes() for s in samples}) > 1


# ------------------------------------------------------------------------- model, round, eval


@pytest.mark.parametrize('name', REDDI_TASKS)
def test_task_model_loss_metrics_and_one_federated_round(built, name):
  task = built[name]
  assert task.name == name and len(task.client_ids) >= 2
  model = task.keras_model_fn(0)
  assert model.count_params() == PARAMS[name]
  cid = task.client_ids[0]
  arrays = task.train_clients[cid]
  assert set(arrays) == {'x', 'y'} and len(arrays['x']) == len(arrays['y']) > 0
  assert {k: v.dtype for k, v in arrays.items()} == {
    k: v.dtype for k, v in task.central_test.items()
  }
  predictions = model(arrays['x'][:4], training=True)
  loss = float(task.loss_fn()(arrays['y'][:4], predictions))
  assert np.isfinite(loss) and loss > 0
  for metric in task.metrics_fn():
    metric.update_state(arrays['y'][:4], predictions)
    assert 0.0 <= float(metric.result()) <= 1.0

  # One FedAvg round (server lr 1: the new model is the weighted mean of the clients' models)
  # on two clients with the task's default batch size and FedAvg client learning rate, as TFF
  # computations. Not cifar10's: its ResNet-18 is cifar100's but for the head (the parameter
  # count above), and cifar100's round runs below (a ResNet round costs ~40 s even in-process).
  if name == 'cifar10':
    return
  ids = task.client_ids[:2]
  lr = task.defaults.client_learning_rates.get('sgd', task.defaults.client_learning_rate)
  algorithm = algorithms.build_fedopt(
    lambda: task.model_fn(0),
    algorithms.ClientTrainingConfig(
      optimizers.ClientOptimizerConfig('sgd', lr), batch_size=task.defaults.client_batch_size
    ),
    optimizers.build_fedavg_sgd(1.0),
  )
  engine = engines.TffEngine(algorithm)
  w0 = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(0))
  state = engine.initialize(w0)
  clients = [
    engines.RoundClient(c, task.train_clients[c], seeds.client_seed(1, 1, i, 2))
    for i, c in enumerate(ids)
  ]
  result = engine.next(state, clients)
  assert np.isfinite(result.metrics['train_loss'])
  assert int(result.metrics['train_num_examples']) == sum(
    len(task.train_clients[c]['y']) for c in ids
  )
  new = engine.model_weights(result.state)
  changed = [not np.allclose(a, b) for a, b in zip(w0.trainable, new.trainable)]
  assert sum(changed) >= len(changed) // 2
  if name == 'cifar100':
    # Crops and flips come from the client seeds (stateless): the same seeds give the same
    # model (stateful random crops would not repeat; tests/tasks/test_reddi_models.py checks that
    # the crops are a function of the seed).
    again = engine.model_weights(engine.next(state, clients).state)
    assert all(np.array_equal(a, b) for a, b in zip(new.trainable, again.trainable))

  evaluator = evaluation.Evaluator(task.keras_model_fn, task.loss_fn, task.metrics_fn)
  results = evaluator.evaluate(new, task.central_test)
  assert list(results) == ['loss'] + [m.name for m in task.metrics_fn()]
  assert all(np.isfinite(v) for v in results.values())
  if task.client_test is not None and not name.startswith('cifar'):
    summary, per_client = evaluator.evaluate_clients(new, task.client_test)
    assert set(per_client) == set(task.client_test)
    assert np.isfinite(summary['loss_mean'])


def test_fmnist_many_small_clients():
  # The DP study's population (reproductions/dp_fedopt): 1000 clients x 60 examples, 80% train.
  if not os.path.isdir('/usr/share/datasets/fashion-mnist'):
    pytest.skip('Fashion-MNIST missing (apt-get install dataset-fashion-mnist)')
  task = tasks.build_task(
    tasks.TaskConfig('fmnist', seed=2, num_clients=1000, examples_per_client=60)
  )
  assert len(task.client_ids) == 1000
  assert {len(c['y']) for c in task.train_clients.values()} == {48}
  assert {len(c['y']) for c in task.client_test.values()} == {12}
  assert '1000 clients x 60 examples' in task.description
