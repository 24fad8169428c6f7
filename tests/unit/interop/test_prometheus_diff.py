"""A run from two Prometheus scrapes (engine.interop.prometheus.diff): the counters after the run minus
those before it are the run — checked against vLLM's own per-request records of the same run."""

import pytest

from engine.interop import formats, prometheus, vllm
from engine.interop.diagnose import peer_metrics
from engine.interop.peer import PeerError, to_trace
from tests.peer_mutations import FIX

RUNS = ["vllm-draft-k2", "vllm-draft-k4", "vllm-ngram-k4"]


@pytest.mark.parametrize("run", RUNS)
def test_after_minus_before_is_the_run_its_records_describe(run, tmp_path):
    after, before = FIX / f"{run}.prom", FIX / f"{run}.before.prom"
    t = formats.import_peer("vllm-prom", after, tmp_path / "t.jsonl", before=before)
    scraped = peer_metrics(t)["pooled"]
    records = peer_metrics(to_trace(vllm.vllm_records((FIX / f"{run}.jsonl").read_bytes(), run), run))["pooled"]
    for k in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens", "num_accepted_tokens_per_pos",
              "acceptance_histogram"):
        assert scraped[k] == records[k], k
    assert any("minus" in n for n in t.header["imported"]["notes"])
    # one scrape alone counts the warm-up request too, and says it is everything since the server started
    alone = formats.import_peer("vllm-prom", after, tmp_path / "u.jsonl")
    assert sum(s["emitted"] for s in alone.steps) > sum(s["emitted"] for s in t.steps)
    assert any("since the server started" in n for n in alone.header["imported"]["notes"])


def test_a_counter_that_went_down_is_refused_naming_it():
    after = (FIX / "vllm-draft-k4.prom").read_bytes()
    before = (FIX / "vllm-draft-k4.before.prom").read_bytes()
    with pytest.raises(PeerError, match=r"field 'num_drafts'.*went down"):
        prometheus.scrape_records(before, "a.prom", before=after, before_name="b.prom")


def test_scrapes_of_two_servers_are_refused():
    k2, k4 = (FIX / "vllm-draft-k2.prom").read_bytes(), (FIX / "vllm-draft-k4.before.prom").read_bytes()
    with pytest.raises(PeerError):
        prometheus.scrape_records(k2, "a.prom", before=k4, before_name="b.prom")


def test_before_is_only_for_scrapes(tmp_path):
    with pytest.raises(PeerError, match="--before"):
        formats.import_peer("vllm", FIX / "vllm-draft-k4.jsonl", tmp_path / "t.jsonl", before=FIX / "x.prom")
