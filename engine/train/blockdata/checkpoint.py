"""Training checkpoints that survive a kill: safetensors tensors + a JSON state, never a pickle.

    <run>/ckpt-<step>.safetensors   model weights ("model.<name>") and AdamW moments ("opt.<i>.exp_avg", …)
    <run>/ckpt.json                 {"schema", "step", "file", "wall_s", "trace_offset", "config", "opt": …}

The tensors are written first under a step-numbered name, then ckpt.json (atomically) points at them,
then the previous tensor file is removed: a kill at any moment leaves one consistent (json, tensors)
pair. Resuming with another config is a one-line error naming ckpt.json and the first differing field;
nothing is overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.trace.jsonio import atomic_path, write_json_atomic

SCHEMA = "speclab.block_ckpt"


class CheckpointError(ValueError):
    """A checkpoint that does not belong to this run (one line: file and mismatch)."""


def _opt_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for i, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v) and v.dim() > 0:
                tensors[f"opt.{i}.{k}"] = v.contiguous()
            else:
                scalars[f"{i}.{k}"] = float(v)
    return tensors, {"scalars": scalars, "param_groups": sd["param_groups"]}


def save_checkpoint(run: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict) -> Path:
    """state: step, wall_s, trace_offset, config (a JSON dict)."""
    from safetensors.torch import save_file

    run = Path(run)
    tens = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    ot, meta = _opt_tensors(opt)
    tens.update(ot)
    name = f"ckpt-{int(state['step']):07d}.safetensors"
    with atomic_path(run / name) as tmp:
        save_file(tens, str(tmp), metadata={"schema": SCHEMA, "step": str(state["step"])})
    old = run / "ckpt.json"
    prev = json.loads(old.read_text()).get("file") if old.is_file() else None
    write_json_atomic({"schema": SCHEMA, **state, "file": name, "opt": meta}, old)
    if prev and prev != name:
        (run / prev).unlink(missing_ok=True)
    return run / name


def load_checkpoint(run: Path, config: dict, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict | None:
    """Restore model + optimizer from <run>/ckpt.json; None when there is none. The config must match."""
    from safetensors.torch import load_file

    p = Path(run) / "ckpt.json"
    if not p.is_file():
        return None
    try:
        st = json.loads(p.read_text())
    except ValueError as e:
        raise CheckpointError(f"{p}: not JSON ({e})") from None
    if st.get("schema") != SCHEMA:
        raise CheckpointError(f"{p}: schema {st.get('schema')!r} is not {SCHEMA!r}")
    theirs = st.get("config") or {}
    config = json.loads(json.dumps(config))  # tuples compare as the lists JSON gives back
    for k in sorted(set(config) | set(theirs)):
        if theirs.get(k) != config.get(k):
            raise CheckpointError(f"{p}: checkpoint of another config ({k} = {theirs.get(k)!r}, this run has "
                                  f"{config.get(k)!r}); use another --runs-dir or delete {p.parent}")
    f = Path(run) / st["file"]
    if not f.is_file():
        raise CheckpointError(f"{p}: its tensor file {f.name} is missing")
    t = load_file(str(f))
    msd = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
    try:
        model.load_state_dict(msd)
    except RuntimeError as e:
        raise CheckpointError(f"{f}: weights do not fit this drafter ({str(e).splitlines()[0]})") from None
    meta = st["opt"]
    state: dict = {}
    for k, v in t.items():
        if k.startswith("opt."):
            _, i, name = k.split(".", 2)
            state.setdefault(int(i), {})[name] = v
    for key, v in meta["scalars"].items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = torch.tensor(v)
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return st


class RunLock:
    """<run>/lock (O_EXCL, holding the pid): a second process on the same run directory would truncate
    the first one's trace and race its checkpoints, so it is refused in one line. A lock left by a
    killed process (its pid gone) is taken over."""

    def __init__(self, run: Path) -> None:
        self.path = Path(run) / "lock"

    def __enter__(self) -> "RunLock":
        import os

        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                try:
                    pid = int(self.path.read_text().strip() or 0)
                except (OSError, ValueError):
                    pid = 0
                if pid and pid != os.getpid() and _alive(pid):
                    raise CheckpointError(f"{self.path}: process {pid} is training this run; wait for it or "
                                          "stop it first") from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            return self
        raise CheckpointError(f"{self.path}: could not take the run lock")

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
