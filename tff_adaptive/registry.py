"""Name -> builder registries with one error for unknown names, and names resolved on first use.

Every kind the trainer selects by name (algorithms, engines, server and client optimizers,
learning-rate schedules, tasks) is a `Registry`: adding one is one entry, and an unknown name
fails with the same one-line message everywhere, `unknown <kind> 'x'; valid choices: a, b`.

The registries live in modules that import no TensorFlow (each subpackage's `config`, and
`tasks.catalog`), so the trainer can check its flags and print --help without TensorFlow and
TFF (about 9 s to import). Their entries reach the TensorFlow code through two lazy names:

* `Lazy('package.module:name')`: a builder that imports its module on its first call;
* `lazy_exports(package, module_of)`: a package's PEP 562 `__getattr__`/`__dir__`, which import
  the submodule that defines a name when the name is first read.
"""

from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import dataclasses
import importlib
import sys
from typing import Any
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


@dataclasses.dataclass(frozen=True)
class Lazy:
  """A callable named by 'package.module:name', imported on its first call.

  A registry entry holds one in place of a TensorFlow builder, so that the registry (names,
  defaults, the fields each entry reads) is readable without importing TensorFlow.

  Attributes:
    target: 'package.module:name', e.g. 'tff_adaptive.tasks.fmnist:build_fmnist_task'.
  """

  target: str

  def resolve(self) -> Callable[..., Any]:
    """The named callable (importing its module if it is not yet)."""
    module, _, name = self.target.partition(':')
    return getattr(importlib.import_module(module), name)

  def __call__(self, *args, **kwargs):
    return self.resolve()(*args, **kwargs)


def lazy_exports(
  package: str, module_of: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
  """A package's PEP 562 `__getattr__` and `__dir__`, loading its names on first access.

  `module_of` maps each exported name to the submodule (relative to `package`) that defines it;
  any other public name is tried as a submodule (`package.base`, as an eager `__init__` would
  have imported it); a name starting with '_' is neither. A loaded name is stored on the
  package, so it is looked up once.

  Usage, in a package's `__init__.py`: `__getattr__, __dir__ = lazy_exports(__name__, {...})`.
  """

  def __getattr__(name: str) -> Any:
    if name.startswith('_'):
      raise AttributeError(f'module {package!r} has no attribute {name!r}')
    if name in module_of:
      value = getattr(importlib.import_module(f'{package}.{module_of[name]}'), name)
    else:
      try:
        value = importlib.import_module(f'{package}.{name}')
      except ModuleNotFoundError as e:
        if e.name != f'{package}.{name}':
          raise
        raise AttributeError(f'module {package!r} has no attribute {name!r}') from None
    setattr(sys.modules[package], name, value)
    return value

  def __dir__() -> list[str]:
    return sorted({*module_of, *vars(sys.modules[package])})

  return __getattr__, __dir__
