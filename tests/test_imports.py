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
         "executors._tracebacks", "executors._global_random", "executors._pickler"],
        ["executors.base"],
        ["executors._futures", "executors._remote", "executors.reduce"],
        ["executors._lane"],
        ["executors.local", "executors.dask", "executors.joblib_backend"],
        ["executors.config"],
        ["executors"],
    ],
    "adrules": [
        ["adrules._state", "adrules.tangents", "adrules.pytrees", "adrules.unsupported"],
        ["adrules.projection", "adrules.callables"],
        ["adrules.registry"],
        ["adrules.ops"],
        ["adrules.tracer"],
        ["adrules.api"],
        ["adrules.testing", "adrules.schedule", "adrules.to_workers", "adrules.chunks", "adrules.transforms"],
        ["adrules.parallel", "adrules.derivatives"],
        ["adrules.rules.*", "adrules.coverage"],
        ["adrules"],
    ],
}


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
