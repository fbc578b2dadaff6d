// Endpoint: construction, the connection table and its pooled contexts,
// completions and events, and the public API (input.cpp, output.cpp and
// timers.cpp hold the datagram and timer entries).
#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "durations.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

namespace {
constexpr uint64_t kSeedSalt = 0x6d657461726f6365ull;
// A second stream from the seed, for connection ids: a draw from rng would
// move every initial PSN (seed_for_first_psn) and every simulation.
constexpr uint64_t kIdSalt = 0x636f6e6e2d696473ull;
// A third, for the id key: drawn from id_rng it would move every slot's
// first generation.
constexpr uint64_t kIdKeySalt = 0x69642d6b65792d31ull;
// Free slots held back from reuse (create_connection): a churning endpoint
// repeats a ConnId only after 2,047 x 1,025 connections.
constexpr size_t kSlotsHeldFree = 1024;
// A fourth, for the closed records' request index (closed_table.hpp).
constexpr uint64_t kClosedSalt = 0x636c6f7365642d31ull;
// A connection's events at most: kConnected, kAccepted or kConnectFailed;
// kError; kClosed (push_event's callers).
constexpr size_t kEventsPerConnection = 3;

// Room for one more element, grown by doubling: push_back then cannot throw.
template <typename V>
void room_for_one(V& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<size_t>(16, v.capacity() * 2));
}
}  // namespace

uint64_t seed_for_first_psn(uint32_t psn) { return detail::Rng::seed_for_first(psn) ^ kSeedSalt; }

Endpoint::Impl::Impl(const EndpointConfig& c)
    : cfg(c),
      rng(c.seed ^ kSeedSalt),
      id_key(static_cast<uint32_t>(detail::Rng(c.seed ^ kIdKeySalt).next())),
      id_rng(c.seed ^ kIdSalt) {
  // SEQ-3: the window never exceeds what one ACK can describe (ACK-8), so a
  // packet outside every SACK is never mistaken for a lost one.
  cfg.window_log2 = std::clamp(cfg.window_log2, kMinWindowLog2, kMaxWindowLog2);
  cfg.num_paths = std::clamp<uint8_t>(cfg.num_paths, 1, kMaxPaths);
  cfg.mtu = std::clamp(cfg.mtu, kMinMtu, kMaxMtu);
  // TxRecord::slot holds a send-queue index below kRespSlotFlag.
  cfg.sq_depth = std::clamp<uint16_t>(cfg.sq_depth, 1, detail::kRespSlotFlag);
  cfg.rq_depth = std::max<uint16_t>(cfg.rq_depth, 1);
  cfg.max_reads = std::max<uint8_t>(cfg.max_reads, 1);
  cfg.ack_every = std::max<uint8_t>(cfg.ack_every, 1);
  // ENC-6: a DSCP past 6 bits takes the default, not 63, which is the
  // TRIMMED code point (TRIM-1) a receiver would read as a cut packet.
  if (cfg.control_dscp > kMaxDscp) cfg.control_dscp = kDefaultControlDscp;
  if (cfg.data_dscp > kMaxDscp) cfg.data_dscp = 0;
  if (cfg.entropy_max < cfg.entropy_min) std::swap(cfg.entropy_min, cfg.entropy_max);
  // CC-3: a shift of 64 or more would be undefined behaviour.
  cfg.cc.dctcp_g_shift = std::min(cfg.cc.dctcp_g_shift, kMaxDctcpGShift);
  // CC-1, CC-6, CC-9: windows and the cap times a packet's cost are 32-bit
  // byte counts.
  for (uint32_t* packets : {&cfg.cc.initial_cwnd_packets, &cfg.cc.min_cwnd_packets,
                            &cfg.cc.max_cwnd_packets, &cfg.cc.max_inflight_packets})
    *packets = std::min(*packets, kMaxPacketCount);
  cfg.max_connections = std::clamp<uint32_t>(cfg.max_connections, 1, kConnIndexMask);
  // Deadlines are `now + duration`: a larger one (UINT64_MAX meant as "never")
  // wrapped to a deadline already passed, and the driver, woken every
  // nanosecond, spun on handle_timeout.
  detail::for_each_duration(
      cfg, [](const char*, uint64_t& ns, bool, const char*) { ns = std::min(ns, kMaxDurationNs); });
  // The shared queue's ring grows as receives are posted (grow_srq): at
  // kMaxSharedRqDepth, allocated here, it took about 800 MB at open however
  // few receives the application would post.
  cfg.shared_rq_depth = std::min(cfg.shared_rq_depth, kMaxSharedRqDepth);
  cfg.max_reads_served = std::max<uint16_t>(cfg.max_reads_served, 1);  // READ-6: a report fits
  if (cfg.read_served_events) reads_served.reserve(cfg.max_reads_served);
  closed.configure(std::max<size_t>(cfg.max_connections, kMinClosedKept),
                   detail::Rng(c.seed ^ kClosedSalt).next());
  loss_window = std::max<uint32_t>(cfg.recovery.loss_window_packets, 1);
  loss_window_shift = std::has_single_bit(loss_window) ? std::countr_zero(loss_window) : -1;
  // The largest datagram: a data packet with the longest headers and a full
  // payload, or a control packet with every SACK word. A connection's mtu
  // never exceeds the endpoint's (CONN-3 takes the smaller).
  static_assert(detail::kHeaderTemplateSize + kMaxMtu + wire::kIcrcSize <= UINT16_MAX);
  const size_t control = wire::largest_header_size() + wire::kIcrcSize;
  min_tx_buffer[1] = static_cast<uint16_t>(control);
  min_tx_buffer[0] = static_cast<uint16_t>(
      std::max(control, detail::kHeaderTemplateSize + cfg.mtu + wire::kIcrcSize));
}

Connection* Endpoint::Impl::create_connection(const PeerAddr& peer) noexcept {
  // A closed connection's slot is reused only once kSlotsHeldFree others are
  // free (or the table is full), oldest first, so that its id, which the
  // next generation changes, comes back only after 2,047 reuses of the slot:
  // reused at once, a slot gave a closed connection's id to the 2,047th
  // connection after it, and a stale ConnId the application still held
  // posted work to that connection, of whatever peer.
  const bool reuse = !free_indices.empty() &&
                     (free_indices.size() > kSlotsHeldFree || conns.size() >= cfg.max_connections);
  if (!reuse && conns.size() >= cfg.max_connections) return nullptr;
  // Every allocation first, the table changed only once they all succeeded.
  // A std::bad_alloc thrown out of here left handle_datagram by exception
  // (on_connect_req), into a driver that expects none from the packet path.
  std::unique_ptr<Connection> c;
  try {
    c = std::make_unique<Connection>();
    c->paths.reserve(cfg.num_paths);  // init_paths' assign then allocates nothing
    // Room for every event a connection can have queued (its setup's, an
    // error's and its end's) besides those the application has not polled:
    // push_event, on the packet path, then never allocates.
    const size_t live = conns.size() - free_indices.size();
    events.reserve(events.size() + kEventsPerConnection * (live + 1));
    if (!reuse) {
      // Each of these holds a slot at most once (the ready ring, the heap)
      // or counts slots: with room for all of them, destroy_connection,
      // mark_ready and the timers never allocate. The ready ring has room
      // for as many stale entries again (drop_ready).
      const size_t slots = std::bit_ceil(conns.size() + 1);
      free_indices.reserve(slots);
      ready.reserve(2 * slots);
      timers.reserve(slots);
      timer_dirty.reserve(slots);
      room_for_one(conns);
      room_for_one(generations);
      room_for_one(timer_pos);
      room_for_one(in_ready);
      room_for_one(timer_dirty_at);
      // A context is held by a connection or pooled; establish() holds a
      // second one for a moment. Room for all of them now, so that giving one
      // back to the pool in steady traffic (maybe_release_ctx) never allocates.
      const size_t contexts = std::bit_ceil(conns.size() + 2);
      tx_pool.reserve(contexts);
      rx_pool.reserve(contexts);
    }
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  uint32_t index;
  if (reuse) {
    index = free_indices.pop();
    // Its old connection's entry waits in the ready ring still: gone before
    // the new one's, which front_ready would otherwise take it for. O(ring)
    // once for every stale entry, here or in drop_ready.
    if (in_ready[index] == kReadyStale) compact_ready();
  } else {
    index = static_cast<uint32_t>(conns.size());
    conns.emplace_back();
    conn_slots = static_cast<uint32_t>(conns.size());
    // Section 4: ids do not repeat across restarts. From generation 1 every
    // fresh process gave its first connection the same id, and a peer that
    // restarted and connected again at once got the id of its old
    // connection, whose packets the other end was still sending.
    generations.push_back(static_cast<uint16_t>(id_rng.next() & 0x7ff));
    timer_pos.push_back(detail::TimerHeap::kAbsent);
    in_ready.push_back(0);
    timer_dirty_at.push_back(0);
  }
  // The next generation, never 0, nor the one that the key would make id 0.
  do {
    generations[index] = static_cast<uint16_t>((generations[index] + 1) & 0x7ff);
    if (generations[index] == 0) generations[index] = 1;
    c->id = ConnId{((uint32_t{generations[index]} << kConnIndexBits) | (index + 1)) ^ id_key};
  } while (c->id.v == 0);
  c->index = index;
  c->peer = peer;
  c->mtu = cfg.mtu;
  c->set_window_log2(cfg.window_log2);
  c->num_paths = cfg.num_paths;
  c->next_psn = static_cast<uint32_t>(rng.next());
  c->cum_acked = c->next_psn;
  c->initial_psn = c->next_psn;
  set_cwnd_floor(*c);
  init_paths(*c);
  conns[index] = std::move(c);
  return conns[index].get();
}

namespace {

PathStats path_stats_of(const detail::Path& p) {
  PathStats out = p.stats;
  out.entropy = p.entropy;
  out.state = p.state;
  out.srtt_ns = p.srtt;
  out.min_rtt_ns = p.min_rtt;
  out.cwnd_bytes = p.cwnd;
  out.inflight_bytes = p.inflight;
  out.alpha_permille = static_cast<uint32_t>((uint64_t{p.alpha} * 1000) >> 16);
  out.loss_rate_permille = static_cast<uint32_t>((uint64_t{p.loss_ewma} * 1000) >> 16);
  return out;
}

// `now` + resends x retry, or never() where that passes what the clock
// holds: up to 65,535 resends a day apart (config_error's bounds) make 179
// years, which from a clock read past 405 years wrapped to a time already
// passed, and the record of a connection just closed expired at once
// (`until`: its peer's repeated DISCONNECT went unanswered, CONN-7).
TimeNs after_resends(TimeNs now, uint64_t resends, uint64_t retry_ns) {
  uint64_t span = 0;
  uint64_t at = 0;
  if (__builtin_mul_overflow(resends, retry_ns, &span) || __builtin_add_overflow(now.ns, span, &at))
    return TimeNs::never();
  return TimeNs{at};
}

}  // namespace

void Endpoint::Impl::remember_closed(const Connection& c, uint64_t abandoned_nonce, Status reason) {
  detail::ClosedRecord r;
  r.id = c.id;
  r.peer_conn = c.peer_conn;
  r.peer = c.peer;
  r.nonce = c.is_requester ? 0 : c.nonce;
  r.abandoned_nonce = abandoned_nonce;
  r.reason = reason;
  // The peer resends a CONNECT_REQ at most connect_attempts times and a
  // DISCONNECT at most disconnect_attempts, connect_retry apart (CONN-2
  // timing, the peer's settings taken as ours): both have stopped by then.
  const uint64_t resends =
      std::max<uint64_t>(std::min<uint64_t>(cfg.connect_attempts, 65535), cfg.disconnect_attempts);
  r.until = after_resends(last_now, resends, cfg.connect_retry_ns);
  // CONN-3: a requester's repeats go on for as many requests as its
  // connect() asked for, up to 65,535, whatever our connect_attempts says.
  // Section 4: a late ACCEPT of one given up while CONNECTING is answered as
  // long (its responder's connection, unanswered, ends at its keepalive).
  r.requests_until = after_resends(last_now, UINT16_MAX, cfg.connect_retry_ns);
  if (!closed.add(r, last_now, estats.closed_records_dropped)) ++estats.closed_records_dropped;

  ClosedStats& k = closed_stats[closed_stats_next];
  closed_stats_next = (closed_stats_next + 1) % kClosedStatsKept;
  k.id = c.id;
  k.stats = c.stats;
  try {
    k.paths.resize(c.num_paths);
  } catch (const std::bad_alloc&) {
    k.paths.clear();  // the connection's counters kept, its paths' not
  }
  for (size_t i = 0; i < k.paths.size(); ++i) k.paths[i] = path_stats_of(c.paths[i]);
}

void Endpoint::Impl::remember_abandoned(const Connection& c, Status reason) {
  if (!c.is_requester || c.peer_conn != 0 || c.attempts == 0) return;
  remember_closed(c, c.nonce, reason);
}

void Endpoint::Impl::release_sends(const detail::TxCtx& t) {
  for (uint32_t i = t.sq_head; i != t.sq_tail; ++i) mrs.release(t.sq[i & t.sq_mask].wr.lkey);
  for (uint32_t i = t.resp_head; i != t.resp_tail; ++i) mrs.release(t.resp[i & t.resp_mask].lkey);
}

void Endpoint::Impl::drop_ready(uint32_t index) {
  in_ready[index] = kReadyStale;
  // Room for a live entry of every slot, and for capacity() - slots stale
  // ones (create_connection reserves twice the slots): at that many, they go.
  if (++ready_stale >= ready.capacity() - conns.size()) compact_ready();
}

void Endpoint::Impl::compact_ready() {
  ready.retain([this](uint32_t index) {
    if (in_ready[index] != kReadyStale) return true;
    in_ready[index] = 0;
    return false;
  });
  ready_stale = 0;
}

void Endpoint::Impl::forget_timer(Connection& c) {
  if (!c.timer_dirty) return;
  c.timer_dirty = false;
  const uint32_t at = timer_dirty_at[c.index];
  // Holds the slot's index in every case: a copy left behind where
  // run_timers computed a deadline early (timers.cpp) holds it too, and
  // flush_timers skips whichever stays. The search is only a safety net.
  auto it = at < timer_dirty.size() && timer_dirty[at] == c.index
                ? timer_dirty.begin() + at
                : std::find(timer_dirty.begin(), timer_dirty.end(), c.index);
  if (it == timer_dirty.end()) return;
  *it = timer_dirty.back();  // their order is not kept: each is computed alone
  timer_dirty_at[*it] = static_cast<uint32_t>(it - timer_dirty.begin());
  timer_dirty.pop_back();
}

void Endpoint::Impl::destroy_connection(Connection& c) {
  if (c.peer_conn != 0) remember_closed(c);  // past the handshake
  timers.remove(c.index, timer_pos);
  // Its entries in the deadlines to compute and in the round-robin go with
  // it. Left there (it ended before a poll or next_timeout() took them), the
  // next connection in the slot was entered beside them: connect() and
  // close() over and over with the table full (max_connections) outgrew the
  // room create_connection makes, and connect() allocated, or threw
  // std::bad_alloc with its connection half made (CONN-4). Each holds the
  // slot at most once, so the scans are as short as the lists.
  forget_timer(c);
  if (c.nonce != 0) {
    auto it = by_nonce.find(c.nonce);
    if (it != by_nonce.end() && it->second == c.index) by_nonce.erase(it);
  }
  if (c.tx) tx_pool.push_back(std::move(c.tx));
  if (c.rx) rx_pool.push_back(std::move(c.rx));
  const uint32_t index = c.index;
  if (in_ready[index]) drop_ready(index);
  conns[index].reset();
  free_indices.push(index);
}

// A context from the pool, or a new one, shaped for c; null, nothing
// changed, when the memory for it runs short. The pool has room for every
// context (create_connection), so one taken from it always fits back.
template <typename Ctx>
std::unique_ptr<Ctx> Endpoint::Impl::shaped(std::vector<std::unique_ptr<Ctx>>& pool,
                                            const Connection& c) noexcept {
  std::unique_ptr<Ctx> ctx;
  if (!pool.empty()) {
    ctx = std::move(pool.back());
    pool.pop_back();
  }
  try {
    if (!ctx) ctx = std::make_unique<Ctx>();
    shape(*ctx, c);
  } catch (const std::bad_alloc&) {
    if (ctx) pool.push_back(std::move(ctx));
    return nullptr;
  }
  return ctx;
}

void Endpoint::Impl::shape(detail::TxCtx& t, const Connection& c) const {
  const uint32_t w = c.window();
  t.records.assign(w, detail::TxRecord{});
  t.acked_bits.assign(w / 64, 0);
  t.path_rings.assign(size_t{c.num_paths} * w, 0);
  t.retx.assign(w, 0);
  t.retx_head = t.retx_tail = 0;
  t.sq.assign(std::bit_ceil(uint32_t{cfg.sq_depth}), detail::SqEntry{});
  t.sq_mask = static_cast<uint32_t>(t.sq.size() - 1);
  t.sq_head = t.sq_seg = t.sq_tail = 0;
  t.resp.assign(std::bit_ceil(resp_depth()), detail::RespJob{});
  t.resp_mask = static_cast<uint32_t>(t.resp.size() - 1);
  t.resp_head = t.resp_seg = t.resp_tail = 0;
  t.read_slot.assign(std::bit_ceil(std::max<uint32_t>(c.peer_max_reads, 1)), 0);
  t.hdr_slot = detail::kNoSlot;  // the template names the previous owner's peer
  t.hdr_len = 0;
  t.explore = {};  // PATH-8 starts afresh, with no path half moved
  t.capped = {};
}

void Endpoint::Impl::shape(detail::RxCtx& r, const Connection& c) const {
  r.bits.assign(c.window() / 64, 0);
  r.rq.assign(std::bit_ceil(uint32_t{cfg.rq_depth}), detail::RecvEntry{});
  r.rq_mask = static_cast<uint32_t>(r.rq.size() - 1);
  r.rq_head = r.rq_tail = 0;
}

detail::TxCtx* Endpoint::Impl::borrow_tx(Connection& c) noexcept {
  c.tx = shaped(tx_pool, c);
  if (!c.tx) return nullptr;
  c.draining_slot = detail::kNoPath;
  for (uint8_t i = 0; i < c.num_paths; ++i) c.paths[i].ring_head = c.paths[i].next_pseq;
  // PATH-6: work starts again on a connection that had none outstanding for
  // context_idle_ns. Paths retired meanwhile took no answer for the peer's
  // silence (there was nothing to acknowledge, so no progress to see): they
  // probe at once rather than after a backoff of up to max_rto while the
  // other paths carry the work. Asked here, where an idle connection takes
  // its context back, not for every message or packet: the same test where
  // a message's first packet leaves cost 5.5 instructions per data packet
  // (scripts/engine-instructions.sh), one in Endpoint::post_send 1.0.
  // (The PROBEs owed go, and the timer is set, when the work is polled.)
  if (c.silent_paths != 0) [[unlikely]]
    wake_silent_paths(c, last_now);
  return c.tx.get();
}

detail::RxCtx* Endpoint::Impl::borrow_rx(Connection& c) noexcept {
  c.rx = shaped(rx_pool, c);
  return c.rx.get();
}

bool Endpoint::Impl::tx_idle(const Connection& c) const {
  return c.tx && c.tx->sq_head == c.tx->sq_tail && c.tx->resp_head == c.tx->resp_tail &&
         c.cum_acked == c.next_psn && c.tx->retx_head == c.tx->retx_tail;
}

bool Endpoint::Impl::rx_idle(const Connection& c) const {
  return c.rx && c.rx->rq_head == c.rx->rq_tail && c.rx_cum == c.rx_high && c.unacked == 0 &&
         c.echo_count == 0;
}

// Contexts go back to the pool once they hold nothing a later packet needs
// and the connection has been quiet for context_idle_ns, so an idle
// connection costs only its core (the 10,000-connection budget) while a busy
// one never pays for re-acquiring them between messages.
void Endpoint::Impl::maybe_release_ctx(Connection& c, TimeNs now) {
  if (now.since(c.last_activity) < cfg.context_idle_ns) return;
  if (tx_idle(c)) tx_pool.push_back(std::move(c.tx));
  if (rx_idle(c)) rx_pool.push_back(std::move(c.rx));
}

void Endpoint::Impl::complete(const Connection& c, const Completion& comp) {
  (void)c;
  --wrs_open;
  completions.push(comp);
}

bool Endpoint::Impl::grow_completions() noexcept {
  try {
    completions.reserve(completions.size() + wrs_open + 1);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

void Endpoint::Impl::push_event(EventKind k, const Connection& c, Status s, Status reason) {
  events.push(Event{k, c.id, s, c.peer, reason});
}

wire::BaseHeader Endpoint::Impl::base_header(const Connection& c, wire::Opcode op,
                                             TimeNs now) const {
  wire::BaseHeader bh;
  bh.opcode = op;
  bh.flags = cfg.cover_payload ? wire::kFlagPayloadCovered : 0;
  bh.dst_conn = c.peer_conn;
  bh.tsval = static_cast<uint32_t>(now.ns);
  return bh;
}

bool Endpoint::poll_completion(Completion& out) {
  if (impl_->completions.empty()) return false;
  out = impl_->completions.pop();
  return true;
}

bool Endpoint::poll_event(Event& out) {
  if (impl_->events.empty()) return false;
  out = impl_->events.pop();
  return true;
}

bool Endpoint::poll_read_served(ReadServed& out) {
  if (impl_->reads_served.empty()) return false;
  out = impl_->reads_served.pop();
  return true;
}

// ---------------------------------------------------------------- API

Endpoint::Endpoint(const EndpointConfig& cfg) : impl_(std::make_unique<Impl>(cfg)) {}
Endpoint::~Endpoint() = default;

const EndpointConfig& Endpoint::config() const { return impl_->cfg; }

Status Endpoint::register_memory(void* addr, size_t length, uint32_t access, MemoryRegion& out) {
  return register_memory_at(addr, length, reinterpret_cast<uint64_t>(addr), access, out);
}

Status Endpoint::register_memory_at(void* addr, size_t length, uint64_t base, uint32_t access,
                                    MemoryRegion& out) {
  uint64_t rkey;
  do {
    rkey = impl_->rng.next();
  } while (rkey == 0 || impl_->mrs.rkey_in_use(rkey));
  return impl_->mrs.add(addr, length, base, access, rkey, out);
}

Status Endpoint::deregister_memory(uint32_t lkey) { return impl_->mrs.remove(lkey); }

Status Endpoint::local_view(uint64_t rkey, uint64_t addr, uint64_t len, uint32_t access,
                            uint8_t*& out) const {
  constexpr uint32_t kRemoteRights = kAccessRemoteWrite | kAccessRemoteRead;
  // remote() takes need 0 for "never asked" in its cache of the last grant.
  if (len == 0 || access == 0 || (access & ~kRemoteRights) != 0) return Status::kInvalidArgument;
  Status why = Status::kOk;
  uint8_t* p = impl_->mrs.remote(rkey, addr, len, access, why);
  if (p == nullptr) return why;
  out = p;
  return Status::kOk;
}

Status Endpoint::connect(const PeerAddr& peer, TimeNs now, ConnId& out, uint16_t max_mtu,
                         uint16_t attempts) {
  return impl_->connect(peer, now, out, max_mtu, attempts);
}

void Endpoint::close(ConnId conn, TimeNs now) {
  if (Connection* c = impl_->find(conn)) impl_->close(*c, now);
}

bool Endpoint::is_established(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr && c->state == ConnState::kEstablished;
}

PeerAddr Endpoint::peer_of(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  if (c != nullptr) return c->peer;
  const detail::ClosedRecord* r = impl_->find_closed(conn);
  return r != nullptr ? r->peer : PeerAddr{};
}

uint16_t Endpoint::mtu_of(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr && c->state == ConnState::kEstablished ? c->mtu : 0;
}

Status Endpoint::post_send(ConnId conn, const SendWr& wr) {
  Connection* c = impl_->find(conn);
  if (c == nullptr) return Status::kNoSuchConnection;
  const Status s = impl_->post_send(*c, wr);
  if (s == Status::kOk) {
    ++impl_->wrs_open;
    c->last_activity = impl_->last_now;
    c->post_unstamped = true;
    impl_->mark_ready(*c);
  }
  return s;
}

Status Endpoint::post_recv(ConnId conn, const RecvWr& wr) {
  Connection* c = impl_->find(conn);
  if (c == nullptr) return Status::kNoSuchConnection;
  // No last_activity: a receive posted is no word from the peer, and no work
  // PATH-7 times, so it must not answer CONN-9's keepalive (an application
  // keeping receives posted kept a vanished peer's connection for ever). The
  // receive itself keeps the rx context (rx_idle).
  const Status s = impl_->post_recv(*c, wr);
  impl_->wrs_open += s == Status::kOk;
  return s;
}

Status Endpoint::post_shared_recv(const RecvWr& wr) {
  const Status s = impl_->post_shared_recv(wr);
  impl_->wrs_open += s == Status::kOk;
  return s;
}

const EndpointStats& Endpoint::endpoint_stats() const { return impl_->estats; }

size_t Endpoint::transmit_buffer_bytes(bool gather) const { return impl_->min_tx_buffer[gather]; }

const ConnStats* Endpoint::conn_stats(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  if (c != nullptr) return &c->stats;
  const Impl::ClosedStats* r = impl_->closed_stats_of(conn);
  return r != nullptr ? &r->stats : nullptr;
}

size_t Endpoint::path_count(ConnId conn) const {
  if (const Connection* c = impl_->find(conn)) return c->num_paths;
  const Impl::ClosedStats* r = impl_->closed_stats_of(conn);
  return r != nullptr ? r->paths.size() : 0;
}

bool Endpoint::path_stats(ConnId conn, size_t path, PathStats& out) const {
  if (const Connection* c = impl_->find(conn)) {
    if (path >= c->num_paths) return false;
    out = path_stats_of(c->paths[path]);
    return true;
  }
  const Impl::ClosedStats* r = impl_->closed_stats_of(conn);
  if (r == nullptr || path >= r->paths.size()) return false;
  out = r->paths[path];
  return true;
}

void Endpoint::set_trace(TraceFn fn, void* ctx) {
  impl_->trace_fn = fn;
  impl_->trace_ctx = ctx;
}

size_t Endpoint::idle_connection_bytes() {
  // The core plus its path array at the default path count; contexts are
  // pooled and returned when the connection goes idle.
  return sizeof(Connection) + EndpointConfig{}.num_paths * sizeof(detail::Path) +
         3 * sizeof(void*);  // connection table slot, generation, timer position
}

size_t Endpoint::closed_record_bytes() const { return impl_->closed.bytes(); }

size_t Endpoint::active_context_bytes() const {
  const EndpointConfig& c = impl_->cfg;
  const size_t w = size_t{1} << c.window_log2;
  const size_t tx = sizeof(detail::TxCtx) + w * sizeof(detail::TxRecord) + w / 8 +
                    size_t{c.num_paths} * w * 4 + w * 4 +
                    std::bit_ceil(uint32_t{c.sq_depth}) * sizeof(detail::SqEntry) +
                    std::bit_ceil(impl_->resp_depth()) * sizeof(detail::RespJob) + c.max_reads * 4;
  const size_t rx = sizeof(detail::RxCtx) + w / 8 +
                    std::bit_ceil(uint32_t{c.rq_depth}) * sizeof(detail::RecvEntry);
  return tx + rx;
}

}  // namespace metaroce
