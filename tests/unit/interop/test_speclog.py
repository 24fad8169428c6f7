"""llama.cpp fork's --spec-log-file rounds → traces (engine.interop.speclog): one verify step per round
with its draft kept, exact per-step acceptance, inferred requests, one-line errors."""

import json

import pytest

from engine.interop import diagnose, formats, speclog
from engine.interop.peer import PeerError
from tests.peer_mutations import FIX

PATH = FIX / "llamacpp-speclog.jsonl"
ROUNDS = [json.loads(x) for x in PATH.read_text().splitlines()]


def test_detected_and_every_round_is_a_step_with_its_draft():
    data = PATH.read_bytes()
    assert formats.detect(data) == "llamacpp-speclog"
    t = formats.loads_peer(data, PATH.name)
    assert len(t.steps) == len(ROUNDS)
    for s, r in zip(t.steps, ROUNDS):
        a, n = r["verify"]["n_accepted"], r["draft"]["n"]
        assert (s["window"], s["accepted"], s["emitted"]) == (n, a, a + 1)
        assert s["draft_tokens"] == [x["id"] for x in r["draft"]["tokens"]]
        assert s["q_draft"] == [x["p"] for x in r["draft"]["tokens"]]
        assert s["emitted_tokens"] == s["draft_tokens"][:a] + [r["verify"]["target_id"]]
        assert (s["bonus"] is not None) == (a == n) and s["stop_reason"] == r["draft"]["stop_reason"]
        assert s["t_draft_ms"] == pytest.approx(r["timing"]["t_draft_us"] / 1e3)
    # slot 0, slot 1, then slot 0 again from an earlier position: three prompts
    assert len(t.requests) == 3
    lacks = t.header["imported"]["lacks"]
    assert "draft_tokens" not in lacks and "q_draft" not in lacks and "p_target" in lacks
    m = diagnose.peer_metrics(t)["pooled"]
    assert m["num_accepted_draft_tokens"] == sum(r["verify"]["n_accepted"] for r in ROUNDS)
    assert m["num_accepted_tokens_per_pos"][0] == sum(1 for r in ROUNDS if r["verify"]["n_accepted"] > 0)
    assert diagnose.diagnose(t)["c_source"].startswith("from the trace's timings")  # draft µs are logged


@pytest.mark.parametrize("edit, field", [
    (lambda r: r["verify"].update(rej_pos=0), "verify.rej_pos"),
    (lambda r: r["draft"].update(n=9), "draft.n"),
    (lambda r: r["draft"]["tokens"][0].update(p=1.5), "draft.tokens[0].p"),
    (lambda r: r["draft"]["tokens"][0].update(entropy=40.0), "draft.tokens[0].entropy"),
    (lambda r: r["draft"]["tokens"][1].update(pos=0), "draft.tokens[1].pos"),
    (lambda r: r["draft"].update(stop_reason="bored"), "draft.stop_reason"),
    (lambda r: r["verify"].update(n_accepted=99), "verify.n_accepted"),
    (lambda r: r["verify"].update(target_id=-3), "verify.target_id"),
    (lambda r: r["timing"].update(t_verify_us="fast"), "timing.t_verify_us"),
    (lambda r: r["draft"]["tokens"][0].update(top_k=[[1, 2, 3]]), "top_k[0]"),
])
def test_hostile_rounds_name_the_line_and_field(edit, field):
    rounds = json.loads(json.dumps(ROUNDS))
    edit(rounds[1])
    data = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rounds).encode()
    with pytest.raises(PeerError) as e:
        speclog.speclog_records(data, "s.jsonl")
    msg = str(e.value)
    assert msg.startswith("s.jsonl: line 2") and field in msg and "\n" not in msg, msg
