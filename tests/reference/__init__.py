"""Independent NumPy references of the papers' equations, used only by the tests.

Nothing here imports `tff_adaptive`: each reference is written from the paper's equations
so that a test comparing the library against it checks the library, not a copy of it.
"""

from tests.reference import fedopt_numpy

__all__ = ['fedopt_numpy']
