#!/usr/bin/env python3
"""Checks tools/wireshark/metaroce.lua with tshark.

1. Every test vector of the spec (docs/spec/metaroce-v0.1.md, 3.15), framed
   in Ethernet/IPv4/UDP to port 4792, decodes to the field values the spec
   lists for it, with a good ICRC.
2. Broken copies (truncated, bad ICRC, unknown version or opcode, length
   fields pointing past the datagram, fields out of range) and trimmed or
   snap-length-cut packets give the expected expert info, and so does a
   payload cut part way on a connection whose handshake (mtu) was captured
   (TRIM-5); every prefix of
   every vector and seeded random byte changes decode without a failure.
   Every datagram of 1 to 19 bytes is truncated, whatever its version and
   opcode (11.3's order). Packets without payload decode with PC clear as
   with PC set (INT-2), their ICRC over every byte before it (BAD-4).
   Reserved flag bits draw a warning and nothing more (1.3). A corrupted
   ACK whose sack_words runs past the datagram is a bad ICRC (BAD-4); a
   version 2 CONNECT_REQ shows the fields CONN-5 answers it from.
3. Off port 4792 (a server's replies from its entropy ports to a client's
   port) the heuristic dissector decodes what parses as MetaRoCE, ICRC
   included, reserved flag bits set or not, and nothing else; with it
   disabled, Decode As or the port preference do. Every MetaRoCE frame has
   one MetaRoCE layer in frame.protocols.
3a. A datagram holding a GSO run (a sender's capture before segmentation,
   any loopback capture of the UDP driver) decodes as its packets, each
   with a good ICRC, on port 4792 and through the heuristic.
2a. Fields the spec fixes for an opcode (3.3, 3.5, 3.12) draw a warning
   when they differ; the tree gives MSN, PROBE psn, DISCONNECT reason and
   handshake values their meaning; ECN other than ECT(0) warns (ENC-4), CE
   is named; IPv6 decodes as IPv4 does. Each ACK flag and AR is its own
   field; SACK bits above 31 and words after word 0 name the right PSNs.
2b. metaroce.stream pairs a connection's directions, from its handshake or
   an ACK's echo; a PSN sent again is a retransmission; both the same in
   tshark's second pass. The README's operator filters are valid. A
   datagram quoted in an ICMP error is neither truncated nor a sending; a
   GSO run cut by the snap length is a note, not a bad length.
4. With --sim PATH, two short metaroce-sim captures (one with trimming
   switches) decode as MetaRoCE with no malformed packet, error or
   warning, every packet on its connection's stream.
Nowhere may "Lua Error" appear: a Lua error would hide every later field.

Usage: dissector_test.py [--sim PATH_TO_METAROCE_SIM] [--keep DIR]
"""
import argparse
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(ROOT, "docs", "spec", "metaroce-v0.1.md")
LUA = os.path.join(ROOT, "tools", "wireshark", "metaroce.lua")
README = os.path.join(ROOT, "tools", "wireshark", "README.md")
STATUS_HPP = os.path.join(ROOT, "include", "metaroce", "status.hpp")
PORT = 4792
TRIMMED_DSCP = 63
CONTROL_DSCP = 48  # ENC-6

# The spec checker's CRC-32C (tools/spec_vectors/check_spec.py), not a second one.
sys.path.insert(0, os.path.join(ROOT, "tools", "spec_vectors"))
from check_spec import crc32c  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests"))
import tshark_lib  # noqa: E402
from tshark_lib import check  # noqa: E402


# ------------------------------------------------------------ spec vectors

# Spec line tag -> prefix of the dissector's field names.
SECTION_PREFIX = {"BH": "metaroce.", "MH": "metaroce.", "RH": "metaroce.",
                  "ACK": "metaroce.ack.", "NAK": "metaroce.nak.",
                  "CONN": "metaroce.connect.", "DISC": "metaroce.disconnect."}
NOT_ON_A_PATH = ("ACK", "NAK", "CONNECT_REQ", "CONNECT_ACCEPT", "CONNECT_REJECT", "DISCONNECT",
                 "DISCONNECT_ACK")
HEX_LINE = re.compile(r"^(?:[0-9a-f]{2} )*[0-9a-f]{2}$")
ASSIGNMENT = re.compile(r"(\w+)(?:\[(\d+)\])?=(0x[0-9a-f]+|\d+)")


def parse_vectors(text):
    """[(name, opcode name, bytes, {field: [values]})] from section 3.15."""
    vectors = []
    for block in re.split(r"^#### ", text, flags=re.M)[1:]:
        m = re.match(r"(TV-\d+) (\w+), (\d+) bytes", block)
        if not m:
            continue
        name, opname, size = m.group(1), m.group(2), int(m.group(3))
        body = block.split("```text", 1)[1].split("```", 1)[0]
        raw, fields, section = bytearray(), {}, None
        for line in body.splitlines():
            if not line.strip():
                continue
            if HEX_LINE.match(line.strip()) and not line.startswith(" "):
                raw += bytes.fromhex(line)
                continue
            tag = line.split()[0] if line and not line[0].isspace() else section
            section = tag
            if tag == "IMM":
                fields["metaroce.imm"] = [int(line.split()[1], 16)]
            elif tag == "DATA":
                fields["metaroce.payload_len"] = [int(line.split()[1])]
            elif tag == "ICRC":
                fields["metaroce.icrc"] = [int(line.split()[1], 16)]
            elif tag in SECTION_PREFIX:
                # sack[0], sack[1]... are the occurrences of metaroce.ack.sack, in order.
                for key, _word, value in ASSIGNMENT.findall(line):
                    fields.setdefault(SECTION_PREFIX[tag] + key, []).append(int(value, 0))
                for slot, gen in re.findall(r"\(slot (\d+), generation (\d+)\)", line):
                    # 3.3: only data packets and PROBE name a path; the
                    # others' path_tag 0 has no slot to filter on.
                    on_path = opname not in NOT_ON_A_PATH
                    fields["metaroce.path_tag.slot"] = [int(slot)] if on_path else []
                    fields["metaroce.path_tag.generation"] = [int(gen)] if on_path else []
        if check(len(raw) == size, f"{name}: {len(raw)} bytes of hex, header says {size}"):
            vectors.append((name, opname, bytes(raw), fields))
    return vectors


# ------------------------------------------------------------ pcap writing

def reseal(packet, covered=None):
    """The packet with its ICRC recomputed over `covered` bytes (default: all but the ICRC)."""
    body = packet[:-4]
    return body + struct.pack(">I", crc32c(body[:covered] if covered else body))


def ip_checksum(header):
    total = sum(struct.unpack(">10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame(datagram, sport, dscp=0, datagram_len=None, dport=PORT, src=1, dst=2, ecn=2):
    """Ethernet/IPv4/UDP around `datagram`, from 10.0.0.src to 10.0.0.dst,
    ECT(0) unless `ecn` says otherwise; datagram_len overrides the lengths in
    the IP and UDP headers (to fake a snap-length cut)."""
    length = len(datagram) if datagram_len is None else datagram_len
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, (dscp << 2) | ecn, 20 + 8 + length, 0, 0x4000,
                     64, 17, 0, bytes([10, 0, 0, src]), bytes([10, 0, 0, dst]))
    ip = ip[:10] + struct.pack(">H", ip_checksum(ip)) + ip[12:]
    udp = struct.pack(">HHHH", sport, dport, 8 + length, 0)
    eth = bytes.fromhex("020000000002" "020000000001" "0800")
    return eth + ip + udp + datagram


def frame6(datagram, sport, dscp=0, dport=PORT, src=1, dst=2, ecn=2):
    """frame() over IPv6 (ENC-1), from ::src to ::dst. The UDP checksum is
    left 0, which Wireshark's UDP dissector flags (not ours to judge)."""
    ip = struct.pack(">IHBB16s16s", (6 << 28) | (((dscp << 2) | ecn) << 20), 8 + len(datagram),
                     17, 64, bytes(15) + bytes([src]), bytes(15) + bytes([dst]))
    udp = struct.pack(">HHHH", sport, dport, 8 + len(datagram), 0)
    return bytes.fromhex("020000000002" "020000000001" "86dd") + ip + udp + datagram


def write_pcap(path, frames):
    """frames: [(bytes, original length or None)]."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, (data, orig) in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(data), orig or len(data)))
            f.write(data)


# ------------------------------------------------------------ tshark

FIELDS = [
    "frame.number", "ip.dsfield.dscp", "_ws.col.Info", "_ws.expert.message", "_ws.malformed",
    "metaroce.opcode",
    "metaroce.version", "metaroce.flags", "metaroce.flags.pc", "metaroce.path_tag",
    "metaroce.path_tag.slot",
    "metaroce.path_tag.generation", "metaroce.dst_conn", "metaroce.psn", "metaroce.tsval",
    "metaroce.entropy", "metaroce.msn", "metaroce.offset", "metaroce.msg_len", "metaroce.rkey",
    "metaroce.raddr", "metaroce.imm", "metaroce.payload_len", "metaroce.icrc",
    "metaroce.icrc.status", "metaroce.trimmed", "metaroce.ack.cum_psn", "metaroce.ack.echo_psn",
    "metaroce.ack.echo_tsval", "metaroce.ack.echo_path_tag", "metaroce.ack.flags",
    "metaroce.ack.flags.echo_trimmed", "metaroce.ack.flags.echo_ce",
    "metaroce.ack.flags.echo_dup", "metaroce.ack.flags.echo_probe", "metaroce.flags.ar",
    "metaroce.ack.sack_words", "metaroce.ack.sack", "metaroce.ack.sack.psn",
    "metaroce.ack.sack.count",
    "metaroce.nak.nak_psn", "metaroce.nak.code", "metaroce.nak.msn", "metaroce.nak.cum_psn",
    "metaroce.connect.src_conn", "metaroce.connect.initial_psn", "metaroce.connect.mtu",
    "metaroce.connect.window_log2", "metaroce.connect.max_reads", "metaroce.connect.code",
    "metaroce.connect.max_version", "metaroce.connect.reply_port", "metaroce.connect.nonce",
    "metaroce.disconnect.src_conn",
    "metaroce.disconnect.reason", "metaroce.icrc.covered_len", "metaroce.flags.reserved",
    # Expert infos, each present ("1") or not.
    "metaroce.truncated", "metaroce.bad_version", "metaroce.bad_opcode",
    "metaroce.reserved_not_zero", "metaroce.partial_payload", "frame.protocols",
    "metaroce.gso.segments", "metaroce.unexpected_value", "metaroce.stream",
    "metaroce.retransmission.prev_frame", "metaroce.retransmission", "metaroce.not_ect",
    "metaroce.not_captured", "metaroce.bad_length", "metaroce.gso",
]


RETRANSMISSION_NOTE = "sent to this connection before"


def decode(pcap, options=()):
    """One dict per frame: field of FIELDS -> list of values (strings).
    The test's pcaps send copies of a few packets, so the retransmission
    notes those draw are left out of _ws.expert.message (check_streams
    checks them, through metaroce.retransmission)."""
    rows = tshark_lib.decode(pcap, FIELDS, lua=LUA, options=options)
    for row in rows:
        row["_ws.expert.message"] = [m for m in row["_ws.expert.message"]
                                     if RETRANSMISSION_NOTE not in m]
    return rows


def number(text):
    text = text.strip()
    if text in ("True", "False"):
        return int(text == "True")
    return int(text, 0)


# ------------------------------------------------------------ checks

def check_vectors(vectors, rows):
    for (name, opname, _, fields), row in zip(vectors, rows):
        info = row["_ws.col.Info"][0] if row["_ws.col.Info"] else ""
        check(info.split(" ")[0] == opname, f"{name}: Info '{info}' does not start with {opname}")
        for field, want in sorted(fields.items()):
            got = [number(v) for v in row.get(field, [])]
            check(got == want, f"{name}: {field} is {got}, spec says {want}")
        check(row["metaroce.icrc.status"] == ["1"],
              f"{name}: ICRC status {row['metaroce.icrc.status']}, want 1 (good)")
        check(not row["_ws.expert.message"] and not row["_ws.malformed"],
              f"{name}: unexpected expert info {row['_ws.expert.message']}")
    # The Info column names the path: a data packet's slot, an ACK's echoed one.
    for i, want in ((0, "slot=3"), (6, "slot=1"), (7, "echo=0x1003 slot=6"), (8, "slot=5")):
        info = rows[i]["_ws.col.Info"][0] if rows[i]["_ws.col.Info"] else ""
        check(want in info, f"{vectors[i][0]}: Info '{info}' lacks '{want}'")
    sacked = rows[7]["metaroce.ack.sack.psn"]  # TV-08 SACKs 0x1001 and 0x1003
    check([number(v) for v in sacked] == [0x1001, 0x1003], f"TV-08: SACKed PSNs {sacked}")


def broken_frames(vectors):
    """(description, frame, original length, expected expert text, extra check)."""
    tv = {name: raw for name, _, raw, _ in vectors}
    ack = bytearray(tv["TV-08"])
    ack[31] = 3  # sack_words = 3 with one word present, ICRC resealed
    sack17 = bytearray(tv["TV-09"])
    sack17[31] = 17
    nak9 = bytearray(tv["TV-10"])
    nak9[20] = 0x09
    past_end = bytearray(tv["TV-03"])
    past_end[27] = 4  # msg_len 4, 8 payload bytes
    bad_version = bytearray(tv["TV-11"])
    bad_version[0] = 0x2C
    bad_opcode = bytearray(tv["TV-11"])
    bad_opcode[1] = 0x13
    corrupt = bytearray(tv["TV-08"])
    corrupt[-1] ^= 0x01
    flipped = bytearray(tv["TV-01"])
    flipped[50] ^= 0x80  # a payload bit, covered with PC set
    write_hdrs = tv["TV-01"][:44]
    empty_write = bytearray(write_hdrs)
    empty_write[24:28] = empty_write[20:24]  # msg_len = offset: nothing to cut
    send_hdrs = tv["TV-04"][:28]
    bad_icrc = {"metaroce.icrc.status": ["0"]}
    # Section 3.12: a CONNECT_REQ naming no reply port (0, its source port) is
    # well formed; an ACCEPT naming one is not (CONN-3: 0).
    # CONN-5, VER-1: a CONNECT_REQ of another version is answered
    # from its version-invariant fields, which the dissector shows; one too
    # short to echo is dropped (engine/src/input.cpp, reject_bad_version).
    req_v2 = bytes([0x28]) + tv["TV-12"][1:]
    req_no_reply = bytearray(tv["TV-12"])
    req_no_reply[30:32] = bytes(2)
    accept_reply = bytearray(tv["TV-13"])
    accept_reply[30:32] = struct.pack(">H", 4792)
    # CONN-8: a DISCONNECT after a failure names the status that failed it.
    failed_close = bytearray(tv["TV-15"])
    failed_close[20] = 0x02
    ack_with_reason = bytearray(tv["TV-16"])  # a DISCONNECT_ACK gives none
    ack_with_reason[20] = 0x02
    # 3.3 and 3.12 fix these fields for the opcode (sent so, ignored on
    # receipt): another value is a warning. And values a receiver drops or
    # overrides (VER-1, CONN-1, CONN-3, CONN-4).
    def changed(name, at, value):
        raw = bytearray(tv[name])
        raw[at:at + len(value)] = value
        return frame(reseal(bytes(raw)), 50025)
    tagged_ack = changed("TV-08", 2, b"\x00\x23")
    nak_psn = changed("TV-10", 8, b"\x00\x00\x00\x05")
    disc_ar = changed("TV-15", 0, b"\x1c")
    probe_no_ar = changed("TV-11", 0, b"\x18")
    req_dst = changed("TV-12", 4, b"\x00\x00\x00\x99")
    accept_code = changed("TV-13", 28, b"\x47")
    reject_other = changed("TV-14", 28, b"\x41")
    # CONN-3: a repeated request to a connection in ERROR draws a REJECT whose
    # code is the status that failed it (CONN-8's): as the spec says, no
    # warning (it read "none of 0x47, 0x48, 0x4a").
    reject_failed = {code: changed("TV-14", 28, bytes([code])) for code in (0x02, 0x46, 0x4c)}
    req_src0 = changed("TV-12", 16, bytes(4))
    req_nonce0 = changed("TV-12", 32, bytes(8))
    req_mtu200 = changed("TV-12", 24, b"\x00\xc8")
    write_msn = changed("TV-01", 16, b"\x00\x00\x00\x03")
    huge_read = changed("TV-06", 24, b"\x80\x00\x00\x01")
    req_v2_src0 = bytearray(req_v2)
    req_v2_src0[16:20] = bytes(4)
    warned = {"metaroce.reserved_not_zero": ["1"], "metaroce.icrc.status": ["1"]}
    unexpected = {"metaroce.unexpected_value": ["1"], "metaroce.icrc.status": ["1"]}
    return [
        ("ACK with a path_tag", tagged_ack, None, "ACK path_tag is 0x23, must be zero", warned),
        ("NAK with a psn", nak_psn, None, "NAK psn is 0x5, must be zero", warned),
        ("DISCONNECT with AR", disc_ar, None, "AR set in a DISCONNECT", warned),
        ("PROBE without AR", probe_no_ar, None, "AR clear in a PROBE", unexpected),
        ("CONNECT_REQ naming a dst_conn", req_dst, None, "CONNECT_REQ dst_conn is 0x99", warned),
        ("CONNECT_ACCEPT with a code", accept_code, None, "CONNECT_ACCEPT code is 0x47", warned),
        ("CONNECT_REJECT code kInvalidArgument", reject_other, None,
         "takes it as kConnectRefused (CONN-4)", unexpected),
    ] + [
        (f"CONNECT_REJECT code {code:#04x}, a failed connection's", frame_, None, "",
         {"metaroce.unexpected_value": [], "metaroce.icrc.status": ["1"]})
        for code, frame_ in reject_failed.items()
    ] + [
        ("CONNECT_REQ from connection 0", req_src0, None, "dropped unanswered (VER-1)",
         unexpected),
        ("CONNECT_REQ with nonce 0", req_nonce0, None, "Nonce 0: dropped unanswered (VER-1)",
         unexpected),
        ("CONNECT_REQ offering mtu 200", req_mtu200, None, "mtu 200 is below the least",
         unexpected),
        ("WRITE with an msn", write_msn, None, "WRITE msn is 0x3, must be zero", warned),
        ("READ_REQ of 2^31 + 1 bytes", huge_read, None, "answered by NAK REMOTE_INVALID_REQUEST "
         "(READ-2)", unexpected),
        ("version 2 CONNECT_REQ from connection 0", frame(bytes(req_v2_src0), 50026), None,
         "naming connection id 0 or nonce 0 (VER-1): dropped unanswered",
         {"metaroce.bad_version": ["1"], "metaroce.connect.src_conn": []}),
        ("truncated WRITE (30 bytes)", frame(tv["TV-01"][:30], 50000), None,
         "Datagram of 30 bytes", {}),
        ("4-byte datagram", frame(tv["TV-11"][:4], 50001), None, "Base Header alone", {}),
        ("corrupted ICRC", frame(bytes(corrupt), 50002), None, "does not match", bad_icrc),
        ("flipped payload bit", frame(bytes(flipped), 50003), None, "does not match", bad_icrc),
        # BAD-4: an ACK's ICRC covers every byte before it, whatever sack_words
        # says, and is checked first: resealed it verifies, and one whose
        # sack_words a bit flip changed is a bad checksum (the spec's example).
        ("sack_words past the end", frame(reseal(bytes(ack)), 50004), None, "needs 64",
         {"metaroce.icrc.status": ["1"]}),
        ("sack_words 17", frame(reseal(bytes(sack17)), 50005), None,
         "sack_words 17 is above 16", {"metaroce.icrc.status": ["1"]}),
        ("sack_words past the end, ICRC not resealed", frame(bytes(ack), 50019), None,
         "does not match", bad_icrc),
        ("sack_words 17 by a bit flip", frame(bytes(sack17), 50020), None, "does not match",
         bad_icrc),
        ("NAK code 0x09", frame(reseal(bytes(nak9)), 50006), None, "NAK code 0x9", {}),
        ("payload past msg_len", frame(reseal(bytes(past_end)), 50007), None,
         "longer than msg_len", {}),
        ("unknown version", frame(bytes(bad_version), 50008), None, "Version 2", {}),
        ("unknown opcode", frame(bytes(bad_opcode), 50009), None, "Unknown opcode 0x13", {}),
        # TRIM-2 with PC set: the ICRC covered the cut payload.
        ("trimmed WRITE, PC set", frame(write_hdrs + tv["TV-01"][-4:], 50010, TRIMMED_DSCP), None,
         "payload was trimmed", {"metaroce.trimmed": ["1"], "metaroce.icrc.status": ["2"]}),
        # With PC clear the ICRC covers just the headers that are left.
        ("trimmed SEND, PC clear", frame(send_hdrs + tv["TV-04"][-4:], 50011, TRIMMED_DSCP), None,
         "TRIMMED DSCP", {"metaroce.trimmed": ["1"], "metaroce.icrc.status": ["1"]}),
        # Cut to its headers but not flagged: not trimmed (TRIM-2), a bad length
        # (TRIM-5), and with PC set an ICRC that no longer matches.
        ("unflagged cut WRITE, PC set", frame(write_hdrs + tv["TV-01"][-4:], 50015), None,
         "no TRIMMED DSCP", {"metaroce.trimmed": [], "metaroce.icrc.status": ["0"]}),
        ("unflagged cut SEND, PC clear", frame(send_hdrs + tv["TV-04"][-4:], 50016), None,
         "no TRIMMED DSCP", {"metaroce.trimmed": [], "metaroce.icrc.status": ["1"]}),
        # Flagged, PC set, but nothing was cut (READ_REQ, an empty message): the
        # ICRC covers the headers, all there, and is checked (TRIM-2).
        ("flagged READ_REQ, PC set", frame(tv["TV-06"], 50013, TRIMMED_DSCP), None,
         "TRIMMED DSCP", {"metaroce.trimmed": ["1"], "metaroce.icrc.status": ["1"]}),
        ("flagged empty WRITE, PC set", frame(reseal(bytes(empty_write) + bytes(4)), 50014,
                                              TRIMMED_DSCP), None,
         "TRIMMED DSCP", {"metaroce.trimmed": ["1"], "metaroce.icrc.status": ["1"]}),
        ("CONNECT_REQ naming reply port 0", frame(reseal(bytes(req_no_reply)), 50017), None,
         "", {"metaroce.connect.reply_port": ["0"], "metaroce.reserved_not_zero": [],
              "metaroce.icrc.status": ["1"]}),
        ("CONNECT_ACCEPT naming reply port 4792", frame(reseal(bytes(accept_reply)), 50018), None,
         "Reply port of an ACCEPT or REJECT is 0x12b8, must be zero",
         {"metaroce.connect.reply_port": ["4792"], "metaroce.reserved_not_zero": ["1"]}),
        ("version 2 CONNECT_REQ", frame(req_v2, 50021), None,
         "answered with a version-1 CONNECT_REJECT kVersionMismatch (CONN-5)",
         {"metaroce.connect.src_conn": ["0x00000007"], "metaroce.connect.reply_port": ["4792"],
          "metaroce.connect.nonce": ["0x0123456789abcdef"], "metaroce.bad_version": ["1"]}),
        ("version 2 CONNECT_REQ of 40 bytes", frame(req_v2[:40], 50022), None,
         "too short to answer (CONN-5)",
         {"metaroce.connect.src_conn": [], "metaroce.bad_version": ["1"]}),
        ("DISCONNECT after kRemoteBadKey", frame(reseal(bytes(failed_close)), 50023), None, "",
         {"metaroce.disconnect.reason": ["0x02"], "_ws.col.Info": "reason=kRemoteBadKey",
          "metaroce.reserved_not_zero": [],
          "metaroce.icrc.status": ["1"]}),
        ("DISCONNECT_ACK with a reason", frame(reseal(bytes(ack_with_reason)), 50024), None,
         "Reason of a DISCONNECT_ACK is 0x2, must be zero",
         {"metaroce.reserved_not_zero": ["1"], "metaroce.icrc.status": ["1"]}),
        # Like the simulator's records: headers captured, payload and ICRC not.
        ("snap-length WRITE", frame(write_hdrs, 50012, 0, len(tv["TV-01"]))[:14 + 28 + 44],
         14 + 28 + len(tv["TV-01"]), "ICRC not captured",
         {"metaroce.payload_len": ["8"], "metaroce.icrc.status": ["2"]}),
    ]


def check_broken(cases, rows):
    for (what, _, _, expert, fields), row in zip(cases, rows):
        messages = " / ".join(row["_ws.expert.message"])
        check(expert in messages, f"{what}: expert info '{messages}' lacks '{expert}'")
        for field, want in fields.items():
            if isinstance(want, str):  # a text the field must contain
                got = " / ".join(row[field])
                check(want in got, f"{what}: {field} is '{got}', lacks '{want}'")
                continue
            check(row[field] == want, f"{what}: {field} is {row[field]}, want {want}")
        check("Dissector failure" not in messages, f"{what}: dissector failure: {messages}")


def check_tree_texts(vectors, workdir):
    """The tree gives fields the meaning the spec gives them where a number
    alone would mislead: the MSN by opcode (3.5), a PROBE's psn (3.11), a
    DISCONNECT's reason (CONN-8), handshake values a receiver takes as
    another (SEQ-3, 3.12)."""
    tv = {name: raw for name, _, raw, _ in vectors}
    closing = bytearray(tv["TV-15"])
    closing[20] = 0xEE  # not in appendix A
    small = bytearray(tv["TV-12"])
    small[26:28] = b"\x04\x00"  # window_log2 4, max_reads 0
    cases = [
        ("WRITE_IMM", tv["TV-02"], "MSN: 5 (RSN: the receive buffer it consumes)"),
        ("READ_REQ", tv["TV-06"], "MSN: 1 (read sequence number)"),
        ("WRITE at offset 4096", tv["TV-01"], "Remote address: 0x00007f0000001000 (this packet's "
         "first byte; the message starts at 0x00007f0000000000)"),
        ("PROBE", tv["TV-11"], "PSN: 0x00000000 (not a PSN"),
        ("DISCONNECT", tv["TV-15"], "Reason: none (closed while ESTABLISHED) (0x00)"),
        ("DISCONNECT giving 0xee", reseal(bytes(closing)), "not in appendix A"),
        ("CONNECT_REQ, window 4", reseal(bytes(small)), "Window log2: 4 (taken as 6, SEQ-3)"),
        ("CONNECT_REQ, max_reads 0", reseal(bytes(small)), "Max reads: 0 (taken as 1)"),
        ("NAK REMOTE_BAD_KEY", tv["TV-10"], "(0x02) (fatal: the connection is in ERROR, NAK-3)"),
        ("NAK RNR", reseal(tv["TV-10"][:20] + b"\x01" + tv["TV-10"][21:]),
         "(0x01) (not fatal: the sender retries, NAK-4)"),
        ("CONNECT_REJECT kPeerUnreachable", reseal(tv["TV-14"][:28] + b"\x46" + tv["TV-14"][29:]),
         "Code: kPeerUnreachable (0x46) (the peer's connection had failed, CONN-3"),
    ]
    pcap = os.path.join(workdir, "texts.pcap")
    write_pcap(pcap, [(frame(c[1], 50000), None) for c in cases])
    text = tshark_lib.tshark(["-r", pcap, "-V"], LUA)
    frames = re.split(r"^Frame \d+:", text, flags=re.M)[1:]
    if check(len(frames) == len(cases), f"tree texts: read {len(frames)} frames"):
        for (what, _, want), tree in zip(cases, frames):
            check(want in tree, f"tree text, {what}: lacks '{want}'")
    print(f"tree texts: {len(cases)} fields")


def check_streams(vectors, workdir):
    """metaroce.stream numbers the connections, both directions alike, from
    the handshake, or without it from the first ACK that echoes a packet of
    the other direction (an ACK echoing none seen gets no stream, until
    PAIRING_TRIES such); metaroce.retransmission.prev_frame names the last
    frame that carried a data packet's PSN to the same connection. The same
    in one pass and in two (-2: the second reads what the first found)."""
    tv = {name: raw for name, _, raw, _ in vectors}
    write = (tv["TV-01"], 44)

    def data(conn, psn, tsval, offset=0):
        hdr = bytearray(write[0][:write[1]])
        hdr[4:8] = struct.pack(">I", conn)
        hdr[12:16] = struct.pack(">I", tsval)
        return data_packet(bytes(hdr), write[1], psn, offset, 16, bytes(8))

    def ack(conn, echo_psn, echo_tsval):
        raw = bytearray(tv["TV-09"])
        raw[4:8] = struct.pack(">I", conn)
        raw[20:28] = struct.pack(">II", echo_psn, echo_tsval)
        return reseal(bytes(raw))
    disconnect = bytearray(tv["TV-15"])  # from 7 at 10.0.0.1 to 0x2a at 10.0.0.2
    # (what, frame, stream, retransmission of frame): requester 10.0.0.1
    # (conn 7), responder 10.0.0.2 (0x2a); a second connection, 0x66 to 0x99,
    # whose handshake is not in the capture; a third end, 0x55, whose ACKs
    # echo nothing seen.
    cases = [
        ("CONNECT_REQ", frame(tv["TV-12"], 50040), "0", None),
        ("CONNECT_ACCEPT", frame(tv["TV-13"], 4792, src=2, dst=1), "0", None),
        ("WRITE, no handshake", frame(data(0x99, 0x500, 0x1111), 50041), "1", None),
        ("WRITE 1/2", frame(data(0x2A, 0x100, 0x2222), 50042), "0", None),
        ("ACK to the requester", frame(ack(7, 0x100, 0x2222), 50042, src=2, dst=1), "0", None),
        ("ACK echoing nothing seen", frame(ack(0x55, 0x900, 0x9999), 50043, src=2, dst=1), None,
         None),
        ("ACK echoing the WRITE without handshake",
         frame(ack(0x66, 0x500, 0x1111), 50041, src=2, dst=1), "1", None),
        ("WRITE 1/2 again", frame(data(0x2A, 0x100, 0x3333), 50044), "0", "4"),
        ("WRITE 2/2", frame(data(0x2A, 0x101, 0x3334, 8), 50044), "0", None),
        ("WRITE 1/2 a third time", frame(data(0x2A, 0x100, 0x4444), 50045), "0", "8"),
        ("same PSN to the other connection", frame(data(0x99, 0x100, 0x5555), 50046), "1", None),
        ("DISCONNECT", frame(bytes(disconnect), 50047), "0", None),
    ]
    cases += [(f"ACK {i} echoing nothing seen", frame(ack(0x55, 0x900 + i, 0x9999), 50043,
                                                      src=2, dst=1),
               None if i < 15 else "2", None) for i in range(1, 16)]  # the 16th: PAIRING_TRIES
    # CONN-2: an answer carrying another nonce than the request's is ignored.
    other_nonce = bytearray(tv["TV-13"])
    other_nonce[32] ^= 0xFF
    cases.append(("CONNECT_ACCEPT with another nonce",
                  frame(reseal(bytes(other_nonce)), 4792, src=2, dst=1), "0", None))
    pcap = os.path.join(workdir, "streams.pcap")
    write_pcap(pcap, [(c[1], None) for c in cases])
    for options in ((), ("-2",)):
        rows = decode(pcap, options)
        if not check(len(rows) == len(cases), f"streams: read {len(rows)} frames"):
            return
        for (what, _, stream, prev), row in zip(cases, rows):
            where = f"streams {list(options)}, {what}"
            check(row["metaroce.stream"] == ([stream] if stream else []),
                  f"{where}: metaroce.stream {row['metaroce.stream']}, want {stream}")
            check(row["metaroce.retransmission.prev_frame"] == ([prev] if prev else []),
                  f"{where}: prev_frame {row['metaroce.retransmission.prev_frame']}, want {prev}")
            check(row["metaroce.retransmission"] == (["1"] if prev else []),
                  f"{where}: metaroce.retransmission {row['metaroce.retransmission']}")
            info = row["_ws.col.Info"][0] if row["_ws.col.Info"] else ""
            check(("RETRANSMISSION" in info) == bool(prev), f"{where}: Info '{info}'")
            nonce = "ignores this answer (CONN-2)" in " / ".join(row["_ws.expert.message"])
            check(nonce == ("another nonce" in what), f"{where}: nonce warning {nonce}")
    print(f"streams and retransmissions: {len(cases)} packets, in one pass and in two")


def check_ecn(vectors, workdir):
    """ENC-4: every packet leaves ECT(0). Not-ECT or ECT(1) is a warning; CE,
    a switch's mark, is named in the Info column."""
    tv = {name: raw for name, _, raw, _ in vectors}
    cases = [("ECT(0)", 2, False, False), ("Not-ECT", 0, True, False), ("ECT(1)", 1, True, False),
             ("CE", 3, False, True)]
    pcap = os.path.join(workdir, "ecn.pcap")
    write_pcap(pcap, [(frame(tv["TV-03"], 50050, ecn=c[1]), None) for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == len(cases), f"ECN: read {len(rows)} frames"):
        return
    for (what, _, warned, ce), row in zip(cases, rows):
        messages = " / ".join(row["_ws.expert.message"])
        check(row["metaroce.not_ect"] == (["1"] if warned else []),
              f"ECN {what}: metaroce.not_ect {row['metaroce.not_ect']} ('{messages}')")
        check(not warned or f"IP ECN is {what}, must be ECT(0) (ENC-4)" in messages,
              f"ECN {what}: expert info '{messages}'")
        info = row["_ws.col.Info"][0] if row["_ws.col.Info"] else ""
        check(("ECN-CE" in info) == ce, f"ECN {what}: Info '{info}'")
    print(f"ECN: {len(cases)} code points")


def check_ack_fields(vectors, workdir):
    """Section 3.9: each ACK flag is its own field (ECHO_CE, ECHO_DUP,
    ECHO_PROBE, ECHO_TRIMMED), named in the Info column; a SACK word's bits
    above 31 and the words after word 0 name PSNs cum_psn + 1 + 64 j + i; the
    base header's AR flag (3.3) is a field of its own. Section 3.11: a PROBE's
    answer with ECHO_CE, ECHO_DUP or ECHO_TRIMMED is flagged unexpected, one
    warning each, and the PROBE flag alone is not."""
    tv = {name: raw for name, _, raw, _ in vectors}
    flag_fields = [("metaroce.ack.flags.echo_ce", 0x01, "CE"),
                   ("metaroce.ack.flags.echo_dup", 0x02, "DUP"),
                   ("metaroce.ack.flags.echo_probe", 0x04, "PROBE"),
                   ("metaroce.ack.flags.echo_trimmed", 0x08, "TRIMMED")]
    masks = [0x00, 0x01, 0x02, 0x04, 0x08, 0x0B, 0x05, 0x06, 0x0C, 0x0F]
    # What 3.11 forbids beside ECHO_PROBE, in each mask.
    forbidden_with_probe = {0x05: ["ECHO_CE"], 0x06: ["ECHO_DUP"], 0x0C: ["ECHO_TRIMMED"],
                            0x0F: ["ECHO_CE", "ECHO_DUP", "ECHO_TRIMMED"]}
    datagrams = [reseal(tv["TV-08"][:30] + bytes([m]) + tv["TV-08"][31:]) for m in masks]
    # Two SACK words after cum_psn 0x1000: word 0 bits 32 and 63, word 1
    # bits 0 and 40.
    sack = bytearray(tv["TV-08"][:36])
    sack[31] = 2
    sack += struct.pack(">QQ", (1 << 63) | (1 << 32), (1 << 40) | 1) + bytes(4)
    datagrams += [reseal(bytes(sack)), tv["TV-11"], tv["TV-08"]]
    pcap = os.path.join(workdir, "ack-fields.pcap")
    write_pcap(pcap, [(frame(d, 50060 + i), None) for i, d in enumerate(datagrams)])
    rows = decode(pcap)
    if not check(len(rows) == len(datagrams), f"ACK fields: read {len(rows)} frames"):
        return
    for mask, row in zip(masks, rows):
        info = row["_ws.col.Info"][0] if row["_ws.col.Info"] else ""
        for field, bit, word in flag_fields:
            got = [number(v) for v in row[field]]
            check(got == [int(mask & bit != 0)], f"ACK flags {mask:#04x}: {field} is {got}")
            check((re.search(rf"\b{word}\b", info.split("slot=")[-1]) is not None) ==
                  (mask & bit != 0), f"ACK flags {mask:#04x}: Info '{info}' and {word}")
        named = sorted(echo for echo in ("ECHO_CE", "ECHO_DUP", "ECHO_TRIMMED")
                       for message in row["_ws.expert.message"]
                       if message.startswith(f"{echo} with ECHO_PROBE"))
        check(row["metaroce.icrc.status"] == ["1"] and
              named == forbidden_with_probe.get(mask, []) and
              len(row["_ws.expert.message"]) == len(named) and
              len(row["metaroce.unexpected_value"]) == len(named),
              f"ACK flags {mask:#04x}: {row['metaroce.icrc.status']} {row['_ws.expert.message']}")
    row = rows[len(masks)]
    psns = [number(v) for v in row["metaroce.ack.sack.psn"]]
    check(psns == [0x1021, 0x1040, 0x1041, 0x1069], f"SACK words 0 and 1: PSNs {psns}")
    check(row["metaroce.ack.sack.count"] == ["4"] and len(row["metaroce.ack.sack"]) == 2 and
          row["metaroce.icrc.status"] == ["1"] and not row["_ws.expert.message"],
          f"SACK words 0 and 1: count {row['metaroce.ack.sack.count']}, words "
          f"{row['metaroce.ack.sack']}, ICRC {row['metaroce.icrc.status']}, "
          f"{row['_ws.expert.message']}")
    ar = [[number(v) for v in r["metaroce.flags.ar"]] for r in rows[len(masks) + 1:]]
    check(ar == [[1], [0]], f"AR: PROBE (TV-11) and ACK (TV-08) read {ar}, want [[1], [0]]")
    print(f"ACK fields: {len(masks)} flag sets, 2 SACK words, AR")


def check_ipv6(vectors, workdir):
    """ENC-1: nothing in MetaRoCE depends on the IP version. Over IPv6 the
    ICRC verifies, the traffic class's DSCP marks a trimmed packet (TRIM-2)
    and its ECN field is read (ENC-4), the heuristic takes a reply, and the
    stream pairs an ACK with the data it echoes by IPv6 address."""
    tv = {name: raw for name, _, raw, _ in vectors}
    trimmed = tv["TV-01"][:44] + tv["TV-01"][-4:]
    ack = bytearray(tv["TV-09"])  # to the WRITE's sender, echoing TV-01
    ack[20:28] = tv["TV-01"][8:12] + tv["TV-01"][12:16]
    # (what, frame, icrc status, trimmed, not_ect, stream)
    cases = [
        ("WRITE", frame6(tv["TV-01"], 50000), "1", [], [], ["0"]),
        ("trimmed WRITE", frame6(trimmed, 50001, TRIMMED_DSCP), "2", ["1"], [], ["0"]),
        ("Not-ECT SEND", frame6(tv["TV-03"], 50002, ecn=0), "1", [], ["1"], ["0"]),
        ("ACK from an entropy port", frame6(reseal(bytes(ack)), 4793, CONTROL_DSCP, dport=40000,
                                            src=2, dst=1), "1", [], [], ["0"]),
    ]
    pcap = os.path.join(workdir, "ipv6.pcap")
    write_pcap(pcap, [(c[1], None) for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == len(cases), f"IPv6: read {len(rows)} frames"):
        return
    for (what, _, status, trim, not_ect, stream), row in zip(cases, rows):
        got = (row["metaroce.icrc.status"], row["metaroce.trimmed"], row["metaroce.not_ect"],
               row["metaroce.stream"])
        check(got == ([status], trim, not_ect, stream), f"IPv6 {what}: ICRC status, trimmed, "
              f"not_ect, stream {got}, want {([status], trim, not_ect, stream)}")
    print(f"IPv6: {len(cases)} packets")


def icmp_quote(datagram, quoted):
    """An ICMP port unreachable from 10.0.0.2 to 10.0.0.1 quoting the first
    `quoted` bytes of `datagram` as frame() sends it (its IP and UDP headers
    give its whole length)."""
    inner = frame(datagram, 50000)[14:14 + 28 + quoted]
    icmp = struct.pack(">BBHI", 3, 3, 0, 0) + inner
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 0, 0, 64, 1, 0,
                     bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    ip = ip[:10] + struct.pack(">H", ip_checksum(ip)) + ip[12:]
    return bytes.fromhex("020000000001" "020000000002" "0800") + ip + icmp


def check_icmp_quotes(vectors, workdir):
    """A MetaRoCE datagram quoted in an ICMP error (the peer's port closed)
    is decoded as far as quoted, as a datagram of the length its UDP header
    gives: not truncated (BAD-1), what is missing not captured; and, not
    being a packet sent, it is on no stream and no retransmission, nor makes
    a later sending one."""
    write = vectors[0][2]  # TV-01, 56 bytes
    # (what, frame, opcode decoded, retransmission of)
    cases = [("WRITE", frame(write, 50000), True, [])]
    cases += [(f"WRITE quoted to {n} bytes", icmp_quote(write, n), n >= 16, [])
              for n in (8, 16, 20, 30, 44, 56)]
    cases += [("WRITE again", frame(write, 50001), True, ["1"])]
    pcap = os.path.join(workdir, "icmp.pcap")
    write_pcap(pcap, [(c[1], None) for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == len(cases), f"ICMP quotes: read {len(rows)} frames"):
        return
    for (what, _, decoded, prev), row in zip(cases, rows):
        messages = " / ".join(row["_ws.expert.message"])
        check(row["metaroce.opcode"] == (["0x01"] if decoded else []),
              f"{what}: opcode {row['metaroce.opcode']}")
        check(not row["metaroce.truncated"] and "BAD-1" not in messages,
              f"{what}: called truncated: '{messages}'")
        quoted = "quoted" in what
        check(row["metaroce.stream"] == ([] if quoted else ["0"]),
              f"{what}: stream {row['metaroce.stream']}")
        check(row["metaroce.retransmission.prev_frame"] == prev,
              f"{what}: retransmission of {row['metaroce.retransmission.prev_frame']}, want {prev}")
        if quoted and "56" not in what:
            check(row["metaroce.not_captured"] == ["1"], f"{what}: expert info '{messages}'")
    print(f"ICMP quotes: {len(cases)} frames")


def check_readme_filters(pcap):
    """Every filter of the README's table of filters for operators is one
    tshark accepts on `pcap` (a field renamed, or misspelt there, fails)."""
    with open(README, encoding="utf-8") as f:
        text = f.read().split("## Following a connection", 1)[-1].split("\n## ", 1)[0]
    filters = [m.replace("\\|", "|") for m in re.findall(r"^\| `([^`]+)` \|", text, flags=re.M)]
    check(len(filters) >= 5, f"README: {len(filters)} filters in its table")
    # One tshark run for all (each costs seconds to start): a bad one fails it, named in stderr.
    tshark_lib.tshark(["-r", pcap, "-Y", " || ".join(f"({f})" for f in filters), "-T", "fields",
                       "-e", "frame.number"], LUA)
    print(f"README: {len(filters)} filters")


def other_port_frames(vectors):
    """(description, frame, opcodes the heuristic should decode) off port 4792."""
    tv = {name: raw for name, _, raw, _ in vectors}
    corrupt = bytearray(tv["TV-08"])
    corrupt[-1] ^= 0x01
    bad_version = bytearray(tv["TV-11"])
    bad_version[0] = 0x2C
    trimmed_write = tv["TV-01"][:44] + tv["TV-01"][-4:]
    rng = random.Random(4793)
    noise = bytes([0x18, 0x01]) + bytes(rng.randrange(256) for _ in range(54))
    return [
        ("server ACK, entropy port 4793 -> client port 40000",
         frame(tv["TV-08"], 4793, CONTROL_DSCP, dport=40000), ["0x10"]),
        ("WRITE, port 40000 -> 4856 (neither is 4792)", frame(tv["TV-01"], 40000, dport=4856),
         ["0x01"]),
        ("CONNECT_ACCEPT, 4792 -> 40000 (the port table takes it)",
         frame(tv["TV-13"], 4792, dport=40000), ["0x21"]),
        ("SEND to port 5000", frame(tv["TV-03"], 49152, dport=5000), ["0x03"]),
        ("trimmed WRITE, PC set, TRIMMED DSCP", frame(trimmed_write, 40000, TRIMMED_DSCP,
                                                      dport=4800), ["0x01"]),
        ("trimmed WRITE, PC set, no TRIMMED DSCP", frame(trimmed_write, 40000, dport=4800), []),
        ("ACK with a bad ICRC", frame(bytes(corrupt), 4793, dport=40000), []),
        ("ACK with a byte more", frame(tv["TV-08"] + b"\0", 4793, dport=40000), []),
        ("ACK cut short", frame(tv["TV-08"][:40], 4793, dport=40000), []),
        ("version 2 PROBE", frame(reseal(bytes(bad_version)), 4793, dport=40000), []),
        ("WRITE-shaped noise", frame(noise, 4793, dport=40000), []),
        ("DNS-sized zeros", frame(bytes(40), 40000, dport=4800), []),
    ]


def check_other_ports(vectors, workdir):
    """Off port 4792 the heuristic decodes what parses as MetaRoCE and nothing
    else; without it, Decode As or the port preference still do."""
    cases = other_port_frames(vectors)
    pcap = os.path.join(workdir, "other-ports.pcap")
    write_pcap(pcap, [(c[1], None) for c in cases])
    rows = decode(pcap)
    if check(len(rows) == len(cases), f"other ports: read {len(rows)} of {len(cases)} frames"):
        for (what, _, want), row in zip(cases, rows):
            check(row["metaroce.opcode"] == want,
                  f"{what}: opcode {row['metaroce.opcode']}, want {want}")
            if want:
                messages = " / ".join(row["_ws.expert.message"])
                check(not row["_ws.malformed"] and "BAD" not in messages.upper(),
                      f"{what}: unexpected expert info '{messages}'")
                # One MetaRoCE layer, whether the port or the heuristic found it.
                check(row["frame.protocols"] and
                      row["frame.protocols"][0].split(":").count("metaroce") == 1,
                      f"{what}: protocols {row['frame.protocols']}")
    pcap = os.path.join(workdir, "port5000.pcap")
    write_pcap(pcap, [(frame(vectors[2][2], 49152, dport=5000), None)])
    off = ("--disable-heuristic", "metaroce_udp")
    for options, want in ((off, []), (off + ("-d", "udp.port==5000,metaroce"), ["0x03"]),
                          (off + ("-o", "metaroce.udp_port:5000"), ["0x03"])):
        rows = decode(pcap, options)
        got = rows[0]["metaroce.opcode"] if rows else None
        check(got == want, f"port 5000 with options {list(options)}: opcode {got}, want {want}")


def decode_on_and_off_port(cases, workdir, name):
    """Each case, whose first two items are its description and datagram,
    framed once to port 4792 and once from an entropy port to a client's
    port (the heuristic's), and decoded: (description with where, case, row,
    on port 4792) for each frame; none when tshark reads another number."""
    pcap = os.path.join(workdir, name + ".pcap")
    write_pcap(pcap, [(frame(c[1], 50000), None) for c in cases] +
               [(frame(c[1], 4793, dport=40000), None) for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == 2 * len(cases), f"{name}: read {len(rows)} of {2 * len(cases)}"):
        return []
    return [(cases[i % len(cases)][0] + (" (port 4792)" if i < len(cases) else " (heuristic)"),
             cases[i % len(cases)], row, i < len(cases)) for i, row in enumerate(rows)]


def check_short_datagrams(vectors, workdir):
    """BAD-1 and the order of 11.3 (length below 20, then version, then
    opcode): every datagram of 1 to 19 bytes is truncated, whatever its first
    bytes say, with no version or opcode error, on port 4792; the heuristic
    takes none of them. UDP hands an empty payload to no dissector, so 0
    bytes shows as UDP alone."""
    tv = {name: raw for name, _, raw, _ in vectors}
    firsts = {"PROBE": tv["TV-11"], "ACK": tv["TV-08"], "WRITE": tv["TV-01"],
              "version 2": bytes([0x2C]) + tv["TV-11"][1:],
              "version 2 CONNECT_REQ": bytes([0x28]) + tv["TV-12"][1:],  # BAD-2's exception
              "opcode 0x13": tv["TV-11"][:1] + bytes([0x13]) + tv["TV-11"][2:],
              "reserved flags": bytes([tv["TV-11"][0] | 0x03]) + tv["TV-11"][1:]}
    cases = [(f"{n}-byte {kind} prefix", raw[:n]) for kind, raw in firsts.items()
             for n in range(20)]
    for what, (_, datagram), row, on_port in decode_on_and_off_port(cases, workdir, "short"):
        messages = " / ".join(row["_ws.expert.message"])
        if not on_port or not datagram:
            check(not row["metaroce.opcode"] and not messages and not row["_ws.malformed"],
                  f"{what}: decoded as MetaRoCE ({row['metaroce.opcode']}, '{messages}')")
            continue
        check(row["metaroce.truncated"] == ["1"], f"{what}: not truncated: '{messages}'")
        check(not row["metaroce.bad_version"] and not row["metaroce.bad_opcode"],
              f"{what}: a version or opcode error before the length's: '{messages}'")
        check("Dissector failure" not in messages, f"{what}: {messages}")
        info = row["_ws.col.Info"][0] if row["_ws.col.Info"] else ""
        check("truncated" in info.lower(), f"{what}: Info '{info}' does not say truncated")
    print(f"short datagrams: 0-19 bytes, {len(firsts)} kinds of first bytes")


# Opcodes that carry no payload (3.2): their ICRC covers every byte before it.
PAYLOADLESS = ("READ_REQ", "ACK", "NAK", "PROBE", "CONNECT_REQ", "CONNECT_ACCEPT",
               "CONNECT_REJECT", "DISCONNECT", "DISCONNECT_ACK")


def check_pc_clear(vectors, workdir):
    """INT-2: receivers accept PC clear, and for packets without payload PC
    clear and PC set cover the same bytes. Each payload-less vector with PC
    cleared and its ICRC resealed decodes as the original does, on port 4792
    and through the heuristic, its ICRC good over every byte before it; so
    does a WRITE of an empty message. BAD-4: an opcode without payload has
    its ICRC over every byte before the last four whatever PC says, so with
    stray bytes after its headers (BAD-5) it is the ICRC over all of them
    that verifies."""
    tv = {name: raw for name, _, raw, _ in vectors}
    cases = []  # (what, datagram)
    for name, opname, raw, _ in vectors:
        if opname in PAYLOADLESS:
            cases.append((f"{name} {opname}, PC clear", reseal(bytes([raw[0] & ~0x08]) + raw[1:])))
    empty_write = bytearray(tv["TV-01"][:44])
    empty_write[0] &= ~0x08
    empty_write[24:28] = empty_write[20:24]  # msg_len = offset: a message of 0 bytes
    cases.append(("WRITE of an empty message, PC clear", reseal(bytes(empty_write) + bytes(4))))
    for what, (_, datagram), row, _ in decode_on_and_off_port(cases, workdir, "pc-clear"):
        check(row["metaroce.opcode"] == [f"0x{datagram[1]:02x}"],
              f"{what}: opcode {row['metaroce.opcode']}")
        check(row["metaroce.flags.pc"] == ["0"], f"{what}: PC {row['metaroce.flags.pc']}")
        check(row["metaroce.icrc.status"] == ["1"],
              f"{what}: ICRC status {row['metaroce.icrc.status']}, want 1 (good)")
        check(row["metaroce.icrc.covered_len"] == [str(len(datagram) - 4)],
              f"{what}: ICRC covers {row['metaroce.icrc.covered_len']} bytes, "
              f"want {len(datagram) - 4}")
        check(not row["_ws.expert.message"] and not row["_ws.malformed"],
              f"{what}: unexpected expert info {row['_ws.expert.message']}")

    # An ACK with 4 stray bytes, PC clear: sealed over all 44 bytes before the
    # ICRC it is a bad length with a good ICRC; sealed over its 44 header
    # bytes only, a bad ICRC (the engine counts it as bad_checksum, BAD-4).
    ack = bytes([tv["TV-08"][0] & ~0x08]) + tv["TV-08"][1:-4] + b"\xa5" * 4
    stray = [("ACK and 4 stray bytes, PC clear, ICRC over all of them",
              ack + struct.pack(">I", crc32c(ack)), "1"),
             ("ACK and 4 stray bytes, PC clear, ICRC over its headers",
              ack + struct.pack(">I", crc32c(ack[:44])), "0")]
    pcap = os.path.join(workdir, "pc-clear-stray.pcap")
    write_pcap(pcap, [(frame(d, 50000), None) for _, d, _ in stray])
    rows = decode(pcap)
    if check(len(rows) == len(stray), f"PC clear, stray bytes: read {len(rows)} frames"):
        for (what, datagram, status), row in zip(stray, rows):
            messages = " / ".join(row["_ws.expert.message"])
            check("after the ACK headers, which carry none" in messages,
                  f"{what}: expert info '{messages}' lacks the stray bytes")
            check(row["metaroce.icrc.status"] == [status],
                  f"{what}: ICRC status {row['metaroce.icrc.status']}, want {status}")
            check(row["metaroce.icrc.covered_len"] == [str(len(datagram) - 4)],
                  f"{what}: ICRC covers {row['metaroce.icrc.covered_len']} bytes, "
                  f"want {len(datagram) - 4}")
    print(f"PC clear: {len(cases)} packets without payload, 2 with stray bytes")


def check_reserved_flags(vectors, workdir):
    """Reserved bits are sent as zero and ignored on receipt (1.3, 3.3): a
    packet with flag bits 1-0 set, its ICRC resealed, decodes in full with a
    warning on the bits and a good ICRC, on port 4792 and through the
    heuristic alike; off the port, one whose ICRC does not match is still
    not taken for MetaRoCE."""
    tv = {name: raw for name, _, raw, _ in vectors}
    cases = []  # (what, datagram, bits, the heuristic decodes it)
    # TV-04 has PC clear: its ICRC covers its 28 header bytes.
    for name, covered in (("TV-01", None), ("TV-04", 28), ("TV-08", None), ("TV-11", None),
                          ("TV-12", None)):
        raw = tv[name]
        for bits in (0x01, 0x02, 0x03):
            changed = reseal(bytes([raw[0] | bits]) + raw[1:], covered)
            cases.append((f"{name}, reserved flags 0x{bits:x}", changed, bits, True))
        cases.append((f"{name}, reserved flags 0x3, ICRC not resealed",
                      bytes([raw[0] | 0x03]) + raw[1:], 0x03, False))
    for what, case, row, on_port in decode_on_and_off_port(cases, workdir, "reserved"):
        _, datagram, bits, resealed = case
        if not on_port and not resealed:
            check(not row["metaroce.opcode"], f"{what}: taken for MetaRoCE")
            continue
        messages = " / ".join(row["_ws.expert.message"])
        check(row["metaroce.opcode"] == [f"0x{datagram[1]:02x}"],
              f"{what}: opcode {row['metaroce.opcode']}, want 0x{datagram[1]:02x}")
        check(row["metaroce.flags.reserved"] == [f"0x{bits:02x}"],
              f"{what}: reserved flags {row['metaroce.flags.reserved']}")
        check(row["metaroce.reserved_not_zero"] == ["1"] and
              f"Flag bits 1-0 is 0x{bits:x}, must be zero" in messages,
              f"{what}: no reserved-bits warning in '{messages}'")
        want_status = "1" if resealed else "0"
        # A payload cut by the snap length is not the case here: every ICRC is checked.
        check(row["metaroce.icrc.status"] == [want_status],
              f"{what}: ICRC status {row['metaroce.icrc.status']}, want {want_status}")
        others = [m for m in row["_ws.expert.message"] if "Flag bits" not in m]
        if resealed:
            check(not others and not row["_ws.malformed"],
                  f"{what}: expert info beyond the warning: {others}")
    print(f"reserved flag bits: {len(cases)} packets on port 4792 and off it")


def data_packet(template, hdr_len, psn, offset, msg_len, payload):
    """A data packet from a vector's headers: psn, offset and msg_len set,
    `payload` after them, sealed as the template's PC says (INT-1, INT-2)."""
    hdr = bytearray(template[:hdr_len])
    hdr[8:12] = struct.pack(">I", psn)
    hdr[20:28] = struct.pack(">II", offset, msg_len)
    return reseal(bytes(hdr) + payload + bytes(4), None if hdr[0] & 0x08 else hdr_len)


def check_partial_payload(vectors, workdir):
    """TRIM-5: on a connection whose handshake the capture holds (mtu 1024,
    the smaller offer), a data packet whose payload is not min(mtu, msg_len
    - offset) is flagged, whatever its DSCP; a whole one and a message's last
    are not. On a connection whose handshake is not in the capture, only a
    payload shorter than an earlier packet's that was not its message's last
    is flagged (the mtu is at least that)."""
    tv = {name: raw for name, _, raw, _ in vectors}
    accept = bytearray(tv["TV-13"])  # from connection 0x2a to the requester's 7
    accept[24:26] = struct.pack(">H", 1024)  # the CONNECT_REQ (TV-12) offered 4096

    def data(template, hdr_len, conn, offset, msg_len, payload_len):
        hdr = bytearray(template[:hdr_len])
        hdr[4:8] = struct.pack(">I", conn)
        return data_packet(bytes(hdr), hdr_len, 0x100, offset, msg_len, bytes(payload_len))
    write, resp = (tv["TV-01"], 44), (tv["TV-07"], 28)
    # (what, frame, flagged): requester 10.0.0.1 (conn 7), responder 10.0.0.2 (0x2a).
    cases = [
        ("CONNECT_REQ", frame(tv["TV-12"], 50030), False),
        ("CONNECT_ACCEPT", frame(reseal(bytes(accept)), 4792, src=2, dst=1), False),
        ("WRITE cut to 700 of 1024", frame(data(*write, 0x2A, 0, 4096, 700), 50031), True),
        ("WRITE cut to 300, TRIMMED DSCP", frame(data(*write, 0x2A, 0, 4096, 300), 50032,
                                                 TRIMMED_DSCP), True),
        ("READ_RESP cut to 100 of 1024", frame(data(*resp, 7, 0, 2048, 100), 50033, src=2, dst=1),
         True),
        ("WRITE longer than mtu, the message's last", frame(data(*write, 0x2A, 0, 2000, 2000),
                                                           50034), True),
        ("WRITE of a whole mtu", frame(data(*write, 0x2A, 1024, 4096, 1024), 50035), False),
        ("WRITE, the message's last 28 bytes", frame(data(*write, 0x2A, 3072, 3100, 28), 50036),
         False),
        ("WRITE of 700 to a connection of unknown mtu", frame(data(*write, 0x99, 0, 4096, 700),
                                                             50037), False),
        ("WRITE of 1024 to another, not the message's last", frame(data(*write, 0x98, 1024, 4096,
                                                                         1024), 50038), False),
        ("WRITE cut to 700 after it", frame(data(*write, 0x98, 0, 4096, 700), 50039),
         "at least 1024"),
        ("WRITE, its message's last 28 bytes, after it", frame(data(*write, 0x98, 3072, 3100, 28),
                                                              50040), False),
    ]
    pcap = os.path.join(workdir, "partial.pcap")
    write_pcap(pcap, [(c[1], None) for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == len(cases), f"partial payload: read {len(rows)} frames"):
        return
    for (what, _, flagged), row in zip(cases, rows):
        messages = " / ".join(row["_ws.expert.message"])
        want = ["1"] if flagged is not False else []
        check(row["metaroce.partial_payload"] == want,
              f"partial payload, {what}: metaroce.partial_payload is "
              f"{row['metaroce.partial_payload']}, want {want} ('{messages}')")
        check(row["metaroce.trimmed"] == [], f"partial payload, {what}: taken for trimmed")
        if flagged is not False:
            told = "mtu 1024" if flagged is True else f"mtu {flagged}"
            check("(TRIM-5)" in messages and told in messages,
                  f"partial payload, {what}: expert info '{messages}'")
        else:
            check(not messages, f"partial payload, {what}: expert info '{messages}'")
    print(f"partial payloads (TRIM-5): {len(cases)} packets")


def gso_datagrams(vectors):
    """(description, packets): UDP datagrams as a sender's own capture shows
    them (loopback included) when the driver coalesces a run with UDP GSO
    (udp/README.md), or a receiver's after GRO: several packets back to
    back, each of the run's segment size but the last, which may be shorter."""
    tv = {name: raw for name, _, raw, _ in vectors}
    writes = [data_packet(tv["TV-01"], 44, 0x1000 + i, 8 * i, 20, bytes(range(8 * i, 8 * i + 8)))
              for i in range(2)] + [data_packet(tv["TV-01"], 44, 0x1002, 16, 20, b"\x10" * 4)]
    sends = [data_packet(tv["TV-03"], 28, 0x2000 + i, 8 * i, 16, b"\x5a" * 8) for i in range(2)]
    sends_pc_clear = [data_packet(tv["TV-04"], 28, 0x3000 + i, 8 * i, 12, b"\xa5" * (8 - 4 * i))
                      for i in range(2)]
    responses = [data_packet(tv["TV-07"], 28, 0x80000000 + i, 8 * i, 64, bytes(8))
                 for i in range(4)]
    return [
        ("WRITE x3, the last shorter", writes),
        ("SEND x2, PC set", sends),
        ("SEND x2, PC clear, the last shorter", sends_pc_clear),
        ("READ_RESP x4", responses),
        ("ACK x3", [tv["TV-09"]] * 3),
        ("ACK 48 x2 and a 40", [tv["TV-08"]] * 2 + [tv["TV-09"]]),
    ]


def check_gso(vectors, workdir):
    """A datagram that holds a GSO run of packets decodes as those packets,
    each with its ICRC good, on port 4792 and through the heuristic; a
    mismatched ICRC inside a run is still reported."""
    cases = [(what, b"".join(packets), packets) for what, packets in gso_datagrams(vectors)]
    for what, (_, datagram, packets), row, _ in decode_on_and_off_port(cases, workdir, "gso"):
        messages = " / ".join(row["_ws.expert.message"])
        want = [f"0x{p[1]:02x}" for p in packets]
        check(row["metaroce.opcode"] == want, f"{what}: opcodes {row['metaroce.opcode']}, "
              f"want {want}")
        check(row["metaroce.icrc.status"] == ["1"] * len(packets),
              f"{what}: ICRC status {row['metaroce.icrc.status']}")
        check(row["metaroce.gso.segments"] == [str(len(packets))],
              f"{what}: gso.segments {row['metaroce.gso.segments']}")
        # WRITE has 44 header bytes, SEND and READ_RESP 28 (3.2).
        check(row["metaroce.payload_len"] == [str(len(p) - (44 if p[1] == 1 else 28) - 4)
                                              for p in packets if p[1] < 0x10],
              f"{what}: payload lengths {row['metaroce.payload_len']}")
        others = [m for m in row["_ws.expert.message"] if "GSO" not in m]
        check(not others and not row["_ws.malformed"], f"{what}: expert info '{messages}'")
    # One bit flipped in the second WRITE's payload: its ICRC alone is bad.
    writes = gso_datagrams(vectors)[0][1]
    flipped = bytearray(writes[1])
    flipped[50] ^= 0x01
    pcap = os.path.join(workdir, "gso-bad.pcap")
    write_pcap(pcap, [(frame(writes[0] + bytes(flipped), 50000), None)])
    rows = decode(pcap)
    if check(len(rows) == 1, f"GSO with a bad ICRC: read {len(rows)} frames"):
        check(rows[0]["metaroce.icrc.status"][-1:] == ["0"],
              f"GSO with a bad ICRC: ICRC status {rows[0]['metaroce.icrc.status']}")
    print(f"GSO runs: {len(cases)} datagrams holding several packets")


def check_cut_gso(vectors, workdir):
    """A GSO run captured with a snap length (tshark -s 128 on the sender) is
    cut before its second packet, so it cannot be split: one longer than its
    packet could be (than the handshake's mtu, or msg_len - offset) is a GSO
    note, not a bad length (BAD-5) or partial payload (TRIM-5). One that
    could be a single packet of a larger mtu teaches the TRIM-5 check no mtu:
    a later whole packet of the real mtu is not taken for a cut one."""
    tv = {name: raw for name, _, raw, _ in vectors}
    accept = bytearray(tv["TV-13"])
    accept[24:26] = struct.pack(">H", 1024)  # the CONNECT_REQ (TV-12) offered 4096

    def run(conn, offsets, msg_len, payload=1024):
        hdr = bytearray(tv["TV-01"][:44])
        hdr[4:8] = struct.pack(">I", conn)
        return b"".join(data_packet(bytes(hdr), 44, 0x700 + i, off, msg_len, bytes(payload))
                        for i, off in enumerate(offsets))

    def cut(datagram):  # the snap length keeps the headers only
        whole = frame(datagram, 50060)
        return whole[:14 + 28 + 44], len(whole)
    # (what, (frame, original length), gso note, error)
    cases = [
        ("CONNECT_REQ", (frame(tv["TV-12"], 50060), None), False),
        ("CONNECT_ACCEPT, mtu 1024", (frame(reseal(bytes(accept)), 4792, src=2, dst=1), None),
         False),
        ("3 WRITEs, past the mtu", cut(run(0x2A, (0, 1024, 2048), 8192)), True),
        ("1 WRITE, cut", cut(run(0x2A, (3072,), 8192)), False),
        ("2 WRITEs, past msg_len, no handshake", cut(run(0x77, (0, 1024), 2048)), True),
        ("3 WRITEs within msg_len, no handshake", cut(run(0x78, (0, 1024, 2048), 8192)), False),
        ("a whole WRITE of 1024 after them", (frame(run(0x78, (4096,), 8192), 50061), None),
         False),
    ]
    pcap = os.path.join(workdir, "gso-cut.pcap")
    write_pcap(pcap, [c[1] for c in cases])
    rows = decode(pcap)
    if not check(len(rows) == len(cases), f"cut GSO runs: read {len(rows)} frames"):
        return
    for (what, _, note), row in zip(cases, rows):
        messages = " / ".join(row["_ws.expert.message"])
        check(row["metaroce.gso"] == (["1"] if note else []), f"cut GSO, {what}: metaroce.gso "
              f"{row['metaroce.gso']} ('{messages}')")
        check(not row["metaroce.partial_payload"] and not row["metaroce.bad_length"],
              f"cut GSO, {what}: an error: '{messages}'")
    print(f"cut GSO runs: {len(cases)} frames")


# (name, metaroce-sim arguments): a plain run, and an incast whose switches trim.
SIM_RUNS = [
    ("fattree16-perm", ["--preset", "fattree16-perm", "--pcap", "host:0"]),
    ("incast8-256k trimming",
     ["--preset", "incast8-256k", "--set", "queue.trim=1", "--pcap", "host:0"]),
]
# Expert texts of errors and warnings (notes, e.g. on trimming or the snap length, are fine).
SIM_ERRORS = re.compile(r"BAD-|Unknown|Truncated|Datagram of|does not match|failure|must be")
CONTROL_OPS = ("ACK", "NAK", "PROBE", "CONNECT_REQ", "CONNECT_ACCEPT", "CONNECT_REJECT",
               "DISCONNECT", "DISCONNECT_ACK")


def check_sim(sim, workdir):
    for name, sim_args in SIM_RUNS:
        pcap = os.path.join(workdir, name.split()[0] + ".pcap")
        if not tshark_lib.sim_capture(sim, pcap, ["--transport", "metaroce"] + sim_args):
            continue
        rows = decode(pcap)
        check(len(rows) > 100, f"{name}: simulator capture has only {len(rows)} packets")
        ops, statuses, trimmed, streams, requests, retransmissions = {}, {}, 0, set(), set(), 0
        for row in rows:
            n = row["frame.number"][0]
            check(len(row["metaroce.opcode"]) == 1, f"{name} frame {n}: not decoded as MetaRoCE")
            check(not row["_ws.malformed"], f"{name} frame {n}: malformed")
            for m in row["_ws.expert.message"]:
                check(not SIM_ERRORS.search(m), f"{name} frame {n}: expert error '{m}'")
            # The engine sends every field as the spec fixes it.
            check(not row["metaroce.reserved_not_zero"] and not row["metaroce.unexpected_value"],
                  f"{name} frame {n}: warned: {row['_ws.expert.message']}")
            op = row["_ws.col.Info"][0].split(" ")[0] if row["_ws.col.Info"] else "?"
            ops[op] = ops.get(op, 0) + 1
            status = "/".join(row["metaroce.icrc.status"])
            statuses[status] = statuses.get(status, 0) + 1
            trimmed += row["metaroce.trimmed"] == ["1"]
            # The handshakes are in the capture: every packet is on the stream of one.
            check(len(row["metaroce.stream"]) == 1, f"{name} frame {n}: stream "
                  f"{row['metaroce.stream']}")
            streams.update(row["metaroce.stream"])
            if op == "CONNECT_REQ":
                requests.update(row["metaroce.connect.src_conn"])
            retransmissions += row["metaroce.retransmission"] == ["1"]
            # TRIM-1: a switch that cuts a packet marks it with the TRIMMED DSCP;
            # ENC-6: ACK and NAK leave in the control class, the rest DSCP 0.
            if row["metaroce.trimmed"] == ["1"]:
                want_dscp = str(TRIMMED_DSCP)
            else:
                want_dscp = str(CONTROL_DSCP) if op in ("ACK", "NAK") else "0"
            check(row["ip.dsfield.dscp"] == [want_dscp],
                  f"{name} frame {n}: DSCP {row['ip.dsfield.dscp']}, want {want_dscp}")
            # Control packets are whole in the capture, so their ICRC must verify;
            # a data record is cut after its headers unless trimmed or empty.
            if op in CONTROL_OPS:
                check(status == "1", f"{name} frame {n}: {op} ICRC status {status}")
            # The simulator clears PC, so a trimmed packet's ICRC covers what is left.
            if row["metaroce.trimmed"] == ["1"] and row["metaroce.flags.pc"] == ["0"]:
                check(status == "1", f"{name} frame {n}: trimmed, PC clear, ICRC status {status}")
        if "trim" in name:
            check(trimmed > 0, f"{name}: no trimmed packet recognised")
            check(retransmissions > 0, f"{name}: no retransmission recognised")
        else:
            check(retransmissions == 0,
                  f"{name}: {retransmissions} retransmissions, the run has none")
        check(len(streams) == len(requests), f"{name}: {len(streams)} streams for "
              f"{len(requests)} connections")
        print(f"simulator, {name}: {len(rows)} packets, opcodes {ops}, ICRC status "
              f"(1 good, 2 unverified) {statuses}, {trimmed} trimmed, {len(streams)} streams, "
              f"{retransmissions} retransmissions")


def check_mutations(vectors, workdir):
    """Every prefix of every vector, and seeded random byte changes: each
    decodes without a dissector failure, and every prefix draws an error."""
    rng = random.Random(4792)
    prefixes, mutants = [], []
    for _, _, raw, _ in vectors:
        prefixes += [raw[:n] for n in range(1, len(raw))]  # UDP hands no empty payload on
        for _ in range(20):
            m = bytearray(raw)
            for _ in range(rng.randint(1, 3)):
                m[rng.randrange(len(m))] = rng.randrange(256)
            mutants.append(bytes(m))
    pcap = os.path.join(workdir, "mutations.pcap")
    write_pcap(pcap, [(frame(d, 50000 + i % 1000), None) for i, d in enumerate(prefixes + mutants)])
    rows = decode(pcap)
    if not check(len(rows) == len(prefixes) + len(mutants), f"mutations: read {len(rows)} frames"):
        return
    for i, row in enumerate(rows):
        messages = " / ".join(row["_ws.expert.message"])
        check("Dissector failure" not in messages, f"mutation frame {i + 1}: {messages}")
        if i < len(prefixes):
            check(messages != "",
                  f"prefix frame {i + 1} ({len(prefixes[i])} bytes): no expert info")
    print(f"mutations: {len(prefixes)} prefixes, {len(mutants)} random changes")


def check_status_names():
    """The dissector names every status of appendix A as status.hpp does, and
    no other: a code added to the engine (0x4c came without one) would show as
    "not in appendix A" in a DISCONNECT's reason or a REJECT's code."""
    with open(STATUS_HPP, encoding="utf-8") as f:
        engine = {int(code, 16): name for name, code in
                  re.findall(r"X\((k\w+),\s*(0x[0-9a-fA-F]+)", f.read())}
    with open(LUA, encoding="utf-8") as f:
        lua = f.read()
    table = re.search(r"local status_names = \{(.*?)\n\}", lua, re.S)
    dissector = ({int(code, 16): name for code, name in
                  re.findall(r'\[(0x[0-9a-fA-F]+)\] = "(\w+)"', table.group(1))}
                 if table else {})
    check(len(engine) > 20, f"read {len(engine)} status codes from {STATUS_HPP}")
    check(dissector == engine,
          f"metaroce.lua's status_names differ from status.hpp: missing "
          f"{sorted(hex(c) for c in engine.keys() - dissector.keys())}, extra "
          f"{sorted(hex(c) for c in dissector.keys() - engine.keys())}, renamed "
          f"{sorted(hex(c) for c in engine.keys() & dissector.keys() if engine[c] != dissector[c])}")
    print(f"status names: {len(dissector)} codes compared with status.hpp")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sim", help="metaroce-sim binary (step 4 is skipped without it)")
    parser.add_argument("--keep", help="write the pcaps into this folder and keep them")
    args = parser.parse_args()

    if not tshark_lib.have_tshark():
        return 1
    # As root, Wireshark runs -X lua_script only if init.lua allows it.
    load = subprocess.run(["tshark", "-G", "fields", "-X", "lua_script:" + LUA],
                          capture_output=True, text=True)
    if "\tmetaroce.psn\t" not in load.stdout:
        print("FAIL: tshark did not load metaroce.lua (a Lua error, or running as root with "
              "run_user_scripts_when_superuser false in Wireshark's init.lua; see "
              "tools/wireshark/README.md)\n" + load.stderr)
        return 1

    check_status_names()
    workdir = args.keep or tempfile.mkdtemp(prefix="metaroce-wireshark-")
    os.makedirs(workdir, exist_ok=True)
    try:
        with open(SPEC, encoding="utf-8") as f:
            vectors = parse_vectors(f.read())
        check(len(vectors) == 16, f"found {len(vectors)} test vectors in the spec, want 16")
        vectors_pcap = os.path.join(workdir, "vectors.pcap")
        write_pcap(vectors_pcap,
                   [(frame(v[2], 49152 + i), None) for i, v in enumerate(vectors)])
        rows = decode(vectors_pcap)
        if check(len(rows) == len(vectors), f"tshark read {len(rows)} of {len(vectors)} frames"):
            check_vectors(vectors, rows)
            check(all(r["metaroce.entropy"] == [str(49152 + i)] for i, r in enumerate(rows)),
                  "metaroce.entropy differs from the UDP source port")
        print(f"vectors: {len(rows)} decoded, "
              f"{sum(len(v[3]) for v in vectors)} spec field values compared")

        cases = broken_frames(vectors)
        broken_pcap = os.path.join(workdir, "broken.pcap")
        write_pcap(broken_pcap, [(c[1], c[2]) for c in cases])
        rows = decode(broken_pcap)
        if check(len(rows) == len(cases), f"tshark read {len(rows)} of {len(cases)} broken frames"):
            check_broken(cases, rows)
        print(f"broken and trimmed packets: {len(cases)} cases")

        check_partial_payload(vectors, workdir)
        check_tree_texts(vectors, workdir)
        check_streams(vectors, workdir)
        check_ecn(vectors, workdir)
        check_ack_fields(vectors, workdir)
        check_ipv6(vectors, workdir)
        check_icmp_quotes(vectors, workdir)
        check_readme_filters(vectors_pcap)
        check_mutations(vectors, workdir)
        check_short_datagrams(vectors, workdir)
        check_pc_clear(vectors, workdir)
        check_reserved_flags(vectors, workdir)
        check_gso(vectors, workdir)
        check_cut_gso(vectors, workdir)
        check_other_ports(vectors, workdir)
        print("other ports: the heuristic takes MetaRoCE and nothing else; without it, Decode "
              "As or the udp_port preference")

        # Full text output too: the Lua error check covers every tree line.
        tshark_lib.tshark(["-r", vectors_pcap, "-V"], LUA)
        tshark_lib.tshark(["-r", broken_pcap, "-V"], LUA)

        if args.sim and os.path.exists(args.sim):
            check_sim(args.sim, workdir)
        elif args.sim:
            print(f"simulator capture: not checked ({args.sim} is not built)")
        else:
            print("simulator capture: not checked (no --sim)")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    return tshark_lib.summary()


if __name__ == "__main__":
    sys.exit(main())
