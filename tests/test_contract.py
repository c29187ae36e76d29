"""Every input that breaks the contract raises a clear error naming the argument."""

import pytest
import torch

import runtime
from generator.workloads import make_workload


@pytest.fixture
def good():
    return make_workload("random", 8, 1000, 32, 512, seed=0)


def call(wl, **over):
    a = dict(q=wl.q, kv=(wl.k_fp8, wl.k_scale), weights=wl.weights, cu_seqlen_ks=wl.ks, cu_seqlen_ke=wl.ke,
             top_k=wl.top_k)
    a.update(over)
    return runtime.fused_mqa_topk(**a)


def test_good_input_runs(good):
    assert call(good).shape == (8, 512)


@pytest.mark.parametrize("make_bad, error, match", [
    (lambda w: dict(q=w.q.float()), TypeError, "q: expected dtype torch.float8_e4m3fn"),
    (lambda w: dict(q=w.q[:, :, :64].contiguous()), ValueError, "q: last dimension must be 128"),
    (lambda w: dict(q=w.q.reshape(8, 16, 256)), ValueError, "q: .*last dimension"),
    (lambda w: dict(q=w.q.transpose(0, 1)), ValueError, "q: must be contiguous"),
    (lambda w: dict(q=w.q[:, :16].contiguous(), weights=w.weights[:, :16].contiguous()), ValueError, "q: 16 heads is not supported"),
    (lambda w: dict(q=w.q.tolist()), TypeError, "q: expected a torch.Tensor"),
    (lambda w: dict(kv=w.k_fp8), TypeError, "kv: expected a \\(k_fp8, k_scale\\) pair"),
    (lambda w: dict(kv=(w.k_fp8.view(torch.uint8), w.k_scale)), TypeError, "k_fp8: expected dtype"),
    (lambda w: dict(kv=(w.k_fp8[:, :64].contiguous(), w.k_scale)), ValueError, "k_fp8: expected shape"),
    (lambda w: dict(kv=(w.k_fp8, w.k_scale[:-1])), ValueError, "k_scale: expected shape \\[1000\\]"),
    (lambda w: dict(kv=(w.k_fp8, w.k_scale.double())), TypeError, "k_scale: expected dtype torch.float32"),
    (lambda w: dict(weights=w.weights[:4]), ValueError, "weights: expected shape \\[8, 32\\]"),
    (lambda w: dict(weights=w.weights.half()), TypeError, "weights: expected dtype"),
    (lambda w: dict(cu_seqlen_ks=w.ks.long()), TypeError, "cu_seqlen_ks: expected dtype torch.int32"),
    (lambda w: dict(cu_seqlen_ke=w.ke[:3]), ValueError, "cu_seqlen_ke: expected shape \\[8\\]"),
    (lambda w: dict(cu_seqlen_ke=w.ke.to("meta")), ValueError, "cu_seqlen_ke: on meta"),
    (lambda w: dict(top_k=100), ValueError, "top_k: 100 is not supported"),
    (lambda w: dict(top_k=512.0), TypeError, "top_k: expected an int"),
    (lambda w: dict(top_k=True), TypeError, "top_k: expected an int"),
])
def test_contract_errors_name_the_argument(good, make_bad, error, match):
    with pytest.raises(error, match=match):
        call(good, **make_bad(good))


def test_value_errors_name_the_row(good):
    ks = good.ks.clone()
    ks[5] = int(good.ke[5]) + 1
    with pytest.raises(ValueError, match="row 5 has ks = .* > ke"):
        call(good, cu_seqlen_ks=ks)
    ke = good.ke.clone()
    ke[2] = 1001
    with pytest.raises(ValueError, match="cu_seqlen_ke: row 2 has ke = 1001 > N = 1000"):
        call(good, cu_seqlen_ke=ke)
    ks = good.ks.clone()
    ks[0] = -1
    with pytest.raises(ValueError, match="cu_seqlen_ks: row 0 has ks = -1 < 0"):
        call(good, cu_seqlen_ks=ks)
    scale = good.k_scale.clone()
    scale[7] = 0
    with pytest.raises(ValueError, match="k_scale: key 7"):
        call(good, kv=(good.k_fp8, scale))
    scale[7] = float("inf")
    with pytest.raises(ValueError, match="k_scale: key 7 has scale inf"):
        call(good, kv=(good.k_fp8, scale))
    w = good.weights.clone()
    w[1, 1] = float("nan")
    with pytest.raises(ValueError, match="weights: contains NaN"):
        call(good, weights=w)


@pytest.mark.parametrize("code", [0x7F, 0xFF])
def test_fp8_nan_codes_are_rejected(good, code):
    q = good.q.clone()
    q.view(torch.uint8)[3, 5, 77] = code
    with pytest.raises(ValueError, match="q: row 3 holds an fp8 NaN code"):
        call(good, q=q)
    k = good.k_fp8.clone()
    k.view(torch.uint8)[640, 0] = code
    with pytest.raises(ValueError, match="k_fp8: key 640 holds an fp8 NaN code"):
        call(good, kv=(k, good.k_scale))
    call(good, q=q, validate=False)  # unchecked: an answer (garbage in, garbage out), no crash


@pytest.mark.parametrize("entry", [runtime.fused_mqa_topk, runtime.dense_mqa_topk])
def test_the_answer_goes_into_a_caller_owned_buffer(good, entry):
    args = (good.q, (good.k_fp8, good.k_scale), good.weights, good.ks, good.ke, good.top_k)
    expected = entry(*args)
    out = torch.full((8, 512), 7, dtype=torch.int32)  # (poisoned: every element must be written)
    assert entry(*args, out=out) is out and torch.equal(out, expected)
    with pytest.raises(ValueError, match=r"out: expected a contiguous int32 \[8, 512\]"):
        entry(*args, out=torch.empty(8, 511, dtype=torch.int32))
    with pytest.raises(ValueError, match="out: expected a contiguous int32"):
        entry(*args, out=torch.empty(8, 512, dtype=torch.int64))


def test_empty_inputs(good):
    out = call(good, q=good.q[:0], weights=good.weights[:0], cu_seqlen_ks=good.ks[:0], cu_seqlen_ke=good.ke[:0])
    assert out.shape == (0, 512)
    zero = torch.zeros(8, dtype=torch.int32)
    out = call(good, kv=(good.k_fp8[:0], good.k_scale[:0]), cu_seqlen_ks=zero, cu_seqlen_ke=zero)
    assert (out == -1).all()


def test_fused_variant_needs_cuda_tensors(good):
    from runtime.defaults import default_variant
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        call(good, variant=default_variant(32, 512))


def test_custom_op_passes_torch_opcheck(good):
    from runtime.fused import AUTO, fused_op
    # test_schema is left out: it perturbs the inputs with arithmetic fp8 tensors do not support.
    torch.library.opcheck(fused_op, (good.q, good.k_fp8, good.k_scale, good.weights, good.ks, good.ke, 512, AUTO,
                                    good.k_fp8.shape[0]),
                          test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_validation_measures_the_longest_row_and_takes_a_hint(good):
    from runtime.contract import check_inputs
    args = good.args()
    longest = int((good.ke - good.ks).max())
    assert check_inputs(*args).visible_keys == longest
    assert check_inputs(*args, check_values=False).visible_keys is None
    assert check_inputs(*args, check_values=False).longest_row == good.keys  # unknown: the chunk's N
    assert check_inputs(*args, check_values=False, max_visible_keys=5).longest_row == 5
    with pytest.raises(ValueError, match="max_visible_keys"):
        check_inputs(*args, check_values=False, max_visible_keys=good.keys + 1)
    with pytest.raises(TypeError, match="max_visible_keys"):
        check_inputs(*args, check_values=False, max_visible_keys=2.0)
    # a promise checked values break is named (unchecked, the dense kernels cut longer rows to it)
    assert check_inputs(*args, max_visible_keys=longest).visible_keys == longest
    with pytest.raises(ValueError, match="max_visible_keys: .* a row sees"):
        check_inputs(*args, max_visible_keys=longest - 1)
