"""Run at every start of Python under `loaderbench watch`: install the probe, then the sitecustomize this one hides.

The probe is loaded from its file (../probe.py), so the watched command needs no loaderbench on its path; the next
`sitecustomize` on sys.path (a distribution's, a virtual environment's) is then imported as Python would have.
"""

import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))


def _install_probe() -> None:
    spec = importlib.util.spec_from_file_location("_loaderbench_watch_probe", os.path.join(_here, "..", "probe.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install()


def _chain() -> None:
    """Import the next sitecustomize on sys.path, if any, leaving this module in place."""
    own = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    try:
        if importlib.util.find_spec("sitecustomize") is not None:
            importlib.import_module("sitecustomize")
    finally:
        sys.path[:] = saved
        if own is not None:
            sys.modules["sitecustomize"] = own


_install_probe()
_chain()
