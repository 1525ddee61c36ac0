"""Argument checks shared by the library's builders (one wording for each kind of error)."""


def check_int(name: str, value, low: int) -> int:
  """`value` if it is an int >= low (bools excluded); else ValueError naming `name`."""
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return value
