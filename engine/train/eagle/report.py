"""Results and export of EAGLE-style head runs.

    report(runs, out)   docs/results/eagle-<name>.json: each run's config, final τ and its curve (τ
                        against training positions and CPU-hours), with machine, versions, command, date
    export(run, out)    models/eagle-qwen2.5-coder-1.5b: the head (config.json + model.safetensors, bf16)
                        and a model card written from the run's final.json
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from engine.trace.jsonio import write_json_atomic


def _final(run: str | Path) -> dict:
    f = Path(run) / "final.json"
    if not f.is_file():
        raise FileNotFoundError(f"{f}: the run has not finished (no final.json)")
    try:
        return json.loads(f.read_text())
    except ValueError as e:
        raise ValueError(f"{f}: not JSON ({e})") from None


def software() -> dict:
    import platform

    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


def cpu_flags() -> list[str]:
    try:
        txt = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((l for l in txt.splitlines() if l.startswith("flags")), "")
    keep = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile", "avx_vnni")
    return [f for f in line.split(":", 1)[-1].split() if f in keep]


def report(runs: list[str], out: str | Path, command: str = "") -> Path:
    from engine.models.load import machine_description

    rows = []
    for r in runs:
        f = _final(r)
        c = f["config"]
        rows.append({"run": Path(r).name, "target_layers": c["target_layers"], "init": c["init"],
                     "unroll": c["unroll"], "epochs": c["epochs"], "positions": f["positions"],
                     "tokens": f["tokens"], "tau": round(f["tau"], 4), "tau_se": round(f["tau_se"], 4),
                     "K": f["K"], "accept_by_pos": [round(a, 4) for a in f["accept_by_pos"]],
                     "cpu_h": f["cpu_h"], "train_wall_s": f["train_wall_s"],
                     "curve": [{"positions": e["positions"], "cpu_h": e["cpu_h"], "tau": round(e["tau"], 4),
                                "tau_se": round(e["tau_se"], 4), "accept_by_pos": [round(a, 4) for a in e["accept_by_pos"]]}
                               for e in f.get("curve", [])]})
    doc = {"kind": "eagle-training", "rows": rows, "machine": machine_description(), "cpu_flags": cpu_flags(),
           "software": software(), "command": command, "date": time.strftime("%Y-%m-%d"),
           "metric": "offline τ = 1 + E[leading correct drafts of K] on the target's greedy answers to 24 held-out "
                     "prompts (bonus token included), every answer position a start"}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(doc, out)
    return out


CARD = """# EAGLE-style head for Qwen2.5-Coder-1.5B-Instruct

A one-layer draft head trained here for the lab's reference target (`--draft eagle:qwen2.5-coder-1.5b`,
engine/drafters/eagle.py). It reads the target's layers {layers}, fuses them, and drafts in the target's
feature space; the target's embedding and the 32,768 draft-vocabulary rows of its LM head are read from
the target at load time and not stored here.

| | |
|---|---|
| weights | {params:,} parameters, bf16, {mb:.1f} MB |
| layer init | {init_text} |
| training-time-test unroll | {unroll} |
| data | ShareGPT first turns + Python standard-library code instructions (engine/train/blockdata/sources.py), teacher-forced, labels = the target's own argmax at every position; never Spec-Bench |
| training positions | {positions:,} ({tokens:,} distinct, {epochs:g} epoch(s)) |
| steps | {steps} |
| CPU-hours (process time) | {cpu_h:.2f} |
| machine | {machine}; flags {flags}; torch {torch}, transformers {transformers} |
| offline τ at K = {K} (held-out greedy answers, bonus included) | {tau:.3f} ± {tau_se:.3f} |
| acceptance by position | {acc} |
| date | {date} |

τ online, speedups and the cost ratio c: docs/results/ (bench-eagle-*.json) and docs/log/.

Retrain (one session on a 2-core CPU; the features are made and used in the same session). All at once:
`python -m engine experiment run eagle-qwen-train`; step by step (the features' goal: experiments/eagle-qwen-train.toml):

```bash
python -m engine eagle features
{command}
python -m engine eagle export --run ~/.cache/speclab/eagle-runs-qwen/{tag}
```
"""


def export(run: str | Path, out: str | Path) -> Path:
    f = _final(run)
    src = Path(run) / "head"
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src}: no head in the run")
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for n in ("config.json", "model.safetensors"):
        shutil.copy2(src / n, tmp / n)
    c = f["config"]
    mb = (tmp / "model.safetensors").stat().st_size / 1e6
    params = int(round((tmp / "model.safetensors").stat().st_size / 2))
    flags = " ".join(cpu_flags()) or "not recorded"
    cmd = "python -m engine eagle train " + " ".join(
        f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
        for k, v in c.items() if k in ("tag", "target_layers", "init", "unroll", "epochs", "max_tokens", "lr",
                                       "batch_tokens", "threads"))
    (tmp / "README.md").write_text(CARD.format(
        layers=c["target_layers"], params=params, mb=mb,
        init_text="the target's last layer (MLP pruned)" if f["init"].get("init") == "target" else "random", unroll=c["unroll"], positions=f["positions"],
        tokens=f["tokens"], epochs=c["epochs"], steps=f["steps"], cpu_h=f["cpu_h"], machine=f["machine"], flags=flags,
        K=f["K"], tau=f["tau"], tau_se=f["tau_se"], acc=", ".join(f"{a:.3f}" for a in f["accept_by_pos"]),
        torch=software()["torch"], transformers=software()["transformers"], date=f["date"], command=cmd, tag=c["tag"]))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
