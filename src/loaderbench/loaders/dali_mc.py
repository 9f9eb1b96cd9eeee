"""`dali-mc` (multi card): one DALI pipeline per GPU, each reading its own shard; no scatter."""

from . import dali


def build(ctx):
    return dali.build(ctx, decode="mixed", per_gpu=True)
