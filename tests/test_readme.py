"""The README's library example runs as written, prints no noise and leaves no worker behind."""

import math
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
# TF 2.14's import-time lines (see tests/test_trainer.py); the example imports TF itself.
_TF_IMPORT_NOISE = re.compile(
  r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] Unable to register cu'
)


def _example() -> str:
  text = (REPO / 'README.md').read_text()
  section = text[text.index('Use the parts in your own TFF pipeline') :]
  return section.split('```python\n', 1)[1].split('```', 1)[0]


def test_readme_library_example(tmp_path):
  script = tmp_path / 'example.py'
  script.write_text(_example())
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH=str(REPO))
  # stdout is a pipe: a worker_binary outliving Python would hold it open and make
  # communicate() time out (as `python example.py | cat` would hang).
  proc = subprocess.run(
    [sys.executable, str(script)],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  noise = [l for l in proc.stderr.splitlines() if l.strip() and not _TF_IMPORT_NOISE.match(l)]
  assert noise == [], proc.stderr  # no "Exception ignored ... Popen" at exit
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
  assert abs(losses['tff engine'] - losses['in-process engine']) < 1e-5 * losses['tff engine']
