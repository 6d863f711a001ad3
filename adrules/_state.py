"""What the layers below the tracer know of it, kept in one tiny module so they need
not import it: whether a trace is open (read on hot paths), how to dispatch a
``@primitive`` call, and the base class that marks a traced value.

It also carries the one thing the tracer needs from the executors: whether the task it
runs in has been abandoned (its map raised), so that a long chunk stops at its next
operation. The package's ``__init__`` connects it (:func:`connect_tasks`); the tracer
never imports ``executors``."""


def outside_tasks():
    """The stop test when no executor is connected: there is no task to abandon."""
    return None


class _State:
    __slots__ = ("active", "dispatch", "stop_test", "Abandoned")

    def __init__(self):
        self.active = 0  # number of traces open in any thread; 0 lets primitives skip all checks
        self.dispatch = None  # set by the tracer: dispatch(primitive, args, kwargs)
        # stop_test() gives the current task's "has its map raised?" test, or None outside a
        # task; the tracer raises Abandoned when that test says yes
        self.stop_test = outside_tasks
        self.Abandoned = Exception

    def __reduce__(self):
        # a primitive defined in __main__ travels to worker processes by value, closure
        # included: it must find the worker's own switches there, not a frozen copy
        return "STATE"


STATE = _State()


class TracedValue:
    """Base class of ``tracer.Traced``: ``isinstance(x, TracedValue)`` asks "is x being
    differentiated?" without importing the tracer."""

    __slots__ = ()


def connect_tasks(stop_test, abandoned_error):
    """Let traces inside an executor's task stop when the task's map raises: ``stop_test()``
    returns the current task's test (or None outside a task), and a trace whose test says
    yes raises ``abandoned_error``, which the executor knows to drop.

    >>> connect_tasks(outside_tasks, Exception)
    >>> STATE.stop_test() is None
    True
    """
    STATE.stop_test, STATE.Abandoned = stop_test, abandoned_error
