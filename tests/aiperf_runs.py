"""An AIPerf run's twin without speculation, for the ×AR tests (unit, CLI and app): the same requests with the
acceptance records removed and each request's latency multiplied by `slower`, so the expected ×AR is `slower`."""

from __future__ import annotations

import json


def ar_of(data: bytes, slower: float) -> bytes:
    out = []
    for line in data.decode().splitlines():
        r = json.loads(line)
        r.pop("spec_decode_acceptance", None)
        if "request_latency" in r["metrics"]:
            r["metrics"]["request_latency"]["value"] *= slower
        out.append(json.dumps(r))
    return ("\n".join(out) + "\n").encode()
