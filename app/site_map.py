"""The app's pages, written once. app/main.py builds the navigation from `PAGES`, Overview's directory
lists them, a page links to another through `file(key)`, each page takes its heading from `heading(key)`,
and app/measure_pages.py and the tests read the same list. Adding a page is one file in app/pages/ and one
line here (tests/unit/test_registries.py holds that nothing else spells the list out). Pure: no Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    key: str  # the file's stem in app/pages/, and its URL path
    title: str  # the navigation's label
    icon: str
    heading: str  # what the page itself is titled (its st.title)
    line: str | None  # what it answers, in Overview's directory (None: the directory is on this page)
    default: bool = False  # the landing page (URL path "")

    @property
    def file(self) -> str:
        """The path st.Page, st.page_link and st.switch_page take (relative to app/main.py)."""
        return f"pages/{self.key}.py"

    @property
    def url(self) -> str:
        """The page's URL path: Streamlit names a page after its file, the default page ''."""
        return "" if self.default else self.key


# In navigation order.
PAGES: tuple[Page, ...] = (
    Page("overview", "Overview", ":material/dashboard:", "speclab", None, default=True),
    Page("replay", "Replay", ":material/play_circle:", "Replay", "a trace, call by call"),
    Page("windows", "Windows", ":material/query_stats:", "Windows", "which window, and the oracle"),
    Page("compare", "Compare", ":material/compare_arrows:", "Compare", "two traces, same prompts"),
    Page("multidraft", "Multi-draft", ":material/account_tree:", "Multi-draft", "K drafts per step"),
    Page("speedups", "Speedups", ":material/balance:", "Speedups", "every speedup of a pair, side by side"),
    Page("live", "Live", ":material/bolt:", "Live", "decode a prompt now"),
    Page("upload", "Upload", ":material/upload_file:", "Upload", "your traces, vLLM, llama.cpp"),
    Page("sweeps", "Sweeps", ":material/grid_on:", "Sweeps", "drafters × policies × tasks"),
    Page("dpace", "D-PACE", ":material/model_training:", "D-PACE training", "training a block drafter"),
    Page("audit", "Audit", ":material/verified:", "Losslessness audit", "is each verifier lossless?"),
)
BY_KEY = {p.key: p for p in PAGES}


def page(key: str) -> Page:
    return BY_KEY[key]


def file(key: str) -> str:
    """A page's file for st.page_link / st.switch_page; a KeyError names a page that does not exist."""
    return BY_KEY[key].file


def heading(key: str) -> str:
    return BY_KEY[key].heading


def directory() -> list[Page]:
    """The pages Overview's directory lists, in navigation order."""
    return [p for p in PAGES if p.line is not None]
