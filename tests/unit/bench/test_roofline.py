"""engine.bench.roofline: the weight bytes a one-token step reads, counted on tiny models per path, and the
roofline fraction's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.bench.roofline import annotate, bytes_per_token, fraction, gguf_bytes_per_token, roofline_tokens_per_s
from engine.core.lm import HFModel
from engine.kernels.quant import quantize_model
from engine.models.tiny import tiny_llama

# tiny_llama(0): vocab 64, hidden 32, MLP 64, 2 layers, 4 heads of 8, 2 KV heads. (N, K) per layer:
LAYER = [(32, 32), (16, 32), (16, 32), (32, 32), (64, 32), (64, 32), (32, 64)]  # q k v o gate up down
LINEAR_PARAMS = 2 * sum(n * k for n, k in LAYER)  # 18,432
HEAD_PARAMS = 64 * 32
NORMS = (2 * 2 + 1) * 32  # two per layer and the final one


def test_dense_fp32_counts_every_linear_the_whole_head_and_one_embedding_row():
    tb = bytes_per_token(tiny_llama(0))
    assert tb.linear == 4 * LINEAR_PARAMS == 73_728
    assert tb.head == 4 * HEAD_PARAMS
    assert tb.embedding == 4 * 32  # a gather: one row per token
    assert 4 * NORMS <= tb.other <= 4 * NORMS + 64  # the norms, and the rotary frequencies (a few floats)
    assert tb.total == tb.linear + tb.head + tb.embedding + tb.other
    assert tb.kv_per_context_token == 2 * 2 * 2 * 8 * 4  # K and V · layers · KV heads · head dim · fp32
    assert tb.to_dict()["bytes_per_token"] == tb.total


def test_a_tied_head_is_counted_once_as_the_head_not_dropped_as_the_embedding():
    untied = bytes_per_token(tiny_llama(0))
    m = tiny_llama(0)
    m.lm_head.weight = m.model.embed_tokens.weight
    tied = bytes_per_token(m)
    assert tied.head == untied.head == 4 * HEAD_PARAMS and tied.embedding == 4 * 32 and tied.total == untied.total


def test_bf16_halves_the_bytes_and_a_reduced_head_reads_only_its_rows():
    m = tiny_llama(0).to(torch.bfloat16)
    full = bytes_per_token(HFModel(m))  # the dense kernel's fused q|k|v and gate|up views are counted once
    assert full.linear == 2 * LINEAR_PARAMS and full.head == 2 * HEAD_PARAMS
    reduced = bytes_per_token(HFModel(tiny_llama(0).to(torch.bfloat16), vocab_subset=torch.arange(0, 64, 2)))
    assert reduced.head == full.head // 2 and reduced.linear == full.linear


def test_views_of_one_buffer_count_their_own_rows_and_a_shared_tensor_counts_once():
    buf = torch.zeros(48, 32)
    a, b, c = torch.nn.Linear(32, 32, bias=False), torch.nn.Linear(32, 16, bias=False), torch.nn.Linear(32, 32, bias=False)
    a.weight = torch.nn.Parameter(buf[:32], requires_grad=False)
    b.weight = torch.nn.Parameter(buf[32:], requires_grad=False)
    c.weight = a.weight  # the same tensor in two modules: one read per step, not two
    tb = bytes_per_token(torch.nn.Sequential(a, b, c))
    assert tb.linear == buf.numel() * 4 and tb.head == 0


@pytest.mark.parametrize("kernel", ["torch", "auto"])
def test_the_quantized_path_counts_packed_buffers_never_the_dense_weight_it_keeps(kernel):
    m = tiny_llama(0)
    quantize_model(m, "int8", kernel=kernel)
    tb = bytes_per_token(HFModel(m))
    head = m.get_output_embeddings()
    assert isinstance(getattr(head, "weight", None), torch.Tensor)  # kept for shape readers, never streamed
    if type(head).__name__ == "QGemmLinear":  # 8-bit codes + fp16 scale and minimum per group of 32 inputs
        per = lambda n, k: n * k + 2 * 2 * n * (k // 32)
    else:  # torch int8: codes + one fp32 scale per output row
        per = lambda n, k: n * k + 4 * n
    assert tb.linear == 2 * sum(per(n, k) for n, k in LAYER)
    assert tb.head == per(64, 32)
    assert tb.total < bytes_per_token(tiny_llama(0)).total / 2.5


def test_fraction_is_tokens_per_second_times_bytes_over_bandwidth():
    assert fraction(2.80, 3.09e9, 10.0) == pytest.approx(0.8652)  # the module doc's worked example
    assert fraction(3.14, 1.1e9, 10.0) == pytest.approx(0.3454)
    assert roofline_tokens_per_s(3.09e9, 10.0) == pytest.approx(3.236, rel=1e-3)
    assert fraction(1.0, 1e9, 1.0) == pytest.approx(1.0)  # at the roofline exactly
    for bad in ((None, 1e9, 10.0), (2.0, None, 10.0), (2.0, 1e9, None), (2.0, 1e9, 0.0), (-1.0, 1e9, 10.0)):
        assert fraction(*bad) is None
    with pytest.raises(ValueError, match="positive"):
        roofline_tokens_per_s(0, 10.0)


def test_annotate_prices_each_row_against_its_own_paths_target():
    rows = [{"config": "ar", "tokens_per_s": 2.0, "decode_tokens_per_s": 2.5},
            {"config": "ar", "weights": "quantized", "tokens_per_s": 3.0},
            {"config": "fixed:2", "weights": "int4", "tokens_per_s": 3.0}]
    out = annotate(rows, {"dense": 2e9, "quantized": 1e9}, 10.0)
    assert out[0]["roofline_fraction"] == pytest.approx(0.4) and out[0]["decode_roofline_fraction"] == pytest.approx(0.5)
    assert out[1]["roofline_fraction"] == pytest.approx(0.3) and "decode_roofline_fraction" not in out[1]
    assert out[2]["roofline_fraction"] is None  # no byte count for that path: unknown, not zero
    assert "roofline_fraction" not in rows[0]  # the input rows are left as they were
    assert all(r["roofline_fraction"] is None for r in annotate(rows, {"dense": 2e9}, None))


def test_gguf_bytes_exclude_a_gathered_embedding_only_when_the_file_has_its_own_head(tmp_path):
    gguf = pytest.importorskip("gguf")

    def write(path, names):
        w = gguf.GGUFWriter(str(path), "llama")
        for name, shape in names:
            w.add_tensor(name, np.zeros(shape, np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    layer = ("blk.0.attn_q.weight", (8, 8))
    untied = write(tmp_path / "u.gguf", [("token_embd.weight", (4, 8)), ("output.weight", (4, 8)), layer])
    tied = write(tmp_path / "t.gguf", [("token_embd.weight", (4, 8)), layer])
    assert gguf_bytes_per_token(untied) == 4 * (32 + 64)
    assert gguf_bytes_per_token(tied) == 4 * (32 + 64)  # the embedding is the head's read
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert gguf_bytes_per_token(tmp_path / "empty.gguf") is None and gguf_bytes_per_token(tmp_path / "none") is None
