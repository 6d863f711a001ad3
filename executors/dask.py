"""The Dask backend: the same chunks on a ``distributed`` cluster.

Imported only when used (``distributed`` is an optional extra).

::

    parent (Client)                       scheduler            workers (processes)
    ───────────────                       ─────────            ───────────────────
    fn, shared ─ cloudpickle ─ hash ─┐
       small: inline in the tasks    │
       large: scatter(broadcast) ────┼──────────────────────▶ every worker holds
              once per content hash  │                        (key, bytes); unpickled
              (LRU of futures)       │                        once per worker (LRU)
    items ─ cloudpickle ─ client.map ┴──▶ tasks "executors-<token>-<i>" ─▶ run_task
    as_completed ◀──────── status ────────┘                   result → bytes + buffers
    on_done(i) ; first error: cancel the rest, raise (annotated with item i)
    gather ◀──────────────────────────────── result bytes, array buffers as frames
    results in item order (arrays built on the frames received: no copy)

Worker loss: a task whose worker dies is rerun elsewhere by the scheduler (the
tasks are pure), so the map returns the right answer; after
``distributed.scheduler.allowed-failures`` deaths the scheduler gives up
(``KilledWorker``), raised here as :class:`executors.WorkerError`.  Scattered
data is broadcast to every worker, but Dask does not recompute scattered data:
once every worker that held it has died, the tasks that need it are cancelled.
The map then runs the items it lost again, in a new round, after sending that
data again (a handle's from the object it keeps); a result lost with a worker
before it was fetched is rerun the same way.  The deaths of the workers running
each item are counted across rounds (the scheduler's "remove-worker" events):
an item that killed more than ``allowed-failures`` of them is raised as
:class:`executors.WorkerError` naming it, as ``KilledWorker`` is.

Interrupts, on the cluster the executor starts (a user's cluster is left as it is): its
workers ignore SIGINT (the terminal's Ctrl-C goes to the whole process group; they
stop with the executor). The tasks of a map that raised or was interrupted run on (a
thread cannot be stopped): the next map first kills the workers still running one a
second after (their nannies start new ones), so no new task waits behind a task stuck
for good; and it starts the cluster again if none of its nannies runs any more, rather
than wait on no workers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Iterable

from . import _abandon, _context, _remote
from ._leftovers import remove_stale_folders

if TYPE_CHECKING:
    import distributed
from .base import (Executor, WorkerError, annotate, check_positive_int, closed_mid_map, usable_cpu_count,
                   where_raised)
from .local import WORKER_MALLOC_ENV

__all__ = ["DaskExecutor", "Scattered"]

#: what distributed raises past a deadline: asyncio's TimeoutError, which is the built-in
#: one only from Python 3.11 on
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)
WAIT_FOR_WORKERS = 120.0  # seconds the workers restarted after a loss are awaited before data is sent

_INSTALL_HINT = (
    'DaskExecutor needs the optional dependency "distributed": pip install "adrules[dask]"'
)


class Scattered:
    """Handle to an object sent once to every worker by :meth:`DaskExecutor.scatter`.

    Pass it in ``shared=`` to reuse the copy already on the workers.  The data
    stays on the cluster while the handle (or the executor's cache) holds it.
    The handle keeps the object itself (not a copy): Dask cannot recover scattered
    data whose every copy went with a worker, so it is sent again from the object,
    once its content hash shows it unchanged (changed meanwhile, the map raises).
    Only a ``DaskExecutor`` understands it.

    See the example of ``DaskExecutor``.
    """

    __slots__ = ("future", "key", "nbytes", "source")

    def __init__(self, future: distributed.Future, key: str, nbytes: int, source: Any = None) -> None:
        self.future = future
        self.key = key
        self.nbytes = nbytes
        self.source = source

    def __repr__(self) -> str:
        return f"Scattered(key={self.key!r}, nbytes={self.nbytes})"


class _Shared:
    """A shared argument (or ``fn``) of one map that goes by scatter: its future, and
    what is needed to send it again should Dask lose every copy."""

    __slots__ = ("obj", "what", "key", "future", "handle", "cached")

    def __init__(self, obj, what, key, future, handle=None, cached=True):
        self.obj, self.what, self.key, self.future = obj, what, key, future
        self.handle, self.cached = handle, cached


def _processing_when_workers_died(prefix, dask_scheduler=None):
    """Run on the scheduler: the keys starting with ``prefix`` that workers were processing
    when they died. Filtered there: the events hold objects that do not serialize (the
    "replicate" events of broadcast scatters list ``WorkerState`` objects)."""
    return [key for _, msg in dask_scheduler.get_events("all")
            if isinstance(msg, dict) and msg.get("action") == "remove-worker" and not msg.get("expected")
            for key in msg.get("processing-tasks", ()) if isinstance(key, str) and key.startswith(prefix)]


def _running_keys(prefixes, dask_worker=None):
    """Run on a worker: the keys starting with one of ``prefixes`` that it is still
    executing (a cancelled task runs on: a thread cannot be stopped)."""
    state = dask_worker.state
    return [ts.key for ts in (state.executing | state.long_running)
            if isinstance(ts.key, str) and ts.key.startswith(prefixes)]


def _processing_keys(prefix, dask_scheduler=None):
    """Run on the scheduler: ``{key: worker address}`` of the tasks whose keys start with
    ``prefix`` that workers are running."""
    return {key: ts.processing_on.address for key, ts in dask_scheduler.tasks.items()
            if isinstance(key, str) and key.startswith(prefix) and ts.state == "processing"
            and ts.processing_on is not None}


def _n_running_workers(dask_scheduler=None):
    """Run on the scheduler: how many workers are up and taking work."""
    return len(dask_scheduler.running)


def _local_cluster(kwargs: dict[str, Any], http_routes: bool, scratch: str) -> distributed.LocalCluster:
    """A LocalCluster whose worker processes keep freed memory, as loky's do
    (``WORKER_MALLOC_ENV``). Dask's own default, ``MALLOC_TRIM_THRESHOLD_=65536``, hands
    it back to the kernel, so that every chunk's new arrays fault their pages in again,
    which a loky worker does not pay. These variables must be set before a worker process starts: Dask reads them from
    ``distributed.nanny.pre-spawn-environ`` (the user's own environment variables win).
    Without ``http_routes``, the HTTP servers Dask starts anyway serve nothing (their
    routes would answer anyone, TLS or not). Scratch files (spilled data, which workers
    unpickle) go under ``scratch``, a folder of this user's alone: Dask's default,
    ``/tmp/dask-scratch-space``, is shared by every user of the machine, and whoever
    made it first can swap the folders of other users' workers for their own. The
    nannies keep the configuration they were made with for the workers they start,
    restarts included."""
    import dask
    import distributed

    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ"), **WORKER_MALLOC_ENV}
    config: dict[str, Any] = {
        "distributed.nanny.pre-spawn-environ": environ,
        # worker-saturation 1.0 (Dask's default is 1.1): a worker holds only the task it
        # runs, none queued behind it, so a worker's death is blamed on that task alone
        # (Dask's retry count, and the count a map keeps across its rounds)
        "distributed.scheduler.worker-saturation": 1.0,
        "temporary-directory": scratch,
        # the workers ignore the terminal's Ctrl-C, sent to the whole process group
        "distributed.worker.preload": [*dask.config.get("distributed.worker.preload", []),
                                       "executors._dask_worker"],
    }
    if not http_routes:
        config["distributed.scheduler.http.routes"] = []
        config["distributed.worker.http.routes"] = []
    # A nanny copies its pre-spawn environment into this process's os.environ, where every
    # later nanny reads it back over its own configuration: a cluster started earlier in
    # the process (the user's own, with Dask's defaults) would hand our workers its trim
    # threshold. Ours are set while the nannies read them, then put back.
    saved = {k: os.environ.get(k) for k in WORKER_MALLOC_ENV}
    os.environ.update(WORKER_MALLOC_ENV)
    try:
        with dask.config.set(config):
            return distributed.LocalCluster(**kwargs)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _refuse_unguarded_script(kwargs: dict[str, Any]) -> None:
    """Raise, before any worker starts, when the cluster is started by the top-level code
    of the script being run, outside ``if __name__ == "__main__":``. Each worker process
    is spawned: it imports that script, which starts a cluster again, and the user got
    hundreds of lines of tracebacks ending in "Nanny failed to start". Nothing is said
    where the script cannot be read (a notebook, ``python -c``, a thread's own stack) or
    the workers are not spawned (``processes=False``, the "fork" method)."""
    import ast
    from types import FrameType

    import dask

    method = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not kwargs.get("processes", True) or method == "fork" or not path or not str(path).endswith(".py"):
        return
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:
        return
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read())
    except (OSError, SyntaxError, ValueError):
        return
    guards = [node for node in ast.walk(tree) if isinstance(node, ast.If)
              and {"__name__", "__main__"} <= {getattr(n, "id", getattr(n, "value", None)) for n in ast.walk(node.test)}]
    if not any(g.body[0].lineno <= frame.f_lineno <= (g.body[-1].end_lineno or g.lineno) for g in guards):
        raise RuntimeError(
            f'DaskExecutor: {os.path.basename(path)}, line {frame.f_lineno}, starts a Dask LocalCluster '
            f'outside `if __name__ == "__main__":`. Each Dask worker process imports the script and would '
            f'start a cluster of its own. Put the script\'s work under `if __name__ == "__main__":` '
            f'(definitions may stay above it).')


class _ExitBySigint:
    """Makes the interpreter end by SIGINT, as Python does on an uncaught Ctrl-C, once
    ``interrupted`` (Ctrl-C cut a close short at exit). An atexit callback cannot set the
    exit status, and ending the process there would skip the other callbacks; this
    module global is collected only as the interpreter tears its modules down, after
    every callback ran and the standard streams were flushed."""

    interrupted = False

    def __del__(self) -> None:
        if self.interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)


_EXIT_BY_SIGINT = _ExitBySigint()


def _check_tls_available() -> None:
    try:
        import cryptography  # noqa: F401  # Security.temporary() makes the credentials with it
    except ImportError as exc:
        raise ImportError(
            'DaskExecutor secures the LocalCluster it starts with TLS, whose credentials need '
            'the "cryptography" package: pip install cryptography (or pass security=False to '
            "start it unsecured, open to every user of this machine)") from exc


class DaskExecutor(Executor):
    """Run chunks on a Dask ``distributed`` cluster.

    * ``client=None``: start a ``LocalCluster(n_workers, threads_per_worker=1,
      processes=True, **cluster_kwargs)``, secured (see below), whose scheduler and
      workers listen on 127.0.0.1 only, with no dashboard unless ``dashboard=True``
      (then served on 127.0.0.1, at ``client.dashboard_link``), and whose workers
      keep freed memory as ``ProcessExecutor``'s do (Dask's nannies also set these
      ``MALLOC_*`` variables in this process's ``os.environ``, as they do their
      own); each worker holds only the task it runs
      (``distributed.scheduler.worker-saturation`` 1.0, so a worker's death is
      blamed on that task); shut down by :meth:`close`.
    * ``client`` a ``distributed.Client`` or a scheduler address string: use
      that cluster; a user's client is left open on close (a client built here
      from an address is closed, the cluster is left running).

    Security of the cluster it starts: 127.0.0.1 keeps other machines out, not
    the other users of this one. So by default (``security=None`` or ``True``)
    every connection (client, scheduler, nannies, workers) is TLS with a key and
    self-signed certificate made for that cluster (``Security.temporary()``,
    needs the ``cryptography`` package), held in memory and handed to the worker
    processes as they start; a process without them (another user's, or any other
    program) cannot connect, let alone run code on the workers. The HTTP servers
    Dask always starts (scheduler and workers) serve no route unless
    ``dashboard=True``: their ports listen on 127.0.0.1 and answer 404. Not
    protected: processes of the same user id (they can read this process's
    memory, hence the key) and root; with ``dashboard=True``, the dashboard and
    Dask's HTTP routes (``/health``, ``/info``, ``/json``, ``/metrics``), plain
    HTTP to any local user. ``security=False`` starts the cluster unsecured (plain
    TCP, as Dask does): any local user can then run code as you on it. A
    ``distributed.security.Security`` is used as given.  With ``client``,
    ``security`` (a ``Security``, or None) is what the client connects with.
    See ``docs/dask_security.md``.

    Shared arguments pickled to at least
    ``scatter_min_bytes`` are scattered to every worker once and reused across
    calls, keyed by a content hash (a mutated array gets a new hash, so it is
    re-sent, never stale); the ``cache_size`` most recent ones are kept.
    ``reuse_shared=False`` sends them afresh with every call instead (to measure
    what the reuse saves).
    ``retries`` is passed to ``Client.map`` (reruns tasks that *raise*;
    tasks whose worker dies are rerun by the scheduler anyway).
    ``start=False`` (with ``client=None``) starts the cluster only at the first map,
    :meth:`start` or use of :attr:`client`, as the process pool does: psum then starts it
    only for work that gains on it (how a DaskExecutor chosen by name is made).

    >>> import executors
    >>> with executors.DaskExecutor(n_workers=1) as ex:
    ...     h = ex.scatter(list(range(5)))            # sent to every worker once
    ...     print(ex.map(lambda x, k: x * k, range(5), shared=(3,)),
    ...           ex.map(lambda i, xs: xs[i], [1, 3], shared=(h,)),
    ...           ex.n_workers, ex.client.scheduler_info()["type"])
    [0, 3, 6, 9, 12] [1, 3] 1 Scheduler
    """

    name = "dask"
    prior_overhead = (2e-2, 3e-3, 1e-8)  # a LocalCluster's round trips, on the high side
    prior_start_cost = 5.0  # a LocalCluster: a scheduler, nannies and their workers (TLS: keys too)
    shares_memory = False

    def __init__(
        self,
        client: distributed.Client | str | None = None,
        n_workers: int | None = None,
        security: distributed.security.Security | bool | None = None,
        *,
        scatter_min_bytes: int = 16 * 1024,
        cache_size: int = 8,
        retries: int | None = None,
        reuse_shared: bool = True,
        dashboard: bool = False,
        start: bool = True,
        **cluster_kwargs: Any,
    ) -> None:
        try:
            import distributed
        except ImportError as exc:
            raise ImportError(_INSTALL_HINT) from exc
        n = check_positive_int(n_workers)
        self.scatter_min_bytes = int(scatter_min_bytes)
        self.reuse_shared = bool(reuse_shared)
        self.cache_size = check_positive_int(cache_size, "cache_size")
        self.retries = retries
        self._cluster: distributed.LocalCluster | None = None
        self._own_client = False
        self._cache: collections.OrderedDict = collections.OrderedDict()  # key -> Future
        self._cache_lock = threading.Lock()
        self._n_scatters = 0
        self._n_workers_seen: tuple[int, float] | None = None  # (count, time.monotonic() when asked)
        self._closed = False
        self._lock = threading.Lock()  # one restart after close(), however many threads map
        self._closes = 0  # close() calls: a map tells a close from another thread by it
        self._abandoned: list[str] = []  # tokens of maps that raised, whose tasks may run on
        self._abandoned_at = 0.0
        self._client: Any = None
        self._starting = False  # a start() in the background is under way
        self._start_error: BaseException | None = None  # what that start raised: the next map raises it
        if client is None:
            kwargs = dict(
                n_workers=n if n is not None else usable_cpu_count(),
                threads_per_worker=1,
                processes=True,
                # Everything listens on the loopback interface only: a dashboard address
                # of ":0" binds every interface (whatever dashboard_link shows), and None
                # still opens the scheduler's HTTP server.
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                worker_dashboard_address="127.0.0.1:0",
                scheduler_kwargs={"dashboard": bool(dashboard)},
            )
            if security is None or security is True:
                _check_tls_available()
                security = True  # LocalCluster makes new credentials at each start
            elif security is not False and not isinstance(security, distributed.security.Security):
                raise TypeError(
                    "DaskExecutor(security=...) must be None or True (TLS with credentials made "
                    "for the cluster), False (unsecured), or a distributed.security.Security; "
                    f"got {type(security).__name__}")
            if security is not False:  # False: Dask's own default (unsecured unless configured)
                kwargs["security"] = security
            kwargs.update(cluster_kwargs)
        else:
            if cluster_kwargs or n is not None:
                raise TypeError(
                    "n_workers and cluster keyword arguments only apply when DaskExecutor "
                    "starts its own LocalCluster (client=None)"
                )
            if not isinstance(client, (str, distributed.Client)):
                raise TypeError(
                    "client must be None, a distributed.Client or a scheduler address, "
                    f"got {type(client).__name__}"
                )
            if isinstance(security, bool):
                raise TypeError(
                    "DaskExecutor(client, security=...) is what the client connects with: "
                    "the cluster's distributed.security.Security, or None; temporary "
                    f"credentials (security={security!r}) only apply to the LocalCluster "
                    "DaskExecutor starts itself (client=None)")
            kwargs = {}
            if not start:
                raise TypeError("DaskExecutor(start=False) only applies to the LocalCluster it starts "
                                "itself (client=None): a client given is connected at once")
        self._dashboard = bool(dashboard)
        self._how = (client, security, kwargs)  # what _connect needs again after close()
        if start:
            self._connect()
        else:  # as after close(): a map or start() starts the cluster
            self._closed = True
            self._n_workers_seen = (n if n is not None else usable_cpu_count(), 0.0)

    def _connect(self) -> None:
        """Start the cluster and client this executor owns, or connect to the user's."""
        import distributed

        client, security, kwargs = self._how
        self._cluster = None
        self._own_client = False
        if client is None:
            _refuse_unguarded_script(kwargs)
            remove_stale_folders(tempfile.gettempdir(), "executors-dask-")  # of killed processes
            scratch = tempfile.mkdtemp(prefix=f"executors-dask-{os.getpid()}-")  # this user's only (0700)
            self._scratch = weakref.finalize(self, shutil.rmtree, scratch, True)
            self._cluster = _local_cluster(kwargs, http_routes=self._dashboard, scratch=scratch)
            try:
                # the client takes the cluster's own security (also when security=True
                # made temporary credentials)
                self._client = distributed.Client(self._cluster, set_as_default=False)
            except BaseException:
                self._cluster.close()
                raise
            self._own_client = True
        elif isinstance(client, str):
            self._client = distributed.Client(client, security=security, set_as_default=False)
            self._own_client = True
        else:
            self._client = client
        self._closed = False

    @property
    def client(self) -> distributed.Client:
        """The ``distributed.Client`` in use (see the class example); asked of an executor
        made with ``start=False`` and not started yet, it starts the cluster first."""
        if self._client is None:
            self._reopen()
        return self._client

    @property
    def n_workers(self) -> int:  # type: ignore[override]  # read-only: asked of the scheduler
        """Number of workers known to the scheduler (at least 1; see the class example),
        asked at most once a second: each question is a round trip to the scheduler,
        and psum's schedule reads it several times a call."""
        now = time.monotonic()
        cached = self._n_workers_seen
        if cached is not None and (now - cached[1] < 1.0 or self._closed):
            return cached[0]  # closed: the workers a map would start again
        try:
            info = self._client.scheduler_info()
            workers = info.get("workers", {})
            if "n_workers" in info and info["n_workers"] > len(workers):
                n = max(1, int(info["n_workers"]))
            else:
                n = max(1, len(workers))
        except Exception:  # pragma: no cover - closed client
            return 1
        self._n_workers_seen = (n, now)
        return n

    # ----------------------------------------------------------- shared data

    def _scatter_blob(self, key, data):
        """The future of ``(key, data)`` on every worker: the cached one while Dask still
        holds it, else scattered now. ``data`` may be a function giving the bytes (only
        called when they must be sent)."""
        with self._cache_lock:
            fut = self._cache.get(key)
            if fut is not None and fut.status == "finished":
                self._cache.move_to_end(key)
                return fut
        fut = self._broadcast(key, data() if callable(data) else data)
        with self._cache_lock:
            self._n_scatters += 1
            self._cache[key] = fut
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)  # dask frees it once unused
        return fut

    def _restore_workers(self) -> None:
        """Start again the workers this executor's cluster dropped: a ``SpecCluster``
        closes a worker's nanny for good when no worker of its name is back
        ``distributed.deploy.lost-worker-timeout`` (15 s) after one died, which a busy
        machine's restarts, or a task killing each restart, outlast; maps then wait for
        workers that never come."""
        cluster = self._cluster
        if cluster is not None and len(cluster.workers) < len(cluster.worker_spec):
            cluster.scale(len(cluster.worker_spec))

    def _broadcast(self, key, data):
        """The future of ``(key, data)`` sent to every worker, once the workers are up:
        after a loss, a nanny takes seconds to restart a worker (a minute on a busy
        machine), and Dask's scatter finds none ("No valid workers found" after its
        connect timeout) or sees one join mid-send. Waits at most ``WAIT_FOR_WORKERS``; a
        worker that dies mid-send is waited for again, twice at most: its connection closed
        (an OSError), or, gone just after the data reached it, the scheduler's KeyError
        (its scatter then records the copy on, or copies it on among, workers it has
        removed meanwhile)."""
        for attempt in range(3):
            self._wait_for_workers()
            try:
                return self._client.scatter([(key, data)], broadcast=True, hash=False)[0]
            except (OSError, *_TIMEOUTS, ValueError, KeyError) as e:  # CommClosedError is an OSError
                if attempt == 2:
                    raise WorkerError(f"the dask cluster lost its workers while data was sent to them, "
                                      f"three times: are its workers dying (see their logs)? "
                                      f"({type(e).__name__}: {e})") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_for_workers(self):
        # polled on the scheduler: Cluster.wait_for_workers replaces the cluster's view of
        # the workers, and its watcher then fails on the removal of one it no longer lists
        deadline = time.monotonic() + WAIT_FOR_WORKERS
        while True:
            self._restore_workers()  # (the cluster may drop one while this waits)
            want = max(1, len(self._cluster.worker_spec)) if self._cluster is not None else 1
            running = self._client.run_on_scheduler(_n_running_workers)
            if running >= want:
                return
            if time.monotonic() > deadline:
                if not running:
                    raise WorkerError(
                        f"the dask cluster has had no worker for {WAIT_FOR_WORKERS:.0f} s after losing "
                        "them: are its workers dying as they start (see their logs)?")
                return  # fewer than all: the data goes to those there
            time.sleep(0.1)

    def scatter(self, obj: Any) -> Scattered:
        """Send ``obj`` to every worker now; return a handle to pass in ``shared=``.

        Content-addressed: scattering equal content twice sends it once (see the
        class example).
        """
        data = _remote.dumps(obj, "the object to scatter", self.name)
        if self._closed:  # not started yet (start=False), or closed: as a map does
            self._reopen()
        key = _remote.content_key(data)
        return Scattered(self._scatter_blob(key, data), key, len(data), obj)

    def _sendable(self, obj, what):
        """How ``obj`` goes with a map's tasks: a blob inline in each task, or a
        ``_Shared`` scattered to every worker."""
        if isinstance(obj, Scattered):
            return _Shared(obj.source, what, obj.key, obj.future, handle=obj)
        data = _remote.dumps(obj, what, self.name)
        if len(data) < self.scatter_min_bytes:
            return _remote.make_blob(data)  # inline in every task
        key = _remote.content_key(data)
        if not self.reuse_shared:  # sent afresh with every call (for comparison)
            return _Shared(obj, what, key, self._broadcast(key, data), cached=False)
        return _Shared(obj, what, key, self._scatter_blob(key, data))

    def _in_tasks(self, sendable):
        """What a task gets for a sendable: the blob, or the future of its scattered copy,
        sent again if Dask lost every copy (scattered data is not recomputed)."""
        if not isinstance(sendable, _Shared):
            return sendable
        if sendable.future.status == "finished":
            return sendable.future
        if sendable.cached:
            sendable.future = self._scatter_blob(sendable.key, lambda: self._bytes_again(sendable))
        else:
            sendable.future = self._broadcast(sendable.key, self._bytes_again(sendable))
        if sendable.handle is not None:
            sendable.handle.future = sendable.future
        return sendable.future

    def _bytes_again(self, sendable):
        data = _remote.dumps(sendable.obj, sendable.what, self.name)
        if _remote.content_key(data) != sendable.key:
            raise WorkerError(
                f"the dask cluster lost {sendable.what} (every worker that held it died), and "
                "the object it was sent from has changed since, so it cannot be sent again "
                "as it was: scatter the object again (DaskExecutor.scatter) and call again")
        return data

    def _clear_cache(self):
        with self._cache_lock:
            self._cache.clear()

    # ------------------------------------------------------------------- map

    def _map(self, fn, items, shared, on_done, results):
        import dask

        error, self._start_error = self._start_error, None
        if error is not None:
            raise error  # a start() in the background failed: say so, instead of waiting
        if self._closed:  # as the pools do, a map after close() (or start=False) starts afresh
            self._reopen()
        if self._cluster is not None:
            self._heal()
        n = len(items)
        sendables = [self._sendable(fn, "fn")]
        sendables += [self._sendable(a, f"shared arg {j}") for j, a in enumerate(shared)]
        items_data = [_remote.dumps(x, f"item {i}", self.name) for i, x in enumerate(items)]
        flag = _abandon.FileFlag()  # seen by workers on this machine (a LocalCluster's)
        allowed = int(dask.config.get("distributed.scheduler.allowed-failures"))
        deaths: collections.Counter = collections.Counter()  # item -> workers that died running it
        pending, rounds, futures, tokens = list(range(n)), 0, [], []
        closes = self._closes
        try:
            while pending:
                self._restore_workers()
                refs = [self._in_tasks(s) for s in sendables]
                token = uuid.uuid4().hex
                tokens.append(token)
                futures = self._submit(pending, token, items_data, refs, flag)
                lost = self._gather(futures, pending, n, on_done, results, token)
                if not lost:
                    return
                # Lost with a worker: a scattered input of theirs (then every task that
                # needs it is cancelled), or a result not yet fetched. Run them again, with
                # what was lost sent again, unless one keeps killing its workers.
                rounds += 1
                self._count_deaths(token, deaths)
                killer = min((i for i in deaths if deaths[i] > allowed), default=None)
                if killer is not None or rounds > allowed + 1:
                    self._clear_cache()
                    raise self._lost(killer, deaths, lost, n, rounds)
                pending = lost
        except BaseException as exc:
            flag.set()  # tasks already on the workers, or running, stop early
            if self._closes != closes:  # close() from another thread: the client is gone
                if isinstance(exc, Exception) and where_raised(exc) is None:  # not raised by fn
                    raise closed_mid_map(self.name) from exc
                raise
            self._client.cancel(futures)
            if self._cluster is not None:  # those that run on get their workers restarted
                self._abandoned += tokens
                self._abandoned_at = time.monotonic()
            raise

    def _heal(self):
        """Before a map on the cluster this executor owns: restart the workers still
        running a task of a map that raised (a task stuck for good, its call interrupted,
        would hold its worker, and the new tasks sent there would wait behind it), after
        giving them a second since to stop of themselves; and start the cluster again if
        none of its nannies runs any more (the map would wait on no workers for ever)."""
        from distributed.core import Status

        if self._abandoned:
            prefixes = tuple(f"executors-{t}-" for t in self._abandoned)
            self._abandoned = []
            while True:
                try:
                    running = [a for a, keys in self._client.run(_running_keys, prefixes).items() if keys]
                except Exception:  # a worker gone meanwhile: its task with it
                    running = []
                if not running or time.monotonic() > self._abandoned_at + 1.0:
                    break
                time.sleep(0.05)
            if running:
                self._kill_workers(running)
        cluster = self._cluster
        if not any(w.status == Status.running for w in list(cluster.workers.values())):
            with self._lock:  # one thread starts it again; the others then find it running
                if self._cluster is cluster and not self._closed:
                    self._close_locked()
                    self._connect()

    def _submit(self, indices, token, items_data, refs, flag):
        import dask

        # The graph carries each item once, as it must reach a worker: Dask's warning
        # about graphs over 10 MB ("consider loading the data with Dask directly") would
        # ask every user with big models for what this map already does
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1 PiB"}):
            return self._client.map(
                _remote.run_task,
                indices,
                [items_data[i] for i in indices],
                key=[f"executors-{token}-{i}" for i in indices],
                # keys are unique already: pure=True would have Dask hash every item's bytes
                # to name the map, in the parent, for nothing
                pure=False,
                retries=self.retries,
                fn_blob=refs[0],
                shared_blobs=refs[1:],
                origin_pid=os.getpid(),
                chunk_size=_context.SETTINGS.get().chunk_size,
                backend=self.name,
                flag=flag,
            )

    def _gather(self, futures, indices, n, on_done, results, token):
        """Hand the round's results on as they come; raise the first error; return the
        items Dask lost (cancelled as their input went with a worker, or whose result went
        with one before it was fetched)."""
        from distributed.scheduler import KilledWorker

        index = dict(zip((f.key for f in futures), indices))
        lost = []
        for f in self._completed(futures, index, results, token):
            i = index[f.key]
            status = f.status
            if status == "finished":
                fetched = self._fetch(f)
                if fetched is None:
                    lost.append(i)
                    continue
                drew, data = fetched
                results.drew_global_random |= drew
                if on_done is not None:
                    on_done(i)
                results.put(i, _remote.load_result(data, i, self.name))
                f.release()  # the result lives on in `results` only: let the cluster drop it
            elif status == "error":
                exc, tb = f.exception(), f.traceback()
                self._client.cancel(futures)
                if isinstance(exc, _remote.BaseExceptionRaised):
                    exc = exc.original()
                if isinstance(exc, KilledWorker):
                    self._clear_cache()
                    err = WorkerError(
                        f"dask gave up on item {i} of {n}: the workers running it died "
                        "repeatedly (distributed.scheduler.allowed-failures). Does it end the "
                        f"process (os._exit, a crash in native code, memory)? Cause: {exc}")
                    raise annotate(err, i, n, self.name) from exc
                annotate(exc, i, n, self.name)
                raise exc.with_traceback(tb)
            else:  # cancelled, lost
                lost.append(i)
        return sorted(lost)

    def _completed(self, futures, index, results, token):
        """``as_completed(futures)``; past the map's deadline, :class:`MapTimeoutError`
        naming the items the workers were running and those not started."""
        import distributed

        left = None if results.deadline is None else max(1e-3, results.deadline - time.monotonic())
        completed = distributed.as_completed(futures, loop=self._client.loop, timeout=left)
        unfinished = set(index.values())
        while unfinished:  # (as_completed raises past its deadline even once all came)
            try:
                f = next(completed)
            except StopIteration:
                return
            except _TIMEOUTS:  # the deadline
                try:
                    on = self._client.run_on_scheduler(_processing_keys, f"executors-{token}-")
                except Exception:  # pragma: no cover - a scheduler that cannot tell
                    on = {}
                running = {int(k.rsplit("-", 1)[1]) for k in on} & unfinished
                if self._cluster is not None and on:  # no new task may wait behind these
                    self._kill_workers(set(on.values()), wait=False)
                note = ("" if not running else
                        "Dask cannot stop a running task: the workers running these were restarted."
                        if self._cluster is not None else
                        "Dask cannot stop a running task: on a cluster this executor did not start, "
                        "these run on, holding their workers, until fn returns.")
                raise results.timed_out(self.name, running, unfinished - running, note) from None
            unfinished.discard(index[f.key])
            yield f

    def _fetch(self, f):
        """``[drew, bytes of a finished task's result]``, or None if they went with its worker
        before they came. Not ``f.result()``: fetching from a worker that has just died
        retries the connection for ``distributed.comm.timeouts.connect`` (30 s) while the
        scheduler already knows it is gone, and a result is lost once its future no
        longer reads "finished"."""
        import asyncio
        import concurrent.futures

        from distributed.utils import CancelledError

        fetching = asyncio.run_coroutine_threadsafe(
            self._client.gather([f], asynchronous=True), self._client.loop.asyncio_loop)
        while True:
            try:
                return fetching.result(timeout=0.05)[0]
            except concurrent.futures.TimeoutError:
                if f.status != "finished":
                    fetching.cancel()
                    f.cancel()  # run again in the next round, under a new key
                    return None
            except CancelledError:
                return None

    def _count_deaths(self, token, deaths):
        """Count, per item of the round ``token``, the workers that died while running it
        (the scheduler's "remove-worker" events name the tasks they were processing)."""
        try:
            keys = self._client.run_on_scheduler(_processing_when_workers_died, f"executors-{token}-")
        except Exception:  # pragma: no cover - a scheduler that cannot tell
            return
        for key in keys:
            deaths[int(key.rsplit("-", 1)[1])] += 1

    def _lost(self, killer, deaths, lost, n, rounds):
        if killer is not None:
            err = WorkerError(
                f"item {killer} of {n}: the dask workers running it died {deaths[killer]} times "
                "(more than distributed.scheduler.allowed-failures). Does it end the process "
                "(os._exit, a crash in native code, memory)?")
            return annotate(err, killer, n, self.name)
        return WorkerError(
            f"the dask cluster lost {len(lost)} of the map's {n} items with its workers, "
            f"{rounds} times in a row: are its workers dying (see their logs)?")

    def close(self) -> None:
        """Release cached data; close the client/cluster this executor started.

        A client passed in by the user is left open. Closing twice is harmless; a later
        map starts a new cluster (or connects again), as the thread and process pools
        start new workers. Interrupted (Ctrl-C), it stops the cluster's worker
        processes at once, then raises KeyboardInterrupt; at interpreter exit it says so
        in one line instead, lets the other exit hooks run, and the interpreter then
        exits as on an uncaught Ctrl-C (by SIGINT: status 130).
        """
        with self._lock:  # held throughout: a map waiting to start afresh waits for this
            self._close_locked()

    def _close_locked(self) -> None:
        if self._closed:
            return
        self._n_workers_seen = (self.n_workers, 0.0)  # what a map would start again
        self._closed = True
        self._closes += 1
        self._clear_cache()
        try:
            if self._own_client:
                try:
                    self._client.close()
                except Exception:  # pragma: no cover
                    pass
            if self._cluster is not None:
                self._cluster.close()
                self._scratch()  # removed, with what the workers left in it
        except KeyboardInterrupt:
            self._stop_now()
            if threading.main_thread().is_alive():
                raise
            # At exit, Python would print the interrupted close's traceback through
            # Dask, run Dask's own exit hook (which would wait to close the cluster
            # again) and exit with status 0: an atexit callback cannot set the status.
            print("executors: Ctrl-C while the Dask cluster shut down at exit: its worker "
                  "processes were stopped", file=sys.stderr)
            logging.getLogger("distributed").setLevel(logging.CRITICAL)  # its notes on them
            _EXIT_BY_SIGINT.interrupted = True

    def _kill_workers(self, addresses, wait=True):
        """Kill the worker processes at ``addresses`` (their nannies start new ones) and
        (``wait``) wait until the scheduler has dropped them and the new ones have joined (a
        broadcast scatter during a restart fails in Dask: "Can not use replicate to delete
        data"; ``_broadcast`` waits for them too). Not Dask's ``restart_workers``: it first
        waits 4 s for a worker to close of itself, which one running a stuck task never does."""
        n_before = len(self._client.scheduler_info()["workers"])
        killed = []
        for nanny in list(self._cluster.workers.values()):
            pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
            if getattr(nanny, "worker_address", None) in addresses and pid:
                try:
                    os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
                    killed.append(nanny.worker_address)
                except OSError:
                    pass
        deadline = time.monotonic() + 10
        while wait and killed and time.monotonic() < deadline:
            workers = self._client.scheduler_info()["workers"]
            if not set(killed) & set(workers) and len(workers) >= n_before:
                return
            time.sleep(0.05)

    def _stop_now(self) -> None:
        """Kill the worker processes of the cluster this executor started (not its
        nannies' restarts of them), and mark it closed, as Ctrl-C cut its close short."""
        from distributed.core import Status

        cluster = self._cluster
        if cluster is None:
            return
        for nanny in list(getattr(cluster, "workers", {}).values()):
            nanny.status = Status.closing  # a nanny restarts a worker that dies otherwise
            process = getattr(getattr(nanny, "process", None), "process", None)
            pid = getattr(process, "pid", None)
            if pid:
                try:
                    os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
                except OSError:
                    pass
        cluster.status = Status.closed  # Dask's exit hook would wait to close it again
        # (the scratch folder goes with the executor: its finalizer runs after those of
        # the scheduler's and workers' folders in it, made after it)

    def ready(self) -> bool:
        """False after :meth:`close` (or made with ``start=False``), until a map or
        :meth:`start` has connected; true too once a start in the background failed (the
        next map raises its error)."""
        return not self._closed or self._start_error is not None

    def started(self) -> bool:
        """True once the cluster is up or starting (after :meth:`start` or a map), or
        connected to.

        >>> import executors
        >>> executors.DaskExecutor(n_workers=1, start=False).started()
        False
        """
        return not self._closed or self._starting or self._start_error is not None

    def start(self, preload: Iterable[str] = ()) -> None:
        """Start the cluster (or connect again after :meth:`close`) in the background,
        for the next map, and return at once; nothing to do once started."""
        with self._lock:
            if not self._closed or self._starting:
                return
            if self._how[0] is None:  # checked here: the background thread cannot see the script's line
                _refuse_unguarded_script(self._how[2])
            self._starting, self._start_error = True, None
        threading.Thread(target=self._start_in_background, name="adrules-dask-start", daemon=True).start()

    def _start_in_background(self) -> None:
        try:
            self._reopen()
        except BaseException as exc:
            self._start_error = exc
        finally:
            self._starting = False

    def _reopen(self) -> None:
        with self._lock:
            if self._closed:
                self._connect()

    def __repr__(self) -> str:
        return f"DaskExecutor(client={self._client!r})"
