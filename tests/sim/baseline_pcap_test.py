#!/usr/bin/env python3
"""metaroce-sim --pcap of the rocev2 and irn baselines through tshark.

Every record is whole (caplen = orig_len): Wireshark's InfiniBand dissector
calls a data packet cut before its payload malformed and an ACK without its
ICRC truncated. Every record's ICRC is RoCEv2's (IBTA annex A17: CRC-32 over
the masked IPv4 / UDP / BTH and the rest), computed here with zlib, not with
the simulator's code. tshark decodes every frame as RoCE with no malformed
packet, no expert error and no "Packet size limited"; every Acknowledge has
its AETH and its ICRC.

Usage: baseline_pcap_test.py METAROCE_SIM
"""
import os
import shutil
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tshark_lib  # noqa: E402
from tshark_lib import check  # noqa: E402


def records(path):
    """[(caplen, orig_len, bytes)] of a classic nanosecond pcap."""
    with open(path, "rb") as f:
        data = f.read()
    assert struct.unpack_from("<I", data, 0)[0] == 0xA1B23C4D, "not a nanosecond pcap"
    out, off = [], 24
    while off + 16 <= len(data):
        _, _, cap, orig = struct.unpack_from("<IIII", data, off)
        off += 16
        out.append((cap, orig, data[off:off + cap]))
        off += cap
    check(off == len(data), f"{path}: trailing bytes")
    return out


def roce_icrc(frame):
    """The ICRC of an Ethernet / IPv4 / UDP / RoCEv2 frame, as sent (LSB first)."""
    ip = bytearray(frame[14:34])
    udp = bytearray(frame[34:42])
    bth = bytearray(frame[42:54])
    ip[1] = 0xFF  # TOS
    ip[8] = 0xFF  # TTL
    ip[10:12] = b"\xff\xff"  # header checksum
    udp[6:8] = b"\xff\xff"  # UDP checksum
    bth[4] = 0xFF  # reserved
    masked = b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + frame[54:-4]
    return struct.pack("<I", zlib.crc32(masked))


def check_run(sim, transport, link, workdir):
    name = f"{transport} {link}"
    pcap = os.path.join(workdir, f"{transport}-{link.replace(':', '_')}.pcap")
    if not tshark_lib.sim_capture(sim, pcap, ["--preset", "fattree16-perm", "--transport",
                                              transport, "--seed", "1", "--pcap", link]):
        return
    recs = records(pcap)
    check(len(recs) > 100, f"{name}: only {len(recs)} records")
    bad_icrc = 0
    for i, (cap, orig, frame) in enumerate(recs):
        if not check(cap == orig, f"{name} frame {i + 1}: caplen {cap} of {orig}"):
            continue
        if frame[-4:] != roce_icrc(frame):
            bad_icrc += 1
    check(bad_icrc == 0, f"{name}: {bad_icrc} records with a wrong ICRC")

    fields = ["frame.number", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message",
              "infiniband.bth.opcode", "infiniband.aeth.syndrome", "infiniband.invariant.crc",
              "_ws.col.Info"]
    rows = tshark_lib.decode(pcap, fields)
    check(len(rows) == len(recs), f"{name}: tshark read {len(rows)} of {len(recs)} frames")
    ops = {}
    for row in rows:
        n = "|".join(row["frame.number"])
        op = "|".join(row["infiniband.bth.opcode"])
        ops[op] = ops.get(op, 0) + 1
        check(op != "", f"{name} frame {n}: not decoded as RoCE")
        check(not row["_ws.malformed"], f"{name} frame {n}: malformed")
        info = "|".join(row["_ws.col.Info"])
        check("Malformed" not in info and "size limited" not in info,
              f"{name} frame {n}: '{info}'")
        # 0x800000 is PI_ERROR (epan/proto.h); a NAK's PSN Sequence Error is less.
        severities = [int(s) for s in row["_ws.expert.severity"]]
        check(all(s < 0x800000 for s in severities),
              f"{name} frame {n}: expert error {'|'.join(row['_ws.expert.message'])}")
        if op == "17":  # Acknowledge: AETH, then the ICRC
            check(row["infiniband.aeth.syndrome"] != [], f"{name} frame {n}: no AETH")
        # Wireshark 4.0 knows no CNP opcode (it shows the body as data), nor
        # IRN's NACK, whose SACKed PSN after the AETH hides the ICRC from it.
        irn_nack = transport == "irn" and row["infiniband.aeth.syndrome"] == ["96"]
        if op != "129" and not irn_nack:
            check(row["infiniband.invariant.crc"] != [], f"{name} frame {n}: no ICRC field")
    check(ops.get("17", 0) > 0, f"{name}: no Acknowledge captured ({ops})")
    check(sum(ops.get(o, 0) for o in ("6", "7", "8", "10")) > 0, f"{name}: no RDMA WRITE ({ops})")
    print(f"{name}: {len(rows)} frames, opcodes {ops}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if not tshark_lib.have_tshark():
        return 1
    workdir = tempfile.mkdtemp(prefix="metaroce-baseline-pcap-")
    try:
        for transport in ("rocev2", "irn"):
            # Link 16 (ToR 0 - aggregation) both ways: data, ACKs, NAKs, CNPs.
            check_run(sys.argv[1], transport, "16", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return tshark_lib.summary()


if __name__ == "__main__":
    sys.exit(main())
