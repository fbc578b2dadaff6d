#!/bin/sh
# ctest perf.cli: metaroce-perf refuses, before anything opens, with exit 1
# and a line naming the option: an entropy block that runs past port 65535,
# the trimmed DSCP (63) for either class, and a bare number as the address
# (getaddrinfo would read "9999" as 0.0.39.15). Host names still resolve.
#   cli_test.sh METAROCE_PERF
set -u
perf=$1
here=$(dirname "$0")
# shellcheck source=SCRIPTDIR/../expect_exit.sh
. "$here/../expect_exit.sh"

last='the last port, base \+ count - 1, must be at most 65535'
expect 1 "^--entropy-base: 65500 with --entropy-count 64 ends at port 65563: $last" \
  "$perf" server 127.0.0.1:0 --entropy-base 65500
expect 1 "^--entropy-base: 65473 with --entropy-count 64 ends at port 65536: $last" \
  "$perf" client 127.0.0.1:4792 --entropy-base 65473
expect 1 "^--entropy-base: 65530 with --entropy-count 8 ends at port 65537: $last" \
  "$perf" server 127.0.0.1:0 --entropy-base 65530 --entropy-count 8 --paths 8
expect 1 '^--control-dscp: must not be 63, the DSCP a trimming switch gives a cut packet' \
  "$perf" server 127.0.0.1:0 --control-dscp 63
expect 1 '^--data-dscp: must not be 63' "$perf" client 127.0.0.1:4792 --data-dscp 63
expect 1 "^addr: '9999' is a bare number, not an address; for a port, write HOST:9999" \
  "$perf" server 9999
expect 1 "^addr: '4792' is a bare number, not an address" "$perf" client 4792 --iters 1
expect 0 '' "$perf" --help
# Accepted: the last port exactly 65535 with --entropy-base, and a host name,
# reach the run (here: a client that finds no server at a closed port, exit 1
# without a parse error).
for args in "localhost:1 --entropy-base 65472" "127.0.0.1:1 --control-dscp 62 --data-dscp 0"; do
  # shellcheck disable=SC2086
  err=$(timeout 20 "$perf" client $args --iters 1 --peer-timeout-ms 100 2>&1 >/dev/null)
  if printf '%s\n' "$err" | grep -Eq -- '^(--|addr:)|Run with --help'; then
    echo "FAIL: metaroce-perf client $args: a parse error: $err"
    failures=$((failures + 1))
  else
    echo "ok:   metaroce-perf client $args -> past the command line"
  fi
done
finish
