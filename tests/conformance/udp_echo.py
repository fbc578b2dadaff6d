#!/usr/bin/env python3
"""A UDP echo service (tests/conformance/cli_test.sh): what a --iut that
names some other service, one answering every datagram, looks like to
metaroce-conform. Its answer to the tester's CONNECT_REQ is that request
again, not a CONNECT_ACCEPT or CONNECT_REJECT naming it.

  udp_echo.py
Prints "listening on 127.0.0.1:PORT" once ready; echoes until killed.
"""
import socket


def main():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{s.getsockname()[1]},", flush=True)
    while True:
        data, peer = s.recvfrom(65536)
        s.sendto(data, peer)


if __name__ == "__main__":
    main()
