"""What a cell's rate would be, predicted from its parts: the parts read from the records of one run (`measured`),
each row's parts found and made into its three sides (`parts`), the terms and the class of the one that binds
(`terms`), MobileNetV2's measured n-GPU ceiling ratios (`ratios`), every loader x model x GPU count as one matrix
(`predictions`), each prediction's interval and its coverage (`intervals`), the scores per class (`scoring`) and the
matrix as text (`render`). Importing the package imports none of its modules."""

from loaderbench.core.util import lazy_exports

_EXPORTS = {
    "matrix": "predictions",
    "predict": "predictions",
    "scores": "scoring",
    "render_matrix": "render",
    "grid": "render",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
