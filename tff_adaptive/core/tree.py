"""Arithmetic on nests of tensors (model-shaped structures), as pure TF functions."""

from typing import Any

import tensorflow as tf


def add(a: Any, b: Any) -> Any:
  return tf.nest.map_structure(tf.add, a, b)


def sub(a: Any, b: Any) -> Any:
  return tf.nest.map_structure(tf.subtract, a, b)


def add_scaled(acc: Any, tree: Any, factor: tf.Tensor) -> Any:
  """acc + factor * tree, leaf by leaf (an accumulation step of a weighted sum)."""
  return tf.nest.map_structure(lambda a, t: a + tf.cast(factor, t.dtype) * t, acc, tree)


def divide_no_nan(tree: Any, denominator: tf.Tensor) -> Any:
  """tree / denominator, 0 where the denominator is 0 (as tff.aggregators.MeanFactory)."""
  return tf.nest.map_structure(
    lambda t: tf.math.divide_no_nan(t, tf.cast(denominator, t.dtype)), tree
  )


def all_finite(tree: Any) -> tf.Tensor:
  """True iff every element of every floating leaf is finite (a bool scalar)."""
  leaves = [t for t in tf.nest.flatten(tree) if t.dtype.is_floating]
  if not leaves:
    return tf.constant(True)
  return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in leaves]))


def scale(tree: Any, factor: tf.Tensor) -> Any:
  """factor * tree, leaf by leaf."""
  return tf.nest.map_structure(lambda t: tf.cast(factor, t.dtype) * t, tree)


def global_norm(tree: Any) -> tf.Tensor:
  """||tree||_2 over all leaves (float32 scalar)."""
  return tf.linalg.global_norm([tf.cast(t, tf.float32) for t in tf.nest.flatten(tree)])
