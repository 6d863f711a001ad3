"""Rule families for optional packages, loaded when the package itself is imported.

``load_with("scipy.special", "adrules.rules.scipy_special")`` imports the rule module(s) at
once if ``scipy.special`` is already imported, and otherwise right after the first
``import scipy.special`` has run the module's code. So ``import adrules`` never pays for
importing SciPy (~0.4 s), and costs nothing at all when SciPy is not installed.

How: a finder on ``sys.meta_path`` answers for that one module name with the spec the
finders after it give, its loader's ``exec_module`` wrapped to load the rules once the
module's code has run. The import system calls finders while it holds its global lock, so
the finder asks the other finders directly (``finder.find_spec(name, path)``) and never
imports anything there (``importlib.util.find_spec`` would wait for a parent module another
thread is importing: a deadlock). A spec lookup alone (``importlib.util.find_spec``) loads
nothing and leaves the finder in place; the finder removes itself once the rules loaded.
"""

import importlib
import importlib.util
import sys
import threading


def is_installed(package):
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[package] is None (blocked)
        return False


class _LoadAfter:
    """A meta path finder that runs ``then()`` once ``name``'s module code has run."""

    def __init__(self, name, then):
        self.name, self.then = name, then
        self.lock, self.done = threading.Lock(), False
        self.asking = threading.local()  # another such finder (a second copy of adrules) asks us back

    def find_spec(self, name, path=None, target=None):
        if name != self.name or getattr(self.asking, "now", False):
            return None
        self.asking.now = True
        try:
            spec = self._spec_from_other_finders(name, path, target)
        finally:
            self.asking.now = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_load_rules(module):
            exec_module(module)
            self._load_once()

        spec.loader.exec_module = exec_then_load_rules
        return spec

    def _spec_from_other_finders(self, name, path, target):
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(name, path, target)
            if spec is not None:
                return spec
        return None

    def _load_once(self):
        with self.lock:
            if self.done:
                return
            self.done = True
        try:
            sys.meta_path.remove(self)
        except ValueError:  # someone else took it out
            pass
        self.then()


def load_with(package, *rules_modules):
    """Import ``rules_modules`` together with ``package`` (now, later, or never)."""
    def load():
        for name in rules_modules:
            importlib.import_module(name)

    if package in sys.modules:
        load()
    elif is_installed(package.partition(".")[0]):
        sys.meta_path.insert(0, _LoadAfter(package, load))
