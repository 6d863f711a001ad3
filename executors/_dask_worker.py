"""Set-up of the worker processes of a LocalCluster that ``DaskExecutor`` starts (a Dask
worker preload, ``distributed.worker.preload``).

The workers are children of the user's process, in its process group: a Ctrl-C at the
terminal (SIGINT to the whole group) ended them — gracefully, so their nannies closed
too — and every later call waited on a cluster with no workers. The user's own process
gets the KeyboardInterrupt; the workers ignore SIGINT, and stop when the executor closes
(or is interrupted while closing: ``DaskExecutor._stop_now`` kills them).
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    """Called by Dask as a worker starts: in a worker process of its own, ignore SIGINT
    (a worker in the user's process, ``processes=False``, leaves the user's Ctrl-C alone)."""
    if multiprocessing.parent_process() is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
