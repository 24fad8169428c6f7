"""Every page at 1400×900 in Chromium (the server and browser fixtures are tests/conftest.py's), as a
demanding reader checks it: no page taller than three screens by default, no raw None / nan or field
identifiers, every speedup printed "N.NN× AR" a link to its pair's row on the Speedups page (and the
link lands on that row), the contrast of every text style measured (≥ 4.5:1, WCAG AA), a visible
keyboard focus ring, token outcomes told apart by more than colour, and the URL restoring Windows,
Overview and Multi-draft in a new browser context.

Contrast is measured on HTML text (each element with its own text): its colour, alpha and the opacity
of its ancestors composited over the first opaque background behind it. Chart text (SVG) is left out.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from app import site_map
from tests.conftest import browser_missing, settle

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
from playwright.sync_api import expect  # noqa: E402

SCREEN = {"width": 1400, "height": 900}
# sidebar title -> (url path, the page's h1)
PAGES = {p.title: (p.url, p.heading) for p in site_map.PAGES}
RAW = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|T \?")
# Field names that reached a label in the issue, and any snake_case word outside code.
IDENTIFIER = re.compile(r"\b(?:weight_share|max_lossless_error|blocks\.t_before|mb_ms)\b|\b[a-z]+_[a-z0-9]+(?:_[a-z0-9]+)*\b")
# Spec-Bench's own task names are proper names (the benchmark's categories), not field identifiers.
TASK_NAMES = {"mt_bench", "math_reasoning"}
AA = 4.5

# Visible text outside <code>/<pre>/inputs, for the raw-value and identifier checks.
PLAIN_TEXT = """() => {
  const root = document.querySelector('[data-testid="stMain"]');
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest('code, pre, script, style, svg, [data-testid="stCode"], textarea, input, ' +
                          '[data-testid="stIconMaterial"], [translate="no"], details:not([open])')) continue;
    if (!el.getClientRects().length) continue;
    out.push(n.textContent);
  }
  return out.join(' ');
}"""

# Every "N.NN× AR" in markdown text: the href of the link it sits in ('' when none).
SPEEDUPS = """() => {
  const out = [];
  for (const box of document.querySelectorAll('[data-testid="stMarkdownContainer"]')) {
    if (!box.getClientRects().length) continue;
    const walk = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.textContent.matchAll(/\\d+\\.\\d\\d× AR/g)) {
        const a = n.parentElement.closest('a');
        out.push([m[0], a ? a.getAttribute('href') : '']);
      }
    }
  }
  return out;
}"""

CONTRAST = """() => {
  const rgba = s => { const m = s.match(/[\\d.]+/g) || [0, 0, 0]; return [+m[0], +m[1], +m[2], m.length > 3 ? +m[3] : 1]; };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
                     return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const over = (top, bot) => [0, 1, 2].map(i => top[i] * top[3] + bot[i] * (1 - top[3])).concat([1]);
  // What is painted behind the text's centre (not its ancestors: a slider's value label sits outside its thumb).
  const background = el => {
    // a slider's value floats above its thumb, on the page: what is behind it is the page, not the thumb
    if (el.closest('[data-testid="stSliderThumbValue"]')) return [255, 255, 255, 1];
    const r = el.getBoundingClientRect();
    const behind = document.elementsFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    const start = behind.indexOf(el);
    const chain = [];  // below the fold elementsFromPoint sees nothing: the element's ancestors instead
    for (let e = el; e; e = e.parentElement) chain.push(e);
    const layers = [];
    for (const e of (start >= 0 ? behind.slice(start) : chain)) {
      const b = rgba(getComputedStyle(e).backgroundColor);
      if (b[3] > 0) { layers.push(b); if (b[3] >= 1) break; }
    }
    let c = [255, 255, 255, 1];
    for (const l of layers.reverse()) c = over(l, c);
    return c;
  };
  const styles = {};
  for (const el of document.querySelectorAll('[data-testid="stApp"] *')) {
    if (el.closest('svg, [aria-hidden="true"], :disabled, [aria-disabled="true"], [data-testid="stSkeleton"], ' +
                   'details:not([open]) > :not(summary)')) continue;
    const slider = el.closest('[data-testid="stSlider"]');  // a disabled slider's value: a disabled control (exempt)
    if (slider && slider.querySelector('[role="slider"][aria-disabled="true"]')) continue;
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden') continue;
    let alpha = 1;
    for (let e = el; e; e = e.parentElement) alpha *= +getComputedStyle(e).opacity;
    if (alpha < 0.05) continue;  // faded out entirely (a transition's end state): not shown
    const fg0 = rgba(cs.color), bg = background(el);
    const fg = over([fg0[0], fg0[1], fg0[2], fg0[3] * alpha], bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const key = `${cs.color} on ${bg.slice(0, 3).map(Math.round)} · ${cs.fontSize} ${cs.fontWeight} · α ${alpha.toFixed(2)}`;
    if (!(key in styles) || ratio < styles[key].ratio)
      styles[key] = {ratio, text: el.textContent.trim().slice(0, 40), tag: el.tagName,
                     testid: (el.closest('[data-testid]') || {}).dataset ? el.closest('[data-testid]').dataset.testid : ''};
  }
  return styles;
}"""


def drawn(pg, h1: str) -> None:
    pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached")
    expect(pg.get_by_role("heading", name=h1, exact=True).first).to_be_visible()
    pg.wait_for_timeout(500)
    expect(pg.get_by_test_id("stSkeleton")).to_have_count(0)
    expect(pg.get_by_test_id("stException")).to_have_count(0)


def fresh(browser, url: str):
    pg = browser.new_context(viewport=SCREEN).new_page()
    pg.set_default_timeout(120_000)
    pg.goto(url)
    return pg


@pytest.mark.parametrize("title", list(PAGES))
def test_page_reads_cleanly_and_links_every_speedup(browser, server, title):
    path, h1 = PAGES[title]
    pg = fresh(browser, f"{server}/{path}")
    try:
        drawn(pg, h1)
        problems = []  # every check runs and reports, so one run shows all that is wrong with a page
        height = pg.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
        if height > 3 * SCREEN["height"]:
            problems.append(f"{height} px tall by default (> 3 screens)")
        text = pg.evaluate(PLAIN_TEXT)
        if m := RAW.search(text):
            problems.append(f"raw value {m.group(0)!r} near …{text[max(0, m.start() - 60):m.end() + 20]}…")
        if bad := sorted(set(IDENTIFIER.findall(text)) - TASK_NAMES):
            problems.append(f"raw identifiers in the text: {bad}")
        for figure, href in pg.evaluate(SPEEDUPS):
            url = urlparse(href or "")
            q = parse_qs(url.query)
            if not (url.path.endswith("speedups") and q.get("pair") and q.get("row")):
                problems.append(f"{figure} is not linked to its row on the Speedups page ({href or 'no link'})")
        styles = pg.evaluate(CONTRAST)
        if not styles:
            problems.append("no text measured")
        problems += [f"text at {v['ratio']:.2f}:1 (< {AA}:1): {v['tag']} in {v['testid']} ({k}) “{v['text']}”"
                     for k, v in styles.items() if v["ratio"] < AA]
        assert not problems, f"{title}: " + " | ".join(problems)
    finally:
        pg.context.close()


def test_a_speedup_link_lands_on_its_row(browser, server):
    pg = fresh(browser, server)
    try:
        drawn(pg, "speclab")
        link = pg.locator('[data-testid="stAlertContentInfo"] a[href*="speedups?"]').first
        figure, href = link.inner_text(), link.get_attribute("href")
        pg.goto(f"{server}/{href}")
        drawn(pg, "Speedups")
        expect(pg.get_by_text("The figure you followed:")).to_be_visible()
        expect(pg.get_by_text("The figure you followed:").locator("..")).to_contain_text(figure)
        q = parse_qs(urlparse(href).query)
        expect(pg.get_by_test_id("stAlertContentInfo").first).to_contain_text("speculation runs at")
        assert q["row"][0] in pg.url  # the view keeps the row in the URL
    finally:
        pg.context.close()


def _restore(browser, server, path: str, h1: str, act, check) -> None:
    """Change the view with `act`, then open the URL it left in a new browser context: `check` holds there."""
    pg = fresh(browser, f"{server}/{path}")
    try:
        drawn(pg, h1)
        act(pg)
        settle(pg)
        pg.wait_for_timeout(500)
        url = pg.url
    finally:
        pg.context.close()
    again = fresh(browser, url)
    try:
        drawn(again, h1)
        check(again)
    finally:
        again.context.close()


def test_url_restores_windows_overview_and_multidraft(browser, server):
    def windows_act(pg):
        pg.get_by_test_id("stButtonGroup").filter(has_text="PACER's ceiling").get_by_text("Cost model", exact=True).click()

    def windows_check(pg):
        assert "section=" in pg.url
        expect(pg.locator(".js-plotly-plot").filter(has_text="Cost of one speculative step").first).to_be_visible()

    _restore(browser, server, "windows", "Windows", windows_act, windows_check)

    def overview_act(pg):
        pg.get_by_text(re.compile(r"^Cards: one per trace")).click()

    def overview_check(pg):
        assert "cards=1" in pg.url
        expect(pg.get_by_test_id("stMetricLabel").filter(has_text="emitted / call").first).to_be_visible()

    _restore(browser, server, "", "speclab", overview_act, overview_check)

    def md_act(pg):
        pg.get_by_text("T = 0.4", exact=True).click()

    def md_check(pg):
        assert "t=0.4" in pg.url
        expect(pg.locator("label:has(input[type=radio]:checked)")).to_contain_text("T = 0.4")

    _restore(browser, server, "multidraft", "Multi-draft", md_act, md_check)


def test_token_outcomes_have_a_second_cue_and_focus_is_visible(browser, server):
    pg = fresh(browser, f"{server}/replay")
    try:
        drawn(pg, "Replay")
        cues = pg.evaluate("""() => Object.fromEntries(['accepted', 'rejected', 'correction', 'bonus', 'pending',
              'autoregressive'].map(f => { const el = document.querySelector('.tok-' + f);
              if (!el) return [f, null]; const cs = getComputedStyle(el);
              const mark = el.querySelector('.tok-cue');
              return [f, [cs.borderBottomStyle, cs.textDecorationLine, mark ? mark.textContent : '']]; }))""")
        legend = {f: c for f, c in cues.items() if c is not None}
        assert {"accepted", "correction", "bonus"} <= set(legend), legend  # the legend shows every fate
        seen = [tuple(legend[f]) for f in legend]
        assert len(set(seen)) == len(seen), f"two outcomes differ by colour alone: {legend}"
        card = pg.locator(".tok[data-card*='min(1, p/q)']").first
        card.focus()
        after = pg.evaluate("el => getComputedStyle(el, '::after').content", card.element_handle())
        assert "min(1, p/q)" in after and "draft q" in after and "target p" in after
        # keyboard focus: a 3 px ring, not the nav's grey highlight
        pg.keyboard.press("Tab")
        ring = pg.evaluate("() => { const cs = getComputedStyle(document.activeElement); "
                           "return [cs.outlineStyle, parseFloat(cs.outlineWidth), cs.outlineColor]; }")
        assert ring[0] == "solid" and ring[1] >= 2, ring
    finally:
        pg.context.close()
