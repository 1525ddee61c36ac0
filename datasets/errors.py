"""Errors raised by the dataset layer.

Both derive from the built-in exception a caller would naturally catch (a missing file is a
``FileNotFoundError``, a malformed file is a ``ValueError``), and both carry a one-line message that
names the offending path and, for missing data, how to obtain it.
"""

__all__ = ['DataNotFoundError', 'DataFormatError']


class DataNotFoundError(FileNotFoundError):
  """A required data file does not exist; the message names the expected path and its source."""


class DataFormatError(ValueError):
  """A data file exists but is corrupt, truncated or has unexpected contents; names the file."""
