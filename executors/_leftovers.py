"""Folders that a process killed by SIGTERM or SIGKILL never got to remove.

Each is named ``<prefix><pid>-<random>`` by the process that made it; the next process
to make one of the same kind removes those of this user whose process is gone (a pid in
use again by another process keeps its folder: nothing is removed that might be in use).
"""

from __future__ import annotations

import os
import shutil
import stat


def remove_stale_folders(root: str, prefix: str) -> None:
    """Remove the folders ``root/<prefix><pid>-*`` of this user whose process has ended.

    >>> import tempfile
    >>> remove_stale_folders(tempfile.gettempdir(), "executors-doctest-")  # none: nothing to do
    """
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].partition("-")[0]
        if not pid.isdigit() or _running(int(pid)):
            continue
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process, say: not ours to judge
        return True
    return True
