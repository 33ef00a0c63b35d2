"""Exceptions shared by every layer.

This module imports nothing, so any layer may raise these without importing a layer
above it (the training job reports bad input without importing the command line).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: reported as one line on stderr, exit status 2."""
