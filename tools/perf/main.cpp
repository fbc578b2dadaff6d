// metaroce-perf: throughput and latency over the UDP driver, the counterpart
// of ib_write_bw / ib_read_bw / ib_send_lat and iperf3.
//
//   metaroce-perf server [ADDR]              (default 0.0.0.0:4792)
//   metaroce-perf client ADDR --op write --size 65536 --duration 10 --verify
//
// Control exchange (control.hpp), over the engine's own SEND/RECV on the test
// connection:
//   client -> server  Hello    {op, size, qd, verify, bidir, client buffer addr/rkey/len,
//                               whether to send PathReports (read)}
//   server -> client  HelloAck {server buffer addr/rkey/len, how many PathReports will follow
//                               the Result, or why the test is refused}
//   ... the test: WRITE (WRITE_IMM with imm = sequence number when verifying),
//       READ, or SEND; with --bidir the server runs the same load back ...
//   client -> server  Done     {messages, bytes}
//   server -> client  Result   {verify errors, messages and bytes received, reverse-direction
//   figures}
//   server -> client  PathReport x N (if asked) {one of the server's path slots' figures}
// Verification (pattern.hpp): the source of message `seq` holds pattern(seq)
// (READ: the server's slot s holds pattern(s)); the receiving side checks
// every byte.
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "common/cli_parse.hpp"
#include "common/number_range.hpp"
#include "common/stdout_status.hpp"
#include "session.hpp"

using metaroce::perf::ClientArgs;
using metaroce::perf::Common;
using metaroce::perf::Op;

int main(int argc, char** argv) {
  // A reader that left early (`... --json | head -c 10`, a table or progress
  // lines into `head -1`) killed the process with SIGPIPE, exit 141, on its
  // next write. Ignored, the write fails with EPIPE instead: the client's
  // report counts as lost (stdout_status, exit 2, as documented), a failed
  // progress line is dropped, and a server serves on without its log.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"metaroce-perf: MetaRoCE over UDP throughput / latency"};
  app.require_subcommand(1);
  Common common;
  // The defaults the help names are the UDP driver's (udp::Options), which
  // differ from the engine's: the help said 1000 and 50, the engine's.
  const metaroce::udp::Options driver_defaults;
  const std::string default_min_rto_us =
      std::to_string(driver_defaults.engine.recovery.min_rto_ns / metaroce::kMicrosecond);
  const std::string default_target_delay_us =
      std::to_string(driver_defaults.engine.cc.target_queue_delay_ns / metaroce::kMicrosecond);
  // ENC-6 / TRIM-1: the tool leaves the trimmed code point at its default, the top DSCP, so
  // the DSCPs a user may give are the ones below it. The TRIM-1 check runs first, so that 63
  // is refused with its reason rather than as out of range.
  static_assert(metaroce::wire::kDefaultTrimmedDscp == metaroce::kMaxDscp);
  const CLI::Validator not_trimmed_dscp(
      [](std::string& input) -> std::string {
        if (input != std::to_string(metaroce::wire::kDefaultTrimmedDscp)) return {};
        return "must not be " + input + ", the DSCP a trimming switch gives a cut packet (TRIM-1)";
      },
      "");
  const CLI::Validator dscp_range =
      metaroce::tools::number_in_range(0u, uint32_t{metaroce::kMaxDscp} - 1u);
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--mtu", common.mtu,
                    "payload bytes per packet, " + std::to_string(metaroce::kMinMtu) + "-" +
                        std::to_string(metaroce::kMaxMtu) +
                        " (default 4096; both ends use the minimum)")
        ->check(metaroce::tools::number_in_range(uint32_t{metaroce::kMinMtu},
                                                 uint32_t{metaroce::kMaxMtu}));
    sub->add_option("--paths", common.paths,
                    "paths (entropy values) per connection, 1-" +
                        std::to_string(metaroce::kMaxPaths) +
                        " (default 8), for what this end sends: a read's data and a --bidir "
                        "reverse load travel on the server's own paths (its --paths)")
        ->check(metaroce::tools::number_in_range(1u, uint32_t{metaroce::kMaxPaths}));
    sub->add_option("--entropy-count", common.entropy_count,
                    "source ports in the entropy block, at least --paths, at most 65535 "
                    "(default 64)")
        ->check(metaroce::tools::number_in_range(1u, 65535u));
    sub->add_option("--entropy-base", common.entropy_base,
                    "first source port, 1-65535 (default: port + 1)")
        ->check(metaroce::tools::number_in_range(1, 65535));
    sub->add_option("--peer-timeout-ms", common.peer_timeout_ms,
                    "PATH-7 peer timeout in ms, " +
                        std::to_string(metaroce::perf::kMinPeerTimeoutMs) + "-" +
                        std::to_string(metaroce::perf::kMaxPeerTimeoutMs) + " (default 2000)")
        ->check(metaroce::tools::number_in_range(metaroce::perf::kMinPeerTimeoutMs,
                                                 metaroce::perf::kMaxPeerTimeoutMs));
    // Control messages are SENDs too, into receives posted before they can
    // be sent (README.md); a low limit can fail a test's own SENDs where the
    // peer is slow to post a receive again (kRnrRetryExceeded, exit 1).
    sub->add_option("--rnr-retry-limit", common.rnr_retry_limit,
                    "LOSS-7 RNR retries of one refused message before it fails "
                    "kRnrRetryExceeded, 0-" +
                        std::to_string(metaroce::perf::kMaxRnrRetryLimit) +
                        " (default 0: unlimited, the engine's; the sending end's setting counts)")
        ->check(metaroce::tools::number_in_range(0u, metaroce::perf::kMaxRnrRetryLimit));
    sub->add_flag("--no-gso", common.no_gso, "do not use UDP_SEGMENT");
    sub->add_flag(
        "--payload-crc", common.payload_crc,
        "ICRC over the payload too (default: headers; the UDP checksum covers the payload)");
    sub->add_flag("--no-gro", common.no_gro, "do not use UDP_GRO");
    sub->add_flag("--no-cc", common.no_cc, "disable congestion control (fixed window per path)");
    sub->add_flag("--busy", common.busy,
                  "busy-poll: never sleep on the epoll fd (best with a core per process)");
    sub->add_option("--spin-us", common.spin_us,
                    "without --busy: poll this long after the last activity before sleeping, "
                    "0-" +
                        std::to_string(metaroce::perf::kMaxSpinUs) + " us (default 50)")
        ->check(metaroce::tools::number_in_range(0u, metaroce::perf::kMaxSpinUs));
    sub->add_option("--cpu", common.cpu,
                    "pin the process to this CPU, 0-" + std::to_string(CPU_SETSIZE - 1))
        ->check(metaroce::tools::number_in_range(0, CPU_SETSIZE - 1));
    sub->add_option("--min-rto-us", common.min_rto_us,
                    "LOSS-4 min_rto in microseconds, 1-" +
                        std::to_string(metaroce::perf::kMaxMinRtoUs) + " (default " +
                        default_min_rto_us +
                        ", the UDP driver's; the sending end's setting counts; the endpoint "
                        "refuses at open one not above the ACK delay, 10 us, or not below "
                        "--peer-timeout-ms)")
        ->check(metaroce::tools::number_in_range(1u, metaroce::perf::kMaxMinRtoUs));
    sub->add_option("--target-delay-us", common.target_delay_us,
                    "CC-5 target queue delay in microseconds, 1-" +
                        std::to_string(metaroce::perf::kMaxTargetDelayUs) + " (default " +
                        default_target_delay_us +
                        ", the UDP driver's; the sending end's setting counts)")
        ->check(metaroce::tools::number_in_range(1u, metaroce::perf::kMaxTargetDelayUs));
    sub->add_option("--explore-ms", common.explore_ms,
                    "PATH-8: move the slowest path to a new entropy this often, in ms, "
                    "0-3600000 (0: never; default 20; the sending end's setting counts)")
        ->check(metaroce::tools::number_in_range(int64_t{0}, int64_t{3'600'000}));
    sub->add_option("--control-dscp", common.control_dscp,
                    "IP DSCP of this end's ACKs and NAKs, 0-62 (ENC-6, default 48: a class "
                    "switches can serve first; 63 marks a trimmed packet, TRIM-1)")
        ->check(not_trimmed_dscp)
        ->check(dscp_range);
    sub->add_option("--data-dscp", common.data_dscp,
                    "IP DSCP of this end's other packets, 0-62 (ENC-6, default 0)")
        ->check(not_trimmed_dscp)
        ->check(dscp_range);
    sub->add_option("--ack-every", common.ack_every,
                    "ACK after this many data packets, 1-" +
                        std::to_string(metaroce::perf::kMaxAckEvery) +
                        " (ACK-1, default 2; the receiving end's setting counts)")
        ->check(metaroce::tools::number_in_range(1u, metaroce::perf::kMaxAckEvery));
  };
  // An address: ip:port, [ip6]:port, a host name. A bare number ("9999")
  // would reach getaddrinfo, which reads it as the IPv4 address 0.0.39.15:
  // refused, as it is most likely a port without its host.
  const CLI::Validator address(
      [](std::string& v) -> std::string {
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return {};
        return "'" + v + "' is a bare number, not an address; for a port, write HOST:" + v +
               " (e.g. 0.0.0.0:" + v + " or 127.0.0.1:" + v + ")";
      },
      "ADDR");
  auto* server = app.add_subcommand("server", "wait for clients");
  std::string server_addr = "0.0.0.0:4792";
  bool once = false;
  server->add_option("addr", server_addr, "address to listen on, ip:port or [ip6]:port")
      ->check(address);
  server->add_flag("--once", once, "exit after one test");
  add_common(server);

  auto* client = app.add_subcommand("client", "run a test against a server");
  ClientArgs ca;
  std::string op = "write";
  client->add_option("addr", ca.addr, "server address, ip:port or [ip6]:port")
      ->required()
      ->check(address);
  client
      ->add_option("--bind", ca.bind,
                   "local address to open on, ip:port or [ip6]:port (default: 0.0.0.0:0 or "
                   "[::]:0, a port the kernel chooses)")
      ->check(address);
  client->add_option("--op", op, "write | read | send")
      ->check(CLI::IsMember({"write", "read", "send"}));
  client->add_option("--size", ca.tp.size, "message size in bytes")
      ->check(metaroce::tools::number_in_range(1u, metaroce::perf::kMaxSize));
  auto* qd = client
                 ->add_option("--qd", ca.tp.qd,
                              "messages outstanding (default 64, fewer for messages over 4 MiB: "
                              "together at most 256 MiB)")
                 ->check(metaroce::tools::number_in_range(1u, metaroce::perf::kMaxQd));
  // A bound far beyond any run, that also keeps "-1" (which CLI11 takes as
  // 2^64 - 1 for an unsigned option) out.
  constexpr uint64_t kMaxIters = 1'000'000'000'000'000;
  // --duration and --interval: a number of seconds from kMinSeconds to kMaxSeconds.
  const CLI::Validator seconds(
      [](std::string& v) {
        size_t used = 0;
        double d = std::nan("");
        try {
          d = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size()) return "must be a number of seconds, not " + v;
        return metaroce::perf::seconds_problem(d);
      },
      "SECONDS");
  const std::string up_to =
      " (0.001-" + std::to_string(static_cast<long>(metaroce::perf::kMaxSeconds)) + ")";
  auto* dur = client->add_option("--duration", ca.duration, "seconds to run (default 5)" + up_to)
                  ->check(seconds);
  client
      ->add_option(
          "--iters", ca.iters,
          "messages to send, exactly, 1-" + std::to_string(kMaxIters) + " (instead of --duration)")
      ->check(metaroce::tools::number_in_range(uint64_t{1}, kMaxIters))
      ->excludes(dur);
  client
      ->add_option(
          "--interval", ca.interval,
          "seconds between progress lines (default 1), for any run longer than that" + up_to)
      ->check(seconds);
  client
      ->add_option("--connect-timeout-ms", ca.connect_timeout_ms,
                   "how long to wait for the server to answer the connection, in ms, " +
                       std::to_string(metaroce::perf::kMinConnectTimeoutMs) + "-" +
                       std::to_string(metaroce::perf::kMaxConnectTimeoutMs) + " (default " +
                       std::to_string(metaroce::perf::kDefaultConnectTimeoutMs) +
                       "; a request every 10 ms)")
      ->check(metaroce::tools::number_in_range(metaroce::perf::kMinConnectTimeoutMs,
                                               metaroce::perf::kMaxConnectTimeoutMs));
  client->add_flag("--bidir", ca.tp.bidir, "the server sends the same load back at the same time");
  client->add_flag("--verify", ca.tp.verify,
                   "fill sources with a pattern and check every received byte");
  client->add_flag(
      "--json", ca.json,
      "print one JSON object; its retransmitted_packets counts the packets that the "
      "end sending the data retransmitted: the client's for write and send, the "
      "server's for read (client_retransmitted_packets: the client's own); its paths "
      "are those that carried the data (paths_of): the client's for write and "
      "send, the server's for read (client_paths: the client's own); lat_us are nearest-rank "
      "percentiles of up to 4,194,304 round trips sampled uniformly over the run");
  add_common(client);
  // A bad command line (an option out of range among them) exits 2, as it
  // does from every other tool (it was 1, which scripts took for a test that
  // could not reach its server).
  try {
    app.parse(argc, argv);
    if (common.entropy_count < common.paths)
      throw CLI::ValidationError("--entropy-count",
                                 "must be at least --paths (" + std::to_string(common.paths) +
                                     "): each path needs a source port of its own, not " +
                                     std::to_string(common.entropy_count));
    // The block is entropy_base .. entropy_base + entropy_count - 1, all of
    // them ports (without --entropy-base the endpoint checks it at open).
    if (common.entropy_base != 0 &&
        uint32_t{common.entropy_base} + common.entropy_count > uint32_t{65536})
      throw CLI::ValidationError(
          "--entropy-base", std::to_string(common.entropy_base) + " with --entropy-count " +
                                std::to_string(common.entropy_count) + " ends at port " +
                                std::to_string(common.entropy_base + common.entropy_count - 1) +
                                ": the last port, base + count - 1, must be at most 65535");
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : metaroce::tools::kExitBadOptions;
  }
  if (common.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(common.cpu, &set);
    // Refused, as an option out of range is: run unpinned, the measurement
    // would not be the one asked for (it used to warn and run on).
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      const int e = errno;
      cpu_set_t allowed;
      CPU_ZERO(&allowed);
      (void)sched_getaffinity(0, sizeof(allowed), &allowed);
      std::fprintf(stderr,
                   "metaroce-perf: cannot pin to CPU %d: %s (this process may run on %d CPUs; "
                   "taskset -pc $$ in its shell lists them)\n",
                   common.cpu, std::strerror(e), CPU_COUNT(&allowed));
      return metaroce::tools::kExitBadOptions;
    }
  }
  // The first signal stops posting and drains; a second one gives up.
  std::signal(SIGINT, [](int) { metaroce::perf::g_stop = metaroce::perf::g_stop + 1; });
  std::signal(SIGTERM, [](int) { metaroce::perf::g_stop = metaroce::perf::g_stop + 1; });
  if (server->parsed()) return metaroce::perf::run_server(server_addr, common, once);
  ca.tp.op = op == "read" ? Op::kRead : op == "send" ? Op::kSend : Op::kWrite;
  if (qd->count() == 0)
    ca.tp.qd = static_cast<uint32_t>(
        std::clamp<uint64_t>((uint64_t{256} << 20) / ca.tp.size, 1, ca.tp.qd));
  // The test ran, but its report is lost.
  return metaroce::tools::stdout_status(metaroce::perf::run_client(ca, common),
                                        "metaroce-perf client", metaroce::perf::kExitNothingRan);
}
