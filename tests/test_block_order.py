"""runtime.fused.heaviest_first: the order the fused kernels claim row blocks in (the libraries make
the same order on the GPU; tests/test_gpu.py holds them to this definition)."""

import torch

from runtime.fused import heaviest_first


def test_blocks_by_their_longest_row_then_by_index():
    # 2 rows a block; visible keys per row: block 0 (3, 5), 1 (9, 0), 2 (5, 5), 3 (0, 0), 4 (7 alone)
    ks = torch.tensor([0, 0, 1, 4, 0, 0, 2, 2, 3], dtype=torch.int32)
    ke = torch.tensor([3, 5, 10, 4, 5, 5, 2, 1, 10], dtype=torch.int32)
    assert heaviest_first(ks, ke, 100, 2).tolist() == [1, 4, 0, 2, 3]


def test_ranges_are_clamped_to_the_keys():
    ks = torch.tensor([-5, 0, 0], dtype=torch.int32)
    ke = torch.tensor([4, 50, 6], dtype=torch.int32)
    # row 0 sees keys 0..4 (4), row 1 sees 0..8 (8: ke clamped to the 8 keys), row 2 sees 6
    assert heaviest_first(ks, ke, 8, 1).tolist() == [1, 2, 0]
