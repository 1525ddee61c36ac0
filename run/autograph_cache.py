"""AutoGraph's conversions, made once in the preloading server and inherited by every child.

Infrastructure (no paper). Tracing a `tf.function` (and so building any TFF computation) first
has AutoGraph rewrite the Python source of each function it calls: parse, transform, write and
load a module. Measured over the test suite's 211 trainer runs (two pytest workers on two
cores), that was 424 of their 1120 CPU-s, the same work in every run: the functions are TFF's
and ours, not the run's. On a quiet machine a short synthetic run takes 6.2 CPU-s with the
conversions shared, 7.6 without. AutoGraph caches a conversion per code object and conversion options
(`transpiler.PyToPy.transform_function`), so `run.preload`'s server, which cannot trace
anything (tracing starts TensorFlow's runtime, and then it could not fork), converts instead:

* a child records each function AutoGraph converts (`record`): where its code is (module,
  qualified name, file, first line) and the options, a JSON line appended to a file the
  server gave it;
* before the server forks its next child, it reads the new lines and converts each function
  once itself (`convert_recorded`); the conversion is pure Python (AST to module), so the
  server stays fork-safe, and the children forked afterwards find it in their cache.

A conversion depends on the function's source and options only; a function defined inside
another (a closure) is found through its enclosing function's code and converted with
placeholder closure cells, as AutoGraph instantiates the cached conversion with each
function's own closure, globals and defaults when it is called. What cannot be found or
converted is skipped: a child then converts it itself, as without this module. TensorFlow's
AutoGraph internals are used here (`_TRANSPILER`, `PyToPy.transform_function`); with another
TensorFlow version where they differ, nothing is recorded or converted (`available()`).
"""

import json
import os
import sys
import types

__all__ = ['available', 'conversion_options', 'convert_recorded', 'record']

_PLACEHOLDER = object()  # the contents of a closure cell while converting


def _autograph():
  """(api, converter, transpiler) modules of TF's AutoGraph, or None where they differ."""
  try:
    from tensorflow.python.autograph.core import converter  # pylint: disable=g-import-not-at-top
    from tensorflow.python.autograph.impl import api  # pylint: disable=g-import-not-at-top
    from tensorflow.python.autograph.pyct import transpiler  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  if not (
    hasattr(api, '_TRANSPILER')
    and hasattr(transpiler.PyToPy, 'transform_function')
    and hasattr(converter, 'ProgramContext')
  ):
    return None
  return api, converter, transpiler


def available() -> bool:
  """Whether TensorFlow is imported and its AutoGraph has the internals used here."""
  return 'tensorflow' in sys.modules and _autograph() is not None


def _options_record(options) -> dict:
  return {
    'recursive': bool(options.recursive),
    'user_requested': bool(options.user_requested),
    'internal_convert_user_code': bool(options.internal_convert_user_code),
    'optional_features': sorted(f.name for f in options.optional_features),
  }


def conversion_options(record: dict):
  """The `ConversionOptions` of a recorded conversion."""
  _, converter, _ = _autograph()
  return converter.ConversionOptions(
    recursive=record['recursive'],
    user_requested=record['user_requested'],
    internal_convert_user_code=record['internal_convert_user_code'],
    optional_features=[converter.Feature[name] for name in record['optional_features']],
  )


def _locator(fn, options) -> dict | None:
  fn = getattr(fn, '__func__', fn)  # a bound method converts as its function
  code = getattr(fn, '__code__', None)
  if code is None or code.co_name == '<lambda>' or not hasattr(fn, '__qualname__'):
    return None
  return {
    'module': fn.__module__,
    'qualname': fn.__qualname__,
    'file': code.co_filename,
    'line': code.co_firstlineno,
    'options': _options_record(options),
  }


def record(path: str):
  """Appends a JSON line to `path` for each function AutoGraph converts from now on; returns
  a function that stops recording (None where AutoGraph's internals differ)."""
  modules = _autograph()
  if modules is None:
    return None
  _, _, transpiler = modules
  convert = transpiler.PyToPy.transform_function

  def recording(self, fn, user_context):
    try:
      cached = self._cache.has(fn, self.get_caching_key(user_context))  # pylint: disable=protected-access
    except Exception:  # pylint: disable=broad-except
      cached = True  # nothing to record
    result = convert(self, fn, user_context)
    if not cached:
      try:
        found = _locator(fn, user_context.options)
        if found is not None:
          with open(path, 'a', encoding='utf-8') as f:
            f.write(json.dumps(found) + '\n')
      except Exception:  # pylint: disable=broad-except
        pass  # recording is an optimisation: never fail the child's tracing over it
    return result

  transpiler.PyToPy.transform_function = recording

  def stop():
    transpiler.PyToPy.transform_function = convert

  return stop


def _code_named(code: types.CodeType, name: str, line: int | None):
  for const in code.co_consts:
    if isinstance(const, types.CodeType) and const.co_name == name:
      if line is None or const.co_firstlineno == line:
        return const
  return None


def _find(entry: dict):
  """The function (or one with its code object) that `entry` locates, or None."""
  module = sys.modules.get(entry['module'])
  if module is None:
    return None
  parts = entry['qualname'].split('.')
  target = module
  for i, part in enumerate(parts):
    if part != '<locals>':
      target = getattr(target, part, None)
      target = getattr(target, 'python_function', target)  # a tf.function: its Python function
      target = getattr(target, '__func__', target)  # a classmethod or bound method
      if target is None:
        return None
      continue
    # Defined inside `target`: descend through the code objects of the rest of the name.
    code = getattr(target, '__code__', None)
    rest = [p for p in parts[i + 1 :] if p != '<locals>']
    for j, name in enumerate(rest):
      if code is None:
        return None
      code = _code_named(code, name, entry['line'] if j == len(rest) - 1 else None)
    if code is None:
      return None
    cells = tuple(types.CellType(_PLACEHOLDER) for _ in code.co_freevars)
    return types.FunctionType(code, module.__dict__, code.co_name, None, cells or None)
  if not isinstance(target, types.FunctionType):
    return None
  code = target.__code__
  if (code.co_filename, code.co_firstlineno) != (entry['file'], entry['line']):
    return None  # not the function that was recorded (e.g. another version of the module)
  return target


def convert_recorded(path: str, done: set) -> tuple[int, int]:
  """In the server: converts each function recorded in `path` and not in `done` (the lines
  read before, updated); returns (how many it converted, how many lines `path` holds)."""
  modules = _autograph()
  if modules is None or not os.path.exists(path):
    return 0, 0
  api, converter, _ = modules
  with open(path, encoding='utf-8') as f:
    lines = f.read().split('\n')[:-1]  # the last piece is '' or a line still being written
  converted = 0
  for line in lines:
    if not line or line in done:
      continue
    done.add(line)
    try:
      entry = json.loads(line)
      fn = _find(entry)
      if fn is None:
        continue
      context = converter.ProgramContext(conversion_options(entry['options']))
      api._TRANSPILER.transform(fn, context)  # noqa: SLF001  (AutoGraph's own converter)
      converted += 1
    except Exception:  # pylint: disable=broad-except
      continue  # the child converts it itself
  return converted, len(lines)
