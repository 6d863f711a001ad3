"""Users' rules, sent to worker processes.

A worker process has adrules's own rules (it imports adrules), and the rules of a
``__main__`` primitive travel with it (``registry.RulesTravel``). Not so a user's rule for
a NumPy function (a straight-through ``np.clip``), nor one registered by a module the
worker never imports for a primitive it does (``rules.py`` registering for ``ops.py``'s
functions): without them a worker would use NumPy's built-in rule, or none, and the
gradient would silently differ from the parent's. Every rule registered from outside
adrules is therefore sent with every map of chunk work (``travelling_rules()``, pickled
with the task) and registered on the worker before the task runs.
"""

from __future__ import annotations

from typing import Any, Callable

from ..registry import RULE, USER_REGISTRATIONS, RuleEntry, frule, function_name, rrule


class UserRules:
    """The rules users registered (outside adrules), captured when pickled and
    registered again where unpickled: a worker process then differentiates with the
    rules the caller does. ``travelling_rules()`` gives it, or None when there are none.
    A rule that cannot be pickled arrives as one that raises, naming it, if used.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Callable[..., None], tuple[Any, ...]]:
        global _user_snapshot
        version, data = _user_snapshot
        if version != USER_REGISTRATIONS.version or data is None:
            data = tuple(b for b in map(_entry_bytes, list(USER_REGISTRATIONS.keys)) if b is not None)
            _user_snapshot = (USER_REGISTRATIONS.version, data)
        return (_adopt_user_rules, (data,))


_user_snapshot: tuple[int, tuple[tuple[bytes, bytes], ...] | None] = (-1, None)
_USER_RULES = UserRules()


def _entry_bytes(f: Callable[..., Any]) -> tuple[bytes, bytes] | None:
    """``f`` and its rules, pickled apart: a worker that cannot load the rules (their
    module is not importable there) must still learn that ``f`` has them."""
    import cloudpickle  # rules may be lambdas, or defined in __main__

    try:
        key = cloudpickle.dumps(f, protocol=5)
    except Exception:  # f itself does not pickle: nor does any work that calls it
        return None
    rules = (rrule.rules.get(f), frule.rules.get(f))
    try:
        return key, cloudpickle.dumps(rules, protocol=5)
    except Exception as e:
        unsent = RuleEntry(_Unsent(function_name(f), f"{type(e).__name__}: {e}"), RULE, name=function_name(f))
        return key, cloudpickle.dumps(tuple(None if r is None else unsent for r in rules), protocol=5)


class _Unsent:
    """Stands on a worker for a rule that could not be pickled, or loaded there: raises
    if used (the built-in rule, or none, would silently give another derivative)."""

    def __init__(self, name: str, reason: str, failed: str = "sent to") -> None:
        self.name, self.reason, self.failed = name, reason, failed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        where = "this worker process" if self.failed == "sent to" else "on this worker process"
        raise TypeError(
            f"the rule registered for {self.name} could not be {self.failed} {where} "
            f"({self.reason}): define it at module level in a module the workers can import "
            f"(on their sys.path), make what it captures picklable, or use the 'serial' or "
            f"'threads' executor.")


def travelling_rules() -> UserRules | None:
    """What to pickle with work sent to worker processes so that they use the rules
    users registered; None when users registered none.

    >>> travelling_rules() is None or isinstance(travelling_rules(), UserRules)
    True
    """
    return _USER_RULES if USER_REGISTRATIONS.keys else None


def _adopt_user_rules(data: tuple[tuple[bytes, bytes], ...]) -> None:
    import pickle

    for key, rules in data:
        try:
            f = pickle.loads(key)
        except Exception:  # f's module is not importable here: nothing here can call f
            continue
        try:
            reverse, forward = pickle.loads(rules)
        except Exception as e:  # (a rule's module the caller imported from a path of its own)
            unsent = RuleEntry(_Unsent(function_name(f), f"{type(e).__name__}: {e}", "loaded"), RULE,
                               name=function_name(f))
            reverse, forward = unsent, unsent
        for table, entry in ((rrule.rules, reverse), (frule.rules, forward)):
            if entry is not None:
                table[f] = entry
