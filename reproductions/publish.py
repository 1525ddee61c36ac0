"""Where a reproduction driver writes, and the one way into a committed results folder.

Committed results live in `reproductions/<paper>/results/`, each study's in `results/<study>/`.
Every driver writes elsewhere by default (a folder under `runs/` of the directory the command was
typed in; `/runs/` is in .gitignore), and an output path inside a committed results folder is
refused. Only `--publish` writes there, to the path the committed result came from, and only
with the settings it was made with, recorded beside it in
`reproductions/<paper>/results/publish.json`, one entry per driver (the module's last name):

  {"reproduce": {"out": "reproductions/<paper>/results/<study>",   (from the repository root)
                 "command": ".venv/bin/python -m ... --publish ...",   (the README's)
                 "settings": {"rounds": 500, "seeds": ["1", "2", "3"], ...}}}

`settings` names every flag that changes the numbers (not --parallel, --runs_dir, --out,
--report_only, --dry_run); the driver passes its values of the same flags. A refusal is a
`PublishError`, one line naming the flag and value (or each differing setting, with the committed
value); drivers print it and exit 2 before anything runs or is written. So a trial run
(`--rounds=3`) cannot replace a committed table, with or without --publish.

Every table and figure a driver writes goes through a temporary beside it and a rename
(`atomic_output`, `save_figure`): a driver stopped mid-write (Ctrl-C, SIGKILL, a full disk)
leaves the previous file whole, never half of a new one. Each says which code wrote it:
`code_version()`, the checkout's as the driver started (not as its own first outputs left it).
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import contextlib
import csv
import datetime
import functools
import hashlib
import json
import math
import numbers
import os
import shlex
import sys
from typing import Any

from tff_adaptive.loop import outputs
from tff_adaptive.run import provenance

RECORD = 'publish.json'
PUBLISH_HELP = (
  'Write into the committed results folder (publish.json beside it records where): only with the '
  "committed result's settings; anything else is refused (exit 2)."
)


# A table (any text file) written through a temporary beside it and a rename: the library's.
atomic_output = outputs.atomic_output


@functools.cache
def code_version() -> str:
  """`run.provenance.code_version()` of this checkout as this module was first imported, i.e.
  as the driver started. Asked again after the driver has rewritten a committed table, git would
  count that table as an uncommitted change: a `--publish` rerun stamped its own report
  '<commit> + uncommitted changes' when nothing but its outputs had changed."""
  return provenance.code_version()


code_version()  # at import, before the driver writes anything


def figure_stamp() -> dict[str, str]:
  """A PNG's text chunks saying what wrote it: the command as typed (paths under the directory
  it was typed in shown relative to it), the date and the code version (`run.provenance`)."""
  shown = [shown_path(a) for a in getattr(sys, 'orig_argv', sys.argv)]
  return {
    'Source': shlex.join(shown),
    'Creation Time': datetime.datetime.now().isoformat(timespec='seconds'),
    'Software': f'tff-adaptive, code version {code_version()}',
  }


def save_figure(fig: Any, path: str, **kwargs: Any) -> None:
  """`fig.savefig(path, **kwargs)` through a temporary (same extension, so the same format); a
  PNG carries `figure_stamp()` as its text chunks (a caller's `metadata` wins key by key)."""
  root, extension = os.path.splitext(path)
  tmp = f'{root}.tmp{os.getpid()}{extension}'
  if extension.lower() == '.png':
    kwargs['metadata'] = {**figure_stamp(), **kwargs.get('metadata', {})}
  try:
    fig.savefig(tmp, **kwargs)
    os.replace(tmp, path)
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)


def markdown_table(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> list[str]:
  """The lines of a markdown table: `head`, the separator, then one line per row (str() of
  each value)."""
  return [
    '| ' + ' | '.join(str(v) for v in head) + ' |',
    '|' + '---|' * len(head),
    *('| ' + ' | '.join(str(v) for v in row) + ' |' for row in rows),
  ]


def number_text(value: float | None, digits: int = 2, sign: bool = False) -> str:
  """A table's number: `digits` decimals (with its sign when `sign`); '' for None or nan."""
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return ''
  return f'{value:+.{digits}f}' if sign else f'{value:.{digits}f}'


def write_csv(path: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
  """A table as CSV (through `atomic_output`): `columns` in order, '' where a row has None or
  no value."""
  with atomic_output(path, newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(columns))
    writer.writeheader()
    for row in rows:
      writer.writerow({k: '' if row.get(k) is None else row[k] for k in columns})


class PublishError(ValueError):
  """A refused output path or --publish: one line; the driver exits 2 having written nothing."""


def repo_root() -> str:
  """The repository (the workspace under `bazel run`, else the checkout this file is in)."""
  return provenance.checkout_root()


def base_dir() -> str:
  """Where relative paths start: the directory the command was typed in (also under `bazel run`)."""
  return os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd())


def shown_path(path: str) -> str:
  """`path` as a table, command line or figure quotes it: relative to the directory the driver
  was run from (`base_dir()`) when it lies under it, so no machine's own paths are committed."""
  base = base_dir()
  if os.path.isabs(path) and (path + os.sep).startswith(base + os.sep):
    return os.path.relpath(path, base)
  return path


def resolve(path: str) -> str:
  """`path` made absolute from `base_dir()`."""
  return os.path.abspath(os.path.join(base_dir(), os.path.expanduser(path)))


def _shown(path: str) -> str:
  """A path as a message shows it: relative to the repository when inside it."""
  relative = os.path.relpath(path, repo_root())
  return path if relative.startswith('..') else relative


def committed_folder(path: str) -> str | None:
  """The committed results folder (`<repo>/reproductions/<paper>/results`) holding `path`, if any.

  Symbolic links are followed, so another spelling of the same folder is caught too (the path
  as given, fully resolved, and with only its folder resolved: under Bazel the committed files
  are links into the workspace).
  """
  path = os.path.abspath(path)
  spellings = (
    path,
    os.path.realpath(path),
    os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)),
  )
  reproductions = os.path.join(repo_root(), 'reproductions')
  for root in dict.fromkeys((os.path.abspath(reproductions), os.path.realpath(reproductions))):
    for spelling in spellings:
      parts = os.path.relpath(spelling, root).split(os.sep)
      if len(parts) >= 2 and parts[0] not in ('.', '..') and parts[1] == 'results':
        return os.path.join(root, parts[0], 'results')
  return None


def record(driver: str, entry: str | None = None) -> tuple[str, dict[str, Any]]:
  """(path of publish.json, the driver's entry) for a module `reproductions.<paper>.<name>`;
  `entry` names the entry where one driver publishes several results (default: <name>)."""
  _, paper, name = driver.split('.')
  name = entry or name
  path = os.path.join(repo_root(), 'reproductions', paper, 'results', RECORD)
  try:
    with open(path) as f:
      entries = json.load(f)
  except FileNotFoundError:
    raise PublishError(f'--publish: {driver} has no committed result ({_shown(path)} is missing)')
  if name not in entries:
    raise PublishError(
      f'--publish: {driver} has no committed result (no {name!r} in {_shown(path)}; it has '
      f'{", ".join(sorted(entries))})'
    )
  return path, entries[name]


def flag_text(value: Any) -> str:
  """A flag value as typed: lists comma-separated, booleans true/false."""
  if isinstance(value, bool):
    return 'true' if value else 'false'
  if isinstance(value, (list, tuple)):
    return ','.join(str(v) for v in value)
  return str(value)


def same(given: Any, committed: Any) -> bool:
  """Whether a flag value equals the recorded one (lists item by item as text, numbers as numbers,
  booleans only as booleans)."""
  if isinstance(given, bool) or isinstance(committed, bool):
    return isinstance(given, bool) and isinstance(committed, bool) and given == committed
  if isinstance(given, (list, tuple)) or isinstance(committed, (list, tuple)):
    as_list = lambda v: [str(x) for x in v] if isinstance(v, (list, tuple)) else None
    return as_list(given) == as_list(committed)
  if isinstance(given, numbers.Number) and isinstance(committed, numbers.Number):
    return float(given) == float(committed)
  return str(given) == str(committed)


def differences(settings: Mapping[str, Any], committed: Mapping[str, Any]) -> list[str]:
  """One text per setting whose value is not the committed one, in the driver's order."""
  found = []
  for name, value in settings.items():
    if name not in committed:
      found.append(f'--{name}={flag_text(value)} (not in the record)')
    elif not same(value, committed[name]):
      found.append(f'--{name}={flag_text(value)} (committed: {flag_text(committed[name])})')
  found += [
    f'--{name} (recorded, not a flag of the driver)' for name in committed if name not in settings
  ]
  return found


def output(
  driver: str,
  out: str,
  *,
  publish: bool,
  explicit: bool,
  settings: Mapping[str, Any],
  flag: str = '--out',
  entry: str | None = None,
) -> str:
  """The absolute path a driver writes to; PublishError (one line) if it may not.

  Args:
    driver: the module, `reproductions.<paper>.<name>`.
    out: the output flag's value (a folder or a file), relative to `base_dir()`.
    publish: --publish was given: write to the recorded `out` if `settings` are the recorded ones
      (an explicit `out` must name that same path).
    explicit: `out` was given on the command line (not the flag's default).
    settings: the driver's values of every recorded setting, by flag name.
    flag: how messages name the output flag.
    entry: the entry of publish.json (default: the module's last name), for a driver that
      publishes one result per task.
  """
  if not publish:
    path = resolve(out)
    folder = committed_folder(path)
    if folder is not None:
      raise PublishError(
        f'{flag}={out}: {_shown(folder)} holds committed results; they are written only with '
        '--publish and the committed settings (see the README), or choose another folder'
      )
    return path
  record_path, entry = record(driver, entry)
  target = os.path.join(repo_root(), entry['out'])
  if explicit and os.path.realpath(resolve(out)) != os.path.realpath(target):
    raise PublishError(f'--publish writes to {entry["out"]}, not {flag}={out}: drop {flag}')
  differing = differences(settings, entry['settings'])
  if differing:
    raise PublishError(
      f'--publish: not the committed settings ({_shown(record_path)}): {"; ".join(differing)}; '
      'nothing was written'
    )
  return target


def output_from_flags(
  driver: str,
  flag_values,
  settings: Sequence[str],
  *,
  out: str | None = None,
  entry: str | None = None,
) -> str:
  """`output` for a driver's absl flags: its --out (or `out`, the driver's computed default when
  --out is unset; else report/ under --runs_dir), --publish, and the values of the flags named in
  `settings`."""
  if out is None:
    out = flag_values.out or os.path.join(flag_values.runs_dir, 'report')
  return output(
    driver,
    out,
    publish=flag_values.publish,
    explicit=flag_values['out'].present,
    settings={name: flag_values[name].value for name in settings},
    entry=entry,
  )


def refuse_committed(paths: Sequence[str], label: str) -> None:
  """PublishError if any of `paths` (absolute) is inside a committed results folder; for tools
  that have no committed result of their own (the committed files are a driver's)."""
  for path in paths:
    folder = committed_folder(path)
    if folder is not None:
      raise PublishError(
        f'{label} {path}: {_shown(folder)} holds committed results, written only by their '
        'drivers with --publish; choose another folder'
      )


def digests(folder: str) -> dict[str, str]:
  """SHA-256 of every file under `folder`, by path relative to it: what a check that a run left
  the committed results alone compares before and after."""
  found = {}
  for parent, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return found
