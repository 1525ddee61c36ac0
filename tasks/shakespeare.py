"""shakespeare: next-character prediction on TFF's Shakespeare (715 roles), Reddi et al. App. C.3.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Data: TFF's ``shakespeare.sqlite`` (LEAF's split by speaking role),
``datasets.load_federated('shakespeare', data_dir)``.

Preprocessing, as the authors' code (google-research/federated, shakespeare_dataset.py): each
snippet's BYTES are mapped to ids through the 86-character vocabulary ``CHAR_VOCAB`` (the TFF
text-generation tutorial's), character k -> k + 1, any other byte -> OOV; the ids are framed as
[BOS] + ids + [EOS], padded with 0 to a multiple of 81 and cut into rows of 81; input = the
first 80 of a row, target = the last 80 (shifted by one). Ids: pad 0, characters 1..86, OOV 87,
BOS 88, EOS 89 (vocabulary 90). A row never spans two snippets.

Model: Table 5 (``reddi_models.build_shakespeare_lstm``, 820,522 parameters). Loss: softmax
cross-entropy averaged over every position of the batch, padding included (the authors' TF 2.2
losses did not apply the embedding's mask). Metric ``accuracy``: top-1 accuracy over target
positions that are not padding (the authors' ``MaskedCategoricalAccuracy(masked_tokens=[pad])``;
OOV, BOS and EOS targets count). Defaults: 10 clients/round, batch 4, 1200 rounds (the authors'
docs; Sec. 4 says 1500), learning rates and tau of Tables 8-9. Validation: the pooled test
split; per-client metrics on each role's own test lines (``client_test``, views into it).

Differences from the authors' pipeline: they shuffled snippets (buffer 50) and kept each
snippet's rows together; here local training shuffles rows uniformly. They weighted client
updates by the number of non-pad target tokens; FedOpt here weights by examples (rows), as the
paper's Algorithm 1 (n_i).
"""

import collections

import numpy as np
import tensorflow as tf

from tff_adaptive import datasets
from tff_adaptive.datasets import checks
from tff_adaptive.tasks import base
from tff_adaptive.tasks import catalog
from tff_adaptive.tasks import metrics
from tff_adaptive.tasks import reddi_models

DEFAULT_DATA_DIR = catalog.TFF_DATA_DIR
CHAR_VOCAB = (
  'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
)
PAD, OOV, BOS, EOS = 0, len(CHAR_VOCAB) + 1, len(CHAR_VOCAB) + 2, len(CHAR_VOCAB) + 3
VOCAB_SIZE = len(CHAR_VOCAB) + 4  # 90
SEQUENCE_LENGTH = 80

DEFAULTS = catalog.TASKS['shakespeare'].defaults  # Reddi et al.'s (`tasks.published`)

_BYTE_TO_ID = np.full(256, OOV, np.int32)
_BYTE_TO_ID[np.frombuffer(CHAR_VOCAB.encode('ascii'), np.uint8)] = np.arange(
  1, len(CHAR_VOCAB) + 1, dtype=np.int32
)


def snippet_rows(snippet: bytes, sequence_length: int = SEQUENCE_LENGTH) -> np.ndarray:
  """int32 [rows, sequence_length + 1]: one snippet framed, padded and cut (module doc)."""
  ids = _BYTE_TO_ID[np.frombuffer(snippet, np.uint8)]
  tokens = np.concatenate([[BOS], ids, [EOS]]).astype(np.int32)
  width = sequence_length + 1
  tokens = np.pad(tokens, (0, -len(tokens) % width))
  return tokens.reshape(-1, width)


def to_arrays(raw: collections.OrderedDict) -> base.ClientArrays:
  """TFF Shakespeare features (``snippets`` bytes [n]) -> x, y int32 [rows, 80]."""
  checks.check_some_text('snippets', raw['snippets'])
  rows = [snippet_rows(bytes(s)) for s in raw['snippets']]
  seq = np.concatenate(rows) if rows else np.zeros((0, SEQUENCE_LENGTH + 1), np.int32)
  return collections.OrderedDict(x=seq[:, :-1].copy(), y=seq[:, 1:].copy())


def build_shakespeare_task(config: base.TaskConfig) -> base.Task:
  """Shakespeare next-character prediction with the LSTM of Reddi et al. Table 5."""
  splits = datasets.load_federated('shakespeare', config.data_dir or DEFAULT_DATA_DIR)
  train = datasets.MappedClients(splits.train, to_arrays)
  central_test, client_test = base.pool_clients(datasets.MappedClients(splits.test, to_arrays))
  return base.Task(
    name='shakespeare',
    train_clients=train,
    central_test=central_test,
    client_test=client_test,
    keras_model_fn=lambda seed=None: reddi_models.build_shakespeare_lstm(seed=seed),
    loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics_fn=lambda: [metrics.MaskedAccuracy(masked_tokens=[PAD], name='accuracy')],
    defaults=DEFAULTS,
    description=(
      f'Shakespeare next character (Reddi et al. 2021), {len(train)} train roles, '
      f'LSTM (Table 5), {splits.path}'
    ),
  )
