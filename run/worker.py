"""One TFF worker serving remote execution, for `federated_trainer --workers=host:port,...`.

  tff-adaptive worker --port=8000                     # reachable from this machine only
  tff-adaptive worker --port=8000 --host=10.0.0.5     # from the network, on that address
  bazel run //run:worker -- --port=8000               # (.venv/bin/tff-adaptive in a checkout)

It serves TFF's own remote execution (TFF's C++ worker_binary) on exactly --host:--port (see
tff_adaptive/runtime/worker_server.py for how it is confined to that address), prints where it listens,
and runs until Ctrl-C or SIGTERM, which stop it and its worker_binary (exit code 0). The channel
is plain gRPC without authentication: keep it on a trusted network or behind an SSH tunnel.

Kept running across many runs, a worker's resident memory grows by some 30 MiB per run over its
first runs: glibc keeps the memory of freed tensors for reuse. `MALLOC_MMAP_THRESHOLD_=131072
tff-adaptive worker --port=8000` returns it at once and holds the memory flat, at a cost in
speed (docs/engines_and_workers.md, "Memory of long-lived workers").

Exit codes: 0 stopped by a signal; 1 the worker_binary died by itself; 2 bad flag or address.
"""

import sys

from absl import app
from absl import flags

from tff_adaptive.runtime import worker_server  # no TensorFlow: must stay single-threaded

flags.DEFINE_string(
  'host',
  '127.0.0.1',
  'Address to listen on: 127.0.0.1 (this machine only), an address of this machine, or 0.0.0.0 '
  '/ :: for every interface.',
)
flags.DEFINE_integer('port', None, 'Port to listen on (0: a free one, printed).')
flags.DEFINE_integer(
  'max_concurrent_computation_calls',
  None,
  'Limit on parallel client computations in the worker (default: none).',
)
FLAGS = flags.FLAGS


def _fail(message: str) -> None:
  print(f'worker: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments {argv[1:]}; flags look like --name=value')
  if FLAGS.port is None or not 0 <= FLAGS.port <= 65535:
    _fail(f'--port must be given, in [0, 65535], got {FLAGS.port}')
  calls = FLAGS.max_concurrent_computation_calls
  if calls is not None and calls < 1:
    _fail(f'--max_concurrent_computation_calls must be >= 1, got {calls}')
  try:
    code = worker_server.serve(FLAGS.host, FLAGS.port, max_concurrent_computation_calls=calls)
  except worker_server.WorkerServerError as e:
    _fail(str(e))
  sys.exit(code)


def _parse_flags(argv):
  if any(arg in ('--help', '-help', '-h', '--helpshort', '-?') for arg in argv[1:]):
    lines = [__doc__.strip(), '', 'Flags:']
    for name in ('host', 'port', 'max_concurrent_computation_calls'):
      lines += [f'  --{name} (default: {FLAGS[name].default})', f'      {FLAGS[name].help}']
    print('\n'.join(lines))
    sys.exit(0)
  try:
    return FLAGS(argv)
  except flags.Error as e:
    _fail(f'{e}; see --help')


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
