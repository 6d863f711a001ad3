"""How much slower than on a quiet machine the tests' subprocesses and workers may run,
for the wall-clock bounds that tell a wait or a hang from work that is only slow.

On a quiet machine the factor is 1, so each bound stays the figure written in its test;
with more work running than there are cores (other jobs, a second test file beside this
one), every process gets a share of a core, and a bound stretches by as much.
"""

import os


def busy_factor() -> float:
    """The load per core over the last minute, or 1 when the machine has cores to spare."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1.0, os.getloadavg()[0] / cores)


def bound(seconds: float) -> float:
    """``seconds`` on a quiet machine, stretched by how busy it is now."""
    return seconds * busy_factor()
