"""Collect ``concurrent.futures`` results in item order (the thread pool's).

::

    parent thread                              pool threads
    ─────────────                              ────────────
    futures = [submit(task_i) ...]            (threads: only a window of them; the
    add_done_callback(queue.put) ──────────▶   next one once a result was handed on)
    loop n times:  f = queue.get()   ◀──────────┘ future finishes → queue.put(future)
        error?  cancel pending futures, raise (annotated with the item index)
        else    on_done(index[f]); results.put(index[f], f.result().pop())
                (InOrder hands results on in item order)

The parent blocks only in ``SimpleQueue.get``, which a real SIGINT interrupts,
so Ctrl-C reaches the caller, and the tasks not yet started are cancelled.  Fail
fast: the first error observed is raised at once; tasks already running are left to
finish in the background.  (Process workers are read by ``_lane`` instead.)
"""

from __future__ import annotations

import queue

from .base import annotate

__all__ = ["collect"]


def collect(futures, on_done, name, results, *, submit=None, n_items=None, abandon=None) -> None:
    """Wait for ``futures``; hand each result to ``results.put(i, value)`` (an
    ``InOrder``).

    Each task returns its result in a one-element list, popped here: a finished
    future would otherwise keep every result alive until the map returns, and a
    caller reducing results as they arrive would hold them all the same.

    With ``submit(i) -> future``, ``futures`` holds only the first of ``n_items``
    tasks, and task ``i`` is submitted once results ``0..i - len(futures)`` were handed
    on: no more than ``len(futures)`` results are ever computed ahead of the caller's
    reduction (a result that finished early waits in memory for the ones before it).

    Errors are annotated with the item index and re-raised unchanged. ``abandon`` (the
    map's flag, see ``_abandon``) is set before raising: tasks still to run stop early.
    """
    futures = list(futures)
    window = len(futures)
    n = len(futures) if submit is None else n_items
    index = {f: i for i, f in enumerate(futures)}
    done_q: queue.SimpleQueue = queue.SimpleQueue()
    failure = None
    try:
        for f in futures:
            f.add_done_callback(done_q.put)
        for _ in range(n):
            f = done_q.get()
            i = index[f]
            exc = RuntimeError(f"item {i} was cancelled") if f.cancelled() else f.exception()
            if exc is not None:
                failure = (exc, i)
                break
            if on_done is not None:
                on_done(i)
            results.put(i, f.result().pop())  # tasks return [result]: the future keeps an empty list
            while submit is not None and len(futures) < min(n, results.delivered + window):
                f = submit(len(futures))
                index[f] = len(futures)
                futures.append(f)
                f.add_done_callback(done_q.put)
    except BaseException:  # KeyboardInterrupt, or an error from on_done/on_result
        if abandon is not None:
            abandon.set()
        _cancel(futures)
        raise
    if failure is not None:
        exc, i = failure
        if abandon is not None:
            abandon.set()
        _cancel(futures)
        annotate(exc, i, n, name)
        raise exc


def _cancel(futures):
    for f in futures:
        if not f.done():
            f.cancel()
