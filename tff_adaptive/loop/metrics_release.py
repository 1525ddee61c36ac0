"""metrics.csv's release manager: TFF's CSV release manager without its re-reads of the file.

`tff.program.CSVFileReleaseManager` (TFF 0.87) re-reads the whole file on every release, twice
in WRITE mode:

1. `release(value, key)` first calls `_remove_values_greater_than_key(key - 1)`, whose early
   return (`key > self._latest_key`) misses the usual case, a release right after the last one
   (key - 1 == latest key: nothing to remove). So it reads, filters and rewrites every row.
2. WRITE mode (`_write_value`) then reads every row again, appends the new one and rewrites the
   file through a temporary and a rename.

Each round so parses and writes all R rows twice: O(R^2) for a run, about 10 ms a round at
round 500 and 45 ms at round 1500 on a 2-core CPU, more than a small model's round (and a grid
of cells pays it per cell).

`MetricsReleaseManager` keeps TFF's behaviour and file format (the same bytes) and its whole-file
atomic write (temporary + rename, so a kill leaves the old file or the new one), but returns
early from 1. when no key above `key` was released, and reads the file once (at construction,
as TFF does) and keeps its rows: each release is one write of the kept rows plus the new one.
The kept rows change only after a write succeeded (a full disk leaves them and the file as
they were).
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import os
from typing import Any

import tensorflow_federated as tff


class MetricsReleaseManager(tff.program.CSVFileReleaseManager):
  """`tff.program.CSVFileReleaseManager` in WRITE mode, reading its file once (module doc)."""

  def __init__(self, file_path: str | os.PathLike, key_fieldname: str = 'round_num'):
    self._rows: tuple[list[str], list[Mapping[str, Any]]] | None = None  # (fieldnames, values)
    super().__init__(
      file_path, save_mode=tff.program.CSVSaveMode.WRITE, key_fieldname=key_fieldname
    )

  def _read_values(self) -> tuple[list[str], list[dict[str, Any]]]:
    if self._rows is None:
      self._rows = super()._read_values()
    fieldnames, values = self._rows
    return list(fieldnames), list(values)  # copies: TFF extends and appends to what it reads

  def _write_values(self, fieldnames: Sequence[str], values: Iterable[Mapping[str, Any]]) -> None:
    fieldnames, values = list(fieldnames), list(values)
    super()._write_values(fieldnames, values)
    self._rows = (fieldnames, values)  # only once the file has them

  async def _remove_values_greater_than_key(self, key: int) -> None:
    if self._latest_key is not None and key >= self._latest_key:
      return  # nothing above `key` was released: nothing to remove (TFF rewrites the file)
    await super()._remove_values_greater_than_key(key)
