"""Whether a task drew from NumPy's global random state on a worker process.

``np.random.normal(...)`` and the other module-level functions draw from one
``RandomState`` per process. Each worker process has its own, seeded differently, and
which tasks a worker runs, in which order, depends on timing: what a function mapped on
workers draws from it differs from run to run and from backend to backend. A worker
compares that state before and after each task (two copies of its MT19937 state)::

    key and pos unchanged           nothing drawn
    key unchanged, pos moved        drew from the state it found          -> warn
    key = the key found, advanced   drew more (the generator refilled
          by whole refills          its key): still the state it found    -> warn
    any other key                   seeded it (np.random.seed(i)): draws that
                                    depend on the element only; no warning

The last case is no alarm: ``np.random.seed(i)`` then draws is deterministic on every
worker process. Checked only where a task has the process to itself (a loky worker, a
Dask worker with one thread): with threads, every thread of the program shares the
state, and another thread's draws would be blamed on the task. Not seen: a task whose only
draw is the second normal of a pair (``np.random.normal`` keeps it outside this state).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

__all__ = ["GlobalRandomWarning", "Watch", "drew", "warn_once"]

_KEY_BYTES = 624 * 4  # MT19937's key: 624 uint32, followed by int pos (numpy/random/src/mt19937)
_STATE_BYTES = _KEY_BYTES + 4
#: refills of the key followed from the state found before calling it seeded: a task
#: drawing more than MAX_REFILLS * 624 32-bit words without seeding is not noticed
MAX_REFILLS = 2048


class GlobalRandomWarning(RuntimeWarning):
    """A function mapped on worker processes drew from NumPy's global random state
    (``np.random.normal`` and the like), so its values differ between runs and backends.

    A cheap check of that one state on process workers, not a proof that ``f`` is pure:
    not seen are threads (every thread shares the state), draws of more than
    ``MAX_REFILLS`` refills of it without seeding (``np.random.rand(3_000_000)``), the
    standard library's ``random``, ``np.random.default_rng()`` with no seed, and a state
    restored after drawing (``np.random.set_state``).

    >>> import warnings, executors
    >>> warnings.filterwarnings("error", category=executors.GlobalRandomWarning)  # make it an error
    >>> warnings.resetwarnings()
    """


def _global_state() -> tuple[Any, int] | None:
    np = sys.modules.get("numpy")
    if np is None:
        return None
    try:
        bits = np.random.mtrand._rand._bit_generator  # what np.random.normal etc. draw from
        if type(bits).__name__ != "MT19937":
            return None
        return bits, bits.ctypes.state_address  # documented: the address of its C state
    except Exception:  # a NumPy without them: no check
        return None


class Watch:
    """The global state when made; :meth:`drew` says whether it was drawn from since.

    >>> import numpy as np
    >>> w = Watch(); _ = np.random.default_rng(1).normal(); w.drew()
    False
    >>> w = Watch(); _ = np.random.rand(); w.drew()
    True
    >>> w = Watch(); np.random.seed(3); _ = np.random.rand(); w.drew()
    False
    """

    __slots__ = ("bits", "address", "before")

    def __init__(self) -> None:
        self.bits: Any
        state = _global_state()
        self.bits, self.address = state if state is not None else (None, 0)
        self.before = ctypes.string_at(self.address, _STATE_BYTES) if state is not None else b""

    def drew(self) -> bool:
        return drew(self, None)


_verdicts: dict[Any, bool] = {}  # a function's, once a refill had to be followed: not again


def drew(watch: Watch | None, fn_key: Any) -> bool:
    """``watch.drew()`` for a task of the function ``fn_key`` names (a content hash): once
    following refills was needed to answer for it (the slow case), the answer stands for
    its later tasks in this process (``fn_key`` None: no such memory).

    >>> drew(None, "f")
    False
    """
    if watch is None or watch.bits is None:
        return False
    known = None if fn_key is None else _verdicts.get(fn_key)
    if known is not None:
        return known
    after = ctypes.string_at(watch.address, _STATE_BYTES)
    if after == watch.before:
        return False
    if after[:_KEY_BYTES] == watch.before[:_KEY_BYTES]:
        return True
    verdict = _refilled_from(watch.before[:_KEY_BYTES], after[:_KEY_BYTES])
    if fn_key is not None:
        if len(_verdicts) > 256:
            _verdicts.clear()
        _verdicts[fn_key] = verdict
    return verdict


def _refilled_from(key: bytes, later: bytes) -> bool:
    """Whether MT19937 turns ``key`` into ``later`` by up to ``MAX_REFILLS`` refills."""
    import numpy as np

    scratch = np.random.MT19937()
    scratch.state = {"bit_generator": "MT19937",
                     "state": {"key": np.frombuffer(key, dtype=np.uint32), "pos": 624}}
    address = scratch.ctypes.state_address
    for _ in range(MAX_REFILLS):
        scratch.random_raw(624)  # one refill, then the 624 words it made
        if ctypes.string_at(address, _KEY_BYTES) == later:
            return True
    return False


_warned: set[tuple[str, int]] = set()


def warn_once(backend: str) -> None:
    """Warn, once per line of the user's code that started the map, that its function
    drew from the global random state on the ``backend`` executor's workers."""
    from ._tracebacks import user_frame, warn

    frame = user_frame()
    site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("", 0)
    if site in _warned:
        return
    _warned.add(site)
    warn(f"the function mapped on the {backend!r} executor drew from NumPy's global random state "
         "(np.random.normal, np.random.rand, ...): each worker process has its own, seeded "
         "differently, so the values differ between runs and backends. Seed a generator from "
         "each element instead, e.g. np.random.default_rng([2026, i]): see \"f must be pure\" "
         "in the README.", GlobalRandomWarning)
