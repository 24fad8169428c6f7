"""Feature shards: the target's hidden states at the chosen layers for many sequences, on disk.

A data directory holds `dataset.json` (what every shard of it must match: `FeatureSpec`) and pairs

    heldout-00000.safetensors + heldout-00000.json     the target's greedy answers (offline τ)
    train-00000.safetensors   + train-00000.json       …, train-00001.*, …

Tensors of a shard (n sequences, T tokens in all, sequences concatenated):
    ids          int32 [T]          prompt (chat template) + answer tokens
    offsets      int64 [n + 1]      sequence i is ids[offsets[i]:offsets[i+1]]
    prompt_len   int32 [n]          first answer position of each sequence
    feats        bf16  [T, K·D]     concatenated outputs of target layers `layers` (hidden_states[l + 1])
    target_next  int32 [T]          the target's argmax next token at t (t ≥ prompt_len − 1; −1 before)

The manifest (`.json`, also stored as the safetensors metadata) records the target, layers, dtype,
token counts, sources and how the answers were made; the safetensors file is written first and the
manifest last, both atomically, so a shard without a manifest is one a kill interrupted. Loading
checks the manifest against the expected `FeatureSpec` and the file against the manifest (byte size,
shapes) and fails with one line naming the file and the mismatch, before any training step.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from engine.trace.jsonio import atomic_path, write_json_atomic

SCHEMA = "speclab.block_features"
VERSION = 1
KINDS = ("train", "heldout")
_NAME = re.compile(r"^(train|heldout)-(\d{5})\.safetensors$")


class ShardError(ValueError):
    """A missing, incomplete or mismatched shard: one line naming the file and the mismatch."""


@dataclass(frozen=True)
class FeatureSpec:
    """What features a shard holds: identical for every shard of a directory and for the drafter."""

    target: str  # the target's short name (engine.models.load), e.g. qwen2.5-coder-1.5b
    hidden_size: int
    num_layers: int  # the target's depth (a layer id must be < it)
    vocab_size: int
    layers: tuple[int, ...]  # 0-indexed target layers whose outputs are stored
    dtype: str = "bf16"  # half the bytes of fp32; the drafter's input projection runs in bf16 anyway

    def __post_init__(self) -> None:
        if not self.layers or any(not 0 <= l < self.num_layers for l in self.layers):
            raise ValueError(f"layers {self.layers} must be non-empty ids in [0, {self.num_layers})")

    @property
    def feat_dim(self) -> int:
        return len(self.layers) * self.hidden_size

    def to_dict(self) -> dict:
        return {**asdict(self), "layers": list(self.layers)}

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpec":
        f = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**{**f, "layers": tuple(f.get("layers", ()))})

    def mismatch(self, other: "FeatureSpec") -> str:
        """'' when equal, else the first differing field as 'field: theirs ≠ ours'."""
        a, b = other.to_dict(), self.to_dict()
        for k in b:
            if a.get(k) != b[k]:
                return f"{k} {a.get(k)!r} ≠ expected {b[k]!r}"
        return ""


def shard_name(kind: str, index: int) -> str:
    if kind not in KINDS:
        raise ValueError(f"shard kind {kind!r} is not one of {KINDS}")
    return f"{kind}-{index:05d}.safetensors"


def manifest_path(shard: Path) -> Path:
    return shard.with_suffix(".json")


def write_shard(root: Path, kind: str, index: int, arrays: dict[str, torch.Tensor], manifest: dict) -> Path:
    """Write one shard atomically: tensors first, manifest (with the file's byte size) last."""
    from safetensors.torch import save_file

    p = Path(root) / shard_name(kind, index)
    n, T = int(arrays["prompt_len"].numel()), int(arrays["ids"].numel())
    man = {"schema": SCHEMA, "version": VERSION, "kind": kind, "index": index, "sequences": n, "tokens": T,
           **manifest}
    with atomic_path(p) as tmp:
        save_file({k: v.contiguous() for k, v in arrays.items()}, str(tmp), metadata={"manifest": json.dumps(man)})
        man["bytes"] = tmp.stat().st_size
    write_json_atomic(man, manifest_path(p))
    return p


def is_complete(shard: Path) -> bool:
    """Both files present and the tensor file as long as its manifest says (the extractor's skip test)."""
    m = manifest_path(shard)
    if not shard.is_file() or not m.is_file():
        return False
    try:
        return json.loads(m.read_text()).get("bytes") == shard.stat().st_size
    except (OSError, ValueError):
        return False


def read_manifest(shard: Path, spec: FeatureSpec | None = None) -> dict:
    """The shard's manifest, checked for completeness and (with spec) against the expected features."""
    shard = Path(shard)
    m = manifest_path(shard)
    if not shard.is_file():
        raise ShardError(f"{shard}: missing shard")
    if not m.is_file():
        raise ShardError(f"{shard}: incomplete shard (no manifest {m.name}: its extraction was interrupted; "
                         "rerun the extractor to redo it)")
    try:
        man = json.loads(m.read_text())
    except ValueError as e:
        raise ShardError(f"{m}: manifest is not JSON ({e})") from None
    if not isinstance(man, dict) or man.get("schema") != SCHEMA:
        raise ShardError(f"{m}: schema {man.get('schema') if isinstance(man, dict) else None!r} is not {SCHEMA!r}")
    if man.get("version") != VERSION:
        raise ShardError(f"{m}: unsupported version {man.get('version')!r} (this reader knows {VERSION})")
    if man.get("bytes") != shard.stat().st_size:
        raise ShardError(f"{shard}: incomplete shard ({shard.stat().st_size} bytes, manifest says {man.get('bytes')})")
    if spec is not None:
        try:
            got = FeatureSpec.from_dict(man)
        except (TypeError, ValueError) as e:
            raise ShardError(f"{m}: bad feature spec ({e})") from None
        why = spec.mismatch(got)
        if why:
            raise ShardError(f"{shard}: features of another kind: {why}")
    return man


def load_shard(shard: Path, spec: FeatureSpec) -> dict[str, torch.Tensor]:
    """The checked tensors of one shard (see the module doc)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    man = read_manifest(shard, spec)
    try:
        d = load_file(str(shard))
    except (SafetensorError, OSError) as e:
        raise ShardError(f"{shard}: unreadable shard ({e})") from None
    T, n = man["tokens"], man["sequences"]
    want = {"ids": (T,), "offsets": (n + 1,), "prompt_len": (n,), "feats": (T, spec.feat_dim), "target_next": (T,)}
    for k, shape in want.items():
        if k not in d:
            raise ShardError(f"{shard}: tensor {k!r} missing")
        if tuple(d[k].shape) != shape:
            raise ShardError(f"{shard}: tensor {k!r} has shape {tuple(d[k].shape)}, expected {shape}")
    if d["feats"].dtype != torch.bfloat16 and spec.dtype == "bf16":
        raise ShardError(f"{shard}: feats are {d['feats'].dtype}, expected bf16")
    if int(d["offsets"][-1]) != T or bool((d["offsets"][1:] < d["offsets"][:-1]).any()):
        raise ShardError(f"{shard}: offsets do not partition the {T} tokens")
    return d


def check_dataset(root: Path, spec: FeatureSpec, create: bool = False, extra: dict | None = None) -> dict:
    """`dataset.json` of a data directory: created when absent (create=True), else it must match spec."""
    p = Path(root) / "dataset.json"
    if not p.is_file():
        if not create:
            raise ShardError(f"{p}: missing (no feature data here: run `python -m engine dpace extract-qwen`)")
        d = {"schema": SCHEMA, "version": VERSION, **spec.to_dict(), **(extra or {})}
        write_json_atomic(d, p)
        return d
    try:
        d = json.loads(p.read_text())
        got = FeatureSpec.from_dict(d)
    except (ValueError, TypeError) as e:
        raise ShardError(f"{p}: unreadable dataset description ({e})") from None
    why = spec.mismatch(got)
    if why:
        raise ShardError(f"{p}: this directory holds features of another kind: {why}; use another --out-dir")
    return d


def dataset_spec(root: Path) -> FeatureSpec:
    p = Path(root) / "dataset.json"
    if not p.is_file():
        raise ShardError(f"{p}: missing (no feature data here: run `python -m engine dpace extract-qwen`)")
    try:
        return FeatureSpec.from_dict(json.loads(p.read_text()))
    except (ValueError, TypeError) as e:
        raise ShardError(f"{p}: unreadable dataset description ({e})") from None


def list_shards(root: Path, kind: str) -> list[Path]:
    """Shards of a kind in index order; a gap in the numbering is a missing shard (one-line error)."""
    out = sorted((p for p in Path(root).glob(f"{kind}-*.safetensors") if _NAME.match(p.name)))
    for i, p in enumerate(out):
        if int(_NAME.match(p.name).group(2)) != i:
            raise ShardError(f"{Path(root) / shard_name(kind, i)}: missing shard (the next one, {p.name}, exists)")
    return out


def sequences(d: dict[str, torch.Tensor]) -> list[tuple[int, int, int]]:
    """(start, end, prompt_len) of every sequence of a loaded shard."""
    off = d["offsets"].tolist()
    return [(off[i], off[i + 1], int(d["prompt_len"][i])) for i in range(len(off) - 1)]
