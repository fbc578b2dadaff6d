#!/usr/bin/env python3
"""An agent in front of the reference agent that breaks the agent protocol
(conformance/README.md) in exactly one way, passing every other request on:
what a buggy vendor agent looks like to the tester (tests/conformance,
cli_test.sh).

  faulty_agent.py UPSTREAM_HOST:PORT MODE [ARG...] [-- MODE [ARG...]]... [--busy-odd]
Several faults, separated by "--", each apply to the requests they name.
MODE:
  fail OP TEXT          answers OP {"ok": false, "error": TEXT}
  garbage OP            answers OP with a line that is no JSON, holding
                        bytes that are not UTF-8
  repeat-completion     answers every poll_completion after the first
                        completion with that completion again (a peek for a pop)
  short-hex             answers read_memory with "hex": ""
  drop-field OP:FIELD   leaves FIELD out of OP's reply
  extra-line OP         sends an empty line after every reply to OP
  nested OP             answers OP {"ok": true, "completion": [[[...]]]}, a
                        million levels deep
  protocol N            answers hello with "protocol": N
  oversized OP          answers OP with a line of 17 MiB (the limit is 16)
  silent OP             never answers OP
Prints "listening on 127.0.0.1:PORT," once ready; serves one tester at a
time, each over a fresh connection to the upstream agent. With --busy-odd,
the first tester connection, the third and so on are answered "busy" and
closed, as the reference agent answers one that comes while it still
serves another: every open of the target then retries once.
"""
import json
import socket
import sys


def replaced(mode, args, op):
    """The fault's whole reply to `op` (bytes), or None: upstream answers."""
    if mode == "fail" and op == args[0]:
        return json.dumps({"ok": False, "error": args[1]}).encode() + b"\n"
    if mode == "garbage" and op == args[0]:
        return b"\xe9t\xe9 not json\n"
    if mode == "oversized" and op == args[0]:
        return b'{"ok":true,"pad":"' + b"a" * (17 << 20) + b'"}\n'
    if mode == "silent" and op == args[0]:
        return b""  # no reply: the tester's wait for one runs out
    if mode == "nested" and op == args[0]:
        depth = 1_000_000
        return b'{"ok":true,"completion":' + b"[" * depth + b"]" * depth + b"}\n"
    return None


def altered(mode, args, op, reply, state):
    """Upstream's reply to `op` (bytes) with the fault applied."""
    if mode == "repeat-completion" and op == "poll_completion":
        if state.get("completion") is not None:
            return state["completion"]
        if json.loads(reply).get("completion") is not None:
            state["completion"] = reply
    elif mode == "short-hex" and op == "read_memory":
        body = json.loads(reply)
        if body.get("ok"):
            body["hex"] = ""
            reply = json.dumps(body).encode() + b"\n"
    elif mode == "drop-field" and op == args[0].split(":")[0]:
        body = json.loads(reply)
        body.pop(args[0].split(":")[1], None)
        reply = json.dumps(body).encode() + b"\n"
    elif mode == "protocol" and op == "hello":
        body = json.loads(reply)
        body["protocol"] = int(args[0])
        reply = json.dumps(body).encode() + b"\n"
    elif mode == "extra-line" and op == args[0]:
        reply += b"\n"
    return reply


def faulty_reply(faults, request, upstream_reply, state):
    """The reply the tester gets (bytes)."""
    op = request.get("op")
    for mode, args in faults:
        reply = replaced(mode, args, op)
        if reply is not None:
            return reply
    reply = upstream_reply()
    for mode, args in faults:
        reply = altered(mode, args, op, reply, state)
    return reply


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    faults = [[]]
    for arg in sys.argv[2:]:
        if arg == "--":
            faults.append([])
        elif arg != "--busy-odd":
            faults[-1].append(arg)
    faults = [(f[0], f[1:]) for f in faults]
    busy = "--busy-odd" in sys.argv[2:]
    testers = 0
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    print(f"listening on 127.0.0.1:{server.getsockname()[1]},", flush=True)
    while True:
        tester, _ = server.accept()
        testers += 1
        print(f"tester {testers}", flush=True)
        if busy and testers % 2 == 1:
            tester.sendall(b'{"ok":false,"error":"busy: the agent serves another tester"}\n')
            tester.close()
            continue
        upstream = socket.create_connection((host, int(port)))
        t_in, u_in = tester.makefile("rb"), upstream.makefile("rb")
        state = {}
        try:
            for line in t_in:
                request = json.loads(line)

                def upstream_reply(line=line):
                    upstream.sendall(line)
                    return u_in.readline()

                tester.sendall(faulty_reply(faults, request, upstream_reply, state))
        except OSError:
            pass  # the tester gave up on the session (it found the fault)
        upstream.close()
        tester.close()


if __name__ == "__main__":
    main()
