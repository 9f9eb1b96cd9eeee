"""`dali-sc` (single card): one DALI pipeline on GPU 0 decodes (nvJPEG, `mixed`) and augments the whole batch;
with several GPUs, DataParallel splits it across them."""

from . import dali


def build(ctx):
    return dali.build(ctx, decode="mixed", per_gpu=False)
