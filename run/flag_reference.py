"""Writes docs/flags.md, the trainer's flag reference, from the flag definitions in run/flags.py.

  python -m run.flag_reference            # rewrites docs/flags.md
  python -m run.flag_reference --check    # exit 1 (naming the file) if docs/flags.md is stale

One table per section of `run.flags.SECTIONS`: each flag with its default and its help text.
tests/test_docs.py fails when the committed file differs from what this writes.
"""

import os
import sys
import textwrap

from absl import flags

from tff_adaptive.run import flags as trainer_flags

# The checkout's docs/flags.md (under `bazel run`, the workspace's, not the runfiles copy).
_ROOT = os.environ.get('BUILD_WORKSPACE_DIRECTORY') or os.path.dirname(
  os.path.dirname(os.path.abspath(__file__))
)
PATH = os.path.join(_ROOT, 'docs', 'flags.md')

HEADER = """# Trainer flags

`.venv/bin/tff-adaptive train --flag=value ...` in a checkout (`tff-adaptive train` where the
package is installed; the same program as `.venv/bin/python -m run.federated_trainer` and
`bazel run //run:federated_trainer -- ...`). Generated from the flag definitions in
`run/flags.py` by `.venv/bin/python -m run.flag_reference`; do not edit by hand. A default of "task's" means the task's published default
(`tff_adaptive/tasks/`, [data_and_tasks.md](data_and_tasks.md)); a flag the chosen algorithm or
optimizer does not read is warned about and not recorded. Flag files: `--flagfile=FILE` (one
`--flag=value` per line, `#` comments), e.g. the presets under `reproductions/`.
"""


def default_text(flag: flags.Flag) -> str:
  """A flag's default as the help and docs/flags.md show it ("task's": the task's published one)."""
  if flag.default is None:
    return "task's" if "task's" in flag.help else '(none)'
  if isinstance(flag.default, list):
    return ','.join(flag.default) if flag.default else '(empty)'
  return str(flag.default)


def help_text(usage: str, width: int = 100) -> str:
  """`usage`, then the trainer's own flags by SECTIONS, each with its default and help."""
  lines = [
    usage.rstrip(),
    '',
    "Flags (--flagfile=FILE reads more, one per line; --helpfull: absl's too):",
  ]
  for title, names in trainer_flags.SECTIONS:
    lines += ['', f'{title}:']
    for name in names:
      flag = flags.FLAGS[name]
      lines.append(f'  --{name} (default: {default_text(flag)})')
      lines += textwrap.wrap(
        ' '.join(flag.help.split()), width, initial_indent=' ' * 6, subsequent_indent=' ' * 6
      )
  return '\n'.join(lines) + '\n'


def _cell(text: str) -> str:
  return ' '.join(text.split()).replace('|', '\\|')


def markdown() -> str:
  """The flag reference: a table per section, flags in section order."""
  lines = [HEADER]
  for title, names in trainer_flags.SECTIONS:
    lines += [f'## {title}', '', '| flag | default | meaning |', '|---|---|---|']
    for name in names:
      flag = flags.FLAGS[name]
      lines.append(f'| `--{name}` | `{_cell(default_text(flag))}` | {_cell(flag.help)} |')
    lines.append('')
  return '\n'.join(lines)


def main(argv: list[str]) -> int:
  text = markdown()
  if argv[1:] == ['--check']:
    with open(PATH) as f:
      if f.read() == text:
        return 0
    print(f'{PATH} is stale: run .venv/bin/python -m run.flag_reference', file=sys.stderr)
    return 1
  if argv[1:]:
    print('usage: .venv/bin/python -m run.flag_reference [--check]', file=sys.stderr)
    return 2
  with open(PATH + '.tmp', 'w') as f:
    f.write(text)
  os.replace(PATH + '.tmp', PATH)
  print(f'wrote {PATH}')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
