"""attn_split.h, the AVX-512 builds' decoder-layer attention (split by keys in chunks of 256, every query head of a
kv head together): softmax attention to float32 accuracy, the same bits whatever the number of rows or threads
(batch-invariant), across chunk boundaries, head widths, and groups wider than the eight heads taken at once."""

import math

import pytest
import torch

from engine.kernels import dense_kernel, fused, qkernel

KC = 256  # attn_split.h's FA_KC


def _libs():
    libs = []
    if dense_kernel.available() is None:
        libs.append(("bgemv", dense_kernel._lib))
    if qkernel.available() is None:
        libs.append(("qgemm", qkernel._lib))
    return [(name, lib) for name, lib in libs if getattr(lib, "speclab_attn_split", None) is not None]


LIBS = _libs()
pytestmark = pytest.mark.skipif(not LIBS, reason="no AVX-512 kernel build on this machine (the AVX2 builds run attn_row.h)")


def _case(M, nq, nkv, hd, past, seed=0, cap_extra=3):
    g = torch.Generator().manual_seed(seed)
    L = past + M
    q = (torch.randn(M, nq, hd, generator=g) * 2).bfloat16()
    k = torch.randn(1, nkv, L + cap_extra, hd, generator=g).bfloat16()  # capacity past the rows: strides as a cache
    v = torch.randn(1, nkv, L + cap_extra, hd, generator=g).bfloat16()
    return q, k, v


def _reference(q, k, v, past, scale):
    M, nq, hd = q.shape
    nkv = k.shape[1]
    out = torch.empty(M, nq, hd, dtype=torch.float64)
    for i in range(M):
        n = past + i + 1
        for h in range(nq):
            g = h // (nq // nkv)
            s = (k[0, g, :n].double() @ q[i, h].double()) * scale
            out[i, h] = torch.softmax(s, 0) @ v[0, g, :n].double()
    return out


@pytest.mark.parametrize("name,lib", LIBS)
@pytest.mark.parametrize("M,nq,nkv,hd,past", [
    (1, 9, 3, 64, 1500),    # SmolLM2's heads at a long prompt: six chunks
    (5, 12, 2, 128, 254),   # the Qwen 1.5B's heads, a verify whose rows cross the first chunk's end
    (3, 14, 2, 64, 511),    # the Qwen 0.5B's: a group of 7
    (2, 10, 1, 96, 40),     # one kv head for ten query heads (two passes of eight), hd 96 (the generic path)
    (1, 4, 4, 32, 0),       # no grouping, a single key
])
def test_the_split_attention_is_softmax_attention(name, lib, M, nq, nkv, hd, past):
    q, k, v = _case(M, nq, nkv, hd, past)
    scale = 1 / math.sqrt(hd)
    got = fused.attention_split(lib, q, k, v, past, scale)
    want = _reference(q, k, v, past, scale)
    err = (got.double() - want).abs()
    assert err.max() <= 0.01 * want.abs().max() + 1e-3, err.max()
    assert (err <= 2 ** -7 * want.abs() + 1e-3).float().mean() > 0.99  # within bf16's rounding, nearly everywhere


@pytest.mark.parametrize("name,lib", LIBS)
@pytest.mark.parametrize("past", [250, KC * 2 - 3, 900])
def test_a_verify_gives_the_bits_of_one_row_steps_and_threads_do_not_matter(name, lib, past):
    """Rows of one call equal the same rows alone (their prefix the cache), whether a row's keys end before,
    at or after a chunk boundary, on 1 or 2 threads."""
    M, nq, nkv, hd = 6, 6, 2, 64
    q, k, v = _case(M, nq, nkv, hd, past, seed=past)
    scale = 0.125
    together = fused.attention_split(lib, q, k, v, past, scale, threads=2)
    for i in range(M):
        alone = fused.attention_split(lib, q[i:i + 1], k, v, past + i, scale, threads=1)
        assert torch.equal(alone[0], together[i]), i
    assert torch.equal(fused.attention_split(lib, q, k, v, past, scale, threads=1), together)


@pytest.mark.parametrize("name,lib", LIBS)
def test_keys_past_a_rows_prefix_are_not_read(name, lib):
    """Row i sees keys 0 … past + i: what the cache holds beyond (the next rows, stale capacity) changes nothing."""
    q, k, v = _case(3, 4, 2, 64, 300)
    a = fused.attention_split(lib, q, k, v, 300, 0.125)
    k2, v2 = k.clone(), v.clone()
    k2[0, :, 303:] = 1e4
    v2[0, :, 303:] = float("nan")
    assert torch.equal(fused.attention_split(lib, q, k2, v2, 300, 0.125), a)
    k2[0, :, 302] = 50.0  # the last row's own key: the last row moves, the first two do not
    b = fused.attention_split(lib, q, k2, v2, 300, 0.125)
    assert torch.equal(b[:2], a[:2]) and not torch.equal(b[2], a[2])


@pytest.mark.parametrize("name,lib", LIBS)
def test_shapes_it_cannot_take_are_refused(name, lib):
    q, k, v = _case(1, 6, 4, 64, 10)  # 6 query heads on 4 kv heads
    with pytest.raises(RuntimeError, match="refused"):
        fused.attention_split(lib, q, k, v, 10, 0.125)
    q, k, v = _case(1, 4, 2, 48, 10)  # hd not a multiple of 32
    with pytest.raises(RuntimeError, match="refused"):
        fused.attention_split(lib, q, k, v, 10, 0.125)
