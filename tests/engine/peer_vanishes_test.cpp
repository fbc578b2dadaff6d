// A peer that disappears: it stops answering mid-transfer (PATH-7, CONN-9),
// restarts and forgets the connection (BAD-7), closes with work outstanding
// (CONN-7), or vanishes during the handshake (CONN-2, CONN-6). Each case is
// held to the completion level: every work request posted completes exactly
// once with the status the spec gives it (COMP-4, COMP-5), nothing is placed
// after the connection failed or closed, the events say why, and the timers
// neither spin nor go quiet while work waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine_util.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint64_t kPeerTimeout = 2 * kSecond;  // the defaults these tests pin
constexpr uint64_t kKeepalive = 10 * kSecond;

bool is_data(const std::vector<uint8_t>& d) {
  using wire::Opcode;
  const auto op = static_cast<Opcode>(d[1]);
  return op != Opcode::kAck && op != Opcode::kNak && op != Opcode::kProbe &&
         op != Opcode::kConnectReq && op != Opcode::kConnectAccept &&
         op != Opcode::kConnectReject && op != Opcode::kDisconnect && op != Opcode::kDisconnectAck;
}

struct Done {
  Completion c;
  TimeNs at;
};

struct Seen {
  Event ev;
  TimeNs at;
};

// The books of both endpoints: what was posted, what completed and when, the
// events, and the two timer faults a driver would suffer: a deadline that
// stays due (the driver spins) and none while work waits (it sleeps for
// ever). Not copyable: run_until copies its predicate, so hand it lambdas.
class Books {
 public:
  Books(const Books&) = delete;
  Books& operator=(const Books&) = delete;
  explicit Books(Loop& loop) : loop_(loop) {}

  Status send(int i, ConnId c, const SendWr& wr) {
    const Status s = loop_.ep(i).post_send(c, wr);
    if (s == Status::kOk) posted_[i][wr.wr_id] = c;
    return s;
  }
  Status recv(int i, ConnId c, uint64_t id, const Buf& into, size_t off, uint32_t len) {
    const Status s = loop_.ep(i).post_recv(c, RecvWr{id, into.addr(off), len, into.mr.lkey});
    if (s == Status::kOk) posted_[i][id] = c;
    return s;
  }

  // Takes in completions and events and checks the timers; called by run()
  // after each step of the loop.
  void observe() {
    for (int i = 0; i < 2; ++i) {
      Completion c;
      while (loop_.ep(i).poll_completion(c)) {
        EXPECT_TRUE(posted_[i].count(c.wr_id))
            << "ep " << i << ": completion of wr " << c.wr_id << ", never posted";
        EXPECT_FALSE(done_[i].count(c.wr_id))
            << "ep " << i << ": wr " << c.wr_id << " completed twice";
        done_[i].emplace(c.wr_id, Done{c, loop_.now()});
      }
      Event ev;
      while (loop_.ep(i).poll_event(ev)) events_[i].push_back(Seen{ev, loop_.now()});
      const TimeNs next = loop_.ep(i).next_timeout();
      if (outstanding(i) > 0 && next == TimeNs::never() && !quiet_reported_[i]) {
        quiet_reported_[i] = true;
        ADD_FAILURE() << "ep " << i << ": no deadline with " << outstanding(i)
                      << " work requests outstanding, at " << loop_.now().ns;
      }
    }
    // A deadline due again right after it was served: the loop steps by at
    // most a nanosecond.
    stalled_ = loop_.now().since(last_) <= 1 ? stalled_ + 1 : 0;
    last_ = loop_.now();
    if (stalled_ > 1000 && !spin_reported_) {
      spin_reported_ = true;
      ADD_FAILURE() << "timers spin at " << loop_.now().ns;
    }
  }

  // Runs until pred(), observing each step; false if the time ran out first.
  bool run(const std::function<bool()>& pred, uint64_t limit_ns) {
    return loop_.run_until(
        [&] {
          observe();
          return spin_reported_ || pred();
        },
        limit_ns);
  }
  void run_for(uint64_t ns) {
    run([] { return false; }, ns);
  }

  // Endpoint i's process went (Loop::restart): what it had posted went with it.
  void forget(int i) {
    posted_[i].clear();
    done_[i].clear();
    events_[i].clear();
  }

  size_t outstanding(int i) const { return posted_[i].size() - done_[i].size(); }
  bool all_done() const { return outstanding(0) == 0 && outstanding(1) == 0; }
  const Done* done(int i, uint64_t id) const {
    auto it = done_[i].find(id);
    return it == done_[i].end() ? nullptr : &it->second;
  }
  Status status(int i, uint64_t id) const {
    const Done* d = done(i, id);
    return d == nullptr ? Status::kInvalidArgument : d->c.status;
  }
  // The n-th event of endpoint i about conn (from 0), or null.
  const Seen* event(int i, ConnId c, size_t n = 0) const {
    for (const Seen& s : events_[i])
      if (s.ev.conn == c && n-- == 0) return &s;
    return nullptr;
  }
  // The first event of endpoint i of that kind, or null.
  const Seen* first(int i, EventKind kind) const {
    for (const Seen& s : events_[i])
      if (s.ev.kind == kind) return &s;
    return nullptr;
  }
  size_t events_about(int i, ConnId c) const {
    size_t n = 0;
    for (const Seen& s : events_[i]) n += s.ev.conn == c;
    return n;
  }

 private:
  Loop& loop_;
  std::map<uint64_t, ConnId> posted_[2];
  std::map<uint64_t, Done> done_[2];
  std::vector<Seen> events_[2];
  bool quiet_reported_[2] = {false, false};
  TimeNs last_{};
  uint64_t stalled_ = 0;
  bool spin_reported_ = false;
};

::testing::AssertionResult event_is(const Seen* s, EventKind kind, Status status,
                                    Status reason = Status::kOk) {
  if (s == nullptr) return ::testing::AssertionFailure() << "no event";
  if (s->ev.kind == kind && s->ev.status == status && s->ev.reason == reason)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "event kind " << static_cast<int>(s->ev.kind) << ", status "
         << status_name(s->ev.status) << ", reason " << status_name(s->ev.reason);
}

// Within `slack` of `want`, in ns.
::testing::AssertionResult near(TimeNs got, TimeNs want, uint64_t slack) {
  const uint64_t d = got.ns > want.ns ? got.ns - want.ns : want.ns - got.ns;
  if (d <= slack) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "at " << got.ns << ", want " << want.ns << " +- " << slack << " (off by " << d << ")";
}

// The network between the two ends goes once endpoint `from` has sent
// `after` data packets: every datagram after that is dropped, except that
// those of endpoint `late` (if 0 or 1) are held back `late_ns` instead (a
// queue that drains long after, or a paused peer). `healed` brings it back.
struct Cut {
  bool on = false;
  bool healed = false;
  TimeNs at{};
  std::vector<TimeNs> late_data_lands;  // when each data packet of `late` held back lands
};

// How many held-back data packets land in (after, until]: the premise of a
// test whose failed end must place none of them. The packet that turns the
// cut on is held back too, so a count of 1 shows only that the cut happened.
size_t landing(const Cut& cut, TimeNs after, TimeNs until) {
  return static_cast<size_t>(std::count_if(cut.late_data_lands.begin(), cut.late_data_lands.end(),
                                           [&](TimeNs t) { return after < t && t <= until; }));
}

void cut_after(Loop& loop, Cut& cut, int from, uint64_t after, int late = -1,
               uint64_t late_ns = 0) {
  loop.drop = [&loop, &cut, from, after, late, late_ns, seen = uint64_t{0}](
                  int f, const std::vector<uint8_t>& d) mutable {
    if (!cut.on && f == from && is_data(d) && ++seen > after) {
      cut.on = true;
      cut.at = loop.now();
    }
    if (cut.on && !cut.healed && f == late) {
      if (is_data(d)) cut.late_data_lands.push_back(loop.now() + loop.delay_ns + late_ns);
      return false;
    }
    return cut.on && !cut.healed;
  };
  loop.extra_delay = [&cut, late, late_ns](int f, const std::vector<uint8_t>&) -> uint64_t {
    return cut.on && !cut.healed && f == late ? late_ns : 0;
  };
}

// The set-up of the cases where the network goes: two ends connected in a
// Loop, their Books, and the Cut that cut_after(from, after, late, late_ns)
// makes. Not copyable: the Loop's hooks and the Books hold its members.
struct CutLoop {
  CutLoop(const EndpointConfig& c0, const EndpointConfig& c1, int from, uint64_t after,
          int late = -1, uint64_t late_ns = 0)
      : loop(c0, c1), k(loop) {
    std::tie(a, b) = loop.connect();
    cut_after(loop, cut, from, after, late, late_ns);
  }
  CutLoop(const CutLoop&) = delete;
  CutLoop& operator=(const CutLoop&) = delete;

  Loop loop;
  ConnId a, b;
  Books k;
  Cut cut;
};

// Work requests `ids` of endpoint i, posted in that order, after a timeout
// at `at`: a prefix completed kOk before it, the oldest one not completed
// kPeerUnreachable at `at`, every later one kFlushed (COMP-5).
void expect_timed_out(const Books& k, int i, std::initializer_list<uint64_t> ids, TimeNs at) {
  bool named = false;
  for (const uint64_t id : ids) {
    const Done* d = k.done(i, id);
    ASSERT_NE(d, nullptr) << "wr " << id << " never completed";
    if (!named && d->c.status == Status::kOk) continue;
    EXPECT_EQ(d->c.status, named ? Status::kFlushed : Status::kPeerUnreachable) << "wr " << id;
    EXPECT_TRUE(near(d->at, at, 100 * kMicrosecond)) << "wr " << id;
    named = true;
  }
  EXPECT_TRUE(named) << "every request completed kOk: no timeout to see";
}

// ---- 1. The peer stops answering mid-transfer --------------------------------

// WRITEs under way when the network between the two ends goes. The writer
// hears no acknowledgement for peer_timeout and fails (PATH-7): the oldest
// WRITE not yet completed kPeerUnreachable, the later ones kFlushed (COMP-5),
// event kError kPeerUnreachable. The receiver, with nothing of its own
// outstanding, fails by its keepalive (CONN-9): keepalive + peer_timeout
// after the last packet it handled. Once the writer has failed it sends no
// data even where the network comes back, and its keepalive PROBEs draw no
// answer from the failed end (NAK-2: a timeout answers nothing).
TEST(PeerVanishes, WritesMidTransferFailAtThePeerTimeout) {  // PATH-7, CONN-9, COMP-5
  CutLoop setup(cfg(4601), cfg(4602), 0, 100);
  auto& [loop, a, b, k, cut] = setup;
  uint64_t data_from_0 = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    data_from_0 += from == 0 && is_data(d);
  };
  constexpr uint32_t kLen = 256 * 1024;  // 64 packets each
  Buf src(loop.ep(0), 4 * kLen, 0, 0x11);
  pattern(src.bytes, 3);
  Buf dst(loop.ep(1), 4 * kLen, kAccessRemoteWrite);
  for (uint64_t id = 1; id <= 4; ++id)
    ASSERT_EQ(k.send(0, a, write_wr(src, dst, kLen, id, (id - 1) * kLen)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.outstanding(0) == 0; }, 3 * kSecond));
  ASSERT_TRUE(cut.on);
  expect_timed_out(k, 0, {1, 2, 3, 4}, cut.at + kPeerTimeout);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_FALSE(loop.ep(0).is_established(a));
  // Work posted to the failed connection is refused at once, never queued.
  EXPECT_EQ(k.send(0, a, write_wr(src, dst, 4096, 5)), Status::kNotConnected);
  Buf late_rq(loop.ep(0), 4096, kAccessLocalWrite);
  EXPECT_EQ(k.recv(0, a, 6, late_rq, 0, 4096), Status::kNotConnected);
  // The network comes back; the failed writer sends and places nothing more.
  cut.healed = true;
  const std::vector<uint8_t> placed = dst.bytes;
  const uint64_t data_at_failure = data_from_0;
  ASSERT_TRUE(k.run([&] { return k.event(1, b) != nullptr; }, 15 * kSecond));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(near(k.event(1, b)->at, cut.at + kKeepalive + kPeerTimeout, 100 * kMicrosecond));
  EXPECT_EQ(data_from_0, data_at_failure) << "data sent by a failed connection";
  EXPECT_EQ(dst.bytes, placed);
  EXPECT_EQ(k.events_about(0, a), 1u);
  EXPECT_EQ(k.events_about(1, b), 1u);
}

// A READ of ours and a READ the peer asked of us, both under way when the
// network goes one way and the other way is held back 3 s. Each end has data
// outstanding (its READ, and the responses it sent unacknowledged, PATH-7)
// and fails at peer_timeout; then the held-back responses reach the failed
// requester, which places none of them in the READ's target: its
// application got that buffer back with the completion.
TEST(PeerVanishes, ReadsBothWaysFailAndLateResponsesAreNotPlaced) {  // PATH-7, COMP-5, NAK-2
  CutLoop setup(cfg(4603), cfg(4604), 1, 60, 1, 3 * kSecond);
  auto& [loop, a, b, k, cut] = setup;
  constexpr uint32_t kLen = 1 << 20;
  Buf a_src(loop.ep(0), kLen, kAccessRemoteRead, 0);
  pattern(a_src.bytes, 5);
  Buf a_into(loop.ep(0), kLen, kAccessLocalWrite);
  Buf b_src(loop.ep(1), kLen, kAccessRemoteRead, 0);
  pattern(b_src.bytes, 9);
  Buf b_into(loop.ep(1), kLen, kAccessLocalWrite);
  ASSERT_EQ(k.send(0, a, read_wr(a_into, b_src.addr(), b_src.mr.rkey, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(1, b, read_wr(b_into, a_src.addr(), a_src.mr.rkey, kLen, 2)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.all_done(); }, 3 * kSecond));
  ASSERT_TRUE(cut.on);
  expect_timed_out(k, 0, {1}, cut.at + kPeerTimeout);
  expect_timed_out(k, 1, {2}, cut.at + kPeerTimeout);
  ASSERT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kError, Status::kPeerUnreachable));
  const std::vector<uint8_t> a_placed = a_into.bytes;
  // The premise: responses held back land at the failed requester after it
  // failed, more than the one that turned the cut on.
  ASSERT_GT(landing(cut, k.event(0, a)->at, loop.now() + 2 * kSecond), 1u);
  k.run_for(2 * kSecond);  // they arrive
  EXPECT_EQ(a_into.bytes, a_placed) << "READ responses placed after the READ failed";
  EXPECT_EQ(k.events_about(0, a), 1u);
  EXPECT_EQ(k.events_about(1, b), 1u);
}

// SENDs both ways, receives posted on both sides, the network gone one way
// and held back 3 s the other. At peer_timeout each end fails: its oldest
// SEND not completed kPeerUnreachable, the rest of its send queue and every
// receive not yet completed kFlushed (a receive never gets the timeout's
// code, COMP-5). The held-back SENDs then reach the failed end, which places
// none of them in the receive buffers it has handed back.
TEST(PeerVanishes, SendsBothWaysFailAndNothingLandsInFlushedReceives) {  // PATH-7, COMP-5
  CutLoop setup(cfg(4605), cfg(4606), 1, 40, 1, 3 * kSecond);
  auto& [loop, a, b, k, cut] = setup;
  constexpr uint32_t kLen = 128 * 1024;  // 32 packets each
  Buf a_src(loop.ep(0), 3 * kLen, 0, 0x21);
  Buf b_src(loop.ep(1), 3 * kLen, 0, 0x22);
  Buf a_rq(loop.ep(0), 4 * kLen, kAccessLocalWrite);
  Buf b_rq(loop.ep(1), 4 * kLen, kAccessLocalWrite);
  for (uint64_t n = 0; n < 4; ++n) {
    ASSERT_EQ(k.recv(0, a, 100 + n, a_rq, n * kLen, kLen), Status::kOk);
    ASSERT_EQ(k.recv(1, b, 200 + n, b_rq, n * kLen, kLen), Status::kOk);
  }
  for (uint64_t n = 0; n < 3; ++n) {
    ASSERT_EQ(k.send(0, a, send_wr(a_src, n * kLen, kLen, 10 + n)), Status::kOk);
    ASSERT_EQ(k.send(1, b, send_wr(b_src, n * kLen, kLen, 20 + n)), Status::kOk);
  }
  ASSERT_TRUE(k.run([&] { return k.all_done(); }, 3 * kSecond));
  ASSERT_TRUE(cut.on);
  expect_timed_out(k, 0, {10, 11, 12}, cut.at + kPeerTimeout);
  expect_timed_out(k, 1, {20, 21, 22}, cut.at + kPeerTimeout);
  for (int i = 0; i < 2; ++i) {
    for (uint64_t n = 0; n < 4; ++n) {
      const Status s = k.status(i, (i == 0 ? 100 : 200) + n);
      EXPECT_TRUE(s == Status::kOk || s == Status::kFlushed) << n << " " << status_name(s);
    }
    EXPECT_EQ(k.status(i, i == 0 ? 103 : 203), Status::kFlushed);  // three SENDs came
  }
  ASSERT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kError, Status::kPeerUnreachable));
  const std::vector<uint8_t> a_placed = a_rq.bytes;
  // The premise: SENDs held back land at the failed end after it failed,
  // more than the one that turned the cut on.
  ASSERT_GT(landing(cut, k.event(0, a)->at, loop.now() + 2 * kSecond), 1u);
  k.run_for(2 * kSecond);
  EXPECT_EQ(a_rq.bytes, a_placed) << "SEND bytes placed in receives the failure handed back";
  EXPECT_EQ(k.events_about(0, a), 1u);
  EXPECT_EQ(k.events_about(1, b), 1u);
}

// Receives posted only: no work that PATH-7 times, so the end learns of the
// silence by its keepalive (CONN-9) and fails keepalive + peer_timeout after
// the last packet it handled, its receives all kFlushed; the peer, whose
// SENDs were under way, fails at its peer_timeout.
TEST(PeerVanishes, ReceivesOnlyFailByTheKeepalive) {  // CONN-9, PATH-7, COMP-5
  CutLoop setup(cfg(4607), cfg(4608), 1, 20);
  auto& [loop, a, b, k, cut] = setup;
  constexpr uint32_t kLen = 64 * 1024;
  Buf rq(loop.ep(0), 4 * kLen, kAccessLocalWrite);
  Buf src(loop.ep(1), 4 * kLen, 0, 0x31);
  for (uint64_t n = 0; n < 4; ++n)
    ASSERT_EQ(k.recv(0, a, 100 + n, rq, n * kLen, kLen), Status::kOk);
  for (uint64_t n = 0; n < 4; ++n)
    ASSERT_EQ(k.send(1, b, send_wr(src, n * kLen, kLen, 200 + n)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.all_done() && k.event(0, a) != nullptr; }, 20 * kSecond));
  ASSERT_TRUE(cut.on);
  expect_timed_out(k, 1, {200, 201, 202, 203}, cut.at + kPeerTimeout);
  for (uint64_t id = 100; id < 104; ++id) {
    const Done* d = k.done(0, id);
    if (d->c.status == Status::kOk) continue;
    EXPECT_EQ(d->c.status, Status::kFlushed) << id;
    EXPECT_TRUE(near(d->at, cut.at + kKeepalive + kPeerTimeout, 100 * kMicrosecond));
  }
  EXPECT_EQ(k.status(0, 103), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kError, Status::kPeerUnreachable));
}

// A SEND that draws RNR NAKs (no receive posted at the peer) when the peer
// goes: the RNR NAKs were progress (PATH-7: a NAK about outstanding work),
// so the peer timeout counts from the last of them, and the SEND, resent
// after each pause (LOSS-7) into the silence, fails kPeerUnreachable then.
TEST(PeerVanishes, ASendRetriedForRnrFailsPeerTimeoutAfterTheLastNak) {  // PATH-7, LOSS-7
  Loop loop(cfg(4609), cfg(4610));
  auto [a, b] = loop.connect();
  Books k(loop);
  int naks = 0;
  TimeNs last_nak{};
  bool cut = false;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (cut) return true;
    if (from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kNak)) {
      last_nak = loop.now();
      cut = ++naks == 5;  // this one arrives; nothing after it
    }
    return false;
  };
  Buf src(loop.ep(0), 8192, 0, 0xa1);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, 8192, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, 100, 2)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.outstanding(0) == 0; }, 3 * kSecond));
  ASSERT_TRUE(cut);
  expect_timed_out(k, 0, {1, 2}, last_nak + loop.delay_ns + kPeerTimeout);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  (void)b;
}

// Endpoint 1 of a connected loop has a WRITE outstanding that nothing
// acknowledges; `d`, a packet of endpoint 0's, reaches it in the same turn
// as its PATH-7 deadline, which then fails the connection, and the driver
// drains poll_transmit after both, as an event loop does: the opcodes sent.
std::vector<int> sent_in_the_failing_turn(Loop& loop, ConnId b, const std::vector<uint8_t>& d,
                                          uint16_t entropy) {
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 1; };
  Buf src1(loop.ep(1), 4096, 0, 0x22);
  Buf dst0(loop.ep(0), 4096, kAccessRemoteWrite);
  EXPECT_EQ(loop.ep(1).post_send(b, write_wr(src1, dst0, 4096, 99)), Status::kOk);
  EXPECT_TRUE(loop.run_until([] { return true; }));  // sent (and dropped)
  loop.pass_time(kPeerTimeout + kSecond);            // the driver slept past the deadline
  loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), entropy, false, d, false}, loop.now());
  // Due at once (the engine may ask for the next nanosecond).
  const TimeNs now = loop.ep(1).next_timeout();
  EXPECT_LE(now, loop.now() + 1);
  loop.ep(1).handle_timeout(now);
  Event ev;
  EXPECT_TRUE(loop.ep(1).poll_event(ev));
  EXPECT_EQ(ev.kind, EventKind::kError);
  EXPECT_EQ(ev.status, Status::kPeerUnreachable);
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  std::vector<int> sent;
  while (sent.size() < 10 && loop.ep(1).poll_transmit(now, buf, tx)) sent.push_back(buf[1]);
  return sent;
}

// NAK-2: a connection that entered ERROR for another reason than its own
// fatal NAK answers nothing, not even with an ACK it owed when it failed: a
// duplicate of endpoint 0's data packet draws an immediate ACK (ACK-3) just
// before the timeout.
TEST(PeerVanishes, AnAckOwedWhenAPeerTimeoutFailsTheConnectionIsNotSent) {  // NAK-2, PATH-7
  Loop loop(cfg(4631), cfg(4632));
  auto [a, b] = loop.connect();
  std::vector<uint8_t> dup;
  uint16_t dup_entropy = 0;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    if (from == 0 && is_data(d) && dup.empty()) {
      dup = d;
      dup_entropy = tx.entropy;
    }
  };
  Buf src0(loop.ep(0), 4096, 0, 0x11);
  Buf dst1(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_TRUE(write_completes(loop, a, src0, dst1, 4096));
  ASSERT_FALSE(dup.empty());
  loop.on_sent = nullptr;
  EXPECT_EQ(sent_in_the_failing_turn(loop, b, dup, dup_entropy), std::vector<int>{});
}

// The same for an RNR NAK owed (LOSS-7): a SEND of endpoint 0's, which
// endpoint 1 has no receive for, arrives just before the timeout.
TEST(PeerVanishes, AnRnrNakOwedWhenAPeerTimeoutFailsTheConnectionIsNotSent) {  // NAK-2, PATH-7
  Loop loop(cfg(4633), cfg(4634));
  auto [a, b] = loop.connect();
  std::vector<uint8_t> send;
  uint16_t send_entropy = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 0 || !is_data(d)) return false;
    if (send.empty()) send = d;
    return true;
  };
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    if (from == 0 && is_data(d) && send_entropy == 0) send_entropy = tx.entropy;
  };
  Buf src0(loop.ep(0), 1000, 0, 0x11);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src0, 0, 1000)), Status::kOk);
  ASSERT_TRUE(loop.run_until([] { return true; }));
  ASSERT_FALSE(send.empty());
  loop.on_sent = nullptr;
  EXPECT_EQ(sent_in_the_failing_turn(loop, b, send, send_entropy), std::vector<int>{});
}

// A READ responder with read_served_events reports a READ served only once
// every response was acknowledged: the requester's READs that failed with
// the peer gone are never reported served, the one completed kOk is, once.
// The responder goes silent (every datagram of its own lost) from its first
// response to the second READ on, so the requester's ACKs of the first
// READ's responses still reach it.
TEST(PeerVanishes, AReadServedIsReportedOnlyIfTheRequesterGotIt) {  // PATH-7, MR-5
  EndpointConfig c1 = cfg(4618);
  c1.read_served_events = true;
  Loop loop(cfg(4617), c1);
  auto [a, b] = loop.connect();
  Books k(loop);
  constexpr uint32_t kLen = 1 << 20;
  constexpr uint64_t kResponses = kLen / 4096;  // each READ's
  Cut cut;
  loop.drop = [&loop, &cut, sent = uint64_t{0}](int f, const std::vector<uint8_t>& d) mutable {
    if (f != 1) return false;
    if (!cut.on && is_data(d) && ++sent > kResponses) {
      cut.on = true;
      cut.at = loop.now();
    }
    return cut.on;
  };
  Buf src(loop.ep(1), 3 * kLen, kAccessRemoteRead, 0xb1);
  Buf into(loop.ep(0), 3 * kLen, kAccessLocalWrite);
  for (uint64_t n = 0; n < 3; ++n)
    ASSERT_EQ(k.send(0, a, read_wr(into, src.addr(n * kLen), src.mr.rkey, kLen, 1 + n)),
              Status::kOk);
  ASSERT_TRUE(
      k.run([&] { return k.outstanding(0) == 0 && k.event(1, b) != nullptr; }, 15 * kSecond));
  ASSERT_TRUE(cut.on);
  expect_timed_out(k, 0, {1, 2, 3}, cut.at + kPeerTimeout);
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kError, Status::kPeerUnreachable));
  uint64_t ok = 0;
  for (uint64_t id = 1; id <= 3; ++id) ok += k.status(0, id) == Status::kOk;
  std::vector<ReadServed> served;
  ReadServed r;
  while (loop.ep(1).poll_read_served(r)) served.push_back(r);
  ASSERT_EQ(ok, 1u);  // the premise: READ 1 went through before the cut, 2 and 3 did not
  ASSERT_EQ(k.status(0, 1), Status::kOk);
  // READ 1, completed, is reported once; READs 2 and 3, failed, never.
  ASSERT_EQ(served.size(), 1u) << "READs reported served: not READ 1 alone";
  EXPECT_EQ(served[0].conn, b);
  EXPECT_EQ(served[0].lkey, src.mr.lkey);
  EXPECT_EQ(served[0].addr, src.addr(0));
  EXPECT_EQ(served[0].length, kLen);
}

// Shared receives (PLACE-6) a connection had taken when its peer went: the
// connection fails by its keepalive and gives them back, uncompleted, and
// each completes once, on the connection whose message then fills it.
TEST(PeerVanishes, SharedReceivesTakenWhenThePeerWentAreGivenBack) {  // PLACE-6, CONN-9, COMP-4
  EndpointConfig c0 = cfg(4619);
  c0.shared_rq_depth = 4;
  CutLoop setup(c0, cfg(4620), 1, 20);
  auto& [loop, a, b, k, cut] = setup;
  constexpr uint32_t kLen = 256 * 1024;
  Buf srq(loop.ep(0), 2 * kLen, kAccessLocalWrite);
  for (uint64_t n = 0; n < 2; ++n)
    ASSERT_EQ(loop.ep(0).post_shared_recv(RecvWr{300 + n, srq.addr(n * kLen), kLen, srq.mr.lkey}),
              Status::kOk);
  Buf src(loop.ep(1), kLen, 0, 0xc1);
  ASSERT_EQ(k.send(1, b, send_wr(src, 0, kLen, 20)), Status::kOk);
  ASSERT_EQ(k.send(1, b, send_wr(src, 0, kLen, 21)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.all_done() && k.event(0, a) != nullptr; }, 15 * kSecond));
  expect_timed_out(k, 1, {20, 21}, cut.at + kPeerTimeout);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(loop.drain(0).empty()) << "a shared receive completed with its connection";
  // The peer's application connects again; its SENDs fill the two receives.
  cut.healed = true;
  ConnId nb;
  ASSERT_EQ(loop.ep(1).connect(loop.addr(0), loop.now(), nb), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.event(1, nb) != nullptr; }, kSecond));
  Buf src2(loop.ep(1), kLen, 0, 0xc2);
  ASSERT_EQ(k.send(1, nb, send_wr(src2, 0, kLen, 22)), Status::kOk);
  ASSERT_EQ(k.send(1, nb, send_wr(src2, 0, kLen, 23)), Status::kOk);
  std::vector<Completion> got;
  ASSERT_TRUE(loop.run_until_completions(0, 2, got));
  k.run_for(kMillisecond);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 300u);
  EXPECT_EQ(got[1].wr_id, 301u);
  for (const Completion& c : got) {
    EXPECT_EQ(c.status, Status::kOk);
    EXPECT_NE(c.conn, a);
  }
  EXPECT_TRUE(std::equal(src2.bytes.begin(), src2.bytes.end(), srq.bytes.begin()));
  EXPECT_EQ(k.status(1, 22), Status::kOk);
  EXPECT_EQ(k.status(1, 23), Status::kOk);
}

// How the peer goes in a random case.
enum class Goes { kSilent, kRestarts, kCloses };

// One random mix of work both ways, the peer going at a random point:
// kSilent, the network gone; kRestarts, endpoint r replaced by a fresh one
// at the same address; kCloses, endpoint r's application closing the
// connection. In some, the packets one end sent before arrive 3 s late.
// Every request completes once, in its queue's order: a prefix kOk, then
// the end's code for the rest (at most one kPeerUnreachable first after a
// timeout, never on a receive); one event each, with the right kind and
// status; the timers neither spin nor go quiet (Books); and no byte lands
// in an end's memory after its connection failed or closed.
void random_case(uint64_t seed, Goes goes) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  EndpointConfig c[2] = {cfg(5000 + 2 * seed), cfg(5001 + 2 * seed)};
  for (EndpointConfig& e : c) e.num_paths = static_cast<uint8_t>(1u << pick(4));  // 1 to 8
  Loop loop(c[0], c[1]);
  auto [a, b] = loop.connect();
  const ConnId conn[2] = {a, b};
  Books k(loop);
  Cut cut;
  const int r = static_cast<int>(pick(2));  // the end that restarts or closes
  const bool late = pick(2) == 1;
  cut_after(loop, cut, static_cast<int>(pick(2)), pick(300), late ? static_cast<int>(pick(2)) : -1,
            3 * kSecond);
  // Each end's memory: what the peer writes and reads, its READ targets and
  // its receive buffers, carved in posting order.
  std::vector<std::unique_ptr<Buf>> mem;
  for (int i = 0; i < 2; ++i)
    mem.push_back(std::make_unique<Buf>(loop.ep(i), 4 << 20,
                                        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead,
                                        static_cast<uint8_t>(0x40 + i)));
  size_t used[2] = {0, 0};
  std::vector<uint64_t> sends[2], recvs[2];
  uint64_t id = 1;
  for (int i = 0; i < 2; ++i) {
    const int j = 1 - i;
    const uint64_t nrecv = pick(5);
    for (uint64_t n = 0; n < nrecv; ++n, ++id) {
      const auto len = static_cast<uint32_t>(4096 + pick(128 * 1024));  // a SEND fits
      ASSERT_EQ(k.recv(i, conn[i], id, *mem[i], used[i], len), Status::kOk);
      used[i] += len;
      recvs[i].push_back(id);
    }
    const uint64_t nsend = 1 + pick(4);
    for (uint64_t n = 0; n < nsend; ++n, ++id) {
      const auto len = static_cast<uint32_t>(1 + pick(256 * 1024));
      SendWr wr;
      switch (pick(3)) {
        case 0:
          wr = write_wr(*mem[i], *mem[j], len, id, used[j]);
          used[j] += len;
          break;
        case 1:
          wr = read_wr(*mem[i], mem[j]->addr(used[j]), mem[j]->mr.rkey, len, id);
          wr.local_addr = mem[i]->addr(used[i]);
          used[i] += len;
          used[j] += len;
          break;
        default: wr = send_wr(*mem[i], used[i], std::min<uint32_t>(len, 4096), id); break;
      }
      ASSERT_EQ(k.send(i, conn[i], wr), Status::kOk);
      sends[i].push_back(id);
    }
  }
  ASSERT_LE(std::max(used[0], used[1]), size_t{4 << 20});
  // Each end's bytes when its connection ended (the closing end's: when it
  // called close), and when its requests were last completed kOk.
  std::vector<uint8_t> at_end[2];
  bool gone = false;  // the restart or close has happened
  TimeNs gone_at{};
  const TimeNs start = loop.now();
  const bool finished = k.run(
      [&] {
        for (int i = 0; i < 2; ++i)
          if (at_end[i].empty() && k.event(i, conn[i]) != nullptr) at_end[i] = mem[i]->bytes;
        // All sent before the cut came, or a SEND retried for want of a
        // receive (RNR, LOSS-7: for as long as the peer answers): cut now.
        bool sent = true;
        for (int i = 0; i < 2; ++i)
          for (const uint64_t s : sends[i]) sent &= k.done(i, s) != nullptr;
        if ((sent || loop.now().since(start) > 100 * kMillisecond) && !cut.on) {
          cut.on = true;
          cut.at = loop.now();
        }
        if (cut.on && !gone && goes != Goes::kSilent) {
          gone = true;
          gone_at = loop.now();
          cut.healed = true;
          if (goes == Goes::kRestarts) {
            loop.restart(r, cfg(7000 + seed));
            k.forget(r);
          } else {
            at_end[r] = mem[r]->bytes;
            loop.ep(r).close(conn[r], loop.now());
          }
        }
        const bool ended_0 = k.event(0, a) || (goes == Goes::kRestarts && gone && r == 0);
        const bool ended_1 = k.event(1, b) || (goes == Goes::kRestarts && gone && r == 1);
        return k.all_done() && ended_0 && ended_1;
      },
      30 * kSecond);
  ASSERT_TRUE(finished) << "cut " << cut.on << " at " << cut.at.ns << ", outstanding "
                        << k.outstanding(0) << " and " << k.outstanding(1);
  k.run_for(4 * kSecond);  // what was held back arrives
  for (int i = 0; i < 2; ++i) {
    if (goes == Goes::kRestarts && i == r) continue;  // its process went
    SCOPED_TRACE("endpoint " + std::to_string(i));
    const bool closer = goes == Goes::kCloses && i == r;
    const bool told = goes == Goes::kCloses && i != r;
    // After a timeout the oldest not completed is the timeout's; a close
    // flushes everything, the peer's DISCONNECT ends everything kPeerClosed.
    const Status rest = told ? Status::kPeerClosed : Status::kFlushed;
    bool named = closer || told;
    bool ended = false;
    for (const uint64_t s : sends[i]) {
      const Status st = k.status(i, s);
      if (!ended && st == Status::kOk) continue;
      ended = true;
      if (!named && st == Status::kPeerUnreachable) {
        named = true;
        continue;
      }
      named = true;
      EXPECT_EQ(st, rest) << "wr " << s << " " << status_name(st);
    }
    for (const uint64_t x : recvs[i]) {
      const Status st = k.status(i, x);
      EXPECT_TRUE(st == Status::kOk || st == rest) << "wr " << x << " " << status_name(st);
    }
    EXPECT_EQ(k.events_about(i, conn[i]), 1u);
    if (closer) {
      EXPECT_TRUE(event_is(k.event(i, conn[i]), EventKind::kClosed, Status::kOk));
    } else if (told) {
      EXPECT_TRUE(event_is(k.event(i, conn[i]), EventKind::kClosed, Status::kPeerClosed));
    } else {
      EXPECT_TRUE(event_is(k.event(i, conn[i]), EventKind::kError, Status::kPeerUnreachable));
    }
    EXPECT_TRUE(mem[i]->bytes == at_end[i]) << "bytes placed after the connection ended";
  }
}

// Many such cases, the peer silent, restarted or closing.
TEST(PeerVanishes, RandomWorkAndRandomCutsCompleteEveryRequestOnce) {  // COMP-4, COMP-5, PATH-7
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_case(seed, Goes::kSilent);
  }
}
TEST(PeerVanishes, RandomWorkAndARestartCompleteEveryRequestOnce) {  // COMP-4, BAD-7, PATH-7
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_case(seed, Goes::kRestarts);
  }
}
TEST(PeerVanishes, RandomWorkAndACloseCompleteEveryRequestOnce) {  // COMP-4, CONN-7
  for (uint64_t seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    random_case(seed, Goes::kCloses);
  }
}

// ---- 2. The peer restarts and forgets the connection -------------------------

// Endpoint 1 restarts with the same address while endpoint 0 has a WRITE, a
// READ and a SEND outstanding and receives posted. The new endpoint knows no
// such connection: it drops every packet and answers none (BAD-7, no reply
// to an unknown dst_conn), so endpoint 0 learns only at PATH-7's
// peer_timeout. Closing the failed connection then sends DISCONNECTs that
// are dropped the same way: the close ends kPeerUnreachable after the
// budget (CONN-7). A new connection between the two works, also one made
// while the old connection was still waiting.
TEST(PeerVanishes, APeerRestartedAnswersNothingAndTheOldSideTimesOut) {  // BAD-7, PATH-7, CONN-7
  Loop loop(cfg(4611), cfg(4612));
  auto [a, b] = loop.connect();
  Books k(loop);
  constexpr uint32_t kLen = 256 * 1024;
  Buf src(loop.ep(0), kLen, 0, 0x41);
  Buf into(loop.ep(0), kLen, kAccessLocalWrite);
  Buf rq(loop.ep(0), kLen, kAccessLocalWrite);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite | kAccessRemoteRead);
  ASSERT_EQ(k.recv(0, a, 100, rq, 0, kLen), Status::kOk);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, read_wr(into, dst.addr(), dst.mr.rkey, kLen, 2)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, 4096, 3)), Status::kOk);
  ASSERT_TRUE(
      k.run([&] { return loop.ep(1).conn_stats(b)->data_packets_received >= 20; }, kSecond));
  loop.restart(1, cfg(4613));
  const TimeNs restart_at = loop.now();
  uint64_t from_new_b = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>&) {
    from_new_b += from == 1;
  };
  // A connection made to the new endpoint while the old one waits.
  ConnId na;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), na), Status::kOk);
  ConnId nb;
  ASSERT_TRUE(k.run([&] { return k.event(0, na) != nullptr; }, kSecond));
  EXPECT_TRUE(event_is(k.event(0, na), EventKind::kConnected, Status::kOk));
  ASSERT_TRUE(k.run([&] { return k.outstanding(0) == 0; }, 3 * kSecond));
  EXPECT_EQ(k.status(0, 1), Status::kPeerUnreachable);
  EXPECT_TRUE(near(k.done(0, 1)->at, restart_at + kPeerTimeout, 100 * kMicrosecond));
  EXPECT_EQ(k.status(0, 2), Status::kFlushed);
  EXPECT_EQ(k.status(0, 3), Status::kFlushed);
  EXPECT_EQ(k.status(0, 100), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_GT(loop.ep(1).endpoint_stats().unknown_connection, 0u);
  // The new endpoint sent only what its own new connection needed: the
  // ACCEPT, ACKs of nothing (no data went on it) and PROBE answers.
  EXPECT_TRUE(loop.ep(0).is_established(na));
  const ConnStats* nas = loop.ep(0).conn_stats(na);
  ASSERT_NE(nas, nullptr);
  EXPECT_EQ(nas->naks_received, 0u);
  EXPECT_GT(from_new_b, 0u);
  // Closing the failed connection: the restarted peer drops its DISCONNECTs.
  const TimeNs close_at = loop.now();
  loop.ep(0).close(a, loop.now());
  ASSERT_TRUE(k.run([&] { return k.events_about(0, a) == 2; }, kSecond));
  EXPECT_TRUE(event_is(k.event(0, a, 1), EventKind::kClosed, Status::kPeerUnreachable));
  EXPECT_TRUE(near(k.event(0, a, 1)->at, close_at + 8 * 10 * kMillisecond, kMillisecond));
  // The new connection carries a WRITE; so does one the new endpoint opens.
  Buf src2(loop.ep(0), 64 * 1024, 0, 0x42);
  Buf dst2(loop.ep(1), 64 * 1024, kAccessRemoteWrite);
  ASSERT_EQ(k.send(0, na, write_wr(src2, dst2, 64 * 1024, 7)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.all_done(); }, kSecond));
  EXPECT_EQ(k.status(0, 7), Status::kOk);
  EXPECT_EQ(src2.bytes, dst2.bytes);
  ASSERT_EQ(loop.ep(1).connect(loop.addr(0), loop.now(), nb), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.event(1, nb) != nullptr; }, kSecond));
  EXPECT_TRUE(event_is(k.event(1, nb), EventKind::kConnected, Status::kOk));
}

// The restarted peer forgets a connection with no work outstanding: a
// keepalive finds it (CONN-9), keepalive + peer_timeout after the last
// packet handled; the new endpoint answers none of its PROBEs (BAD-7).
// Receives posted are flushed with it.
TEST(PeerVanishes, AnIdleConnectionToARestartedPeerFailsByTheKeepalive) {  // CONN-9, BAD-7
  Loop loop(cfg(4614), cfg(4615));
  auto [a, b] = loop.connect();
  Books k(loop);
  Buf rq(loop.ep(0), 4096, kAccessLocalWrite);
  ASSERT_EQ(k.recv(0, a, 100, rq, 0, 4096), Status::kOk);
  write_and_check(loop, a, 4096, 1);
  const TimeNs last = loop.now();  // about the last ACK's arrival
  loop.restart(1, cfg(4616));
  uint64_t from_1 = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>&) { from_1 += from; };
  ASSERT_TRUE(k.run([&] { return k.all_done() && k.event(0, a) != nullptr; }, 20 * kSecond));
  EXPECT_EQ(k.status(0, 100), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(near(k.event(0, a)->at, last + kKeepalive + kPeerTimeout, 100 * kMicrosecond));
  EXPECT_EQ(from_1, 0u) << "datagrams the restarted endpoint sent";
}

// ---- 3. The peer closes with work outstanding ---------------------------------

// The peer closes while this end's WRITEs, SEND and READ are under way (this
// end's work toward it) and its receives wait: the DISCONNECT completes them
// all kPeerClosed (CONN-7), event kClosed kPeerClosed with reason 0 (CONN-8).
// The closing end completes nothing of this end's and places none of the
// packets that were on their way when it closed.
TEST(PeerVanishes, ThePeerClosesWhileOurWorkIsUnderWay) {  // CONN-7, CONN-8
  Loop loop(cfg(4621), cfg(4622));
  auto [a, b] = loop.connect();
  Books k(loop);
  constexpr uint32_t kLen = 256 * 1024;
  Buf src(loop.ep(0), kLen, 0, 0x51);
  Buf into(loop.ep(0), kLen, kAccessLocalWrite);
  Buf rq(loop.ep(0), kLen, kAccessLocalWrite);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite | kAccessRemoteRead, 0x52);
  Buf b_rq(loop.ep(1), kLen, kAccessLocalWrite);
  ASSERT_EQ(k.recv(0, a, 100, rq, 0, kLen), Status::kOk);
  ASSERT_EQ(k.recv(1, b, 200, b_rq, 0, kLen), Status::kOk);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, kLen, 2)), Status::kOk);
  ASSERT_EQ(k.send(0, a, read_wr(into, dst.addr(), dst.mr.rkey, kLen, 3)), Status::kOk);
  loop.delay_ns = 20 * kMicrosecond;  // packets on their way when it closes
  ASSERT_TRUE(
      k.run([&] { return loop.ep(1).conn_stats(b)->data_packets_received >= 20; }, kSecond));
  const std::vector<uint8_t> dst_at_close = dst.bytes, b_rq_at_close = b_rq.bytes;
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(k.run([&] { return k.all_done() && k.events_about(1, b) > 0; }, kSecond));
  for (const uint64_t id : {1, 2, 3, 100}) EXPECT_EQ(k.status(0, id), Status::kPeerClosed) << id;
  EXPECT_EQ(k.status(1, 200), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kClosed, Status::kPeerClosed, Status::kOk));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kClosed, Status::kOk));
  EXPECT_EQ(dst.bytes, dst_at_close) << "WRITE bytes placed after the close";
  // Both ends refuse work on the connection gone, and queue none.
  EXPECT_EQ(k.send(0, a, write_wr(src, dst, 4096, 4)), Status::kNoSuchConnection);
  EXPECT_EQ(k.send(1, b, send_wr(dst, 0, 4096, 5)), Status::kNoSuchConnection);
  EXPECT_EQ(b_rq.bytes, b_rq_at_close) << "SEND bytes placed after the close";
  k.run_for(100 * kMillisecond);
  EXPECT_EQ(k.events_about(0, a), 1u);
  EXPECT_EQ(k.events_about(1, b), 1u);
  EXPECT_FALSE(loop.ep(0).is_established(a));
}

// The peer closes while its own work toward this end is under way: its
// requests complete kFlushed at once, this end's receives and the READ it
// was serving end with the DISCONNECT (kPeerClosed), and the packets the peer
// sent before closing that arrive after the DISCONNECT (overtaken on their
// way) place nothing: the connection is gone.
TEST(PeerVanishes, ThePeerClosesWhileItsWorkIsUnderWay) {  // CONN-7, BAD-7
  Loop loop(cfg(4623), cfg(4624));
  auto [a, b] = loop.connect();
  Books k(loop);
  constexpr uint32_t kLen = 256 * 1024;
  Buf b_src(loop.ep(1), kLen, 0, 0x61);
  Buf b_into(loop.ep(1), kLen, kAccessLocalWrite);
  Buf a_mem(loop.ep(0), kLen, kAccessRemoteWrite | kAccessRemoteRead, 0x62);
  Buf a_rq(loop.ep(0), kLen, kAccessLocalWrite);
  ASSERT_EQ(k.recv(0, a, 100, a_rq, 0, kLen), Status::kOk);
  ASSERT_EQ(k.send(1, b, write_wr(b_src, a_mem, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(1, b, send_wr(b_src, 0, kLen, 2)), Status::kOk);
  ASSERT_EQ(k.send(1, b, read_wr(b_into, a_mem.addr(), a_mem.mr.rkey, kLen, 3)), Status::kOk);
  // The peer's data takes 200 us, its DISCONNECT 2 us: it overtakes them.
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    return from == 1 && is_data(d) ? 200 * kMicrosecond : 0;
  };
  const ConnStats& a_st = *loop.ep(0).conn_stats(a);
  const ConnStats& b_st = *loop.ep(1).conn_stats(b);
  ASSERT_TRUE(k.run(
      [&] {
        return a_st.data_packets_received >= 20 &&
               b_st.data_packets_sent > a_st.data_packets_received + 4;
      },
      kSecond));
  loop.ep(1).close(b, loop.now());
  for (const uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(k.run([&] { return k.done(1, id) != nullptr; }, kMicrosecond));
    EXPECT_EQ(k.status(1, id), Status::kFlushed) << id;
  }
  ASSERT_TRUE(k.run([&] { return k.event(0, a) != nullptr; }, kSecond));
  const std::vector<uint8_t> mem_at_close = a_mem.bytes, rq_at_close = a_rq.bytes;
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kClosed, Status::kPeerClosed, Status::kOk));
  EXPECT_EQ(k.status(0, 100), Status::kPeerClosed);
  const uint64_t unknown = loop.ep(0).endpoint_stats().unknown_connection;
  ASSERT_TRUE(k.run([&] { return k.events_about(1, b) > 0; }, kSecond));
  EXPECT_TRUE(event_is(k.event(1, b), EventKind::kClosed, Status::kOk));
  k.run_for(kMillisecond);
  EXPECT_EQ(a_mem.bytes, mem_at_close);
  EXPECT_EQ(a_rq.bytes, rq_at_close);
  EXPECT_GT(loop.ep(0).endpoint_stats().unknown_connection, unknown);  // the premise
  EXPECT_TRUE(k.all_done());
}

// The same with every ACCEPT lost: the closing end answers each repeated
// request with its ACCEPT (CONN-3) while it resends its DISCONNECT; CONN-7
// gives the DISCONNECT disconnect_attempts (8) sends before the close ends
// unanswered.
TEST(PeerVanishes, AcceptsAnsweredWhileClosingLeaveTheDisconnectItsBudget) {  // CONN-7, CONN-3
  Loop loop(cfg(4629), cfg(4630));
  Books k(loop);
  int disconnects = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    disconnects += from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kDisconnect);
    return from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kConnectAccept);
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(k.run([&] { return k.events_about(1, b) == 2 && k.event(0, a); }, kSecond));
  EXPECT_TRUE(event_is(k.event(1, b, 1), EventKind::kClosed, Status::kPeerUnreachable));
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kConnectFailed, Status::kConnectTimeout));
  EXPECT_EQ(disconnects, 8);
}

// A request repeated to a connection its responder is closing (CLOSING, its
// DISCONNECT sent) draws the same ACCEPT again (CONN-3): the requester, its
// first ACCEPT lost, ignores DISCONNECTs while connecting (CONN-7), so only
// that ACCEPT lets it learn the connection and then take the DISCONNECT,
// instead of timing out its requests (CONN-2).
TEST(PeerVanishes, ARequestRepeatedWhileClosingDrawsTheAcceptAgain) {  // CONN-3, CONN-7
  Loop loop(cfg(4631), cfg(4632));
  Books k(loop);
  bool closing = false;
  std::vector<std::vector<uint8_t>> accepts, accepts_while_closing;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kConnectAccept)) return false;
    (closing ? accepts_while_closing : accepts).push_back(d);
    return !closing;  // the ACCEPT sent before the close is lost
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  ASSERT_TRUE(k.run([&] { return !accepts.empty(); }, kMillisecond));
  closing = true;
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(
      k.run([&] { return k.events_about(0, a) == 2 && k.events_about(1, b) == 2; }, kSecond));
  // One repeated request, one ACCEPT: the same fields as the lost one.
  ASSERT_EQ(accepts_while_closing.size(), 1u);
  wire::Packet lost, again;
  ASSERT_EQ(wire::decode(accepts.front(), lost), wire::ParseError::kOk);
  ASSERT_EQ(wire::decode(accepts_while_closing.front(), again), wire::ParseError::kOk);
  EXPECT_EQ(again.bh.dst_conn, lost.bh.dst_conn);
  EXPECT_EQ(again.connect.src_conn, lost.connect.src_conn);
  EXPECT_EQ(again.connect.nonce, lost.connect.nonce);
  EXPECT_EQ(again.connect.initial_psn, lost.connect.initial_psn);
  EXPECT_EQ(again.connect.mtu, lost.connect.mtu);
  EXPECT_EQ(again.connect.window_log2, lost.connect.window_log2);
  // The requester connected on it, and the DISCONNECT then closed both ends.
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kConnected, Status::kOk));
  EXPECT_TRUE(event_is(k.event(0, a, 1), EventKind::kClosed, Status::kPeerClosed));
  EXPECT_TRUE(event_is(k.event(1, b, 1), EventKind::kClosed, Status::kOk));
  EXPECT_TRUE(k.all_done());
}

// A request repeated to a connection that failed meanwhile (ERROR), its
// ACCEPT lost: here the responder's WRITE, posted at once (CONN-6), went
// unanswered by a requester that drops data while connecting, and PATH-7
// failed the connection. The requester, given 1,000 requests, still
// connects. The ACCEPT again would connect it to a connection that answers
// nothing (NAK-2), its work failing kPeerUnreachable seconds later; the
// REJECT naming the failure (CONN-3) fails its connect now, kConnectRefused
// with reason kPeerUnreachable, and nothing is sent on it after.
TEST(PeerVanishes, ARequestRepeatedToAFailedConnectionIsRejectedWithTheFailure) {  // CONN-3
  EndpointConfig responder = cfg(4634);
  responder.recovery.peer_timeout_ns = 50 * kMillisecond;
  Loop loop(cfg(4633), responder);
  Books k(loop);
  bool failed = false;
  std::vector<std::vector<uint8_t>> answers_after;  // to requests after the failure
  uint64_t sent_by_requester_after = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    const auto op = static_cast<wire::Opcode>(d[1]);
    if (failed && from == 0 && op != wire::Opcode::kConnectReq) ++sent_by_requester_after;
    if (from != 1 || (op != wire::Opcode::kConnectAccept && op != wire::Opcode::kConnectReject))
      return false;
    if (failed) answers_after.push_back(d);
    return !failed;  // every answer before the failure is lost
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a, 0, 1000), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  Buf src(loop.ep(1), 4096, 0, 0x5a);
  ASSERT_EQ(k.send(1, b, write_wr(src, src, 4096, 1)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.events_about(1, b) == 2; }, kSecond));
  ASSERT_TRUE(event_is(k.event(1, b, 1), EventKind::kError, Status::kPeerUnreachable));
  failed = true;
  ASSERT_TRUE(k.run([&] { return k.event(0, a) != nullptr; }, kSecond));
  ASSERT_EQ(answers_after.size(), 1u);
  wire::Packet reject;
  ASSERT_EQ(wire::decode(answers_after.front(), reject), wire::ParseError::kOk);
  EXPECT_EQ(reject.bh.opcode, wire::Opcode::kConnectReject);
  EXPECT_EQ(reject.connect.code, static_cast<uint8_t>(Status::kPeerUnreachable));
  EXPECT_EQ(reject.bh.dst_conn, a.v);
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kConnectFailed, Status::kConnectRefused,
                       Status::kPeerUnreachable));
  EXPECT_EQ(loop.ep(1).endpoint_stats().connects_refused, 1u);
  // The responder's connection stays in ERROR for its application (section
  // 4), which closes it; its DISCONNECTs find no connection and the close
  // ends after CONN-7's budget. The requester sent nothing more.
  EXPECT_FALSE(loop.ep(1).is_established(b));
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(k.run([&] { return k.events_about(1, b) == 3; }, kSecond));
  EXPECT_TRUE(event_is(k.event(1, b, 2), EventKind::kClosed, Status::kPeerUnreachable));
  EXPECT_EQ(k.events_about(0, a), 1u);
  EXPECT_EQ(sent_by_requester_after, 0u);
  EXPECT_TRUE(k.all_done());
}

// Both ends close at once, each with work outstanding: each end's own work
// completes kFlushed at its close, each sees one kClosed, and the DISCONNECTs
// that cross are answered (CONN-7); nothing is left open or timed.
TEST(PeerVanishes, BothEndsCloseAtOnce) {  // CONN-7, COMP-4
  Loop loop(cfg(4627), cfg(4628));
  auto [a, b] = loop.connect();
  Books k(loop);
  constexpr uint32_t kLen = 256 * 1024;
  Buf s0(loop.ep(0), kLen, 0, 1), s1(loop.ep(1), kLen, 0, 2);
  Buf d0(loop.ep(0), kLen, kAccessRemoteWrite), d1(loop.ep(1), kLen, kAccessRemoteWrite);
  ASSERT_EQ(k.send(0, a, write_wr(s0, d1, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(1, b, write_wr(s1, d0, kLen, 2)), Status::kOk);
  ASSERT_TRUE(
      k.run([&] { return loop.ep(1).conn_stats(b)->data_packets_received >= 10; }, kSecond));
  loop.ep(0).close(a, loop.now());
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(k.run([&] { return k.event(0, a) && k.event(1, b); }, kSecond));
  k.run_for(kSecond);
  EXPECT_EQ(k.status(0, 1), Status::kFlushed);
  EXPECT_EQ(k.status(1, 2), Status::kFlushed);
  for (int i = 0; i < 2; ++i) {
    const Seen* s = k.event(i, i == 0 ? a : b);
    EXPECT_EQ(k.events_about(i, i == 0 ? a : b), 1u);
    EXPECT_EQ(s->ev.kind, EventKind::kClosed);
    EXPECT_TRUE(s->ev.status == Status::kOk || s->ev.status == Status::kPeerClosed)
        << status_name(s->ev.status);
    EXPECT_EQ(loop.ep(i).next_timeout(), TimeNs::never()) << i;
  }
}

// The peer's application closes the connection it accepted while this end
// is still connecting, its ACCEPT lost: this end's requests, and the work it
// posted meanwhile, must each end once, and neither end may be left holding
// the connection.
TEST(PeerVanishes, ThePeerClosesWhileWeAreConnecting) {  // CONN-2, CONN-3, CONN-7
  Loop loop(cfg(4625), cfg(4626));
  Books k(loop);
  int accepts = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kConnectAccept) &&
           ++accepts == 1;
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  Buf src(loop.ep(0), 4096, 0, 0x71);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, 4096, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, 4096, 2)), Status::kOk);
  // The accepted connection appears; its application closes it at once.
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  loop.ep(1).close(b, loop.now());
  ASSERT_TRUE(k.run([&] { return k.all_done() && k.events_about(1, b) == 2; }, kSecond));
  k.run_for(kSecond);
  // A request repeated to a connection CLOSING draws the ACCEPT again
  // (CONN-3, pinned by ARequestRepeatedWhileClosingDrawsTheAcceptAgain), and
  // the DISCONNECT resent then closes the requester (CONN-7); without the
  // ACCEPT the request would time out (CONN-2). Either, once.
  const Seen* first = k.event(0, a);
  ASSERT_NE(first, nullptr);
  if (first->ev.kind == EventKind::kConnected) {
    EXPECT_EQ(k.events_about(0, a), 2u);
    EXPECT_TRUE(event_is(k.event(0, a, 1), EventKind::kClosed, Status::kPeerClosed));
    EXPECT_EQ(k.status(0, 1), Status::kPeerClosed);
    EXPECT_EQ(k.status(0, 2), Status::kPeerClosed);
  } else {
    EXPECT_EQ(k.events_about(0, a), 1u);
    EXPECT_TRUE(event_is(first, EventKind::kConnectFailed, Status::kConnectTimeout));
    EXPECT_EQ(k.status(0, 1), Status::kConnectTimeout);
    EXPECT_EQ(k.status(0, 2), Status::kFlushed);
  }
  EXPECT_EQ(k.event(1, b, 1)->ev.kind, EventKind::kClosed);
  EXPECT_TRUE(k.all_done());
  EXPECT_FALSE(loop.ep(0).is_established(a));
  EXPECT_FALSE(loop.ep(1).is_established(b));
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(4096, 0));
}

// ---- 4. The peer vanishes during the handshake ------------------------------

// Every datagram from the first one of opcode `op` on is dropped (`op`'s own
// too unless `deliver_it`): the moment the peer vanished.
void vanish_from(Loop& loop, wire::Opcode op, bool deliver_it, TimeNs& at) {
  loop.drop = [&loop, &at, op, deliver_it, gone = false](int,
                                                         const std::vector<uint8_t>& d) mutable {
    if (gone) return true;
    if (d[1] != static_cast<uint8_t>(op)) return false;
    gone = true;
    at = loop.now();
    return !deliver_it;
  };
}

// The responder accepted and vanished: its ACCEPT never arrives. The
// requester resends its request connect_attempts times, connect_retry apart,
// then fails kConnectTimeout (CONN-2), the oldest request posted meanwhile
// with that code and the rest kFlushed (section 4's states, COMP-5). The
// responder's connection, with a SEND of its own posted at once (CONN-6: it
// may send as soon as it has sent the ACCEPT) and a receive, fails at
// peer_timeout from that post (PATH-7), the receive kFlushed; the network
// back before that, its resends reach a requester that has forgotten the
// connection and answers none (BAD-7).
TEST(PeerVanishes, APeerThatVanishesAfterTheRequestFailsTheConnect) {  // CONN-2, CONN-6, PATH-7
  Loop loop(cfg(4631), cfg(4632));
  Books k(loop);
  TimeNs gone{};
  vanish_from(loop, wire::Opcode::kConnectAccept, false, gone);
  const TimeNs start = loop.now();
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  Buf src(loop.ep(0), 4096, 0, 0x81);
  Buf rq(loop.ep(0), 4096, kAccessLocalWrite);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(k.recv(0, a, 100, rq, 0, 4096), Status::kOk);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, 4096, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, 4096, 2)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  const TimeNs posted = loop.now();
  Buf b_src(loop.ep(1), 4096, 0, 0x82);
  Buf b_rq(loop.ep(1), 4096, kAccessLocalWrite);
  ASSERT_EQ(k.recv(1, b, 200, b_rq, 0, 4096), Status::kOk);
  ASSERT_EQ(k.send(1, b, send_wr(b_src, 0, 4096, 20)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.outstanding(0) == 0; }, kSecond));
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kConnectFailed, Status::kConnectTimeout));
  EXPECT_TRUE(near(k.event(0, a)->at, start + 8 * 10 * kMillisecond, 10 * kMicrosecond));
  EXPECT_EQ(k.status(0, 1), Status::kConnectTimeout);
  EXPECT_EQ(k.status(0, 2), Status::kFlushed);
  EXPECT_EQ(k.status(0, 100), Status::kFlushed);
  EXPECT_TRUE(near(k.done(0, 1)->at, start + 8 * 10 * kMillisecond, 10 * kMicrosecond));
  // The network comes back; the forgotten connection's packets draw nothing.
  loop.drop = nullptr;
  uint64_t from_0 = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>&) {
    from_0 += from == 0;
  };
  ASSERT_TRUE(k.run([&] { return k.all_done(); }, 3 * kSecond));
  expect_timed_out(k, 1, {20}, posted + kPeerTimeout);
  EXPECT_EQ(k.status(1, 200), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(1, b, 1), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_EQ(from_0, 0u);
  EXPECT_GT(loop.ep(0).endpoint_stats().unknown_connection, 0u);
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(rq.bytes, std::vector<uint8_t>(4096, 0));
}

// The responder vanished right after its ACCEPT arrived, before any data:
// the requester's work, posted while connecting, becomes outstanding at the
// ACCEPT and fails peer_timeout later (PATH-7: the time counts from when
// work became outstanding); the responder's connection, idle, fails by its
// keepalive, keepalive + peer_timeout after the handshake (CONN-9).
TEST(PeerVanishes, APeerThatVanishesAfterTheAcceptFailsTheWorkAtThePeerTimeout) {  // PATH-7
  Loop loop(cfg(4633), cfg(4634));
  Books k(loop);
  TimeNs gone{};
  vanish_from(loop, wire::Opcode::kConnectAccept, true, gone);
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  constexpr uint32_t kLen = 64 * 1024;
  Buf src(loop.ep(0), kLen, 0, 0x91);
  Buf into(loop.ep(0), kLen, kAccessLocalWrite);
  Buf rq(loop.ep(0), kLen, kAccessLocalWrite);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite | kAccessRemoteRead, 0x92);
  ASSERT_EQ(k.recv(0, a, 100, rq, 0, kLen), Status::kOk);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, kLen, 1)), Status::kOk);
  ASSERT_EQ(k.send(0, a, read_wr(into, dst.addr(), dst.mr.rkey, kLen, 2)), Status::kOk);
  ASSERT_EQ(k.send(0, a, send_wr(src, 0, kLen, 3)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.outstanding(0) == 0; }, 3 * kSecond));
  ASSERT_TRUE(event_is(k.event(0, a), EventKind::kConnected, Status::kOk));
  const TimeNs up = k.event(0, a)->at;  // the ACCEPT's arrival
  expect_timed_out(k, 0, {1, 2, 3}, up + kPeerTimeout);
  EXPECT_EQ(k.status(0, 100), Status::kFlushed);
  EXPECT_TRUE(event_is(k.event(0, a, 1), EventKind::kError, Status::kPeerUnreachable));
  const ConnId b = k.first(1, EventKind::kAccepted)->ev.conn;
  ASSERT_TRUE(k.run([&] { return k.events_about(1, b) == 2; }, 15 * kSecond));
  EXPECT_TRUE(event_is(k.event(1, b, 1), EventKind::kError, Status::kPeerUnreachable));
  EXPECT_TRUE(near(k.event(1, b, 1)->at, gone + kKeepalive + kPeerTimeout, 10 * kMicrosecond));
  EXPECT_EQ(into.bytes, std::vector<uint8_t>(kLen, 0));
}

// The responder accepts, its ACCEPT is lost, and it restarts: the
// requester's next request reaches the new endpoint, which knows nothing of
// it and accepts it as new (CONN-3); the connection works.
TEST(PeerVanishes, APeerRestartedDuringTheHandshakeAcceptsTheRepeatedRequest) {  // CONN-2, CONN-3
  Loop loop(cfg(4635), cfg(4636));
  Books k(loop);
  TimeNs gone{};
  vanish_from(loop, wire::Opcode::kConnectAccept, false, gone);
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.first(1, EventKind::kAccepted) != nullptr; }, kSecond));
  loop.restart(1, cfg(4637));
  loop.drop = nullptr;
  Buf src(loop.ep(0), 64 * 1024, 0, 0xd1);
  Buf dst(loop.ep(1), 64 * 1024, kAccessRemoteWrite);
  ASSERT_EQ(k.send(0, a, write_wr(src, dst, 64 * 1024, 1)), Status::kOk);
  ASSERT_TRUE(k.run([&] { return k.all_done(); }, kSecond));
  EXPECT_TRUE(event_is(k.event(0, a), EventKind::kConnected, Status::kOk));
  EXPECT_EQ(k.status(0, 1), Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_TRUE(k.first(1, EventKind::kAccepted) != nullptr);
}

}  // namespace
}  // namespace metaroce::test
