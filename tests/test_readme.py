"""The library examples run as written from outside the repository, as a user runs them: with
the installed package (no PYTHONPATH), no TF_CPP_MIN_LOG_LEVEL, nothing on stderr, no TFF worker
left behind. The README's short example, docs/library.md's long one, and the README's example
again from a wheel installed into a fresh virtual environment."""

import concurrent.futures
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import venv

REPO = pathlib.Path(__file__).resolve().parents[1]


def _example(path: pathlib.Path, after: str) -> str:
  text = path.read_text()
  return text[text.index(after) :].split('```python\n', 1)[1].split('```', 1)[0]


def _user_env() -> dict[str, str]:
  """The environment of a user's shell: none of the suite's settings (tests/conftest.py sets
  TF_CPP_MIN_LOG_LEVEL, pytest.ini adds the repository to the path)."""
  env = {k: v for k, v in os.environ.items() if k not in ('TF_CPP_MIN_LOG_LEVEL', 'PYTHONPATH')}
  return env


def _run(python: str, script: pathlib.Path) -> subprocess.CompletedProcess:
  # stdout is a pipe: a worker_binary outliving Python would hold it open and make
  # communicate() time out (as `python example.py | cat` would hang).
  return subprocess.run(
    [python, str(script)],
    cwd=script.parent,
    env=_user_env(),
    capture_output=True,
    text=True,
    timeout=600,
  )


def _check_short_example(proc: subprocess.CompletedProcess) -> None:
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stderr == ''  # no TF log lines, no "Exception ignored ... Popen" at exit
  losses = [float(m) for m in re.findall(r'^round \d: train loss (\S+)$', proc.stdout, re.M)]
  # Five rounds of FedYogi over Delta-SGD clients on fixed data: the training loss falls.
  assert len(losses) == 5 and all(b < a for a, b in zip(losses, losses[1:])), proc.stdout


def _check_library_example(proc: subprocess.CompletedProcess) -> None:
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stderr == ''
  losses = dict(
    (line.split(', train loss ')[0], float(line.split(', train loss ')[1]))
    for line in proc.stdout.splitlines()
    if ', train loss ' in line
  )
  assert set(losses) == {'tff engine', 'in-process engine', 'fedpa client work'}, proc.stdout
  certainty = [l for l in proc.stdout.splitlines() if l.startswith('adafedadam finalizer')]
  # C = sum n_k I_k^2 C_k / sum n_k I_k^2 with every n_k = 30: the I_k^2-weighted mean.
  i_k, c_k = [1.0 - 0.1 * k for k in range(5)], [1.5 + 0.1 * k for k in range(5)]
  expected = sum(i * i * c for i, c in zip(i_k, c_k)) / sum(i * i for i in i_k)
  assert len(certainty) == 1 and abs(float(certainty[0].split()[-1]) - expected) < 1e-5
  assert math.isfinite(losses['fedpa client work'])
  eta_g = [float(l.split()[-1]) for l in proc.stdout.splitlines() if l.startswith('fedexp, eta_g')]
  assert len(eta_g) == 1 and eta_g[0] >= 1.0, proc.stdout  # FedExP's step, max(1, ...)
  assert abs(losses['tff engine'] - losses['in-process engine']) < 1e-5 * losses['tff engine']


def test_examples_run_from_outside_the_repository(tmp_path):
  """Both examples at once, with the project's interpreter (tools/setup.sh installed the
  library into .venv with `pip install -e .`): `tff_adaptive` comes from the install."""
  scripts = {}
  for name, (path, after) in {
    'readme': (REPO / 'README.md', '## Use the parts in your own TFF pipeline'),
    'library': (REPO / 'docs' / 'library.md', 'This example runs as written'),
  }.items():
    folder = tmp_path / name
    folder.mkdir()
    scripts[name] = folder / 'example.py'
    scripts[name].write_text(_example(path, after))
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    runs = {name: pool.submit(_run, sys.executable, script) for name, script in scripts.items()}
  _check_short_example(runs['readme'].result())
  _check_library_example(runs['library'].result())


def test_the_wheel_installs_and_runs_the_readme_example(tmp_path):
  """`pip wheel` builds the package; installed into a fresh virtual environment (its
  dependencies borrowed from this one's site-packages, the wheel installed from the file), it
  holds tff_adaptive.tasks and .datasets inside the package and runs the README example."""
  wheels = tmp_path / 'wheels'
  source = tmp_path / 'source'  # a copy: setuptools writes build/ beside the sources it builds
  source.mkdir()
  for name in ('pyproject.toml', 'README.md'):
    shutil.copy(REPO / name, source / name)
  for name in ('tff_adaptive', 'tasks', 'datasets', 'run'):
    shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns('__pycache__'))
  built = subprocess.run(
    [sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', wheels]
    + [str(source)],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert built.returncode == 0, built.stderr
  (wheel,) = wheels.glob('tff_adaptive-*.whl')
  env_dir = tmp_path / 'venv'
  venv.create(env_dir, with_pip=True)
  python = str(env_dir / 'bin' / 'python')
  site = subprocess.run(
    [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
    capture_output=True,
    text=True,
    check=True,
  ).stdout.strip()
  ours = next(p for p in sys.path if p.endswith('site-packages') and os.path.isdir(p))
  # A .pth line adds the directory without processing its .pth files: the dependencies are
  # visible, this environment's editable install of the checkout is not.
  pathlib.Path(site, 'deps.pth').write_text(ours + '\n')
  installed = subprocess.run(
    [python, '-m', 'pip', 'install', '--no-deps', '--no-index', '-q', str(wheel)],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert installed.returncode == 0, installed.stderr
  script = tmp_path / 'example.py'
  where = (
    'import tff_adaptive.tasks as t, tff_adaptive.datasets as d\nprint(t.__file__, d.__file__)\n'
  )
  script.write_text(
    _example(REPO / 'README.md', '## Use the parts in your own TFF pipeline') + where
  )
  proc = _run(python, script)
  _check_short_example(proc)
  files = proc.stdout.splitlines()[-1].split()
  assert len(files) == 2 and all(f.startswith(site + '/tff_adaptive/') for f in files), files
  # The console command of the installed package trains and summarises, outside any checkout.
  command = str(env_dir / 'bin' / 'tff-adaptive')
  train = subprocess.run(
    [command, 'train', '--task=synthetic', '--engine=inprocess', '--total_rounds=2']
    + ['--root_output_dir=out'],
    cwd=tmp_path,
    env=_user_env(),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert train.returncode == 0, train.stderr[-3000:]
  assert train.stderr == '' and 'done: train_loss=' in train.stdout
  shown = subprocess.run(
    [command, 'summarize', 'out'], cwd=tmp_path, capture_output=True, text=True, timeout=120
  )
  assert shown.returncode == 0, shown.stderr
  lines = shown.stdout.splitlines()
  assert len(lines) == 2 and lines[1].split()[1] == '2', shown.stdout


def _commands_of(readme: str, section: str, needle: str) -> str:
  """The first command line of `section`'s first sh block that contains `needle`, comment cut."""
  block = readme.split(section, 1)[1].split('```sh\n', 1)[1].split('```', 1)[0]
  return next(line.split('#')[0].strip() for line in block.splitlines() if needle in line)


def test_the_quick_start_sequence_runs_as_written(tmp_path):
  """The README's first commands in its order, typed in a checkout: `bash tools/demo.sh` (with
  ROUNDS=2, which the README says it accepts), then the Train section's summarize command, which
  finds the demo's two runs where the README says the demo writes them (results/demo/)."""
  readme = (REPO / 'README.md').read_text()
  demo = _commands_of(readme, '## Quick start', 'demo.sh')
  summarize = _commands_of(readme, '## Train', 'summarize')
  assert demo == 'bash tools/demo.sh' and summarize == '.venv/bin/tff-adaptive summarize results'
  assert 'writes both runs to\n`results/demo/`' in readme
  checkout = tmp_path / 'checkout'  # the repository's files, its results/ a fresh one
  checkout.mkdir()
  for name in ('tools', 'run', 'tff_adaptive', 'tasks', 'datasets', '.venv', 'pyproject.toml'):
    (checkout / name).symlink_to(REPO / name)
  for name in ('requirements.txt', 'requirements-nodeps.txt'):
    (checkout / name).symlink_to(REPO / name)
  env = {**_user_env(), 'ROUNDS': '2'}
  ran = subprocess.run(
    ['bash', '-c', demo], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
  )
  assert ran.returncode == 0, ran.stderr[-3000:]
  assert ran.stderr == '', ran.stderr
  shown = subprocess.run(
    ['bash', '-c', summarize], cwd=checkout, env=env, capture_output=True, text=True, timeout=120
  )
  assert shown.returncode == 0, shown.stderr
  note, *lines = shown.stdout.splitlines()
  assert note == '(.. stands for demo/fmnist_fedopt_ at the start)', shown.stdout
  assert lines[0].split() == ['experiment', 'rounds', 'eval_accuracy', 'last100', 'wall']
  runs = sorted(line.split()[0] for line in lines[1:])
  assert len(runs) == 2 and runs[0].startswith('..adam_sgd_seed1_')
  assert runs[1].startswith('..sgd_sgd_seed1_'), shown.stdout
  assert all(line.split()[1] == '2' for line in lines[1:])
