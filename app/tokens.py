"""Token strips: generated text as HTML spans coloured by each token's fate (colours from app.plots).

HTML rather than Streamlit's `:green-background[...]` markdown because the strip needs the exact
chart colours and a hover tooltip per token (draft/target/accept probability). Every piece of text
goes through `html.escape`, so token text can never inject markup.
"""

from __future__ import annotations

import html

from app.plots import COLORS, rgba

FATE_ALPHA = 0.32  # light tint: the text stays readable on every fate colour
LEGEND_ORDER = ("accepted", "rejected", "correction", "bonus", "pending", "autoregressive")
FATE_HELP = {
    "accepted": "draft token accepted by the target",
    "rejected": "draft token rejected (first mismatch)",
    "correction": "target's replacement token at the rejection",
    "bonus": "free token after every draft was accepted",
    "pending": "drafted after the rejection: never checked",
    "autoregressive": "the target's own token: nothing was drafted this step",
}


def _text(tok: str) -> str:
    # Newlines stay line breaks (the strip is pre-wrap) but get a visible mark; tabs become ⇥.
    return html.escape(tok).replace("\n", "↵\n").replace("\t", "⇥") or "∅"


UNCHOSEN = "unchosen"  # a multi-draft block the verifier did not follow: grey (the pending colour), dashed


# The second cue besides colour (WCAG 1.4.1): each fate has its own underline style and, where two fates
# would otherwise share one, a mark after the token. Struck through: never emitted.
CUES = {"accepted": ("solid", ""), "rejected": ("solid", "✗"), "correction": ("dotted", "↻"),
        "bonus": ("double", "+"), "pending": ("dashed", ""), "autoregressive": ("none", "")}


def card(q: float | None, p: float | None, h: float | None = None, entropy: float | None = None) -> str:
    """The hover card of a drafted token: draft q, target p, min(1, p/q) (the acceptance probability of
    standard speculative sampling; the verifier's own h when it differs) and the draft's entropy."""
    rows = []
    if q is not None:
        rows.append(f"draft q = {q:.3f}")
    if p is not None:
        rows.append(f"target p = {p:.3f}")
    if q and p is not None:
        rows.append(f"min(1, p/q) = {min(1.0, p / q):.3f}")
    if h is not None and not (q and p is not None and abs(h - min(1.0, p / q)) < 5e-4):
        rows.append(f"verifier's accept prob = {h:.3f}")
    if entropy is not None:
        rows.append(f"draft entropy = {entropy:.2f} nats")
    return "\n".join(rows)


def span(tok: str, fate: str | None, tip: str = "") -> str:
    t = _text(tok)
    if fate is None:
        return f'<span title="{html.escape(tip)}">{t}</span>'
    if fate == UNCHOSEN:
        c = COLORS["pending"]
        style = f"background:{rgba(c, FATE_ALPHA / 2)};border-bottom:2px dashed {c};border-radius:3px;color:#555;"
        return f'<span class="tok tok-{UNCHOSEN}" style="{style}" title="{html.escape(tip or UNCHOSEN)}">{t}</span>'
    line, mark = CUES.get(fate, ("solid", ""))
    width = 3 if line == "double" else 2
    style = f"background:{rgba(COLORS[fate], FATE_ALPHA)};border-radius:3px;" + (
        f"border-bottom:{width}px {line} {COLORS[fate]};" if line != "none" else "")
    if fate in ("rejected", "pending"):
        style += "text-decoration:line-through;"
    cue = (f'<sup class="tok-cue" aria-hidden="true" style="font-size:0.7em;margin-left:1px;">{mark}</sup>'
           if mark else "")
    text = html.escape(tip or fate).replace("\n", "&#10;")  # the card's lines, with no raw newline in the HTML
    return (f'<span class="tok tok-{fate}" data-fate="{fate}" style="{style}" tabindex="0" '
            f'data-card="{text}" title="{text}">{t}{cue}</span>')


def strip(pieces: list[tuple[str, str | None, str]], current: list[tuple[str, str | None, str]] | None = None) -> str:
    """(text, fate or None for plain context, tooltip) → one wrapped block of HTML. `current` (the
    replayed step's block) follows the text inside an outline, so the eye finds it at once."""
    body = "".join(span(t, f, tip) for t, f, tip in pieces)
    if current:
        body += ('<span class="current-step" style="outline:2px solid #222;outline-offset:2px;border-radius:4px;">'
                 + "".join(span(t, f, tip) for t, f, tip in current) + "</span>")
    return (f'<div class="token-strip" style="font-family:ui-monospace,monospace;font-size:0.92rem;'
            f'line-height:1.9;white-space:pre-wrap;word-break:break-word;">{body}</div>')


def legend() -> str:
    items = "".join(f'{span(name, name, FATE_HELP[name])}&nbsp;&nbsp;' for name in LEGEND_ORDER)
    return f'<div style="font-size:0.85rem;">{items}</div>'


def step_pieces(step: dict, texts: dict[int, str]) -> list[tuple[str, str, str]]:
    """One verify call as strip pieces: drafted tokens by fate, then the correction or bonus token.

    `texts` maps token id → display text. Emitted tokens may be cut short by EOS or the token
    budget; then the correction/bonus is omitted, as it was never emitted."""
    from app.frames import draft_fates

    out = []
    fates = draft_fates(step["accepted"], step["window"])
    for i, (tok, fate) in enumerate(zip(step["draft_tokens"], fates)):
        ent = step.get("draft_entropy")
        tip = f"position {i + 1} · {fate}\n" + card(step["q_draft"][i], step["p_target"][i], step["accept_probs"][i],
                                                   ent[i] if isinstance(ent, list) and i < len(ent) else None)
        out.append((texts[tok], fate, tip))
    if len(step["emitted_tokens"]) > step["accepted"]:
        last = step["emitted_tokens"][-1]
        kind = ("autoregressive" if step["window"] == 0 else
                "bonus" if step.get("bonus") is not None else "correction")
        out.append((texts[last], kind, FATE_HELP[kind]))
    return out


def emitted_pieces(step: dict, texts: dict[int, str]) -> list[tuple[str, str, str]]:
    """Only what a step added to the text: accepted drafts and the correction/bonus (for live views)."""
    return [p for p in step_pieces(step, texts) if p[1] not in ("rejected", "pending")]


def multi_draft_rows(step: dict, texts: dict[int, str]) -> list[dict]:
    """The K drafted blocks of a multi-draft step (`all_drafts`), one row each: draft index, whether
    the verifier followed it (`chosen`), and its strip pieces.

    The followed block is coloured like any step (`step_pieces`: its first `accepted` tokens
    accepted, the next rejected, later ones pending, then the correction or bonus). Its tooltips add
    the verifier's per-position coin (`decisions`, 1 = the coin at that position succeeded): under
    block verification (block, rbv) the emitted prefix ends at the *last* successful coin, so an
    accepted token can carry a failed coin. The other blocks were scored but not followed: grey."""
    blocks = step.get("all_drafts") or []
    chosen = step.get("chosen", 0)
    dec = step.get("decisions")
    rows = []
    for k, block in enumerate(blocks):
        if k == chosen:
            pieces = step_pieces(step, texts)
            if dec is not None:
                pieces = [(t, f, tip + (f" · coin {'✓' if dec[i] else '✗'}" if i < len(dec) else ""))
                          for i, (t, f, tip) in enumerate(pieces)]
        else:
            pieces = [(texts[t], UNCHOSEN, f"draft {k} · position {i + 1} · not followed by the verifier")
                      for i, t in enumerate(block)]
        rows.append({"draft": k, "chosen": k == chosen, "pieces": pieces})
    return rows


def multi_draft_html(step: dict, texts: dict[int, str]) -> str:
    """All K drafted blocks as stacked strips: ★ marks the followed draft, ○ the others (greyed)."""
    out = []
    for r in multi_draft_rows(step, texts):
        mark = "★ followed" if r["chosen"] else "○ not followed"
        body = "".join(span(t, f, tip) for t, f, tip in r["pieces"]) or "∅"
        out.append(f'<div class="draft-row" data-draft="{r["draft"]}" data-chosen="{str(r["chosen"]).lower()}" '
                   f'style="display:flex;gap:0.8rem;align-items:baseline;{"" if r["chosen"] else "opacity:0.75;"}">'
                   f'<span class="draft-label" style="min-width:8.5rem;font-size:0.8rem;color:#555;">'
                   f'draft {r["draft"]} · {mark}</span>'
                   f'<span class="draft-tokens" style="font-family:ui-monospace,monospace;font-size:0.92rem;'
                   f'line-height:1.9;white-space:pre-wrap;word-break:break-word;">{body}</span></div>')
    return f'<div class="multi-draft">{"".join(out)}</div>'


def copy_source_html(context: list[int], fields: dict, texts: dict[int, str], around: int = 40) -> str:
    """Where a model-free draft was copied from: the step's context (prompt + output so far) near the
    drafter's `span` [start, end), the copied tokens marked and the matched context (`match`)
    underlined; `around` tokens either side, the rest elided (engine.drafters.modelfree fields)."""
    a, b = fields["span"]
    m0, m1 = fields.get("match") or (a, a)
    lo, hi = max(0, min(a, m0) - around), min(len(context), b + around)
    out = ["… " if lo else ""]
    for i in range(lo, hi):
        t = _text(texts.get(context[i], f"⟨{context[i]}⟩"))
        if a <= i < b:
            out.append(f'<mark class="copied" title="copied to the draft (position {i})" style="background:'
                       f'{rgba(COLORS["accepted"], 0.45)};border-radius:3px;">{t}</mark>')
        elif m0 <= i < m1:
            out.append(f'<span class="matched" title="matched context (position {i})" '
                       f'style="border-bottom:2px dotted #222;">{t}</span>')
        else:
            out.append(t)
    out.append(" …" if hi < len(context) else "")
    return (f'<div class="copy-source" style="font-family:ui-monospace,monospace;font-size:0.92rem;'
            f'line-height:1.9;white-space:pre-wrap;word-break:break-word;">{"".join(out)}</div>')
