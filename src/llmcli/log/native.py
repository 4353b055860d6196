"""Keeping the WAL when a connection closes: SQLite's NO_CKPT_ON_CLOSE setting, through Python
3.12's `Connection.setconfig`, or on CPython 3.8 to 3.11 by a ctypes call on the `sqlite3 *` handle
read out of the connection object (the one place llmcli reaches into the interpreter's structs;
checked against the file it names before use, and skipped wherever the layout is not the known one).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (SQLite 3.25+)


def keep_wal(db: sqlite3.Connection, path: Path) -> bool:
    """Ask SQLite not to checkpoint (and sync, and delete the WAL) when `db` closes as the last
    connection: Python 3.12's `setconfig`, else the same call made through ctypes where this
    interpreter's connection layout is known (CPython 3.8 to 3.11, the handle checked against the
    file it names before use). False where neither applies: closing then checkpoints, as before."""
    setconfig = getattr(db, "setconfig", None)
    if setconfig is not None:
        try:
            setconfig(getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", NO_CKPT_ON_CLOSE), True)
            return True
        except (sqlite3.Error, ValueError, TypeError):
            return False
    lib = _libsqlite()
    if lib is None:
        return False
    try:
        handle = ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value
        named = lib.sqlite3_db_filename(handle, b"main") if handle else None
        if not named or not os.path.samefile(os.fsdecode(named), path):
            return False
        return lib.sqlite3_db_config(handle, NO_CKPT_ON_CLOSE, 1, None) == 0
    except (OSError, ValueError, ctypes.ArgumentError):
        return False


@functools.cache
def _libsqlite() -> Any:
    """The SQLite library this interpreter's `sqlite3` module runs on, for `keep_wal` (None where
    the connection object's layout is not the known one: `sqlite3 *db` right after the header)."""
    import sys

    if sys.implementation.name != "cpython" or not (3, 8) <= sys.version_info[:2] <= (3, 11):
        return None
    if sqlite3.sqlite_version_info < (3, 25, 0) or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)  # its symbols and those of the SQLite it links
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            return None
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_db_config.restype = ctypes.c_int
        lib.sqlite3_db_config.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    except (OSError, AttributeError, ImportError):
        return None
    return lib
