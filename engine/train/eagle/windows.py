"""Which window for the EAGLE-style head: every draft chain of a greedy run, replayed exactly.

The window analysis of a draft *model* (engine.offline.reference / replay) rests on teacher forcing:
an autoregressive draft's prediction of y_j does not depend on where the step started. The head's
does: a step that starts with the sequence at length S drafts from the target's feature at S − 2 and
then from its own outputs, so its j-th draft is step j of the unroll anchored at u = S − 2
(engine.drafters.eagle_model, whose training-time test equals decode-time drafting, tested). Greedy
output does not depend on the window, so one target prefill of prompt + output and one unroll of
K_max steps give, for every possible step start u and every j ≤ K_max,

    d_j(u) = argmax q_j(u),  m_j(u) = max q_j(u) (the confidence a window rule reads),
    ok_j(u) = [d_j(u) = y_{u+j+1}],    a_K(u) = leading run of ok_1..ok_K (accepted drafts)

and a window policy replays exactly: a step at S with window K emits a_K(S − 2) + 1 tokens.
Cost (units of one target forward, c and the verify curve v(k) = t(k)/t(1) measured by the bench):

    T(step) = v(K + 1) + K·c,   modelled speedup = tokens ÷ Σ T(step)   (AR: 1 per token)

Rules replayed: every fixed K ≤ K_max; HF's confidence threshold (draft on while m_j ≥ t, up to K_max)
on a grid of t; the best of those thresholds in hindsight (a lower bound of the confidence ceiling:
a rule reading only m, tuned on the same data); the cost-optimal schedule (hindsight oracle: a
dynamic programme over step starts choosing K per step to minimise Σ T).
Acceptance autocorrelation: lag-1 correlation of consecutive steps' a_K at the best fixed K (the
evidence for or against adaptive windows: near 0, yesterday's acceptance says nothing about today's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Chains:
    """One request's chains: ok [U, K] bool and conf [U, K] for step starts u = plen − 2 … n − 2."""

    task: str
    plen: int
    n_out: int  # greedy output length
    ok: torch.Tensor
    conf: torch.Tensor


@torch.no_grad()
def chains(head, embed: torch.Tensor, sub_head: torch.Tensor, subset: torch.Tensor, target, prompt: list[int],
           output: list[int], K: int, task: str = "") -> Chains:
    """The head's chains over one greedy request (module doc). `target`: the transformers model."""
    x = torch.tensor([prompt + output])
    out = target(input_ids=x, output_hidden_states=True, use_cache=False)
    dt = head.fc.weight.dtype
    feats = torch.cat([out.hidden_states[l + 1] for l in head.config.target_layers], -1).to(dt)
    S = x.shape[1]
    nxt = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)
    hs = head.unrolled(F.embedding(nxt, embed).to(dt), feats, torch.arange(S)[None], K)
    P, n = len(prompt), len(output)
    U = n  # starts u = P − 2 … P + n − 3 (the last step may still draft past the end: not counted)
    ok = torch.zeros(U, K, dtype=torch.bool)
    conf = torch.zeros(U, K)
    for j, h in enumerate(hs, start=1):
        q = torch.softmax((head.norm_f(h[0]) @ sub_head.T.to(h.dtype)).float(), -1)  # [S, V']
        m, a = q.max(-1)
        d = subset[a]
        for i in range(U):
            u = P - 2 + i
            t = u + j - 1  # position whose step-j output drafts y_{u+j+1}
            if u < 0 or t >= S or u + j + 1 >= S:
                continue
            conf[i, j - 1] = m[t]
            ok[i, j - 1] = bool(d[t] == x[0, u + j + 1])
    return Chains(task, P, n, ok, conf)


def accepted(ok_row: torch.Tensor, K: int) -> int:
    a = 0
    while a < K and bool(ok_row[a]):
        a += 1
    return a


def replay(ch: Chains, window) -> tuple[list[int], list[int]]:
    """(windows, accepted) per step of one request under `window(conf_row) -> K`."""
    i, ws, acc = 0, [], []
    while i < ch.n_out:
        K = window(ch.conf[i]) if i < ch.ok.shape[0] else 0
        left = ch.n_out - i - 1  # drafts past the budget are never verified
        a = accepted(ch.ok[i], min(K, left)) if K else 0
        ws.append(K)
        acc.append(a)
        i += a + 1
    return ws, acc


def cost(ws: list[int], c: float, v) -> float:
    return sum(v(k + 1) + k * c for k in ws)


def oracle(ch: Chains, c: float, v, K: int) -> tuple[list[int], list[int]]:
    """Cost-optimal windows in hindsight: best[i] = min_K v(K+1) + K·c + best[i + a_K(i) + 1]."""
    n = ch.n_out
    best = [0.0] * (n + 1)
    choice = [0] * n
    for i in range(n - 1, -1, -1):
        opts = []
        for k in range(0, K + 1):
            a = accepted(ch.ok[i], min(k, n - i - 1)) if (k and i < ch.ok.shape[0]) else 0
            opts.append((v(k + 1) + k * c + best[min(n, i + a + 1)], k))
        best[i], choice[i] = min(opts)
    i, ws, acc = 0, [], []
    while i < n:
        k = choice[i]
        a = accepted(ch.ok[i], min(k, n - i - 1)) if k else 0
        ws.append(k)
        acc.append(a)
        i += a + 1
    return ws, acc


def verify_curve(t_target_ms: dict) -> callable:
    """v(k) = t(k)/t(1), linear between the measured points, flat-slope past the last."""
    pts = sorted((int(k), float(val)) for k, val in t_target_ms.items())
    t1 = pts[0][1]
    pts = [(k, val / t1) for k, val in pts]

    def v(k: int) -> float:
        for (k0, v0), (k1, v1) in zip(pts, pts[1:]):
            if k <= k1:
                return v0 + (v1 - v0) * (max(k, k0) - k0) / (k1 - k0)
        (k0, v0), (k1, v1) = pts[-2], pts[-1]
        return v1 + (v1 - v0) / (k1 - k0) * (k - k1)
    return v


def lag1(xs: list[int]) -> float | None:
    if len(xs) < 3:
        return None
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs)
    if var == 0:
        return None
    return sum((a - m) * (b - m) for a, b in zip(xs, xs[1:])) / var


def analyse(all_chains: list[Chains], c: float, v, K: int = 8,
            thresholds=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)) -> dict:
    """Modelled speedups per task and overall for every rule of the module doc."""
    tasks = sorted({ch.task for ch in all_chains}) + ["overall"]
    rules = {f"fixed:{k}": (lambda k: lambda row: k)(k) for k in range(1, K + 1)}
    for t in thresholds:
        rules[f"confidence:{t:g}"] = (lambda t: lambda row: next((j + 1 for j in range(K) if row[j] < t), K))(t)
    out: dict = {"c": c, "K_max": K, "v": {k: round(v(k), 4) for k in range(1, K + 2)}, "tasks": {}}
    for task in tasks:
        sel = [ch for ch in all_chains if task == "overall" or ch.task == task]
        tok = sum(ch.n_out for ch in sel)
        row: dict = {"requests": len(sel), "tokens": tok}
        for name, rule in rules.items():
            runs = [replay(ch, rule) for ch in sel]
            T = sum(cost(ws, c, v) for ws, _ in runs)
            steps = sum(len(ws) for ws, _ in runs)
            row[name] = {"speedup": tok / T, "tau": tok / steps}
        orc = [oracle(ch, c, v, K) for ch in sel]
        row["oracle"] = {"speedup": tok / sum(cost(ws, c, v) for ws, _ in orc),
                         "tau": tok / sum(len(ws) for ws, _ in orc)}
        fixed = max((k for k in rules if k.startswith("fixed:")), key=lambda k: row[k]["speedup"])
        conf = max((k for k in rules if k.startswith("confidence:")), key=lambda k: row[k]["speedup"])
        row["best_fixed"], row["best_confidence"] = fixed, conf
        row["confidence_over_best_fixed"] = row[conf]["speedup"] / row[fixed]["speedup"]
        row["oracle_over_best_fixed"] = row["oracle"]["speedup"] / row[fixed]["speedup"]
        kf = int(fixed.split(":")[1])
        accs = [a for ch in sel for a in replay(ch, lambda r: kf)[1]]
        row["acceptance_lag1_autocorrelation"] = lag1(accs)
        out["tasks"][task] = row
    return out


def accept_by_position(all_chains: list[Chains], K: int) -> list[float]:
    """P(draft j correct | drafts < j correct) over every step start: the per-position acceptance."""
    reach, hit = [0] * K, [0] * K
    for ch in all_chains:
        for i in range(ch.ok.shape[0]):
            for j in range(K):
                reach[j] += 1
                if not bool(ch.ok[i, j]):
                    break
                hit[j] += 1
    return [h / r if r else None for h, r in zip(hit, reach)]  # None: no step reached that draft


def run(head_dir: str, traces: list[str], bench_json: str, out: str, K: int = 8, c: float | None = None,
        progress: bool = True) -> dict:
    """The analysis over greedy AR traces of the Qwen target (the bench's `ar-t0.jsonl`), priced with the
    head's c and the verify curve of a bench result (or a given c): docs/results/windows-qwen-eagle.json."""
    import json
    import time
    from pathlib import Path

    from tqdm import tqdm

    from engine.models.load import machine_description
    from engine.drafters.eagle import load_head
    from engine.trace.jsonio import write_json_atomic
    from engine.trace.prompts import task_of
    from engine.trace.read import load_trace
    from engine.train.blockdata.extract import load_qwen_target
    from engine.train.eagle.report import cpu_flags, software

    try:
        b = json.loads(Path(bench_json).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{bench_json}: not a bench result ({e})") from None
    costs = b.get("costs") or {}
    if "t_target_ms" not in costs:
        raise ValueError(f"{bench_json}: no cost probe (costs.t_target_ms)")
    own = costs.get("by_drafter") or {}
    if c is None:
        eag = [v for k, v in own.items() if "@eagle:" in k]
        if not eag:
            raise ValueError(f"{bench_json}: no probe of an eagle drafter (costs.by_drafter); pass --c")
        c = float(eag[0]["c"])
    v = verify_curve(costs["t_target_ms"])
    head, subset = load_head(head_dir)
    model, _ = load_qwen_target(head.config.target, "bf16")
    head = head.to(torch.bfloat16)
    embed = model.get_input_embeddings().weight
    sub_head = model.get_output_embeddings().weight[subset]
    reqs = []
    for p in traces:
        tr = load_trace(p)
        if float((tr.header.get("sampling") or {}).get("temperature", 0.0)) != 0.0:
            raise ValueError(f"{Path(p).name}: not a greedy trace (the replay is exact for greedy output only)")
        outs: dict[int, list[int]] = {}
        for s in tr.steps:
            outs.setdefault(int(s["request_id"]), []).extend(int(t) for t in s["emitted_tokens"])
        for rid, r in tr.requests.items():
            reqs.append((task_of(r.get("category") or ""), list(r["prompt_ids"]), outs.get(rid, [])))
    all_chains = []
    for task, prompt, y in tqdm(reqs, desc="chains", disable=not progress):
        if len(y) >= 2:
            all_chains.append(chains(head, embed, sub_head, subset, model, prompt, y, K, task))
    res = analyse(all_chains, c, v, K)
    res.update({"accept_by_position": [None if a is None else round(a, 4) for a in accept_by_position(all_chains, K)],
                "head": str(head_dir), "traces": [str(t) for t in traces], "bench": str(bench_json),
                "machine": machine_description(), "cpu_flags": cpu_flags(), "software": software(),
                "date": time.strftime("%Y-%m-%d"), "metric": "modelled speedup vs AR = tokens ÷ Σ (v(K+1) + K·c), "
                "exact replay of the head's chains over the greedy output"})
    write_json_atomic(res, Path(out))
    return res
