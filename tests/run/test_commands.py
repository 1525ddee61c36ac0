"""`tff-adaptive`, the console command, and the command forms printed hints use: each runs as
pasted from where it was printed (`tff_adaptive.commands`, `tff_adaptive.run.cli`)."""

import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from tff_adaptive import commands
from tff_adaptive.run import cli

REPO = pathlib.Path(__file__).resolve().parents[2]


def _environment(tmp_path, monkeypatch, *, script: bool, on_path: bool):
  venv = tmp_path / 'checkout' / '.venv' / 'bin'
  venv.mkdir(parents=True)
  monkeypatch.setattr(sys, 'executable', str(venv / 'python'))
  if script:
    (venv / 'tff-adaptive').write_text('#!/bin/sh\n')
    (venv / 'tff-adaptive').chmod(0o755)
  monkeypatch.setenv('PATH', f'{venv}:/usr/bin:/bin' if on_path else '/usr/bin:/bin')
  return tmp_path / 'checkout', venv


def test_from_the_checkout_root_the_hint_names_the_venvs_command(tmp_path, monkeypatch):
  checkout, _ = _environment(tmp_path, monkeypatch, script=True, on_path=False)
  monkeypatch.chdir(checkout)
  assert commands.command('samples') == '.venv/bin/tff-adaptive samples'


def test_an_activated_environment_gets_the_bare_command(tmp_path, monkeypatch):
  checkout, _ = _environment(tmp_path, monkeypatch, script=True, on_path=True)
  monkeypatch.chdir(checkout)
  assert commands.command('fetch') == 'tff-adaptive fetch'


def test_elsewhere_the_hint_is_absolute_and_without_a_script_it_is_the_interpreter(
  tmp_path, monkeypatch
):
  _, venv = _environment(tmp_path, monkeypatch, script=True, on_path=False)
  (tmp_path / 'elsewhere').mkdir()
  monkeypatch.chdir(tmp_path / 'elsewhere')  # the script is not below: its absolute path
  assert commands.command('worker') == f'{venv}/tff-adaptive worker'
  (venv / 'tff-adaptive').unlink()
  assert commands.command('worker') == f'{venv}/python -m tff_adaptive.run.cli worker'


def _cli(*args, cwd=REPO):
  return subprocess.run(
    [sys.executable, '-m', 'tff_adaptive.run.cli', *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '2'},
  )


def test_help_lists_every_subcommand_and_a_wrong_one_is_one_line():
  shown = _cli('--help')
  assert shown.returncode == 0
  for name in [*cli.SUBCOMMANDS, cli.REPRODUCE]:
    assert f'\n  tff-adaptive {name} ' in shown.stdout
  wrong = _cli('trian')
  assert wrong.returncode == 2 and wrong.stdout == ''
  assert wrong.stderr.strip() == (
    "tff-adaptive: error: unknown command 'trian'; valid: train, summarize, worker, samples, "
    'fetch, reproduce (tff-adaptive --help)'
  )


def test_reproduce_runs_a_papers_driver_and_names_the_valid_ones():
  """`reproduce PAPER STUDY` is the paper's `python -m reproductions.<PAPER> STUDY`: the same
  study names, and the study's own flags after it."""
  papers = _cli('reproduce', 'nope')
  assert papers.returncode == 2 and len(papers.stderr.strip().splitlines()) == 1
  assert "unknown PAPER 'nope'; valid: alshedivat2021_fedpa, dp_fedopt, " in papers.stderr
  studies = _cli('reproduce', 'alshedivat2021_fedpa', 'nope')
  assert studies.returncode == 2 and len(studies.stderr.strip().splitlines()) == 1
  assert "unknown STUDY 'nope'; valid: fmnist, least_squares, regimes" in studies.stderr
  listed = _cli('reproduce', 'kim2024_delta_sgd', '--help')
  assert listed.returncode == 0 and '\n  table1 ' in listed.stdout and 'step_sizes' in listed.stdout
  shown = _cli('reproduce', 'kim2024_delta_sgd', 'table1', '--help')
  assert shown.returncode == 0 and '--runs_dir' in shown.stdout


def test_the_missing_data_hints_run_as_pasted(tmp_path):
  """The trainer started as the README starts it, from the checkout's root, names the fetch and
  samples commands the way they run there; the samples command, pasted, writes the files and
  prints a train command that runs as pasted too."""
  empty = tmp_path / 'data'
  empty.mkdir()
  shown = _cli('train', '--task=so_lr', f'--data_dir={empty}', f'--root_output_dir={tmp_path}')
  assert shown.returncode == 2, shown.stderr
  (line,) = shown.stderr.strip().splitlines()
  prefix = commands.command('')  # what this interpreter's hints say from the checkout's root
  assert f'{prefix}fetch --data_dir={empty} --dataset=stackoverflow' in line
  assert f'{prefix}samples --data_dir=DIR, then --data_dir=DIR' in line
  samples = line.split('small random sample files: ')[1].split(', then')[0]
  pasted = subprocess.run(
    shlex.split(samples.replace('DIR', str(empty))),
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert pasted.returncode == 0, pasted.stderr
  tried = pasted.stdout.strip().splitlines()[-1]
  assert tried.startswith(f'try: {prefix}train --task=so_lr --data_dir={empty} --total_rounds=3')


@pytest.mark.parametrize('name', ['summarize', 'worker', 'samples', 'fetch'])
def test_each_subcommand_is_its_program(name):
  shown = _cli(name, '--help')
  assert shown.returncode == 0, shown.stderr
  assert shown.stdout.strip()
