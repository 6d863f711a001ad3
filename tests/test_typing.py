"""Type hints on the public API of both packages: every public function and method is
fully annotated, and a user's typed script that calls them type-checks (and a wrong call
does not).
"""

import importlib
import inspect
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import adrules
import executors

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Modules whose public names are the API: ``__all__`` where a module has one, else the
#: public names it defines. ``adrules.parallel`` is covered by ``psum``/``pmap`` in
#: ``adrules.__all__``.
PUBLIC_MODULES = [
    "adrules", "adrules.api", "adrules.derivatives", "adrules.registry", "adrules.tangents",
    "adrules.projection", "adrules.pytrees", "adrules.testing",
    "executors", "executors.base", "executors.config", "executors.reduce", "executors.local",
    "executors.dask", "executors.joblib_backend",
]
OURS = ("adrules", "executors")


def _ours(obj):
    return (getattr(obj, "__module__", None) or "").split(".")[0] in OURS


def missing_annotations(fn, self_arg=False):
    """Names of ``fn``'s parameters without an annotation, and "return" if it has none."""
    fn = inspect.unwrap(fn)  # contextmanager / functools.wraps keep the original in __wrapped__
    annotations = getattr(fn, "__annotations__", {})
    params = list(inspect.signature(fn).parameters.values())
    if self_arg and params and params[0].name in ("self", "cls"):
        params = params[1:]
    out = [p.name for p in params if p.name not in annotations]
    if "return" not in annotations:
        out.append("return")
    return out


def _methods(cls):
    """(qualified name, function, takes self) of the public methods and dunders that
    ``cls`` and its bases in our packages define; properties by their getter."""
    seen = set()
    for klass in cls.__mro__:
        if not _ours(klass):
            continue
        for name, attr in vars(klass).items():
            if name in seen or (name.startswith("_") and not name.startswith("__")):
                continue
            seen.add(name)
            qual = f"{klass.__module__}.{klass.__name__}.{name}"
            if isinstance(attr, (staticmethod, classmethod)):
                yield qual, attr.__func__, isinstance(attr, classmethod)
            elif isinstance(attr, property):
                yield qual, attr.fget, True
            elif inspect.isfunction(attr) and _ours(attr):
                yield qual, attr, True


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [n for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__]


def public_api():
    """{qualified name: (function, takes self)} of everything the public API exposes."""
    found = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in _public_names(module):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                found.update((q, (fn, s)) for q, fn, s in _methods(obj))
            elif inspect.isfunction(obj):
                fn = inspect.unwrap(obj)
                found[f"{fn.__module__}.{fn.__qualname__}"] = (obj, False)
            elif callable(obj) and _ours(type(obj)) and not inspect.ismodule(obj):
                found.update((q, (fn, s)) for q, fn, s in _methods(type(obj)))  # adrules.rrule
    return found


def test_the_walk_finds_the_api():
    api = public_api()
    for name in ("adrules.api.gradient", "adrules.parallel.psum", "adrules.parallel.pmap",
                 "adrules.derivatives.hessian", "adrules.testing.check_grads",
                 "adrules.api.ReverseRules.__call__", "adrules.registry.RuleRegistry.register",
                 "adrules.tangents.Tangent.__init__", "adrules.tangents._AbstractZero.__add__",
                 "adrules.pytrees.register_node", "executors.config.config",
                 "executors.reduce.TreeSum.push", "executors.base.Executor.map",
                 "executors.base.Executor.__exit__", "executors.local.ThreadExecutor.__init__",
                 "executors.dask.DaskExecutor.client", "executors.joblib_backend.JoblibExecutor.n_workers"):
        assert name in api, f"the public API walk misses {name}"


def test_missing_annotations_catches_gaps():
    def half(x: int, y):
        return x

    def whole(x: int, *args: float, k: str = "", **kw: object) -> None:
        pass

    assert missing_annotations(half) == ["y", "return"]
    assert missing_annotations(whole) == []


def test_public_api_is_fully_annotated():
    offenders = []
    for name, (fn, self_arg) in sorted(public_api().items()):
        gaps = missing_annotations(fn, self_arg)
        if gaps:
            offenders.append(f"{name}: {', '.join(gaps)}")
    assert not offenders, "unannotated in the public API:\n  " + "\n  ".join(offenders)


# --------------------------------------------------------------------------------------
# a downstream user's typed script
# --------------------------------------------------------------------------------------

USER_SCRIPT = '''
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

import adrules as ad
import executors


def loss(w: NDArray[np.float64], x: NDArray[np.float64]) -> Any:
    return np.sum((w * x) ** 2)


models: list[NDArray[np.float64]] = [np.ones(3), np.full(3, 2.0)]
x = np.linspace(0.0, 1.0, 3)

grads: tuple[Any, ...] = ad.gradient(lambda x: loss(models[0], x), x)
total = ad.psum(loss, models, x, executor="threads")
g_models, g_x = ad.gradient(lambda ms, x: ad.psum(loss, ms, x, executor="threads"), models, x)
values: list[Any] = ad.pmap(loss, models, x, executor="serial", chunk_size=1)
H: NDArray[np.floating] = ad.hessian(lambda x: loss(models[0], x), x)
y, back = ad.pullback(lambda x: x * 2.0, x)
x_bar = back(np.ones(3))[0]

with executors.ThreadExecutor(2) as ex:
    squares: list[Any] = ex.map(lambda i: i * i, range(4))
    total_here = ad.psum(loss, models, x, executor=ex)
with executors.config(executor="serial", chunk_size=2, dispatch="always"):
    n: int = executors.resolve().n_workers


@ad.primitive
def cube(v: float) -> float:
    return v ** 3


@ad.rrule.register(cube)
def cube_rrule(v: float) -> tuple[float, Callable[[float], tuple[Any, float]]]:
    return cube(v), lambda g: (ad.NoTangent(), 3 * v ** 2 * g)


c: float = cube(2.0)
assert abs(total - total_here) == 0.0 and squares == [0, 1, 4, 9] and H.shape == (3, 3)
'''

WRONG_SCRIPT = '''
import numpy as np
import adrules as ad
import executors

ex = executors.ThreadExecutor("two")
ad.psum(np.sum, [np.ones(2)], executor=3)
with executors.config(dispatch="sometimes"):
    pass
'''


def test_a_typed_user_script_type_checks(tmp_path):
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy is not installed: pip install -e '.[test]'")
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_SCRIPT))
    (tmp_path / "wrong.py").write_text(textwrap.dedent(WRONG_SCRIPT))
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # the sources, however the packages are installed
    proc = subprocess.run(  # --follow-imports=silent: our modules are read as a library is
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--python-version",
         "3.10", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "user.py", "wrong.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    in_user = [ln for ln in lines if ln.startswith("user.py")]
    assert not in_user, "a typed user script does not type-check:\n" + "\n".join(in_user) + proc.stderr
    wrong_lines = sorted({int(ln.split(":")[1]) for ln in lines if ln.startswith("wrong.py")})
    assert wrong_lines == [6, 7, 8], "mypy should reject the three wrong calls:\n" + proc.stdout
    # and the script runs as written
    exec(compile(textwrap.dedent(USER_SCRIPT), "user.py", "exec"), {"__name__": "user"})
