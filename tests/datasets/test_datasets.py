"""Tests for the NumPy dataset layer: IDX loading, Dirichlet partition, Synthetic, splits."""

import gzip
import os

import numpy as np
import pytest

from tff_adaptive.datasets import DataFormatError
from tff_adaptive.datasets import DataNotFoundError
from tff_adaptive.datasets import dirichlet_label_partition
from tff_adaptive.datasets import label_histogram
from tff_adaptive.datasets import leaf_cluster_synthetic
from tff_adaptive.datasets import leaf_synthetic
from tff_adaptive.datasets import load_fashion_mnist
from tff_adaptive.datasets import read_idx
from tff_adaptive.datasets import sample_class_counts
from tff_adaptive.datasets import split_train_test
from tff_adaptive.datasets.fashion_mnist import DEFAULT_FASHION_MNIST_DIR
from tff_adaptive.datasets.fashion_mnist import FASHION_MNIST_FILES

# ---------------------------------------------------------------------------- IDX / Fashion-MNIST


def _idx_bytes(array: np.ndarray, type_code: int = 0x08) -> bytes:
  header = bytes([0, 0, type_code, array.ndim]) + np.asarray(array.shape, '>i4').tobytes()
  return header + array.astype(array.dtype.newbyteorder('>')).tobytes()


def _write_gz(path, payload: bytes) -> None:
  with gzip.open(path, 'wb') as f:
    f.write(payload)


def _write_fixture(directory, n_train=6, n_test=4):
  """Writes a tiny, valid-looking Fashion-MNIST directory (wrong sizes on purpose are tested)."""
  rng = np.random.default_rng(0)
  arrays = {}
  for split, n in (('train', n_train), ('test', n_test)):
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = (np.arange(n) % 10).astype(np.uint8)
    img_name, lbl_name = FASHION_MNIST_FILES[split]
    _write_gz(os.path.join(directory, img_name), _idx_bytes(images))
    _write_gz(os.path.join(directory, lbl_name), _idx_bytes(labels))
    arrays[split] = (images, labels)
  return arrays


def test_read_idx_small_fixture(tmp_path):
  images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  path = str(tmp_path / 'x-idx3-ubyte.gz')
  _write_gz(path, _idx_bytes(images))
  got = read_idx(path)
  assert got.shape == (2, 3, 4) and got.dtype == np.uint8
  np.testing.assert_array_equal(got, images)
  # Header magic 0x00000803 and dims 2, 3, 4 exactly as written.
  with gzip.open(path, 'rb') as f:
    assert f.read(16) == bytes.fromhex('00000803000000020000000300000004')


def test_read_idx_multibyte_big_endian(tmp_path):
  values = np.array([[1, -2], [70000, -300000]], dtype=np.int32)
  path = str(tmp_path / 'ints.idx')
  (tmp_path / 'ints.idx').write_bytes(_idx_bytes(values, type_code=0x0C))
  got = read_idx(path)
  assert got.dtype == np.int32
  np.testing.assert_array_equal(got, values)


def test_load_fixture_directory(tmp_path, monkeypatch):
  from tff_adaptive.datasets import fashion_mnist as fm

  monkeypatch.setattr(fm, '_NUM_EXAMPLES', {'train': 6, 'test': 4})
  arrays = _write_fixture(str(tmp_path))
  data = load_fashion_mnist(str(tmp_path))
  np.testing.assert_array_equal(data.x_train, arrays['train'][0])
  np.testing.assert_array_equal(data.y_train, [0, 1, 2, 3, 4, 5])
  np.testing.assert_array_equal(data.y_test, [0, 1, 2, 3])
  assert data.y_train.dtype == np.int64 and data.x_test.shape == (4, 28, 28)


def test_real_fashion_mnist_files():
  data = load_fashion_mnist()
  assert data.x_train.shape == (60000, 28, 28) and data.x_train.dtype == np.uint8
  assert data.x_test.shape == (10000, 28, 28) and data.x_test.dtype == np.uint8
  assert data.y_train.shape == (60000,) and data.y_test.shape == (10000,)
  np.testing.assert_array_equal(np.bincount(data.y_train, minlength=10), [6000] * 10)
  np.testing.assert_array_equal(np.bincount(data.y_test, minlength=10), [1000] * 10)
  # Published first labels: train starts 9 (ankle boot), 0, 0, 3; test starts 9, 2, 1, 1.
  np.testing.assert_array_equal(data.y_train[:4], [9, 0, 0, 3])
  np.testing.assert_array_equal(data.y_test[:4], [9, 2, 1, 1])
  assert data.x_train.max() == 255 and data.x_train.min() == 0
  with pytest.raises(ValueError):  # read-only arrays, safe to share
    data.x_train[0, 0, 0] = 1


def test_missing_file_names_path_and_remedy(tmp_path):
  with pytest.raises(DataNotFoundError) as info:
    load_fashion_mnist(str(tmp_path))
  expected = os.path.join(str(tmp_path), 'train-images-idx3-ubyte.gz')
  message = str(info.value)
  assert expected in message
  assert 'apt-get install dataset-fashion-mnist' in message and '--data_dir' in message
  assert '\n' not in message
  assert isinstance(info.value, FileNotFoundError)
  assert DEFAULT_FASHION_MNIST_DIR == '/usr/share/datasets/fashion-mnist'


def test_truncated_gzip_raises_format_error(tmp_path, monkeypatch):
  from tff_adaptive.datasets import fashion_mnist as fm

  monkeypatch.setattr(fm, '_NUM_EXAMPLES', {'train': 6, 'test': 4})
  _write_fixture(str(tmp_path))
  path = tmp_path / FASHION_MNIST_FILES['train'][0]
  raw = path.read_bytes()
  path.write_bytes(raw[: len(raw) // 2])
  with pytest.raises(DataFormatError, match=str(path)):
    load_fashion_mnist(str(tmp_path))


def test_truncated_payload_and_bad_magic(tmp_path):
  labels = np.arange(10, dtype=np.uint8)
  short = str(tmp_path / 'short.gz')
  _write_gz(short, _idx_bytes(labels)[:-1])  # valid gzip, IDX payload one byte short
  with pytest.raises(DataFormatError, match='short.gz'):
    read_idx(short)
  bad = str(tmp_path / 'bad.gz')
  _write_gz(bad, b'\x01\x02\x08\x01' + _idx_bytes(labels)[4:])
  with pytest.raises(DataFormatError, match='magic'):
    read_idx(bad)


def test_wrong_shape_raises_format_error(tmp_path):
  _write_fixture(str(tmp_path))  # 6 train examples where 60000 are expected
  with pytest.raises(DataFormatError, match='train-images-idx3-ubyte.gz'):
    load_fashion_mnist(str(tmp_path))


# ---------------------------------------------------------------------------- Dirichlet partition


@pytest.fixture(scope='module')
def balanced_labels():
  """60000 labels, 6000 per class, in the Fashion-MNIST layout (no file access needed)."""
  return np.random.default_rng(123).permutation(np.repeat(np.arange(10), 6000))


def test_partition_sizes_disjoint_deterministic(balanced_labels):
  part = dirichlet_label_partition(balanced_labels, 100, 500, 0.1, seed=0)
  assert len(part) == 100 and all(len(p) == 500 for p in part)
  flat = np.concatenate(part)
  assert len(np.unique(flat)) == 50000
  assert flat.min() >= 0 and flat.max() < 60000
  again = dirichlet_label_partition(balanced_labels, 100, 500, 0.1, seed=0)
  assert all(np.array_equal(a, b) for a, b in zip(part, again))
  other = dirichlet_label_partition(balanced_labels, 100, 500, 0.1, seed=1)
  assert sum(np.array_equal(a, b) for a, b in zip(part, other)) == 0


def test_partition_cifar_shape_and_full_split(balanced_labels):
  part = dirichlet_label_partition(balanced_labels[:50000], 500, 100, 0.1, seed=3)
  assert [len(p) for p in part] == [100] * 500
  assert len(np.unique(np.concatenate(part))) == 50000  # every example used exactly once
  full = dirichlet_label_partition(balanced_labels[:1003], 10, None, 1.0, seed=0)
  assert [len(p) for p in full] == [101, 101, 101] + [100] * 7
  np.testing.assert_array_equal(np.sort(np.concatenate(full)), np.arange(1003))


# Expected mean number of classes holding >= 5% of a client's examples, for q ~ Dir(alpha * 1_10)
# (Monte Carlo over 200,000 draws): alpha 0.01 -> 1.25, 0.1 -> 2.71, 1 -> 6.30, 100 -> 10.0.
# Standard error of a 100-client mean: 0.05, 0.10, 0.12, 0. Tolerance: about 4 standard errors.
@pytest.mark.parametrize(
  'alpha, low, high', [(0.01, 1.0, 1.5), (0.1, 2.3, 3.1), (1.0, 5.8, 6.8), (100.0, 9.9, 10.0)]
)
def test_partition_heterogeneity_statistics(balanced_labels, alpha, low, high):
  part = dirichlet_label_partition(balanced_labels, 100, 500, alpha, seed=0)
  hist = label_histogram(balanced_labels, part, 10)
  assert hist.shape == (100, 10) and np.all(hist.sum(axis=1) == 500)
  mean_classes = np.mean(np.sum(hist >= 0.05 * 500, axis=1))
  assert low <= mean_classes <= high


def test_partition_prunes_exhausted_classes():
  # 3 classes with 10 examples each; every client wants all of class 0 (alpha tiny) but only
  # 10 exist, so the remaining 20 examples must still be handed out without repetition.
  labels = np.repeat(np.arange(3), 10)
  part = dirichlet_label_partition(labels, 3, 10, 1e-4, seed=0)
  np.testing.assert_array_equal(np.sort(np.concatenate(part)), np.arange(30))


def test_partition_empirical_prior_runs():
  labels = np.concatenate([np.zeros(900, int), np.ones(100, int)])
  part = dirichlet_label_partition(labels, 10, 50, 100.0, seed=0, prior='empirical')
  # q_0 ~ Beta(180, 20): mean 0.9, std 0.021 per client; the 500-example share has std about
  # 0.015 (Dirichlet + multinomial). Tolerance 3 std. (A uniform prior would give about 0.5.)
  share = label_histogram(labels, part, 2)[:, 0].sum() / 500
  assert abs(share - 0.9) < 0.045


@pytest.mark.parametrize(
  'kwargs, name',
  [
    (dict(num_clients=0), 'num_clients=0'),
    (dict(examples_per_client=0), 'examples_per_client=0'),
    (dict(num_clients=121, examples_per_client=500), '121 \\* 500'),
    (dict(alpha=0.0), 'alpha=0.0'),
    (dict(alpha=float('nan')), 'alpha=nan'),
    (dict(seed=-1), 'seed=-1'),
    (dict(prior='zipf'), "prior='zipf'"),
  ],
)
def test_partition_validation(balanced_labels, kwargs, name):
  args = dict(labels=balanced_labels, num_clients=100, examples_per_client=500, alpha=0.1, seed=0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    dirichlet_label_partition(**args)


def test_sample_class_counts_respects_availability():
  rng = np.random.default_rng(0)
  counts = sample_class_counts(np.array([1.0, 0.0, 0.0]), np.array([3, 5, 7]), 10, rng)
  assert counts[0] == 3 and counts.sum() == 10 and np.all(counts <= [3, 5, 7])
  # All mass on an exhausted class: the fallback weights decide.
  counts = sample_class_counts(
    np.array([1.0, 0.0, 0.0]), np.array([0, 5, 7]), 5, rng, fallback=np.array([0.0, 0.0, 1.0])
  )
  np.testing.assert_array_equal(counts, [0, 0, 5])


# ---------------------------------------------------------------------------- Synthetic


@pytest.fixture(scope='module')
def synthetic_11():
  return leaf_synthetic(1.0, 1.0, seed=0)


def test_synthetic_shapes_and_sizes(synthetic_11):
  assert len(synthetic_11) == 100
  sizes = np.array([len(y) for _, y in synthetic_11])
  for x, y in synthetic_11:
    assert x.dtype == np.float32 and y.dtype == np.int32
    assert x.shape == (len(y), 60) and y.min() >= 0 and y.max() < 10
  assert sizes.min() >= 50
  # floor(lognormal(4, 2)) + 50: median about e^4 + 50 = 105; seed 0 gives median 112, max 3045.
  assert 80 <= np.median(sizes) <= 140
  assert sizes.max() / np.median(sizes) > 10
  assert sizes.sum() == 35621


def test_synthetic_deterministic_and_seed_dependent(synthetic_11):
  again = leaf_synthetic(1.0, 1.0, seed=0)
  assert all(
    np.array_equal(x1, x2) and np.array_equal(y1, y2)
    for (x1, y1), (x2, y2) in zip(synthetic_11, again)
  )
  other = leaf_synthetic(1.0, 1.0, seed=1)
  assert [len(y) for _, y in other] != [len(y) for _, y in synthetic_11]


def test_synthetic_beta_changes_data_alpha_does_not(synthetic_11):
  # beta moves the feature means: x differs.
  beta0 = leaf_synthetic(1.0, 0.0, seed=0)
  assert not np.allclose(beta0[0][0], synthetic_11[0][0])
  # alpha adds the same u_k to every class logit: labels (and x) are unchanged.
  alpha5 = leaf_synthetic(5.0, 1.0, seed=0)
  assert all(np.array_equal(x1, x2) for (x1, _), (x2, _) in zip(synthetic_11, alpha5))
  agree = np.mean(np.concatenate([y1 == y2 for (_, y1), (_, y2) in zip(synthetic_11, alpha5)]))
  assert agree >= 0.999


def test_synthetic_label_skew_increases_with_beta():
  # Mean over clients of the majority-label fraction, seed 0: beta 0 -> 0.808, 3 -> 0.911,
  # 10 -> 0.978 (far from the 0.1 of a balanced client: Synthetic is strongly label-skewed).
  def majority(beta):
    hist = np.stack([np.bincount(y, minlength=10) for _, y in leaf_synthetic(1.0, beta)])
    return np.mean(hist.max(axis=1) / hist.sum(axis=1))

  values = [majority(b) for b in (0.0, 3.0, 10.0)]
  np.testing.assert_allclose(values, [0.808, 0.911, 0.978], atol=0.005)


def _label_distance(clients, min_examples=200):
  """Total-variation distance of each client's label histogram (clients with at least
  `min_examples`) from the pooled one."""
  pooled = np.bincount(np.concatenate([y for _, y in clients]), minlength=10)
  pooled = pooled / pooled.sum()
  return np.array(
    [
      0.5 * np.abs(np.bincount(y, minlength=10) / len(y) - pooled).sum()
      for _, y in clients
      if len(y) >= min_examples
    ]
  )


def test_synthetic_iid_has_one_labelling_model_and_shared_features(synthetic_11):
  """Synthetic IID (beta 0): every client labels the same N(0, Sigma) features with the same
  model, so each client's label histogram is the pooled one up to sampling (seed 0: TV distance
  mean 0.045, max 0.089 over the 33 clients with >= 200 examples), where Synthetic(0, 0) --
  one model per client even at alpha = 0 -- is far from it (mean 0.78)."""
  iid = leaf_synthetic(0.0, 0.0, seed=0, iid=True)
  assert [len(y) for _, y in iid] == [len(y) for _, y in synthetic_11]  # the same sizes
  distance = _label_distance(iid)
  assert len(distance) == 33 and distance.mean() < 0.07 and distance.max() < 0.15
  assert _label_distance(leaf_synthetic(0.0, 0.0, seed=0)).mean() > 0.6
  big = [x for x, y in iid if len(y) >= 200]
  assert max(np.abs(x.mean(axis=0)).max() for x in big) < 0.25  # x ~ N(0, Sigma)
  again = leaf_synthetic(0.0, 0.0, seed=0, iid=True)
  assert all(np.array_equal(y1, y2) for (_, y1), (_, y2) in zip(iid, again))


def test_synthetic_iid_beta_shifts_every_feature_of_a_client_alike():
  """With iid, client k's features are N(B_k 1, Sigma): one shift for all 60 coordinates
  (the non-IID sets draw v_k ~ N(B_k, 1) per coordinate)."""
  for iid, spread in ((True, (0.0, 0.3)), (False, (0.5, 2.0))):
    clients = leaf_synthetic(0.0, 1.0, seed=0, iid=iid)
    means = np.stack([x.mean(axis=0) for x, y in clients if len(y) >= 200])
    within = np.median(means.std(axis=1))  # spread of one client's coordinate means
    assert spread[0] <= within <= spread[1], (iid, within)
    if iid:
      assert np.std(means.mean(axis=1)) > 0.3  # B_k differs between clients


def _pooled_softmax_regression_accuracy(clients, steps=400, lr=0.5):
  """Per-client accuracies of one softmax regression fitted (full-batch gradient descent) to
  the union of the clients' data: how far one labelling model explains every client."""
  x = np.concatenate([x for x, _ in clients]).astype(np.float64)
  y = np.concatenate([y for _, y in clients])
  w, b, onehot = np.zeros((x.shape[1], 10)), np.zeros(10), np.eye(10)[y]
  for _ in range(steps):
    z = x @ w + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    g = (p / p.sum(axis=1, keepdims=True) - onehot) / len(y)
    w, b = w - lr * x.T @ g, b - lr * g.sum(axis=0)
  return np.array([np.mean(np.argmax(x @ w + b, axis=1) == y) for x, y in clients])


def test_leaf_cluster_synthetic_sizes_and_one_labelling_model():
  """LEAF's generator: sizes min(lognormal(3, 2) + 5, 1000); as its paper states the model, one
  direction labels every client, so one softmax regression fitted to the pooled data is right
  on most of each client's data (seed 1: mean over clients 0.91), where under LEAF's code
  (softmax over each class's examples: per-client class offsets) it is not (0.25)."""
  clients = leaf_cluster_synthetic(seed=1)
  sizes = np.array([len(y) for _, y in clients])
  assert len(clients) == 100 and sizes.min() >= 5 and sizes.max() <= 1000
  assert np.median(sizes) < 60 and (sizes == 1000).any()  # heavy-tailed, capped
  for x, y in clients:
    assert x.dtype == np.float32 and y.dtype == np.int32 and x.shape == (len(y), 60)
  paper = _pooled_softmax_regression_accuracy(clients)
  code = _pooled_softmax_regression_accuracy(
    leaf_cluster_synthetic(seed=1, softmax_over='examples')
  )
  assert paper.mean() > 0.85 and code.mean() < 0.4, (paper.mean(), code.mean())
  again = leaf_cluster_synthetic(seed=1)
  assert all(np.array_equal(x1, x2) for (x1, _), (x2, _) in zip(clients, again))


def test_leaf_code_softmax_over_examples_evens_out_each_clients_labels():
  """LEAF's code normalises each class over the client's examples, so the label offsets even
  out the labels within a client (seed 1: majority label 0.19 of a client on average, against
  0.85 with the softmax over classes); the features are the same draw either way."""
  classes = leaf_cluster_synthetic(seed=1)
  examples = leaf_cluster_synthetic(seed=1, softmax_over='examples')
  majority = lambda clients: np.mean(
    [np.bincount(y, minlength=10).max() / len(y) for _, y in clients if len(y) >= 50]
  )
  assert majority(examples) < 0.3 < 0.7 < majority(classes)
  assert all(np.array_equal(x1, x2) for (x1, _), (x2, _) in zip(classes, examples))
  with pytest.raises(ValueError, match="softmax_over='rows'"):
    leaf_cluster_synthetic(softmax_over='rows')


@pytest.mark.parametrize(
  'kwargs, name',
  [
    (dict(alpha=-1.0), 'alpha=-1.0'),
    (dict(beta=float('inf')), 'beta=inf'),
    (dict(num_clients=0), 'num_clients=0'),
    (dict(num_classes=1), 'num_classes=1'),
    (dict(seed=-3), 'seed=-3'),
  ],
)
def test_synthetic_validation(kwargs, name):
  args = dict(alpha=1.0, beta=1.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=name):
    leaf_synthetic(**args)


# ---------------------------------------------------------------------------- splits


@pytest.mark.parametrize(
  'n, n_train, n_test', [(105, 84, 21), (10, 8, 2), (50, 40, 10), (4, 4, 0), (5, 4, 1), (1, 1, 0)]
)
def test_split_train_test_sizes(n, n_train, n_test):
  train, test = split_train_test(n, 0.2, seed=7)
  assert (len(train), len(test)) == (n_train, n_test)
  np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(n))


def test_split_train_test_deterministic_and_keeps_one_train():
  a = split_train_test(100, 0.2, seed=1)
  b = split_train_test(100, 0.2, seed=1)
  c = split_train_test(100, 0.2, seed=2)
  assert np.array_equal(a[1], b[1]) and not np.array_equal(a[1], c[1])
  train, test = split_train_test(3, 0.9, seed=0)
  assert (len(train), len(test)) == (1, 2)
  for bad, name in [
    ((0, 0.2, 0), 'n=0'),
    ((10, 1.0, 0), 'test_fraction=1.0'),
    ((10, -0.1, 0), 'test_fraction=-0.1'),
    ((10, 0.2, -1), 'seed=-1'),
  ]:
    with pytest.raises(ValueError, match=name):
      split_train_test(*bad)
