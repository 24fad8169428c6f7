"""The peers driver when a peer cannot start (engine.bench.peers.run_peers: one line naming it, the other
engines' results kept) and the busy-core check before timing (engine.bench.cores), with fakes."""

import pytest

from engine.bench import cores
from engine.bench.peers import run_peers
from tests.unit.bench.test_peers import PROMPTS, Fake

IDLE = {"ok": True, "busy": {}, "shares": {"cpu0": 0.01, "cpu1": 0.02}}


class Crashes(Fake):
    def start(self):
        raise RuntimeError("llama-server exited with SIGSEGV at 'llama threadpool init'\n<core dump follows>")


def test_a_peer_that_cannot_start_is_named_in_one_line_and_the_others_run():
    a, bad = Fake("speclab", ["ar", "spec:2"]), Crashes("llama.cpp", ["ar", "draft:4"])
    said = []
    res = run_peers([a, bad], PROMPTS, 8, warmup_tokens=0, say=said.append, core_check=lambda: IDLE)
    line = res["failed"]["llama.cpp"]
    assert line.startswith("llama.cpp could not start: RuntimeError: llama-server exited with SIGSEGV") and \
        "\n" not in line and line in said
    assert res["complete"] and {r["engine"] for r in res["rows"]} == {"speclab"}  # the other engine's results
    assert not any(isinstance(x, tuple) for x in bad.log) and bad.stopped and a.stopped


def test_when_no_engine_starts_the_run_fails_naming_them_all():
    with pytest.raises(RuntimeError, match="x could not start.*y could not start"):
        run_peers([Crashes("x", ["ar"]), Crashes("y", ["ar"])], PROMPTS, 8, say=lambda s: None,
                  core_check=lambda: IDLE)


def test_the_core_check_runs_before_timing_and_is_recorded():
    order = []

    class Logged(Fake):
        def run(self, config, prompt, n):
            order.append("run")
            return super().run(config, prompt, n)

    def check():
        order.append("check")
        return {"ok": False, "busy": {"cpu1": 0.97}, "shares": {"cpu0": 0.02, "cpu1": 0.97}}

    said = []
    res = run_peers([Logged("a", ["ar"])], PROMPTS, 8, say=said.append, core_check=check)
    assert order[0] == "check" and res["cores"]["busy"] == {"cpu1": 0.97}
    assert any("cores busy before timing" in s for s in said)
    quiet = run_peers([Fake("a", ["ar"])], PROMPTS, 8, say=said.append, core_check=lambda: IDLE)
    assert quiet["cores"]["ok"] is True


STAT_0 = "cpu  10 0 10 100 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 50 0 0 0 0 0 0\nintr 1\n"
STAT_1 = "cpu  ...\ncpu0 6 0 5 149 0 0 0 0 0 0\ncpu1 100 0 5 55 0 0 0 0 0 0\n"


def test_busy_cores_from_two_readings():
    texts = iter([STAT_0, STAT_1])
    r = cores.busy_cores(read=lambda: next(texts), sleep=lambda s: None)
    assert r["shares"] == {"cpu0": 0.01, "cpu1": 0.95} and r["busy"] == {"cpu1": 0.95} and r["ok"] is False

    def broken():
        raise OSError("no /proc")

    assert cores.busy_cores(read=broken, sleep=lambda s: None)["ok"] is None


class DiesOnActivate(Fake):
    """vLLM's shape: starts, then its per-config engine dies (a wheel built for AVX-512 on an AVX2 CPU: SIGILL)."""

    def activate(self, config):
        if config != "ar":
            raise RuntimeError("vLLM worker exited (-4): see build/peers/vllm-draft-2.log\nmore")
        super().activate(config)


def test_a_peer_that_dies_when_a_config_starts_is_dropped_and_what_ran_is_kept():
    a = Fake("speclab", ["ar", "spec:2"])
    v = DiesOnActivate("vllm", ["ar", "spec:2", "spec:4"], one_at_a_time=True)
    said = []
    res = run_peers([a, v], PROMPTS, 8, warmup_tokens=0, say=said.append, core_check=lambda: IDLE)
    line = res["failed"]["vllm"]
    assert line == "vllm could not start spec:2: RuntimeError: vLLM worker exited (-4): see build/peers/vllm-draft-2.log"
    assert line in said and res["complete"]
    rows = {(r["engine"], r["config"]) for r in res["rows"]}
    assert ("vllm", "ar") in rows and ("vllm", "spec:2") not in rows and ("speclab", "spec:2") in rows
    assert "activate spec:4" not in v.log  # dropped for the rounds after too
    assert sum(1 for r in res["runs"] if r["engine"] == "speclab") == 3 * 2 * 3  # every round still ran


def test_an_engine_dying_before_any_run_fails_the_run_naming_it():
    with pytest.raises(RuntimeError, match="vllm could not start spec:2"):
        run_peers([DiesOnActivate("vllm", ["spec:2", "ar"], one_at_a_time=True)], PROMPTS, 8, warmup_tokens=0,
                  say=lambda s: None, core_check=lambda: IDLE)
