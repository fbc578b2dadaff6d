// metaroce-perf server: accepts one test at a time, sets up its buffers as
// the client's Hello asks, sinks (and with --bidir generates) the load, and
// reports the result back.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "session.hpp"

namespace metaroce::perf {
namespace {

using namespace std::chrono_literals;
using udp::Error;
using udp::UdpEndpoint;

// The log's lines on stdout. Its reader may go while the server serves on
// (`server ... | head -1` to learn the port; SIGPIPE, ignored in main.cpp,
// killed the server at its next line): say so once on stderr, then serve on.
void flush_log() {
  static bool noted = false;
  errno = 0;
  if ((std::fflush(stdout) == 0 && std::ferror(stdout) == 0) || noted) return;
  noted = true;
  const int e = errno;
  std::fprintf(stderr,
               "metaroce-perf server: its log could not be written to stdout%s%s; serving on\n",
               e != 0 ? ": " : "", e != 0 ? std::strerror(e) : "");
}

// Connections taken from the accept queue and not yet served or refused,
// oldest first, each with one receive posted for its Hello as it was taken.
// take_new() runs after every round of the server's (round()): a connection
// is established in a round, whose ACCEPT its client answers with the Hello,
// so the receive is posted before any round can take the Hello. Taken only
// when the server got to them, a Hello waited for a receive (RNR) while a
// test ran or ended, and a client's --rnr-retry-limit failed it.
class Lobby {
 public:
  struct Arrival {
    ConnId conn;
    Sink hello;       // one control-sized receive
    std::string why;  // why none could be posted (empty: posted)
  };
  // Every connection the accept queue holds.
  void take_new(UdpEndpoint& ep) {
    ConnId c;
    while (ep.try_accept(c)) add(ep, c);
  }
  void add(UdpEndpoint& ep, ConnId c) {
    auto& a = *arrivals_.emplace_back(std::make_unique<Arrival>());
    a.conn = c;
    a.hello.repost = false;
    TestParams ctl;
    ctl.qd = 1;
    ctl.op = Op::kWrite;
    if (!a.hello.prepare(ep, ctl, RecvRing{static_cast<uint32_t>(kCtrlBytes), 1}))
      a.why = "cannot register a receive buffer for its Hello";
    else if (const Error e = a.hello.post_ring(c))
      a.why = e.message;
  }
  // A completion of a connection here (its Hello, or the receive flushed);
  // false when it is not one of theirs.
  bool on_completion(const Completion& c) {
    for (const auto& a : arrivals_)
      if (a->conn == c.conn) {
        (void)a->hello.on_completion(c);
        return true;
      }
    return false;
  }
  Arrival* find(ConnId c) {
    for (const auto& a : arrivals_)
      if (a->conn == c) return a.get();
    return nullptr;
  }
  // Leaves the lobby (served or refused): the oldest, or connection c.
  std::unique_ptr<Arrival> take_front() {
    return take(arrivals_.empty() ? ConnId{} : arrivals_.front()->conn);
  }
  std::unique_ptr<Arrival> take(ConnId c) {
    for (auto it = arrivals_.begin(); it != arrivals_.end(); ++it)
      if ((*it)->conn == c) {
        std::unique_ptr<Arrival> a = std::move(*it);
        arrivals_.erase(it);
        return a;
      }
    return nullptr;
  }
  const std::deque<std::unique_ptr<Arrival>>& arrivals() const { return arrivals_; }

 private:
  std::deque<std::unique_ptr<Arrival>> arrivals_;
};

// Every round of the server's: progress, then the connections it
// established take their Hello receives (Lobby).
size_t round(UdpEndpoint& ep, Lobby& lobby) {
  const size_t moved = ep.progress();
  lobby.take_new(ep);
  return moved;
}

// Closes the connection and drains its last completions (flushed receives,
// control sends), so that the next test starts clean; the lobby's go to it.
void close_and_drain(udp::UdpEndpoint& ep, ConnId conn, Lobby& lobby) {
  ep.close(conn);
  for (int i = 0; i < 20; ++i) (void)round(ep, lobby);
  Completion c;
  while (ep.poll_completion(c)) (void)lobby.on_completion(c);
}

// The first n path slots' figures, one PathReport each (after the Result).
void send_path_reports(udp::UdpEndpoint& ep, ConnId conn, size_t n,
                       std::array<CtrlOut, kMaxPathReports>& out, Lobby& lobby) {
  const auto paths = ep.path_stats(conn);
  n = std::min(n, paths.size());
  for (size_t i = 0; i < n; ++i) {
    const PathReport r = path_report(paths[i], i, n);
    // A full send queue drains as the engine progresses.
    const auto until = Clock::now() + 1s;
    Error e;
    while ((e = send_path_report(ep, conn, r, out[i], 3 + i)) && e.status == Status::kQueueFull &&
           Clock::now() < until)
      (void)round(ep, lobby);
    if (e) return;
  }
}

// Clients that connect while a test runs (in the lobby, their Hello
// receives posted): each gets a HelloAck refusing its test, busy, naming the
// client whose test runs, once its Hello is here (the client posts its
// receives before it sends the Hello, so the HelloAck finds one); the
// connection closes once the refusal is delivered (or after a while). One
// that connects while the running test's client is quiet (holds_newcomers)
// is held instead, its Hello unanswered: refused as soon as that client is
// heard again (a live test's within a packet's time), served next when the
// test ends (given up: the client was gone).
class BusyRefuser {
 public:
  BusyRefuser(ConnId running, const std::string& running_addr, Lobby& lobby)
      : running_(running), running_addr_(running_addr), lobby_(lobby) {}
  BusyRefuser(const BusyRefuser&) = delete;
  BusyRefuser& operator=(const BusyRefuser&) = delete;
  ~BusyRefuser() = default;

  // Connections in the lobby before this test, not yet answered: held (or,
  // where none is served next, refused) as if they had connected now.
  void hold(UdpEndpoint& ep, bool may_hold) { note_new(ep, may_hold); }
  // With `accept`: notes the connections that arrived since the last call,
  // holding them where `may_hold`, else refusing them; refuses those held
  // whose running client was heard since (or that were held kHoldAtMost).
  // Without: leaves new ones and held ones in the lobby (the test is over:
  // they are served next). Closes refused ones whose refusal arrived or
  // that took too long.
  void step(UdpEndpoint& ep, bool accept = true, bool may_hold = false) {
    const auto now = Clock::now();
    if (accept) {
      note_new(ep, may_hold);
      const uint64_t h = heard(ep);
      std::erase_if(seen_, [&](const Seen& w) {
        Lobby::Arrival* a = lobby_.find(w.conn);
        if (a == nullptr) return true;
        if (a->why.empty() && a->hello.ctrl.empty()) return false;  // no Hello to answer yet
        if (w.held && w.heard == h && now - w.since < kHoldAtMost) return false;
        refuse(ep, lobby_.take(w.conn), now);
        return true;
      });
    }
    std::erase_if(refused_, [&](const std::unique_ptr<Refused>& r) {
      const auto st = ep.state(r->arrival->conn);
      if (!r->delivered && now < r->until && st == udp::ConnState::kEstablished) return false;
      ep.close(r->arrival->conn);
      (void)ep.deregister_memory(r->arrival->hello.rbuf_mr.lkey);
      return true;
    });
  }
  // A completion of one of these connections, or of the lobby's; false when
  // it is neither.
  bool on_completion(const Completion& c) {
    for (const auto& r : refused_)
      if (r->arrival->conn == c.conn) {
        if ((c.wr_id & kCtrlWrId) != 0) r->delivered = true;  // the HelloAck
        return true;
      }
    return lobby_.on_completion(c);
  }
  // Waits (a short while) until every refusal is delivered, then closes
  // them; the held ones stay in the lobby, served next in the order they
  // came.
  void finish(UdpEndpoint& ep) {
    while (!refused_.empty()) {
      (void)round(ep, lobby_);
      Completion c;
      while (ep.poll_completion(c)) (void)on_completion(c);
      step(ep, false);
    }
    seen_.clear();
  }

 private:
  static constexpr auto kDeliverWithin = 1s;
  struct Refused {
    std::unique_ptr<Lobby::Arrival> arrival;
    CtrlOut out;
    bool delivered = false;
    Clock::time_point until;
  };
  // A lobby connection this test has seen arrive.
  struct Seen {
    ConnId conn;
    bool held;       // else refused once its Hello is here
    uint64_t heard;  // the running client's packets when it came
    Clock::time_point since;
  };
  // What has arrived from the running test's client so far.
  uint64_t heard(const UdpEndpoint& ep) const {
    ConnStats st{};
    (void)ep.conn_stats(running_, st);
    return heard_from_peer(st);
  }
  void note_new(UdpEndpoint& ep, bool may_hold) {
    const auto now = Clock::now();
    for (const auto& a : lobby_.arrivals())
      if (std::none_of(seen_.begin(), seen_.end(),
                       [&](const Seen& w) { return w.conn == a->conn; }))
        seen_.push_back({a->conn, may_hold, heard(ep), now});
  }
  void refuse(UdpEndpoint& ep, std::unique_ptr<Lobby::Arrival> arrival, Clock::time_point now) {
    auto& r = *refused_.emplace_back(std::make_unique<Refused>());
    r.arrival = std::move(arrival);
    r.until = now + kDeliverWithin;
    const ConnId c = r.arrival->conn;
    Ctrl ack;
    ack.type = MsgType::kHelloAck;
    ack.refusal = static_cast<uint32_t>(Refusal::kBusy);
    ack.busy_with = running_addr_;
    Error e;
    if (!r.arrival->why.empty() || (e = send_ctrl(ep, c, ack, r.out, 1))) {
      std::fprintf(stderr, "cannot refuse %s: %s\n", peer_and_conn(ep, c).c_str(),
                   e ? e.message.c_str() : r.arrival->why.c_str());
      r.delivered = true;  // nothing more to wait for
      return;
    }
    std::fprintf(stderr, "refused a test from %s: %s\n", peer_and_conn(ep, c).c_str(),
                 refusal_text(Refusal::kBusy, running_addr_).c_str());
  }
  ConnId running_;
  std::string running_addr_;
  Lobby& lobby_;
  std::vector<std::unique_ptr<Refused>> refused_;
  std::vector<Seen> seen_;
};

// One client's test, from its connection (`arrival`, its Hello receive
// posted as it arrived) to its Result; true when it ran to the end and the
// Result went back. Clients that connect meanwhile wait in `lobby`: held
// while this one is quiet (holds_newcomers), and served next, or refused
// busy; `once` (--once: none is served next) refuses every one at once.
bool serve(UdpEndpoint& ep, std::unique_ptr<Lobby::Arrival> arrival, const Common& common,
           Lobby& lobby, bool once) {
  const ConnId conn = arrival->conn;
  // The io: line reports this test's share (the counters run since the
  // endpoint opened; it used to print them whole, every test's together).
  const udp::IoStats io_at_start = ep.io_stats();
  std::printf("connection from %s\n", ep.peer_address(conn).c_str());
  flush_log();
  // One buffer for the Hello, posted as the connection arrived; the data
  // ring is posted once the Hello says what to expect (receive buffers are
  // consumed in posting order).
  Sink& sink = arrival->hello;
  Error err;
  if (!arrival->why.empty()) {
    // A client that gave up waiting has closed by now, say.
    std::fprintf(stderr, "no test with %s: %s (connection %s)\n", peer_and_conn(ep, conn).c_str(),
                 arrival->why.c_str(), conn_state_text(ep, conn).c_str());
    close_and_drain(ep, conn, lobby);
    (void)ep.deregister_memory(sink.rbuf_mr.lkey);
    return false;
  }
  // A client sends its Hello as soon as it has connected (its buffers are
  // ready before): one quiet for the peer timeout is gone, killed between the
  // two, say, and clients that connect meanwhile wait for this one to be
  // given up (it used to take 5 s whatever the peer timeout). The 5 s still
  // bound a peer that talks without a Hello.
  const auto quiet_limit = std::chrono::milliseconds(common.peer_timeout_ms);
  Ctrl hello;
  std::string why;
  const Bystanders others{[&] { lobby.take_new(ep); },
                          [&](const Completion& c) { return lobby.on_completion(c); }};
  if (!wait_ctrl(ep, sink, nullptr, hello,
                 std::max<std::chrono::milliseconds>(5000ms, quiet_limit + 1000ms), 1, quiet_limit,
                 &why, nullptr, &others) ||
      hello.type != MsgType::kHello) {
    std::fprintf(stderr, "no Hello from %s: %s\n", peer_and_conn(ep, conn).c_str(),
                 why.empty() ? "its first message is not a Hello" : why.c_str());
    close_and_drain(ep, conn, lobby);
    (void)ep.deregister_memory(sink.rbuf_mr.lkey);
    return false;
  }
  Ctrl ack;
  ack.type = MsgType::kHelloAck;
  CtrlOut ack_out;
  // A Hello this server cannot serve (another build's client, or a hostile
  // one) is refused with its reason, before anything is allocated for it.
  Refusal refusal = check_hello(hello);
  TestParams tp;
  tp.op = static_cast<Op>(hello.op);
  tp.size = hello.size;
  tp.qd = hello.qd;
  tp.verify = hello.verify != 0;
  tp.bidir = hello.bidir != 0;
  Sink data;
  Generator gen;
  // The reverse load: WRITEs to or READs from the memory the client
  // exposes, SENDs to its receives (a client exposes a token region then
  // too, for older servers, which take none as no --bidir).
  const bool bidir = tp.bidir && (hello.addr != 0 || tp.op == Op::kSend);
  // Every buffer is deregistered before it is freed, also on a refusal
  // after part of the setup succeeded (unregistered keys are 0: a no-op).
  auto release = [&] {
    for (const MemoryRegion* mr : {&sink.rbuf_mr, &data.rbuf_mr, &data.mem_mr, &gen.mr})
      if (mr->lkey != 0) (void)ep.deregister_memory(mr->lkey);
  };
  // Receives sized for the SENDs that reach them (plan_buffers), and the
  // memory the client WRITEs to or READs from (none for a send).
  const Buffers plan = refusal == Refusal::kNone
                           ? plan_buffers(Side::kServer, tp.op, tp.size, tp.qd, tp.bidir, kRqDepth)
                           : Buffers{};
  if (refusal == Refusal::kNone &&
      (!data.setup(ep, conn, tp, plan.ring) ||
       (plan.exposed != 0 && !data.expose(tp.size, tp.qd, tp.op == Op::kRead)) ||
       (bidir && !gen.setup(ep, conn, tp, hello.addr, hello.rkey))))
    refusal = Refusal::kNoMemory;
  if (refusal != Refusal::kNone) {
    std::fprintf(stderr, "refused a test from %s: %s (op %u size %u qd %u)\n",
                 ep.peer_address(conn).c_str(), refusal_text(refusal).c_str(), hello.op, hello.size,
                 hello.qd);
    ack.refusal = static_cast<uint32_t>(refusal);
    if (!send_ctrl(ep, conn, ack, ack_out, 1)) {
      const auto until = Clock::now() + 1s;  // let the refusal reach the client
      bool sent = false;
      while (!sent && Clock::now() < until) {
        (void)round(ep, lobby);
        Completion c;
        while (ep.poll_completion(c))
          if (!lobby.on_completion(c) && c.conn == conn) sent = true;
      }
    }
    close_and_drain(ep, conn, lobby);
    release();
    return false;
  }
  ack.addr = data.mem_mr.addr;
  ack.rkey = data.mem_mr.rkey;
  ack.len = data.mem_mr.length;
  // A client that asks for them gets the figures of this end's paths after
  // the Result (a read's data travels on them, and with --bidir a write's
  // or send's reverse load); HelloAck says how many.
  if (hello.path_reports != 0)
    ack.path_reports = std::min<size_t>(ep.path_stats(conn).size(), kMaxPathReports);
  (void)send_ctrl(ep, conn, ack, ack_out, 1);
  CtrlOut res_out;
  std::array<CtrlOut, kMaxPathReports> report_out;
  const auto t0 = Clock::now();
  bool ok = false;
  Ctrl done{};
  bool got_done = false;
  Idler idler = common.idler();
  // A client that vanished without a DISCONNECT leaves a connection with
  // nothing outstanding here, which the engine's PATH-7 never times out:
  // the server gives the test up after the same peer timeout of silence
  // (a test's client always sends something: data, requests or ACKs).
  const auto silence_limit = std::chrono::milliseconds(common.peer_timeout_ms);
  uint64_t heard = 0;
  auto heard_at = t0, checked_at = t0;
  bool silent = false;
  // Why the connection failed, when a completion says (the first status
  // besides kFlushed, which every other outstanding request gets).
  Status cause = Status::kOk;
  const auto note = [&cause](const Completion& c) {
    if (cause == Status::kOk && c.status != Status::kFlushed) cause = c.status;
  };
  // Clients that connect meanwhile learn that this one's test runs (at once,
  // or once its client is heard: BusyRefuser).
  BusyRefuser busy(conn, ep.peer_address(conn), lobby);
  busy.hold(ep, !once);
  while (!g_stop && !got_done) {
    const size_t moved = round(ep, lobby);
    const uint64_t posted = gen.posted;
    if (bidir && !gen.pump(Generator::kNoLimit)) break;
    Completion cs[64];
    const size_t n = ep.poll_completions(cs, 64);
    idler.step(ep, moved != 0 || n != 0 || gen.posted != posted, Clock::now());
    lobby.take_new(ep);  // the idler's wait() runs rounds too (as round() does after its own)
    for (size_t i = 0; i < n; ++i) {
      // Another connection's (a refused client's work, flushed once it is
      // closed) is never this test's.
      if (busy.on_completion(cs[i]) || cs[i].conn != conn) continue;
      note(cs[i]);
      if (data.on_completion(cs[i])) continue;
      if (bidir) (void)gen.on_completion(cs[i]);
    }
    while (!data.ctrl.empty()) {
      const Ctrl m = data.ctrl.front();
      data.ctrl.pop_front();
      if (m.type == MsgType::kDone) {
        done = m;
        got_done = true;
      }
    }
    const auto st = ep.state(conn);
    if (st == udp::ConnState::kError || st == udp::ConnState::kClosed) break;
    if (const auto now = Clock::now(); now - checked_at >= 100ms) {
      checked_at = now;
      ConnStats st_now{};
      (void)ep.conn_stats(conn, st_now);
      const uint64_t h = heard_from_peer(st_now);
      if (h != heard) {
        heard = h;
        heard_at = now;
      } else if (now - heard_at >= silence_limit) {
        silent = true;
        break;  // a client held meanwhile is served next
      }
    }
    // Held rather than refused while this test could be given up before the
    // newcomer stops waiting for its HelloAck.
    busy.step(ep, true, !once && holds_newcomers(Clock::now() - heard_at, silence_limit));
  }
  // The forward load ends with the client's Done; the reverse load's bytes
  // and time are both taken after its drain, below (its time used to be this
  // one, its bytes those of up to 2 s later: an inflated reverse goodput).
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (silent) {
    std::fprintf(stderr, "test abandoned: nothing heard for %u ms, the peer timeout (%s)\n",
                 common.peer_timeout_ms, peer_and_conn(ep, conn).c_str());
  } else if (!got_done && g_stop) {
    std::fprintf(stderr, "test interrupted (%s)\n", peer_and_conn(ep, conn).c_str());
  } else if (!got_done) {
    Completion c;  // those of the round that found the connection gone
    while (cause == Status::kOk && ep.poll_completion(c))
      if (!busy.on_completion(c) && c.conn == conn) note(c);
    std::fprintf(stderr, "test ended without Done (%s): connection %s\n",
                 peer_and_conn(ep, conn).c_str(), conn_state_text(ep, conn, cause).c_str());
  } else {
    // Let the generator's outstanding work finish before reporting.
    const auto until = Clock::now() + 2s;
    while (bidir && gen.completed < gen.posted && Clock::now() < until) {
      (void)round(ep, lobby);
      Completion cs[64];
      const size_t n = ep.poll_completions(cs, 64);
      for (size_t i = 0; i < n; ++i)
        if (!busy.on_completion(cs[i]) && cs[i].conn == conn && !gen.on_completion(cs[i]))
          data.on_completion(cs[i]);
      busy.step(ep, false);  // a client that connects now is served next
    }
    const auto rev_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    ConnStats cst{};
    (void)ep.conn_stats(conn, cst);
    const ForwardCount fwd = forward_count(tp, data, cst, done);
    Ctrl res;
    res.type = MsgType::kResult;
    // A read's messages are the client's to count: the Result keeps 0 there
    // (server_messages_received), the summary line below gives the Done's.
    const bool served = tp.op != Op::kRead;
    res.messages = served ? fwd.messages : 0;
    res.bytes = served ? fwd.bytes : 0;
    res.verify_errors = data.verify_errors + gen.verify_errors;
    res.rev_messages = gen.completed - gen.errors;
    res.rev_bytes = gen.bytes;
    res.rev_retx = cst.retransmissions;
    res.rev_ns = static_cast<uint64_t>(rev_ns.count());
    (void)send_ctrl(ep, conn, res, res_out, 2);
    send_path_reports(ep, conn, static_cast<size_t>(ack.path_reports), report_out, lobby);
    // Wait for the peer to close (or a short while).
    const auto end = Clock::now() + 3s;
    while (Clock::now() < end && ep.state(conn) == udp::ConnState::kEstablished) {
      (void)round(ep, lobby);
      Completion c;
      while (ep.poll_completion(c)) (void)busy.on_completion(c);
      busy.step(ep, false);  // a client that connects now is served next
    }
    ok = true;
    // Every op's figures (a plain write and a read used to print 0 messages
    // and 0 Gb/s: only receive completions counted), and both ends' of the
    // server's verify errors (the reverse READs' were left out).
    std::printf("test %s size %u qd %u: %" PRIu64 " messages %s, %.3f Gb/s, verify_errors %" PRIu64
                "\n",
                op_name(tp.op), tp.size, tp.qd, fwd.messages, fwd.how,
                dbl(fwd.bytes) * 8 / secs / 1e9, res.verify_errors);
    if (bidir)
      std::printf("  reverse: %" PRIu64 " messages, %.3f Gb/s\n", res.rev_messages,
                  res.rev_ns ? dbl(res.rev_bytes) * 8.0 / dbl(res.rev_ns) : 0.0);
    print_io(io_since(ep.io_stats(), io_at_start), true);
    flush_log();
  }
  busy.finish(ep);
  close_and_drain(ep, conn, lobby);
  release();
  return ok;
}

}  // namespace

ForwardCount forward_count(const TestParams& tp, const Sink& data, const ConnStats& cst,
                           const Ctrl& done) {
  if (tp.op == Op::kSend || (tp.op == Op::kWrite && tp.verify))
    return {data.next_seq, data.bytes, "received"};
  if (tp.op == Op::kWrite) {
    const uint64_t control = 2 * kCtrlBytes;  // the Hello and the Done
    const uint64_t bytes =
        cst.data_bytes_received > control ? cst.data_bytes_received - control : 0;
    return {bytes / tp.size, bytes, "received (from the bytes that arrived)"};
  }
  return {done.messages, done.bytes, "read by the client (its count)"};
}

int run_server(const std::string& addr, const Common& common, bool once) {
  Error err;
  auto ep = UdpEndpoint::open(addr, make_options(common), err);
  if (!ep) {
    std::fprintf(stderr, "metaroce-perf server: %s\n", err.message.c_str());
    return kExitNothingRan;
  }
  std::printf(
      "metaroce-perf server listening on %s (entropy ports %u-%u, gso %s, gro %s, io_uring %s)\n",
      ep->local_address().c_str(), ep->entropy_min(), ep->entropy_max(),
      ep->gso_enabled() ? "on" : "off", ep->gro_enabled() ? "on" : "off",
      ep->uring_enabled() ? "on" : "off");
  flush_log();
  // Clients that connected (held while a test's client was quiet, or while
  // a test ended), served in the order they came.
  Lobby lobby;
  while (!g_stop) {
    std::unique_ptr<Lobby::Arrival> arrival = lobby.take_front();
    if (!arrival) {
      ConnId conn;
      if (!ep->accept(500ms, conn)) lobby.add(*ep, conn);
      lobby.take_new(*ep);  // others the same round established
      continue;
    }
    const bool ok = serve(*ep, std::move(arrival), common, lobby, once);
    // --once: one session, whatever its outcome; its exit status tells which.
    if (once) return ok ? 0 : kExitTestFailed;
  }
  return 0;
}

}  // namespace metaroce::perf
