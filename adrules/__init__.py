"""adrules: ChainRules-style derivative rules and a tracer for plain NumPy code.

>>> import numpy as np, adrules as ad
>>> ad.gradient(lambda x: np.sum(np.sin(x) ** 2), np.array([0.0, 1.0]))[0].round(4)
array([0.    , 0.9093])
"""

from .api import RuleConfig, frule, frule_via_ad, gradient, jvp, pullback, rrule, rrule_via_ad, value_and_gradient
from .projection import ProjectTo
from .pytrees import register_node
from .registry import non_differentiable, primitive, scalar_rule
from .tangents import InplaceableThunk, NoTangent, Tangent, Thunk, ZeroTangent, unthunk
from . import rules  # noqa: F401  (registers the NumPy rule library)
from . import testing  # noqa: F401
from ._psum.parallel import pmap, psum
from .derivatives import hessian, hvp, jacobian
from .transforms import elementwise_grad, grad, value_and_grad
from .adaptors import hessian_vector_product, jacfwd, jacrev, make_jvp, make_vjp
from . import _state
from executors import Abandoned as _Abandoned, abandoned_test as _abandoned_test

# a trace inside an executor's task stops when the task's map raises
_state.connect_tasks(_abandoned_test, _Abandoned)
del _Abandoned, _abandoned_test

__all__ = [
    "gradient", "value_and_gradient", "pullback", "jvp", "rrule_via_ad", "frule_via_ad",
    "rrule", "frule", "primitive", "scalar_rule", "non_differentiable", "RuleConfig",
    "NoTangent", "ZeroTangent", "Tangent", "Thunk", "InplaceableThunk", "unthunk", "ProjectTo",
    "register_node", "testing", "psum", "pmap", "jacobian", "hessian", "hvp",
    "grad", "value_and_grad", "elementwise_grad",
    "jacfwd", "jacrev", "hessian_vector_product", "make_jvp", "make_vjp",
]
__version__ = "0.1.0"
