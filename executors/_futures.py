"""Collect ``concurrent.futures`` results in item order (what the lane to process workers is measured against: ``bench_schedule.Lane``).

::

    parent thread                              pool workers
    ─────────────                              ────────────
    futures = [submit(task_i) ...]            (when the caller reduces results as they
    add_done_callback(queue.put) ──────────▶   arrive, only n_workers of them; the next
                                               once a result was handed on)
    loop n times:  i, f = queue.get() ◀─────────┘ future finishes → queue.put((i, future))
        error?  set the map's abandon flag, cancel pending futures, raise
                (annotated with the item index)
        else    on_done(i); results.put(i, convert(i, f.result().pop()))
                (InOrder hands results on in item order)

The parent blocks only in ``SimpleQueue.get``, which a real SIGINT interrupts, so Ctrl-C
reaches the caller; tasks already running see the abandon flag (``_abandon``) and stop early.
"""

from __future__ import annotations

import queue
import time
from typing import Any, Callable

from .base import InOrder, annotate

__all__ = ["collect"]


def collect(submit: Callable[[int], Any], n: int, n_workers: int, on_done: Callable[[int], object] | None,
            name: str, results: InOrder, *, abandon: Any, convert: Callable[[int, Any], Any] | None = None,
            translate: Callable[[BaseException, int, list[int]], BaseException | None] | None = None,
            on_abort: Callable[[BaseException], None] | None = None, timeout_note: str = "") -> None:
    """Submit tasks ``0..n-1`` with ``submit(i) -> future`` and hand each result to
    ``results.put(i, value)``, after ``convert(i, raw)`` when given (unpickling).

    When the caller reduces results as they arrive, at most ``n_workers`` tasks run ahead:
    a worker running ahead holds a finished result.  Tasks return their result in a
    one-element list, popped here, so a finished future does not keep it.
    ``translate(exc, i, unfinished)`` may replace an infrastructure error (a dead worker);
    ``on_abort(exc)`` is called for Ctrl-C or an error in the caller's hooks.
    Past ``results.deadline``, :class:`MapTimeoutError` (ending with ``timeout_note``).
    """
    window = n_workers if results.on_result is not None else None
    futures: list[Any] = []
    done_q: queue.SimpleQueue = queue.SimpleQueue()
    finished = [False] * n
    failure = None

    def submit_next():
        i = len(futures)
        futures.append(submit(i))
        futures[i].add_done_callback(lambda f: done_q.put((i, f)))

    def stop():
        abandon.set()
        for f in futures:
            f.cancel()  # (a no-op on a running or finished future)

    try:
        while len(futures) < (n if window is None else min(n, window)):
            submit_next()
        for _ in range(n):
            if results.deadline is None:
                i, f = done_q.get()
            else:
                try:
                    i, f = done_q.get(timeout=max(0.0, results.deadline - time.monotonic()))
                except queue.Empty:
                    unfinished = [j for j in range(n) if j >= len(futures) or not futures[j].done()]
                    running = [j for j in unfinished if j < len(futures) and futures[j].running()]
                    raise results.timed_out(name, running, set(unfinished) - set(running), timeout_note) from None
            exc = RuntimeError(f"item {i} was cancelled") if f.cancelled() else f.exception()
            if exc is not None:
                failure = (exc, i)
                break
            finished[i] = True
            if on_done is not None:
                on_done(i)
            # (no local name for the result: it would stay alive while the next is awaited)
            results.put(i, f.result().pop() if convert is None else convert(i, f.result().pop()))
            while window is not None and len(futures) < min(n, results.delivered + window):
                submit_next()
    except BaseException as exc:  # KeyboardInterrupt, or an error from on_done/on_result
        stop()
        if on_abort is not None:
            on_abort(exc)
        raise
    if failure is not None:
        exc, i = failure
        stop()
        new = translate(exc, i, [j for j in range(n) if not finished[j] and j != i]) if translate else None
        if new is not None:
            raise new from exc
        annotate(exc, i, n, name)
        raise exc
