"""Argparse from frozen config dataclasses (one flag per field, defaults from the dataclass).

On the engine's ground floor, beside paths.py: engine/cli/ and the training scripts under engine/train/ both
build their flags with it, and train/ sits below cli/."""

from __future__ import annotations

import argparse
import dataclasses


def add_dataclass_args(p: argparse.ArgumentParser, cls, unset_default: bool = False) -> None:
    """unset_default: every flag defaults to None, so `override` can tell which ones were given."""
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        d = f.default
        default = None if unset_default else d
        extra = {"help": f"default {d!r}"} if unset_default else {}
        if isinstance(d, bool):
            p.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default, metavar="BOOL",
                           **extra)
        elif isinstance(d, tuple):
            p.add_argument(flag, type=lambda s: tuple(int(x) for x in s.split(",") if x != ""), default=default,
                           metavar="I,J,..", **extra)
        else:
            p.add_argument(flag, type=type(d), default=default, **extra)


def dataclass_from_args(cls, ns: argparse.Namespace):
    return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})


def override(base, ns: argparse.Namespace):
    """`base` with every field the command line gave (flags added with unset_default=True)."""
    given = {f.name: getattr(ns, f.name) for f in dataclasses.fields(base) if getattr(ns, f.name, None) is not None}
    return dataclasses.replace(base, **given)
