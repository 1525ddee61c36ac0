"""Downloads TFF's federated dataset files into a data directory, verified and atomically.

    tff-adaptive fetch --data_dir=DIR --dataset=emnist|shakespeare|stackoverflow|cifar100|
                                                      stackoverflow_counts

For the federated benchmarks of Reddi et al., "Adaptive Federated Optimization", ICLR 2021: the
files that ``datasets.tff_sqlite.load_federated`` and ``datasets.stackoverflow_counts`` read, from
the URLs TFF's own loaders use (``tff.simulation.datasets.<name>``, TFF 0.87): the LZMA-compressed
SQLite files ``<name>.sqlite.lzma`` and StackOverflow's ``stackoverflow.{word,tag}_count.tar.bz2``
(whose SHA-256 TFF publishes). Unlike TFF's downloader, which decompresses straight into the final
file name, each file is streamed into a temporary file in DIR (``.<name>.XXXX.part``), verified --
the download is complete (Content-Length, end of the LZMA stream), the SHA-256 matches where
known, the SQLite file passes ``PRAGMA quick_check`` and has TFF's tables and splits, the archive
has its member in the expected format -- and only then renamed to its final name (``os.replace``,
atomic on one filesystem). An interrupted or failed download therefore never leaves a file under
the final name (a killed process can leave a ``.part`` file, which is safe to delete). A final
file that is already there and valid (cheap checks: header, size, tables, splits; the archives'
SHA-256) is kept, not downloaded again; an invalid one is replaced by a verified download.

Exit codes: 0 done, 1 download or verification failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from collections.abc import Sequence
import dataclasses
import hashlib
import http.client
import lzma
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request

from tff_adaptive import commands
from tff_adaptive.datasets import stackoverflow_counts
from tff_adaptive.datasets import tff_sqlite
from tff_adaptive.datasets.errors import DataFormatError
from tff_adaptive.datasets.errors import DataNotFoundError

__all__ = ['DATASETS', 'FetchError', 'Source', 'TFF_BASE_URL', 'fetch', 'fetch_source', 'main']

TFF_BASE_URL = 'https://storage.googleapis.com/tff-datasets-public/'
_CHUNK = 1 << 20


class FetchError(RuntimeError):
  """A download failed or did not verify; nothing was written under the final name."""


@dataclasses.dataclass(frozen=True)
class Source:
  """One published file: `remote` under the base URL, stored as `filename` in the data dir.

  kind: 'sqlite' (LZMA-compressed SQLite, decompressed while downloading; `splits` must
  exist), 'word_counts' or 'tag_counts' (tar.bz2 archives, stored as is). sha256: of the
  downloaded bytes, where TFF publishes it.
  """

  filename: str
  remote: str
  kind: str
  sha256: str | None = None
  splits: tuple[str, ...] = ()


def _sqlite_source(dataset: str, splits: tuple[str, ...]) -> Source:
  filename = tff_sqlite.SQLITE_FILES[dataset]
  return Source(filename, filename + '.lzma', 'sqlite', None, splits)


# URLs and hashes as in TFF 0.87's tff.simulation.datasets (emnist.py, shakespeare.py,
# stackoverflow.py, cifar100.py); tests check that TFF's sources still contain them.
DATASETS: dict[str, tuple[Source, ...]] = {
  'emnist': (_sqlite_source('emnist', ('all_train', 'all_test')),),
  'shakespeare': (_sqlite_source('shakespeare', ('train', 'test')),),
  'stackoverflow': (_sqlite_source('stackoverflow', ('train', 'heldout', 'test')),),
  'cifar100': (_sqlite_source('cifar100', ('train', 'test')),),
  'stackoverflow_counts': (
    Source(
      stackoverflow_counts.WORD_COUNTS_ARCHIVE,
      stackoverflow_counts.WORD_COUNTS_ARCHIVE,
      'word_counts',
      '1dc00256d6e527c54b9756d968118378ae14e6692c0b3b6cad470cdd3f0c519c',
    ),
    Source(
      stackoverflow_counts.TAG_COUNTS_ARCHIVE,
      stackoverflow_counts.TAG_COUNTS_ARCHIVE,
      'tag_counts',
      '6fe281cec490d9384a290d560072438e7e2b377bbb823876ce7bd6f82696772d',
    ),
  ),
}


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(_CHUNK), b''):
      digest.update(block)
  return digest.hexdigest()


def _verify(path: str, source: Source, sha256: str | None, integrity: bool) -> None:
  """Raises DataFormatError unless the file at `path` is a valid `source` file.

  integrity: also run SQLite's quick_check (reads the whole file; for new downloads).
  """
  if source.kind == 'sqlite':
    tff_sqlite.check_sqlite_file(path, source.splits, integrity=integrity)
    return
  if sha256 is not None and _sha256(path) != sha256:
    raise DataFormatError(f'{path}: SHA-256 {_sha256(path)} is not the published {sha256}')
  if source.kind == 'word_counts':
    if not stackoverflow_counts.read_word_counts_archive(path, vocab_size=1):
      raise DataFormatError(f'{path}: the word count list is empty')
  else:
    stackoverflow_counts.read_tag_counts_archive(path)


def _download(
  url: str, out_path: str, decompress: bool, on_chunk: Callable[[int], None], chunk_size: int
) -> tuple[int, str]:
  """Streams `url` into `out_path` (LZMA-decoded if `decompress`); returns (bytes, sha256)."""
  digest = hashlib.sha256()
  decompressor = lzma.LZMADecompressor() if decompress else None
  received = 0
  with urllib.request.urlopen(url, timeout=60) as response, open(out_path, 'wb') as out:
    length = response.headers.get('content-length')
    while True:
      chunk = response.read(chunk_size)
      if not chunk:
        break
      received += len(chunk)
      digest.update(chunk)
      out.write(decompressor.decompress(chunk) if decompressor else chunk)
      on_chunk(received)
    out.flush()
    os.fsync(out.fileno())
  if length is not None and received != int(length):
    raise FetchError(f'{url}: download incomplete, {received} of {length} bytes')
  if decompressor is not None and not decompressor.eof:
    raise FetchError(
      f'{url}: download incomplete, the LZMA stream ends early after {received} bytes'
    )
  return received, digest.hexdigest()


def fetch_source(
  source: Source,
  data_dir: str,
  base_url: str = TFF_BASE_URL,
  sha256: str | None = 'published',
  log: Callable[[str], None] = print,
  on_chunk: Callable[[int], None] = lambda n: None,
  chunk_size: int = _CHUNK,
) -> tuple[str, str]:
  """Makes `data_dir`/`source.filename` a verified copy of `base_url` + `source.remote`.

  Args:
    sha256: expected SHA-256 of the download; 'published' (default) uses source.sha256, None
      skips the hash check (e.g. for a mirror of other content, as in tests).
    on_chunk: called with the bytes received so far after every chunk (progress, tests).

  Returns:
    (path, action): action 'kept' (a valid file was already there) or 'downloaded'.

  Raises:
    FetchError: the download failed or did not verify; the final name was not touched and
      the temporary file was removed.
  """
  expected = source.sha256 if sha256 == 'published' else sha256
  os.makedirs(data_dir, exist_ok=True)
  final = os.path.join(os.path.abspath(data_dir), source.filename)
  if os.path.exists(final):
    try:
      _verify(final, source, expected, integrity=False)
      log(f'{final}: present and valid, kept')
      return final, 'kept'
    except (DataFormatError, DataNotFoundError) as e:
      log(f'{final}: present but invalid ({e}); downloading a replacement')
  url = base_url.rstrip('/') + '/' + source.remote
  fd, tmp = tempfile.mkstemp(
    prefix=f'.{source.filename}.', suffix='.part', dir=os.path.dirname(final)
  )
  os.close(fd)
  try:
    log(f'downloading {url} -> {final}')
    started = time.monotonic()
    try:
      received, digest = _download(url, tmp, source.kind == 'sqlite', on_chunk, chunk_size)
    except (urllib.error.URLError, http.client.HTTPException, OSError, lzma.LZMAError) as e:
      raise FetchError(f'{url}: download failed: {e}') from None
    if expected is not None and digest != expected:
      raise FetchError(f'{url}: SHA-256 {digest} is not the published {expected}')
    try:
      _verify(tmp, source, None, integrity=True)
    except (DataFormatError, DataNotFoundError) as e:
      raise FetchError(f'{url}: downloaded file does not verify: {e}') from None
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it 0600; give it a normal file's mode
    os.replace(tmp, final)
    _fsync_dir(os.path.dirname(final))
    log(
      f'{final}: {received / 2**20:.1f} MiB downloaded and verified in '
      f'{time.monotonic() - started:.0f} s'
    )
    return final, 'downloaded'
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _progress(log: Callable[[str], None], every: int = 256 << 20) -> Callable[[int], None]:
  """An on_chunk callback logging the bytes received at every `every` bytes."""
  state = {'next': every}

  def on_chunk(received: int) -> None:
    if received >= state['next']:
      log(f'  {received / 2**20:,.0f} MiB')
      state['next'] = (received // every + 1) * every

  return on_chunk


def fetch(
  dataset: str,
  data_dir: str,
  base_url: str = TFF_BASE_URL,
  sha256: str | None = 'published',
  log: Callable[[str], None] = print,
) -> list[tuple[str, str]]:
  """fetch_source for every file of `dataset` (a key of DATASETS), logging progress every
  256 MiB; returns their (path, action) results."""
  if dataset not in DATASETS:
    raise ValueError(f'dataset must be one of {", ".join(DATASETS)}, got {dataset!r}')
  return [
    fetch_source(s, data_dir, base_url, sha256, log, on_chunk=_progress(log))
    for s in DATASETS[dataset]
  ]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
    prog=commands.command('fetch'),
    description="Download TFF's federated dataset files, verified, into --data_dir.",
  )
  parser.add_argument('--data_dir', required=True, help='Directory to store the files in.')
  parser.add_argument('--dataset', required=True, help=' | '.join(DATASETS))
  parser.add_argument(
    '--base_url', default=TFF_BASE_URL, help='Where the files are (a mirror; file:// works).'
  )
  args = parser.parse_args(argv)
  if args.dataset not in DATASETS:
    print(
      f'fetch: error: --dataset={args.dataset} is not one of {", ".join(DATASETS)}', file=sys.stderr
    )
    return 2
  try:
    fetch(args.dataset, args.data_dir, args.base_url)
  except FetchError as e:
    print(f'fetch: error: {e}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
