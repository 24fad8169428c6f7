"""vLLM's Prometheus counters ⇄ traces (engine.interop.prometheus): a scrape in as an aggregate run with
the exact histogram, any trace out under vLLM's names, and one-line errors on hostile scrapes."""

import pytest

from engine.interop import formats, prometheus
from engine.interop.diagnose import peer_metrics
from engine.interop.peer import to_trace
from engine.trace.format import TraceError, loads_trace
from engine.trace.loadbench import synthetic_records

L = 'engine="0",model_name="qwen"'


def scrape(N=10, D=40, A=19, P=(8, 6, 3, 2), G=70, extra="") -> bytes:
    rows = ["# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts counter",
            f"vllm:spec_decode_num_drafts_total{{{L}}} {float(N)}",
            f"vllm:spec_decode_num_drafts_created{{{L}}} 1.7e9",
            f"vllm:spec_decode_num_draft_tokens_total{{{L}}} {float(D)}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{L}}} {float(A)}",
            *(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{L},position="{i}"}} {float(p)}'
              for i, p in enumerate(P)),
            f"vllm:generation_tokens_total{{{L}}} {float(G)}", extra]
    return ("\n".join(rows) + "\n").encode()


def test_scrape_becomes_an_aggregate_run_with_the_exact_histogram():
    data = scrape()
    assert formats.detect(data) == "vllm-prom"
    t = formats.loads_peer(data, "m.prom")
    m = peer_metrics(t)["pooled"]
    assert m["num_accepted_tokens_per_pos"] == [8, 6, 3, 2]  # the counters back, exactly
    assert m["acceptance_histogram"] == [2, 2, 3, 1, 2]  # h_j = P_{j-1} - P_j
    assert m["mean_acceptance_length"] == pytest.approx(1 + 19 / 10, abs=1e-12)
    assert m["draft_acceptance_rate"] == pytest.approx(19 / 40, abs=1e-12)
    assert sum(s["emitted"] for s in t.steps) == 70  # + G − N − A undrafted steps
    assert {"step order", "request boundaries"} <= set(t.header["imported"]["lacks"])


def test_variable_windows_leave_the_window_unknown():
    t = formats.loads_peer(scrape(D=33), "m.prom")
    assert all(s["window"] is None for s in t.steps if s["accepted"] or s["emitted"] > 1)
    assert t.summary["draft_acceptance_rate"] is None


@pytest.mark.parametrize("kw, field", [
    ({"P": (8, 9, 3, 2), "A": 22}, "position 1"),  # acceptance is a prefix: non-increasing
    ({"P": (11, 6, 3, 2), "A": 22}, "position 0"),  # more than the drafts
    ({"A": 18}, "num_accepted_tokens_total"),  # positions do not sum to it
    ({"D": 50}, "num_draft_tokens_total"),  # more than N × K
    ({"D": 10, "A": 19}, "num_accepted_tokens_total"),  # accepted > drafted
    ({"N": 10 ** 13}, "num_drafts"),  # huge
])
def test_hostile_scrapes(kw, field):
    with pytest.raises(TraceError) as e:
        prometheus.scrape_records(scrape(**kw), "m.prom")
    assert field in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("m.prom")


def test_hostile_scrape_text():
    for data, field in ((scrape().replace(b" 19.0", b" NaN"), "num_accepted_tokens_total"),
                        (scrape()[:-60], "cut off"),  # cut mid-line: no final newline
                        (scrape().replace(b'position="2"', b'position="x"'), "position"),
                        (b"# nothing\nother_metric 1\n", "no vllm:spec_decode"),
                        (scrape(extra='vllm:spec_decode_num_drafts_total{model_name="b"} 1.0'), "--model"),
                        (scrape().replace(b'{engine="0",model_name="qwen"} 10.0', b'{engine="0" 10.0'), "line 3")):
        with pytest.raises(TraceError) as e:
            prometheus.scrape_records(data, "m.prom")
        assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_export_then_import_keeps_the_counters(tmp_path):
    import json

    t = loads_trace("".join(json.dumps(r) + "\n" for r in synthetic_records(40, 10)).encode(), "s.jsonl")
    text = prometheus.to_prometheus(t)
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name=' in text
    c = prometheus.counters(text.encode(), "s.prom")
    mine = peer_metrics(t)["pooled"]
    assert c["N"] == mine["num_spec_steps"] and c["A"] == mine["num_accepted_draft_tokens"]
    assert c["P"] == mine["num_accepted_tokens_per_pos"] and c["G"] == t.summary["new_tokens"]
    back = to_trace(prometheus.scrape_records(text.encode(), "s.prom"), "s.prom")
    assert peer_metrics(back)["pooled"]["acceptance_histogram"] == mine["acceptance_histogram"]
    assert back.summary["new_tokens"] == t.summary["new_tokens"]
