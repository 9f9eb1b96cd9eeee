"""The worker-fed loaders' endless sampler: each pass a fresh shuffle, ddp shards disjoint, no epoch end."""

from __future__ import annotations

import itertools

import pytest
import torch

from loaderbench.loaders.common import PassSampler


def passes(sampler: PassSampler, k: int) -> list[list[int]]:
    it = iter(sampler)
    return [list(itertools.islice(it, sampler.per_rank)) for _ in range(k)]


def test_every_pass_is_a_new_permutation_of_the_whole_dataset():
    got = passes(PassSampler(50, seed=3), 4)
    assert all(sorted(p) == list(range(50)) for p in got)
    assert len({tuple(p) for p in got}) == 4  # a new order each pass
    assert passes(PassSampler(50, seed=3), 4) == got  # seeded: the same stream again
    assert passes(PassSampler(50, seed=4), 1) != got[:1]


def test_ddp_ranks_take_disjoint_equal_shards_of_each_pass():
    ranks = [passes(PassSampler(23, seed=1, rank=r, world=3), 3) for r in range(3)]
    for k in range(3):
        shards = [set(ranks[r][k]) for r in range(3)]
        assert all(len(s) == 23 // 3 for s in shards)
        assert not (shards[0] & shards[1]) and not (shards[1] & shards[2]) and not (shards[0] & shards[2])


def test_a_dataloader_over_it_never_ends_an_epoch():
    data = torch.utils.data.TensorDataset(torch.arange(12))
    loader = torch.utils.data.DataLoader(
        data, batch_size=5, sampler=PassSampler(12, seed=0), drop_last=True, num_workers=2, persistent_workers=True
    )
    batches = list(itertools.islice(iter(loader), 12))  # 5 passes' worth from one iterator, no StopIteration
    seen = torch.cat([b[0] for b in batches])
    assert len(seen) == 60 and torch.bincount(seen).tolist() == [5] * 12  # every image once a pass


def test_bad_rank_is_refused():
    with pytest.raises(ValueError, match="rank 2 of 2"):
        PassSampler(10, 0, rank=2, world=2)
