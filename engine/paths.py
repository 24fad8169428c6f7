"""Where things live on disk, defined once.

REPO_ROOT is the checkout (engine/, app/, models/, traces/ beside each other). The Spec-Bench dev
questions sit in the shared folder next to the checkout; they are for development and benchmarks only
(never training data).
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = REPO_ROOT / "models"  # our own trained weights and model cards (small, in git)
TRACES_DIR = REPO_ROOT / "traces"  # bundled traces: the app's default data
SPEC_BENCH_DEV = REPO_ROOT.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
