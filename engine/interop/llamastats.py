"""llama.cpp's speculative statistics line → a speclab trace of totals (and per-position counts where exact).

llama.cpp (`common_speculative_print_stats`; llama-server prints it after every request at `-lv 4`) writes,
one line per speculative implementation:

    statistics draft-mtp: #calls(b,g,a) = 2 134 134, #gen drafts = 134, #acc drafts = 109,
        #gen tokens = 536, #acc tokens = 354, #mean acc len = 3.64, #acc rate/pos = (0.813, 0.716, 0.619, 0.493),
        dur(b,g,a) = 0.004, 808.560, 0.264 ms

    b, g, a       begin calls (one a request), draft calls, accept calls (= verify steps that carried a draft)
    #gen drafts   drafts generated; #acc drafts: drafts of which at least one token was accepted
    #gen tokens   drafted tokens D; #acc tokens: accepted draft tokens A (bonus excluded)
    #mean acc len 1 + A / a (printed to 2 decimals; only when a > 0, with the rates)
    #acc rate/pos accepted at draft position i ÷ a, one per position (3 decimals)

The counters run from the server's start: each line is cumulative, so consecutive lines of one
implementation are differenced into one request each (a counter that goes down is a restart: counting
starts again from zero), and the first line holds everything the server did before it — the notes say so.

What is exact: each request's verify steps, drafted and accepted totals and the mean acceptance length;
per-position counts P_i = rate_i · a where the printed rates pin them to one integer each (|rate·a − round| ≤
the print's half-unit and the counts add up: P_0 = #acc drafts, Σ P_i = A) — then the steps are exact as a
histogram (a step accepted j drafts iff positions 0 … j−1 accepted: steps ≥ j = P_{j−1}), in no known order.
Otherwise the per-step split is an even share of the totals (`accepted_per_step` lacking) and only the run's
stated per-position rates are kept, in the header (`imported.per_position`), as the engine printed them.
Output lengths, prompts and token ids are not in the line: the trace holds the verify steps only.
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine.interop.llamacpp import _windows
from engine.interop.peer import PER_STEP, Budget, PeerError, PeerRequest, PeerStep, even_split, fail, peer_records
from engine.interop.peer_json import _text
from engine.trace.check import MAX_CONTEXT, MAX_WINDOW

FORMAT = "llamacpp-stats"
LINE = re.compile(
    r"statistics\s+(?P<impl>[\w.\-]{1,64}):\s*#calls\(b,g,a\)\s*=\s*(?P<b>\d{1,12})\s+(?P<g>\d{1,12})\s+(?P<a>\d{1,12}),"
    r"\s*#gen drafts\s*=\s*(?P<gd>\d{1,12}),\s*#acc drafts\s*=\s*(?P<ad>\d{1,12}),"
    r"\s*#gen tokens\s*=\s*(?P<gt>\d{1,12}),\s*#acc tokens\s*=\s*(?P<at>\d{1,12})"
    r"(?:,\s*#mean acc len\s*=\s*(?P<mean>[^,]{1,32}),\s*#acc rate/pos\s*=\s*\((?P<pos>[^)]{0,20000})\))?")
MARK = re.compile(r"statistics\s+\S+:\s*#calls\(b,g,a\)")
COUNTERS = ("b", "g", "a", "gd", "ad", "gt", "at")


def is_stats(head: bytes) -> bool:
    return MARK.search(head.decode("utf-8", errors="replace")) is not None


def _parse(text: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, counters) of every statistics line, checked one by one."""
    out = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not MARK.search(line):
            continue
        where = f"{name}: line {no}"
        m = LINE.search(line)
        if m is None:
            fail(where, "statistics", "a statistics line cut short or garbled (expected #calls(b,g,a) … #acc tokens)")
        c: dict[str, Any] = {k: int(m[k]) for k in COUNTERS}
        c["impl"] = m["impl"]
        if max(c[k] for k in COUNTERS) > MAX_CONTEXT * 64:
            fail(where, "#gen tokens", "a counter past any run this importer takes")
        if c["at"] > c["gt"]:
            fail(where, "#acc tokens", f"{c['at']} accepted > {c['gt']} drafted (#gen tokens)")
        if c["ad"] > c["gd"] or c["ad"] > c["a"]:
            fail(where, "#acc drafts", f"{c['ad']} > #gen drafts {c['gd']} or accept calls {c['a']}")
        if c["gt"] and not c["a"]:
            fail(where, "#calls(b,g,a)", f"{c['gt']} drafted tokens but no accept calls")
        if c["a"] and c["gt"] > MAX_WINDOW * c["a"]:
            fail(where, "#gen tokens", f"{c['gt']} drafted over {c['a']} calls: windows over {MAX_WINDOW}")
        c["rates"] = None
        if m["pos"] is not None:
            try:
                mean = float(m["mean"])
                rates = [float(x) for x in m["pos"].split(",")] if m["pos"].strip() else []
            except ValueError:
                fail(where, "#acc rate/pos", "expected numbers")
            if not all(math.isfinite(x) and 0 <= x <= 1 for x in rates) or len(rates) > MAX_WINDOW:
                fail(where, "#acc rate/pos", f"expected at most {MAX_WINDOW} rates in [0, 1]")
            want = 1 + c["at"] / c["a"] if c["a"] else 1.0
            if not math.isfinite(mean) or abs(mean - want) > 0.0051:
                fail(where, "#mean acc len", f"states {m['mean'].strip()[:20]}, the counts give {want:.4f}")
            if c["a"] and abs(sum(rates) * c["a"] - c["at"]) > 0.0005 * c["a"] * max(1, len(rates)) + 1e-6:
                fail(where, "#acc rate/pos", f"the rates × {c['a']} calls add up to {sum(rates) * c['a']:.1f}, "
                                             f"not #acc tokens = {c['at']}")
            c["rates"] = rates
        out.append((where, c))
    return out


def _per_pos(c: dict[str, Any]) -> list[int] | None:
    """Cumulative accepted counts per position, when the printed rates pin each to one integer."""
    if c["rates"] is None:
        return None
    p = [round(r * c["a"]) for r in c["rates"]]
    tol = 0.0005 * c["a"]
    if tol >= 0.5 or any(abs(r * c["a"] - x) > tol + 1e-9 for r, x in zip(c["rates"], p)):
        return None
    if sum(p) != c["at"] or (p and p[0] != c["ad"]) or any(y > x for x, y in zip([c["a"], *p], p)):
        return None
    return p


def stats_records(data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    """Trace records for a log holding llama.cpp statistics lines (see the module docstring)."""
    rows = _parse(_text(data, name), name)
    if not rows:
        raise PeerError(f"{name}: no llama.cpp statistics lines (statistics <impl>: #calls(b,g,a) = …)")
    impls = sorted({c["impl"] for _, c in rows})
    if len(impls) > 1:
        raise PeerError(f"{name}: statistics of several implementations ({', '.join(impls)}): one per file")
    reqs, notes, budget = [], [], Budget()
    prev: dict[str, Any] | None = None
    exact = True
    restarts = 0
    for where, c in rows:
        if prev is not None and any(c[k] < prev[k] for k in COUNTERS):
            prev, restarts = None, restarts + 1  # the counters went down: a restarted server
        d = {k: c[k] - (prev[k] if prev else 0) for k in COUNTERS}
        P, P0 = _per_pos(c), (_per_pos(prev) if prev else [])
        if P is not None and P0 is not None:
            P0 = P0 + [0] * (len(P) - len(P0))
            dp = [x - y for x, y in zip(P, P0)] if len(P0) <= len(P) else None
        else:
            dp = None
        prev = c
        if not d["a"] and not d["b"]:
            continue  # a line repeated without a request between
        budget.take(d["a"], where, "#calls(b,g,a)")
        n, D, A = d["a"], d["gt"], d["at"]
        K = len(c["rates"] or []) or (max(1, math.ceil(D / n)) if n else 0)
        if dp is not None and sum(dp) == A and (not dp or dp[0] == d["ad"]) and \
                all(0 <= y <= x for x, y in zip([n, *dp], dp)):
            hist = [n - (dp[0] if dp else 0)] + [dp[j] - (dp[j + 1] if j + 1 < len(dp) else 0) for j in range(len(dp))]
            acc = [j for j in range(len(hist)) for _ in range(hist[j])]
        else:
            exact = False
            acc = even_split(A, n)
        if any(a > K for a in acc):
            fail(where, "#acc rate/pos", "more accepted at one step than draft positions")
        wins = _windows(acc, D, K, where) if n else []
        steps = [PeerStep(w, a, a + 1) for w, a in zip(wins, acc)]
        if not steps:
            continue
        reqs.append(PeerRequest(steps, ordered=False, question_id=len(reqs),
                                reported={"num_spec_steps": n, "num_draft_tokens": D, "num_accepted_draft_tokens": A,
                                          "num_accepted_drafts": d["ad"], "line": where.rsplit(" ", 1)[-1]}))
    if not reqs:
        raise PeerError(f"{name}: the statistics lines count no speculative steps")
    last = rows[-1][1]
    notes.append("counters run from the server's start: consecutive statistics lines are differenced into one "
                 "request each, and the first holds everything the server did before it")
    if restarts:
        notes.append(f"{restarts} restart(s): a counter went down, counting started again from zero")
    notes.append("per-step accepted counts exact as a histogram (from the per-position counts the printed rates pin "
                 "down); step order and per-step windows are not known" if exact else
                 "per-step accepted counts are even shares of each request's totals (the printed rates do not pin the "
                 "per-position counts to integers); totals, means and the rate are exact")
    lacks = ["t_draft_ms", "t_verify_ms", "t_prefill_ms", "prompt_ids", "output_ids", "step order",
             "window per step", "output length"] + ([] if exact else [PER_STEP])
    out = peer_records(FORMAT, reqs, engine={"name": "llama.cpp", "kind": f"statistics:{last['impl']}"},
                       target="(llama.cpp model)", draft=f"(llama.cpp {last['impl']})",
                       spec=f"llamacpp-stats:{last['impl']}", lacks=lacks,
                       timing="no times: the statistics line holds counts only", notes=notes, source=name,
                       command=command)
    if last["rates"] is not None and not restarts:  # the engine's own per-position rates over everything counted
        out[0]["imported"]["per_position"] = {"rates": last["rates"], "steps": last["a"],
                                              "basis": "llama.cpp #acc rate/pos, as printed (server lifetime)"}
    return out
