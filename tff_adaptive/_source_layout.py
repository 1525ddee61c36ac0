"""`tff_adaptive.tasks`, `tff_adaptive.datasets` and `tff_adaptive.run` in a source checkout.

Infrastructure (no paper). The repository keeps tasks, data loaders and the trainer's programs in
the top-level folders `tasks/`, `datasets/` and `run/`; an installed package has them inside it
(`pyproject.toml` maps `tff_adaptive.tasks` -> `tasks/`, `tff_adaptive.datasets` -> `datasets/`,
`tff_adaptive.run` -> `run/`). `install()` gives a checkout (and Bazel's runfiles tree, which
mirrors it) that same mapping, for exactly those names: it adds a finder that answers only for
them, and only where they are not inside the package already. (`python -m run.federated_trainer`
in a checkout runs the same file; its own imports name `tff_adaptive.run`.)
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

__all__ = ['install']

_FOLDERS = {
  'tff_adaptive.tasks': 'tasks',
  'tff_adaptive.datasets': 'datasets',
  'tff_adaptive.run': 'run',
}


class _CheckoutFolders(importlib.abc.MetaPathFinder):
  """Finds `tff_adaptive.tasks` / `.datasets` in the checkout's top-level folders."""

  def __init__(self, folders: dict[str, str]):
    self.folders = folders

  def find_spec(self, fullname, path=None, target=None):
    location = self.folders.get(fullname)
    if location is None:
      return None
    return importlib.util.spec_from_file_location(
      fullname, os.path.join(location, '__init__.py'), submodule_search_locations=[location]
    )


def install(package_dir: str) -> None:
  """Maps each subpackage to `package_dir`'s sibling folder where that is the layout."""
  root = os.path.dirname(package_dir)
  folders = {
    name: os.path.join(root, folder)
    for name, folder in _FOLDERS.items()
    if not os.path.isdir(os.path.join(package_dir, folder))
    and os.path.isfile(os.path.join(root, folder, '__init__.py'))
  }
  if folders and not any(isinstance(f, _CheckoutFolders) for f in sys.meta_path):
    # First: an editable install of another checkout must not answer for this one.
    sys.meta_path.insert(0, _CheckoutFolders(folders))
