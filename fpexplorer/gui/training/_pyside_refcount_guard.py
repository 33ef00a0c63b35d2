"""Guard against PySide6 6.12.0's reference-count bug on None and True (Python < 3.12).

PySide6-Essentials 6.12.0 returns None from every void C++ call, and True from every
`Signal.emit()`, without taking a reference; Python 3.12+ does not care (None, True and
False are immortal there, PEP 683), but on 3.11 each call drops the count by one and a
live plot reaches zero within seconds: "Fatal Python error: none_dealloc" (or
bool_dealloc). Measured with sys.getrefcount around 100 calls: `QLabel.setText` -100 on
None, `Signal.emit()` -100 on True with 6.12.0; 0 for both with 6.11.3.

The guard gives None, True and False a reference count no session can use up (2**40
calls). They are never deallocated in a healthy interpreter, so an over-count is
harmless; it is only applied where the bug exists. The real fix is a PySide6 without the
bug (pin PySide6-Essentials!=6.12.0).
"""

from __future__ import annotations

import ctypes
import sys

_BALLAST = 1 << 40
_applied = False


def pyside_drops_none_references() -> bool:
    """True when this PySide6 is the one that under-counts None on this Python."""
    if sys.version_info >= (3, 12):
        return False
    try:
        from PySide6 import __version__ as version
    except ImportError:
        return False
    return version.startswith("6.12.")


def protect_none() -> bool:
    """Apply the guard once if needed; returns whether it is in place."""
    global _applied
    if _applied or not pyside_drops_none_references():
        return _applied
    # ob_refcnt is the first field of every PyObject (a Py_ssize_t) on CPython < 3.12.
    for singleton in (None, True, False):
        refcount = ctypes.c_ssize_t.from_address(id(singleton))
        refcount.value += _BALLAST
    _applied = True
    return True
