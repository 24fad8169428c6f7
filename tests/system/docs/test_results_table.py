"""docs/results.md and the README's results block are what docs/results/*.json render (in-process, as
`python -m engine results --check` does): the table cannot drift from the files."""

from engine.__main__ import main
from engine.results import PAGE, README, rendered_files, stale_files


def test_committed_results_page_and_readme_block_match_the_json():
    files = rendered_files()
    assert set(files) == {PAGE, README}
    stale = stale_files(files)
    assert not stale, f"re-render with `python -m engine results`: {[str(p) for p in stale]}"


def test_check_flag_exits_zero_on_the_committed_files():
    assert main(["results", "--check"]) == 0
