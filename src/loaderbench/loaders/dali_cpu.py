"""`dali-cpu`: DALI decodes on the CPU (libjpeg-turbo threads) and augments on the GPU; with several GPUs, one
pipeline per GPU on its own shard, as dali-mc."""

from . import dali


def build(ctx):
    return dali.build(ctx, decode="cpu", per_gpu=True)
