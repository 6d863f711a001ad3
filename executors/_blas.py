"""Pin BLAS/OpenMP thread pools to one thread while chunk work runs.

A BLAS call's last bits can depend on its thread count, and N workers times M BLAS
threads would oversubscribe the machine. threadpoolctl's limits are *process-wide*
(OpenBLAS and MKL keep one count per process), so:

* serial / threads / chunks run inline: pinned while they run, with a reference count
  so that concurrent or nested maps do not restore the limits while another still runs;
* process / dask workers: pinned for the life of the worker (plus ``OMP_NUM_THREADS=1``
  and the like in their environment, read by the libraries as they load).

The libraries are scanned once and again only when modules were imported since.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

__all__ = ["blas_pinned", "pin_for_process", "PIN_ENV"]

#: environment for worker processes, read by the BLAS libraries at load time
PIN_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "BLIS_NUM_THREADS": "1",
}

_lock = threading.Lock()
_depth = 0
_restore: list[tuple[Any, int]] = []  # (library, its thread count before) while pinned
_libraries: list[Any] = []
_n_modules = -1
_for_good = False


def _scan() -> list[Any]:
    """threadpoolctl's controllers of the loaded libraries, rescanned after imports."""
    global _libraries, _n_modules
    if len(sys.modules) != _n_modules:
        from threadpoolctl import ThreadpoolController

        _libraries = ThreadpoolController().lib_controllers
        _n_modules = len(sys.modules)  # counted after the scan, which imports modules itself
    return _libraries


def pin_for_process() -> None:
    """Limit BLAS/OpenMP pools of this process to 1 thread, for good (cheap to call
    before every task: it acts again only when modules were imported since)."""
    global _for_good
    if _for_good and len(sys.modules) == _n_modules:
        return
    with _lock:
        for lib in _scan():
            lib.set_num_threads(1)
        _for_good = True


class _Pinned:
    """``with blas_pinned():`` — a class, not a generator: entered by every inline run."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _depth
        if _for_good:  # a worker process: pinned for its whole life
            return
        with _lock:
            if _depth == 0:
                for lib in _scan():
                    n = lib.num_threads
                    if n != 1:
                        lib.set_num_threads(1)
                        _restore.append((lib, n))
            _depth += 1

    def __exit__(self, *exc_info: object) -> None:
        global _depth
        if _for_good and _depth == 0:
            return
        with _lock:
            _depth -= 1
            if _depth == 0:
                for lib, n in _restore:
                    lib.set_num_threads(n)
                _restore.clear()


_PINNED = _Pinned()


def blas_pinned() -> _Pinned:
    """Context manager: BLAS/OpenMP pools limited to 1 thread inside (ref-counted).

    >>> with blas_pinned():
    ...     pass
    """
    return _PINNED
