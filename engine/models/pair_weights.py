"""Which weights path each model of a pair runs on: `--weights dense`, or `--weights target=dense,draft=quantized`
(a mixed pair), and what this CPU does with a path before any model loads.

    parse(text) -> PairWeights                 'quantized' → both quantized; 'target=dense,draft=quantized'
                                               → a dense target with a quantized draft (a missing key: dense)
    parse_list(text) -> list[PairWeights]      several runs of the bench / costs: 'dense,quantized' (one path
                                               each), or ';' between pairs when one is mixed:
                                               'dense;target=dense,draft=quantized'
    refusal(weights, dtype, device) -> str|None   a path this machine cannot run (one line), no side effect
    status(weights, dtype, device) -> str|None    the fallback this machine takes for a path, in one line
                                               (which kernels instead, and why); builds the kernel once
    announce(weights, dtype, device)           refusal → ValueError; a fallback line → stderr, once per path

Why a mixed pair: a one-token step reads every weight, so the draft's cost c is set by its bytes; the
0.5B draft on the quantized path reads ~3× fewer bytes than in bf16, while the target keeps the dense path
(its exactness reference). Losslessness does not care: the draft only proposes, and the target's own
distribution decides (the χ² test of tests/unit/models/test_pair_weights.py runs a mixed pair).

Worked example: `parse("target=dense,draft=quantized")` → PairWeights('dense', 'quantized'), whose
`label` 'target=dense,draft=quantized' names the path in bench rows and trace folders ('dense-quantized');
`parse("int8")` → PairWeights('int8', 'int8'), label 'int8'.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from engine.kernels.quant import WEIGHTS, check_weights

ROLES = ("target", "draft")


@dataclass(frozen=True)
class PairWeights:
    target: str = "dense"  # the target's path; dense: the exactness reference
    draft: str = "dense"  # the draft model's path (a model-free drafter has none)

    @property
    def mixed(self) -> bool:
        return self.target != self.draft

    @property
    def label(self) -> str:
        """'dense' for one path, 'target=dense,draft=quantized' for a mixed pair (parses back)."""
        return self.target if not self.mixed else f"target={self.target},draft={self.draft}"

    @property
    def slug(self) -> str:
        """A file-name-safe label: 'dense', 'dense-quantized' (target, then draft)."""
        return self.target if not self.mixed else f"{self.target}-{self.draft}"


def parse(text: str, flag: str = "--weights") -> PairWeights:
    """One pair's paths (see the module doc); ValueError in one line naming what is wrong."""
    s = str(text).strip()
    if "=" not in s:
        if check_weights(s):
            raise ValueError(f"{flag}: {check_weights(s)}")
        return PairWeights(s, s)
    got: dict[str, str] = {}
    for piece in (p.strip() for p in s.split(",") if p.strip()):
        role, eq, w = (x.strip() for x in piece.partition("="))
        if not eq or role not in ROLES:
            raise ValueError(f"{flag} {text!r}: expected target=PATH,draft=PATH (PATH one of {', '.join(WEIGHTS)})")
        if role in got:
            raise ValueError(f"{flag} {text!r}: {role} is given twice")
        if check_weights(w):
            raise ValueError(f"{flag} {role}: {check_weights(w)}")
        got[role] = w
    return PairWeights(got.get("target", "dense"), got.get("draft", "dense"))


def parse_list(text: str, flag: str = "--weights") -> list[PairWeights]:
    """Several pairs' paths: ';'-separated when any is mixed, else comma-separated single paths."""
    s = str(text).strip()
    pieces = s.split(";") if ";" in s else [s] if "=" in s else s.split(",")
    out = [parse(p, flag) for p in pieces if p.strip()]
    if not out:
        raise ValueError(f"{flag} is empty")
    if len({p.label for p in out}) != len(out):
        raise ValueError(f"{flag} {text!r}: name each path once")
    return out


def _on_gpu(device: str) -> bool:
    if str(device) == "auto":
        import torch

        return torch.cuda.is_available()
    return str(device).startswith("cuda")


def refusal(weights: str, dtype: str = "auto", device: str = "cpu") -> str | None:
    """Why this machine cannot run `weights` at all (one line), else None. Reads flags and the
    environment only: nothing is built or loaded."""
    if weights == "dense":
        return None
    if _on_gpu(device):
        return f"--weights {weights} runs on CPU kernels, not on {device}: use --weights dense there"
    from engine.kernels import qkernel

    forced = os.environ.get("SPECLAB_QGEMM")
    if forced:
        if forced not in qkernel.VARIANTS:
            return f"SPECLAB_QGEMM={forced} is not a qgemm build; choose from {', '.join(qkernel.VARIANTS)}"
        missing = [f for f in qkernel.VARIANTS[forced][0] if f not in qkernel.cpu_flags()]
        if missing:
            return (f"--weights {weights}: SPECLAB_QGEMM={forced} asks for a build this CPU cannot run (it lacks "
                    f"{', '.join(missing)}); unset SPECLAB_QGEMM")
    return None


def status(weights: str, dtype: str = "auto", device: str = "cpu") -> str | None:
    """The one line saying which kernels a path falls back to on this machine and why; None when it runs
    on its own kernels. Builds the path's C kernel once (as loading would) to learn whether it can."""
    if _on_gpu(device):
        return None
    from engine.kernels import qkernel

    if weights == "dense":
        from engine.kernels import dense_kernel
        from engine.models.load import resolve_dtype

        if str(resolve_dtype(dtype, "cpu")).endswith("float32"):
            return None  # fp32 runs on torch's own GEMM by design: no kernel of ours to fall back from
        flags = qkernel.cpu_flags()
        why = dense_kernel.available()
        if why is None:
            return None  # our kernel runs (its AVX2 build on a CPU without AVX-512 BF16: `kernels --status` says which)
        emulated = not any(f in flags for f in ("avx512_bf16", "amx_bf16"))
        return (f"weights dense (bf16): torch's GEMM instead of our bf16 kernel ({why})"
                + ("; bf16 is emulated on this CPU, --dtype fp32 is faster" if emulated else ""))
    why = qkernel.available()
    if why is not None:
        return f"weights {weights}: torch's int4/int8 kernels instead of our qgemm kernel ({why})"
    if qkernel.variant() == "avx2" and not os.environ.get("SPECLAB_QGEMM"):
        missing = [f for f in qkernel.VARIANTS["avx512vnni"][0] if f not in qkernel.cpu_flags()]
        return f"weights {weights}: our qgemm kernel's AVX2 build (this CPU lacks {', '.join(missing)})"
    return None


_SAID: set[tuple[str, str]] = set()


def announce(weights: str, dtype: str = "auto", device: str = "cpu", say=None) -> str | None:
    """Refuse a path this machine cannot run (ValueError, one line), else print its fallback line once
    per process (stderr) and return it."""
    why = refusal(weights, dtype, device)
    if why:
        raise ValueError(why)
    line = status(weights, dtype, device)
    if line and (weights, str(dtype)) not in _SAID:
        _SAID.add((weights, str(dtype)))
        (say or (lambda s: print(s, file=sys.stderr)))(line)
    return line


def announce_pair(pw: PairWeights, dtype: str = "auto", device: str = "cpu", draft: bool = True, say=None) -> None:
    """`announce` for the target's path and, with a draft model, the draft's."""
    announce(pw.target, dtype, device, say)
    if draft and pw.mixed:
        announce(pw.draft, dtype, device, say)
