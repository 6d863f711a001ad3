"""Large NumPy arrays in shared arguments reach process workers by memory map.

Pickling a large shared array into every task would copy it once per task; instead each
array of at least ``max_nbytes`` is written once per content to a ``.npy`` file in
``/dev/shm`` (RAM; a temporary directory where there is none) and pickled as a
reference to it, which the workers open read-only without copying::

    parent: ProcessExecutor._map                        worker process
    ─────────────────────────────                       ──────────────
    shared args ─ cloudpickle with reducer_override:
      array >= max_nbytes ─▶ ArrayStore.path_for(a)
        same array object, same bytes as its file? ─ yes ─▶ reuse the file
        else: write <dir>/<uuid>.npy once (new content)
      ─▶ pickled as  _open_shared_array(path) ───────▶ np.load(path, mmap_mode="r"):
    other objects ─▶ pickled as usual                   a read-only np.memmap, pages
                                                        shared with every worker

Why ``.npy`` files through ``np.lib.format`` rather than joblib's memmapping
reducers: the format is public and self-describing (dtype, shape, order), and the
files' life follows this executor (LRU eviction, ``close``, interpreter exit, and
loky's resource tracker if the process is killed), while
joblib's private ``_memmapping_reducer`` ties its temporary folders to joblib's own
executor and resource tracker.

Why an exact comparison instead of a content hash: "changed in place" must never be
read stale, and comparing the array with its file runs at memory bandwidth, cheaper
than a cryptographic hash of the same bytes, with no collision to argue about.  A
*different* array object with equal content is written again (and the old file evicted
in time).  An array that already is a whole
read-only map of a file (``np.load(path, mmap_mode="r")``) is not copied at all: the
workers map that same file, sent as its name, place in the file and the file's identity
(device, inode, size, modification time).  Workers cache what they receive by a hash of
it, so a file replaced under the same name (a new checkpoint, ``os.replace``) is a new
reference, opened afresh; a worker that finds another file under the name than the one
the reference names refuses it rather than read other data.  Where the name no longer
leads to the file this process has mapped (replaced after the map was opened), or this
cannot be told (no ``/proc/self/maps``), the array goes through the store like any other.
"""

from __future__ import annotations

import collections
import io
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from typing import Any, Iterable


__all__ = ["ArrayStore", "dumps_sharing_arrays", "mapped_bytes_opened"]

_COMPARE_BLOCK = 1 << 20  # 8-byte words compared at a time


def _shm_root():
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class _Entry:
    __slots__ = ("ref", "path", "view", "in_use")

    def __init__(self, ref, path, view):
        self.ref, self.path, self.view, self.in_use = ref, path, view, 0


class ArrayStore:
    """Memory-mapped files of the large arrays sent to one executor's workers.

    At most ``max_files`` files (least recently used evicted first, never one a map
    in flight still needs); removed by :meth:`close`, and at interpreter exit (or
    when the store is garbage collected) if it was not closed.
    """

    def __init__(self, max_nbytes, max_files=4):
        self.max_nbytes = int(max_nbytes)
        self.max_files = max_files
        self.writes = 0  # files written so far (tests and benchmarks read it)
        self._entries: collections.OrderedDict = collections.OrderedDict()  # id(array) -> _Entry
        self._lock = threading.Lock()
        self._dir = None  # in /dev/shm where it exists
        self._disk_dir = None  # for arrays /dev/shm has no room for
        self._finalizers = []

    @property
    def directory(self):
        """The directory holding the files, in /dev/shm where it exists (None until the
        first one is written)."""
        return self._dir

    def wants(self, obj: object) -> bool:
        import numpy as np

        return (type(obj) is np.ndarray or type(obj) is np.memmap) and \
            obj.nbytes >= self.max_nbytes and not obj.dtype.hasobject

    def path_for(self, a: Any) -> str:
        """The file holding ``a``'s current content, written if needed; the caller
        must :meth:`release` it once the map is over."""
        with self._lock:
            entry = self._entries.get(id(a))
            if entry is not None and (entry.ref() is not a or not _same(a, entry.view)):
                self._drop(id(a), entry)
                entry = None
            if entry is None:
                entry = self._write(a)
                self._entries[id(a)] = entry
            self._entries.move_to_end(id(a))
            entry.in_use += 1
            self._evict()
            return entry.path

    def release(self, paths: Iterable[str]) -> None:
        with self._lock:
            live = {e.path: e for e in self._entries.values()}
            for p in paths:
                e = live.get(p)
                if e is not None:
                    e.in_use -= 1
            self._evict()

    def close(self) -> None:
        """Remove every file and the directories (idempotent; a later write starts afresh)."""
        with self._lock:
            self._entries.clear()
            self._dir = self._disk_dir = None
            # each folder is removed once: by its finalizer (at exit it may run before the
            # executor's own close) or here; a second unregistration makes loky's resource
            # tracker print a KeyError traceback as the script exits
            pending = [fin.detach() for fin in self._finalizers]
            self._finalizers = []
        for info in pending:
            if info is not None:  # None: its finalizer already ran
                _, remove, args, _ = info
                remove(*args)

    # -------------------------------------------------------------- internals

    def _folder(self, nbytes):
        """The shared-memory folder, or one on disk when /dev/shm lacks room for
        ``nbytes`` (a container's is often small)."""
        shm = _shm_root()
        if shm is None or _free_bytes(shm) >= 2 * nbytes:
            attr, root = "_dir", shm
        else:
            attr, root = "_disk_dir", None
        if getattr(self, attr) is None:
            folder = tempfile.mkdtemp(prefix=f"executors-{os.getpid()}-", dir=root)
            # loky's resource tracker (a process loky runs anyway) removes the folder if
            # this process is killed and never gets to clean up
            _track(folder, True)
            # runs at garbage collection or, at the latest, at interpreter exit
            self._finalizers.append(weakref.finalize(self, _remove_folder, folder))
            setattr(self, attr, folder)
        return getattr(self, attr)

    def _write(self, a):
        import numpy as np

        path = os.path.join(self._folder(a.nbytes), f"{uuid.uuid4().hex}.npy")
        order = a if a.flags.c_contiguous or a.flags.f_contiguous else np.ascontiguousarray(a)
        try:
            with open(path, "wb") as f:
                np.lib.format.write_array(f, order, allow_pickle=False)
        except BaseException:
            _unlink(path)
            raise
        self.writes += 1
        view = np.load(path, mmap_mode="r")  # the parent compares against it later
        return _Entry(weakref.ref(a), path, view)

    def _drop(self, key, entry):
        del self._entries[key]
        entry.view = None
        if entry.in_use == 0:
            _unlink(entry.path)
        # else: a map in flight still reads it; it is removed with the directory

    def _evict(self):
        while len(self._entries) > self.max_files:
            for key, entry in self._entries.items():
                if entry.in_use == 0:
                    self._drop(key, entry)
                    break
            else:
                return


def _free_bytes(folder):
    try:
        st = os.statvfs(folder)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _remove_folder(folder):
    shutil.rmtree(folder, ignore_errors=True)
    _track(folder, False)


def _track(folder, register):
    try:
        from loky.backend import resource_tracker
    except ImportError:  # pragma: no cover - loky is a dependency
        return
    try:
        (resource_tracker.register if register else resource_tracker.unregister)(folder, "folder")
    except Exception:  # pragma: no cover - cleanup is best effort; close() still removes it
        pass


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _same(a: Any, view: Any) -> bool:
    """True when ``a`` holds exactly the bytes of its file (compared as raw integers,
    so NaNs and signed zeros count as their bits)."""
    if a.shape != view.shape or a.dtype != view.dtype:
        return False
    # the file keeps a Fortran-ordered array in Fortran order, anything else in C order
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    return _bits_equal(a.ravel(order=order), view.ravel(order=order))


def _bits_equal(x: Any, y: Any) -> bool:
    import numpy as np

    xb, yb = x.view(np.uint8), y.view(np.uint8)  # 1-d contiguous (ravel)
    n8 = (xb.size // 8) * 8
    xw, yw = xb[:n8].view(np.uint64), yb[:n8].view(np.uint64)
    for s in range(0, xw.size, _COMPARE_BLOCK):  # in blocks: bounded temporaries
        if not np.array_equal(xw[s:s + _COMPARE_BLOCK], yw[s:s + _COMPARE_BLOCK]):
            return False
    return bool(np.array_equal(xb[n8:], yb[n8:]))


def dumps_sharing_arrays(obj, store, paths):
    """cloudpickle ``obj`` with its large arrays replaced by references to files of
    ``store`` (appended to ``paths``, to release after the map)."""
    buf = io.BytesIO()
    _sharing_pickler()(buf, store, paths).dump(obj)
    return buf.getvalue()


_SharingPickler = None


def _sharing_pickler():
    """The pickler class of :func:`dumps_sharing_arrays`, made once, not per shared
    argument (cloudpickle is imported on first use)."""
    global _SharingPickler
    if _SharingPickler is None:
        from ._pickler import pickler

        class SharingPickler(pickler()):
            def __init__(self, file, store, paths):
                super().__init__(file, protocol=5)
                self.store, self.paths = store, paths

            def reducer_override(self, o):
                if self.store.wants(o):
                    own = _own_file(o)
                    if own is not None:  # already a read-only map of a file: map that file
                        return _open_file_array, own
                    path = self.store.path_for(o)
                    self.paths.append(path)
                    return _open_shared_array, (path,)
                return super().reducer_override(o)

        _SharingPickler = SharingPickler
    return _SharingPickler


def _own_file(a):
    """``(filename, offset, dtype, shape, order, identity)`` when ``a`` is a whole
    read-only ``np.memmap`` of a file (e.g. ``np.load(path, mmap_mode="r")``) that its
    name still leads to: workers can map the file itself, and this process cannot change
    it through ``a``.  ``identity`` is the file's ``(st_dev, st_ino, st_size,
    st_mtime_ns)``.  None otherwise (a slice of a map, copy-on-write or writable maps,
    arrays in memory, and a map whose name now leads to another file or to none)."""
    import mmap

    import numpy as np

    if type(a) is not np.memmap or a.mode != "r" or not isinstance(a.base, mmap.mmap):
        return None
    if not a.filename or not (a.flags.c_contiguous or a.flags.f_contiguous):
        return None
    mapped = _mapped_inode(a.base)
    try:
        st = os.stat(a.filename)
    except OSError:
        return None
    if mapped is None or mapped != (st.st_dev, st.st_ino):
        return None
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    return (a.filename, a.offset, a.dtype, a.shape, order, _identity(st))


def _identity(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


_mapped_inodes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mmap -> (dev, ino)
_mapped_lock = threading.Lock()


def _mapped_inode(mm):
    """``(st_dev, st_ino)`` of the file whose pages ``mm`` maps, or None where the
    kernel does not say (no ``/proc/self/maps``).  The name an ``np.memmap`` keeps may
    lead to another file by now; a mapping's file never changes, so it is looked up once
    per mapping."""
    with _mapped_lock:
        if mm in _mapped_inodes:
            return _mapped_inodes[mm]
    import numpy as np

    start = f"{np.frombuffer(mm, np.uint8, count=1).ctypes.data:x}-"
    found = None
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if line.startswith(start):
                    # start-end perms offset major:minor inode path
                    _, _, _, dev, inode = line.split(maxsplit=5)[:5]
                    major, minor = (int(x, 16) for x in dev.split(":"))
                    found = (os.makedev(major, minor), int(inode))
                    break
    except (OSError, ValueError):
        found = None
    with _mapped_lock:
        _mapped_inodes[mm] = found
    return found


# ------------------------------------------------------------------ worker side

_opened = threading.local()


def mapped_bytes_opened() -> int:
    """Bytes of shared arrays this thread has opened so far (the worker's blob cache
    counts them, so it never keeps many deleted-but-mapped files alive)."""
    return getattr(_opened, "nbytes", 0)


def _open_shared_array(path):
    import numpy as np

    try:
        a = np.load(path, mmap_mode="r")
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"the memory-mapped shared array {path} is gone: its ProcessExecutor was "
            "closed while this task was still queued"
        ) from exc
    _opened.nbytes = mapped_bytes_opened() + a.nbytes
    return a


class SharedFileChanged(RuntimeError):
    """The file a read-only map in a shared argument came from was replaced or rewritten
    between the call and a worker opening it: the worker would read other data than the
    caller's array holds."""


def _open_file_array(filename, offset, dtype, shape, order, identity):
    import numpy as np

    try:
        f = open(filename, "rb")
    except FileNotFoundError as exc:
        raise SharedFileChanged(
            f"{filename}, memory-mapped in a shared argument, was removed while the map "
            "was running; call again with the file in place") from exc
    with f:
        # checked on the open file: what the name leads to can change at any time
        if _identity(os.fstat(f.fileno())) != tuple(identity):
            raise SharedFileChanged(
                f"{filename}, memory-mapped in a shared argument, was replaced or rewritten "
                "while the map was running, so the workers would read other data than the "
                "caller's array holds; call again once the file is written (write a new "
                "version to another name and os.replace() it over the old)")
        a = np.memmap(f, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
    _opened.nbytes = mapped_bytes_opened() + a.nbytes
    return a
