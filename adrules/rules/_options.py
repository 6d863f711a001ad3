"""Optional positional arguments of NumPy functions, shared by the rule files.

A rule takes ``*options`` after its differentiable arguments, reads them by name with
``options_by_name`` and returns one ``NoTangent()`` per option with ``no_tangents``, so
its pullback has a slot for every positional argument the call received.
"""

from ..tangents import NoTangent


def options_by_name(given, kwargs, **defaults):
    """A call's optional arguments by name: positional ``given`` in order, then keywords.

    >>> options_by_name((0,), {"mode": "clip"}, axis=None, mode="raise")
    (0, 'clip')
    """
    values = dict(defaults, **dict(zip(defaults, given)))
    values.update((k, kwargs[k]) for k in defaults if k in kwargs)
    return tuple(values.values())


def no_tangents(options):
    """One ``NoTangent()`` per optional positional argument (axes, modes, ord...)."""
    return (NoTangent(),) * len(options)
