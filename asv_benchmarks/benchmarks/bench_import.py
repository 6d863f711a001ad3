"""Import time, each in a fresh interpreter (asv's ``timeraw_``), with numpy for scale."""

import statistics
import subprocess
import sys
import time

from . import common


class Import:
    def timeraw_import_numpy(self):
        return "import numpy"

    def timeraw_import_adrules(self):
        return "import adrules"

    def timeraw_import_executors(self):
        return "import executors"


class ImportSubprocess:
    """Wall time of ``python -c "import adrules"`` minus ``python -c "import numpy"``,
    medians of 5 alternating runs: what importing adrules adds to a script's start."""

    unit = "ms"

    def track_import_adrules_over_numpy_ms(self):
        def run(stmt):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", stmt], check=True)
            return time.perf_counter() - t0

        adrules, numpy = [], []
        for _ in range(common.quick_or(5, 1)):
            numpy.append(run("import numpy"))
            adrules.append(run("import adrules"))
        return (statistics.median(adrules) - statistics.median(numpy)) * 1e3
