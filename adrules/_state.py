"""Process-wide tracer switches read on hot paths (kept in one tiny module to avoid import cycles)."""


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
