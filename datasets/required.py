"""The files a task reads, checked together: every missing file named in one message.

A loader raises `DataNotFoundError` for the first file it cannot open; a user who lacks three
files would learn of them in three runs. The trainer checks a task's `DataFile`s first
(`check_data_files`) and names them all, each with the way to get it.
"""

from collections.abc import Sequence
import dataclasses
import os

from tff_adaptive import commands
from tff_adaptive.datasets.errors import DataNotFoundError

__all__ = ['DataFile', 'check_data_files', 'missing_data_files']


@dataclasses.dataclass(frozen=True)
class DataFile:
  """A file a task reads from its data directory.

  Attributes:
    name: its path relative to the data directory.
    source: how to get it, a command or a short sentence; '{data_dir}' and '{fetch}' (the
      `tff-adaptive fetch` command as it runs here) are filled in.
    alternatives: other relative paths that serve as well (e.g. an uncompressed copy).
    has_samples: whether `tff-adaptive samples` writes a small stand-in.
  """

  name: str
  source: str
  alternatives: tuple[str, ...] = ()
  has_samples: bool = False


def missing_data_files(data_dir: str, files: Sequence[DataFile]) -> list[DataFile]:
  """The files of which neither the name nor an alternative exists under `data_dir`."""
  return [
    f
    for f in files
    if not any(os.path.isfile(os.path.join(data_dir, n)) for n in (f.name, *f.alternatives))
  ]


def check_data_files(task: str, data_dir: str, files: Sequence[DataFile]) -> None:
  """Raises DataNotFoundError naming every missing file of `task` and how to get each.

  Message: `task so_lr: 3 data files missing: /d/a, /d/b, /d/c; get them with: <source>; <source>;
  or try the task on small random sample files: tff-adaptive samples --data_dir=DIR, then
  --data_dir=DIR` (each command as it runs where the message is printed: `commands.command`).
  """
  data_dir = os.path.abspath(data_dir)
  missing = missing_data_files(data_dir, files)
  if not missing:
    return
  fetch = commands.command('fetch')
  sources = list(dict.fromkeys(f.source.format(data_dir=data_dir, fetch=fetch) for f in missing))
  count = f'{len(missing)} data files' if len(missing) > 1 else 'a data file'
  samples = (
    f'; or try the task on small random sample files: {commands.command("samples")} '
    '--data_dir=DIR, then --data_dir=DIR'
    if all(f.has_samples for f in missing)
    else ''
  )
  raise DataNotFoundError(
    f'task {task}: {count} missing: '
    f'{", ".join(os.path.join(data_dir, f.name) for f in missing)}; get '
    f'{"them" if len(missing) > 1 else "it"} with: {"; ".join(sources)}{samples}'
  )
