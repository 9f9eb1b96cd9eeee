"""`dali-wds`: DALI reads the tier's WebDataset shards (`readers.webdataset`, with the index files staging wrote),
decodes on the GPU (`mixed`, on the CPU without one) and augments as the other DALI loaders; one pipeline per GPU,
each on its own share of the samples, as dali-mc."""

from . import dali


def build(ctx):
    return dali.build(ctx, decode="mixed", per_gpu=True, shards=True)
