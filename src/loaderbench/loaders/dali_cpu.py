"""`dali-cpu`: DALI decodes on the CPU (libjpeg-turbo threads) and augments on the GPU."""

from . import dali


def build(ctx):
    return dali.build(ctx, decode="cpu", per_gpu=False)
