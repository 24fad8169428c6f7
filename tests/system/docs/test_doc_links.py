"""Links between the docs resolve: every relative link in README.md, docs/*.md and docs/log/*.md names a file that
exists, and every #anchor names a heading of that file (GitHub's slug rules)."""

import re
from pathlib import Path

import pytest
from tests.conftest import REPO

ROOT = REPO
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "log").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (not '-' or '_'), spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")  # repeated headings get -1, -2, …
    return out


def test_slug_rules():
    assert slug("PACER on the realistic pair, bf16, *AMD EPYC avx512_bf16 CPU* (2026-12-02)") == \
        "pacer-on-the-realistic-pair-bf16-amd-epyc-avx512_bf16-cpu-2026-12-02"
    assert slug("Qwen2.5-Coder-1.5B ← 0.5B") == "qwen25-coder-15b--05b"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    bad = []
    for m in LINK.finditer(doc.read_text(encoding="utf-8")):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("<"):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no such heading")
    assert not bad, f"{doc.name}: " + "; ".join(bad)
