"""`python -m engine peers`: speclab, vLLM and llama.cpp on the same prompts and models, interleaved
(engine.bench.peers; the engines: engine.bench.peer_engines).

Worked example (experiments/peers-qwen.toml):
    python -m engine peers --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bf16 --threads 2 \\
        --per-task 1 --max-new-tokens 48 --speclab ar,fixed:2,costaware --vllm ar,draft:2,ngram:4 \\
        --llamacpp ar,draft:2,draft:4 --out docs/results/peers-qwen.json

An engine given '' is left out (`--vllm ''`: no vLLM). The peers live outside the project venv
(`scripts/peers/install.sh`); llama.cpp reads the GGUFs `python -m engine models --keep-gguf` keeps.
"""

from __future__ import annotations

from pathlib import Path

from engine.cli import common


def _peers_dir() -> Path:
    from engine.models.provision import cache_root

    return cache_root() / "peers"


def add_parser(sub) -> None:
    p = sub.add_parser("peers", help="speclab beside vLLM and llama.cpp on the same prompts and models, interleaved")
    common.add_target(p, default="qwen2.5-coder-1.5b")
    common.add_draft(p, default="qwen2.5-coder-0.5b")
    common.add_prompts(p, per_task=1, limit=False)
    common.add_max_new_tokens(p, 48)
    common.add_device(p, dtype="bf16", device="cpu", threads=2)
    p.add_argument("--speclab", default="ar,fixed:2,costaware", help="speclab's configs: ar and window policies ('' : none)")
    p.add_argument("--speclab-quantized", default="",
                   help="speclab's configs on the quantized fast path (--weights quantized: the GGUF's own "
                        "precision per tensor), a second speclab entry 'speclab-quantized' ('' : none)")
    p.add_argument("--speclab-weights", default="dense",
                   help="the 'speclab' entry's weights: a path, or target=PATH,draft=PATH (a mixed pair, e.g. "
                        "target=dense,draft=quantized; engine.models.pair_weights)")
    p.add_argument("--bandwidth-mib", type=int, default=512,
                   help="MiB the read-bandwidth probe streams before the run, for each row's roofline fraction (0: none)")
    p.add_argument("--vllm", default="ar,draft:2,ngram:4", help="vLLM's configs: ar, draft:K, ngram:K ('': leave vLLM out)")
    p.add_argument("--llamacpp", default="ar,draft:2,draft:4", help="llama.cpp's configs: ar, draft:K ('': leave it out)")
    p.add_argument("--vllm-python", default=None, help="the vLLM venv's python (default: <cache>/peers/vllm/bin/python)")
    p.add_argument("--vllm-memory", type=float, default=0.2,
                   help="each vLLM engine's gpu_memory_utilization (on CPU: its share of RAM for weights and KV cache)")
    p.add_argument("--llama-bin", default=None, help="llama.cpp's build/bin (default: <cache>/peers/llama.cpp/build/bin)")
    p.add_argument("--gguf-target", default=None, help="default: <cache>/gguf/TARGET.gguf")
    p.add_argument("--gguf-draft", default=None, help="default: <cache>/gguf/DRAFT.gguf")
    p.add_argument("--warmup-tokens", type=int, default=8, help="untimed run of every config on the first prompt")
    p.add_argument("--log-dir", default="build/peers", help="the peers' own logs")
    common.add_out(p, "JSON result path (rewritten after every prompt)")
    p.add_argument("--markdown", default=None,
                   help="also write a log entry's measured part here (setup, table, target check): docs/log/DATE-peers.md")
    p.set_defaults(func=cmd_peers)


def _configs(text: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in text.split(",") if c.strip())


def gguf_weights(path: Path) -> str:
    """The GGUF's file type and its two largest tensor types by bytes, e.g. "Q4_K_M (Q4_K, Q6_K)"
    (a small model's "Q4_K_M" file is mostly Q5_0 / Q8_0: its rows are not multiples of 256)."""
    try:
        from collections import Counter

        from gguf import GGUFReader, LlamaFileType

        r = GGUFReader(str(path))
        f = r.fields.get("general.file_type")
        name = LlamaFileType(int(f.parts[f.data[0]][0])).name.replace("MOSTLY_", "")
        size: Counter = Counter()
        for t in r.tensors:
            size[t.tensor_type.name] += int(t.n_bytes)
        return f"{name} ({', '.join(k for k, _ in size.most_common(2))})"
    except Exception:
        return "GGUF"


def model_path(name: str) -> Path:
    """A model's folder: a local directory as given, else the converted folder `make models` wrote."""
    from engine.models.provision import model_dir

    p = Path(name).expanduser()
    return p if (p / "config.json").is_file() else model_dir(name)


def build_engines(a) -> list:
    """The run's engine entries, in the order they start; each checks its install before anything loads."""
    from engine.bench.peer_engines import LlamaCppEngine, SpeclabEngine, VllmEngine
    from engine.bench.roofline_record import check_pair_paths
    from engine.models.pair_weights import PairWeights, parse
    from engine.models.provision import cache_root

    engines = []
    pw = parse(getattr(a, "speclab_weights", "dense"), "--speclab-weights")
    ours = ([pw] if _configs(a.speclab) else []) + ([PairWeights("quantized", "quantized")] if _configs(a.speclab_quantized)
                                                    else [])
    check_pair_paths(ours, a.draft, a.dtype, a.device)  # refusals and fallbacks, one line each, before any load
    if _configs(a.speclab):
        engines.append(SpeclabEngine(a.target, a.draft, _configs(a.speclab), a.dtype, a.device, a.threads,
                                     weights=a.dtype if pw.label == "dense" else f"{a.dtype}, {pw.label}",
                                     load_kwargs={"weights": pw.target}, draft_weights=pw.draft))
    if _configs(a.speclab_quantized):
        engines.append(SpeclabEngine(a.target, a.draft, _configs(a.speclab_quantized), a.dtype, a.device, a.threads,
                                     name="speclab-quantized", weights=f"{a.dtype}, quantized linears",
                                     load_kwargs={"weights": "quantized"}))
    base = a.draft.removesuffix("-full").removesuffix("-reduced")
    if _configs(a.vllm):
        py = a.vllm_python or str(_peers_dir() / "vllm" / "bin" / "python")
        if not Path(py).is_file():  # before model_dir: the missing install is the first thing to fix
            VllmEngine(py, Path(), Path(), _configs(a.vllm))
        engines.append(VllmEngine(py, model_path(a.target), model_path(base), _configs(a.vllm),
                                  {"bf16": "bfloat16", "fp32": "float32"}.get(a.dtype, a.dtype), a.threads,
                                  Path(a.log_dir), a.vllm_memory))
    if _configs(a.llamacpp):
        gt = Path(a.gguf_target or cache_root() / "gguf" / f"{Path(a.target).name}.gguf")
        gd = Path(a.gguf_draft or cache_root() / "gguf" / f"{Path(base).name}.gguf")
        bin_dir = Path(a.llama_bin or _peers_dir() / "llama.cpp" / "build" / "bin")
        eng = LlamaCppEngine(bin_dir, gt, gd, _configs(a.llamacpp), a.threads, Path(a.log_dir))
        eng.weights = f"{gguf_weights(gt)} ← {gguf_weights(gd)}"
        engines.append(eng)
    if not engines:
        raise ValueError("no engine to run: give configs to --speclab, --vllm or --llamacpp")
    return engines


def cmd_peers(a) -> int:
    from engine.bench.peers import PeerPrompt, format_table, run_peers, target_check
    from engine.models.load import machine_description
    from engine.trace.jsonio import write_json_atomic
    from engine.trace.prompts import encode, load_prompts, task_of

    engines = build_engines(a)
    from engine.bench.llama_build import describe
    from engine.bench.peer_engines import LlamaCppEngine

    for e in engines:  # which build flags the install kept on this CPU (also in the result: engines.<name>.build)
        if isinstance(e, LlamaCppEngine):
            print(f"{e.name} build: {describe(e.build)}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path(a.target), local_files_only=True)
    prompts = [PeerPrompt(p.question_id, task_of(p.category), p.text, tuple(encode(tok, p.text)))
               for p in load_prompts(a.prompts, per_category=a.per_task)]
    extra = {"command": common.command_line(), "machine": machine_description(), "lscpu": lscpu(),
             "prompts_file": str(a.prompts), "target": a.target, "draft": a.draft}
    from engine.bench import busy
    from engine.bench.roofline_record import peer_fractions, probe

    bandwidth = probe(getattr(a, "bandwidth_mib", 0), a.threads)

    def with_roofline(r: dict) -> dict:
        nbytes = engine_bytes(engines, a.dtype)
        return r | {"bandwidth": bandwidth.to_dict() if bandwidth else None,
                    "bandwidth_gb_per_s": bandwidth.gb_per_s if bandwidth else None, "bytes_per_token": nbytes,
                    "rows": peer_fractions(r["rows"], nbytes, bandwidth)}

    checkpoint = (lambda r: write_json_atomic(with_roofline(r) | extra, a.out)) if a.out else None
    s0 = busy.sample()
    from engine.bench.peers import NoEngineStarted

    try:
        result = with_roofline(run_peers(engines, prompts, a.max_new_tokens, a.warmup_tokens, checkpoint)) | extra
    except NoEngineStarted as e:  # one line naming every engine and why; a peer that failed alone is in `failed`
        raise ValueError(str(e)) from None
    for name, line in result["failed"].items():
        print(f"left out: {line}")
    report = busy.busy_between(s0, busy.sample())
    result["busy"] = report.to_dict() if report is not None else None  # peer servers are our children: their cores are ours
    from engine.bench.peers import ar_ratio

    result["target_check"] = {"vllm": target_check(result["rows"], peer="vllm"),
                              "llama.cpp": target_check(result["rows"], peer="llama.cpp"),
                              "quantized AR vs llama.cpp AR": ar_ratio(result["rows"], "speclab-quantized", "llama.cpp"),
                              "quantized AR vs dense AR": ar_ratio(result["rows"], "speclab-quantized", "speclab")}
    print(format_table(result["rows"]))
    for peer, t in result["target_check"].items():
        if t:
            print(f"{t['ours']} {t['ours_tokens_per_s']:.2f} tokens/s ÷ {t['peer']} {t['peer_tokens_per_s']:.2f} = "
                  f"{t['ratio']:.2f}×")
    if a.out:
        write_json_atomic(result, a.out)
    if a.markdown:
        from engine.bench.peers import log_entry
        from engine.trace.jsonio import write_text_atomic

        write_text_atomic(log_entry(result), a.markdown)
        print(f"wrote {a.markdown}: add the question, the answer and the reading")
    return 0


def engine_bytes(engines: list, dtype: str) -> dict[str, int | None]:
    """Each engine's target bytes per token: ours as counted on the loaded model, llama.cpp's from its GGUF,
    vLLM's as our dense target's at the same dtype (the same safetensors); None where unknown."""
    from engine.bench.peer_engines import LlamaCppEngine, SpeclabEngine
    from engine.bench.roofline import gguf_bytes_per_token

    dense = next((e.bytes_per_token for e in engines if isinstance(e, SpeclabEngine) and e.bytes_per_token
                  and e.load_kwargs.get("weights", "dense") == "dense" and e.dtype == dtype), None)
    out: dict[str, int | None] = {}
    for e in engines:
        if isinstance(e, SpeclabEngine):
            out[e.name] = e.bytes_per_token
        elif isinstance(e, LlamaCppEngine):
            out[e.name] = gguf_bytes_per_token(e.target)
        else:
            out[e.name] = dense
    return out


def lscpu() -> dict[str, str]:
    """Model name, cores and flags as `lscpu` prints them ({} where it is missing)."""
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Flags", "Hypervisor vendor", "L2 cache", "L3 cache")
    rows = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k: rows[k].strip() for k in keep if k in rows}
