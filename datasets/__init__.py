"""Dataset layer: NumPy loaders, federated partitioners and synthetic generators."""

from datasets.errors import DataFormatError, DataNotFoundError
from datasets.fashion_mnist import (DEFAULT_FASHION_MNIST_DIR, FashionMnist, load_fashion_mnist,
                                    read_idx)
from datasets.partitioners import dirichlet_label_partition, label_histogram, sample_class_counts
from datasets.splits import split_train_test
from datasets.synthetic import leaf_synthetic, synthetic_client_sizes

__all__ = [
    "DEFAULT_FASHION_MNIST_DIR",
    "DataFormatError",
    "DataNotFoundError",
    "FashionMnist",
    "dirichlet_label_partition",
    "label_histogram",
    "leaf_synthetic",
    "load_fashion_mnist",
    "read_idx",
    "sample_class_counts",
    "split_train_test",
    "synthetic_client_sizes",
]
