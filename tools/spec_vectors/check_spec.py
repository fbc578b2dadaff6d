#!/usr/bin/env python3
"""Cross-checks the spec against things that are not the C++ codec.

1. Re-encodes every test vector with an encoder written from the spec's
   field tables (no shared code with engine/src/wire.cpp) and compares the
   bytes with the hex published in docs/spec/metaroce-v0.1.md section 3.15.
2. Checks that tests/wire/wire_test.cpp carries the same hex as the spec.
3. Checks the spec against the code it describes: the SACK word limit of
   include/metaroce/wire.hpp (sections 3.2, 3.9, ACK-8, BAD-6 and
   tests/wire), the NAK code range of include/metaroce/status.hpp (BAD-6,
   NAK-2, section 12, appendix A), the ranges config.hpp gives window_log2, mtu, num_paths and
   dctcp_g_shift, and the parameter tables of sections 8.3, 9 and appendix B against the fields and
   defaults of include/metaroce/config.hpp (no parameter the code lacks, every
   CcConfig / RecoveryConfig field listed, the same default).
   With --ranges PATH (the metaroce-config-ranges executable): checks the
   Range column of those tables, and appendix B's list of relations between
   fields, against what config_error enforces, probed at each edge; every
   integer field of config.hpp must be probed.
4. With --printer PATH (the metaroce-spec-vectors executable): checks that the
   text of section 3.15's vectors is exactly what the printer writes, field
   lines included, not only the hex.
5. Checks that every rule the spec states ("**ID** (LEVEL)") is stated once
   and listed in the conformance section (12), and that every rule ID cited
   in the code, tests, tools and docs (not BENCHMARKS.md's history) is one
   the spec states; and that every test section 12 names (a backquoted
   CamelCase word that is no identifier of the code, `Suite.Name` or
   `Suite.*`) is a test under tests/.
6. Checks each vector against the protocol rules (check_vector_rules): a
   data packet's payload length (SEQ-5, TRIM-5), a READ_RESP's READ_REQ, an
   ACK's echo taken from one packet (ACK-6). With --selftest, only shows that
   this check fails on the vectors published before it (TV-07, TV-08).

Usage: tools/spec_vectors/check_spec.py [--printer PATH] [--ranges PATH] [--selftest]
"""
import difflib
import pathlib
import re
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs/spec/metaroce-v0.1.md"
TEST = ROOT / "tests/wire/wire_test.cpp"
WIRE_HPP = ROOT / "include/metaroce/wire.hpp"
CONFIG_HPP = ROOT / "include/metaroce/config.hpp"
STATUS_HPP = ROOT / "include/metaroce/status.hpp"


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for x in data:
        c = _T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def bh(flags, op, tag, dst, psn, ts):
    return struct.pack(">BBHIII", (1 << 4) | flags, op, tag, dst, psn, ts)


def mh(msn, off, length):
    return struct.pack(">III", msn, off, length)


def rh(key, addr):
    return struct.pack(">QQ", key, addr)


def seal(headers, payload, pc):
    return headers + payload + struct.pack(">I", crc32c(headers + payload if pc else headers))


def conn(src, ipsn, mtu, wl2, reads, code, maxv, nonce, reply_port=0):
    return struct.pack(">IIHBBBBHQ", src, ipsn, mtu, wl2, reads, code, maxv, reply_port, nonce)


def ack(cum, epsn, ets, etag, flags, words):
    body = struct.pack(">IIIHBBI", cum, epsn, ets, etag, flags, len(words), 0)
    return body + b"".join(struct.pack(">Q", w) for w in words)


def expected():
    p8 = bytes(range(8))
    nonce = 0x0123456789ABCDEF
    return {
        "TV-01": seal(bh(8, 0x01, 0x23, 0x2A, 0x1000, 0x12345678) + mh(0, 4096, 4104)
                      + rh(0x0102030405060708, 0x7F0000001000), p8, 1),
        "TV-02": seal(bh(0xC, 0x02, 0x24, 0x2A, 0x1001, 0x12345680) + mh(5, 0, 4)
                      + rh(0x0102030405060708, 0x7F0000002000) + struct.pack(">I", 0xDEADBEEF),
                      bytes([0xAA, 0xBB, 0xCC, 0xDD]), 1),
        "TV-03": seal(bh(8, 0x03, 0x25, 0x2A, 0x1002, 0x12345690) + mh(2, 0, 8), p8, 1),
        "TV-04": seal(bh(0, 0x03, 0x25, 0x2A, 0x1002, 0x12345690) + mh(2, 0, 8), p8, 0),
        "TV-05": seal(bh(8, 0x04, 0x26, 0x2A, 0x1003, 0x123456A0) + mh(3, 0, 0)
                      + struct.pack(">I", 0xCAFE), b"", 1),
        "TV-06": seal(bh(0xC, 0x05, 0x27, 0x2A, 0x1004, 0x123456B0) + mh(1, 0, 8200)
                      + rh(0x1112131415161718, 0x7F0000100000), b"", 1),
        "TV-07": seal(bh(8, 0x06, 0x41, 7, 0x80000000, 0x0A0B0C0D) + mh(1, 8192, 8200),
                      bytes(range(0x10, 0x18)), 1),
        "TV-08": seal(bh(8, 0x10, 0, 7, 0, 0xBEEF)
                      + ack(0x1000, 0x1003, 0x123456A0, 0x26, 0x01, [0x5]), b"", 0),
        "TV-09": seal(bh(8, 0x10, 0, 7, 0, 0xBF00)
                      + ack(0x1005, 0, 0x12345700, 0x45, 0x04, []), b"", 0),
        "TV-10": seal(bh(8, 0x11, 0, 7, 0, 0xBF10)
                      + struct.pack(">IB3xII", 0x1001, 0x02, 5, 0x1001), b"", 0),
        "TV-11": seal(bh(0xC, 0x12, 0x45, 0x2A, 0, 0x12345700), b"", 0),
        "TV-12": seal(bh(8, 0x20, 0, 0, 0, 1) + conn(7, 0x9E3779B9, 4096, 10, 16, 0, 1, nonce, 4792),
                      b"", 0),
        "TV-13": seal(bh(8, 0x21, 0, 7, 0, 2) + conn(0x2A, 0x7F4A7C15, 4096, 10, 16, 0, 1, nonce),
                      b"", 0),
        "TV-14": seal(bh(8, 0x22, 0, 7, 0, 3) + conn(0, 0, 0, 0, 0, 0x48, 1, nonce), b"", 0),
        "TV-15": seal(bh(8, 0x23, 0, 0x2A, 0, 4) + struct.pack(">IB3x", 7, 0), b"", 0),
        "TV-16": seal(bh(8, 0x24, 0, 7, 0, 5) + struct.pack(">IB3x", 0x2A, 0), b"", 0),
    }


# Data opcodes and their header lengths (section 3.2, without the ICRC).
_DATA_HEADERS = {0x01: 44, 0x02: 48, 0x03: 28, 0x04: 32, 0x05: 44, 0x06: 28}
_READ_REQ, _READ_RESP, _ACK, _PROBE, _CONNECT_REQ, _CONNECT_ACCEPT = 0x05, 0x06, 0x10, 0x12, 0x20, 0x21
_ECHO_PROBE = 0x04


def check_vector_rules(vectors):
    """Each vector against the protocol, not only its own fields: the codec
    check passes a packet no receiver may accept. With the mtu TV-12/TV-13
    agree, every data packet but a READ_REQ carries min(mtu, msg_len - offset)
    bytes at an offset that is a multiple of the mtu (SEQ-5, TRIM-5); a
    READ_RESP answers a READ_REQ vector of its msn and length (PLACE-4); an
    ACK echoes the psn, tsval and path_tag of one packet (ACK-6), a data or
    PROBE vector sent to the ACK's sender, a PROBE exactly when ECHO_PROBE is
    set (LOSS-8). The vectors are independent examples (section 3.15), so
    nothing here reads them as one exchange."""
    bad = []
    fields = {}
    for name, b in sorted(vectors.items()):
        if len(b) < 20:
            bad.append(f"{name}: {len(b)} bytes, shorter than a base header and ICRC")
            continue
        f = {"op": b[1]}
        f["tag"], f["dst"], f["psn"], f["tsval"] = struct.unpack(">HIII", b[2:16])
        if f["op"] in _DATA_HEADERS:
            f["msn"], f["offset"], f["msg_len"] = struct.unpack(">III", b[16:28])
            f["payload"] = len(b) - _DATA_HEADERS[f["op"]] - 4
        elif f["op"] == _ACK:
            (f["echo_psn"], f["echo_tsval"], f["echo_tag"],
             f["ack_flags"]) = struct.unpack(">IIHB", b[20:31])
        elif f["op"] in (_CONNECT_REQ, _CONNECT_ACCEPT):
            f["src"], _, f["mtu"] = struct.unpack(">IIH", b[16:26])
        fields[name] = f
    req = [f for f in fields.values() if f["op"] == _CONNECT_REQ]
    acc = [f for f in fields.values() if f["op"] == _CONNECT_ACCEPT]
    if len(req) != 1 or len(acc) != 1:
        return bad + ["vectors: want one CONNECT_REQ and one CONNECT_ACCEPT to take the mtu from"]
    mtu = min(req[0]["mtu"], acc[0]["mtu"])  # CONN-3
    peer = {req[0]["src"]: acc[0]["src"], acc[0]["src"]: req[0]["src"]}
    for name, f in sorted(fields.items()):
        if f["op"] in _DATA_HEADERS and f["op"] != _READ_REQ:
            want = min(mtu, f["msg_len"] - f["offset"]) if f["offset"] <= f["msg_len"] else None
            if f["payload"] != want:
                bad.append(f"{name}: {f['payload']} payload bytes at offset {f['offset']} of "
                           f"msg_len {f['msg_len']}, SEQ-5/TRIM-5 give {want} at mtu {mtu}: "
                           "every receiver drops it")
            if f["offset"] % mtu:
                bad.append(f"{name}: offset {f['offset']} is no multiple of the mtu {mtu} (SEQ-5)")
        if f["op"] == _READ_RESP:
            reads = [r for r in fields.values() if r["op"] == _READ_REQ and r["msn"] == f["msn"]
                     and r["dst"] == peer.get(f["dst"])]
            if not any(r["msg_len"] == f["msg_len"] for r in reads):
                bad.append(f"{name}: no READ_REQ vector of msn {f['msn']} and msg_len "
                           f"{f['msg_len']} that it answers (PLACE-4)")
        if f["op"] == _ACK:
            echo = (f["echo_psn"], f["echo_tsval"], f["echo_tag"])
            echoed = [(n, e) for n, e in sorted(fields.items())
                      if (e["op"] in _DATA_HEADERS or e["op"] == _PROBE)
                      and e["dst"] == peer.get(f["dst"]) and (e["psn"], e["tsval"], e["tag"]) == echo]
            if not echoed:
                bad.append(f"{name}: echo psn 0x{echo[0]:x} tsval 0x{echo[1]:x} path_tag "
                           f"0x{echo[2]:04x} are no one packet's sent to its sender (ACK-6)")
            elif (echoed[0][1]["op"] == _PROBE) != bool(f["ack_flags"] & _ECHO_PROBE):
                bad.append(f"{name}: echoes {echoed[0][0]}, ECHO_PROBE "
                           f"{'clear' if f['ack_flags'] & _ECHO_PROBE == 0 else 'set'} (LOSS-8)")
    return bad


# TV-06, TV-07 and TV-08 as published up to stop 54: a READ_RESP every
# receiver drops (8 bytes at offset 8192 of 65536) and an ACK whose echo
# took TV-05's psn with TV-01's tsval and path_tag. --selftest shows
# check_vector_rules finds both.
_OLD_VECTORS = {
    "TV-06": "1c050027 0000002a 00001004 123456b0 00000001 00000000 00010000 11121314"
             "15161718 00007f00 00100000 c1f1a7fc",
    "TV-07": "18060041 00000007 80000000 0a0b0c0d 00000001 00002000 00010000 10111213"
             "14151617 29734b08",
    "TV-08": "18100000 00000007 00000000 0000beef 00001000 00001003 12345678 00230101"
             "00000000 00000000 00000005 bc18f92d",
}


def selftest(spec):
    """check_vector_rules passes the spec's vectors and fails the old ones."""
    now = spec_vectors(spec)
    bad = [f"current vectors: {p}" for p in check_vector_rules(now)]
    old = dict(now, **{n: bytes.fromhex(h.replace(" ", "")) for n, h in _OLD_VECTORS.items()})
    found = check_vector_rules(old)
    for name, what in (("TV-07", "SEQ-5/TRIM-5"), ("TV-08", "ACK-6")):
        if not any(p.startswith(name + ":") and what in p for p in found):
            bad.append(f"old {name}: check_vector_rules missed its {what} defect")
    print("old vectors:\n  " + "\n  ".join(found))
    return bad


def spec_vectors(text):
    out = {}
    for m in re.finditer(r"^#### (TV-\d+) .*?```text\n(.*?)```", text, re.S | re.M):
        lines = [l for l in m.group(2).splitlines() if re.fullmatch(r"([0-9a-f]{2} )*[0-9a-f]{2}", l)]
        out[m.group(1)] = bytes.fromhex("".join(lines))
    return out


def test_vectors(text):
    out = {}
    for m in re.finditer(r'\{"(TV-\d+)",\s*((?:"[0-9a-f ]*"\s*)+)\}', text):
        out[m.group(1)] = bytes.fromhex("".join(re.findall(r'"([0-9a-f ]*)"', m.group(2))))
    return out


def check_printed(spec, printer):
    """Section 3.15 from its first vector to section 4 against the printer's Markdown."""
    start, end = spec.find("#### TV-01 "), spec.find("\n## 4. ")
    if start < 0 or end < 0:
        return ["spec: section 3.15's vectors not found"]
    printed = subprocess.run([printer], check=True, capture_output=True, text=True).stdout
    in_spec = spec[start:end + 1]
    if in_spec == printed:
        return []
    diff = difflib.unified_diff(in_spec.splitlines(), printed.splitlines(), "spec 3.15",
                                "metaroce-spec-vectors", lineterm="", n=1)
    return list(diff)


def _one(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise SystemExit(f"check_spec.py: cannot find {what}")
    return m


def check_limits(spec, test):
    """SACK word limit and window range: code, spec and wire tests agree."""
    bad = []
    words = int(_one(r"kMaxSackWords\s*=\s*(\d+)", WIRE_HPP.read_text(), "kMaxSackWords").group(1))
    config = CONFIG_HPP.read_text()
    lo = int(_one(r"kMinWindowLog2 = (\d+);", config, "kMinWindowLog2").group(1))
    hi = int(_one(r"kMaxWindowLog2 = (\d+);", config, "kMaxWindowLog2").group(1))
    min_mtu = int(_one(r"kMinMtu = (\d+);", config, "kMinMtu").group(1))
    max_mtu = int(_one(r"kMaxMtu = (\d+);", config, "kMaxMtu").group(1))
    max_paths = int(_one(r"kMaxPaths = (\d+);", config, "kMaxPaths").group(1))
    max_g_shift = int(_one(r"kMaxDctcpGShift = (\d+);", config, "kMaxDctcpGShift").group(1))
    if words * 64 != 1 << hi:
        bad.append(f"code: {words} SACK words cover {words * 64} PSNs, the largest window is {1 << hi}")
    claims = {
        "3.2 ACK row": (r"n = `sack_words`, 0\.\.(\d+)", words),
        "3.9 sack_words": (r"\| sack_words \| n, 0 to (\d+) \|", words),
        "3.9 range": (r"covers at most the (\d+) PSNs", words * 64),
        "ACK-8 words": (r"\*\*ACK-8\*\* \(MUST\) An ACK carries `cum_psn` and up to (\d+) SACK words", words),
        "ACK-8 range": (r"`cum_psn \+ 1` to `cum_psn \+ (\d+)`", words * 64),
        "BAD-6": (r"\*\*BAD-6\*\*[^\n]*\n?[^\n]*`sack_words` above (\d+)", words),
        "SEQ-3 low": (r"`window_log2` lies in (\d+)\.\.\d+", lo),
        "SEQ-3 high": (r"`window_log2` lies in \d+\.\.(\d+)", hi),
        "appendix B window_log2 low": (r"\| `window_log2` \| [^|]*\| ([\d,]+)\.\.", lo),
        "appendix B window_log2 high": (r"\| `window_log2` \| [^|]*\| [\d,]+\.\.([\d,]+)", hi),
        "appendix B mtu low": (r"\| `mtu` \| [^|]*\| ([\d,]+)\.\.", min_mtu),
        "appendix B mtu high": (r"\| `mtu` \| [^|]*\| [\d,]+\.\.([\d,]+)", max_mtu),
        "appendix B num_paths": (r"\| `num_paths` \| [^|]*\| 1\.\.([\d,]+)", max_paths),
        "8.3 dctcp_g_shift": (r"\| `dctcp_g_shift` \| [^|]*\| 0\.\.([\d,]+) \|", max_g_shift),
        "PATH-1 paths": (r"\*\*PATH-1\*\* \(MUST\) A connection uses `num_paths` entropy values "
                         r"\(default 8, at most (\d+)\)", max_paths),
    }
    for what, (pattern, want) in claims.items():
        m = re.search(pattern, spec)
        if not m:
            bad.append(f"spec {what}: statement not found")
        elif int(m.group(1).replace(",", "")) != want:
            bad.append(f"spec {what}: says {m.group(1)}, code has {want}")
    # NAK codes: the codec's range (is_wire_nak_code) where the spec states it.
    status = STATUS_HPP.read_text()
    nak = _one(r"is_wire_nak_code\(uint8_t v\) \{ return v >= 0x([0-9a-f]+) && v <= 0x([0-9a-f]+); \}",
               status, "is_wire_nak_code")
    nak_lo, nak_hi = int(nak.group(1), 16), int(nak.group(2), 16)
    nak_claims = {
        "BAD-6 NAK codes": (r"\*\*BAD-6\*\*[^*]*?a NAK code outside\s+0x([0-9a-f]+)-0x([0-9a-f]+)",
                            (nak_lo, nak_hi)),
        "section 12 BAD-6 row": (r"\| BAD-6 \|[^\n]*NAK codes 0 and (\d+)-255", (nak_hi + 1,)),
        "appendix A": (r"a NAK.s `code`: 0x([0-9a-f]+)-0x([0-9a-f]+)", (nak_lo, nak_hi)),
        "NAK-2 fatal codes": (r"\*\*NAK-2\*\* \(MUST\) Codes 0x[0-9a-f]+-0x([0-9a-f]+) are fatal",
                              (nak_hi,)),
    }
    for what, (pattern, want) in nak_claims.items():
        m = re.search(pattern, spec)
        base = 10 if what == "section 12 BAD-6 row" else 16
        if not m:
            bad.append(f"spec {what}: statement not found")
        elif tuple(int(g, base) for g in m.groups()) != want:
            bad.append(f"spec {what}: says {m.groups()}, code has {want}")
    m = re.search(r"kSpecMaxSackWords\s*=\s*(\d+)", test)
    if not m or int(m.group(1)) != words:
        bad.append(f"tests/wire kSpecMaxSackWords != kMaxSackWords ({words})")
    return bad


_UNITS = {"ns": 1, "us": 1000, "ms": 1000 ** 2, "s": 1000 ** 3}
_CXX_UNITS = {"kMicrosecond": 1000, "kMillisecond": 1000 ** 2, "kSecond": 1000 ** 3}


def config_fields():
    """{struct: {field: default}} from config.hpp (ints, bools, N * kUnit, and
    integer constants the header defines: `inline constexpr T kName = N;`)."""
    out = {}
    text = CONFIG_HPP.read_text()
    constants = {c.group(1): int(c.group(2))
                 for c in re.finditer(r"inline constexpr \w+ (k\w+) = (\d+);", text)}
    for m in re.finditer(r"struct (\w+) \{(.*?)\n\};", text, re.S):
        fields = {}
        for f in re.finditer(r"^\s*[\w:]+ (\w+) = ([^;]+);", m.group(2), re.M):
            expr = f.group(2).strip()
            if expr in ("true", "false"):
                fields[f.group(1)] = expr == "true"
            elif re.fullmatch(r"\d+", expr):
                fields[f.group(1)] = int(expr)
            elif expr in constants:
                fields[f.group(1)] = constants[expr]
            elif (u := re.fullmatch(r"(\d+) \* (k\w+)", expr)) and u.group(2) in _CXX_UNITS:
                fields[f.group(1)] = int(u.group(1)) * _CXX_UNITS[u.group(2)]
        out[m.group(1)] = fields
    return out


def spec_parameters(spec):
    """[(name, default cell)] from the parameter tables of 8.3, 9 and appendix B."""
    rows = []
    for start, end in (("### 8.3", "**CC-1**"), ("## 9.", "### 9.1"),
                       ("## Appendix B", "## Appendix C")):
        part = spec.split(start, 1)[1].split(end, 1)[0]
        for m in re.finditer(r"^\| (`[^|]*`) \| ([^|]*) \|", part, re.M):
            names = re.findall(r"`(\w+)`", m.group(1))
            values = re.findall(r"\d+(?:\.\d+)?\s*(?:ns|us|ms|s\b)?|true|false", m.group(2))
            if len(names) > 1:  # "`entropy_min`, `entropy_max` | 49152, 65535"
                rows += list(zip(names, values))
            else:
                rows.append((names[0], values[0] if values else m.group(2)))
    return rows


def check_config(spec):
    bad = []
    structs = config_fields()
    every = {k: v for fields in structs.values() for k, v in fields.items()}
    listed = set()
    for name, cell in spec_parameters(spec):
        listed.add(name)
        if name not in every:
            bad.append(f"spec parameter `{name}` is not in config.hpp")
            continue
        want = every[name]
        if isinstance(want, bool):
            got = cell.strip() == "true"
        elif name.endswith("_ns"):
            num, unit = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)", cell.strip()).groups()
            got = float(num) * _UNITS[unit]
        else:
            got = int(re.match(r"\d+", cell.strip()).group(0))
        if got != want:
            bad.append(f"spec default of `{name}` is {cell.strip()!r}, config.hpp has {want}")
    for struct in ("CcConfig", "RecoveryConfig"):
        for name in structs.get(struct, {}):
            if name not in listed:
                bad.append(f"{struct}::{name} is not in the spec's parameter tables")
    return bad


_RANGE_UNITS = dict(_UNITS, day=86400 * 1000 ** 3)
_PARAM_TABLES = (("### 8.3", "**CC-1**"), ("## 9.", "### 9.1"), ("## Appendix B", "## Appendix C"))


def spec_ranges(spec):
    """{name: Range cell} from the parameter tables (the third column)."""
    out = {}
    for start, end in _PARAM_TABLES:
        part = spec.split(start, 1)[1].split(end, 1)[0]
        for m in re.finditer(r"^\| (`[^|]*`) \| [^|]* \| ([^|]*) \|", part, re.M):
            for name in re.findall(r"`(\w+)`", m.group(1)):
                out[name] = m.group(2).strip()
    return out


def parse_range(cell):
    """(lo, hi), "any", or None for a cell this does not read."""
    if cell.startswith("any"):
        return "any"
    end = r"([\d,]+)\s*(ns|us|ms|s|day)?"
    m = re.match(end + r"\.\." + end, cell)
    if not m:
        return None
    def value(num, unit):
        return int(num.replace(",", "")) * _RANGE_UNITS.get(unit or "ns", 1)
    return value(m.group(1), m.group(2)), value(m.group(3), m.group(4))


def check_ranges(spec, tool):
    """The tables' ranges and appendix B's relations are config_error's."""
    out = subprocess.run([tool], capture_output=True, text=True)
    if out.returncode != 0:
        return [f"{tool} failed: {out.stderr.strip()}"]
    probed, relations = {}, set()
    for line in out.stdout.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "relation":
            relations.add(rest)
            continue
        name, *bounds = rest.split()
        probed[name.split(".")[-1]] = "any" if bounds == ["any"] else tuple(map(int, bounds))
    bad = []
    cells = spec_ranges(spec)
    for name, want in sorted(probed.items()):
        if name not in cells:
            bad.append(f"`{name}`: config_error enforces {want}, but no parameter table lists it")
            continue
        got = parse_range(cells[name])
        if got is None:
            bad.append(f"`{name}`: Range {cells[name]!r} is not 'LO..HI' or 'any'")
        elif got != want:
            bad.append(f"`{name}`: Range says {cells[name]!r}, config_error enforces {want}")
    for struct, fields in config_fields().items():
        for name, default in fields.items():
            if not isinstance(default, bool) and name not in probed:
                bad.append(f"{struct}::{name}: not probed by metaroce-config-ranges")
    m = re.search(r"Between fields `config_error` also requires:(.*?)\.\n", spec, re.S)
    said = set(re.findall(r"`([^`]+)`", m.group(1))) if m else set()
    if m is None:
        bad.append("appendix B: no 'Between fields `config_error` also requires:' list")
    for r in sorted(relations - said):
        bad.append(f"relation `{r}`: enforced by config_error, not in appendix B's list")
    for r in sorted(said - relations):
        bad.append(f"relation `{r}`: in appendix B's list, not probed in config_error")
    return bad


def stated_rules(spec):
    return sorted(set(re.findall(r"\*\*([A-Z]+-\d+)\*\* \(", spec)))


# A rule ID cited that the spec does not state is a citation of a rule
# that was renamed or never written. The prefixes are the spec's own: the
# code's other NAME-123 words (RFC-4960, for one) are not rule IDs.
# Every folder of the product; BENCHMARKS.md is left out, for its history may
# name what a rule was called then.
CITING = ("engine", "include", "udp", "sim", "harness", "conformance", "tools", "tests", "bench",
          "examples", "fuzz", "docs", "scripts")
CITING_SUFFIXES = {".cpp", ".hpp", ".md", ".py", ".sh", ".lua", ".txt", ".toml"}


def citing_files():
    yield ROOT / "README.md"
    for folder in CITING:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in CITING_SUFFIXES:
                yield path


def check_code_citations(spec, ids):
    prefixes = sorted({i.split("-")[0] for i in ids})
    cited = {}
    for path in citing_files():
        text = path.read_text(errors="replace")
        for rule in re.findall(r"\b((?:" + "|".join(prefixes) + r")-\d+)\b", text):
            cited.setdefault(rule, path.relative_to(ROOT))
    return [f"{rule}: cited in {where} but not stated in the spec"
            for rule, where in sorted(cited.items()) if rule not in ids]


def check_rules(spec, ids):
    bad = []
    conformance = spec.split("## 12. Conformance", 1)[1].split("## Appendix", 1)[0]
    for rule in ids:
        stated = re.findall(r"\*\*" + re.escape(rule) + r"\*\* \((MUST|SHOULD|MAY)[^)]*\)", spec)
        if len(stated) != 1:
            bad.append(f"{rule}: stated {len(stated)} times with a level (MUST, SHOULD, MAY)")
        if not re.search(r"\b" + re.escape(rule) + r"\b", conformance):
            bad.append(f"{rule}: missing from the conformance section")
    return bad


# Section 12 names the tests that show each rule, in backquotes: a test's
# own name (`BogusAckChangesNoPath`), with its suite (`UdpConnect.Name`), or a
# whole suite (`PsnWrap.*`). A name no test under tests/ carries (a test
# renamed or deleted, or one cited before it was written) passed unnoticed;
# the section's other backquoted CamelCase words are the code's own
# identifiers (`Target`).
def check_cited_tests(spec):
    conformance = spec.split("## 12. Conformance", 1)[1].split("## Appendix", 1)[0]
    bare = set(re.findall(r"`([A-Z][A-Za-z0-9_]+)`", conformance))
    qualified = set(re.findall(r"`([A-Z][A-Za-z0-9_]*)\.([A-Za-z0-9_]+|\*)`", conformance))
    tests, code = set(), set()
    for path in (ROOT / "tests").rglob("*"):
        if path.is_file() and path.suffix in {".cpp", ".hpp"}:
            text = path.read_text(errors="replace")
            tests.update(re.findall(r"\b(?:TYPED_)?TEST(?:_F|_P)?\(\s*(\w+),\s*(\w+)\s*\)", text))
    for folder in ("include", "engine", "conformance", "udp"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in {".cpp", ".hpp"}:
                code.update(re.findall(r"\b[A-Z][A-Za-z0-9_]+\b", path.read_text(errors="replace")))
    names = {name for _, name in tests}
    suites = {suite for suite, _ in tests}
    bad = [f"section 12 cites `{name}`, which no test under tests/ is named"
           for name in sorted(bare - names - code)]
    for suite, name in sorted(qualified):
        if name == "*" and suite not in suites:
            bad.append(f"section 12 cites `{suite}.*`, but no test under tests/ is of suite {suite}")
        elif name != "*" and (suite, name) not in tests:
            bad.append(f"section 12 cites `{suite}.{name}`, which is no test under tests/")
    return bad


def report(head, bad):
    print(head)
    for line in bad:
        print("  " + line)
    return not bad


def main():
    spec = SPEC.read_text()
    if "--selftest" in sys.argv:
        bad = selftest(spec)
        return 0 if report(f"vector rules self-test: {len(bad)} problems", bad) else 1
    ok = True
    want = expected()
    in_spec = spec_vectors(spec)
    in_test = test_vectors(TEST.read_text())
    for name in sorted(set(want) | set(in_spec) | set(in_test)):
        problems = []
        if in_spec.get(name) != want.get(name):
            problems.append("spec != independent encoder")
        if in_test.get(name) != in_spec.get(name):
            problems.append("wire_test.cpp != spec")
        print(f"{name}: {'; '.join(problems) if problems else 'ok'}")
        ok &= not problems
    bad = check_vector_rules(in_spec)
    ok &= report(f"vector rules: {len(bad)} problems", bad)
    for what, bad in (("limits", check_limits(spec, TEST.read_text())),
                      ("config", check_config(spec))):
        ok &= report(f"{what}: {len(bad)} problems", bad)
    if "--printer" in sys.argv:
        bad = check_printed(spec, sys.argv[sys.argv.index("--printer") + 1])
        ok &= report(f"printed vectors: {'differ from the spec' if bad else 'ok'}", bad)
    if "--ranges" in sys.argv:
        bad = check_ranges(spec, sys.argv[sys.argv.index("--ranges") + 1])
        ok &= report(f"config ranges: {len(bad)} problems", bad)
    ids = stated_rules(spec)
    bad = check_rules(spec, ids) + check_code_citations(spec, ids) + check_cited_tests(spec)
    ok &= report(f"rules: {len(ids)} stated, {len(bad)} problems", bad)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
