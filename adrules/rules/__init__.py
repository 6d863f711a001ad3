"""The NumPy rule library: one module per family, each a table of registrations."""

from . import ufuncs, reductions, shape, indexing, linalg, nondiff  # noqa: F401
from . import elementwise  # noqa: F401,E402
from . import signal  # noqa: F401,E402
from . import shape_composed  # noqa: F401,E402
from . import statistics  # noqa: F401,E402
from . import linalg_composed  # noqa: F401,E402
from . import higher_order  # noqa: F401,E402
from . import histograms  # noqa: F401,E402
from . import fft  # noqa: F401,E402
from ._optional import load_with  # noqa: E402

load_with("scipy.special", "adrules.rules.scipy_special", "adrules.rules.scipy_special_python")
load_with("scipy.stats", "adrules.rules.scipy_stats", "adrules.rules.scipy_stats_multivariate")
load_with("scipy.linalg", "adrules.rules.scipy_linalg")
load_with("scipy.signal", "adrules.rules.scipy_signal")
load_with("scipy.integrate", "adrules.rules.scipy_integrate")
load_with("scipy.fft", "adrules.rules.scipy_fft")
