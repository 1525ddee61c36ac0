"""Argument checks shared by the library's builders (one wording for each kind of error)."""


def check_int(name: str, value, low: int) -> int:
  """`value` if it is an int >= low (bools excluded); else ValueError naming `name`."""
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return value


def check_positive(name: str, value) -> float:
  """`value` as a float if it is a finite number > 0; else ValueError naming `name`."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < _INF:
    raise ValueError(f'{name}={value!r} is invalid; expected a finite number > 0')
  return float(value)


def check_nonnegative(name: str, value) -> float:
  """`value` as a float if it is a finite number >= 0; else ValueError naming `name`."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _INF:
    raise ValueError(f'{name}={value!r} is invalid; expected a finite number >= 0')
  return float(value)


def check_type(builder: str, name: str, value, kind, expected: str):
  """`value` if it is an instance of `kind` (a type or a tuple of types; `callable`: any
  callable); else a one-line TypeError saying what `builder` expects for `name` (`expected`,
  e.g. 'a tff.learning.optimizers.Optimizer (e.g. build_adam(0.01))') and the type it got."""
  ok = callable(value) if kind is callable else isinstance(value, kind)
  if not ok:
    got = type(value)
    raise TypeError(
      f'{builder}: {name} must be {expected}; got {got.__module__}.{got.__qualname__}'
    )
  return value


_INF = float('inf')
