"""What the cost-aware window compared at one step (Replay), and the one-line advice for a set of
traces (Overview, Windows): small views over engine.policies.costaware's step fields and
engine.offline.advise, kept out of the page scripts so their wording is tested without Streamlit."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go


def utilities_figure(fields: dict[str, Any], window: int) -> go.Figure | None:
    """Bars U(k) = E[emitted(k)] / T(k) for k = 0..max (k = 0: the autoregressive step), the plan k*
    and the window the step verified marked; None when the step has no costaware fields."""
    u = fields.get("u")
    if not isinstance(u, list) or not u:
        return None
    ks = list(range(len(u)))
    plan = fields.get("k_plan")
    colors = ["#d62728" if k == window else "#1f77b4" if k == plan else "#9aa5b1" for k in ks]
    fig = go.Figure(go.Bar(x=ks, y=u, marker_color=colors, hovertemplate="k=%{x}: U=%{y:.3g}<extra></extra>"))
    if (lam := fields.get("lambda")) is not None:
        fig.add_hline(y=lam, line_dash="dash", line_color="#222222", annotation_text="λ (recent rate)")
    fig.update_layout(title=f"costaware: U(k) compared ({fields.get('u_unit', '')}) · decision "
                            f"{fields.get('decision', '?')} · blue = plan k*, red = verified",
                      xaxis_title="window k (0 = autoregressive)", yaxis_title=fields.get("u_unit", "U"),
                      height=260, margin=dict(l=40, r=10, t=40, b=40), showlegend=False)
    return fig


def caption(fields: dict[str, Any]) -> str:
    """One sentence on the step's decision."""
    d = fields.get("decision")
    if d is None:
        return ""
    why = {"ar": "no window beat an autoregressive step", "probe": "a periodic re-probe with k = 1",
           "draft": "drafting had positive expected value",
           "baseline": "an AR step timed as the bar every utility is compared with",
           "catch-up": "drafting would pay, but not the drafter's catch-up over the tokens it has not seen",
           "no-probe": "no re-probe: even a perfect draft could not pay for it on these costs"}.get(d, d)
    stop = fields.get("stop")
    tail = {"drop": " — the last draft was dropped unverified (its verify cost more than it returned)",
            "value": " — stopped when one more draft was worth less than its cost",
            "cap": " — drafted to the cap"}.get(stop, "")
    ceiling = fields.get("ceiling")
    bound = (f" Ceiling with every draft accepted: {ceiling:.2f}× AR." if isinstance(ceiling, (int, float)) else "")
    return f"Decision: **{d}** ({why}){tail}.{bound}"


def pick_pair(entries: dict) -> tuple[str, list]:
    """The traces the Overview's advice is about: the (target, draft, temperature) with the most
    speculative traces, real runs before tiny demos, greedy before sampled, plus that target's
    autoregressive traces at that temperature (they price t(1)). ('', []) when nothing drafted."""
    groups: dict[tuple, list] = {}
    for e in entries.values():
        i = e.info
        if i["draft"]:
            groups.setdefault((bool(i["demo"]), i["temperature"] not in (0, 0.0), i["target"], i["draft"],
                               i["temperature"]), []).append(e)
    if not groups:
        return "", []
    key = min(groups, key=lambda k: (k[0], k[1], -len(groups[k])))
    ar = [e for e in entries.values() if not e.info["draft"] and e.info["target"] == key[2]
          and e.info["temperature"] == key[4]]
    return f"{key[2]} ← {key[3]}", [e.trace for e in groups[key] + ar]


def advice(traces: list):
    """engine.offline.advise's Advice for these traces, or None when it refuses them."""
    from engine.offline.advise import advise

    try:
        return advise(traces)
    except ValueError:
        return None


def advice_line(traces: list) -> str:
    """One markdown line of advice (engine.offline.advise) for these traces, or why there is none."""
    from engine.offline.advise import advise

    try:
        adv = advise(traces)
    except ValueError as e:
        return f"No advice: {e}"
    return f"{adv.line()}" + (f" — {adv.note}" if adv.note else "")
