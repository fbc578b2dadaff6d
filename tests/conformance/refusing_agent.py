#!/usr/bin/env python3
"""An agent in front of the reference agent that answers one op with an
error of its own instead of passing it on (tests/conformance/cli_test.sh):
what an agent whose IUT fails that op looks like to the tester.

  refusing_agent.py UPSTREAM_HOST:PORT OP ERROR_TEXT [--busy-odd]
Prints "listening on 127.0.0.1:PORT" once ready; serves one tester at a
time, each over a fresh connection to the upstream agent. With --busy-odd,
the first tester connection, the third and so on are answered "busy" and
closed, as the reference agent answers one that comes while it still
serves another: every open of the target then retries once.
"""
import json
import socket
import sys


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    op, error = sys.argv[2], sys.argv[3]
    busy = "--busy-odd" in sys.argv[4:]
    testers = 0
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    print(f"listening on 127.0.0.1:{server.getsockname()[1]},", flush=True)
    while True:
        tester, _ = server.accept()
        testers += 1
        if busy and testers % 2 == 1:
            tester.sendall(b'{"ok":false,"error":"busy: the agent serves another tester"}\n')
            tester.close()
            continue
        upstream = socket.create_connection((host, int(port)))
        t_in, u_in = tester.makefile("rb"), upstream.makefile("rb")
        for line in t_in:
            request = json.loads(line)
            if request.get("op") == op:
                reply = json.dumps({"ok": False, "error": error}).encode() + b"\n"
            else:
                upstream.sendall(line)
                reply = u_in.readline()
            tester.sendall(reply)
        upstream.close()
        tester.close()


if __name__ == "__main__":
    main()
