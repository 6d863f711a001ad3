"""How calls of SciPy's Python functions and methods reach rules.

NumPy's functions and ufuncs hand traced values to the tracer (``__array_function__``,
``__array_ufunc__``); SciPy's Python functions (``scipy.special.logsumexp``,
``scipy.integrate.odeint``) and the methods of its distributions (``st.norm.logpdf``)
call ``np.asarray`` on their arguments first, which drops a traced value. So the SciPy
rule modules, loaded when their SciPy module is imported (``_optional.load_with``), put
an entry point in SciPy's place:

* ``replace_function(scipy.special, "logsumexp")``: the name in SciPy's namespace becomes
  an ``@adrules.primitive`` of SciPy's own function, whose rules the caller registers. With
  no differentiation open it calls SciPy's function at once (one attribute check more);
  a name bound before adrules was imported (``from scipy.special import logsumexp`` above
  ``import adrules``) keeps SciPy's function, and the error a traced value meets there
  says so (``unsupported.REPLACED``).
* ``route_method(norm_gen, "logpdf", primitive)``: the distribution's class gets the method
  as its own attribute. When a traced value is among the arguments it binds them to the
  primitive's signature (SciPy's: ``x, *shapes, loc, scale``, positionally or by keyword)
  and calls the primitive; otherwise SciPy's method runs, unchanged. On the class, not
  the object ``st.norm``: a frozen distribution (``st.norm(0.0, 2.0)``) makes a new object
  of the class; classes deriving from it (``erlang_gen`` from ``gamma_gen``) get SciPy's
  method. The method is named where it lives (``norm_gen.logpdf``): cloudpickle then sends
  a bound method such as ``st.norm.logpdf`` by name, as it does without adrules, and it
  loads (as SciPy's own method) where adrules is not installed.
"""

import functools
import inspect

import numpy as np

from .. import unsupported
from .._state import STATE, TracedValue
from ..callables import has_traced
from ..registry import primitive


def replace_function(module, name, public=None):
    """Put an ``@adrules.primitive`` of ``module.name`` in its place and return it
    (the one already there, when this runs again). ``public``: the module path users
    call it by, for error messages (``module.__name__`` by default).

    >>> import scipy.special, adrules
    >>> replace_function(scipy.special, "logsumexp") is scipy.special.logsumexp  # (done on import)
    True
    >>> scipy.special.logsumexp.__wrapped__.__module__
    'scipy.special._logsumexp'
    """
    original = getattr(module, name)
    if hasattr(original, "__adrules_primitive__"):
        return original
    wrapped = primitive(original)
    wrapped.__module__ = public or module.__name__
    setattr(module, name, wrapped)
    qualified = f"{wrapped.__module__}.{name}"
    unsupported.REPLACED[qualified] = (
        f"{qualified} has a rule, but the function called here is SciPy's own, bound to its name "
        f"before adrules was imported (from {wrapped.__module__} import {name} above import adrules): "
        f"import adrules first, or call it as {wrapped.__module__}.{name}")
    return wrapped


def scipy_primitive(fn, public, signature=None):
    """``fn`` as an ``@adrules.primitive`` named ``public`` ("scipy.stats.norm.logpdf") in
    error messages, with ``signature`` (an ``inspect.Signature``; ``fn``'s own by default)."""
    wrapped = primitive(fn)
    module, _, name = public.rpartition(".")
    wrapped.__module__, wrapped.__name__, wrapped.__qualname__ = module, name, name
    if "." in module and module.startswith("scipy.stats."):  # scipy.stats.norm.logpdf
        wrapped.__module__, wrapped.__qualname__ = "scipy.stats", public[len("scipy.stats."):]
    if signature is not None:
        wrapped.__signature__ = signature
    return wrapped


def route_method(cls, name, prim):
    """Give ``cls`` a method ``name`` that calls ``prim`` with the call's arguments bound
    to ``prim``'s signature (defaults filled in, all positional) when a traced value is
    among them, and ``cls``'s inherited method otherwise.

    >>> import scipy.stats as st, adrules
    >>> routed_primitive(type(st.norm), "logpdf").__qualname__  # (done on import)
    'norm.logpdf'
    """
    original = getattr(cls, name)
    if getattr(original, "__adrules_routed__", None) is not None:
        return
    signature = inspect.signature(prim)
    n = len(signature.parameters)

    @functools.wraps(original)
    def routed(self, *args, **kwargs):
        if STATE.active and type(self) is cls and _traced_among(args, kwargs):
            args = tuple(map(_stacked, args))
            kwargs = {k: _stacked(v) for k, v in kwargs.items()}
            if not kwargs and len(args) == n:  # every argument given by position
                return prim(*args)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # SciPy's own method says what is wrong with the call
                return original(self, *args, **kwargs)
            bound.apply_defaults()
            return prim(*bound.args)
        return original(self, *args, **kwargs)

    # Named where it lives (``norm_gen.logpdf``), so pickles that send functions by
    # reference when their name finds them (cloudpickle's) send a name, not adrules' code:
    # loaded where adrules is absent, the name gives SciPy's own method.
    routed.__module__, routed.__qualname__ = cls.__module__, f"{cls.__qualname__}.{name}"
    routed.__adrules_routed__ = prim
    setattr(cls, name, routed)


def _stacked(value):
    """A list (or tuple) holding traced values as one traced array, as SciPy's method
    would make an array of it (``st.norm.logpdf([x[0], x[1]])``); anything else as it is."""
    if type(value) in (list, tuple) and has_traced(value):
        return np.stack([_stacked(v) for v in value])
    return value


def _traced_among(args, kwargs):
    """Whether a traced value is among the arguments (or in a list of them)."""
    for a in args:
        if isinstance(a, TracedValue) or type(a) in (list, tuple) and has_traced(a):
            return True
    return bool(kwargs) and has_traced(kwargs)


def routed_primitive(cls, name):
    """The primitive ``route_method`` routes ``cls.name`` to, or None."""
    return getattr(getattr(cls, name, None), "__adrules_routed__", None)
