"""What a run writes besides metrics.csv: hparams.json and the per-client evaluation files,
and what a full disk means for any of the run's files.

hparams.json holds everything that shaped a run. Its top-level `runtime` section (evaluation
and checkpoint cadence, device, data location) is recorded but not fingerprinted: a rerun may
change it and still resume. Any other difference refuses to resume, naming the changed parts
first (`client.optimizer.name: 'delta_sgd' -> 'sps'`), then other keys.

Every file of a run directory is written whole or not at all (a temporary beside it, then a
rename: TFF's `<path>_tempNNNN` for metrics.csv and checkpoints, `<path>.tmp*` here). When the
disk fills during a write (`writing`), the write's temporary is removed and `DiskFullError`
names the file; temporaries that a killed run left are removed at the next start
(`remove_stale_temporaries`).
"""

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import csv
import errno
import glob
import hashlib
import json
import os
import shutil
from typing import Any

HPARAMS_FILE = 'hparams.json'
UNCHECKED_SECTION = 'runtime'
# The noise a DP run's aggregation adds (`core.dp_noise.DeliveredNoise.record`): derived from the
# checked `dp` section by the code, recorded for the reader, neither fingerprinted nor compared
# (runs from before it was recorded resume).
DP_NOISE_SECTION = 'dp_noise'
_UNCHECKED = (UNCHECKED_SECTION, DP_NOISE_SECTION)


class ConfigMismatchError(ValueError):
  """An experiment directory holds a run with different hyperparameters."""


class DiskFullError(OSError):
  """A file of the run could not be written: no space left on its device (or quota)."""

  def __init__(self, path: str):
    super().__init__(errno.ENOSPC, 'no space left on device', path)
    self.path = path


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# TensorFlow's file writes (checkpoints, TensorBoard events, tf.io.gfile) raise
# tf.errors.ResourceExhaustedError (or another OpError) carrying the C library's message.
_FULL_MESSAGES = ('No space left on device', 'Disk quota exceeded')


def is_disk_full(error: BaseException | None) -> bool:
  """Whether `error`, or an exception it was raised from, says the disk is full (or the quota).

  An OSError by its errno (ENOSPC, EDQUOT); any other error (TensorFlow's) by its message.
  """
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError):
      if error.errno in _FULL_ERRNOS:
        return True
    elif any(text in str(error) for text in _FULL_MESSAGES):
      return True
    error = error.__cause__ or error.__context__
  return False


def _temporaries(pattern: str) -> list[str]:
  """What interrupted atomic writes of the files matching the glob `pattern` leave: TFF's
  `<file>_tempNNNN` (a file, or a checkpoint's directory) and `atomic_output`'s `<file>.tmp*`."""
  return sorted(glob.glob(f'{pattern}_temp[0-9]*') + glob.glob(f'{pattern}.tmp*'))


def _remove_path(path: str) -> None:
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    with contextlib.suppress(FileNotFoundError):
      os.remove(path)


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
  """Runs a write of `path`; if the disk is full, removes the write's temporaries and raises
  `DiskFullError(path)` (from the original error). Other errors pass unchanged."""
  try:
    yield
  except DiskFullError:
    raise
  except Exception as e:
    if not is_disk_full(e):
      raise
    for leftover in _temporaries(glob.escape(path)):
      _remove_path(leftover)
    raise DiskFullError(path) from e


# The files of a run directory written through a temporary (see the module docstring).
_ATOMIC_FILES = (
  'metrics.csv',
  HPARAMS_FILE,
  'client_eval/round_*.csv',
  'checkpoints/program_state_*',
)


def remove_stale_temporaries(output_dir: str) -> list[str]:
  """Removes the temporaries of interrupted writes in `output_dir` (a killed run's, or one
  whose disk filled); returns their paths relative to `output_dir`, sorted.

  Only for the run that owns the directory (it holds `run_dir.RunLock`): another process's
  write in progress would lose its temporary.
  """
  removed = set()
  for pattern in _ATOMIC_FILES:
    for leftover in _temporaries(os.path.join(glob.escape(output_dir), pattern)):
      _remove_path(leftover)
      removed.add(os.path.relpath(leftover, output_dir))
  return sorted(removed)


@contextlib.contextmanager
def atomic_output(path: str, newline: str | None = None) -> Iterator[Any]:
  """A text file open for writing at a temporary beside `path`, renamed onto `path` when the
  block ends; removed instead if the block raises (or the process dies before the rename)."""
  tmp = f'{path}.tmp{os.getpid()}'
  try:
    with open(tmp, 'w', newline=newline) as f:
      yield f
    os.replace(tmp, path)
  finally:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)


def write_json_atomically(path: str, value: Any) -> None:
  with writing(path), atomic_output(path) as f:
    json.dump(value, f, indent=2, sort_keys=True)


def _leaves(value: Any, prefix: str = '') -> dict[str, Any]:
  """{'a.b': leaf} of a nested JSON mapping (an empty mapping is a leaf)."""
  if not isinstance(value, Mapping) or not value:
    return {prefix: value}
  leaves = {}
  for key, item in value.items():
    leaves.update(_leaves(item, f'{prefix}.{key}' if prefix else str(key)))
  return leaves


def fingerprint(hparams: Mapping[str, Any], length: int = 6) -> str:
  """A short hex hash of the fingerprinted part of `hparams` (all but the runtime and dp_noise
  sections).

  Key order and JSON-equivalent types (tuples, numpy scalars) do not change it.
  """
  checked = {k: v for k, v in hparams.items() if k not in _UNCHECKED}
  text = json.dumps(json.loads(json.dumps(checked)), sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode()).hexdigest()[:length]


def _differences(old: dict, new: dict, hints: Mapping[str, str] | None, shown: int = 4) -> str:
  """The differing leaves, changed named parts first: `a.name: 'x' -> 'y' (and 3 of its settings)`.

  A key under a part whose `name` changed (e.g. the client optimizer's own hyperparameters when
  the optimizer changed) is counted with that part, not listed.
  """
  missing = object()
  show = lambda value: '<absent>' if value is missing else repr(value)
  diffs = sorted(k for k in set(old) | set(new) if old.get(k, missing) != new.get(k, missing))
  renamed = [k[: -len('.name')] for k in diffs if k.endswith('.name')]
  owner = lambda key: next((p for p in renamed if key.startswith(p + '.')), None)
  parts = []
  for part in renamed:
    key = f'{part}.name'
    followers = sum(1 for k in diffs if owner(k) == part) - 1
    parts.append(
      f'{key}: {show(old.get(key, missing))} -> {show(new.get(key, missing))}'
      + (f' (and {followers} of its settings)' if followers else '')
    )
  rest = [k for k in diffs if owner(k) is None]
  for key in rest[:shown]:
    parts.append(
      f'{key}: {show(old.get(key, missing))} -> {show(new.get(key, missing))}'
      + (f' ({hints[key]})' if hints and key in hints else '')
    )
  if len(rest) > shown:
    more = len(rest) - shown
    parts.append(f'and {more} more key{"s" if more > 1 else ""}')
  return '; '.join(parts)


def check_or_write_hparams(
  output_dir: str,
  hparams: Mapping[str, Any],
  hints: Mapping[str, str] | None = None,
  upgrade: Callable[[dict], dict] | None = None,
) -> None:
  """Writes hparams.json, or checks that an existing one matches `hparams`.

  The `runtime` and `dp_noise` sections are not compared; they are rewritten with the new
  values (and the whole file in the current format when `upgrade` changed it).

  Args:
    output_dir: the experiment directory.
    hparams: the run's record.
    hints: optional dotted key -> why it cannot change, appended to a mismatch message.
    upgrade: optional stored record -> the same record in the current format (e.g. without keys
      an older version recorded that never shaped the run), applied before comparing.

  Raises:
    ConfigMismatchError: naming the differing keys (dotted paths such as
      `server.learning_rate`), their stored and new values; or an unreadable hparams.json.
  """
  path = os.path.join(output_dir, HPARAMS_FILE)
  hparams = json.loads(json.dumps(hparams))  # normalise tuples, numpy scalars
  if os.path.exists(path):
    try:
      with open(path) as f:
        stored = json.load(f)
      if not isinstance(stored, dict):
        raise ValueError('not a JSON object')
    except (OSError, ValueError) as e:
      raise ConfigMismatchError(
        f'{path} is unreadable ({str(e).splitlines()[0]}); it records the run in '
        f'{output_dir}: restore it, or use a new --experiment_name'
      ) from None
    checked = lambda h: _leaves({k: v for k, v in h.items() if k not in _UNCHECKED})
    old, new = checked(upgrade(stored) if upgrade else stored), checked(hparams)
    if old != new:
      raise ConfigMismatchError(
        f'{output_dir} holds a run with different hyperparameters '
        f'({_differences(old, new, hints)}); use a new --experiment_name or delete that directory'
      )
    if stored == hparams:
      return
  os.makedirs(output_dir, exist_ok=True)
  write_json_atomically(path, hparams)


def write_client_eval(
  output_dir: str, round_num: int, per_client: Mapping[str, Mapping[str, float]]
) -> None:
  """client_eval/round_NNNNN.csv: one row per client, its evaluation metrics (and, from the
  training loop, `num_examples`: the size of its test set)."""
  directory = os.path.join(output_dir, 'client_eval')
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f'round_{round_num:05d}.csv')
  names = list(next(iter(per_client.values())))
  with atomic_output(path, newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['client_id'] + names)
    for cid, results in per_client.items():
      writer.writerow([cid] + [results[n] for n in names])
