"""Hostile variants of the committed peer-engine fixtures (tests/fixtures/peers), shared by the importer
fuzz test (tests/unit/interop/test_fuzz_peers.py) and anyone surveying the importers by hand.

Families, each a deterministic list of (label, file name, bytes): truncation, another engine's file,
missing keys, wrong types, unequal arrays, out-of-range and non-finite numbers, deep nesting, lone
surrogates, a literal 1e400, BOM / CRLF / non-UTF-8 bytes, a JSON list instead of lines (and back),
and for Prometheus scrapes: duplicated, concatenated, repeated or decreasing series, superscript
digits and malformed label sets.

Not a test module (no test_ prefix): pytest does not collect it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

FIX = Path(__file__).resolve().parent / "fixtures" / "peers"
JSONL = ["vllm-draft-k2.jsonl", "vllm-ngram-k4.jsonl", "llamacpp-draft-k4.jsonl", "llamacpp-ar.jsonl"]
SGLANG = ('{"text": "hi", "meta_info": {"id": "a", "prompt_tokens": 12, "completion_tokens": 20, "spec_verify_ct": 8, '
          '"spec_accept_length": 2.5, "spec_accept_rate": 0.5, "finish_reason": {"type": "length"}, '
          '"e2e_latency": 1.5}, "question_id": 3, "category": "qa"}\n'
          '{"text": "yo", "meta_info": {"id": "b", "prompt_tokens": 9, "completion_tokens": 9, "spec_verify_ct": 9, '
          '"finish_reason": {"type": "stop"}, "e2e_latency": 0.5}}\n').encode()
WRONG = [None, True, "7", -1, 2.5, 1e308, 10 ** 30, [], {}, [1, "x"], -0.5]
RAW = ["NaN", "Infinity", "1e400", "-1e400", '"\\ud800"', "18446744073709551616"]


def base_files() -> dict[str, bytes]:
    out = {n: (FIX / n).read_bytes() for n in JSONL}
    out["sglang.jsonl"] = SGLANG
    out["vllm-draft-k4.prom"] = (FIX / "vllm-draft-k4.prom").read_bytes()
    out["llamacpp-k4.log"] = (FIX / "llamacpp-speculative-simple-k4.log").read_bytes()
    out["llamacpp-speclog.jsonl"] = (FIX / "llamacpp-speclog.jsonl").read_bytes()
    out["aiperf-vllm-k3.jsonl"] = (FIX / "aiperf-vllm-k3.jsonl").read_bytes()
    out["llamacpp-stats.log"] = (FIX / "llamacpp-stats.log").read_bytes()
    return out


def _records(data: bytes) -> list[dict]:
    return [json.loads(x) for x in data.decode().splitlines() if x.strip()]


def _dump(recs: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def _paths(d: object, prefix: tuple = ()) -> Iterator[tuple]:
    """Key paths into a record, two levels deep (lists of ints are leaves)."""
    if isinstance(d, dict):
        for k, v in d.items():
            yield prefix + (k,)
            if len(prefix) < 2:
                yield from _paths(v, prefix + (k,))


def _set(d: dict, path: tuple, value=None, drop: bool = False) -> None:
    for k in path[:-1]:
        d = d[k]
    if drop:
        d.pop(path[-1], None)
    else:
        d[path[-1]] = value


def _get(d: dict, path: tuple):
    for k in path:
        d = d[k]
    return d


def json_mutants(name: str, data: bytes) -> Iterator[tuple[str, str, bytes]]:
    recs = _records(data)
    at = 1 if recs[0].get("type") == "speclab.peer_header" else 0  # mutate the first real record
    paths = list(_paths(recs[at]))
    for p in paths:
        r = json.loads(json.dumps(recs))
        _set(r[at], p, drop=True)
        yield f"missing {'.'.join(map(str, p))}", name, _dump(r)
        for v in WRONG:
            r = json.loads(json.dumps(recs))
            _set(r[at], p, v)
            yield f"{'.'.join(map(str, p))} = {v!r}"[:80], name, _dump(r)
        if isinstance(_get(recs[at], p), list):
            r = json.loads(json.dumps(recs))
            _get(r[at], p).append(1)
            yield f"{'.'.join(map(str, p))} one entry longer", name, _dump(r)
            r = json.loads(json.dumps(recs))
            _set(r[at], p, [1] * 1_000_000)
            yield f"{'.'.join(map(str, p))} 10^6 entries", name, _dump(r)
        if not isinstance(_get(recs[at], p), (dict, list)):
            for raw in RAW:
                r = json.loads(json.dumps(recs))
                _set(r[at], p, "@@RAW@@")
                yield f"{'.'.join(map(str, p))} = {raw}", name, _dump(r).replace(b'"@@RAW@@"', raw.encode())
    r = json.loads(json.dumps(recs))
    r[at]["extra"] = "@@DEEP@@"
    yield "nested 5000 deep", name, _dump(r).replace(b'"@@DEEP@@"', b"[" * 5000 + b"]" * 5000)
    r = json.loads(json.dumps(recs))
    r[at]["extra"] = "@@DEEP@@"
    yield "nested 200 deep", name, _dump(r).replace(b'"@@DEEP@@"', b'{"a":' * 200 + b"1" + b"}" * 200)
    yield "question_id 1e30", name, _dump([*recs[:at], {**recs[at], "question_id": 1e30}, *recs[at + 1:]])
    for cut in (len(data) // 3, len(data) // 2, len(data) - 5, len(data) - 1):
        yield f"truncated at {cut}", name, data[:cut]
    yield "BOM", name, b"\xef\xbb\xbf" + data
    yield "CRLF", name, data.replace(b"\n", b"\r\n")
    yield "non-UTF-8", name, data[:40] + b"\xff\xfe" + data[40:]
    yield "JSON list", name.replace(".jsonl", ".json"), json.dumps(recs).encode()
    yield "blank line after the first record", name, data.replace(b"\n", b"\n\n", 1)
    yield "duplicated", name, data + data
    first = json.loads(json.dumps(recs))
    first[at]["padding"] = "x" * (1 << 20)
    yield "first record over 1 MiB", name, _dump(first)


def prom_mutants(name: str, data: bytes) -> Iterator[tuple[str, str, bytes]]:
    text = data.decode()
    lines = text.splitlines()
    samples = [i for i, x in enumerate(lines) if x and not x.startswith("#")]
    for cut in (len(data) // 2, len(data) - 3, len(data) - 1):
        yield f"truncated at {cut}", name, data[:cut]
    yield "duplicated whole", name, data + data
    other = (FIX / "vllm-draft-k2.prom").read_bytes()
    yield "two scrapes concatenated", name, data + other
    for i in samples:
        yield f"line {i + 1} repeated", name, ("\n".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]) + "\n").encode()
        head, _, value = lines[i].rpartition(" ")
        for v in ("-1", "NaN", "+Inf", "1e400", "2.5", "x", str(float(value) * 0 + 10 ** 18)):
            yield f"line {i + 1} = {v}", name, ("\n".join(lines[:i] + [f"{head} {v}"] + lines[i + 1:]) + "\n").encode()
        if float(value) >= 1:
            yield f"line {i + 1} decreased", name, ("\n".join(lines[:i] + [f"{head} {float(value) - 1}"] +
                                                              lines[i + 1:]) + "\n").encode()
    pos = [i for i in samples if 'position="' in lines[i]]
    for sup in ("²", "٣", "1_0", " 1", "-1", ""):
        i = pos[-1]
        bad = lines[i].replace(f'position="{len(pos) - 1}"', f'position="{sup}"')
        yield f"position label {sup!r}", name, ("\n".join(lines[:i] + [bad] + lines[i + 1:]) + "\n").encode()
    i = samples[0]
    for broken in ('{engine="0",model_name="m"', '{engine="0" model_name="m"}', '{engine=0}', '{="0"}'):
        metric = lines[i].split("{")[0]
        yield f"labels {broken}", name, ("\n".join(lines[:i] + [f"{metric}{broken} 5.0"] + lines[i + 1:]) + "\n").encode()
    yield "BOM", name, b"\xef\xbb\xbf" + data
    yield "CRLF", name, data.replace(b"\n", b"\r\n")
    yield "non-UTF-8", name, data[:40] + b"\xff" + data[40:]


def log_mutants(name: str, data: bytes) -> Iterator[tuple[str, str, bytes]]:
    text = data.decode()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1):
        yield f"truncated at {cut}", name, data[:cut]
    for key in ("n_predict", "n_drafted", "n_accept", "n_draft", "accept"):
        line = next(x for x in text.splitlines() if f" {key} " in x)
        yield f"{key} missing", name, text.replace(line + "\n", "", 1).encode()
        for v in ("-1", "99999999999", "2.5", "x", "1e400", "nan"):
            k, _, old = line.partition("= ")
            yield f"{key} = {v}", name, text.replace(line, f"{k}= {v}{'%' if key == 'accept' else ''}", 1).encode()
    yield "decoded 1e400 seconds", name, text.replace("seconds", "", 0).replace("32.340 seconds", "1e400 seconds").encode()
    yield "BOM", name, b"\xef\xbb\xbf" + data
    yield "CRLF", name, data.replace(b"\n", b"\r\n")
    yield "non-UTF-8", name, data[:40] + b"\xff" + data[40:]


def all_mutants() -> list[tuple[str, str, bytes]]:
    out = []
    for name, data in base_files().items():
        if name.endswith(".prom"):
            out += list(prom_mutants(name, data))
        elif name.startswith("llamacpp-stats"):
            out += list(stats_mutants(name, data))
        elif name.endswith(".log"):
            out += list(log_mutants(name, data))
        else:
            out += list(json_mutants(name, data))
    for name, data in base_files().items():  # another engine's file under each format
        for other in ("x.jsonl", "x.prom", "x.log"):
            out.append((f"{name} named {other}", other, data))
    return out


def stats_mutants(name: str, data: bytes) -> Iterator[tuple[str, str, bytes]]:
    """llama.cpp statistics lines: each counter, the mean and the per-position rates mistyped or out of
    range, lines cut, dropped, repeated and swapped, and the encodings."""
    text = data.decode()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 40, len(data) - 1):
        yield f"truncated at {cut}", name, data[:cut]
    stats = [x for x in text.splitlines() if "statistics" in x]
    for fld in ("#calls(b,g,a) =", "#gen drafts =", "#acc drafts =", "#gen tokens =", "#acc tokens =",
                "#mean acc len =", "#acc rate/pos = ("):
        for line in stats:
            head, _, tail = line.partition(fld)
            value = tail.lstrip().split(",")[0].split(")")[0].split()[0]
            for v in ("-1", "x", "1e400", "nan", "2.5", "99999999999999", "0", "1.5", ""):
                bad = head + fld + " " + tail.lstrip().replace(value, v, 1)
                yield f"{fld} {v!r} on {line[:12]}", name, text.replace(line, bad, 1).encode()
    last = stats[-1]
    yield "a rate dropped", name, text.replace(", 0.489)", ")").encode()
    yield "a rate added", name, text.replace("0.489)", "0.489, 0.100)").encode()
    yield "the last line repeated", name, (text + last + "\n").encode()
    yield "the lines swapped", name, text.replace(stats[0], "@@").replace(stats[1], stats[0]).replace("@@", stats[1]).encode()
    yield "the first line dropped", name, text.replace(stats[0] + "\n", "").encode()
    yield "another implementation", name, (text + last.replace("draft-mtp", "ngram-mod") + "\n").encode()
    yield "BOM", name, b"\xef\xbb\xbf" + data
    yield "CRLF", name, data.replace(b"\n", b"\r\n")
    yield "non-UTF-8", name, data[:40] + b"\xff" + data[40:]
