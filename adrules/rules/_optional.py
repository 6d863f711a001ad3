"""Rule families for optional packages, loaded when the package itself is imported.

``load_with("scipy.special", "adrules.rules.scipy_special")`` imports the rule module(s) at
once if ``scipy.special`` is already imported, and otherwise right after the first
``import scipy.special`` (a finder on ``sys.meta_path`` that wraps that one module's
loader, then removes itself). So ``import adrules`` never pays for importing SciPy
(~0.4 s), and costs nothing at all when SciPy is not installed.
"""

import importlib
import importlib.util
import sys


def is_installed(package):
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[package] is None (blocked)
        return False


class _LoadAfter:
    """A meta path finder that runs ``then()`` once ``name`` has finished importing."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, then = spec.loader.exec_module, self.then

        def exec_then_load_rules(module):
            exec_module(module)
            then()

        spec.loader.exec_module = exec_then_load_rules
        return spec


def load_with(package, *rules_modules):
    """Import ``rules_modules`` together with ``package`` (now, later, or never)."""
    def load():
        for name in rules_modules:
            importlib.import_module(name)

    if package in sys.modules:
        load()
    elif is_installed(package.partition(".")[0]):
        sys.meta_path.insert(0, _LoadAfter(package, load))
