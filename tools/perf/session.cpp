#include "session.hpp"

#include <sched.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <new>
#include <string_view>

namespace metaroce::perf {

using namespace std::chrono_literals;

volatile std::sig_atomic_t g_stop = 0;

void Idler::step(udp::UdpEndpoint& ep, bool active, Clock::time_point now) {
  if (active || busy) {
    idle = false;
    return;
  }
  if (!idle) {
    idle = true;
    since = now;
  }
  if (now - since < spin && now >= shared_until) {
    const auto before = Clock::now();
    sched_yield();
    const auto after = Clock::now();
    if (after - before > kSharedYield) shared_until = after + kSharedFor;
    return;
  }
  ep.wait(1ms);
  idle = false;
}

Idler Common::idler() const {
  Idler i;
  i.busy = busy;
  i.spin = std::chrono::microseconds(spin_us);
  return i;
}

udp::Options make_options(const Common& c) {
  udp::Options o;
  o.engine.mtu = c.mtu;
  // main.cpp's checks keep every value in range: none is clamped here.
  o.engine.num_paths = static_cast<uint8_t>(c.paths);
  o.engine.rq_depth = kRqDepth;
  o.engine.recovery.peer_timeout_ns = uint64_t{c.peer_timeout_ms} * kMillisecond;
  o.engine.recovery.rnr_retry_limit = c.rnr_retry_limit;
  // 500 ms: a perf run tolerates a slow server start (a client sets its own
  // --connect-timeout-ms).
  o.engine.connect_attempts =
      connect_attempts_for(kDefaultConnectTimeoutMs, o.engine.connect_retry_ns);
  o.engine.cc.enabled = !c.no_cc;
  o.engine.cover_payload = c.payload_crc;
  o.engine.control_dscp = static_cast<uint8_t>(c.control_dscp);
  o.engine.data_dscp = static_cast<uint8_t>(c.data_dscp);
  if (c.ack_every != 0) o.engine.ack_every = static_cast<uint8_t>(c.ack_every);
  if (c.min_rto_us != 0) o.engine.recovery.min_rto_ns = uint64_t{c.min_rto_us} * kMicrosecond;
  if (c.target_delay_us != 0)
    o.engine.cc.target_queue_delay_ns = uint64_t{c.target_delay_us} * kMicrosecond;
  if (c.explore_ms >= 0)
    o.engine.cc.explore_interval_ns = static_cast<uint64_t>(c.explore_ms) * kMillisecond;
  o.entropy_count = static_cast<uint16_t>(c.entropy_count);
  o.entropy_base = c.entropy_base;
  o.gso = !c.no_gso;
  o.gro = !c.no_gro;
  return o;
}

uint32_t connect_attempts_for(uint32_t timeout_ms, uint64_t retry_ns) {
  const uint64_t ns = uint64_t{timeout_ms} * kMillisecond;
  const uint64_t n = retry_ns == 0 ? 1 : (ns + retry_ns - 1) / retry_ns;
  return static_cast<uint32_t>(std::clamp<uint64_t>(n, 1, UINT16_MAX));
}

std::string connect_error_text(const udp::Error& e, uint32_t timeout_ms) {
  if (e.status != Status::kConnectTimeout) return e.message;
  const std::string wait = std::to_string(timeout_ms) + " ms";
  // connect() waits out its timeout, this one (udp.hpp), and then says
  // "timed out after" it (in parentheses after a failed send): as many
  // requests went as connect_attempts_for sized the engine's budget to.
  // (Its "no answer to N requests ... (Options::engine.connect_attempts)"
  // comes only of a timeout of 0, below --connect-timeout-ms's least, and
  // "(CONN-2's most ...)" of one past 65,535 requests, above its most.)
  const EndpointConfig defaults;
  const uint32_t requests = connect_attempts_for(timeout_ms, defaults.connect_retry_ns);
  const std::string sent = std::to_string(requests) + (requests == 1 ? " request " : " requests ") +
                           std::to_string(defaults.connect_retry_ns / kMillisecond) +
                           " ms apart; --connect-timeout-ms waits longer";
  const std::string cut = "timed out after " + wait;
  if (const size_t at = e.message.find("(" + cut + ")"); at != std::string::npos)
    return e.message.substr(0, at) + "(no answer within " + wait + ": " + sent + ")" +
           e.message.substr(at + cut.size() + 2);
  if (const size_t at = e.message.find(" " + cut); at != std::string::npos)
    return e.message.substr(0, at) + ": no answer within " + wait + " (" + sent + ")" +
           e.message.substr(at + cut.size() + 1);
  // Another wording (another timeout, or a driver that says it otherwise):
  // the option, added.
  return e.message + " (metaroce-perf waited " + wait + ": --connect-timeout-ms)";
}

bool holds_newcomers(Clock::duration quiet, std::chrono::milliseconds peer_timeout) {
  return peer_timeout - quiet <= kHoldAtMost;
}

CtrlOut::~CtrlOut() {
  if (ep != nullptr) (void)ep->deregister_memory(mr.lkey);
}

namespace {

udp::Error send_encoded(udp::UdpEndpoint& ep, ConnId conn, CtrlOut& out, uint64_t id) {
  if (out.ep == nullptr) {
    if (udp::Error e = ep.register_memory(out.bytes, sizeof(out.bytes), kAllAccess, out.mr))
      return e;
    out.ep = &ep;
  }
  return ep.send(conn, kCtrlWrId | id, out.bytes, sizeof(out.bytes), out.mr.lkey);
}

}  // namespace

udp::Error send_ctrl(udp::UdpEndpoint& ep, ConnId conn, const Ctrl& m, CtrlOut& out, uint64_t id) {
  encode(m, out.bytes);
  return send_encoded(ep, conn, out, id);
}

udp::Error send_path_report(udp::UdpEndpoint& ep, ConnId conn, const PathReport& r, CtrlOut& out,
                            uint64_t id) {
  encode(r, out.bytes);
  return send_encoded(ep, conn, out, id);
}

uint64_t heard_from_peer(const ConnStats& s) {
  return s.data_packets_received + s.duplicates_received + s.acks_received + s.naks_received +
         s.out_of_window;
}

bool wait_ctrl(udp::UdpEndpoint& ep, Sink& sink, Generator* gen, Ctrl& out,
               std::chrono::milliseconds to, int give_up_at, std::chrono::milliseconds silence,
               std::string* why, CtrlWaitEnd* end, const Bystanders* others) {
  const auto start = Clock::now();
  const auto deadline = start + to;
  uint64_t heard = 0;
  auto heard_at = start, checked_at = start;
  using Kind = CtrlWaitEnd::Kind;
  const auto give_up = [&](Kind kind, const std::string& reason, Status failed = Status::kOk) {
    if (why != nullptr) *why = reason;
    if (end != nullptr) *end = {kind, failed};
    return false;
  };
  while (sink.ctrl.empty()) {
    const auto now = Clock::now();
    if (g_stop >= give_up_at) return give_up(Kind::kSignal, "stopped by a signal");
    if (now > deadline)
      return give_up(Kind::kTimeout, "none within " + std::to_string(to.count()) +
                                         " ms (connection " + conn_state_text(ep, sink.conn) + ")");
    if (silence.count() != 0 && now - checked_at >= 10ms) {
      checked_at = now;
      ConnStats st{};
      if (ep.conn_stats(sink.conn, st) && heard_from_peer(st) != heard) {
        heard = heard_from_peer(st);
        heard_at = now;
      } else if (now - heard_at >= silence) {
        return give_up(Kind::kSilence, "nothing heard from the peer for " +
                                           std::to_string(silence.count()) +
                                           " ms, the peer timeout: peer unreachable");
      }
    }
    ep.progress();
    if (others != nullptr) others->after_round();
    Completion cs[64];
    const size_t n = ep.poll_completions(cs, 64);
    for (size_t i = 0; i < n; ++i) {
      if (others != nullptr && others->claim(cs[i])) continue;
      if (sink.on_completion(cs[i])) continue;
      if (gen != nullptr && gen->on_completion(cs[i])) continue;
      if ((cs[i].wr_id & kCtrlWrId) != 0 && cs[i].status != Status::kOk) {
        if (end == nullptr)
          std::fprintf(stderr, "control message failed: %s\n",
                       ep.completion_error(cs[i]).message.c_str());
        return give_up(Kind::kCtrlFailed,
                       "connection " + conn_state_text(ep, sink.conn, cs[i].status), cs[i].status);
      }
    }
    if (n == 0) {
      const auto st = ep.state(sink.conn);
      if (st == udp::ConnState::kError || st == udp::ConnState::kClosed)
        return give_up(Kind::kConnEnded, "connection " + conn_state_text(ep, sink.conn));
    }
  }
  out = sink.ctrl.front();
  sink.ctrl.pop_front();
  return true;
}

std::string hello_failure_text(const std::string& addr, const std::string& peer_conn,
                               const HelloOutcome& o) {
  using Kind = CtrlWaitEnd::Kind;
  const std::string who = "server " + addr + " (" + peer_conn + ")";
  std::string text;
  if (o.waited) {
    text = who + " answered the Hello with control message type " +
           std::to_string(static_cast<uint32_t>(o.got.type)) + ", not a HelloAck";
  } else if (o.end.kind == Kind::kCtrlFailed &&
             is_wire_nak_code(static_cast<uint8_t>(o.end.failed))) {
    // The server's end refused the Hello itself (a fatal NAK): it was heard.
    text = who + " rejected the Hello: " + std::string(status_name(o.end.failed)) + " (" +
           std::string(status_text(o.end.failed)) + ")";
    if (o.end.failed == Status::kRemoteLengthError)
      text += ": the receive it posted was shorter than the Hello's " + std::to_string(kCtrlBytes) +
              " bytes, which a metaroce-perf server's never is";
  } else if (o.end.kind == Kind::kCtrlFailed || o.end.kind == Kind::kConnEnded) {
    text = who + " did not answer the Hello: the connection ended first (connection " +
           o.conn_state + ")";
  } else {
    // Silence, or the user's signal: nothing says the server did anything.
    text = "no answer from " + who + ": " + o.why;
  }
  if (o.stray != 0)
    text += "; it sent " + std::to_string(o.stray) + (o.stray == 1 ? " message" : " messages") +
            " (" + std::to_string(o.stray_bytes) +
            " bytes) that no metaroce-perf server sends before its HelloAck: is another program "
            "listening at " +
            addr + "?";
  return text;
}

int progress_decimals(double interval) {
  int d = 1;
  for (double scaled = interval * 10;
       d < 6 && std::abs(scaled - std::round(scaled)) > 1e-9 * std::max(1.0, scaled); scaled *= 10)
    ++d;
  return d;
}

std::string progress_stamp(double elapsed, int decimals) {
  char buf[48];
  // Three digits before the point, as "[%5.1fs]" had.
  std::snprintf(buf, sizeof(buf), "[%*.*fs]", 4 + decimals, decimals, elapsed);
  return buf;
}

Clock::time_point next_progress_line(Clock::time_point due, Clock::time_point now,
                                     Clock::duration interval) {
  const Clock::duration step = std::max(interval, Clock::duration{1});
  return now < due ? due : due + step * ((now - due) / step + 1);
}

PathReport path_report(const PathStats& p, size_t slot, size_t slots) {
  PathReport r;
  r.slot = static_cast<uint32_t>(slot);
  r.slots = static_cast<uint32_t>(slots);
  r.entropy = p.entropy;
  r.state = p.state == PathState::kActive ? 0 : 1;
  r.packets = p.packets_sent;
  r.retransmissions = p.retransmissions;
  r.ce_marks = p.ce_marks;
  r.srtt_ns = p.srtt_ns;
  r.losses = p.losses;
  r.timeouts = p.timeouts;
  r.retirements = p.retirements;
  r.explorations = p.explorations;
  r.probes = p.probes_sent;
  r.cwnd_bytes = p.cwnd_bytes;
  r.min_rtt_ns = static_cast<uint32_t>(std::min<uint64_t>(p.min_rtt_ns, UINT32_MAX));
  r.bytes = p.bytes_sent;
  return r;
}

std::string seconds_problem(double s) {
  if (s >= kMinSeconds && s <= kMaxSeconds) return "";  // false for nan
  char buf[112];
  std::snprintf(buf, sizeof(buf), "must be a number of seconds from %g to %g, not %g", kMinSeconds,
                kMaxSeconds, s);
  return buf;
}

std::string peer_and_conn(const udp::UdpEndpoint& ep, ConnId conn) {
  char id[16];
  std::snprintf(id, sizeof(id), "0x%x", conn.v);
  return "peer " + ep.peer_address(conn) + ", conn " + id;
}

std::string conn_state_text(const udp::UdpEndpoint& ep, ConnId conn, Status seen) {
  const char* name = "?";
  switch (ep.state(conn)) {
    case udp::ConnState::kConnecting: name = "connecting"; break;
    case udp::ConnState::kEstablished: name = "established"; break;
    case udp::ConnState::kClosed: name = "closed"; break;
    case udp::ConnState::kError: name = "failed"; break;
    case udp::ConnState::kUnknown: name = "unknown (gone)"; break;
  }
  // What the driver says besides the status (a send that failed, the peer's
  // host refusing: its process gone) sits between "connection failed; " and
  // the " (peer " that names the peer.
  std::string besides;
  if (const udp::Error e = ep.conn_error(conn)) {
    seen = e.status;
    constexpr std::string_view kHead = "connection failed; ";
    const size_t end = e.message.find(" (peer ");
    if (e.message.starts_with(kHead) && end != std::string::npos)
      besides = "; " + e.message.substr(kHead.size(), end - kHead.size());
  }
  if (seen == Status::kOk) return name;
  return std::string(name) + ": ended with " + std::string(status_name(seen)) + " (" +
         std::string(status_text(seen)) + ")" + besides;
}

double pct(std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  // Nearest rank: the ceil(q n)-th smallest, index ceil(q n) - 1 (floor(q n)
  // gave the next one up: 51 for the median of 1..100).
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t k = std::min(v.size() - 1, rank < 1 ? size_t{0} : static_cast<size_t>(rank) - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return dbl(v[k]) / 1000.0;
}

// Each IoStats field is a listed counter or rx_wait_ns_max.
static_assert(sizeof(udp::IoStats) == (std::size(kIoCounters) + 1) * sizeof(uint64_t),
              "an IoStats counter is missing from kIoCounters");

udp::IoStats io_since(const udp::IoStats& now, const udp::IoStats& b) {
  udp::IoStats d = now;
  for (const IoCounter& c : kIoCounters) d.*c.field -= b.*c.field;
  return d;
}

bool client_local_address(const std::string& addr, std::string& local, std::string& peer,
                          std::string& why) {
  // The driver's non-throwing forms: a bad address, or no memory for the
  // words, is a refusal the client reports (kExitNothingRan), where
  // std::bad_alloc out of parse_address or format_address ended the tool.
  PeerAddr p;
  if (udp::Error e = udp::parse_address_checked(addr, 4792, p)) {
    why.swap(e.message);
    return false;
  }
  local = udp::address_is_v4(p) ? "0.0.0.0:0" : "[::]:0";  // (held in the string itself)
  try {
    peer = udp::format_address_text(p).view();
  } catch (const std::bad_alloc&) {
    why = udp::kOutOfMemoryWords;  // (held in the string itself)
    return false;
  }
  return true;
}

double mean_rx_wait_us(const udp::IoStats& io) {
  return io.rx_datagrams ? dbl(io.rx_wait_ns_total) / dbl(io.rx_datagrams) / 1e3 : 0.0;
}

void print_io(const udp::IoStats& io, bool max_since_start) {
  std::printf("  io: %" PRIu64 " datagrams in %" PRIu64 " send calls (%" PRIu64 " GSO), %" PRIu64
              " received in %" PRIu64 " recvmmsg (%" PRIu64 " GRO, %" PRIu64
              " in the control class); waited in the socket %.1f us"
              " mean, %.1f max%s; %" PRIu64 " rounds left datagrams unread\n",
              io.tx_datagrams, io.tx_syscalls, io.tx_gso_msgs, io.rx_datagrams, io.rx_syscalls,
              io.rx_gro_batches, io.rx_control_class, mean_rx_wait_us(io),
              dbl(io.rx_wait_ns_max) / 1e3, max_since_start ? " since the server started" : "",
              io.rx_backlogged_rounds);
  // Datagrams lost or damaged in the driver read as the network's losses in
  // the path table; name them where there are any (udp/README.md says why each happens).
  if (io.rx_truncated + io.rx_foreign + io.rx_ctrunc + io.tx_errors + io.accepts_dropped != 0)
    std::printf("  io trouble: %" PRIu64 " datagrams larger than the receive buffer, %" PRIu64
                " of another family or empty, %" PRIu64
                " buffers with control data cut short (ECN or GRO size lost), %" PRIu64
                " dropped on a send error, %" PRIu64
                " connections accepted with no memory to record them (closed at once)\n",
                io.rx_truncated, io.rx_foreign, io.rx_ctrunc, io.tx_errors, io.accepts_dropped);
}

}  // namespace metaroce::perf
