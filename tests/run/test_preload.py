"""run.preload: a child forked from the preloading server behaves as `python -m` would.

Each case runs tests/preload_program.py both ways, as `sys.executable -m` and as a child of a
server, and compares exit status, stdout and stderr; then the trainer itself, both ways.
"""

import csv
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from tests import trainer_processes
from tff_adaptive.run import preload

REPO = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = 'tests.preload_program'
ENV = {**os.environ, 'PYTHONPATH': str(REPO), 'PRELOAD_TEST_VAR': 'x'}  # -m finds it from anywhere


@pytest.fixture(scope='module')
def server():
  with preload.Preloaded([PROGRAM], env=ENV) as s:
    yield s


def _both(server, args, cwd, **kwargs):
  runs = []
  for start in (
    lambda **k: subprocess.Popen([sys.executable, '-m', PROGRAM, *args], **k),
    lambda **k: server.popen(PROGRAM, args, **k),
  ):
    process = start(
      cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    out, err = process.communicate(timeout=60)
    runs.append((process.returncode, out, err))
  return runs


def _traceback_lines(err: str) -> list:
  # File paths differ (runpy is entered from another frame): compare the lines without them.
  return [l for l in err.splitlines() if not l.startswith('  ')]


@pytest.mark.parametrize(
  'action, code',
  [('ok', 0), ('exit3', 3), ('exit_message', 1), ('raise', 1), ('interrupt', -signal.SIGINT)],
)
def test_exit_status_and_output_are_those_of_python_dash_m(server, tmp_path, action, code):
  (real_code, real_out, real_err), (code_, out, err) = _both(server, [action, 'b c'], tmp_path)
  assert real_code == code_ == code
  assert out == real_out
  assert f"argv=['{action}', 'b c'] cwd={tmp_path} var=x\nname=__main__ pgid_is_own=False\n" in out
  assert out.endswith('atexit ran\n')
  assert _traceback_lines(err) == _traceback_lines(real_err)
  if action == 'raise':
    assert err.splitlines()[-1] == 'ValueError: boom'
  if action == 'exit_message':
    assert err == 'a message\n'


def test_non_daemon_threads_finish_before_exit(server, tmp_path):
  (_, real_out, _), (code, out, _) = _both(server, ['thread'], tmp_path)
  assert code == 0 and out == real_out
  assert out.endswith('thread done\natexit ran\n')


def test_stdin_and_stderr_to_stdout(server, tmp_path):
  with open(tmp_path / 'in', 'w') as f:
    f.write('hello')
  with open(tmp_path / 'in') as stdin:
    child = server.popen(
      PROGRAM, ['stdin'], cwd=tmp_path, env=ENV, stdin=stdin, stdout=subprocess.PIPE
    )
  assert b"stdin='hello'" in child.stdout.read()
  assert child.wait(30) == 0
  child = server.popen(
    PROGRAM, ['raise'], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
  )
  assert 'ValueError: boom' in child.stdout.read().decode().splitlines()
  assert child.wait(30) == 1


def _waiting(server, cwd, **kwargs):
  """The program waiting for a signal, once it has printed its first line."""
  child = server.popen(
    PROGRAM, ['wait_for_signal'], cwd=cwd, env=ENV, stdout=subprocess.PIPE, **kwargs
  )
  assert child.stdout.readline().startswith(b'argv=')
  return child


@pytest.mark.parametrize(
  'sig, code', [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)]
)
def test_signals_reach_the_child_and_its_own_process_group(server, tmp_path, sig, code):
  child = _waiting(server, tmp_path, process_group=True)
  assert child.stdout.readline() == b'name=__main__ pgid_is_own=True\n'
  assert child.stdout.readline() == b'waiting\n'
  assert child.poll() is None
  with pytest.raises(subprocess.TimeoutExpired):
    child.wait(0.2)
  child.send_signal(sig)
  assert child.wait(30) == code
  assert child.cpu_s is not None and child.cpu_s < 5


def test_each_child_gets_its_own_exit_status(server, tmp_path):
  """Exits are matched by request, not pid (a pid is reused once its process is reaped)."""
  children = [
    server.popen(PROGRAM, ['exit_with', str(i)], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL)
    for i in range(24)
  ]
  assert [c.wait(60) for c in reversed(children)] == list(reversed(range(24)))
  assert server._exits == {}  # pylint: disable=protected-access  (each consumed once)


def test_refuses_other_programs_and_import_time_variables(server):
  with pytest.raises(ValueError, match=r"'run.federated_trainer' was not preloaded; preloaded: "):
    server.popen('run.federated_trainer', [])
  with pytest.raises(ValueError, match=r"variables read at import: \[\('TF_CPP_MIN_LOG_LEVEL'"):
    server.popen(PROGRAM, ['ok'], env={**server.env, 'TF_CPP_MIN_LOG_LEVEL': '1'})


def test_children_with_a_death_signal_end_with_the_server(tmp_path):
  server = preload.Preloaded([PROGRAM], env=ENV)
  child = _waiting(server, tmp_path, death_signal=signal.SIGTERM)
  server_pid = server._server.pid  # pylint: disable=protected-access
  server.close()
  assert server._server.returncode == 0  # pylint: disable=protected-access
  deadline = time.monotonic() + 10
  while os.path.exists(f'/proc/{child.pid}') and time.monotonic() < deadline:
    time.sleep(0.05)
  assert not os.path.exists(f'/proc/{child.pid}'), f'child of server {server_pid} outlived it'
  with pytest.raises(preload.ServerError, match='has stopped'):
    server.popen(PROGRAM, ['ok'], env=ENV)


_SHARING = """
import os, signal, subprocess, sys
from tff_adaptive.run import preload
PROGRAM = 'tests.preload_program'
assert preload.Preloaded.shared([PROGRAM], env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '1'}) is None
assert preload.Preloaded.shared(['run.federated_trainer']) is None  # not preloaded there
server = preload.Preloaded.shared([PROGRAM])
child = server.popen(PROGRAM, ['exit_with', '7'], stdout=subprocess.PIPE, text=True)
print('child said', child.stdout.readline().strip(), flush=True)
print('server', server.pid, 'exit', child.wait(30), 'cpu', child.cpu_s is not None, flush=True)
if sys.argv[1] == 'close':
  server.close()
  sys.exit(0)
waiting = server.popen(PROGRAM, ['wait_for_signal'], stdout=subprocess.PIPE,
                       death_signal=signal.SIGTERM)
waiting.stdout.readline()
print('waiting', waiting.pid, flush=True)
signal.pause()  # until the test kills this process
"""


def test_a_shareable_server_serves_other_processes_that_name_it(tmp_path):
  """`Preloaded.shared` in another process: the server it names, if it preloaded the module with
  the same import-time variables (None otherwise, and None without the variable); closing ends
  only that connection; when the sharing process dies, its children that asked for a death
  signal get it, and the server goes on serving."""
  assert preload.Preloaded.shared([PROGRAM], env=ENV) is None  # no server named
  with preload.Preloaded([PROGRAM], env=ENV, shareable=True) as server:
    sharing_env = {**ENV, preload.SERVER_VARIABLE: server.address}
    closing = subprocess.run(
      [sys.executable, '-c', _SHARING, 'close'],
      cwd=tmp_path,
      env=sharing_env,
      capture_output=True,
      text=True,
      timeout=60,
    )
    assert closing.returncode == 0, closing.stderr
    assert closing.stdout.splitlines() == [
      f"child said argv=['exit_with', '7'] cwd={tmp_path} var=x",
      f'server {server.pid} exit 7 cpu True',
    ]
    sharing = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, '-c', _SHARING, 'die'],
      cwd=tmp_path,
      env=sharing_env,
      stdout=subprocess.PIPE,
      text=True,
    )
    lines = [sharing.stdout.readline() for _ in range(3)]
    child_pid = int(lines[2].split()[1])
    sharing.kill()
    sharing.communicate(timeout=30)
    assert _gone(child_pid, 10), f'child {child_pid} outlived the process that started it'
    assert server._server.poll() is None  # pylint: disable=protected-access
    (_, real_out, _), (code, out, _) = _both(server, ['exit3'], tmp_path)
    assert code == 3 and out == real_out
  assert not os.path.exists(server.address)  # the owner's close removes its socket


def _gone(pid: int, timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while os.path.exists(f'/proc/{pid}') and time.monotonic() < deadline:
    time.sleep(0.05)
  return not os.path.exists(f'/proc/{pid}')


def _metrics_without_timing(root: pathlib.Path) -> list:
  [experiment] = [p for p in root.iterdir() if p.is_dir()]
  with open(experiment / 'metrics.csv', newline='') as f:
    return [{k: v for k, v in row.items() if k != 'seconds_per_round'} for row in csv.DictReader(f)]


def test_the_trainer_forked_writes_what_the_trainer_as_a_new_process_writes(tmp_path):
  """Also with AutoGraph's conversions shared (run.autograph_cache): the second forked run
  starts after the server converted what the first recorded, finds all of it in its cache (it
  records again only what the server could not find), and writes the same."""
  args = ['--task=synthetic', '--total_rounds=2', '--rounds_per_eval=1', '--engine=tff']
  preloaded = os.environ.get('TEST_PRELOAD', '1') != '0'  # TEST_PRELOAD=0: every run is real
  server = trainer_processes.server() if preloaded else None
  outputs, autograph = {}, {}
  for name, real in (('real', True), ('forked', False), ('forked_again', False)):
    root = tmp_path / name
    process = trainer_processes.popen(
      [*args, f'--root_output_dir={root}'],
      real=real,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    autograph[name] = server and dict(server.autograph)  # when `process` was forked
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    text = re.sub(r' \d+\.\d\ds/round eta \S+', '', out).replace(str(root), 'ROOT')
    outputs[name] = (text, trainer_processes.stderr_lines(err))
    outputs[name + '_metrics'] = _metrics_without_timing(root)
  assert outputs['forked'] == outputs['forked_again'] == outputs['real']
  assert outputs['forked'][1] == []
  assert len(outputs['forked_metrics']) == 2
  assert outputs['forked_metrics'] == outputs['forked_again_metrics'] == outputs['real_metrics']
  if not preloaded or os.environ.get('TEST_AUTOGRAPH_CACHE') == '0':
    return
  # The server's counts at the fork of a last child (--help, which converts nothing).
  trainer_processes.run(['--help'])
  after = server.autograph
  first, again = autograph['forked'], autograph['forked_again']
  assert again['converted'] >= 15, autograph  # TFF's Keras model, metrics and optimizers
  recorded_first = again['recorded'] - first['recorded']
  converted_from_first = again['converted'] - first['converted']
  recorded_again = after['recorded'] - again['recorded']
  assert recorded_again == recorded_first - converted_from_first, (autograph, after)
  assert after['converted'] == again['converted']
