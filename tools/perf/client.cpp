// metaroce-perf client: connects, asks the server for a test (Hello), keeps
// qd messages outstanding for --duration or --iters, then collects the
// server's result and prints the report (a table, or --json).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "session.hpp"
#include "verdict.hpp"

namespace metaroce::perf {

using namespace std::chrono_literals;
using udp::Error;
using udp::UdpEndpoint;

namespace {

nlohmann::json path_json(const PathReport& p) {
  return {{"slot", p.slot},
          {"entropy", p.entropy},
          {"state", p.state == 0 ? "active" : "probing"},
          {"packets", p.packets},
          {"bytes", p.bytes},
          {"retransmissions", p.retransmissions},
          {"ce_marks", p.ce_marks},
          {"srtt_us", dbl(p.srtt_ns) / 1000.0},
          {"min_rtt_us", dbl(p.min_rtt_ns) / 1000.0},
          {"losses", p.losses},
          {"timeouts", p.timeouts},
          {"retirements", p.retirements},
          {"explorations", p.explorations},
          {"probes", p.probes},
          {"cwnd_bytes", p.cwnd_bytes},
          {"retired", p.retirements > 0}};
}

// whose: a title line, or none (nullptr).
void print_paths(const char* whose, const std::vector<PathReport>& paths) {
  if (whose != nullptr) std::printf("\n  %s", whose);
  std::printf(
      "\n  path entropy  state    packets          bytes   retx   CE marks  srtt(us)  losses  "
      "moved  retired\n");
  for (const PathReport& p : paths)
    std::printf("  %4u %7u  %-7s %9" PRIu64 " %14" PRIu64 " %6" PRIu64 " %10" PRIu64
                " %9.1f %7" PRIu64 " %6" PRIu64 "  %s\n",
                p.slot, p.entropy, p.state == 0 ? "active" : "probing", p.packets, p.bytes,
                p.retransmissions, p.ce_marks, dbl(p.srtt_ns) / 1000.0, p.losses, p.explorations,
                p.retirements > 0 ? ("yes (" + std::to_string(p.retirements) + ")").c_str() : "no");
}

// Waits (a short while) for the n PathReports that the server's HelloAck
// announced, which follow its Result.
void wait_path_reports(UdpEndpoint& ep, Sink& sink, Generator& gen, size_t n) {
  const auto deadline = Clock::now() + 2s;
  while (sink.path_reports.size() < n && Clock::now() < deadline && g_stop < kClientGivesUpAt) {
    ep.progress();
    Completion cs[64];
    const size_t got = ep.poll_completions(cs, 64);
    for (size_t i = 0; i < got; ++i)
      if (!sink.on_completion(cs[i])) (void)gen.on_completion(cs[i]);
    if (got == 0) ep.wait(1ms);
  }
}

// A test that could not start (no server, a refusal, a bad address): why, on
// stderr and, with --json, as the one JSON object on stdout (that used to
// stay empty, while a run that failed later printed its object with
// "error"). Nothing ran: kExitNothingRan.
int not_started(const ClientArgs& a, const std::string& why) {
  std::fprintf(stderr, "metaroce-perf client: %s\n", why.c_str());
  if (a.json) {
    nlohmann::json j;
    j["server"] = a.addr;
    j["op"] = op_name(a.tp.op);
    j["error"] = why;
    std::printf("%s\n", j.dump().c_str());
  }
  return kExitNothingRan;
}

}  // namespace

int run_client(const ClientArgs& a, const Common& common) {
  // main.cpp checks them too; callers of run_client may not have.
  for (const auto& [name, secs] : {std::pair{"--duration", a.iters == 0 ? a.duration : 1.0},
                                   std::pair{"--interval", a.interval}})
    if (const std::string why = seconds_problem(secs); !why.empty()) {
      return not_started(a, std::string(name) + " " + why);
    }
  if (a.connect_timeout_ms < kMinConnectTimeoutMs || a.connect_timeout_ms > kMaxConnectTimeoutMs)
    return not_started(a, "--connect-timeout-ms " + std::to_string(a.connect_timeout_ms) +
                              " is outside " + std::to_string(kMinConnectTimeoutMs) + "-" +
                              std::to_string(kMaxConnectTimeoutMs));
  Ctrl hello;
  hello.type = MsgType::kHello;
  hello.op = static_cast<uint32_t>(a.tp.op);
  hello.size = a.tp.size;
  hello.qd = a.tp.qd;
  hello.verify = a.tp.verify ? 1 : 0;
  hello.bidir = a.tp.bidir ? 1 : 0;
  // A read's data, and the reverse load of a write or send with --bidir,
  // travel on the server's paths: ask for their figures.
  const bool read = a.tp.op == Op::kRead;
  const bool ask_reports = read || a.tp.bidir;
  hello.path_reports = ask_reports ? 1 : 0;
  // The server's own check, before this end allocates the same buffers.
  if (const Refusal r = check_hello(hello); r != Refusal::kNone) {
    // Which depth would do, so that the user need not work out the rings'
    // sizes (the refusal alone named no number).
    std::string hint;
    if (r == Refusal::kTooLarge)
      if (const uint32_t fits = largest_qd(a.tp.op, a.tp.size, a.tp.bidir); fits != 0)
        hint = ": --op " + std::string(op_name(a.tp.op)) + " --size " + std::to_string(a.tp.size) +
               (a.tp.bidir ? " --bidir" : "") + " takes --qd " + std::to_string(fits) +
               " at most, not " + std::to_string(a.tp.qd);
    return not_started(a, refusal_text(r) + hint);
  }
  Error err;
  // The peer's address first, then a local socket of its family: a host
  // name that resolves only to IPv6 needs [::]:0 (the family used to be
  // guessed from the address's text, and such a name got 0.0.0.0:0).
  std::string local, peer, why;
  if (!client_local_address(a.addr, local, peer, why)) {
    return not_started(a, a.addr + ": " + why);
  }
  if (!a.bind.empty()) {
    // An endpoint accepts its own connection: a client bound to the server's
    // address tested against itself, and said after 5 s that the server sent
    // no HelloAck, "(connection established)".
    PeerAddr bound;
    // (The non-throwing forms: one that does not parse is open()'s to refuse.)
    if (!udp::parse_address_checked(a.bind, 4792, bound) &&
        udp::format_address_text(bound).view() == peer)
      return not_started(a, "--bind " + a.bind + " is the server's address " + peer +
                                ": the client would connect to itself; bind another port, or "
                                "leave --bind out");
    local = a.bind;
  }
  udp::Options options = make_options(common);
  options.engine.connect_attempts =
      connect_attempts_for(a.connect_timeout_ms, options.engine.connect_retry_ns);
  auto ep = UdpEndpoint::open(local, options, err);
  if (!ep) return not_started(a, err.message);
  // Every buffer of this end (those check_hello accepted) before it
  // connects: the server waits only a while for the Hello, and for anything
  // from the client once it has answered. The ring holds data-sized buffers
  // only where the server's SENDs arrive (send with --bidir), else control
  // messages (the server's HelloAck, Result and PathReports) and WRITE_IMM
  // notices.
  const Buffers plan = plan_buffers(Side::kClient, a.tp.op, a.tp.size, a.tp.qd, a.tp.bidir);
  Sink sink;
  Generator gen;
  // With --bidir the memory the server WRITEs to or READs from; for a send,
  // whose reverse load takes receives, a token region: an older server takes
  // a Hello without one as no --bidir.
  const bool exposed = plan.exposed != 0;
  if (!sink.prepare(*ep, a.tp, plan.ring) ||
      (a.tp.bidir &&
       !sink.expose(exposed ? a.tp.size : 8, exposed ? a.tp.qd : 1, exposed && read)) ||
      !gen.prepare(*ep, a.tp)) {
    return not_started(a, "cannot register buffers");
  }
  ConnId conn;
  // connect() sends requests for the whole timeout (one connection's worth,
  // the engine's budget sized to it above).
  err = ep->connect(peer, std::chrono::milliseconds(a.connect_timeout_ms), conn);
  if (err) return not_started(a, connect_error_text(err, a.connect_timeout_ms));
  if ((err = sink.post_ring(conn))) {
    return not_started(a, "cannot post receives: " + err.message);
  }
  if (a.tp.bidir) {
    hello.addr = sink.mem_mr.addr;
    hello.rkey = sink.mem_mr.rkey;
    hello.len = sink.mem_mr.length;
  }
  CtrlOut hello_out;
  if ((err = send_ctrl(*ep, conn, hello, hello_out, 1))) return not_started(a, err.message);
  // The server allocates its buffers before it answers: 4 s per GiB of them
  // besides the 5 s, for a loaded host.
  const Buffers server = plan_buffers(Side::kServer, a.tp.op, a.tp.size, a.tp.qd, a.tp.bidir);
  const auto ack_wait =
      5000ms +
      std::chrono::milliseconds((server.ring.bytes() + server.exposed + server.generator) >> 18);
  Ctrl ack;
  // No silence limit: a server allocating GiB answers nothing meanwhile (the
  // Hello's own acknowledgement came first), and the wait allows for that.
  HelloOutcome hello_end;
  hello_end.waited = wait_ctrl(*ep, sink, nullptr, ack, ack_wait, kClientGivesUpAt, 0ms,
                               &hello_end.why, &hello_end.end);
  if (!hello_end.waited || ack.type != MsgType::kHelloAck) {
    hello_end.got = ack;
    hello_end.conn_state = conn_state_text(*ep, conn);
    // Whatever else the ring took before the HelloAck: a metaroce-perf
    // server sends nothing else first.
    hello_end.stray = sink.next_seq;
    hello_end.stray_bytes = sink.bytes;
    return not_started(a, hello_failure_text(a.addr, peer_and_conn(*ep, conn), hello_end));
  }
  if (ack.refusal != 0) {
    return not_started(a, "server " + a.addr + " refused the test: " +
                              refusal_text(static_cast<Refusal>(ack.refusal), ack.busy_with));
  }
  gen.start(conn, ack.addr, ack.rkey);

  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.duration));
  const auto interval =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.interval));
  auto next_report = t0 + interval;
  const int stamp_decimals = progress_decimals(a.interval);
  auto last_report = t0;
  uint64_t last_bytes = 0;
  // With --bidir the reverse load's payload bytes so far, as this end's
  // connection counts them: received for a write's or send's (the server's
  // WRITEs arrive without a completion here unless --verify makes them
  // WRITE_IMMs), sent for a read's (this end answers the server's READs).
  const auto reverse_bytes = [read](const ConnStats& s) {
    return read ? s.data_bytes_sent : s.data_bytes_received;
  };
  uint64_t last_reverse = 0;
  // The connection's counters and its paths'. The engine keeps both when the
  // connection ends (a server's DISCONNECT ends it before the failed
  // completion that says so is polled), so the last taken are final; only a
  // connection the engine forgot (past its 64 last closed) keeps those of
  // the last progress line.
  ConnStats cst{};
  std::vector<PathStats> client_stats;
  auto snapshot_at = t0;
  const auto snapshot = [&](Clock::time_point now) {
    if (!ep->conn_stats(conn, cst)) return false;
    client_stats = ep->path_stats(conn);
    snapshot_at = now;
    return true;
  };
  (void)snapshot(t0);
  bool failed = false;
  Idler idler = common.idler();
  // Outstanding requests normally finish within a few RTTs of the last post;
  // a peer that stopped answering must not keep the client forever, and a
  // second Ctrl-C (or SIGTERM) ends it at once.
  constexpr auto kDrainLimit = std::chrono::seconds(10);
  std::optional<Clock::time_point> drain_since;
  // A signal ended the posting before --duration or --iters did: the report
  // says so (a cut run read as a whole one, exit 0 either way).
  bool stopped_by_signal = false;
  for (;;) {
    const auto now = Clock::now();
    // A timed run posts its first message whatever the clock says: a run
    // preempted past its end before the first round would report nothing.
    const bool due = a.iters != 0 ? gen.posted < a.iters : now < end || gen.posted == 0;
    if (g_stop && due && !drain_since) stopped_by_signal = true;
    const bool may_post = !g_stop && due;
    const uint64_t posted = gen.posted;
    // --iters N posts exactly N messages, not the whole depth past the last.
    const uint64_t upto = !may_post ? 0 : a.iters != 0 ? a.iters : Generator::kNoLimit;
    if (!gen.pump(upto)) {
      failed = true;
      break;
    }
    if (!may_post && gen.completed >= gen.posted) break;
    if (!may_post && !drain_since) drain_since = now;
    if (drain_since && (g_stop > 1 || now - *drain_since > kDrainLimit)) {
      gen.last_error.message = std::to_string(gen.posted - gen.completed) +
                               " requests still outstanding " +
                               (g_stop > 1 ? std::string("at the second signal")
                                           : std::string("10 s after the last post: the peer "
                                                         "stopped answering")) +
                               " (" + peer_and_conn(*ep, conn) + ")";
      failed = true;
      break;
    }
    const size_t moved = ep->progress();
    Completion cs[64];
    const size_t n = ep->poll_completions(cs, 64);
    for (size_t i = 0; i < n; ++i)
      if (!gen.on_completion(cs[i])) sink.on_completion(cs[i]);
    idler.step(*ep, moved != 0 || n != 0 || gen.posted != posted, now);
    if (gen.errors != 0) {
      failed = true;
      break;
    }
    // A progress line every interval, for any run that lasts longer (--iters too).
    if (now >= next_report) {
      (void)snapshot(now);
      const double el = std::chrono::duration<double>(now - t0).count();
      const double span = std::chrono::duration<double>(now - last_report).count();
      // The reverse column, like the others, covers this interval only (it
      // used to be the mean since the start, of WRITE_IMM and SEND data
      // only: 0 for a read, or a write without --verify).
      char rev[48] = "";
      if (a.tp.bidir)
        std::snprintf(rev, sizeof(rev), "  reverse %.3f Gb/s",
                      dbl(reverse_bytes(cst) - last_reverse) * 8 / span / 1e9);
      std::fprintf(
          stderr, "%s %8.3f Gb/s  %9.0f msg/s  retx %" PRIu64 "%s\n",
          progress_stamp(el, stamp_decimals).c_str(), dbl(gen.bytes - last_bytes) * 8 / span / 1e9,
          dbl(gen.bytes - last_bytes) / double(a.tp.size) / span, cst.retransmissions, rev);
      last_bytes = gen.bytes;
      last_reverse = reverse_bytes(cst);
      last_report = now;
      next_report = next_progress_line(next_report, now, interval);
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // The counters as the test's load left them, before the Result is awaited
  // (a server that closes then takes them with the connection).
  (void)snapshot(Clock::now());
  // Why the run failed, for stderr and --json's "error".
  std::string error = failed ? gen.last_error.message : std::string();
  if (failed) std::fprintf(stderr, "metaroce-perf client: %s\n", error.c_str());

  Ctrl result{};
  bool have_result = false;
  CtrlOut done_out;
  if (!failed) {
    Ctrl done;
    done.type = MsgType::kDone;
    done.messages = gen.completed;
    done.bytes = gen.bytes;
    (void)send_ctrl(*ep, conn, done, done_out, 2);
    // A first signal only stopped the posting: the Result still counts. A
    // server that acknowledged the Done and then vanished (killed while it
    // drains a --bidir load, say) leaves nothing outstanding here: silence
    // for the peer timeout ends the wait, which used to last its 10 s.
    why.clear();
    have_result = wait_ctrl(*ep, sink, &gen, result, 10000ms, kClientGivesUpAt,
                            std::chrono::milliseconds(common.peer_timeout_ms), &why) &&
                  result.type == MsgType::kResult;
    if (!have_result) {
      error = "no result from the server (" + peer_and_conn(*ep, conn) + "): " +
              (g_stop >= kClientGivesUpAt ? std::string("gave up at the second signal")
               : why.empty()              ? std::string("not a Result")
                                          : why);
      std::fprintf(stderr, "metaroce-perf client: %s\n", error.c_str());
    }
  }
  // An older server announces no PathReports and sends none.
  const size_t want_reports = std::min<uint64_t>(ack.path_reports, kMaxPathReports);
  if (have_result && want_reports != 0) {
    wait_path_reports(*ep, sink, gen, want_reports);
    if (sink.path_reports.size() < want_reports)
      std::fprintf(stderr, "metaroce-perf client: the server reported %zu of its %zu paths\n",
                   sink.path_reports.size(), want_reports);
  }
  std::string counters_note;
  if (const auto end_at = Clock::now(); !snapshot(end_at)) {
    char ago[96];
    std::snprintf(ago, sizeof(ago), "as of %.2f s, %.0f ms before the end",
                  std::chrono::duration<double>(snapshot_at - t0).count(),
                  std::chrono::duration<double, std::milli>(end_at - snapshot_at).count());
    counters_note = "the connection ended (" + conn_state_text(*ep, conn, gen.last_error.status) +
                    ") and the engine no longer keeps its counters: they are " + ago;
    std::fprintf(stderr, "metaroce-perf client: note: %s\n", counters_note.c_str());
  }
  std::vector<PathReport> client_paths;
  for (size_t i = 0; i < client_stats.size(); ++i)
    client_paths.push_back(path_report(client_stats[i], i, client_stats.size()));
  const std::vector<PathReport> server_paths(sink.path_reports.begin(), sink.path_reports.end());
  // The paths shown are those that carried the test's data: the server's for
  // a read (when it reported them), else the client's own.
  const bool server_paths_shown = read && !server_paths.empty();
  // With --bidir also those that carried the reverse load: the server's for
  // a write or send (when it reported them: an older server sends none), the
  // client's own for a read, whose reverse READs fetch the client's memory.
  const bool reverse_paths_known = a.tp.bidir && (read || !server_paths.empty());
  const std::vector<PathReport>& reverse_paths = read ? client_paths : server_paths;
  // --paths sets this end's path count only: the engine fixes one per
  // endpoint, so a server sends a read's data and a --bidir reverse load on
  // its own paths (its --paths), whatever the client asked. Say so where
  // the two differ (the client's --paths used to look as if it applied).
  const uint64_t server_path_count = ask_reports ? ack.path_reports : 0;  // 0: not known
  std::string paths_note;
  if (server_path_count != 0 && server_path_count != client_stats.size())
    paths_note = "--paths (" + std::to_string(client_stats.size()) +
                 ") applies to the client's own sending (" +
                 (read ? std::string(a.tp.bidir ? "the requests and the reverse load's READ "
                                                  "responses"
                                                : "the requests")
                       : std::string("the test's data")) +
                 "); the server sent " + (read ? "the read's data" : "the reverse load") +
                 " on its own " + std::to_string(server_path_count) +
                 " paths (the server's --paths)";
  if (!paths_note.empty())
    std::fprintf(stderr, "metaroce-perf client: note: %s\n", paths_note.c_str());
  const auto io = ep->io_stats();
  // The reverse load's messages this end saw arrive (a send's SENDs, a
  // write's WRITE_IMMs with --verify; plain WRITEs and a read's READs leave
  // no completion here) against those the server completed.
  const bool reverse_seen =
      a.tp.bidir && (a.tp.op == Op::kSend || (a.tp.op == Op::kWrite && a.tp.verify));
  const bool reverse_counted = reverse_seen && have_result;
  const bool reverse_mismatch = reverse_counted && sink.next_seq != result.rev_messages;
  if (reverse_mismatch)
    std::fprintf(stderr,
                 "metaroce-perf client: the server completed %" PRIu64
                 " reverse messages, this end received %" PRIu64 "\n",
                 result.rev_messages, sink.next_seq);
  // Without the server's Result the count is unknown (null, "n/a"), not 0: a
  // run whose server was lost used to report "verify errors 0" for data no
  // one had checked.
  VerifyTally tally;
  tally.verify = a.tp.verify;
  tally.op = a.tp.op;
  tally.bidir = a.tp.bidir;
  tally.have_result = have_result;
  tally.client_errors = gen.verify_errors + sink.verify_errors;
  tally.server_errors = result.verify_errors;
  tally.server_messages = result.messages;
  tally.client_completed = gen.completed;
  tally.reverse_mismatch = reverse_mismatch;
  const bool verify_known = perf::verify_known(tally);
  const uint64_t verify_errors = perf::verify_errors(tally);
  // Retransmissions of the end that sends the test's data: the client for
  // write and send, the server (its Result) for read, where the client only
  // sends the requests. The reverse load (--bidir) the other way round.
  const bool data_from_server = a.tp.op == Op::kRead;
  const bool have_retx = !data_from_server || have_result;  // read: the server reported
  const uint64_t retx = data_from_server ? result.rev_retx : cst.retransmissions;
  const uint64_t rev_retx = data_from_server ? cst.retransmissions : result.rev_retx;
  std::vector<uint64_t> lat = gen.lat.samples;
  const double p50 = pct(lat, 0.5), p99 = pct(lat, 0.99), p999 = pct(lat, 0.999);
  const double gbps = dbl(gen.bytes) * 8 / secs / 1e9;
  const double rate = dbl(gen.completed - gen.errors) / secs;
  // A failed run's figures cover its seconds, the peer timeout it waited out
  // included: when its last message completed says how long data moved.
  const double last_ok_secs =
      gen.last_ok > t0 ? std::chrono::duration<double>(gen.last_ok - t0).count() : 0.0;

  if (a.json) {
    nlohmann::json j;
    j["op"] = op_name(a.tp.op);
    j["size"] = a.tp.size;
    j["qd"] = a.tp.qd;
    j["seconds"] = secs;
    j["messages"] = gen.completed - gen.errors;
    j["bytes"] = gen.bytes;
    j["goodput_gbps"] = gbps;
    j["msg_rate"] = rate;
    // No message completed: no latency was measured (it read 0 us, faster
    // than any run).
    if (lat.empty())
      j["lat_us"] = {{"p50", nullptr}, {"p99", nullptr}, {"p999", nullptr}};
    else
      j["lat_us"] = {{"p50", p50}, {"p99", p99}, {"p999", p999}};
    if (have_retx)
      j["retransmitted_packets"] = retx;
    else
      j["retransmitted_packets"] = nullptr;  // read: the server did not report
    j["retransmitted_by"] = data_from_server ? "server" : "client";
    j["client_retransmitted_packets"] = cst.retransmissions;
    j["data_packets_sent"] = cst.data_packets_sent;
    j["losses_declared"] = cst.losses_declared;
    j["naks_received"] = cst.naks_received;  // e.g. RNR: the server had no receive posted
    j["rnr_naks_sent"] = cst.rnr_naks_sent;  // the client had none for a reverse SEND
    j["path_retirements"] = cst.path_retirements;
    j["path_explorations"] = cst.path_explorations;
    j["ce_received"] = cst.ce_received;
    j["verify"] = a.tp.verify;
    if (verify_known)
      j["verify_errors"] = verify_errors;
    else
      j["verify_errors"] = nullptr;  // the server's checks never came
    j["errors"] = gen.errors;
    if (stopped_by_signal) j["stopped_by_signal"] = true;
    if (!error.empty()) {
      j["error"] = error;
      j["last_completion_seconds"] = last_ok_secs;
    }
    if (have_result) {
      j["server_messages_received"] = result.messages;
      if (a.tp.bidir) {
        j["reverse"] = {{"messages", result.rev_messages},
                        {"bytes", result.rev_bytes},
                        {"goodput_gbps",
                         result.rev_ns ? dbl(result.rev_bytes) * 8.0 / dbl(result.rev_ns) : 0.0},
                        {"retransmitted_packets", rev_retx},
                        {"retransmitted_by", data_from_server ? "client" : "server"}};
        if (reverse_counted) j["reverse"]["messages_received"] = sink.next_seq;
        if (reverse_paths_known) {
          nlohmann::json rps = nlohmann::json::array();
          for (const PathReport& p : reverse_paths) rps.push_back(path_json(p));
          j["reverse"]["paths"] = rps;
          j["reverse"]["paths_of"] = read ? "client" : "server";
        }
      }
    } else if (a.tp.bidir) {
      // The reverse load as far as this end saw it; the server's figures
      // never came (the object used to be left out, as if none had run).
      j["reverse"] = {{"partial", true}, {"connection_bytes", reverse_bytes(cst)}};
      if (reverse_seen) j["reverse"]["messages_received"] = sink.next_seq;
    }
    nlohmann::json ps = nlohmann::json::array(), cps = nlohmann::json::array();
    for (const PathReport& p : server_paths_shown ? server_paths : client_paths)
      ps.push_back(path_json(p));
    j["paths"] = ps;
    j["paths_of"] = server_paths_shown ? "server" : "client";
    j["client_path_count"] = client_stats.size();
    if (server_path_count != 0)
      j["server_path_count"] = server_path_count;
    else
      j["server_path_count"] = nullptr;  // not asked for (write, send) or not reported
    if (!paths_note.empty()) j["paths_note"] = paths_note;
    if (!counters_note.empty()) j["counters_note"] = counters_note;
    if (server_paths_shown) {
      for (const PathReport& p : client_paths) cps.push_back(path_json(p));
      j["client_paths"] = cps;
    }
    nlohmann::json io_json = {{"rx_wait_us_mean", mean_rx_wait_us(io)},
                              {"rx_wait_us_max", dbl(io.rx_wait_ns_max) / 1e3},
                              {"gso", ep->gso_enabled()},
                              {"gro", ep->gro_enabled()},
                              {"io_uring", ep->uring_enabled()}};
    for (const IoCounter& c : kIoCounters) io_json[c.name] = io.*c.field;
    j["io"] = std::move(io_json);
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string server_count =
        server_path_count != 0 ? ", the server's " + std::to_string(server_path_count) : "";
    std::printf("\nmetaroce-perf %s to %s: size %u B, qd %u, %u client paths%s, %.2f s%s%s\n",
                op_name(a.tp.op), a.addr.c_str(), a.tp.size, a.tp.qd,
                static_cast<unsigned>(client_paths.size()), server_count.c_str(), secs,
                stopped_by_signal ? " (stopped by a signal)" : "", a.tp.verify ? ", verified" : "");
    // A failed run says so in its report too (the reason went to stderr
    // only, above a table that read like a whole run's).
    if (!error.empty()) {
      std::printf("  FAILED: %s\n", error.c_str());
      std::printf("  last completion at   %10.2f s  (the figures below cover all %.2f s)\n",
                  last_ok_secs, secs);
      if (gen.errors != 0) std::printf("  messages failed      %10" PRIu64 "\n", gen.errors);
    }
    // What the client's own retransmissions (of a read) were of: with
    // --bidir it also answers the server's READs, whose data is most of it
    // (the count was called the requests' alone).
    const char* const client_sends =
        a.tp.bidir ? "requests and answers to the server's READs" : "requests";
    std::printf("  goodput              %10.3f Gb/s\n", gbps);
    std::printf("  message rate         %10.0f msg/s\n", rate);
    if (lat.empty())
      std::printf("  latency p50/p99/p999        n/a  (no message completed)\n");
    else
      std::printf("  latency p50/p99/p999 %8.1f / %.1f / %.1f us\n", p50, p99, p999);
    if (!data_from_server)
      std::printf("  retransmitted pkts   %10" PRIu64 "  (of %" PRIu64 " data packets, %" PRIu64
                  " declared lost)\n",
                  cst.retransmissions, cst.data_packets_sent, cst.losses_declared);
    else if (have_retx)
      std::printf("  retransmitted pkts   %10" PRIu64
                  "  (by the server, which sends the data; the client's %s: %" PRIu64 ")\n",
                  retx, client_sends, cst.retransmissions);
    else
      std::printf(
          "  retransmitted pkts          n/a  (the server did not report; the client's %s: "
          "%" PRIu64 ")\n",
          client_sends, cst.retransmissions);
    if (a.tp.verify && verify_known)
      std::printf("  verify errors        %10" PRIu64 "\n", verify_errors);
    else if (a.tp.verify)
      std::printf(
          "  verify errors               n/a  (the server, which checks %s, did not report; "
          "this end's own checks: %" PRIu64 ")\n",
          read ? "the reverse load" : "the data", verify_errors);
    if (a.tp.bidir && have_result)
      std::printf("  reverse goodput      %10.3f Gb/s (the server's %s; %" PRIu64
                  " packets retransmitted by the %s)\n",
                  result.rev_ns ? dbl(result.rev_bytes) * 8.0 / dbl(result.rev_ns) : 0.0,
                  data_from_server ? "READs, data client -> server" : "load, server -> client",
                  rev_retx, data_from_server ? "client" : "server");
    else if (a.tp.bidir && reverse_seen)
      std::printf(
          "  reverse goodput             n/a  (the server did not report; this end received "
          "%" PRIu64 " of its messages)\n",
          sink.next_seq);
    else if (a.tp.bidir)
      std::printf(
          "  reverse goodput             n/a  (the server did not report; this end's "
          "connection %s %" PRIu64 " bytes of it)\n",
          read ? "sent" : "received", reverse_bytes(cst));
    print_io(io);
    const bool reverse_shown = reverse_paths_known && have_result;
    if (server_paths_shown) {
      print_paths("the server's paths (they carry the read's data):", server_paths);
      print_paths(reverse_shown ? "the client's paths (they carry the requests, and the reverse "
                                  "load: the server's READs):"
                                : "the client's paths (they carry the requests):",
                  client_paths);
    } else if (read) {
      print_paths(reverse_shown ? "the client's paths (the requests and the reverse load; the "
                                  "server did not report its own):"
                                : "the client's paths (the requests; the server did not report "
                                  "its own):",
                  client_paths);
    } else if (reverse_shown) {
      print_paths("the client's paths (they carry the test's data):", client_paths);
      print_paths("the server's paths (they carry the reverse load, server -> client):",
                  server_paths);
    } else {
      print_paths(a.tp.bidir ? "the client's paths (the server did not report its own, which "
                               "carry the reverse load):"
                             : nullptr,
                  client_paths);
    }
  }
  ep->close(conn);
  for (int i = 0; i < 50 && ep->state(conn) == udp::ConnState::kEstablished; ++i) ep->wait(1ms);
  return client_exit_status(failed, tally);
}

}  // namespace metaroce::perf
