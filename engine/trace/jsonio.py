"""Result files that an interrupted run cannot corrupt: write a sibling .tmp, then rename over."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(obj: Any, path: str | os.PathLike, indent: int = 1) -> Path:
    """json.dumps(obj) to `path` via `path.tmp` + os.replace (atomic on POSIX): a kill leaves either
    the previous file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=indent))
    os.replace(tmp, path)
    return path
