"""Files that an interrupted run cannot corrupt: write a sibling temporary file, then rename it over.

This is the one atomic-write helper of the project; JSON results, safetensors weights, parquet
summaries and trace files all go through `atomic_path`.

Example:
    with atomic_path("models/x/model.safetensors") as tmp:
        save_file(tensors, tmp)          # a kill here leaves the old file (or none), never half a file
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield `path` + suffix to write to; on a clean exit it replaces `path` (os.replace is atomic on
    POSIX), on an exception it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + suffix)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes_atomic(data: bytes, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(text: str, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json_atomic(obj: Any, path: str | os.PathLike, indent: int = 1) -> Path:
    """json.dumps(obj) to `path` atomically: a kill leaves either the previous file or the new one."""
    return write_text_atomic(json.dumps(obj, indent=indent), path)
