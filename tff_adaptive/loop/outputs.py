"""What a run writes besides metrics.csv: hparams.json and the per-client evaluation files.

hparams.json holds everything that shaped a run. Its top-level `runtime` section (evaluation
and checkpoint cadence, device, XLA) is recorded but not fingerprinted: a rerun may change it
and still resume. Any other difference refuses to resume and names the differing keys.
"""

from collections.abc import Mapping
import csv
import json
import os
from typing import Any

HPARAMS_FILE = 'hparams.json'
UNCHECKED_SECTION = 'runtime'


class ConfigMismatchError(ValueError):
  """An experiment directory holds a run with different hyperparameters."""


def write_json_atomically(path: str, value: Any) -> None:
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(value, f, indent=2, sort_keys=True)
  os.replace(tmp, path)


def _leaves(value: Any, prefix: str = '') -> dict[str, Any]:
  """{'a.b': leaf} of a nested JSON mapping (an empty mapping is a leaf)."""
  if not isinstance(value, Mapping) or not value:
    return {prefix: value}
  leaves = {}
  for key, item in value.items():
    leaves.update(_leaves(item, f'{prefix}.{key}' if prefix else str(key)))
  return leaves


def check_or_write_hparams(
  output_dir: str, hparams: Mapping[str, Any], hints: Mapping[str, str] | None = None
) -> None:
  """Writes hparams.json, or checks that an existing one matches `hparams`.

  The `runtime` section is not compared; it is rewritten with the new values.

  Args:
    output_dir: the experiment directory.
    hparams: the run's record.
    hints: optional dotted key -> why it cannot change, appended to a mismatch message.

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
    checked = lambda h: _leaves({k: v for k, v in h.items() if k != UNCHECKED_SECTION})
    old, new = checked(stored), checked(hparams)
    missing = object()
    diffs = sorted(k for k in set(old) | set(new) if old.get(k, missing) != new.get(k, missing))
    if diffs:
      detail = ', '.join(
        f'{k}: {old.get(k, "<absent>")!r} -> {new.get(k, "<absent>")!r}'
        + (f' ({hints[k]})' if hints and k in hints else '')
        for k in diffs
      )
      raise ConfigMismatchError(
        f'{output_dir} holds a run with different hyperparameters ({detail}); use a new '
        '--experiment_name or delete that directory'
      )
    if stored.get(UNCHECKED_SECTION) == hparams.get(UNCHECKED_SECTION):
      return
  os.makedirs(output_dir, exist_ok=True)
  write_json_atomically(path, hparams)


def write_client_eval(
  output_dir: str, round_num: int, per_client: Mapping[str, Mapping[str, float]]
) -> None:
  """client_eval/round_NNNNN.csv: one row per client, its evaluation metrics."""
  directory = os.path.join(output_dir, 'client_eval')
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f'round_{round_num:05d}.csv')
  tmp = f'{path}.tmp'
  names = list(next(iter(per_client.values())))
  with open(tmp, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['client_id'] + names)
    for cid, results in per_client.items():
      writer.writerow([cid] + [results[n] for n in names])
  os.replace(tmp, path)
