"""The import graph of both packages: no circles, no import running back up the layers.

Every ``import`` statement counts, including those inside functions (lazy imports
are still dependencies; they only hide circles from the interpreter).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Layers from the bottom up: a module may import modules of its own layer or below.
LAYERS = {
    "executors": [
        ["executors._context", "executors._blas", "executors._plain", "executors._shm", "executors._abandon",
         "executors._tracebacks", "executors._global_random", "executors._pickler", "executors._leftovers",
         "executors._dask_worker"],
        ["executors.base"],
        ["executors._threads", "executors._remote", "executors.reduce"],
        ["executors._lane"],
        ["executors.local", "executors.dask", "executors.joblib_backend"],
        ["executors.config"],
        ["executors"],
    ],
    "adrules": [
        # the core
        ["adrules._state", "adrules.tangents", "adrules.pytrees", "adrules.unsupported"],
        ["adrules.projection", "adrules.callables", "adrules.keywords"],
        ["adrules.registry"],
        ["adrules.ops"],
        ["adrules.tracer"],
        ["adrules.api"],
        ["adrules.testing", "adrules.transforms"],
        ["adrules.rules.*", "adrules.coverage"],
        # the parallel sum, one wing above the core
        ["adrules._psum.worker_rules", "adrules._psum.policy"],
        ["adrules._psum.schedule", "adrules._psum.to_workers"],
        ["adrules._psum.chunks"],
        ["adrules._psum.parallel"],
        ["adrules._psum"],
        # jacobian and hessian run their columns through psum's schedule
        ["adrules.derivatives"],
        ["adrules.adaptors"],
        ["adrules"],
    ],
}

#: psum's package, and the modules outside it that may import it (``adrules`` exports
#: ``psum`` and ``pmap``; ``derivatives`` maps its columns with ``schedule.run``)
PSUM = "adrules._psum"
PSUM_USERS = {"adrules", "adrules.derivatives", "adrules.adaptors"}  # and above them
#: the parallel sum's modules: every one of them lives in PSUM's folder
PSUM_MODULES = {"parallel", "chunks", "schedule", "policy", "to_workers", "worker_rules"}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path, package):
    """Modules of ``package`` that the file at ``path`` imports, anywhere in the file."""
    name = module_name(path)
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            # ``from .registry import rrule`` imports a name of a module, ``from . import ops``
            # a module (or a name of the package): ``graph`` trims each to a module
            targets = ([stem] if node.module else []) + [f"{stem}.{alias.name}" for alias in node.names]
        else:
            continue
        for t in targets:
            if t == package or t.startswith(package + "."):
                found.add(t)
    return found


def graph(package):
    """{module: set of modules of the same package it imports}."""
    paths = {module_name(p): p for p in (ROOT / package).rglob("*.py")}
    edges = {}
    for name, path in paths.items():
        deps = set()
        for t in imports_of(path, package):
            while t not in paths:  # ``pkg.mod.name`` -> ``pkg.mod``
                t = t.rpartition(".")[0]
            if t != name:
                deps.add(t)
        edges[name] = deps
    return edges


def layer_of(package, module):
    for i, layer in enumerate(LAYERS[package]):
        for pattern in layer:
            if module == pattern.removesuffix(".*") or (pattern.endswith(".*") and module.startswith(pattern[:-1])):
                return i
    raise AssertionError(f"{module} is in no layer of tests/test_imports.py: add it to LAYERS")


def find_cycle(edges):
    """One import circle as a list of modules, or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == "open":
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                cycle = visit(dep, stack)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


PACKAGES = sorted(LAYERS)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circles(package):
    cycle = find_cycle(graph(package))
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_down_the_layers(package):
    upward = [f"{m} (layer {layer_of(package, m)}) imports {d} (layer {layer_of(package, d)})"
              for m, deps in sorted(graph(package).items()) for d in sorted(deps)
              if layer_of(package, d) > layer_of(package, m)]
    assert not upward, "imports running back up:\n  " + "\n  ".join(upward)


def test_executors_knows_nothing_of_adrules():
    for path in (ROOT / "executors").rglob("*.py"):
        assert not imports_of(path, "adrules"), f"{path.name} imports adrules"


def in_psum(module):
    return module == PSUM or module.startswith(PSUM + ".")


def test_psum_modules_live_in_one_folder():
    modules = set(graph("adrules"))
    assert {f"{PSUM}.{m}" for m in PSUM_MODULES} <= modules
    stray = sorted(m for m in modules if m.rpartition(".")[2] in PSUM_MODULES and not in_psum(m))
    assert not stray, f"psum's modules outside {PSUM}: {stray}"


def test_the_core_never_imports_psum():
    """Only ``PSUM_USERS`` import the parallel sum's package; the core stands without it."""
    edges = graph("adrules")
    up = sorted(f"{m} imports {d}" for m, deps in edges.items() if not in_psum(m) and m not in PSUM_USERS
                for d in deps if in_psum(d))
    assert not up, "the core imports psum:\n  " + "\n  ".join(up)
    assert all(layer_of("adrules", m) < layer_of("adrules", PSUM + ".worker_rules")
               for m in edges if not in_psum(m) and m not in PSUM_USERS), "a core module is layered above psum"


def test_the_package_leaves_ad_psum_the_function():
    """``adrules.psum`` is the function users call. Its package is ``_psum`` because
    importing a package's module by path (pytest's importlib mode collecting doctests)
    sets the package as an attribute of its parent: a package ``adrules.psum`` would
    replace the function."""
    import sys

    import adrules
    assert adrules.psum is sys.modules[PSUM + ".parallel"].psum and callable(adrules.psum)
    assert adrules.pmap is sys.modules[PSUM + ".parallel"].pmap


def private_names_imported(path):
    """``from M import _name`` statements of the file at ``path`` where M is a module of either
    package and ``_name`` is not itself a module: another module's private name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            name = module_name(path)
            here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        else:
            base = node.module.split(".")
        if base[0] not in PACKAGES:
            continue
        folder = ROOT.joinpath(*base)
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name).is_dir()
            if private and not is_module:
                found.append(f"{module_name(path)} line {node.lineno}: from {'.' * node.level}"
                             f"{node.module or ''} import {alias.name}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_another_modules_private_names(package):
    """A name shared between modules is public in the module that owns it; importing a
    private module (``from . import _state``) is fine, a private name of one is not."""
    found = [line for path in sorted((ROOT / package).rglob("*.py")) for line in private_names_imported(path)]
    assert not found, "private names imported across modules:\n  " + "\n  ".join(found)


def test_the_private_import_checker_tells_names_from_modules(tmp_path):
    pkg = tmp_path / "adrules"
    (pkg / "rules").mkdir(parents=True)
    (pkg / "_state.py").write_text("")
    mod = pkg / "rules" / "sub.py"
    mod.write_text("from .. import _state\nfrom ..api import _Name, public\nfrom numpy import _core\n"
                   "def f():\n    from adrules.tracer import _hidden\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert private_names_imported(mod) == ["adrules.rules.sub line 2: from ..api import _Name",
                                               "adrules.rules.sub line 5: from adrules.tracer import _hidden"]
    finally:
        ROOT = saved


def test_the_checker_finds_circles_and_lazy_imports(tmp_path):
    """The walker itself: a function-level relative import closing a circle is caught."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    mod = tmp_path / "pkg" / "sub.py"
    mod.parent.mkdir()
    mod.write_text("def f():\n    from .other import g\n    from . import third\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert imports_of(mod, "pkg") == {"pkg.other", "pkg.other.g", "pkg.third"}
    finally:
        ROOT = saved


def other_packages_private_imports(path, package):
    """Imports in the file at ``path`` (of ``package``) of another package's private modules
    or names (``executors._abandon``, ``from executors import _x``): what one package uses of
    another is public there."""
    found = []
    for other in PACKAGES:
        if other == package:
            continue
        for target in sorted(imports_of(path, other)):
            if any(part.startswith("_") and not part.startswith("__") for part in target.split(".")):
                found.append(f"{module_name(path)} imports {target}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_another_packages_private_names(package):
    found = [line for path in sorted((ROOT / package).rglob("*.py"))
             for line in other_packages_private_imports(path, package)]
    assert not found, "private names of another package imported:\n  " + "\n  ".join(found)


def test_the_cross_package_checker_finds_private_modules_and_names(tmp_path):
    pkg = tmp_path / "adrules"
    pkg.mkdir()
    mod = pkg / "sub.py"
    mod.write_text("import executors\nfrom executors import _abandon, config\nfrom executors.base import add_note\n"
                   "def f():\n    from executors._tracebacks import warn\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert other_packages_private_imports(mod, "adrules") == [
            "adrules.sub imports executors._abandon", "adrules.sub imports executors._tracebacks",
            "adrules.sub imports executors._tracebacks.warn"]
    finally:
        ROOT = saved
