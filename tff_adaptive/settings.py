"""Hyperparameters that describe themselves: each field of a component's dataclass declares the
trainer flag that sets it (no TensorFlow, no absl).

Infrastructure (no paper). A component's hyperparameter dataclass (`FedProxHParams`,
`SPSHParams`, `DPConfig`, `TaskConfig`, ...) declares each field the trainer sets from its
command line with `setting(...)`: the flag's name, help, section of --help, the check of its
value worded as the trainer words a flag's, and its choices. The trainer's flags module defines
one absl flag per declared field (`declared`), checks the values (`check`) and builds the
dataclass from them (`from_flags`), so a new component's flags are its dataclass fields: nothing
about them is written a second time. Fields without a `setting` are not flags.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import sys
import typing
from typing import Any

__all__ = [
  'Setting',
  'at_least',
  'check',
  'declared',
  'flag_message',
  'from_flags',
  'nonnegative',
  'positive',
  'setting',
  'unit_interval',
]

_KEY = 'tff_adaptive.setting'
_FIELD_DEFAULT = object()
KINDS = ('float', 'int', 'str', 'bool', 'list', 'enum')


@dataclasses.dataclass(frozen=True)
class Setting:
  """How the trainer sets one field.

  Attributes:
    flag: the flag's name (without --).
    help: the flag's help.
    section: the --help section it is listed under (`run.flags.SECTIONS` orders them).
    check: (flag name, value) -> None, raising a one-line ValueError naming the flag; None: none.
    choices: the valid values of a string flag (a `registry.Registry` or a tuple of names, or
      the name of one in the class's module), checked as `--flag: unknown <kind> 'x'; valid
      choices: ...`; '{choices}' in `help` lists them.
    flag_default: the flag's default when it differs from the field's (None: "the task's").
    kind: 'float', 'int', 'str', 'bool', 'list' or 'enum' (a str flag that absl checks
      against `choices` as it parses); None: from the field's type.
    always: the check runs even when the field's component is not the one chosen (its flag is
      then ignored, with a warning); by default a component's checks run when it is chosen.
    cells: grid cells (--cells) may set it apart from one another.
  """

  flag: str
  help: str
  section: str = ''
  check: Callable[[str, Any], None] | None = None
  choices: Any = None
  flag_default: Any = _FIELD_DEFAULT
  kind: str | None = None
  always: bool = False
  cells: bool = False


def setting(default: Any, flag: str, help: str, **kwargs: Any) -> Any:  # noqa: A002
  """A dataclass field with `default` that the trainer sets with --`flag` (`Setting`)."""
  return dataclasses.field(default=default, metadata={_KEY: Setting(flag, help, **kwargs)})


def _kind(field: dataclasses.Field, hints: Mapping[str, Any]) -> str:
  hint = hints[field.name]
  if typing.get_origin(hint) in (tuple, list):
    return 'list'
  args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
  for kind, python in (('bool', bool), ('int', int), ('float', float), ('str', str)):
    if python in args:
      return kind
  raise TypeError(f'{field.name}: no flag kind for type {hint!r}')


def declared(cls: type) -> list[tuple[str, Setting]]:
  """(field name, its `Setting` resolved) of each field of dataclass `cls` that declares one, in
  field order. Resolved: the flag's kind and default; choices given as the name of an attribute
  of `cls`'s module (a registry defined after the class) looked up; '{choices}' in the help
  replaced by them."""
  hints = typing.get_type_hints(cls)
  out = []
  for field in dataclasses.fields(cls):
    found = field.metadata.get(_KEY)
    if found is None:
      continue
    default = field.default if found.flag_default is _FIELD_DEFAULT else found.flag_default
    choices = found.choices
    if isinstance(choices, str):
      choices = getattr(sys.modules[cls.__module__], choices)
    text = found.help
    if choices is not None:
      text = text.replace('{choices}', ', '.join(choices))
    resolved = dataclasses.replace(
      found,
      kind=found.kind or _kind(field, hints),
      flag_default=default,
      choices=choices,
      help=text,
    )
    out.append((field.name, resolved))
  return out


def check(found: Setting, value: Any, unknown_message: Callable[[str, str, Any], str]) -> Any:
  """`value` after the setting's choices and check (one-line ValueErrors naming the flag).

  `unknown_message(kind, value, valid)`: the registry's wording of an unknown choice.
  """
  if found.choices is not None and value not in found.choices:
    kind = getattr(found.choices, 'kind', found.flag.replace('_', ' '))
    raise ValueError(f'--{found.flag}: {unknown_message(kind, value, found.choices)}')
  if found.check is not None:
    found.check(found.flag, value)
  return value


def from_flags(cls: type, values: Mapping[str, Any], **fixed: Any) -> Any:
  """`cls(**fixed, **{field: values[its flag]})` for the fields `cls` declares."""
  return cls(**fixed, **{name: values[found.flag] for name, found in declared(cls)})


def flag_message(message: str, cls: type, label: str = '') -> str:
  """A dataclass's own error about its field F (worded `<label>F ...` or `<label>F=...`) in
  the terms of F's flag: 'momentum must be in [0, 1), got 1.5' -> '--server_momentum must be in
  [0, 1), got 1.5'. Other messages as they are."""
  fields = {f'{label}{field}': found.flag for field, found in declared(cls)}
  for field in sorted(fields, key=len, reverse=True):
    if message.startswith((f'{field} ', f'{field}=')):
      return f'--{fields[field]}' + message[len(field) :]
  return message


# -- Checks, worded as the trainer words a flag's. ---------------------------------------------


def positive(flag: str, value: Any) -> None:
  """> 0 (None passes: a default taken from elsewhere)."""
  if value is not None and not value > 0:
    raise ValueError(f'--{flag} must be > 0, got {value}')


def nonnegative(flag: str, value: Any) -> None:
  if value is not None and value < 0:
    raise ValueError(f'--{flag} must be >= 0, got {value}')


def unit_interval(flag: str, value: Any) -> None:
  """In [0, 1) (None passes)."""
  if value is not None and not 0 <= value < 1:
    raise ValueError(f'--{flag} must be in [0, 1), got {value}')


def at_least(low: int) -> Callable[[str, Any], None]:
  """>= low (None passes)."""

  def check_at_least(flag: str, value: Any) -> None:
    if value is not None and value < low:
      raise ValueError(f'--{flag} must be >= {low}, got {value}')

  return check_at_least
