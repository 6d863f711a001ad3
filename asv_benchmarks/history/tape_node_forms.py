"""A tape node as a plain tuple, a NamedTuple and a ``__slots__`` class: made, appended and
unpacked as ``record`` and ``backprop`` do, 100 nodes per call.

    python asv_benchmarks/history/tape_node_forms.py                 # timed in alternation
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python asv_benchmarks/history/tape_node_forms.py --form slots --calls 10   # and 30

Under callgrind, (instructions at 30 calls - at 10) / 2000 is the cost of one node. Why the
tape's node stays a plain tuple whose fields ``tracer.NODE_*`` number.
"""

from __future__ import annotations

import argparse
import collections
import timeit


class SlotsNode:
    __slots__ = ("entry", "out", "arg_slots", "values", "pullback", "y")

    def __init__(self, entry, out, arg_slots, values, pullback, y):
        self.entry, self.out, self.arg_slots = entry, out, arg_slots
        self.values, self.pullback, self.y = values, pullback, y


NamedNode = collections.namedtuple("NamedNode", "entry out arg_slots values pullback y")
_tuple_new = tuple.__new__
_entry, _slot, _arg_slots, _values = object(), 3, [1, 2], [1.0, 2.0]


def plain_tuple():
    nodes = []
    for _ in range(100):
        nodes.append((_entry, _slot, _arg_slots, _values, None, None))
    for entry, out, arg_slots, values, pullback, y in reversed(nodes):
        pass


def named_tuple():  # made without NamedTuple's Python-level __new__
    nodes = []
    for _ in range(100):
        nodes.append(_tuple_new(NamedNode, (_entry, _slot, _arg_slots, _values, None, None)))
    for entry, out, arg_slots, values, pullback, y in reversed(nodes):
        pass


def slots():
    nodes = []
    for _ in range(100):
        nodes.append(SlotsNode(_entry, _slot, _arg_slots, _values, None, None))
    for n in reversed(nodes):
        entry, out, arg_slots, values, pullback, y = n.entry, n.out, n.arg_slots, n.values, n.pullback, n.y


FORMS = {"tuple": plain_tuple, "namedtuple": named_tuple, "slots": slots}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--form", choices=FORMS)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    if args.form:
        for _ in range(args.calls):
            FORMS[args.form]()
        return
    times: dict[str, list[float]] = {name: [] for name in FORMS}
    for r in range(args.rounds):
        for name in (FORMS if r % 2 else reversed(list(FORMS))):
            times[name].append(min(timeit.repeat(FORMS[name], number=200, repeat=3)) / 200 / 100)
    for name, t in times.items():
        ratios = sorted(a / b for a, b in zip(t, times["tuple"]))
        print(f"{name:10s} {sorted(t)[len(t) // 2] * 1e9:6.0f} ns a node, {ratios[len(ratios) // 2]:.2f}x the tuple's")


if __name__ == "__main__":
    main()
