"""Dataset layer: NumPy loaders, federated partitioners and synthetic generators."""

from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError
from tff_adaptive.datasets.fashion_mnist import DEFAULT_FASHION_MNIST_DIR
from tff_adaptive.datasets.fashion_mnist import FashionMnist
from tff_adaptive.datasets.fashion_mnist import load_fashion_mnist
from tff_adaptive.datasets.fashion_mnist import read_idx
from tff_adaptive.datasets.partitioners import dirichlet_label_partition
from tff_adaptive.datasets.partitioners import label_histogram
from tff_adaptive.datasets.partitioners import sample_class_counts
from tff_adaptive.datasets.splits import split_train_test
from tff_adaptive.datasets.synthetic import leaf_cluster_synthetic
from tff_adaptive.datasets.synthetic import leaf_synthetic
from tff_adaptive.datasets.synthetic import synthetic_client_sizes

__all__ = [
  'DEFAULT_FASHION_MNIST_DIR',
  'DataFormatError',
  'DataNotFoundError',
  'FashionMnist',
  'dirichlet_label_partition',
  'label_histogram',
  'leaf_cluster_synthetic',
  'leaf_synthetic',
  'load_fashion_mnist',
  'read_idx',
  'sample_class_counts',
  'split_train_test',
  'synthetic_client_sizes',
]

from tff_adaptive.datasets.cifar10 import CIFAR10_TFDS_VERSION
from tff_adaptive.datasets.cifar10 import Cifar10
from tff_adaptive.datasets.cifar10 import FederatedCifar10  # noqa: E402
from tff_adaptive.datasets.cifar10 import cifar10_prepared_dir
from tff_adaptive.datasets.cifar10 import federated_cifar10
from tff_adaptive.datasets.cifar10 import load_cifar10
from tff_adaptive.datasets.pachinko import pachinko_allocation_partition  # noqa: E402

__all__ += [
  'CIFAR10_TFDS_VERSION',
  'Cifar10',
  'FederatedCifar10',
  'cifar10_prepared_dir',
  'federated_cifar10',
  'load_cifar10',
  'pachinko_allocation_partition',
]

from tff_adaptive.datasets.stackoverflow_counts import load_tag_counts  # noqa: E402
from tff_adaptive.datasets.stackoverflow_counts import load_word_counts  # noqa: E402
from tff_adaptive.datasets.tff_sqlite import ClientArrays  # noqa: E402
from tff_adaptive.datasets.tff_sqlite import FederatedSplits
from tff_adaptive.datasets.tff_sqlite import MappedClients
from tff_adaptive.datasets.tff_sqlite import SqlClients  # noqa: E402
from tff_adaptive.datasets.tff_sqlite import load_federated

__all__ += [
  'ClientArrays',
  'FederatedSplits',
  'MappedClients',
  'SqlClients',
  'load_federated',
  'load_tag_counts',
  'load_word_counts',
]

from tff_adaptive.datasets.tff_format import cifar100_example  # noqa: E402
from tff_adaptive.datasets.tff_format import emnist_example
from tff_adaptive.datasets.tff_format import serialize_example
from tff_adaptive.datasets.tff_format import shakespeare_example
from tff_adaptive.datasets.tff_format import stackoverflow_example
from tff_adaptive.datasets.tff_format import write_emnist_scale
from tff_adaptive.datasets.tff_format import write_tff_sqlite

__all__ += [
  'cifar100_example',
  'emnist_example',
  'serialize_example',
  'shakespeare_example',
  'stackoverflow_example',
  'write_emnist_scale',
  'write_tff_sqlite',
]

from tff_adaptive.datasets.required import DataFile  # noqa: E402
from tff_adaptive.datasets.required import check_data_files

__all__ += ['DataFile', 'check_data_files']
