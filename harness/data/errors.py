"""The one error type of data preparation: its message names the file or setting and the fix."""

from __future__ import annotations


class DataError(Exception):
    """Bad or missing data, or a setting that cannot work. The message says what to do."""
