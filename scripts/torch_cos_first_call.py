"""Does torch's float cos give other values on its first call after the thread pool idles? (The reason for
engine/kernels/rope_table.py.) Each fresh process computes cos of a rope's angles (40 positions × a 64-wide head,
as transformers' rotary module does) four times, `--sleep` seconds apart, and prints the largest distance in fp32
ulps from the float64 cosine rounded to fp32, per call.

    python scripts/torch_cos_first_call.py [--processes 12] [--sleep 0.5]

Seen (torch 2.13.0+cpu with MKL, 2 threads, an AMX Xeon, 2026-12-08): [2534, 1, 1, 1] in 1 of 12 processes, then
[1, 1, 1, 1] in all of 100 more — rare in plain torch; in the AVX2 build's test process (our kernels' parallel
regions before it) the first rotary call of a run was off so in 5 of 30 processes.
"""

from __future__ import annotations

import collections
import subprocess
import sys

CHILD = """
import sys, time, torch
inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float) / 64))
out = []
for _ in range(4):
    time.sleep(float(sys.argv[1]))
    theta = torch.arange(40)[None, :, None].float() * inv
    emb = torch.cat((theta, theta), -1)
    c = emb.cos()
    ref = emb.double().cos().float()
    out.append(int((c.view(torch.int32) - ref.view(torch.int32)).abs().max()))
print(out)
"""


def main(argv: list[str]) -> None:
    opts = dict(zip(argv[::2], argv[1::2]))
    n, sleep = int(opts.get("--processes", 12)), opts.get("--sleep", "0.5")
    seen = collections.Counter(
        subprocess.run([sys.executable, "-c", CHILD, sleep], capture_output=True, text=True, check=True).stdout.strip()
        for _ in range(n))
    for row, k in seen.most_common():
        print(f"{k:3d} of {n} processes: max ulps per call {row}")


if __name__ == "__main__":
    main(sys.argv[1:])
