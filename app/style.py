"""The app's one stylesheet, injected once by app/main.py: what Streamlit's default theme leaves below
WCAG AA, and the token hover card.

- Text contrast ≥ 4.5:1 (WCAG 1.4.3): Streamlit draws captions, metric labels, help icons and widget
  hints at 60 % opacity of the text colour (≈ 3.9:1 on white) and metric deltas in light green/red; they
  carry real content here, so they get solid colours of at least 4.5:1 on white and on the tinted boxes.
- A visible keyboard focus (WCAG 2.4.7): a 3 px blue ring on whatever has keyboard focus, unlike the
  grey of the current page in the navigation.
- Token outcomes have a second cue besides colour (app.tokens.CUES); the card that opens on hover or
  keyboard focus shows the token's q, p, min(1, p/q) and the draft's entropy (its `data-card`).
"""

from __future__ import annotations

# Solid colours checked against white (#fff) and Streamlit's info/warning tints (the browser test
# measures every text style on every page).
TEXT_MUTED = "#4b5260"  # 7.6:1 on white: captions, labels, hints
GOOD = "#1a7a3a"  # 5.3:1: metric delta "better"
BAD = "#b3261e"  # 6.2:1: metric delta "worse"
FOCUS = "#1f4fd1"
CODE = "#0b5d2a"  # 7:1 on the inline-code chip
SELECTED = "#8f1d2c"  # a selected segment's label: 7.5:1 on its tint

CSS = f"""
[data-testid="stCaptionContainer"], [data-testid="stCaptionContainer"] p,
[data-testid="stWidgetLabel"] p, [data-testid="stMetricLabel"], [data-testid="stMetricLabel"] p,
[data-testid="stTooltipIcon"], [data-testid="InputInstructions"], small,
[data-testid="stFileUploaderDropzoneInstructions"] span, [data-testid="stFileUploaderDropzoneInstructions"] small {{
  color: {TEXT_MUTED} !important; opacity: 1 !important;
}}
[data-testid="stMarkdownContainer"] code, [data-testid="stCaptionContainer"] code {{
  color: {CODE} !important;  /* Streamlit's green inline code is about 2.8:1 on its grey chip */
}}
[data-testid="stButtonGroup"] button[kind$="Active"] p, [data-testid="stButtonGroup"] button[aria-checked="true"] p,
[data-testid="stButtonGroup"] button[aria-pressed="true"] p {{
  color: {SELECTED} !important;  /* the theme's red on its own 10 % tint is 4.48:1 */
}}
[data-testid="stMetricDelta"] {{ opacity: 1 !important; }}
[data-testid="stMetricDelta"]:has(svg[data-testid="stMetricDeltaIcon-Up"]) {{ color: {GOOD} !important; }}
[data-testid="stMetricDelta"]:has(svg[data-testid="stMetricDeltaIcon-Down"]) {{ color: {BAD} !important; }}
[data-testid="stMetricDelta"] div, [data-testid="stMetricDelta"] span {{ color: inherit !important; }}
[data-testid="stSidebarNav"] a span, [data-testid="stSidebarNavLink"] span {{ color: #262730 !important; }}
*:focus-visible, a:focus-visible, button:focus-visible, [tabindex]:focus-visible {{
  outline: 3px solid {FOCUS} !important; outline-offset: 2px !important; box-shadow: none !important;
}}
.tok {{ position: relative; }}
.tok[data-card]:hover::after, .tok[data-card]:focus::after {{
  content: attr(data-card); position: absolute; left: 0; top: 1.9em; z-index: 20; white-space: pre;
  background: #ffffff; color: #1f2430; border: 1px solid #5b6776; border-radius: 6px; padding: 4px 8px;
  font-size: 0.8rem; line-height: 1.35; box-shadow: 0 2px 8px rgba(0,0,0,0.18); text-decoration: none;
}}
"""


def apply() -> None:
    import streamlit as st

    st.html(f"<style>{CSS}</style>")
