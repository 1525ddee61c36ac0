"""reproductions.publish's writes: whole or not at all, for every table and figure of a driver."""

import pathlib
import re

import pytest

from reproductions import publish
from tff_adaptive.run import provenance

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_atomic_output_replaces_whole_or_leaves_the_old_file(tmp_path):
  path = tmp_path / 'table.md'
  with publish.atomic_output(str(path)) as f:
    f.write('| old |\n')
  with pytest.raises(RuntimeError, match='stopped'):
    with publish.atomic_output(str(path)) as f:
      f.write('| half of a new')
      raise RuntimeError('stopped mid-write')
  assert path.read_text() == '| old |\n'
  assert [p.name for p in tmp_path.iterdir()] == ['table.md']
  with publish.atomic_output(str(path), newline='') as f:
    f.write('| new |\r\n')
  assert path.read_bytes() == b'| new |\r\n'


class _Figure:
  """A figure whose savefig writes part of a PNG, then fails (or not)."""

  def __init__(self, fail):
    self.fail = fail
    self.saved = []

  def savefig(self, path, **kwargs):
    self.saved.append((path, kwargs))
    pathlib.Path(path).write_bytes(b'\x89PNG partial')
    if self.fail:
      raise OSError(28, 'No space left on device')


def test_save_figure_keeps_the_format_and_never_leaves_half_a_figure(tmp_path):
  path = tmp_path / 'heatmap.png'
  path.write_bytes(b'old figure')
  with pytest.raises(OSError):
    publish.save_figure(_Figure(fail=True), str(path), dpi=120)
  assert path.read_bytes() == b'old figure' and len(list(tmp_path.iterdir())) == 1
  figure = _Figure(fail=False)
  publish.save_figure(figure, str(path), dpi=120)
  [(written, kwargs)] = figure.saved
  assert written.endswith('.png') and kwargs['dpi'] == 120  # matplotlib picks the format
  assert set(kwargs) == {'dpi', 'metadata'}  # what wrote it (below)
  assert path.read_bytes() == b'\x89PNG partial' and len(list(tmp_path.iterdir())) == 1


def test_a_png_says_which_command_date_and_code_version_wrote_it(tmp_path, monkeypatch):
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top

  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(
    'sys.orig_argv', ['python', '-m', 'x.plot', '--out', str(tmp_path / 'figs' / 'a.png')]
  )
  fig, axis = plt.subplots()
  axis.plot([0, 1], [1, 0])
  publish.save_figure(fig, str(tmp_path / 'a.png'), dpi=50, metadata={'Title': 'Fig. 1'})
  plt.close(fig)
  with Image.open(tmp_path / 'a.png') as image:
    text = dict(image.text)
  assert text['Source'] == 'python -m x.plot --out figs/a.png'  # relative to where it ran
  assert text['Software'] == f'tff-adaptive, code version {provenance.code_version()}'
  assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d', text['Creation Time'])
  assert text['Title'] == 'Fig. 1'  # the caller's own keys are kept


def test_tables_and_figures_name_the_code_version_the_driver_started_with(monkeypatch):
  """A --publish rerun rewrites tracked tables before it stamps the last one: git, asked then,
  counts them as uncommitted changes (the settings study's report once said '9ffdaf8 +
  uncommitted changes' of a clean checkout). The stamps keep the version of the driver's start."""
  from reproductions import cell_runner  # pylint: disable=g-import-not-at-top

  at_start = publish.code_version()
  monkeypatch.setattr(provenance, 'code_version', lambda root=None: 'abc1234 + uncommitted changes')
  assert publish.code_version() == at_start
  assert publish.figure_stamp()['Software'] == f'tff-adaptive, code version {at_start}'
  assert cell_runner.stamp_line().endswith(f'; code version {at_start}')


def test_drivers_write_tables_and_figures_only_through_publish():
  """A driver stopped mid-write (Ctrl-C, SIGKILL, a full disk) must not leave half a table:
  no driver module opens a file for writing or saves a figure except through publish."""
  direct = re.compile(r"open\([^)]*,\s*'w|\.savefig\(")
  offenders = []
  for path in sorted((REPO / 'reproductions').rglob('*.py')):
    if path.name in ('publish.py', 'published.py'):  # published.py: write_presets, by hand
      continue
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if direct.search(line):
        offenders.append(f'{path.relative_to(REPO)}:{number}: {line.strip()}')
  assert offenders == []


def test_shown_command_makes_paths_under_the_directory_it_ran_in_relative(tmp_path, monkeypatch):
  from reproductions import cell_runner  # pylint: disable=g-import-not-at-top

  monkeypatch.delenv('BUILD_WORKING_DIRECTORY', raising=False)
  monkeypatch.chdir(tmp_path)
  argv = [
    str(tmp_path / '.venv' / 'bin' / 'python'),
    '-m',
    'run.federated_trainer',
    f'--root_output_dir={tmp_path}/runs/kim 2024',
    '--data_dir=/elsewhere/data',
    f'--flagfile={tmp_path}x/not_under_it.flags',
    '--seed=1',
  ]
  assert cell_runner.shown_command(argv) == (
    ".venv/bin/python -m run.federated_trainer '--root_output_dir=runs/kim 2024' "
    f'--data_dir=/elsewhere/data --flagfile={tmp_path}x/not_under_it.flags --seed=1'
  )


def test_every_committed_table_states_its_command_date_and_code_version():
  """Each committed markdown table under reproductions/*/results/ says which command wrote it
  (with no absolute path a reader could not paste), when, and from which code version."""
  tables = sorted((REPO / 'reproductions').glob('*/results/**/*.md'))
  assert len(tables) >= 9
  for table in tables:
    head = '\n'.join(table.read_text().splitlines()[:12])
    name = table.relative_to(REPO)
    assert re.search(r'Command: `[^`]*(python|bazel) ', head), name
    assert re.search(r'[Cc]ode version:? [0-9a-f]{7}|\(commit [0-9a-f]{7}', head), name
    assert re.search(r'20\d\d-\d\d-\d\d', head), name
    assert '/work/' not in head and '/home/' not in head and '/tmp/' not in head, name


def test_every_committed_figure_states_its_command_date_and_code_version():
  """Each committed PNG under reproductions/*/results/ carries `publish.figure_stamp()`'s text
  chunks: the command that wrote it (relative paths), when, and from which code version."""
  from PIL import Image  # pylint: disable=g-import-not-at-top

  figures = sorted((REPO / 'reproductions').glob('*/results/**/*.png'))
  assert len(figures) >= 28
  for figure in figures:
    name = figure.relative_to(REPO)
    with Image.open(figure) as image:
      text = image.text
    assert re.search(r'python -m (reproductions|run)\.', text.get('Source', '')), name
    assert re.search(r'^tff-adaptive, code version [0-9a-f]{7}', text.get('Software', '')), name
    assert re.match(r'20\d\d-\d\d-\d\dT', text.get('Creation Time', '')), name
    assert not re.search(r'/work/|/home/|/tmp/', text['Source']), name


def test_markdown_table_lines():
  assert publish.markdown_table(['a', 'b'], [[1, None], ('x', 2.5)]) == [
    '| a | b |',
    '|---|---|',
    '| 1 | None |',
    '| x | 2.5 |',
  ]
  assert publish.markdown_table(('only',), []) == ['| only |', '|---|']
