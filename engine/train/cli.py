"""Argparse from frozen config dataclasses (one flag per field, defaults from the dataclass)."""

from __future__ import annotations

import argparse
import dataclasses


def add_dataclass_args(p: argparse.ArgumentParser, cls) -> None:
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        d = f.default
        if isinstance(d, bool):
            p.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=d, metavar="BOOL")
        elif isinstance(d, tuple):
            p.add_argument(flag, type=lambda s: tuple(int(x) for x in s.split(",") if x != ""), default=d,
                           metavar="I,J,..")
        else:
            p.add_argument(flag, type=type(d), default=d)


def dataclass_from_args(cls, ns: argparse.Namespace):
    return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})
