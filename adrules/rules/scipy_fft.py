"""Rules: ``scipy.fft``'s transforms and shifts, complex values included, as ``numpy.fft``'s.

``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``ihfft``, their ``2`` and ``n`` forms (``hfft2``,
``hfftn``, ``ihfft2``, ``ihfftn`` too), ``fftshift`` and ``ifftshift``, with ``n``/``s``,
``axis``/``axes`` and ``norm`` by position or keyword. SciPy's functions call ``np.asarray`` on
their input, so each name becomes an ``@adrules.primitive`` (``_scipy_entry.replace_function``),
with the rules of ``rules/fft.py``: the transforms compute the same values as NumPy's, and the
pullbacks are their adjoints written with ``numpy.fft``. ``workers`` is passed on to compute the
value; ``overwrite_x`` is ignored (the value is computed with ``overwrite_x=False``: an input
overwritten in place would change what other rules on the tape read).
"""

import scipy.fft as sf

from ._scipy_entry import replace_function
from .fft import MANY_AXES, ONE_AXIS, register_shifts, register_transform


def _workers_only(f, options):
    """SciPy's ``overwrite_x, workers``: the input is never overwritten; workers as given."""
    return (False, *options[1:])


for _name in (*ONE_AXIS, *MANY_AXES):
    register_transform(replace_function(sf, _name), _name, _workers_only)

_shift, _unshift = replace_function(sf, "fftshift"), replace_function(sf, "ifftshift")
register_shifts(_shift, _unshift)
register_shifts(_unshift, _shift)
