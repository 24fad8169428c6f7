"""Uploads that outlive the browser tab: every accepted upload is kept as its own file in one local
folder and loaded again into each new session, so a reload (or tomorrow's visit) finds it.

    folder()           $SPECLAB_UPLOADS, else ~/.cache/speclab/uploads (tests point the variable at a temp dir)
    save(name, data)   keep an upload (same name: replaced)
    remove(name)       delete it from the folder
    restore(add)       load the folder's files into this session through `add` (app.traces.add_trace_bytes);
                       returns {file: one-line error} for those that no longer load. A broken file is left
                       exactly as it is: the user may want it back; the rest of the app is unaffected.

Files are re-read when their size or mtime changes (an edit in place shows up on the next rerun).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

ENV = "SPECLAB_UPLOADS"


def folder() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "speclab" / "uploads").expanduser()


def _safe(name: str) -> str:
    base = Path(name).name.strip() or "upload"
    return "".join(ch if ch.isalnum() or ch in "._- " else "_" for ch in base)


def save(name: str, data: bytes) -> Path | None:
    """Write atomically (a crash leaves the old file or none, never half of one); None if the folder
    cannot be written (the upload then stays for this session only)."""
    d = folder()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        path = d / _safe(name)
        os.replace(tmp, path)
        return path
    except OSError:
        return None


def remove(name: str) -> None:
    try:
        (folder() / _safe(name)).unlink()
    except OSError:
        pass


def files() -> list[Path]:
    d = folder()
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith("."))


def stamp(p: Path) -> tuple[int, float]:
    st = p.stat()
    return st.st_size, st.st_mtime


def restore(add: Callable[[str, bytes], tuple[str | None, str | None]], seen: dict[str, tuple]) -> dict[str, str]:
    """Load every kept file not yet loaded at its current (size, mtime) into the session; `seen` is the
    session's record of what was loaded (updated in place). Returns {file name: error line}."""
    errors = {}
    for p in files():
        try:
            key = stamp(p)
            if seen.get(p.name, (None,))[0] == key:
                if seen[p.name][1]:
                    errors[p.name] = seen[p.name][1]
                continue
            label, err = add(p.name, p.read_bytes())
        except OSError as e:
            key, err = None, f"{p.name}: could not be read ({e.strerror or type(e).__name__})"
        if err:
            err = f"Kept upload {err if err.startswith(p.name) else f'{p.name}: {err}'} — left as it is in the upload folder (the server's ${ENV}, never shown to visitors)"
            errors[p.name] = err
        seen[p.name] = (key, err)
    for gone in set(seen) - {p.name for p in files()}:
        seen.pop(gone)
    return errors
