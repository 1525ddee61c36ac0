"""Every number the docs quote from a committed result table is that table's number, and every
committed table's header quotes a command that runs today.

The docs mark what they quote with an HTML comment (invisible on GitHub) after the paragraph,
list or table that quotes it, naming the committed CSV (relative to the Markdown file, as a
link is) and, one line each, the numbers as the text prints them and where they come from:

    At z = 1.5 (epsilon 12.0) DP-FedAvg reaches 71.10 % and DP-FedAdam 64.07 %, 7.03
    points behind.

    <!-- quoted ../reproductions/dp_fedopt/results/fmnist/dp_fmnist.csv
    12.0 71.10 | fixed/fedavg/1.5: epsilon accuracy_last5evals
    64.07 | fixed/fedadam/1.5: accuracy_last5evals
    7.03 | {fixed/fedavg/1.5:accuracy_last5evals} - {fixed/fedadam/1.5:accuracy_last5evals}
    -->

A line is `NUMBERS | SOURCE`. SOURCE is either `ROW ...: COLUMN ...`, the cells of those rows
and columns, row by row (`1/sgdm 1/adam: published ours` is four numbers), or expressions
separated by `;`, one per number, over cells written `{ROW:COLUMN}`
with + - * /, parentheses and mean(), std() (the sample std, n - 1), abs(), min() and max()
(of a list of rows, or of several numbers).
ROW is the values of the CSV's first columns, joined by `/` (`1/delta_sgd` in a table keyed by
alpha, optimizer; an empty value is empty: `none/fedavg///`); it must name exactly one row,
unless one value is `*`: then the cell is every matching row's, in the CSV's order (for mean()
and std(), or row by row against another such list). COLUMN is a CSV column, or
`column[key]` for a column of `key:value` pairs (`ours_per_seed[2]`). A list of rows leaves
out their empty cells (a diverged cell has no metric).

A number the report computed from the unrounded values behind two or more cells (the mean of
the paired differences, -7.35, where the cells' means give -7.36) is marked `~-7.35`: it may be
off by half a hundredth per cell of its expression.

Checked: (1) the marker's numbers appear, in its order, among the numbers of the text block just
above it (the non-blank lines before it, markers skipped), so a number changed in the text
alone fails; (2) each equals its source as printed: within half a unit of its last printed
digit (`12.0` for 12.04, not `12.1`), so a number changed in both fails too. A number that no
committed CSV holds (e.g. one only a table's Markdown prints) is not marked.
"""

import ast
import csv
import functools
import json
import pathlib
import re
import textwrap

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
# The docs that quote committed results: each must mark what it quotes.
QUOTING_DOCS = (
  'README.md',
  'docs/reproductions.md',
  'reproductions/alshedivat2021_fedpa/README.md',
  'reproductions/dp_fedopt/README.md',
  'reproductions/ju2023_adafedadam/README.md',
  'reproductions/kim2024_delta_sgd/README.md',
  'reproductions/reddi2021_fedopt/README.md',
)

MARKER = re.compile(r'<!--\s*quoted\s+(?P<csv>\S+)[ \t]*\n(?P<body>.*?)-->', re.S)
COMMENT = re.compile(r'<!--.*?-->', re.S)
# A number as the text prints it: a sign attached only where it cannot be a range's dash
# (`1-6.5` is 1 and 6.5); a full stop ending a sentence is not a decimal point; `3.5x` is 3.5.
NUMBER = re.compile(r'(?<![\w.])[-+]?\d+(?:\.\d+)?(?!\.\d|x\w|[^\Wx])')
CELL = re.compile(r'\{([^{}:]+):([^{}]+)\}')
FUNCTIONS = {
  'mean': np.mean,
  'std': lambda x: np.std(x, ddof=1),
  'abs': np.abs,
  'min': np.min,
  'max': np.max,
}


def _docs() -> list[pathlib.Path]:
  found = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
  return found + sorted((REPO / 'reproductions').glob('*/README.md'))


@functools.cache
def _table(path: pathlib.Path) -> tuple[list[str], list[dict[str, str]]]:
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    return list(reader.fieldnames), list(reader)


def _cell(path: pathlib.Path, row: str, column: str) -> float | np.ndarray:
  """The CSV's value at ROW (`a/b`: the first columns' values; `*` any) and COLUMN."""
  columns, rows = _table(path)
  parts = row.strip().split('/')
  if len(parts) > len(columns):
    raise ValueError(f'row {row!r}: more values than {path.name} has columns')
  matching = [r for r in rows if all(p == '*' or r[c] == p.strip() for p, c in zip(parts, columns))]
  if not matching or ('*' not in parts and len(matching) > 1):
    raise ValueError(f'row {row!r} names {len(matching)} rows of {path.name}, not one')
  column = column.strip()
  key = None
  if m := re.fullmatch(r'(\w[\w.]*)\[(.+)\]', column):
    column, key = m.groups()
  if column not in columns:
    raise ValueError(f'{path.name} has no column {column!r}')
  values = []
  for r in matching:
    text = r[column]
    if key is not None:
      text = dict(pair.split(':', 1) for pair in text.split())[key]
    if text or '*' not in parts:  # a list leaves out empty cells (a diverged cell's metric)
      values.append(float(text))
  return np.array(values) if '*' in parts else values[0]


def _evaluate(path: pathlib.Path, expression: str) -> float:
  """An expression of cells `{ROW:COLUMN}`: + - * /, numbers, and FUNCTIONS."""
  cells = {}

  def name(m: re.Match) -> str:
    cells[f'_c{len(cells)}'] = _cell(path, m.group(1), m.group(2))
    return f'_c{len(cells) - 1}'

  tree = ast.parse(CELL.sub(name, expression.strip()), mode='eval')

  def value(node: ast.AST):
    if isinstance(node, ast.Expression):
      return value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
      return node.value
    if isinstance(node, ast.Name) and node.id in cells:
      return cells[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
      return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
      left, right = value(node.left), value(node.right)
      return {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide}[
        type(node.op)
      ](left, right)
    if (
      isinstance(node, ast.Call)
      and isinstance(node.func, ast.Name)
      and node.func.id in FUNCTIONS
      and node.args
      and not node.keywords
    ):
      args = [value(a) for a in node.args]
      if len(args) > 1 and node.func.id not in ('min', 'max'):
        raise ValueError(f'{node.func.id}() takes one argument, in {expression!r}')
      return FUNCTIONS[node.func.id](args[0] if len(args) == 1 else np.array(args))
    raise ValueError(f'not allowed in {expression!r}: {ast.unparse(node)}')

  result = value(tree)
  if np.ndim(result) != 0:
    raise ValueError(f'{expression!r} is a list of rows, not one number')
  return float(result)


def _sources(path: pathlib.Path, source: str) -> list[float]:
  """The values a line's SOURCE names: `ROW ...: COLUMN ...` or `EXPRESSION; ...`."""
  if '{' not in source:
    rows, _, columns = source.partition(':')
    if not rows.split() or not columns.split():
      raise ValueError(
        f'{source!r}: neither `ROW ...: COLUMN ...` nor expressions of {{ROW:COLUMN}}'
      )
    values = [_cell(path, r, c) for r in rows.split() for c in columns.split()]
    if any(np.ndim(v) for v in values):
      raise ValueError(f'{rows.strip()!r} names a list of rows, not one number each')
    return [float(v) for v in values]
  return [_evaluate(path, e) for e in source.split(';')]


def _block_before(text: str, start: int) -> str:
  """The text block (non-blank lines) just above a marker, earlier markers skipped."""
  before = text[:start].rstrip()
  while before.endswith('-->'):
    before = before[: before.rindex('<!--')].rstrip()
  return COMMENT.sub(' ', re.split(r'\n[ \t]*\n', before)[-1])


def _is_subsequence(wanted: list[str], found: list[str]) -> bool:
  remaining = iter(found)
  return all(any(w == f for f in remaining) for w in wanted)


def _within_printed_precision(printed: str, value: float, cells: int = 0) -> bool:
  """`printed` is `value` rounded to its digits; `~` before it allows each of `cells` cells half
  a hundredth more (the CSVs' rounding: the report computed `printed` from the numbers behind
  them)."""
  approximate = printed.startswith('~')
  printed = printed.removeprefix('~')
  decimals = len(printed.partition('.')[2])
  allowance = 0.005 * cells if approximate else 0
  return abs(float(printed) - value) <= 0.5 * 10**-decimals + allowance + 1e-9


def check_markers(doc: pathlib.Path, text: str) -> tuple[list[str], int]:
  """(every disagreement, as `file:line: ...`; how many numbers were checked) of one doc."""
  errors, checked = [], 0
  where = doc.relative_to(REPO) if doc.is_relative_to(REPO) else doc
  for marker in MARKER.finditer(text):
    line = text.count('\n', 0, marker.start()) + 1
    table = (doc.parent / marker['csv']).resolve()
    if not table.is_file() or not table.is_relative_to(REPO / 'reproductions'):
      errors.append(f'{where}:{line}: {marker["csv"]} is not a committed table')
      continue
    if 'results' not in table.relative_to(REPO).parts:
      errors.append(f'{where}:{line}: {marker["csv"]} is not under a results folder')
      continue
    quoted = []
    for offset, entry in enumerate(marker['body'].splitlines(), line + 1):
      if not entry.strip():
        continue
      printed, bar, source = entry.partition('|')
      numbers = printed.split()
      if not bar or not numbers or not all(NUMBER.fullmatch(n.removeprefix('~')) for n in numbers):
        errors.append(f'{where}:{offset}: not `NUMBERS | SOURCE`: {entry.strip()!r}')
        continue
      try:
        values = _sources(table, source)
      except (ValueError, KeyError, SyntaxError) as e:
        errors.append(f'{where}:{offset}: {e}')
        continue
      if len(values) != len(numbers):
        errors.append(f'{where}:{offset}: {len(numbers)} numbers, {len(values)} sources')
        continue
      cells = (
        [len(CELL.findall(e)) for e in source.split(';')] if '{' in source else [0] * len(values)
      )
      for printed_number, value, n in zip(numbers, values, cells):
        checked += 1
        if not _within_printed_precision(printed_number, value, n):
          errors.append(
            f'{where}:{offset}: {printed_number} quoted, but {table.name} gives {value:.6g} '
            f'({source.strip()})'
          )
      quoted += [n.removeprefix('~') for n in numbers]
    block = NUMBER.findall(_block_before(text, marker.start()))
    if not _is_subsequence(quoted, block):
      missing = [n for n in quoted if n not in block]
      errors.append(
        f'{where}:{line}: the text above does not print, in this order, the marked numbers '
        f'{" ".join(quoted)} (not there: {" ".join(missing) or "none; the order differs"})'
      )
  return errors, checked


def test_quoted_numbers_are_the_committed_tables():
  errors, checked = [], 0
  for doc in _docs():
    found, count = check_markers(doc, doc.read_text())
    errors += found
    checked += count
  assert errors == []
  assert checked >= 800, checked  # the markers were read (a parser that finds none fails here)


@pytest.mark.parametrize('doc', QUOTING_DOCS)
def test_each_doc_that_quotes_results_marks_them(doc):
  text = (REPO / doc).read_text()
  assert MARKER.search(text), f'{doc} quotes committed results but marks none'
  assert text.count('<!-- quoted') == len(MARKER.findall(text)), f'{doc}: a malformed marker'


def test_the_example_above_passes():
  example = __doc__.split('\n\n', 2)[2].split('\n\nA line is')[0]
  errors, checked = check_markers(REPO / 'docs' / 'example.md', textwrap.dedent(example))
  assert errors == [] and checked == 4


_TABLE = 'results/t/t.csv'


@pytest.fixture
def fake_doc(tmp_path, monkeypatch):
  """A doc in a fake checkout quoting a fake committed table."""
  monkeypatch.setitem(globals(), 'REPO', tmp_path)
  folder = tmp_path / 'reproductions' / 'p'
  (folder / 'results' / 't').mkdir(parents=True)
  (folder / _TABLE).write_text(
    'alpha,optimizer,ours,per_seed\n'
    '1,sgd,86.35,1:85.29 2:86.74\n'
    '1,adam,85.90,1:85.21 2:86.59\n'
    '0.1,sgd,82.76,1:80.54 2:84.98\n'
  )
  return folder / 'README.md'


GOOD = f"""Ours: SGD 86.35 (86.4 rounded), Adam 85.90, 0.45 behind; seed 2: 86.74.
The mean over alpha: 84.56.

<!-- quoted {_TABLE}
86.35 86.4 | 1/sgd: ours ours
85.90 | 1/adam: ours
0.45 | {{1/sgd:ours}} - {{1/adam:ours}}
86.74 | 1/sgd: per_seed[2]
84.56 | mean({{*/sgd:ours}})
-->
"""


@pytest.mark.parametrize(
  'edit, error',
  [
    (lambda t: t, None),
    (lambda t: t.replace('Adam 85.90', 'Adam 85.91'), 'the text above does not print'),
    (lambda t: t.replace('85.90', '85.91'), '85.91 quoted, but t.csv gives 85.9'),
    (
      lambda t: t.replace('86.4 rounded', '86.5 rounded').replace('86.35 86.4', '86.35 86.5'),
      '86.5 quoted',
    ),
    (
      lambda t: t.replace('0.45 |', '-0.45 |').replace('0.45 behind', '-0.45 behind'),
      '-0.45 quoted',
    ),
    (lambda t: t.replace('1/adam: ours', '*/adam: ours'), 'a list of rows'),
    (lambda t: t.replace('1/adam: ours', '1: ours'), 'names 2 rows'),
    (lambda t: t.replace('per_seed[2]', 'per_seed[3]'), "'3'"),
    (lambda t: t.replace('84.56 | mean', '84.56 | __import__'), 'not allowed'),
    (lambda t: t.replace(_TABLE, 'results/t/none.csv'), 'not a committed table'),
  ],
)
def test_a_changed_number_fails(fake_doc, edit, error):
  errors, checked = check_markers(fake_doc, edit(GOOD))
  if error is None:
    assert errors == [] and checked == 6
  else:
    assert len(errors) == 1 and error in errors[0], errors


def _results_tables() -> list[pathlib.Path]:
  return sorted((REPO / 'reproductions').glob('*/results/**/*.md'))


def test_every_result_table_quotes_its_publish_command():
  """Each committed table's `- Command:` is the results/publish.json command of its folder (or
  of the nearest folder above it that has one); a table written before a driver was renamed
  keeps its command as written (the record) and, on the next line, `- Command today (...)`:
  the publish.json command, the same flags with --publish."""
  tables = _results_tables()
  assert len(tables) >= 14
  problems = []
  for table in tables:
    where = table.relative_to(REPO)
    record = json.loads(
      (REPO / where.parts[0] / where.parts[1] / 'results' / 'publish.json').read_text()
    )
    outs = {REPO / e['out']: e['command'] for e in record.values()}
    folders = [f for f in (table.parent, *table.parent.parents) if f in outs]
    lines = table.read_text().splitlines()
    commands = [i for i, l in enumerate(lines) if l.startswith('- Command:')]
    if not folders or len(commands) != 1:
      problems.append(f'{where}: no publish.json entry, or not one `- Command:` line')
      continue
    published = outs[folders[0]]
    written = re.fullmatch(r'- Command: `(.*)`', lines[commands[0]])[1]
    if sorted(written.split()) == sorted(published.split()):  # the flags in any order
      continue
    after = lines[commands[0] + 1] if commands[0] + 1 < len(lines) else ''
    today = re.fullmatch(r'- Command today \([^)]*\): `(.*)`', after)
    if today is None or today[1] != published:
      problems.append(f'{where}: `{written}` is not `{published}`; no `- Command today` gives it')
    elif sorted(['--publish', *written.split()[3:]]) != sorted(published.split()[3:]):
      problems.append(f'{where}: `{written}` and `{published}` differ in more than --publish')
  assert problems == []
