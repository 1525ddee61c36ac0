"""Arithmetic on nests of tensors (model-shaped structures), as pure TF functions."""

from collections.abc import Sequence
from typing import Any

import tensorflow as tf


def zeros_like(tree: Any) -> Any:
  return tf.nest.map_structure(tf.zeros_like, tree)


def add(a: Any, b: Any) -> Any:
  return tf.nest.map_structure(tf.add, a, b)


def sub(a: Any, b: Any) -> Any:
  return tf.nest.map_structure(tf.subtract, a, b)


def scale(tree: Any, factor: tf.Tensor) -> Any:
  return tf.nest.map_structure(lambda t: t * tf.cast(factor, t.dtype), tree)


def add_scaled(acc: Any, tree: Any, factor: tf.Tensor) -> Any:
  """acc + factor * tree, leaf by leaf (an accumulation step of a weighted sum)."""
  return tf.nest.map_structure(lambda a, t: a + tf.cast(factor, t.dtype) * t, acc, tree)


def divide_no_nan(tree: Any, denominator: tf.Tensor) -> Any:
  """tree / denominator, 0 where the denominator is 0 (as tff.aggregators.MeanFactory)."""
  return tf.nest.map_structure(
    lambda t: tf.math.divide_no_nan(t, tf.cast(denominator, t.dtype)), tree
  )


def weighted_mean(trees: Sequence[Any], weights: Sequence[tf.Tensor]) -> Any:
  """sum_i w_i x_i / sum_i w_i, in the order given (0 if every weight is 0)."""
  total = tf.add_n([tf.cast(w, tf.float32) for w in weights])
  acc = zeros_like(trees[0])
  for tree, w in zip(trees, weights):
    acc = add_scaled(acc, tree, w)
  return divide_no_nan(acc, total)


def global_norm(tree: Any) -> tf.Tensor:
  """||x||_2 over every leaf of the nest."""
  return tf.linalg.global_norm(tf.nest.flatten(tree))


def all_finite(tree: Any) -> tf.Tensor:
  """True iff every element of every floating leaf is finite (a bool scalar)."""
  leaves = [t for t in tf.nest.flatten(tree) if t.dtype.is_floating]
  if not leaves:
    return tf.constant(True)
  return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in leaves]))
