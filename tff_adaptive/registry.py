"""Name -> builder registries with one error for unknown names.

Every kind the trainer selects by name (algorithms, engines, server and client optimizers,
learning-rate schedules, tasks) is a `Registry`: adding one is one entry, and an unknown name
fails with the same one-line message everywhere, `unknown <kind> 'x'; valid choices: a, b`.
"""

from collections.abc import Iterator
from collections.abc import Mapping
from typing import Generic
from typing import TypeVar

T = TypeVar('T')


class UnknownNameError(ValueError, KeyError):
  """A name that is not in a registry (a ValueError for callers, a KeyError for Mapping)."""

  def __str__(self) -> str:
    return str(self.args[0])


class Registry(Mapping[str, T], Generic[T]):
  """An ordered, read-mostly mapping from names to entries of one kind.

  Attributes:
    kind: what the entries are, as a user would say it (e.g. 'server optimizer').
  """

  def __init__(self, kind: str, entries: Mapping[str, T] | None = None):
    self.kind = kind
    self._entries: dict[str, T] = {}
    for name, entry in (entries or {}).items():
      self.register(name, entry)

  def register(self, name: str, entry: T) -> T:
    """Adds `entry` under `name`; ValueError if the name is taken. Returns the entry."""
    if name in self._entries:
      raise ValueError(f'{self.kind} {name!r} is already registered')
    self._entries[name] = entry
    return entry

  def __getitem__(self, name: str) -> T:
    """The entry named `name`.

    Raises:
      UnknownNameError: (a ValueError) `unknown <kind> 'name'; valid choices: ...`.
    """
    if name not in self._entries:
      raise UnknownNameError(unknown_message(self.kind, name, self._entries))
    return self._entries[name]

  def __iter__(self) -> Iterator[str]:
    return iter(self._entries)

  def __len__(self) -> int:
    return len(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  @property
  def names(self) -> tuple[str, ...]:
    return tuple(self._entries)


def unknown_message(kind: str, name: object, valid) -> str:
  """`unknown <kind> 'name'; valid choices: a, b, c` (the one wording for every registry)."""
  return f'unknown {kind} {name!r}; valid choices: {", ".join(valid)}'
