"""Build the HTML API reference of adrules and executors from their docstrings (pdoc).

    python docs/api.py [OUTPUT_DIR]      # default docs/api; then open OUTPUT_DIR/index.html

Any pdoc warning (a name in __all__ that does not resolve, a module that fails to import,
a docstring pdoc cannot render) is an error, so CI fails on a broken docstring.
"""

import sys
import warnings
from pathlib import Path

import pdoc

import executors

# DaskExecutor and JoblibExecutor are imported on first use (module __getattr__), so that
# "import executors" needs neither distributed nor joblib; pdoc reads the module's
# __dict__, so resolve them first.
for _name in ("DaskExecutor", "JoblibExecutor"):
    setattr(executors, _name, getattr(executors, _name))


def main(argv):
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "api"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        pdoc.pdoc("adrules", "executors", output_directory=out)
    print(f"API reference: {out / 'index.html'}")


if __name__ == "__main__":
    main(sys.argv)
