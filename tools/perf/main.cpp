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

#include "session.hpp"

using metaroce::perf::ClientArgs;
using metaroce::perf::Common;
using metaroce::perf::Op;

int main(int argc, char** argv) {
  CLI::App app{"metaroce-perf: MetaRoCE over UDP throughput / latency"};
  app.require_subcommand(1);
  Common common;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--mtu", common.mtu, "payload bytes per packet (both ends use the minimum)");
    sub->add_option("--paths", common.paths, "paths (entropy values) per connection, 1-32");
    sub->add_option("--entropy-count", common.entropy_count, "source ports in the entropy block");
    sub->add_option("--entropy-base", common.entropy_base, "first source port (default: port + 1)");
    sub->add_option("--peer-timeout-ms", common.peer_timeout_ms, "PATH-7 peer timeout");
    sub->add_flag("--no-gso", common.no_gso, "do not use UDP_SEGMENT");
    sub->add_flag(
        "--payload-crc", common.payload_crc,
        "ICRC over the payload too (default: headers; the UDP checksum covers the payload)");
    sub->add_flag("--no-gro", common.no_gro, "do not use UDP_GRO");
    sub->add_flag("--no-cc", common.no_cc, "disable congestion control (fixed window per path)");
    sub->add_flag("--busy", common.busy,
                  "busy-poll: never sleep on the epoll fd (best with a core per process)");
    sub->add_option("--spin-us", common.spin_us,
                    "without --busy: poll this long after the last activity before sleeping");
    sub->add_option("--cpu", common.cpu, "pin the process to this CPU");
    sub->add_option("--min-rto-us", common.min_rto_us,
                    "LOSS-4 min_rto in microseconds (the sending end's setting counts)");
    sub->add_option("--target-delay-us", common.target_delay_us,
                    "CC-5 target queue delay in microseconds (the sending end's setting counts)");
    sub->add_option("--explore-ms", common.explore_ms,
                    "PATH-8: move the slowest path to a new entropy this often, in ms (0: never; "
                    "default 20; the sending end's setting counts)")
        ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
    sub->add_option("--ack-every", common.ack_every,
                    "ACK after this many data packets (ACK-1; the receiving end's setting counts)");
  };
  auto* server = app.add_subcommand("server", "wait for clients");
  std::string server_addr = "0.0.0.0:4792";
  bool once = false;
  server->add_option("addr", server_addr, "address to listen on, ip:port or [ip6]:port");
  server->add_flag("--once", once, "exit after one test");
  add_common(server);

  auto* client = app.add_subcommand("client", "run a test against a server");
  ClientArgs ca;
  std::string op = "write";
  client->add_option("addr", ca.addr, "server address, ip:port or [ip6]:port")->required();
  client->add_option("--op", op, "write | read | send")
      ->check(CLI::IsMember({"write", "read", "send"}));
  client->add_option("--size", ca.tp.size, "message size in bytes")
      ->check(CLI::Range(1u, metaroce::perf::kMaxSize));
  auto* qd = client
                 ->add_option("--qd", ca.tp.qd,
                              "messages outstanding (default 64, fewer for messages over 4 MiB: "
                              "together at most 256 MiB)")
                 ->check(CLI::Range(1u, metaroce::perf::kMaxQd));
  auto* dur = client->add_option("--duration", ca.duration, "seconds to run");
  client->add_option("--iters", ca.iters, "messages to send (instead of --duration)")
      ->excludes(dur);
  client
      ->add_option("--interval", ca.interval,
                   "seconds between progress lines (default 1), for any run longer than that")
      ->check(CLI::Validator(
          [](std::string& v) {
            double d = 0;
            try {
              d = std::stod(v);
            } catch (const std::exception&) {
              d = 0;
            }
            return d > 0 && std::isfinite(d) ? std::string()
                                             : "must be a positive number of seconds, not " + v;
          },
          "SECONDS>0"));
  client->add_flag("--bidir", ca.tp.bidir, "the server sends the same load back at the same time");
  client->add_flag("--verify", ca.tp.verify,
                   "fill sources with a pattern and check every received byte");
  client->add_flag("--json", ca.json,
                   "print one JSON object; its retransmitted_packets counts the packets that the "
                   "end sending the data retransmitted: the client's for write and send, the "
                   "server's for read (client_retransmitted_packets: the client's own); its paths "
                   "are those that carried the data (paths_of): the client's for write and "
                   "send, the server's for read (client_paths: the client's own)");
  add_common(client);
  CLI11_PARSE(app, argc, argv);
  if (common.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(common.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      std::fprintf(stderr, "metaroce-perf: cannot pin to CPU %d: %s\n", common.cpu,
                   std::strerror(errno));
  }
  // The first signal stops posting and drains; a second one gives up.
  std::signal(SIGINT, [](int) { metaroce::perf::g_stop = metaroce::perf::g_stop + 1; });
  std::signal(SIGTERM, [](int) { metaroce::perf::g_stop = metaroce::perf::g_stop + 1; });
  if (server->parsed()) return metaroce::perf::run_server(server_addr, common, once);
  ca.tp.op = op == "read" ? Op::kRead : op == "send" ? Op::kSend : Op::kWrite;
  if (qd->count() == 0)
    ca.tp.qd = static_cast<uint32_t>(
        std::clamp<uint64_t>((uint64_t{256} << 20) / ca.tp.size, 1, ca.tp.qd));
  return metaroce::perf::run_client(ca, common);
}
