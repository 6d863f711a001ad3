"""Pin BLAS/OpenMP thread pools to one thread while chunk work runs.

threadpoolctl limits are *process-wide*, so:

* serial / threads: the parent pins once around the whole map, with a
  reference count so concurrent or nested maps do not restore the original
  limits while another map is still running;
* process / dask workers: pinned once for the life of the worker process
  (plus ``OMP_NUM_THREADS=1``-style variables set before the worker starts).

Results must not depend on the BLAS thread count, and N workers times M BLAS
threads would oversubscribe the machine.  The ``ThreadpoolController`` is
cached (building one scans the loaded shared libraries, ~2 ms) and rebuilt only
when new modules were imported since the last scan.  Pinning and unpinning an
OpenBLAS of 2 threads costs ~4 µs.
"""

from __future__ import annotations

import ctypes
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
_limiter = None
_controller = None
_n_modules = -1
_pinned_for_good = False
_pinned_controller = None


def _get_controller():
    """The cached ThreadpoolController, rescanned if modules were imported since."""
    global _controller, _n_modules
    n = len(sys.modules)
    if _controller is None or n != _n_modules:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl is a dependency
            return None
        _controller = ThreadpoolController()
        # counted after the scan: the first one imports threadpoolctl's own modules, and
        # counting before it made the next map scan again (1 ms, timed by the schedule
        # as the first inline chunks' work: tiny work went to the pool on its next call)
        _n_modules = len(sys.modules)
    return _controller


def pin_for_process() -> None:
    """Limit BLAS/OpenMP pools of this process to 1 thread, for good.

    Cheap to call before every task: it only acts again when modules were
    imported since the last call (a new library may have brought its own pool).
    """
    global _pinned_for_good, _pinned_controller
    if _pinned_for_good and len(sys.modules) == _n_modules:
        return
    with _lock:
        ctl = _get_controller()
        if ctl is not None and ctl is not _pinned_controller:
            ctl.limit(limits=1)
            _pinned_controller = ctl
        _pinned_for_good = True


def _pin(ctl):
    """Set every pool of ``ctl`` to 1 thread; ``[(set_threads, threads before)]`` of those
    changed. Straight to the libraries' own get/set calls: ``ThreadpoolController.limit``
    builds an info dict per library first, ~4x the cost, paid by every map of tiny work."""
    changed = []
    for get, set_threads in _thread_calls(ctl):
        n = get()
        if n != 1:
            set_threads(1)
            changed.append((set_threads, n))
    return changed


_calls_of: tuple[Any, list[Any]] = (None, [])  # (controller, its [(get, set)] pairs)


def _thread_calls(ctl):
    """``[(get_threads, set_threads)]`` for each pool of ``ctl``, made once per controller.

    An OpenBLAS with its own pthreads pool (NumPy's and SciPy's wheels) is called through
    its C functions directly: threadpoolctl's methods look the symbol up again and check
    which Python thread controls the pool on every call, 4.8 µs for a read and a set and
    unset against 0.7 µs (our own lock and reference count already keep threads from
    fighting over the limit). Any other pool, or a threadpoolctl without the symbol
    lookup this relies on, goes through threadpoolctl's public methods."""
    global _calls_of
    held, calls = _calls_of
    if held is not ctl:
        calls = [_direct_calls(lib) or (lambda lib=lib: lib.num_threads, lib.set_num_threads)
                 for lib in ctl.lib_controllers]
        _calls_of = (ctl, calls)
    return calls


def _direct_calls(lib):
    """``(get, set)`` C functions of an OpenBLAS pthreads pool, or None. threadpoolctl has no
    public way to reach them: ``_get_symbol`` (private) adds the prefix and suffix a wheel's
    OpenBLAS carries (``scipy_openblas64_``); tests/test_executors.py
    (test_threadpoolctl_private_symbol_lookup) fails if a release renames it."""
    lookup = getattr(lib, "_get_symbol", None)
    if lib.internal_api != "openblas" or getattr(lib, "threading_layer", None) != "pthreads" \
            or lookup is None:
        return None
    get, set_threads = lookup("openblas_get_num_threads"), lookup("openblas_set_num_threads")
    if get is None or set_threads is None:
        return None
    return _holding_the_gil(get, ctypes.c_int), _holding_the_gil(set_threads, None, ctypes.c_int)


def _holding_the_gil(fn, restype, *argtypes):
    """``fn`` (a ctypes function) called without releasing the GIL, as PyDLL functions are.
    A CDLL call lets go of the GIL for its <1 µs, and any thread waiting for it takes it and
    keeps it until its own next pause: with a Dask LocalCluster in the process, whose event
    loop (heartbeats, psutil polling) is always waiting, each pin then cost ~16 µs, a third
    of the tiny psum gradient's overhead. These two calls touch no Python object and wait for
    nothing that needs the GIL."""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    return ctypes.PYFUNCTYPE(restype, *argtypes)(address)


class _Pinned:
    """``with blas_pinned():`` — a class, not a generator: entered on every inline call
    of tiny psum work, where contextlib's machinery cost more than the pinning."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _depth, _limiter
        if _pinned_for_good:  # a worker process: pinned for its whole life
            return
        with _lock:
            if _depth == 0:
                ctl = _get_controller()
                _limiter = _pin(ctl) if ctl is not None else None
            _depth += 1

    def __exit__(self, *exc_info: object) -> None:
        global _depth, _limiter
        if _pinned_for_good and _depth == 0:  # (pinned for good inside a section: undo it)
            return
        with _lock:
            _depth -= 1
            if _depth == 0 and _limiter is not None:
                for set_threads, n in _limiter:
                    set_threads(n)
                _limiter = None


_PINNED = _Pinned()


def blas_pinned() -> _Pinned:
    """Context manager: BLAS/OpenMP pools limited to 1 thread inside (ref-counted).

    >>> with blas_pinned():
    ...     pass
    """
    return _PINNED
