"""run.autograph_cache: a conversion recorded while tracing is found and made again elsewhere,
and the cached conversion runs with each function's own closure."""

import json

import tensorflow as tf
from tensorflow.python.autograph.impl import api

from tff_adaptive.run import autograph_cache


def _clipped_sum(values):
  total = tf.constant(0.0)
  for v in values:  # a Python loop over a tensor: AutoGraph makes it a tf.while_loop
    if v > 0:
      total += v
  return total


def _make_shift(k):
  def shift(x):
    if x > 0:  # a tensor condition: AutoGraph makes it a tf.cond
      return x + k
    return x - k

  return shift


def _cached(fn, options) -> bool:
  return api._TRANSPILER._cache.has(fn, options)  # pylint: disable=protected-access


def _forget(fn) -> None:
  cache = api._TRANSPILER._cache._cache  # pylint: disable=protected-access
  cache.pop(fn.__code__, None)


def test_recorded_conversions_are_converted_again_and_run_with_their_own_closure(tmp_path):
  assert autograph_cache.available()
  record = tmp_path / 'record.jsonl'
  for fn in (_clipped_sum, _make_shift(0.0)):
    _forget(fn)
  stop = autograph_cache.record(str(record))
  try:
    assert tf.function(_clipped_sum)(tf.constant([1.0, -2.0, 3.0])).numpy() == 4.0
    assert tf.function(_make_shift(1.0))(tf.constant(2.0)).numpy() == 3.0
  finally:
    stop()
  entries = [json.loads(line) for line in record.read_text().splitlines()]
  names = [e['qualname'] for e in entries]
  assert '_clipped_sum' in names and '_make_shift.<locals>.shift' in names, names
  options = {
    e['qualname']: e['options'] for e in entries if e['qualname'].startswith(('_clipped', '_make'))
  }
  assert options['_clipped_sum']['user_requested'] is True  # tf.function's own call
  sum_options = autograph_cache.conversion_options(options['_clipped_sum'])
  shift_options = autograph_cache.conversion_options(options['_make_shift.<locals>.shift'])

  # As in a freshly started server: neither is converted, then both are, from the record.
  shift_by_five = _make_shift(5.0)
  for fn in (_clipped_sum, shift_by_five):
    _forget(fn)
  assert not _cached(_clipped_sum, sum_options) and not _cached(shift_by_five, shift_options)
  done = set()
  converted, lines = autograph_cache.convert_recorded(str(record), done)
  assert converted >= 2 and lines == len(entries)
  assert _cached(_clipped_sum, sum_options) and _cached(shift_by_five, shift_options)
  assert autograph_cache.convert_recorded(str(record), done) == (0, len(entries))  # once each

  # The conversion made with placeholder cells runs with the function's own k = 5 and -5.
  stop = autograph_cache.record(str(record))
  try:
    before = record.read_text()
    assert tf.function(shift_by_five)(tf.constant(2.0)).numpy() == 7.0
    assert tf.function(shift_by_five)(tf.constant(-2.0)).numpy() == -7.0
    assert tf.function(_make_shift(-5.0))(tf.constant(2.0)).numpy() == -3.0
    assert record.read_text() == before  # found in the cache: nothing converted again
  finally:
    stop()


def test_what_cannot_be_found_is_skipped(tmp_path):
  record = tmp_path / 'record.jsonl'
  options = {
    'recursive': True,
    'user_requested': False,
    'internal_convert_user_code': True,
    'optional_features': [],
  }
  lines = [
    {'module': 'no.such.module', 'qualname': 'f', 'file': 'x.py', 'line': 1},
    {'module': __name__, 'qualname': '_clipped_sum', 'file': __file__, 'line': 1},  # moved
    {'module': __name__, 'qualname': '_make_shift.<locals>.gone', 'file': __file__, 'line': 1},
  ]
  # The last line is still being written: not read.
  record.write_text(''.join(json.dumps({**l, 'options': options}) + '\n' for l in lines) + '{"modu')
  done = set()
  assert autograph_cache.convert_recorded(str(record), done) == (0, 3)
  assert len(done) == 3
