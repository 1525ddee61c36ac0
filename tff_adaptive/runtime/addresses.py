"""Worker addresses as --workers gives them: 'host:port,host:port' -> ('host:port', ...).

No TensorFlow: the trainer checks --workers before it imports TensorFlow and TFF. `remote`
(which connects to the workers) and the package re-export `parse_worker_addresses`.
"""


def parse_worker_addresses(text: str) -> tuple[str, ...]:
  """'host:port,host:port' -> ('host:port', ...); ValueError naming the bad entry."""
  addresses = []
  for entry in text.split(','):
    entry = entry.strip()
    host, sep, port = entry.rpartition(':')
    host = host[1:-1] if host.startswith('[') and host.endswith(']') else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
      raise ValueError(
        f'--workers: {entry!r} is not host:port (a host name or IP address, a port 1-65535), '
        f'e.g. --workers=10.0.0.5:8000,10.0.0.6:8000'
      )
    addresses.append(entry)
  if len(set(addresses)) != len(addresses):
    raise ValueError(f'--workers: {text!r} names a worker twice')
  return tuple(addresses)
