"""One-token decode steps of this tree against an earlier commit, and under three OpenMP wait policies,
interleaved round by round on one machine (`python -m engine overhead` in each, one process a run).

    python scripts/step_before_after.py --before a642732 --rounds 2 --out docs/results/step-before-after-<cpu>.json

Runs per round, in this order (so drift in the machine falls on every arm alike):

    before    the earlier commit's code (a git worktree on PYTHONPATH; same venv, same models), GOMP_SPINCOUNT=20000
    after     this tree, GOMP_SPINCOUNT=20000 (what every experiment sets)
    after-torch-dense  this tree with SPECLAB_DENSE_KERNEL=torch: the dense path the earlier commit took on a CPU
              its kernels did not cover, so the layout change is compared like with like
    after-spin-default  this tree, neither variable set (libgomp spins 300,000 iterations before sleeping)
    after-passive       this tree, OMP_WAIT_POLICY=PASSIVE (workers sleep at once)
    after-no-amx        this tree with SPECLAB_BGEMV=bgemv: the dense products on vdpbf16ps, not the AMX tiles
    after-qtiles        this tree with SPECLAB_QTILES=1: the Q4_K / Q6_K products in sixteen-row units (qkernel.use_tiles;
              the default where the AMX build runs since 2026-12-07)
    after-stored        this tree with SPECLAB_QTILES=0: the Q4_K / Q6_K products on the blocks as stored
    after-vnni-build    this tree with SPECLAB_QGEMM=avx512vnni: the quantized products from the VNNI build, not the AMX one

The knobs are read when libgomp loads, which is why each arm is its own process. The summary is the median
step (ms) per arm and weights path over rounds, and each arm's ratio to `before` (and to `after`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = {
    "before": ({"GOMP_SPINCOUNT": "20000"}, True),
    "after": ({"GOMP_SPINCOUNT": "20000"}, False),
    "after-torch-dense": ({"GOMP_SPINCOUNT": "20000", "SPECLAB_DENSE_KERNEL": "torch"}, False),
    "after-spin-default": ({}, False),
    "after-passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, False),
    "after-no-amx": ({"GOMP_SPINCOUNT": "20000", "SPECLAB_BGEMV": "bgemv"}, False),
    "after-qtiles": ({"GOMP_SPINCOUNT": "20000", "SPECLAB_QTILES": "1"}, False),
    "after-stored": ({"GOMP_SPINCOUNT": "20000", "SPECLAB_QTILES": "0"}, False),
    "after-vnni-build": ({"GOMP_SPINCOUNT": "20000", "SPECLAB_QGEMM": "avx512vnni"}, False),
}
CLEARED = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "SPECLAB_DENSE_KERNEL", "SPECLAB_BGEMV")


def _run(arm: str, worktree: Path, out: Path, weights: str, threads: int, target: str | None = None,
         context: int | None = None) -> list[dict]:
    extra, old = ARMS[arm]
    env = {k: v for k, v in os.environ.items() if k not in CLEARED} | extra
    if old:
        env["PYTHONPATH"] = str(worktree)  # ahead of the editable install's finder, so the old tree is imported
    cmd = [sys.executable, "-m", "engine", "overhead", "--weights", weights, "--threads", str(threads),
           "--dtype", "bf16", "--out", str(out)] + (["--target", target] if target else []) + (
        ["--context", str(context)] if context is not None else [])
    subprocess.run(cmd, env=env, cwd=worktree if old else REPO, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())["rows"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the earlier commit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--weights", default="dense,quantized")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--target", default=None, help="the model (overhead's --target; default: its own)")
    ap.add_argument("--context", type=int, default=None,
                    help="tokens cached before the timed steps (overhead's --context; default: its own)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    arms = a.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        sys.exit(f"unknown arm(s) {sorted(unknown)}: choose from {list(ARMS)}")
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(wt), a.before], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs: list[dict] = []
        try:
            for r in range(a.rounds):
                for arm in arms:
                    rows = _run(arm, wt, Path(tmp) / f"{arm}-{r}.json", a.weights, a.threads, a.target, a.context)
                    for row in rows:
                        runs.append({"round": r, "arm": arm, "weights": row["weights"], "step_ms": row["step_ms"],
                                     "kernel_share": row["kernel_share"]})
                    print(f"round {r + 1}/{a.rounds} {arm}: " + ", ".join(
                        f"{row['weights']} {row['step_ms']:.1f} ms" for row in rows), flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(wt)], check=False)
    summary = {}
    for w in a.weights.split(","):
        med = {arm: statistics.median(x["step_ms"] for x in runs if x["arm"] == arm and x["weights"] == w)
               for arm in arms}
        summary[w] = {arm: {"step_ms": round(ms, 2),
                            "vs_before": round(ms / med["before"], 3) if "before" in med else None,
                            "vs_after": round(ms / med["after"], 3) if "after" in med else None}
                      for arm, ms in med.items()}
    sys.path.insert(0, str(REPO))
    from engine.kernels.kernel_build import cpu_flags  # noqa: E402
    from engine.models.load import machine_description, software_versions  # noqa: E402

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()

    # both arms as commits: a name such as HEAD means nothing once the tree moves on, and the "after" arm is the
    # working tree, which may hold changes not yet committed
    head, dirty = git("rev-parse", "--short", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    rec = {"kind": "step-before-after", "before": git("rev-parse", "--short", a.before) or a.before,
           "target": a.target or "overhead's default",
           "context": a.context if a.context is not None else "overhead's default",
           "after": head + (" + uncommitted changes" if dirty else ""),
           "summary": summary, "runs": runs, "threads": a.threads, "machine": machine_description(),
           "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))),
           "software": software_versions(),
           "command": "python " + " ".join([Path(sys.argv[0]).relative_to(REPO).as_posix()
                                              if Path(sys.argv[0]).is_absolute() else sys.argv[0]] + sys.argv[1:]),
           "date": datetime.date.today().isoformat(), "experiment": "scripts/step_before_after.py"}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    for w, arms_ in summary.items():
        print(w + ": " + ", ".join(f"{arm} {v['step_ms']} ms ({v['vs_before']}× before)" for arm, v in arms_.items()))


if __name__ == "__main__":
    main()
