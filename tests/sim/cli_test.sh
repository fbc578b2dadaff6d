#!/bin/sh
# ctest sim.cli.bad-options-exit-2: metaroce-sim refuses bad option values
# and bad command lines with exit 2 (docs/sim/README.md) and one line naming
# the option and its range, instead of clamping, ignoring or overflowing
# them; --help still exits 0.
#   cli_test.sh METAROCE_SIM
set -u
# shellcheck source=SCRIPTDIR/../expect_exit.sh
. "$(dirname "$0")/../expect_exit.sh"
# Absolute: the --pcap case below runs in a folder of its own, where a
# relative path given (build/tools/sim/metaroce-sim) named nothing.
sim=$(absolute "$1")
# sim_expect RC PATTERN ARGS...: expect, quietly and without timings.
sim_expect() {
  want=$1 pat=$2
  shift 2
  expect "$want" "$pat" "$sim" -q --no-timing "$@"
}
paths='--paths: .* is not an integer in \[1, 32\]'
for v in 0 -1 33 2.5; do sim_expect 2 "^metaroce-sim: $paths" --paths "$v"; done
limit='--time-limit-ms: .* is not a value in \[1e-06, 1e\+09\]'
for v in -5 nan 2e10 0; do sim_expect 2 "^metaroce-sim: $limit" --time-limit-ms "$v"; done
sim_expect 2 '^metaroce-sim: --min-rto-us: -1 is not a value in \[1, 1e\+07\]' --min-rto-us -1
sim_expect 2 '^metaroce-sim: --set num_paths: 0 is not' --set num_paths=0
# A sample below 10 ns shows nothing new and fills the disk (1e-6: a row a ps).
for v in 0 nan 0.001 1e-6; do
  sim_expect 2 "^metaroce-sim: --sample-us: .* is not in \\[0.01, 1e9\\]" --csv /tmp/never --sample-us "$v"
done
# The transport and the preset are named as every other bad option is.
sim_expect 2 "^metaroce-sim: unknown transport 'foo'" --transport foo
sim_expect 2 '^metaroce-sim: unknown preset: nope \(--list shows the presets\)' --preset nope
# An output option without the one it qualifies would be ignored.
sim_expect 2 '^metaroce-sim: --pcap-file qualifies --pcap, which is not given$' --pcap-file x.pcap
sim_expect 2 '^metaroce-sim: --trace-file qualifies --trace-flow, which is not given$' \
  --trace-file t.csv
sim_expect 2 '^metaroce-sim: --sample-us qualifies --csv, which is not given$' --sample-us 10
sim_expect 2 '^metaroce-sim: --csv-flows qualifies --csv, which is not given$' --csv-flows 2
sim_expect 2 '^metaroce-sim: --watch-link qualifies --csv, which is not given$' --watch-link bogus
sim_expect 2 '^metaroce-sim: --watch-link qualifies --csv, which is not given$' --watch-link bogus \
  --pcap 0 --pcap-file /dev/null
# Negative numbers: not "off", not 2^64 - 1.
sim_expect 2 '^--trace-flow: must not be negative, not -5' --trace-flow -5
sim_expect 2 '^--seed: must not be negative, not -1' --seed -1
sim_expect 2 '^--csv-flows: must not be negative, not -1' --csv-flows -1
# Each in range, together not: the config file's rule and message.
sim_expect 2 '^metaroce-sim: queue.ecn_kmin \(200000\) is above queue.ecn_kmax \(100000\)$' \
  --set queue.ecn_kmin=200000 --set queue.ecn_kmax=100000
# The baselines' own RED setting, checked as the user named it, with the prefix.
sim_expect 2 '^metaroce-sim: rc.ecn_kmin \(300000\) is above rc.ecn_kmax \(200000\)$' \
  --preset fattree16-perm --transport rocev2 --set rc.ecn_kmin=300000
sim_expect 2 '^metaroce-sim: --set wr_bytes: ' --set wr_bytes=4294967296
# The example scenario under rocev2 (PFC, a link down and up) runs to the end.
sim_expect 0 '' --config "$(dirname "$0")/../../docs/sim/examples/leafspine-mixed.toml" \
  --transport rocev2 --seed 1
# The smallest leaf-spine (2 leaves of 2 hosts, 1 spine), for the config
# files below.
small_topology='[topology]
kind = "leaf_spine"
leaves = 2
hosts_per_leaf = 2
spines = 1
host_rate_gbps = 100
fabric_rate_gbps = 100'
# A workload that adds no flow would run nothing and pass (exit 0, 0/0 flows).
cfg=$(mktemp -d)
for w in 'kind = "background"|bytes = "1KiB"|flows = 0|load = 0.5' \
  'kind = "incast"|bytes = "1KiB"|senders = 0' 'kind = "matrix"|file = "empty.txt"'; do
  : >"$cfg/empty.txt"
  printf '%s\n' "$small_topology" >"$cfg/t.toml"
  printf '[[workload]]\n%s\n' "$w" | tr '|' '\n' >>"$cfg/t.toml"
  sim_expect 2 '^metaroce-sim: .*t.toml:[0-9]+:1: workload \([a-z]+\): adds no flow$' \
    --config "$cfg/t.toml"
done
rm -rf "$cfg"
# A folder named as the config file or a traffic matrix opens and reads as
# empty: it was "missing key 'topology'" and "adds no flow".
cfg=$(mktemp -d)
mkdir "$cfg/m"
sim_expect 2 "^metaroce-sim: $cfg: cannot open \\(a folder\\)\$" --config "$cfg"
printf '[topology]\nkind = "fat_tree"\nk = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n[[workload]]\nkind = "matrix"\nfile = "m"\n' >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:8:8: workload.file: cannot open '$cfg/m' \\(a folder\\)\$" \
  --config "$cfg/t.toml"
rm -rf "$cfg"
# A fault naming a tier the fabric lacks ("agg" on a leaf-spine was taken as
# a spine) exits 2, naming the fault, the tier and the fabric's tiers.
cfg=$(mktemp -d)
printf '%s\n[[workload]]\nkind = "permutation"\nbytes = 4096\n[[fault]]\nkind = "link_down"\nlink = ["leaf 0", "agg 0"]\n' \
  "$small_topology" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:13:19: fault 0 \\(link_down\\): fault.link: \"agg 0\": no agg tier here: this fabric \\(leaf-spine 2x2, 1 spines\\) has host 0..3, leaf 0..1, spine 0..0\$" \
  --config "$cfg/t.toml"
rm -rf "$cfg"
# A flag of other transports would be ignored (the digest that of the run without it).
sim_expect 2 '^metaroce-sim: --fabric-ecn applies to rocev2 and irn, not metaroce$' --fabric-ecn
sim_expect 2 '^metaroce-sim: --no-dcqcn applies to rocev2 and irn, not spray-nocc$' \
  --transport spray-nocc --no-dcqcn
sim_expect 2 '^metaroce-sim: --cold applies to metaroce and spray-nocc, not irn$' --transport irn \
  --cold
# --json with a listing: a JSON array (it was ignored: text), not for
# --list-settings (refused, not ignored).
list=$("$sim" --list --json)
case $list in
'['*'"fattree128-perm2mb",'*'"leafspine8192-perm1mb"'*']') echo "ok:   --list --json: $(printf '%s' "$list" | wc -l) lines" ;;
*) echo "FAIL: --list --json printed: $list"; failures=$((failures + 1)) ;;
esac
list=$("$sim" --list-links --json --preset fattree16-perm)
case $list in
'['*'{"edge": 47, "a": "sw:15:3", "a_switch": "agg 7", "b": "sw:19:3", "b_switch": "core 3", "rate_gbps": 100, "delay_us": 1, "parallel": 0, "parallel_of": 1}'*']') echo "ok:   --list-links --json" ;;
*) echo "FAIL: --list-links --json printed: $list"; failures=$((failures + 1)) ;;
esac
sim_expect 2 '^metaroce-sim: --json applies to a run, --list and --list-links, not --list-settings$' \
  --list-settings --json
# A listing took a run's options and ignored them, exit 0: --csv wrote
# nothing, a bad --transport or --sample-us went unseen.
sim_expect 2 '^metaroce-sim: --csv applies to a run, not --list-links$' --list-links --csv never
sim_expect 2 '^metaroce-sim: --pcap applies to a run, not --list-links$' --list-links --pcap 0 \
  --csv never --sample-us 0
sim_expect 2 '^metaroce-sim: --trace-flow applies to a run, not --list-links$' --list-links \
  --trace-flow 99
sim_expect 2 '^metaroce-sim: --transport applies to a run, not --list$' --list --transport foo
sim_expect 2 '^metaroce-sim: --seed applies to a run, not --list$' --list --seed 3
sim_expect 2 '^metaroce-sim: --preset applies to a run, not --list-settings$' --list-settings \
  --preset fattree16-perm
sim_expect 2 '^metaroce-sim: --paths applies to a run, not --list$' --list --paths 4
sim_expect 2 '^metaroce-sim: --list and --list-links: give one$' --list --list-links
[ -e never ] && { echo "FAIL: a listing wrote --csv never"; failures=$((failures + 1)); }
# --list-links reads the scenario: the preset, the transport and the settings stay its own.
sim_expect 0 '' --list-links --preset incast8-256k --transport rocev2 --seed 2 --paths 4
# CLI11's own errors: its message, the tools' exit status for bad options.
sim_expect 2 'no-such-option' --no-such-option
sim_expect 2 'seed' --seed abc
sim_expect 2 '' --paths
sim_expect 0 '' --help
# --help names what a run without --preset, --transport or --seed runs, and
# --cold's transports (it said metaroce alone; spray-nocc takes it too).
help=$("$sim" --help)
# (CLI11 writes a default as TEXT=D or, in later versions, TEXT [D].)
for want in '--preset TEXT( \[|=)fattree16-perm' '--transport TEXT( \[|=)metaroce' \
  '--seed UINT:NON-NEGATIVE( \[|=)1[] ]' '--cold +metaroce, spray-nocc: ' \
  '--paths INT ' '--time-limit-ms FLOAT ' '--min-rto-us FLOAT '; do
  if printf '%s\n' "$help" | grep -Eq -- "$want"; then echo "ok:   --help: $want"; else
    echo "FAIL: --help lacks '$want'"; failures=$((failures + 1)); fi
done
# A report that cannot be written (a full disk) is a failed run, not exit 0.
full='^metaroce-sim: the report could not be written to stdout'
expect_full 2 "$full" "$sim" -q --no-timing --preset incast8-256k --time-limit-ms 5 --json
expect_full 2 "$full" "$sim" --list
# So is a --csv report.json that cannot be written (here a directory holds its name).
csv=$(mktemp -d)
mkdir "$csv/report.json"
sim_expect 2 "^metaroce-sim: cannot write $csv/report.json\$" --preset incast8-256k \
  --time-limit-ms 5 --csv "$csv"
rm -rf "$csv"
# An empty name (a script's unset variable) is refused, not taken as "not
# given": --config "" ran the default preset and exited 0.
for o in --config --preset --pcap --pcap-file --csv --watch-link --trace-file; do
  sim_expect 2 "^metaroce-sim: $o: an empty value" "$o" ""
done
# A fault at or after the time limit never acts: said, not silently dropped
# (here a shortened limit; the run itself goes on).
sim_expect 1 '^metaroce-sim: warning: fault 1 \(link_down, edge [0-9]+\) at 20 us is not before the time limit \(10 us\): it never acts$' \
  --preset fattree16-perm-linkdown --time-limit-ms 0.01
# So does a flow that starts at or after it (a matrix's start_us in us, the
# limit in ms): it never starts and the run fails, said once for all of them.
cfg=$(mktemp -d)
printf '0 1 4096 0\n2 3 4096 2000\n3 2 4096 1000\n' >"$cfg/late.txt"
cat >"$cfg/late.toml" <<EOF
time_limit_ms = 1
$small_topology
[[workload]]
kind = "matrix"
file = "late.txt"
EOF
sim_expect 1 '^metaroce-sim: warning: 2 flows start at or after the time limit \(1000 us\), the first flow 1 \(2 -> 3\) at 2000 us: they never start$' \
  --config "$cfg/late.toml"
printf '0 1 4096 0\n' >"$cfg/late.txt"
expect_quiet 0 "$sim" -q --no-timing --config "$cfg/late.toml"
rm -rf "$cfg"
# A setting of another transport runs (sweeps give one --set to all four)
# but is named: the run is the same without it.
sim_expect 0 "^metaroce-sim: warning: --set rc.g changes nothing in this run of metaroce: it acts only on rocev2 and irn with DCQCN \\(not with --no-dcqcn\\)$" \
  --preset incast8-256k --set rc.g=0.5
sim_expect 0 '^metaroce-sim: warning: --paths changes nothing in this run of irn: it acts only on metaroce and spray-nocc$' \
  --preset incast8-256k --transport irn --paths 2
# Idle beside other settings and flags, judged once all are applied.
sim_expect 0 '^metaroce-sim: warning: --set queue.pfc changes nothing in this run of rocev2: it acts only on metaroce and spray-nocc \(rocev2 always runs with PFC, irn never\)$' \
  --preset incast8-256k --transport rocev2 --set queue.pfc=0
sim_expect 0 '^metaroce-sim: warning: --set queue.pfc_xoff_bytes changes nothing in this run of metaroce: it acts only on runs with PFC' \
  --preset incast8-256k --set queue.pfc_xoff_bytes=50000
expect_quiet 0 "$sim" -q --no-timing --preset incast8-256k --set queue.pfc_xoff_bytes=50000 \
  --set queue.pfc=1
sim_expect 0 '^metaroce-sim: warning: --set rc.ecn_kmin changes nothing in this run of irn: it acts only on rocev2 and irn without --fabric-ecn$' \
  --preset incast8-256k --transport irn --fabric-ecn --set rc.ecn_kmin=1000
# A config file's key that is a --set key is judged the same way: its PFC
# thresholds without pfc = true, or reroute_us without a link fault, ran as
# if absent and nothing said so.
cfg=$(mktemp -d)
cat >"$cfg/idle.toml" <<EOF
time_limit_ms = 5
reroute_us = 50
$small_topology
[queue]
pfc_xoff_bytes = 100000
[[workload]]
kind = "permutation"
bytes = 40960
EOF
sim_expect 0 "^metaroce-sim: warning: queue.pfc_xoff_bytes in $cfg/idle.toml changes nothing in this run of metaroce: it acts only on runs with PFC" \
  --config "$cfg/idle.toml"
sim_expect 0 "^metaroce-sim: warning: reroute_us in $cfg/idle.toml changes nothing in this run of metaroce: it acts only on runs with a link_down or link_up fault\$" \
  --config "$cfg/idle.toml"
sed -i '/^reroute_us/d; s/^pfc_xoff_bytes/pfc = true\npfc_xoff_bytes/' "$cfg/idle.toml"
expect_quiet 0 "$sim" -q --no-timing --config "$cfg/idle.toml"
rm -rf "$cfg"
# --pcap without --pcap-file writes NAME-TRANSPORT.pcap in the current
# folder, a config file's name made safe: "rack/a" wrote into a folder
# "rack" that it created (and "/x/y" into /x).
cfg=$(mktemp -d)
cat >"$cfg/named.toml" <<EOF
name = "rack/a"
time_limit_ms = 0.05
$small_topology
[[workload]]
kind = "permutation"
bytes = 4096
EOF
here=$(pwd)
cd "$cfg" || exit 1
expect 0 ' -> rack_a-metaroce\.pcap$' "$sim" --no-timing --config named.toml --pcap 0
if [ ! -s rack_a-metaroce.pcap ] || [ -e rack ]; then
  echo "FAIL: --pcap 0 with the name rack/a wrote: $(find . -name '*.pcap')"
  failures=$((failures + 1))
fi
cd "$here" || exit 1
rm -rf "$cfg"
# A [queue] byte key has --set's range and message in a file too: a file
# took buffer_bytes up to 9e18, --set refused more than 1e12.
big='queue.buffer_bytes: 2e\+12 is not an integer in \[1, 1e\+12\]$'
sim_expect 2 "^metaroce-sim: --set $big" --set queue.buffer_bytes=2e12
cfg=$(mktemp -d)
printf '%s\n[queue]\nbuffer_bytes = "2000GB"\n[[workload]]\nkind = "permutation"\nbytes = 4096\n' \
  "$small_topology" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:9:16: $big" --config "$cfg/t.toml"
# A PFC threshold: -1 (derived) is taken and -2 refused with one message,
# whether in [queue] or on --set (a file refused -1, "must be >= 0").
neg='queue.pfc_xoff_bytes: -2 is not an integer in \[-1, 1e\+12\]$'
sim_expect 2 "^metaroce-sim: --set $neg" --set queue.pfc_xoff_bytes=-2
printf '%s\n[queue]\npfc = true\npfc_xoff_bytes = -2\n[[workload]]\nkind = "permutation"\nbytes = 4096\n' \
  "$small_topology" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:10:18: $neg" --config "$cfg/t.toml"
sed -i 's/^pfc_xoff_bytes = -2/pfc_xoff_bytes = -1/' "$cfg/t.toml"
expect_quiet 0 "$sim" -q --no-timing --config "$cfg/t.toml"
# An empty or blank name gave the report an empty first line: refused, as
# an option's empty value is (without the key the name is "config").
for n in '""' '" "'; do
  printf 'name = %s\n%s\n[[workload]]\nkind = "permutation"\nbytes = 4096\n' "$n" \
    "$small_topology" >"$cfg/t.toml"
  sim_expect 2 "^metaroce-sim: $cfg/t.toml:1:8: name: empty or blank; give the report a name, or leave the key out for \"config\"\$" \
    --config "$cfg/t.toml"
done
rm -rf "$cfg"
# --progress with -q: -q won and --progress was dropped without a word.
sim_expect 2 '^--progress excludes' --progress
# A workload's bytes past 9e18, as a plain number: --set's message (it ran).
cfg=$(mktemp -d)
printf '%s\n[[workload]]\nkind = "permutation"\nbytes = 9100000000000000000\n' \
  "$small_topology" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:10:9: workload.bytes: 9.1e\\+18 is not an integer in \\[1, 9e\\+18\\]\$" \
  --config "$cfg/t.toml"
rm -rf "$cfg"
# The engine's fields are judged by the engine's config_error(), with the
# --set to blame named: each value was within its type, the configuration
# is not one the engine runs as given (it would clamp).
sim_expect 2 '^metaroce-sim: --set recovery.rto_failures_to_retire: recovery.rto_failures_to_retire 300 is out of range 1..255 \(PATH-4\)$' \
  --set recovery.rto_failures_to_retire=300
# LOSS-7's RNR settings, --set and config file keys since stop 44.
sim_expect 2 '^metaroce-sim: --set recovery.rnr_retry_limit: recovery.rnr_retry_limit 65535 is out of range 0..65534 \(LOSS-7\)$' \
  --set recovery.rnr_retry_limit=65535
sim_expect 2 '^metaroce-sim: --set recovery.rnr_retry_us: recovery.rnr_retry_ns 0 is out of range 1..86400000000000 \(LOSS-7\)$' \
  --set recovery.rnr_retry_us=0
sim_expect 2 '^metaroce-sim: --set recovery.min_rto_us: recovery.min_rto_ns 500000 is above recovery.max_rto_ns 100000 \(LOSS-4\)$' \
  --set recovery.max_rto_us=100 --set recovery.min_rto_us=500
# (max_rto_us given, min_rto_us no longer raises it; the --set is the later.)
sim_expect 2 '^metaroce-sim: --set recovery.max_rto_us: recovery.min_rto_ns 500000 is above recovery.max_rto_ns 100000 \(LOSS-4\)$' \
  --set recovery.max_rto_us=100 --min-rto-us 500
sim_expect 2 '^metaroce-sim: --set recovery.peer_timeout_us: 1e\+13 is not a value in \[0, 1e\+12\]$' \
  --set recovery.peer_timeout_us=1e13
# A config file's [cc], [recovery] and [rc]: the --set keys of their names,
# refused with the file's line; a value changes the run as its --set does.
cfg=$(mktemp -d)
scenario="$small_topology
[[workload]]
kind = \"incast\"
senders = 3
bytes = \"256KiB\""
for section in 'cc|foo = 1' 'recovery|min_rto = 300' 'rc|gain = 0.5'; do
  name=${section%%|*}
  printf '%s\n[%s]\n%s\n' "$scenario" "$name" "${section#*|}" >"$cfg/t.toml"
  sim_expect 2 "^metaroce-sim: $cfg/t.toml:13:1: unknown key '$name\\.[a-z_]+' \\(metaroce-sim --list-settings shows the $name\\.\\* keys\\)\$" \
    --config "$cfg/t.toml"
done
printf '%s\n[cc]\ndctcp_g_shift = "4"\n' "$scenario" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:13:17: cc.dctcp_g_shift: expected a number\$" --config "$cfg/t.toml"
printf '%s\n[recovery]\nloss_window_packets = 70000\n' "$scenario" >"$cfg/t.toml"
sim_expect 2 "^metaroce-sim: $cfg/t.toml:13:23: recovery.loss_window_packets 70000 is out of range 1..65535 \\(PATH-5\\)\$" \
  --config "$cfg/t.toml"
digest() { "$sim" -q --no-timing --json --config "$cfg/t.toml" "$@" | sed -n 's/.*"digest": "\(.*\)".*/\1/p'; }
printf '%s\n' "$scenario" >"$cfg/t.toml"
plain=$(digest)
by_set=$(digest --set cc.target_queue_delay_us=2)
printf '%s\n[cc]\ntarget_queue_delay_us = 2\n' "$scenario" >"$cfg/t.toml"
by_file=$(digest)
if [ -n "$plain" ] && [ "$plain" != "$by_set" ] && [ "$by_set" = "$by_file" ]; then
  echo "ok:   [cc] target_queue_delay_us = 2: digest $by_file, as --set's, not $plain"
else
  echo "FAIL: digests: default '$plain', --set '$by_set', [cc] '$by_file'"
  failures=$((failures + 1))
fi
rm -rf "$cfg"
# Two outputs naming one file: each opened it "wb" on its own, the file a
# mix of both (tshark: corrupt), and the run exited 0. Refused before any
# file is written, however the two are spelled.
out=$(mktemp -d)
here=$(pwd)
cd "$out" || exit 1
sim_expect 2 "^metaroce-sim: --pcap-file 'col/x' and --trace-file 'col/x' are the same file\$" \
  --pcap 16 --pcap-file col/x --trace-flow 0 --trace-file col/x
sim_expect 2 "^metaroce-sim: --pcap-file 'col2/report.json' and --csv 'col2/report.json' are the same file\$" \
  --csv col2 --pcap 16 --pcap-file col2/report.json
sim_expect 2 "^metaroce-sim: --pcap-file '\\./col3/\\.\\./col3/fcts\\.csv' and --csv 'col3/fcts\\.csv' are the same file\$" \
  --csv col3 --pcap 16 --pcap-file ./col3/../col3/fcts.csv
sim_expect 2 "^metaroce-sim: --pcap-file '$out/t\\.csv' and --trace-file 't\\.csv' are the same file\$" \
  --pcap 16 --pcap-file "$out/t.csv" --trace-flow 1 --trace-file t.csv
# The defaults too: --trace-file named as the flow's default trace file.
sim_expect 2 "^metaroce-sim: --pcap-file 'fattree16-perm-metaroce-trace-flow2\\.csv' and --trace-file 'fattree16-perm-metaroce-trace-flow2\\.csv' are the same file\$" \
  --pcap 16 --pcap-file fattree16-perm-metaroce-trace-flow2.csv --trace-flow 2
left=$(find . -mindepth 1 | head -3)
if [ -n "$left" ]; then
  echo "FAIL: refused output options still wrote: $left"
  failures=$((failures + 1))
fi
expect_quiet 0 "$sim" -q --no-timing --csv col --pcap 16 --pcap-file col/x.pcap --trace-flow 0 \
  --trace-file col/trace.csv
# A bad --watch-link or --trace-flow was found after the capture and the
# time series were opened "wb": the previous run's pcap cut to its header,
# its CSV folder to headers beside its old fcts.csv, and exit 2. Every check
# comes before any file is opened: what was there is left as it was.
mkdir keep
cp col/x.pcap keep/x.pcap
cp col/throughput.csv col/queues.csv col/paths.csv col/fcts.csv col/report.json col/trace.csv keep/
for case in "--trace-flow 0 --watch-link bogus|link 'bogus': expected" \
  '--trace-flow 99|--trace-flow 99: the workload has 16 flows$' \
  '--trace-flow 0 --transport rocev2|--trace-flow needs a transport that runs the engine$'; do
  bad=${case%%|*} why=${case#*|}
  # shellcheck disable=SC2086 # $bad is two or four words
  sim_expect 2 "^metaroce-sim: $why" --csv col --pcap 16 --pcap-file col/x.pcap \
    --trace-file col/trace.csv $bad
  for f in keep/*; do
    if ! cmp -s "$f" "col/${f#keep/}"; then
      echo "FAIL: $bad: col/${f#keep/} changed ($(wc -c <"col/${f#keep/}") bytes)"
      failures=$((failures + 1))
    fi
  done
done
# Without --trace-file, the trace is named by preset and transport as --pcap's
# file is: a run of another preset keeps its own.
expect_quiet 0 "$sim" -q --no-timing --transport spray-nocc --trace-flow 1
if [ -s fattree16-perm-spray-nocc-trace-flow1.csv ] && [ ! -e trace-flow1.csv ]; then
  echo "ok:   the default trace file is fattree16-perm-spray-nocc-trace-flow1.csv"
else
  echo "FAIL: the default trace file is not named by preset and transport: $(ls)"
  failures=$((failures + 1))
fi
# A file that cannot be written is named with the tool's prefix, each one
# that failed: the message had no prefix, named the --csv folder and not its
# file, or no file for --trace-flow, and kept only the last of several.
sim_expect 2 '^metaroce-sim: write error in /dev/full$' --trace-flow 0 --trace-file /dev/full
sim_expect 2 '^metaroce-sim: write error in /dev/full$' --pcap 16 --pcap-file /dev/full
# 40 blocks (20 or 40 KiB, by the shell) cut paths.csv (about 100 KB), no other CSV file.
# shellcheck disable=SC2016 # $0 and $@ are the inner shell's
expect 2 '^metaroce-sim: write error in /dev/full; write error in fsz/paths\.csv$' \
  sh -c 'trap "" XFSZ; ulimit -f 40 && exec "$0" "$@"' "$sim" -q --no-timing --csv fsz \
  --pcap 16 --pcap-file /dev/full
# Nor may an output be a file the run reads: opened "wb", the config or the
# traffic matrix was emptied before the run had read it... or after.
printf '[topology]\nkind = "fat_tree"\nk = 4\nhost_rate_gbps = 100\nfabric_rate_gbps = 100\n[[workload]]\nkind = "matrix"\nfile = "fcts.csv"\n' >in.toml
printf '0 1 4096 0\n' >fcts.csv
sim_expect 2 "^metaroce-sim: --pcap-file '\\./in\\.toml' is --config 'in\\.toml', which the run reads\$" \
  --config in.toml --pcap host:0-up --pcap-file ./in.toml
sim_expect 2 "^metaroce-sim: --csv '\\./fcts\\.csv' is workload\\.file '\\./fcts\\.csv', which the run reads\$" \
  --config in.toml --csv .
sim_expect 2 "^metaroce-sim: --trace-file '$out/in\\.toml' is --config 'in\\.toml', which the run reads\$" \
  --config in.toml --trace-flow 0 --trace-file "$out/in.toml"
if [ "$(cat fcts.csv)" = "0 1 4096 0" ] && grep -q 'kind = "matrix"' in.toml; then
  echo "ok:   the config and the matrix an output named are left as they were"
else
  echo "FAIL: an output option emptied the run's input"
  failures=$((failures + 1))
fi
cd "$here" || exit 1
rm -rf "$out"
# --trace-flow is range-checked as given, 64 bits: 2^32 + 3 was cast to 32
# bits first and traced flow 3; 99999999999 was named 1215752191.
sim_expect 2 '^metaroce-sim: --trace-flow 4294967299: the workload has 16 flows$' \
  --trace-flow 4294967299 --trace-file /dev/null
sim_expect 2 '^metaroce-sim: --trace-flow 99999999999: the workload has 16 flows$' \
  --trace-flow 99999999999 --trace-file /dev/null
# A seed past 64 bits was saturated to 2^64 - 1 without a word, a
# --trace-flow past 2^63 - 1 to that (and named so in the refusal).
for v in 18446744073709551616 99999999999999999999999; do
  sim_expect 2 "^--seed: $v is out of range \\(at most 18446744073709551615\\)\$" --seed "$v"
done
sim_expect 2 '^--trace-flow: 99999999999999999999 is out of range \(at most 9223372036854775807\)$' \
  --trace-flow 99999999999999999999
sim_expect 0 '' --preset incast8-256k --time-limit-ms 1 --seed 18446744073709551615
# --set and the option of the same key: --set was applied after the named
# option whatever the order (--set time_limit_ms=0.01 --time-limit-ms 1000
# stopped at 10 us). Two values are refused, either order; one value runs.
sim_expect 2 '^metaroce-sim: --set time_limit_ms=0\.01 and --time-limit-ms 1000 set one key to two values: give one$' \
  --set time_limit_ms=0.01 --time-limit-ms 1000
sim_expect 2 '^metaroce-sim: --set num_paths=4 and --paths 8 set one key to two values: give one$' \
  --paths 8 --set num_paths=4
sim_expect 2 '^metaroce-sim: --set recovery\.min_rto_us=200 and --min-rto-us 100 set one key to two values: give one$' \
  --min-rto-us 100 --set recovery.min_rto_us=200
sim_expect 0 '' --preset incast8-256k --time-limit-ms 50 --set time_limit_ms=50 --paths 4 \
  --set num_paths=4.0
# --set's number is a whole decimal token, as a config file's: strtod took
# hex and a leading space but refused a trailing one.
for v in 0x10 ' 16' '16 ' +16 16x; do
  sim_expect 2 "^metaroce-sim: --set num_paths: '$(printf '%s' "$v" | sed 's/+/\\+/')' is not a number\$" \
    --set "num_paths=$v"
done
sim_expect 2 '^metaroce-sim: --set mtu: 1e400 is out of a double.s range$' --set mtu=1e400
# A window derived from a multiple of the fabric BDP past the engine's
# range is named as that multiple: 100 Tb/s links and 10 ms delays gave
# "cc.initial_cwnd_packets 244140630 is out of range 1..65535", a field no
# one had set.
cfg=$(mktemp -d)
cat >"$cfg/t.toml" <<EOF
[topology]
kind = "leaf_spine"
leaves = 2
hosts_per_leaf = 2
spines = 1
host_rate_gbps = 100000
fabric_rate_gbps = 100000
host_delay_us = 10000
fabric_delay_us = 10000
[[workload]]
kind = "permutation"
bytes = 4096
EOF
sim_expect 2 '^metaroce-sim: initial_window_bdp 1 times this fabric.s BDP of [0-9]+ packets is [0-9]+ packets, past the engine.s 65535 \(CC-1\): give --set initial_window_bdp=0\.000268 or less' \
  --config "$cfg/t.toml" --set inflight_cap_bdp=0
sim_expect 2 '^metaroce-sim: inflight_cap_bdp 1 times this fabric.s BDP of [0-9]+ packets plus 11 is [0-9]+ packets, past the engine.s 65535 \(CC-9\): give --set inflight_cap_bdp=0\.000268 or less' \
  --config "$cfg/t.toml"
sim_expect 0 '' --config "$cfg/t.toml" --set initial_window_bdp=0.000268 \
  --set inflight_cap_bdp=0.000268
rm -rf "$cfg"
# inflight_cap_packets alone can take the cap past the engine's range: it is
# refused at once above 65535, and named with the multiple below it.
sim_expect 2 '^metaroce-sim: --set inflight_cap_packets: 70000 is not an integer in \[0, 65535\]$' \
  --set inflight_cap_packets=70000
sim_expect 2 '^metaroce-sim: inflight_cap_bdp 1 times this fabric.s BDP of 43 packets plus 65500 is 65543 packets, past the engine.s 65535 \(CC-9\): give --set inflight_cap_bdp=0\.813 or less, or --set inflight_cap_packets=65492 or less \(or the same in a config file\)$' \
  --set inflight_cap_packets=65500
# Values in range still run (a small preset, a short limit).
sim_expect 0 '' --preset incast8-256k --paths 1 --min-rto-us 100 --time-limit-ms 50 \
  --set queue.ecn_kmin=100000 --set queue.ecn_kmax=100000
finish
