"""StackOverflow word and tag counts from TFF's archives in a local data directory.

Reddi et al., "Adaptive Federated Optimization", ICLR 2021, App. C.4 build the StackOverflow
vocabulary (10,000 most frequent words) and label set (500 most frequent tags) from TFF's
published counts. ``tff.simulation.datasets.stackoverflow.load_word_counts``/``load_tag_counts``
download ``stackoverflow.word_count.tar.bz2`` and ``stackoverflow.tag_count.tar.bz2`` with Keras'
``get_file`` into ~/.keras/datasets, extract them and read the members
``stackoverflow.word_count`` (one ``word count`` line per word, most frequent first) and
``stackoverflow.tag_count`` (a JSON object tag -> count). These functions read the same members
straight out of the archives in ``data_dir`` (no extraction, no network) and return exactly what
TFF returns: the first ``vocab_size`` words in file order, and the tags sorted by decreasing count
(ties in file order).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
import contextlib
import io
import json
import os
import tarfile
from typing import IO

from tff_adaptive import commands
from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError

__all__ = [
  'TAG_COUNTS_ARCHIVE',
  'WORD_COUNTS_ARCHIVE',
  'load_tag_counts',
  'load_word_counts',
  'read_tag_counts_archive',
  'read_word_counts_archive',
]

WORD_COUNTS_ARCHIVE = 'stackoverflow.word_count.tar.bz2'
TAG_COUNTS_ARCHIVE = 'stackoverflow.tag_count.tar.bz2'
_WORD_MEMBER = 'stackoverflow.word_count'
_TAG_MEMBER = 'stackoverflow.tag_count'


def _archive_path(data_dir: str, name: str) -> str:
  path = os.path.join(os.path.abspath(data_dir), name)
  if not os.path.isfile(path):
    raise DataNotFoundError(
      f"{path} not found (TFF's StackOverflow counts archive); fetch it on a connected "
      f'machine with: {commands.command("fetch")} --data_dir={os.path.abspath(data_dir)} '
      '--dataset=stackoverflow_counts'
    )
  return path


@contextlib.contextmanager
def _open_member(path: str, member: str) -> Iterator[IO[str]]:
  """Text stream of `member` of the tar archive `path` (any compression)."""
  try:
    with tarfile.open(path, 'r:*') as tar:
      info = next(
        (m for m in tar.getmembers() if m.isfile() and os.path.normpath(m.name) == member), None
      )
      if info is None:
        raise DataFormatError(
          f'{path} has no member {member!r} (members: {", ".join(tar.getnames()) or "none"})'
        )
      with io.TextIOWrapper(tar.extractfile(info), encoding='utf-8') as f:
        yield f
  except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as e:
    raise DataFormatError(f'{path} is not a readable tar archive: {e}') from None


def read_word_counts_archive(path: str, vocab_size: int | None = None) -> collections.OrderedDict:
  """Word -> count from the archive at `path`, the first `vocab_size` words (all if None)."""
  if vocab_size is not None and (
    isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0
  ):
    raise ValueError(f'vocab_size must be None or a positive int, got {vocab_size!r}')
  word_counts = collections.OrderedDict()
  with _open_member(path, _WORD_MEMBER) as f:
    for line_num, line in enumerate(f, start=1):
      parts = line.split()
      if len(parts) != 2 or not parts[1].lstrip('-').isdigit():
        raise DataFormatError(
          f"{path}: line {line_num} of {_WORD_MEMBER} is not 'word count': {line.strip()[:60]!r}"
        )
      word_counts[parts[0]] = int(parts[1])
      if vocab_size is not None and len(word_counts) >= vocab_size:
        break
  return word_counts


def read_tag_counts_archive(path: str) -> collections.OrderedDict:
  """Tag -> count from the archive at `path`, by decreasing count (as TFF sorts them)."""
  with _open_member(path, _TAG_MEMBER) as f:
    try:
      tag_counts = json.load(f)
    except json.JSONDecodeError as e:
      raise DataFormatError(f'{path}: {_TAG_MEMBER} is not JSON: {e}') from None
  if not isinstance(tag_counts, dict) or not all(isinstance(v, int) for v in tag_counts.values()):
    raise DataFormatError(f'{path}: {_TAG_MEMBER} is not a JSON object of tag -> count')
  return collections.OrderedDict(sorted(tag_counts.items(), key=lambda item: item[1], reverse=True))


def load_word_counts(data_dir: str, vocab_size: int | None = None) -> collections.OrderedDict:
  """TFF's `stackoverflow.load_word_counts(vocab_size=...)`, from `data_dir`.

  Raises:
    ValueError: vocab_size is not None or a positive int.
    DataNotFoundError: the archive is missing (message: path and fetch command).
    DataFormatError: it is not a tar archive with a well-formed word count member.
  """
  return read_word_counts_archive(_archive_path(data_dir, WORD_COUNTS_ARCHIVE), vocab_size)


def load_tag_counts(data_dir: str) -> collections.OrderedDict:
  """TFF's `stackoverflow.load_tag_counts()`, from `data_dir`; errors as load_word_counts."""
  return read_tag_counts_archive(_archive_path(data_dir, TAG_COUNTS_ARCHIVE))
