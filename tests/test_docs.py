"""The docs stay true to the code: the flag reference is the flag definitions', every flag is in
one section, links between the docs resolve, every documented trainer command is accepted, and
the README stays a front page."""

import json
import os
import pathlib
import re
import subprocess
import sys

from absl import flags
import pytest

from tests import repo_files
from tff_adaptive.run import flag_reference
from tff_adaptive.run import flags as trainer_flags

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_flag_reference_is_generated_from_the_flag_definitions():
  committed = (REPO / 'docs' / 'flags.md').read_text()
  assert committed == flag_reference.markdown(), (
    'docs/flags.md is stale: python -m run.flag_reference'
  )


def test_every_trainer_flag_is_in_exactly_one_section():
  defined = [f.name for f in flags.FLAGS.get_flags_for_module(trainer_flags.__name__)]
  listed = [name for _, names in trainer_flags.SECTIONS for name in names]
  assert sorted(listed) == sorted(defined)
  assert len(set(listed)) == len(listed)


def test_the_reference_names_each_flag_with_its_default():
  text = flag_reference.markdown()
  assert '| `--server_optimizer` | `sgd` |' in text
  assert "| `--client_learning_rate` | `task's` |" in text
  assert text.count('| `--') == len(flags.FLAGS.get_flags_for_module(trainer_flags.__name__))


def test_help_lists_the_trainers_flags_by_section_and_exits_0():
  result = subprocess.run(
    [sys.executable, '-m', 'run.federated_trainer', '--task=synthetic', '--help'],
    cwd=REPO,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  text = result.stdout
  assert text.startswith('The one federated trainer'), text[:200]
  position = 0
  for title, names in trainer_flags.SECTIONS:  # in order, each flag under its section
    position = text.index(f'\n{title}:\n', position)
    for name in names:
      default = flag_reference.default_text(flags.FLAGS[name])
      position = text.index(f'\n  --{name} (default: {default})\n', position)
  assert '  --server_optimizer (default: sgd)\n      Server optimizer' in text
  assert 'helpfull' in text and '--tf_' not in text  # absl's and TF's flags stay in --helpfull


def _markdown_files() -> list[pathlib.Path]:
  return [p for p in repo_files.tracked_files('*.md') if 'results' not in p.parts]


def test_relative_links_in_the_docs_resolve():
  broken = []
  for path in _markdown_files():
    for target in re.findall(r'\]\(([^)\s]+)\)', path.read_text()):
      if re.match(r'[a-z]+:', target) or target.startswith('#'):
        continue
      if not (path.parent / target.split('#')[0]).exists():
        broken.append(f'{path.relative_to(REPO)}: {target}')
  assert broken == []


def test_readme_is_a_front_page():
  readme = (REPO / 'README.md').read_text()
  assert len(readme.splitlines()) <= 230
  for page in ('algorithms', 'client_optimizers', 'engines_and_workers', 'data_and_tasks'):
    assert f'docs/{page}.md' in readme
  for page in ('reproductions', 'architecture', 'flags', 'trainer', 'library'):
    assert f'docs/{page}.md' in readme


_DOCS_DRIVER = """
import json, sys
from absl import flags
import pytest
from tff_adaptive.run import flags as trainer_flags
from tff_adaptive.tasks import catalog
results = []
for args in json.loads(sys.argv[1]):
  flags.FLAGS.unparse_flags()
  try:
    flags.FLAGS(['trainer', *args])
    config = trainer_flags.experiment_config_from_flags()
    if config.task.name in ('fmnist', 'synthetic'):  # data on every machine: build the task too
      catalog.build_task(config.task)
    results.append('')
  except (ValueError, flags.Error) as e:
    results.append(str(e))
print(json.dumps(results))
"""


def _documented_trainer_commands() -> list[tuple[str, list[str]]]:
  """(file, arguments) of every `python -m run.federated_trainer ...` or `tff-adaptive train ...`
  line in the Markdown, continuation lines joined, comments dropped; --help and the
  `--flag=value ...` pattern left out, and the placeholder directory DIR replaced by a real one."""
  commands = []
  for path in _markdown_files():
    text = re.sub(r'\\\n\s*', ' ', path.read_text())
    for match in re.finditer(
      r'(?:python -m run\.federated_trainer|tff-adaptive train)([^\n`|#]*)', text
    ):
      args = match.group(1).split()
      if not args or '--help' in args or '--flag=value' in args:
        continue
      args = [a.replace('=DIR', f'={REPO}') for a in args]
      commands.append((str(path.relative_to(REPO)), args))
  return commands


def test_every_documented_trainer_command_is_accepted():
  """Each trainer command of the docs gets through the trainer's flag checks, and with the data
  this machine has (fmnist, synthetic) builds its task: a newcomer who pastes one does not meet
  a refusal (two fmnist DP commands once named 1000 clients of 500 examples each)."""
  commands = _documented_trainer_commands()
  assert len(commands) >= 15, commands
  result = subprocess.run(
    [sys.executable, '-c', _DOCS_DRIVER, json.dumps([args for _, args in commands])],
    cwd=REPO,
    env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert result.returncode == 0, result.stderr
  errors = json.loads(result.stdout.splitlines()[-1])
  refused = [f'{path}: {args}: {e}' for (path, args), e in zip(commands, errors) if e]
  assert refused == []


# A Python started bare (`python -m x`, `python3 -c ...`): often not the environment the library
# is in (docs/ say `.venv/bin/python`, which works as pasted from the checkout's root).
_BARE_PYTHON = re.compile(r'(?<![\w/.\-])python3?\s+-[mc]\b')
_VENV_MODULE = re.compile(r'\.venv/bin/python -m\s+([A-Za-z_][\w.]*)')
_CONSOLE = re.compile(r'(?<![\w\-])tff-adaptive\s+([a-z]+)\b')


def test_documented_commands_name_the_projects_interpreter_and_real_programs():
  """Every command of the Markdown works as pasted: no bare `python`; each `.venv/bin/python -m M`
  names a module that exists; each `tff-adaptive S` a subcommand that exists."""
  from tff_adaptive.run import cli  # pylint: disable=g-import-not-at-top

  bare, modules, subcommands = [], set(), set()
  for path in _markdown_files():
    text = re.sub(r'\\?\n\s*', ' ', path.read_text())  # commands wrapped over lines
    where = str(path.relative_to(REPO))
    bare += [f'{where}: {m.group(0)}' for m in _BARE_PYTHON.finditer(text)]
    modules |= {(where, m) for m in _VENV_MODULE.findall(text)}
    subcommands |= {(where, m) for m in _CONSOLE.findall(text)}
  assert bare == []
  assert len(modules) >= 20 and len(subcommands) >= 5
  valid = {*cli.SUBCOMMANDS, cli.REPRODUCE}
  assert sorted((w, s) for w, s in subcommands if s not in valid) == []
  found = subprocess.run(
    [
      sys.executable,
      '-c',
      'import importlib.util, json, sys\n'
      'print(json.dumps([importlib.util.find_spec(m) is not None for m in sys.argv[1:]]))',
      *[m for _, m in sorted(modules)],
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=True,
  )
  exists = json.loads(found.stdout)
  assert [f'{w}: {m}' for (w, m), ok in zip(sorted(modules), exists) if not ok] == []


DRIVERS = (
  'reproductions.alshedivat2021_fedpa.regimes',
  'reproductions.alshedivat2021_fedpa.reproduce_fmnist',
  'reproductions.dp_fedopt.reproduce',
  'reproductions.ju2023_adafedadam.reproduce_synthetic',
  'reproductions.ju2023_adafedadam.settings_study',
  'reproductions.kim2024_delta_sgd.reproduce',
  'reproductions.reddi2021_fedopt.reproduce',
)


@pytest.mark.parametrize('driver', DRIVERS)
def test_driver_help_lists_the_output_flags(driver):
  """The flags `cell_runner.define_output_flags` defines for every driver are in its --help."""
  result = subprocess.run(
    [sys.executable, '-m', driver, '--help'], cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert result.returncode == 0, result.stderr[-2000:]
  for flag in ('--runs_dir:', '--out:', '--[no]publish:', '--[no]report_only:', '--[no]dry_run:'):
    assert f'\n  {flag}' in result.stdout, (driver, flag)


def test_driver_bad_flag_is_one_line_with_exit_2():
  result = subprocess.run(
    [sys.executable, '-m', DRIVERS[0], '--rounds=many'],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
    "regimes: error: flag --rounds=many: invalid literal for int() with base 10: 'many'; see --help"
  ]
