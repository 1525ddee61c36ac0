"""Checks that parsed examples can be data: values within their format's range.

A stored example can parse as TFF's features and still not be data: random bytes, or another
dataset's records, give pixels outside [0, 1], labels outside the task's classes or texts that
are all empty, and a model trains on them without a word (accuracy 0). Each task's conversion
of a client's raw features calls these; the ValueError they raise is reported by
`MappedClients` in one line naming the client, its split and its file (a `DataFormatError`),
when the client is first read: before it trains or is evaluated.
"""

import numpy as np


def check_in_range(name: str, values, low: float, high: float) -> None:
  """Every value of `values` is finite and within [low, high].

  Raises:
    ValueError: naming `name`, how many values are not, and the first of them.
  """
  values = np.asarray(values)
  if values.size == 0:
    return
  bad = (values < low) | (values > high)
  if np.issubdtype(values.dtype, np.floating):
    bad |= ~np.isfinite(values)
  if bad.any():
    raise ValueError(
      f'{name}: {int(bad.sum())} of {values.size} values are outside [{low}, {high}] '
      f'(the first: {values[bad].flat[0]!r})'
    )


def check_labels(name: str, labels, num_classes: int) -> None:
  """Every label is one of the task's classes 0..num_classes-1."""
  labels = np.asarray(labels)
  bad = (labels < 0) | (labels >= num_classes)
  if bad.any():
    raise ValueError(
      f"{name}: {int(bad.sum())} of {labels.size} labels are not one of the task's "
      f'{num_classes} classes 0..{num_classes - 1} (the first: {labels[bad].flat[0]!r})'
    )


def check_some_text(name: str, texts) -> None:
  """At least one of a client's `texts` is not empty (single empty texts occur in real data;
  a client whose every text is empty holds nothing to train on)."""
  if len(texts) and not any(len(bytes(t).strip()) for t in texts):
    raise ValueError(f'{name}: all {len(texts)} texts are empty')
