"""The layout's rules, checked on the source: imports point down, exports are explicit, the
package ships every subpackage, and nothing points outside the repository.

Floors, lowest first (docs/architecture.md). A module may import its own unit and the units of
lower floors; never a unit of its own floor or of a higher one.
"""

import ast
import importlib
from importlib import metadata
import inspect
import pathlib
import tomllib

from packaging import requirements
from packaging import utils
import pytest

from tests import repo_files

REPO = pathlib.Path(__file__).resolve().parents[1]
# Source folder -> the package it is imported as.
PACKAGES = {
  'tff_adaptive': 'tff_adaptive',
  'tasks': 'tff_adaptive.tasks',
  'datasets': 'tff_adaptive.datasets',
  'run': 'tff_adaptive.run',
  'reproductions': 'reproductions',
  'benchmarks': 'benchmarks',
}
FLOORS = (
  ('tff_adaptive.commands',),
  (
    'tff_adaptive.registry',
    'tff_adaptive.settings',
    'tff_adaptive.core',
    'tff_adaptive.datasets',
    'tff_adaptive.runtime',
  ),
  (
    'tff_adaptive.optimizers',
    'tff_adaptive.aggregators',
    'tff_adaptive.tasks',
    'tff_adaptive.privacy',
  ),
  ('tff_adaptive.algorithms',),
  ('tff_adaptive.engines',),
  ('tff_adaptive.loop',),
  ('tff_adaptive.run', 'benchmarks'),
  ('reproductions',),
)
FLOOR = {unit: floor for floor, units in enumerate(FLOORS) for unit in units}
# The package root only wires its private helpers and runtime's exit hook.
ROOT_IMPORTS = {
  'tff_adaptive._quiet_tensorflow',
  'tff_adaptive._source_layout',
  'tff_adaptive.runtime',
}


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(REPO).with_suffix('').parts)
  name = [PACKAGES[parts[0]], *parts[1:]]
  return '.'.join(name[:-1] if name[-1] == '__init__' else name)


def _sources() -> dict[str, pathlib.Path]:
  return {
    _module_name(path): path
    for folder in PACKAGES
    for path in sorted((REPO / folder).rglob('*.py'))
    if 'results' not in path.parts
  }


SOURCES = _sources()


def _imports(path: pathlib.Path) -> set[str]:
  """Our modules a file imports (`from a import b` counts as a.b where a.b is a module)."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      for alias in node.names:
        name = f'{node.module}.{alias.name}'
        found.add(name if name in SOURCES else node.module)
  return {name for name in found if name.split('.')[0] in {'tff_adaptive', *PACKAGES}}


def _unit(module: str) -> str:
  """tff_adaptive.<subpackage or module>, or the top-level folder."""
  parts = module.split('.')
  return '.'.join(parts[:2]) if parts[0] == 'tff_adaptive' and len(parts) > 1 else parts[0]


def test_every_unit_has_a_floor():
  units = {_unit(m) for m in SOURCES} - {'tff_adaptive', 'tff_adaptive._quiet_tensorflow'}
  units -= {'tff_adaptive._source_layout'}
  assert units == set(FLOOR), units ^ set(FLOOR)


def test_imports_point_down():
  upward = []
  for module, path in SOURCES.items():
    imports = _imports(path)
    if module == 'tff_adaptive':
      assert {_unit(m) for m in imports} <= ROOT_IMPORTS, imports
      continue
    unit = _unit(module)
    if unit not in FLOOR:  # the root's private helpers import nothing of ours
      assert not imports, (module, imports)
      continue
    for target in imports:
      other = _unit(target)
      if other == unit or other == 'tff_adaptive':  # own unit; `from tff_adaptive import x`
        continue
      if other in ROOT_IMPORTS and other not in FLOOR:  # the root's private helpers import
        continue  # nothing of ours (asserted above), so any unit may use them
      if other not in FLOOR or FLOOR[other] >= FLOOR[unit]:
        upward.append(f'{module} -> {target}')
  assert upward == []


def test_the_checker_sees_an_upward_import(tmp_path):
  """The rule above fails on the import this layout once had (algorithms -> engines)."""
  path = tmp_path / 'fedpa.py'
  path.write_text('from tff_adaptive.engines import tff_engine\n')
  (target,) = _imports(path)
  assert FLOOR[_unit(target)] > FLOOR['tff_adaptive.algorithms']


def test_no_import_cycles_between_modules():
  graph = {m: {i for i in _imports(p) if i in SOURCES and i != m} for m, p in SOURCES.items()}
  # A package's __init__ re-exporting its modules, which import siblings, is not a cycle
  # unless a module imports its own package's __init__ back.
  state: dict[str, int] = {}
  cycles = []

  def visit(node, stack):
    state[node] = 1
    for nxt in sorted(graph[node]):
      if state.get(nxt) == 1:
        cycles.append(stack[stack.index(nxt) :] + [nxt])
      elif nxt not in state:
        visit(nxt, stack + [nxt])
    state[node] = 2

  for node in sorted(graph):
    if node not in state:
      visit(node, [node])
  assert cycles == []


LIBRARY = [m for m in SOURCES if m.startswith('tff_adaptive') and SOURCES[m].name == '__init__.py']


@pytest.mark.parametrize('package', LIBRARY)
def test_packages_export_explicitly(package):
  module = importlib.import_module(package)
  exported = module.__all__
  assert len(set(exported)) == len(exported), exported
  assert not [name for name in exported if name.startswith('_')]
  for name in exported:
    assert getattr(module, name, None) is not None or importlib.import_module(
      f'{package}.{name}'
    ), name


def test_algorithms_and_optimizers_export_builders_not_classes():
  """Concrete algorithms and TFF optimizers are built by `build_*` functions (TFF's own
  convention for `tff.learning.optimizers`); their classes are private."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  from tff_adaptive import algorithms  # pylint: disable=g-import-not-at-top
  from tff_adaptive import optimizers  # pylint: disable=g-import-not-at-top

  for name in algorithms.__all__:
    value = getattr(algorithms, name)
    if inspect.isclass(value) and issubclass(value, algorithms.Algorithm):
      assert value is algorithms.Algorithm, name
  for name in optimizers.__all__:
    value = getattr(optimizers, name)
    assert not (inspect.isclass(value) and issubclass(value, tff.learning.optimizers.Optimizer))
  assert {'build_fedopt', 'build_scaffold', 'build_fedpa', 'build_adafedadam'} <= set(
    algorithms.__all__
  )


def test_the_wheel_ships_every_library_package():
  config = tomllib.loads((REPO / 'pyproject.toml').read_text())['tool']['setuptools']
  mapped = {name: folder for name, folder in config['package-dir'].items()}
  packages = {m for m in LIBRARY}
  assert set(config['packages']) == packages
  assert mapped == {
    'tff_adaptive.tasks': 'tasks',
    'tff_adaptive.datasets': 'datasets',
    'tff_adaptive.run': 'run',
  }


def _pins(path: pathlib.Path) -> dict:
  """{canonical name: Requirement} of a requirements file (comments and blank lines skipped)."""
  pins = {}
  for line in path.read_text().splitlines():
    line = line.split('#')[0].strip()
    if line:
      requirement = requirements.Requirement(line)
      pins[utils.canonicalize_name(requirement.name)] = requirement
  return pins


def test_the_package_dependencies_admit_the_verified_versions():
  """Every dependency of the package is in requirements.txt, and the version tools/setup.sh
  installed from there (what this suite runs on) satisfies the package's specifier."""
  project = tomllib.loads((REPO / 'pyproject.toml').read_text())['project']
  pins = {**_pins(REPO / 'requirements.txt'), **_pins(REPO / 'requirements-nodeps.txt')}
  for line in project['dependencies']:
    requirement = requirements.Requirement(line)
    name = utils.canonicalize_name(requirement.name)
    assert name in pins, f'{name} is a dependency of the package but not in requirements.txt'
    version = metadata.version(name)
    assert requirement.specifier.contains(version), (line, version, str(pins[name]))
  # The pin that keeps TensorFlow Datasets from pulling in a NumPy-2-only pyarrow.
  assert any(d.replace(' ', '') == 'tensorflow-datasets==4.9.3' for d in project['dependencies'])


def test_nothing_points_outside_the_repository():
  outside = ('..' + '/shared', 'shared' + '/reference', 'shared' + '/papers')
  offenders = []
  for path in repo_files.tracked_files():
    if path.suffix in ('.png', '.csv') or not path.is_file():
      continue
    text = path.read_text(errors='replace')
    if any(needle in text for needle in outside):
      offenders.append(str(path.relative_to(REPO)))
  assert offenders == [], offenders
