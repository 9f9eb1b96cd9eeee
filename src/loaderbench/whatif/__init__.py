"""What a cell's rate would be, predicted from its parts: the parts read from the records of one run (`measured`: the
loader alone, each model's compute ceiling, the host's cores), the model joining them and the fit of its one
parameter k (`model`), each 1-GPU configuration predicted, fitted on one model's cells and checked on the others'
(`onegpu`), the same cells carried to n GPUs under dp and ddp (`ngpu`), and the predictions as text (`render`).
Importing the package imports none of its modules."""

from loaderbench.core.util import lazy_exports

_EXPORTS = {
    "predict": "onegpu",
    "score": "onegpu",
    "fit_error": "onegpu",
    "scale": "ngpu",
    "render_predict": "render",
    "render_scale": "render",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
