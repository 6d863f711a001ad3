"""What the layers below the tracer know of it, kept in one tiny module so they need
not import it: whether a trace is open (read on hot paths), how to dispatch a
``@primitive`` call, and the base class that marks a traced value."""


class _State:
    __slots__ = ("active", "dispatch")

    def __init__(self):
        self.active = 0  # number of traces open in any thread; 0 lets primitives skip all checks
        self.dispatch = None  # set by the tracer: dispatch(primitive, args, kwargs)

    def __reduce__(self):
        # a primitive defined in __main__ travels to worker processes by value, closure
        # included: it must find the worker's own switches there, not a frozen copy
        return "STATE"


STATE = _State()


class TracedValue:
    """Base class of ``tracer.Traced``: ``isinstance(x, TracedValue)`` asks "is x being
    differentiated?" without importing the tracer."""

    __slots__ = ()
