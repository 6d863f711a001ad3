"""Type hints on the public API of both packages: every public function and method is
fully annotated, and, after exactly the README's install in a fresh virtual environment, a
user's typed script that calls them type-checks with mypy (and a wrong call does not).
"""

import importlib
import inspect
import os
import pathlib
import shlex
import site
import subprocess
import sys
import textwrap

import pytest

import adrules
import executors

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Modules whose public names are the API: ``__all__`` where a module has one, else the
#: public names it defines. ``adrules._psum`` is covered by ``psum``/``pmap`` in
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
    for name in ("adrules.api.gradient", "adrules._psum.parallel.psum", "adrules._psum.parallel.pmap",
                 "adrules.derivatives.hessian", "adrules.testing.check_grads",
                 "adrules.api.ReverseRules.__call__", "adrules.registry.RuleRegistry.register",
                 "adrules.tangents.Tangent.__init__", "adrules.tangents.AbstractZero.__add__",
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


README = ROOT / "README.md"


def readme_install_command():
    """The ``pip install ...`` of the README's first quick-start command, as its words."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Quick start"):]
    block = section[section.index("```bash\n") + len("```bash\n"):]
    first_command = block[: block.index("\n")]
    (install,) = [part.strip() for part in first_command.split("&&") if part.strip().startswith("pip install")]
    return shlex.split(install)


def test_the_install_command_is_found():
    assert readme_install_command()[:3] == ["pip", "install", "-e"]


@pytest.fixture(scope="module")
def readme_venv(tmp_path_factory):
    """A fresh virtual environment with the checkout installed exactly as the README's quick
    start does (its ``pip install`` run from the checkout), outside the checkout.

    The venv sees the running environment's site-packages (a ``.pth`` file), so the install
    finds the dependencies there instead of unpacking NumPy, SciPy, Dask, mypy... again: 50 s
    of each suite run. What the test checks is unchanged: the README's command, run as its
    words say, installs *this checkout* into the fresh venv (editable, as the README does),
    and mypy run there must find both packages through that install; only the third-party
    packages come from elsewhere, and CI's environment is itself the README's install."""
    venv = tmp_path_factory.mktemp("readme-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MYPYPATH")}
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
    # plain paths (the running environment's own .pth files, e.g. its editable install of
    # adrules, are not processed): appended after the venv's site-packages
    pathlib.Path(venv_site, "_running_env_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip, install, *args = readme_install_command()
    proc = subprocess.run([str(python), "-m", pip, install, "--quiet", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the README's install failed:\n{proc.stdout}\n{proc.stderr}"
    where = subprocess.run([str(python), "-c", "import adrules, executors; print(adrules.__file__, executors.__file__)"],
                           cwd=venv.parent, env=env, capture_output=True, text=True, timeout=300)
    assert where.stdout.split() == [str(ROOT / "adrules" / "__init__.py"), str(ROOT / "executors" / "__init__.py")], \
        f"the venv does not import this checkout after the README's install:\n{where.stdout}{where.stderr}"
    return python, env


@pytest.fixture(scope="module")
def mypy_caches(tmp_path_factory):
    """mypy's caches, one per set of options (``--strict`` invalidates a default run's):
    the library and NumPy are checked once per set, not once per script."""
    return tmp_path_factory.mktemp("mypy-caches")


def _mypy(readme_venv, mypy_caches, workdir, *args):
    python, env = readme_venv
    cache = mypy_caches / ("strict" if "--strict" in args else "default")
    return subprocess.run(  # in a directory of the user's, away from the checkout
        [str(python), "-m", "mypy", "--cache-dir", str(cache), *args],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


def test_mypy_sees_the_packages_after_the_readme_install(readme_venv, mypy_caches, tmp_path):
    """``mypy user.py`` as a user types it: no error at all, none from inside the library
    (its imports of loky, cloudpickle, distributed, which ship no stubs, included)."""
    (tmp_path / "user.py").write_text(textwrap.dedent(USER_SCRIPT))
    proc = _mypy(readme_venv, mypy_caches, tmp_path, "user.py")
    assert proc.returncode == 0 and proc.stdout.startswith("Success"), proc.stdout + proc.stderr
    proc = _mypy(readme_venv, mypy_caches, tmp_path, "--strict", "user.py")
    assert proc.returncode == 0 and proc.stdout.startswith("Success"), proc.stdout + proc.stderr


def test_mypy_rejects_wrong_calls(readme_venv, mypy_caches, tmp_path):
    (tmp_path / "wrong.py").write_text(textwrap.dedent(WRONG_SCRIPT))
    proc = _mypy(readme_venv, mypy_caches, tmp_path, "--no-error-summary", "wrong.py")
    wrong_lines = sorted({int(ln.split(":")[1]) for ln in proc.stdout.splitlines() if ": error:" in ln})
    assert wrong_lines == [6, 7, 8], "mypy should reject the three wrong calls, and only them:\n" + proc.stdout


def test_the_typed_user_script_runs():
    exec(compile(textwrap.dedent(USER_SCRIPT), "user.py", "exec"), {"__name__": "user"})
