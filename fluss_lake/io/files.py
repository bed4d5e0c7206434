"""Small local-file primitives shared by the store and the KV segment files."""

from __future__ import annotations

import contextlib
import os

__all__ = ["unlink_quietly", "fsync_file", "fsync_dir"]


def unlink_quietly(path: str) -> None:
    """Remove a file if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_file(path: str) -> None:
    """Flush a file's data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str) -> None:
    """Make a new directory entry durable (best effort where folders cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
