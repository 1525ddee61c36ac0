"""so_nwp and so_lr: TFF's Stack Overflow (342,477 users), Reddi et al. 2021, App. C.4 and E.2.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Data: TFF's ``stackoverflow.sqlite`` (train and test splits; the
heldout users are not used, as in the authors' code) and the word/tag count archives
``stackoverflow.word_count.tar.bz2``, ``stackoverflow.tag_count.tar.bz2`` in the same directory.
Vocabulary: the 10,000 most frequent words (word count file order); labels: the 500 most
frequent tags. Each training client keeps its FIRST 1000 examples (in the order TFF's loader
reads them), as the authors' code does for both tasks (the paper states it for NWP).

so_nwp (next word), preprocessing as the authors' stackoverflow_word_prediction.py: the
``tokens`` string split on single spaces, truncated to 20 words, word k -> k + 1, other words
-> OOV; EOS appended when fewer than 20 words, BOS prepended, padded with 0 to 21; input = the
first 20 ids, target = the last 20. Ids: pad 0, words 1..10,000, OOV 10,001, BOS 10,002, EOS
10,003 (fixed, also with a shorter vocabulary file). Model: Table 6 (4,050,748 parameters).
Loss: cross-entropy averaged over every position, padding included (as the authors' TF 2.2
losses). Metric ``accuracy``: top-1 accuracy over target positions that are proper words (pad,
OOV, BOS, EOS excluded). Defaults: 50 clients/round, batch 16, 1500 rounds.

so_lr (tag prediction), as the authors' stackoverflow_lr_dataset.py: x = the bag of words of
``tokens + ' ' + title`` split on whitespace, counts divided by the number of words INCLUDING
out-of-vocabulary ones, then the OOV entry dropped (so x sums to the in-vocabulary fraction; the
paper says "normalized to have sum 1"); an example without words gets x = 0. y = 0/1 indicators
of the example's '|'-separated tags among the 500. Model: one-vs-rest logistic regression
(5,000,500 parameters) on logits; loss: Keras ``BinaryCrossentropy(from_logits=True,
reduction=SUM)`` (per example the mean over the 500 tags, summed over the batch, as the authors'
code; the published learning rates assume it). Metrics: ``recall_at_5`` (the paper's),
``precision``, ``micro_f1``, ``macro_f1`` (FedPA's Table 3c); see ``tasks.metrics``. Defaults: 10
clients/round, batch 100, 1500 rounds.

Validation (App. E.2): each evaluation uses 10,000 test examples drawn uniformly without
replacement, a pure function of (seed, round) (``Task.validation_sample``); after training, the
full test split (16,586,035 examples) streamed in chunks (``Task.final_test``). The authors'
code used the first 10,000 test examples every round instead of a fresh sample.
"""

import collections
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
import functools
import pathlib
import sqlite3

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.datasets import checks
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import metrics
from tff_adaptive.tasks import reddi_models

DEFAULT_DATA_DIR = catalog.TFF_DATA_DIR
VOCAB_SIZE = 10_000
NUM_TAGS = 500
SEQUENCE_LENGTH = 20
MAX_EXAMPLES_PER_CLIENT = 1000
NUM_VALIDATION_EXAMPLES = 10_000
FINAL_TEST_CHUNK = 10_000
PAD, OOV, BOS, EOS = 0, VOCAB_SIZE + 1, VOCAB_SIZE + 2, VOCAB_SIZE + 3

NWP_DEFAULTS = catalog.TASKS['so_nwp'].defaults  # Reddi et al.'s (`tasks.published`)
LR_DEFAULTS = catalog.TASKS['so_lr'].defaults


def _index(words: Sequence[str]) -> dict[bytes, int]:
  return {w.encode('utf-8'): k for k, w in enumerate(words)}


def _first(raw: Mapping[str, np.ndarray], limit: int) -> int:
  return min(len(raw['tokens']), limit)


def nwp_arrays(
  raw: Mapping[str, np.ndarray],
  word_ids: Mapping[bytes, int],
  max_examples: int = MAX_EXAMPLES_PER_CLIENT,
) -> base.ClientArrays:
  """Raw Stack Overflow features -> x, y int32 [n, 20] (module doc), n <= max_examples."""
  checks.check_some_text('tokens', raw['tokens'])
  n = _first(raw, max_examples)
  seq = np.zeros((n, SEQUENCE_LENGTH + 1), np.int32)
  for i in range(n):
    words = bytes(raw['tokens'][i]).split(b' ')[:SEQUENCE_LENGTH]
    ids = [word_ids.get(w, VOCAB_SIZE) + 1 for w in words]
    if len(ids) < SEQUENCE_LENGTH:
      ids.append(EOS)
    seq[i, 0] = BOS
    seq[i, 1 : len(ids) + 1] = ids
  return collections.OrderedDict(x=seq[:, :-1].copy(), y=seq[:, 1:].copy())


def lr_arrays(
  raw: Mapping[str, np.ndarray],
  word_ids: Mapping[bytes, int],
  tag_ids: Mapping[bytes, int],
  max_examples: int = MAX_EXAMPLES_PER_CLIENT,
) -> base.ClientArrays:
  """Raw features -> x float32 [n, 10000] bag of words, y float32 [n, 500] tags (module doc)."""
  checks.check_some_text('tokens', raw['tokens'])
  checks.check_some_text('tags', raw['tags'])
  n = _first(raw, max_examples)
  x = np.zeros((n, VOCAB_SIZE + 1), np.float32)
  y = np.zeros((n, NUM_TAGS), np.float32)
  for i in range(n):
    words = (bytes(raw['tokens'][i]) + b' ' + bytes(raw['title'][i])).split()
    if words:
      ids = np.fromiter((word_ids.get(w, VOCAB_SIZE) for w in words), np.int64, len(words))
      x[i] = np.bincount(ids, minlength=VOCAB_SIZE + 1) / np.float32(len(words))
    for tag in bytes(raw['tags'][i]).split(b'|'):
      if tag in tag_ids:
        y[i, tag_ids[tag]] = 1.0
  return collections.OrderedDict(x=x[:, :VOCAB_SIZE].copy(), y=y)


_PARSE_SPEC = {k: tf.io.FixedLenFeature([], tf.string) for k in ('tags', 'title', 'tokens')}


def _parse(protos: Sequence[bytes]) -> collections.OrderedDict:
  parsed = tf.io.parse_example(tf.constant(list(protos), tf.string), _PARSE_SPEC)
  return collections.OrderedDict((k, v.numpy()) for k, v in parsed.items())


class SplitExamples:
  """One split of stackoverflow.sqlite addressed by global example index, without loading it.

  Example g is example g - start(c) of client c, clients in TFF's (sorted) order, examples in
  rowid order (the order TFF's loader reads them); starts come from
  client_metadata.num_examples. Reading k examples costs k indexed queries.
  """

  def __init__(self, path: str, split: str, client_ids: Sequence[str]):
    self._uri = pathlib.Path(path).resolve().as_uri() + '?mode=ro'
    self._path, self._split = path, split
    con = sqlite3.connect(self._uri, uri=True)
    try:
      counts = dict(
        con.execute(
          'SELECT client_id, num_examples FROM client_metadata WHERE split_name = ?', (split,)
        )
      )
    finally:
      con.close()
    self._ids = list(client_ids)
    sizes = np.array([counts.get(c, 0) for c in self._ids], np.int64)
    self._starts = np.concatenate([[0], np.cumsum(sizes)])

  @property
  def num_examples(self) -> int:
    return int(self._starts[-1])

  def read(self, indices: np.ndarray) -> list[bytes]:
    """The serialized examples at strictly increasing global `indices`, in that order.

    One indexed query per example (LIMIT 1 OFFSET within its client, rowid order, the order of
    TFF's loader), so a client's other examples are never read.

    Raises:
      ValueError: `indices` are not strictly increasing within [0, num_examples).
    """
    indices = np.asarray(indices, np.int64)
    if indices.size and (
      np.any(np.diff(indices) <= 0) or indices[0] < 0 or indices[-1] >= self.num_examples
    ):
      raise ValueError(f'indices must be strictly increasing in [0, {self.num_examples})')
    owners = np.searchsorted(self._starts, indices, side='right') - 1
    out = []
    con = sqlite3.connect(self._uri, uri=True)
    try:
      for owner, offset in zip(owners, indices - self._starts[owners]):
        row = con.execute(
          'SELECT serialized_example_proto FROM examples WHERE client_id = ? AND '
          'split_name = ? ORDER BY rowid LIMIT 1 OFFSET ?',
          (self._ids[owner], self._split, int(offset)),
        ).fetchone()
        if row is None:
          raise datasets.DataFormatError(
            f'{self._path}: client {self._ids[owner]!r} of split {self._split!r} has '
            f'fewer than {offset + 1} examples; client_metadata says '
            f'{self._starts[owner + 1] - self._starts[owner]}'
          )
        out.append(row[0])
    finally:
      con.close()
    return out

  def scan(self, chunk: int) -> Iterator[list[bytes]]:
    """Every example of the split, in chunks of `chunk` serialized examples."""
    con = sqlite3.connect(self._uri, uri=True)
    try:
      cursor = con.execute(
        'SELECT serialized_example_proto FROM examples WHERE split_name = ?', (self._split,)
      )
      while rows := cursor.fetchmany(chunk):
        yield [r[0] for r in rows]
    finally:
      con.close()


def _build(
  config: base.TaskConfig,
  name: str,
  to_arrays: Callable[[Mapping[str, np.ndarray]], base.ClientArrays],
  **task_fields,
) -> base.Task:
  data_dir = config.data_dir or DEFAULT_DATA_DIR
  splits = datasets.load_federated('stackoverflow', data_dir)
  test = SplitExamples(splits.path, splits.test.split, splits.test.client_ids)
  if test.num_examples == 0:
    raise datasets.DataFormatError(f'{splits.path}: the test split has no examples')
  size = min(NUM_VALIDATION_EXAMPLES, test.num_examples)
  seed = config.seed

  def validation_sample(round_num: int) -> base.ClientArrays:
    rng = np.random.default_rng([seed, round_num])
    indices = np.sort(rng.choice(test.num_examples, size, replace=False))
    return to_arrays(_parse(test.read(indices)), max_examples=size)

  def final_test() -> Iterator[base.ClientArrays]:
    for protos in test.scan(FINAL_TEST_CHUNK):
      yield to_arrays(_parse(protos), max_examples=len(protos))

  train = datasets.MappedClients(splits.train, to_arrays)
  return base.Task(
    name=name,
    train_clients=train,
    central_test=validation_sample(0),
    validation_sample=validation_sample,
    eval_sample_size=size,
    final_test=final_test,
    description=(
      f'{task_fields.pop("what")} (Reddi et al. 2021), {len(train)} train users, '
      f'validation {size} random test examples per evaluation, {splits.path}'
    ),
    **task_fields,
  )


def build_so_nwp_task(config: base.TaskConfig) -> base.Task:
  """Stack Overflow next-word prediction with the LSTM of Reddi et al. Table 6."""
  data_dir = config.data_dir or DEFAULT_DATA_DIR
  word_ids = _index(list(datasets.load_word_counts(data_dir, vocab_size=VOCAB_SIZE)))
  return _build(
    config,
    'so_nwp',
    functools.partial(nwp_arrays, word_ids=word_ids),
    keras_model_fn=lambda seed=None: reddi_models.build_so_nwp_lstm(seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [
      metrics.MaskedAccuracy(masked_tokens=[PAD, OOV, BOS, EOS], name='accuracy')
    ],
    defaults=NWP_DEFAULTS,
    what='Stack Overflow next word, LSTM (Table 6)',
  )


def build_so_lr_task(config: base.TaskConfig) -> base.Task:
  """Stack Overflow tag prediction by one-vs-rest logistic regression (Reddi et al. C.4)."""
  data_dir = config.data_dir or DEFAULT_DATA_DIR
  word_ids = _index(list(datasets.load_word_counts(data_dir, vocab_size=VOCAB_SIZE)))
  tag_ids = _index(list(datasets.load_tag_counts(data_dir))[:NUM_TAGS])
  return _build(
    config,
    'so_lr',
    functools.partial(lr_arrays, word_ids=word_ids, tag_ids=tag_ids),
    keras_model_fn=lambda seed=None: reddi_models.build_so_lr(seed=seed),
    loss_fn=lambda: tf.keras.losses.BinaryCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.SUM
    ),
    metrics_fn=lambda: [
      metrics.RecallAtK(5, name='recall_at_5'),
      metrics.MultiLabelPrecision(NUM_TAGS, name='precision'),
      metrics.MultiLabelF1(NUM_TAGS, average='micro', name='micro_f1'),
      metrics.MultiLabelF1(NUM_TAGS, average='macro', name='macro_f1'),
    ],
    defaults=LR_DEFAULTS,
    what='Stack Overflow tag prediction, logistic regression',
  )
