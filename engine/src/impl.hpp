// Endpoint::Impl: the engine's internals, split by job over several files:
//   endpoint.cpp  construction, connection table, contexts, public API, getters
//   input.cpp     datagram decoding and dispatch
//   output.cpp    output scheduling (which connection sends next) and orphan replies
//   timers.cpp    the timer heap and what each deadline does
//   handshake.cpp connection setup and teardown (CONN-*)
//   sender.cpp    send queue, path choice, segmentation, data packets (SCHED-*)
//   acks.cpp      ACK/NAK processing and the completions they release (ACK-*, NAK-*)
//   loss.cpp      per-path send order, loss detection, timeouts (LOSS-*)
//   receiver.cpp  validation, placement, ACK generation (SEQ-*, PLACE-*, ACK-*)
//   path.cpp      per-path congestion control and health (CC-*, PATH-*)
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <unordered_map>
#include <vector>

#include "closed_table.hpp"
#include "connection.hpp"
#include "crc32c.hpp"
#include "metaroce/engine.hpp"
#include "metaroce/ring.hpp"
#include "metaroce/wire.hpp"
#include "mr_table.hpp"
#include "rng.hpp"
#include "timer_heap.hpp"

namespace metaroce {

// A connection id: the generation of its table slot above the slot's index
// + 1, so that a reused slot does not answer an old id, XORed with a 32-bit
// key drawn from the endpoint's seed, so that ids of separate process starts
// (separate seeds) collide only as random 32-bit values do (section 4; with
// the 11-bit generation alone, 1 in 2,000). 0 is no connection.
// A slot's generations start from a value drawn from the endpoint's seed.
inline constexpr uint32_t kConnIndexBits = 20;
inline constexpr uint32_t kConnIndexMask = (1u << kConnIndexBits) - 1;

// A peer address a connection can have: len 0 is what peer_of() says for an
// unknown id, so such a connection would look unknown; past its 20 bytes, a
// driver addressing the peer would read beyond them.
[[nodiscard]] inline bool addressable(const PeerAddr& p) {
  return p.len != 0 && p.len <= sizeof p.bytes;
}

struct Endpoint::Impl {
  explicit Impl(const EndpointConfig& c);

  EndpointConfig cfg;
  detail::Rng rng;
  uint32_t id_key;  // XORed into every id (kConnIndexBits above)
  // poll_transmit's smallest buf, [gather]. 16 bits (the largest, mtu + 52,
  // fits), so that it takes the hole after id_key: the hot members after
  // estats keep their offsets as EndpointStats grows (by its RNR counters,
  // then reads_served_dropped); 16 bytes further, the WRITE benchmark took
  // about 8 % more cycles a packet for the same instructions.
  std::array<uint16_t, 2> min_tx_buffer{};
  detail::MrTable mrs;
  EndpointStats estats;
  // The ACK on_ack is handling (LOSS-2's echo test); null while a NAK is.
  const wire::AckBody* ack_in_hand = nullptr;
  TimeNs last_now{0};  // the latest time an input or output call carried
  wire::Packet rx_packet;
  std::array<uint64_t, wire::kMaxSackWords> tx_sack{};  // the ACK being built (emit_ack)
  TraceFn trace_fn = nullptr;
  void* trace_ctx = nullptr;

  std::vector<std::unique_ptr<detail::Connection>> conns;  // index -> connection
  // conns.size(), kept: find() bounds every received datagram's index by it,
  // and the vector's size is a subtraction and a shift of two loads.
  uint32_t conn_slots = 0;
  // The path the ACK in hand echoes a congestion signal for (CC-2), 0xff for
  // none: set afresh by on_ack and on_nak before anything reads it. (In the
  // hole after conn_slots, for estats' growth: min_tx_buffer's note.)
  uint8_t signalled_slot = 0xff;
  std::vector<uint16_t> generations;  // index -> id generation
  // Slots of closed connections, oldest first (create_connection).
  Ring<uint32_t> free_indices;
  std::vector<uint32_t> timer_pos;
  detail::TimerHeap timers;
  std::unordered_map<uint64_t, uint32_t> by_nonce;  // handshake dedup (CONN-3)

  // Connections with something to send, round-robin.
  Ring<uint32_t> ready;
  // By slot: kReadyLive while its connection has an entry in `ready`,
  // kReadyStale while that of a connection destroyed in it waits there
  // (drop_ready), 0 otherwise.
  std::vector<uint8_t> in_ready;
  static constexpr uint8_t kReadyLive = 1, kReadyStale = 2;

  // Pools of tracking contexts.
  std::vector<std::unique_ptr<detail::TxCtx>> tx_pool;
  std::vector<std::unique_ptr<detail::RxCtx>> rx_pool;

  // PLACE-6: the shared receive queue, a ring of the posted receives no
  // connection has taken yet. srq_outstanding counts those plus the ones
  // connections took and have not completed; it never exceeds the ring's
  // size (grown by post_shared_recv, up to shared_rq_depth), so receives
  // given back by a failing connection always fit in front of the ring again.
  std::vector<detail::RecvEntry> srq;
  uint32_t srq_mask = 0;
  uint32_t srq_head = 0, srq_tail = 0;
  uint32_t srq_outstanding = 0;

  Ring<Completion> completions;
  Ring<Event> events;
  // read_served_events only: room for cfg.max_reads_served reserved when
  // the endpoint is made, so that the ACK path never allocates for it; past
  // that the oldest report goes, counted (READ-6).
  Ring<ReadServed> reads_served;

  // Replies to packets that have no connection (REJECT, DISCONNECT_ACK).
  struct Orphan {
    PeerAddr peer;
    uint16_t entropy;
    wire::Opcode op;
    wire::ConnectBody connect;
    wire::DisconnectBody disconnect;
    uint32_t dst_conn;
  };
  Ring<Orphan> orphans;
  // Queues a reply to a packet of no connection, unless kMaxOrphans wait
  // already or the queue finds no memory to grow: then it is dropped, as if
  // lost, and the peer repeats what drew it; never std::bad_alloc out of
  // handle_datagram.
  [[gnu::cold]] void queue_orphan(const Orphan& o) noexcept;
  static constexpr size_t kMaxOrphans = 1024;

  // What the endpoint remembers of connections that ended (closed_table.hpp):
  // while the peer may still repeat a control packet of theirs, its
  // DISCONNECT (our DISCONNECT_ACK lost) is answered again (CONN-7), its
  // CONNECT_REQ (delayed in the network past the close) makes no new
  // connection (CONN-3), and the ACCEPT of one given up while CONNECTING
  // draws a DISCONNECT (section 4). A DISCONNECT for any other unknown id is
  // dropped (BAD-7). peer_of answers for them too, for the driver. Up to
  // max_connections records (at least kMinClosedKept): an endpoint that
  // closes its whole table at once keeps every guarantee.
  detail::ClosedTable closed;
  static constexpr size_t kMinClosedKept = 64;
  // Each table slot's first id generation. Here, not beside rng: the 8 bytes
  // it took there keep the hot members after estats, which grew by
  // closed_records_dropped, at their offsets (min_tx_buffer's note).
  detail::Rng id_rng;
  // The record of connection `id` while its peer may still repeat a
  // DISCONNECT; one given up while CONNECTING until requests_until, for an
  // ACCEPT comes as late as the responder was slow to read the request.
  [[nodiscard]] const detail::ClosedRecord* find_closed(ConnId id) const {
    const detail::ClosedRecord* r = closed.by_id(id);
    if (r == nullptr) return nullptr;
    return last_now < (r->abandoned_nonce != 0 ? r->requests_until : r->until) ? r : nullptr;
  }
  [[nodiscard]] bool answered_request_closed(const PeerAddr& peer, uint32_t src_conn,
                                             uint64_t nonce) const {
    const detail::ClosedRecord* r = closed.by_request(peer, src_conn, nonce);
    return r != nullptr && last_now < r->requests_until;
  }
  // The last connections' final counters, the connection's and each path's:
  // a peer's DISCONNECT ends a connection before the application has polled
  // the kPeerClosed that says so. A small ring, apart from the records
  // above: they are for the application's late stats calls, which no peer
  // drives, and at a provider's scale a copy of every path's counters per
  // record would cost more than the record. The vector keeps its capacity
  // as the ring turns, so a close allocates only while the ring first fills.
  struct ClosedStats {
    ConnId id;
    ConnStats stats{};
    std::vector<PathStats> paths;
  };
  static constexpr size_t kClosedStatsKept = 64;
  std::array<ClosedStats, kClosedStatsKept> closed_stats{};
  uint32_t closed_stats_next = 0;
  [[nodiscard]] const ClosedStats* closed_stats_of(ConnId id) const {
    if (id.v == 0) return nullptr;  // the ring's unused entries
    for (const ClosedStats& r : closed_stats)
      if (r.id == id) return &r;
    return nullptr;
  }
  // A connection ends after its handshake, or (abandoned_nonce, its
  // request's) while CONNECTING: its record and its counters kept.
  [[gnu::cold]] void remember_closed(const detail::Connection& c, uint64_t abandoned_nonce = 0,
                                     Status reason = Status::kOk);
  // A requester's connection ends while CONNECTING (closed, or unanswered):
  // remembered if its request left, so that a late ACCEPT draws a DISCONNECT
  // (section 4).
  [[gnu::cold]] void remember_abandoned(const detail::Connection& c, Status reason);

  // ---- endpoint.cpp ----
  // Inline: every datagram and every API call looks its connection up.
  [[nodiscard]] detail::Connection* find(ConnId id) const {
    // Index 0 wraps to an index past any table; an id is never 0, so the
    // comparison below refuses 0 however the key maps it.
    const uint32_t index = ((id.v ^ id_key) & kConnIndexMask) - 1;
    if (index >= conn_slots || !conns[index]) return nullptr;
    detail::Connection* c = conns[index].get();
    return c->id == id ? c : nullptr;
  }
  // Null when the table is full, or when an allocation for the new
  // connection fails (std::bad_alloc caught: a flood of requests must not
  // throw out of handle_datagram), with nothing of the table changed.
  detail::Connection* create_connection(const PeerAddr& peer) noexcept;
  // MR-6: the lkeys that the sends and READ responses still queued in t
  // hold are released (MrTable::hold), the queues then to be emptied.
  void release_sends(const detail::TxCtx& t);
  // c holds no work: flush_all completed it, or none was ever posted (a
  // connection refused while being made). A closing one takes none.
  void destroy_connection(detail::Connection& c);
  void mark_ready(detail::Connection& c) {
    if (in_ready[c.index]) return;  // never kReadyStale: create_connection
    in_ready[c.index] = kReadyLive;
    ready.push(c.index);
  }
  // A destroyed connection's entry in `ready` stays, stale, skipped when it
  // reaches the front (front_ready): erasing it moved every entry behind it,
  // and closing n connections at once took O(n^2). The stale entries are
  // compacted away (compact_ready) before they outgrow the ring's room, so
  // that mark_ready never allocates, each compaction removing at least as
  // many as there are slots, and before their slot is given to a new
  // connection (create_connection), so that a slot's live entry never
  // follows a stale one.
  void drop_ready(uint32_t index);
  void compact_ready();
  // Deadlines are recomputed lazily: a connection touched by many packets in
  // one batch is marked once and its deadline computed once, when the driver
  // next asks for next_timeout() or hands in a timeout (timers.cpp).
  void update_timer(detail::Connection& c) {
    if (c.timer_dirty) return;
    c.timer_dirty = true;
    timer_dirty_at[c.index] = static_cast<uint32_t>(timer_dirty.size());
    timer_dirty.push_back(c.index);
  }
  void flush_timers();
  void compute_timer(detail::Connection& c);
  std::vector<uint32_t> timer_dirty;
  // By slot: where its latest entry in timer_dirty is, so that a connection
  // destroyed before the flush leaves it in O(1): closing n connections
  // between two next_timeout() calls searched the list n times.
  std::vector<uint32_t> timer_dirty_at;
  void forget_timer(detail::Connection& c);
  void run_timers(detail::Connection& c, TimeNs now);
  // CONN-9: an established connection with nothing outstanding (PATH-7 has
  // nothing to time): when its keepalive is due, and what happens then.
  [[nodiscard]] TimeNs keepalive_deadline(const detail::Connection& c) const;
  [[gnu::cold]] void run_keepalive(detail::Connection& c, TimeNs now);
  // READ-4: when READs waiting for their responses, with nothing else to ask
  // the responder, PROBE it (never, when they do not so wait).
  [[gnu::cold, nodiscard]] TimeNs read_wait_deadline(const detail::Connection& c) const;
  // The output path, one instance per mode (poll_transmit, and gather for
  // poll_transmit_gather): each function of it then has one caller, and the
  // optimizer inlines the whole path into its entry, as it did while only
  // one mode was linked in, rather than leaving a call in every poll (~35
  // instructions per data packet); the mode's own tests fold away.
  template <bool gather>
  bool poll(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  template <bool gather>
  bool poll_one(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  // poll_one past the orphan replies. Inlined into poll_transmit, it drops a
  // front connection that surely has nothing to send (may_emit) without the
  // register saves of the output path, and otherwise jumps to emit_from: a
  // receiver's last poll after each data packet finds only its own
  // connection, with nothing to send.
  template <bool gather>
  bool poll_ready(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  // poll_ready's rare cases: the front entry no longer ready, or more
  // connections behind a dropped one.
  template <bool gather>
  [[gnu::noinline]] bool poll_next(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  // poll_one with orphan replies queued.
  template <bool gather>
  [[gnu::noinline, gnu::cold]] bool poll_orphan(TimeNs now, std::span<uint8_t> buf,
                                                TxDatagram& out);
  // The connection at the front of the round-robin, once the entries of
  // connections no longer ready are dropped; null, the round-robin emptied,
  // if none is left.
  detail::Connection* front_ready();
  // The round-robin's turn from c, its front, on: the output path. c comes
  // last, so that the other arguments stay in the registers poll_transmit
  // took them in and the jump from poll_ready moves none.
  template <bool gather>
  [[gnu::noinline, gnu::hot]] bool emit_from(TimeNs now, std::span<uint8_t> buf, TxDatagram& out,
                                             detail::Connection& c);
  // False only if emit_for surely finds nothing to send: no ACK or control
  // packet owed, and no message, READ response or retransmission waiting.
  // The usual answers first: an ACK owed, a message being sent.
  [[nodiscard]] static bool may_emit(const detail::Connection& c) {
    return c.echo_count != 0 || (c.tx && c.tx->has_unsent()) || c.owes_control();
  }
  [[gnu::cold]] bool emit_orphan(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  template <bool gather>
  bool emit_for(detail::Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  void trace(TimeNs t, TraceKind k, const detail::Connection& c, uint8_t path, uint32_t psn,
             uint32_t aux) const {
    if (trace_fn != nullptr) trace_fn(trace_ctx, TraceEvent{t, k, path, c.id, psn, aux});
  }
  void complete(const detail::Connection& c, const Completion& comp);
  // Room in the completion queue for every request posted and not yet
  // completed, and one more: checked by a post about to queue (a refused
  // one allocates nothing), so that complete(), on the packet path, never
  // allocates. False (memory short): the post is refused kResourceExhausted.
  [[nodiscard]] bool room_for_completion() {
    return completions.size() + wrs_open < completions.capacity() || grow_completions();
  }
  [[gnu::cold, gnu::noinline]] bool grow_completions() noexcept;
  void push_event(EventKind k, const detail::Connection& c, Status s, Status reason = Status::kOk);
  // The contexts, borrowed from the pools on first use. Inline: every data
  // packet asks, and nearly always the connection holds one already.
  // Null, the connection holding none, when memory for one runs short: a
  // posted request is then refused kResourceExhausted, a packet dropped as if
  // lost (its sender resends it), never std::bad_alloc out of the engine.
  [[nodiscard]] detail::TxCtx* tx_ctx(detail::Connection& c) {
    return c.tx ? c.tx.get() : borrow_tx(c);
  }
  [[nodiscard]] detail::RxCtx* rx_ctx(detail::Connection& c) {
    return c.rx ? c.rx.get() : borrow_rx(c);
  }
  detail::TxCtx* borrow_tx(detail::Connection& c) noexcept;
  detail::RxCtx* borrow_rx(detail::Connection& c) noexcept;
  template <typename Ctx>
  std::unique_ptr<Ctx> shaped(std::vector<std::unique_ptr<Ctx>>& pool,
                              const detail::Connection& c) noexcept;
  // Sizes a context's queues for c, every position at its start.
  void shape(detail::TxCtx& t, const detail::Connection& c) const;
  void shape(detail::RxCtx& r, const detail::Connection& c) const;
  // READ responses we hold at most (READ-3's limit, with slack).
  [[nodiscard]] uint32_t resp_depth() const { return uint32_t{cfg.max_reads} * 4; }
  void maybe_release_ctx(detail::Connection& c, TimeNs now);
  bool tx_idle(const detail::Connection& c) const;
  bool rx_idle(const detail::Connection& c) const;
  wire::BaseHeader base_header(const detail::Connection& c, wire::Opcode op, TimeNs now) const;
  [[gnu::always_inline]] size_t finish(std::span<uint8_t> buf, size_t hlen, size_t plen) const {
    return wire::detail::seal_inline(buf, hlen, plen);
  }

  // ---- handshake.cpp ----
  Status connect(const PeerAddr& peer, TimeNs now, ConnId& out, uint16_t max_mtu,
                 uint16_t attempts);
  void close(detail::Connection& c, TimeNs now);
  [[gnu::cold]] void on_connect_req(const RxDatagram& dg, const wire::Packet& p, TimeNs now);
  [[gnu::cold]] bool on_connect_reply(detail::Connection& c, const wire::Packet& p, TimeNs now);
  // A REJECT, or an ACCEPT refused (CONN-3, CONN-4): the connection fails and
  // is gone. Apart (noinline): inlined in on_connect_reply, and so in the
  // receive path, it cost every data packet 19.9 instructions
  // (scripts/engine-instructions.sh) once it passed a REJECT's code on.
  [[gnu::cold, gnu::noinline]] void fail_connect(detail::Connection& c, const wire::Packet& p,
                                                 bool accepted);
  [[gnu::cold]] void on_disconnect(const RxDatagram& dg, const wire::Packet& p);
  // A DISCONNECT whose dst_conn names no connection: answered (true) if it
  // repeats the one that closed a connection still in recently_closed.
  [[gnu::cold]] bool on_closed_disconnect(const RxDatagram& dg, const wire::Packet& p);
  [[gnu::cold]] bool on_abandoned_accept(const RxDatagram& dg, const wire::Packet& p);
  // A DISCONNECT or CONNECT_ACCEPT whose dst_conn names no connection: one
  // of the two above. Kept out of the receive path (noinline): both inlined
  // there cost every data packet 10.5 instructions.
  [[gnu::cold, gnu::noinline]] bool on_unknown_connection(const RxDatagram& dg,
                                                          const wire::Packet& p);
  void ack_disconnect(const RxDatagram& dg, const wire::Packet& p);
  [[gnu::cold]] void reject_bad_version(const RxDatagram& dg);
  // Queues a CONNECT_REJECT with `code` to the request from dg that carried
  // src_conn and nonce (CONN-4, CONN-5).
  [[gnu::cold]] void queue_reject(const RxDatagram& dg, uint32_t src_conn, uint64_t nonce,
                                  Status code);
  // False when a context holding work posted while connecting found no
  // memory to take the agreed window (tx_ctx): the old one kept.
  [[gnu::cold, nodiscard]] bool establish(detail::Connection& c, const wire::ConnectBody& peer_body,
                                          TimeNs now);
  bool emit_control(detail::Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  [[gnu::cold]] void enter_error(detail::Connection& c, Status why, detail::Culprit who,
                                 TimeNs now);
  [[gnu::cold]] void flush_all(detail::Connection& c, Status first, detail::Culprit who);

  // ---- sender.cpp (sending), acks.cpp (what comes back), loss.cpp (losses, timeouts) ----
  Status post_send(detail::Connection& c, const SendWr& wr);
  template <bool gather>
  bool emit_data(detail::Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  // emit_data's body; rnr_paused: within LOSS-7's pause, a copy of its own
  // (emit_data_paused), so that the common case pays nothing for it.
  template <bool gather, bool rnr_paused>
  [[gnu::always_inline]] inline bool emit_data_when(detail::Connection& c, TimeNs now,
                                                    std::span<uint8_t> buf, TxDatagram& out);
  template <bool gather>
  [[gnu::cold]] bool emit_data_paused(detail::Connection& c, TimeNs now, std::span<uint8_t> buf,
                                      TxDatagram& out);
  void on_ack(detail::Connection& c, const wire::Packet& p, TimeNs now);
  void on_nak(detail::Connection& c, const wire::Packet& p, TimeNs now);
  void on_tlp_echo(detail::Connection& c, detail::TxCtx& t, const wire::AckBody& a, TimeNs now);
  void chase_lone_tail(detail::Connection& c, detail::TxCtx& t, TimeNs now);
  void on_trim_echo(detail::Connection& c, detail::TxCtx& t, const wire::AckBody& a, TimeNs now);
  // LOSS-8: the tail-loss timer, from a path's latest transmission. Its
  // variance term (as in QUIC's probe timeout) keeps a path whose RTT
  // swings, from a queue it shares with other paths or a busy host, from
  // resending and probing for packets that are only late.
  [[nodiscard]] uint64_t tlp_timeout(const detail::Path& p) const {
    return p.srtt + std::max(p.srtt / 4, 4 * p.rttvar) + cfg.ack_delay_ns;
  }
  // LOSS-8: how long a PROBE's answer may take. It is asked for at once and
  // follows the path's packets in order, so no variance term: a path that
  // stays silent this long is timed out early (run_timers).
  [[nodiscard]] uint64_t tlp_answer_timeout(const detail::Path& p) const {
    return p.srtt + p.srtt / 4 + cfg.ack_delay_ns;
  }
  void mark_acked(detail::Connection& c, detail::TxCtx& t, uint32_t psn, TimeNs now,
                  uint32_t& touched);
  // mark_acked without recording the PSN in the acked set. Inlined: it runs
  // for every packet acknowledged, and its call cost a fifth of its work.
  [[gnu::always_inline]] inline void on_acked(detail::Connection& c, detail::TxCtx& t, uint32_t psn,
                                              TimeNs now, uint32_t& touched);
  // LOSS-2 with a packet threshold: reorder_threshold from ACKs; 1 for its
  // time form, when the tail-loss timer that an ACK brought forward expires.
  // True if it declared a packet lost.
  bool detect_losses(detail::Connection& c, detail::TxCtx& t, uint8_t path, TimeNs now,
                     uint32_t threshold);
  // Counted as a loss of the path's own (LossCause: kReorder, kTailProbe;
  // not a timeout's, counted by lose_path_inflight, nor a resend chosen
  // early); judge: hand such a loss to on_path_loss (CC-7, PATH-5), which
  // the second and later of a run of a path's consecutive packets lost
  // together are not.
  void declare_lost(detail::Connection& c, detail::TxCtx& t, detail::TxRecord& r, TimeNs now,
                    LossCause why, bool judge = true);
  // Every packet in flight on the path; counted as losses for kTimeout only.
  void lose_path_inflight(detail::Connection& c, uint8_t path, TimeNs now, LossCause why);
  void on_rto(detail::Connection& c, uint8_t path, TimeNs now);
  // COMP-1. Inline up to the test of the oldest message: most ACKs complete
  // none, and the call cost more than finding that out.
  [[gnu::always_inline]] void complete_sends(detail::Connection& c) {
    const detail::TxCtx& t = *c.tx;
    if (t.sq_head == t.sq_seg) return;
    const detail::SqEntry& e = t.sq[t.sq_head & t.sq_mask];
    if (static_cast<int32_t>(e.first_psn + e.npkts - 1 - c.cum_acked) >= 0) return;
    complete_sends_from(c);
  }
  void complete_sends_from(detail::Connection& c);
  void release_resp_jobs(detail::Connection& c);
  [[gnu::cold]] [[gnu::noinline]] void read_served(const detail::Connection& c,
                                                   const detail::RespJob& j);
  // SCHED-1's choice. Inline, the case that ends its scan at the first path
  // it looks at: the round-robin's next path open, idle and not the one to
  // avoid (an empty window, which nothing can beat). The call and the scan's
  // setup cost more than that test; any other case takes the whole scan.
  [[gnu::always_inline]] int pick_path(detail::Connection& c, int avoid, TimeNs now) {
    const uint8_t n = c.num_paths;
    const uint8_t i = c.rr_next < n ? c.rr_next : 0;
    const detail::Path& p = c.paths[i];
    if (cfg.cc.max_inflight_packets == 0 && p.inflight == 0 && p.state == PathState::kActive &&
        !p.held && (p.cwnd >= packet_cost(c.mtu) || now >= p.next_send) &&
        p.next_pseq - p.ring_head < c.window() && i != avoid && i != c.draining_slot) {
      c.rr_next = static_cast<uint8_t>(i + 1 == n ? 0 : i + 1);
      return i;
    }
    return pick_path_scan(c, avoid, now);
  }
  int pick_path_scan(detail::Connection& c, int avoid, TimeNs now);
  // PATH-7 times the silence while work is outstanding: a new packet sent
  // when nothing was outstanding starts that clock, or a connection idle
  // for longer than peer_timeout would fail its first packet at once.
  // Asked only when the packet's path had nothing in flight (every path is
  // empty then), so not on every packet.
  // A READ request counts itself in reads_outstanding already.
  static void start_silence_clock(detail::Connection& c, const detail::SqEntry* sq, uint32_t psn,
                                  bool retx, TimeNs now) {
    if (retx || psn != c.cum_acked) return;
    const uint32_t own = sq != nullptr && sq->wr.op == WrOpcode::kRead ? 1 : 0;
    if (c.reads_outstanding == own) c.last_progress = now;
  }
  // CC-1: the initial window belongs to the connection; its paths share it,
  // so spraying over more paths does not multiply the first burst.
  [[nodiscard]] uint32_t initial_cwnd(const detail::Connection& c) const {
    // CC-6 bounds it as it does every window.
    return std::min(
        std::max(cfg.cc.initial_cwnd_packets * packet_cost(c.mtu) / c.num_paths, cwnd_floor(c)),
        c.max_cwnd);
  }
  [[nodiscard]] uint32_t cwnd_floor(const detail::Connection& c) const { return c.cwnd_floor; }
  // Sets c.cwnd_floor and c.max_cwnd; called whenever the MTU, the window
  // or the path count is set. Kept rather than computed: every ACK asks,
  // and the floor costs a division.
  void set_cwnd_floor(detail::Connection& c) const {
    c.max_cwnd =
        (cfg.cc.max_cwnd_packets ? std::min(cfg.cc.max_cwnd_packets, c.window()) : c.window()) *
        packet_cost(c.mtu);
    // CC-6: the floor is per connection, shared by its paths, so an incast of
    // many multipath senders can still back off below a packet each.
    c.cwnd_floor = std::max<uint32_t>(
        std::max<uint32_t>(cfg.cc.min_cwnd_packets, 1) * packet_cost(c.mtu) / c.num_paths, 64);
  }
  bool trim_ring(detail::Connection& c, uint8_t path);
  uint32_t& ring_at(detail::Connection& c, detail::TxCtx& t, uint8_t path, uint32_t pseq);
  detail::TxRecord* in_flight_at(detail::Connection& c, detail::TxCtx& t, uint8_t path,
                                 uint32_t pseq);
  // Inlined: every ACK calls it, and the call's register saves cost about as
  // much as the one or two PSNs an ACK usually advances over.
  [[gnu::always_inline]] inline void advance_cum(detail::Connection& c, detail::TxCtx& t,
                                                 uint32_t cum, TimeNs now, uint32_t& touched);
  bool build_headers(detail::Connection& c, detail::TxCtx& t, uint16_t slot, uint32_t psn,
                     uint8_t path, TimeNs now, std::span<uint8_t> buf, const uint8_t*& src,
                     uint32_t& plen, size_t& h);
  // sq: the send-queue entry `slot` names, null for a READ response job
  // (passed in, as the caller has it at hand, rather than looked up again).
  template <bool gather>
  [[gnu::always_inline]] inline bool build_data(detail::Connection& c, detail::TxCtx& t,
                                                uint16_t slot, const detail::SqEntry* sq,
                                                uint32_t psn, uint8_t path, bool retx, TimeNs now,
                                                std::span<uint8_t> buf, TxDatagram& out);

  // A lost packet's next transmission (LOSS-3), on `path`. Out of line:
  // resends are rare, and inlined beside new data's build_data they cost
  // that path a few instructions of register shuffling.
  template <bool gather>
  [[gnu::noinline]] bool resend_data(detail::Connection& c, detail::TxCtx& t, detail::TxRecord& r,
                                     uint8_t path, TimeNs now, std::span<uint8_t> buf,
                                     TxDatagram& out);

  // LOSS-7: within an RNR pause, the oldest READ response retransmission
  // queued behind the send queue's own (which wait for the pause to end):
  // taken out of the queue and sent, the others keeping their order.
  template <bool gather>
  [[gnu::cold]] bool resend_response_in_pause(detail::Connection& c, TimeNs now,
                                              std::span<uint8_t> buf, TxDatagram& out);

  // ---- receiver.cpp ----
  Status post_recv(detail::Connection& c, const RecvWr& wr);
  Status post_shared_recv(const RecvWr& wr);
  // Doubles the shared queue's ring (16 first, bit_ceil(shared_rq_depth) at
  // most), its receives kept in order; false, nothing changed, when memory
  // runs short.
  [[gnu::cold]] bool grow_srq() noexcept;
  // PLACE-6: moves shared receives, oldest first, into the connection's
  // queue until it holds receive `idx` (counted from its oldest); false if
  // the shared queue or the connection's queue runs out first.
  [[gnu::cold, gnu::noinline]] bool take_shared(detail::RxCtx& r, uint32_t idx);
  // Hands the shared receives a closing or failing connection holds back to
  // the front of the shared queue, in their order.
  // `keep` (a receive at fault, MR-5) is completed, not given back: given
  // back, it would fail every connection that took it after.
  void give_back_shared(detail::RxCtx& r, const detail::RecvEntry* keep);
  void on_data(detail::Connection& c, const RxDatagram& dg, const wire::Packet& p, TimeNs now);
  void on_probe(detail::Connection& c, const RxDatagram& dg, const wire::Packet& p, TimeNs now);
  void on_trimmed(detail::Connection& c, const RxDatagram& dg, const wire::Packet& p, TimeNs now);
  [[nodiscard]] static bool payload_short(const detail::Connection& c, const wire::Packet& p);
  // The echo an ACK for packet `p` carries (ACK-6).
  static detail::Echo echo_of(const RxDatagram& dg, const wire::Packet& p, uint8_t flags) {
    return {p.bh.psn, p.bh.tsval, p.bh.path_tag, dg.entropy, flags};
  }
  void owe_ack(detail::Connection& c, detail::Echo e, bool immediate, TimeNs now);
  // owe_ack for the echo c.latest already holds (ACK-6 kept its choice).
  void owe_latest(detail::Connection& c, bool immediate, TimeNs now);
  // ACK-6: the newest plain echo meets one still pending (owe_latest).
  void coalesce_echo(detail::Connection& c);
  // ACK generation (receiver.cpp's business), here so that it inlines into
  // emit_for, its only caller: left to the link-time optimizer it stayed a
  // call, which cost ~6 instructions per data packet.
  [[gnu::always_inline]] bool emit_ack(detail::Connection& c, TimeNs now, std::span<uint8_t> buf,
                                       TxDatagram& out) {
    if (c.echo_count == 0) return false;
    const detail::Echo e = c.echoes[0];
    for (uint8_t i = 1; i < c.echo_count; ++i) c.echoes[i - 1] = c.echoes[i];
    --c.echo_count;
    // ACK-8: SACK words only when something beyond rx_cum arrived. Nearly
    // every ACK has none and is built here without a call, so without the
    // register saves that a call on the way would cost.
    if (c.rx && detail::before(c.rx_cum + 1, c.rx_high)) return emit_sack_ack(c, e, now, buf, out);
    // The fields straight from the echo, not through an AckBody: the header's
    // stores may alias it, so each field was stored there and loaded back.
    // Written into the datagram's own length of buf, which poll() found at
    // least min_tx_buffer long: the writer's and the seal's size tests fold.
    constexpr size_t kPlainAck = wire::kBaseHeaderSize + wire::kAckFixedSize;
    const std::span<uint8_t> dgram = buf.first(kPlainAck + wire::kIcrcSize);
    const size_t h = wire::write_ack(dgram, base_header(c, wire::Opcode::kAck, now), c.rx_cum,
                                     e.psn, e.tsval, e.tag, static_cast<uint8_t>(e.flags), {});
    return ack_built(c, e, h, h == kPlainAck ? wire::detail::seal_fixed<kPlainAck>(dgram) : 0, out);
  }
  // emit_ack's rare case, out of line so that the usual one makes no call.
  [[gnu::noinline]] bool emit_sack_ack(detail::Connection& c, const detail::Echo& e, TimeNs now,
                                       std::span<uint8_t> buf, TxDatagram& out);
  // The end of emit_ack, once the ACK is written (len 0: it did not fit).
  [[gnu::always_inline]] bool ack_built(detail::Connection& c, const detail::Echo& e, size_t h,
                                        size_t len, TxDatagram& out) {
    out.entropy = e.entropy;  // ACK-7
    out.header_len = h;
    out.len = len;
    if (c.echo_count == 0) {
      c.unacked = 0;
      c.ack_deadline = TimeNs::never();
    }
    ++c.stats.acks_sent;
    return len > 0;
  }
  // r: c's receive context, which the caller has at hand.
  void complete_recvs(detail::Connection& c, detail::RxCtx& r);
  [[gnu::noinline]] void on_read_req(detail::Connection& c, const wire::Packet& p, uint32_t psn,
                                     Status& why);
  void on_read_resp(detail::Connection& c, const wire::Packet& p, Status& why);
  // Out of line: READ responses pay for it, not on_data's other packets.
  [[gnu::noinline]] static bool response_fits(const detail::Connection& c, detail::SqEntry& e,
                                              const wire::Packet& p);
  [[gnu::cold]] [[gnu::noinline]] static void repeat_nak(detail::Connection& c,
                                                         const RxDatagram& dg,
                                                         const wire::Packet& p);
  [[gnu::cold]] [[gnu::noinline]] void on_memory_gone(detail::Connection& c, const RxDatagram& dg,
                                                      const wire::Packet& p,
                                                      const detail::RecvEntry* rq_entry,
                                                      TimeNs now);

  // ---- path.cpp ----
  void init_paths(detail::Connection& c);
  // Inlined into on_acked, for the same reason.
  [[gnu::always_inline]] inline void on_path_acked(detail::Connection& c, const detail::TxCtx& t,
                                                   uint8_t path, uint32_t bytes, TimeNs now);
  void on_path_echo(detail::Connection& c, const wire::AckBody& ack, TimeNs now);
  void on_path_loss(detail::Connection& c, uint8_t path, TimeNs now);
  void retire_path(detail::Connection& c, uint8_t path, TimeNs now);
  // PATH-6's new entropy, generation and probe, for a retired or explored path.
  // entropy < 0: a fresh random one. keep_rtt (PATH-8): the RTT estimate and
  // min_rtt carry over as starting values instead of restarting.
  uint16_t unused_entropy(const detail::Connection& c, uint16_t old, uint32_t range);
  void renew_path(detail::Connection& c, uint8_t path, TimeNs now, int entropy = -1,
                  bool keep_rtt = false);
  void explore_moved_path_back(detail::Connection& c, uint8_t slot, TimeNs now);
  // PATH-8: a trial during which a path timed out or is retired ends with
  // no verdict.
  [[gnu::cold]] void explore_path_failed(detail::Connection& c, uint8_t slot, TimeNs now);
  // PATH-8: an ACK left the connection with nothing to send, or with data
  // waiting after it had none.
  [[gnu::noinline, gnu::cold]] void explore_idle_changed(detail::Connection& c, TimeNs now);
  // PATH-8. Rarely runs (once per explore interval, or while a path drains):
  // kept out of the ACK path it is called from.
  [[gnu::noinline, gnu::cold]] void explore(detail::Connection& c, TimeNs now);
  // LOSS-2: whether the ACK being handled echoes r's latest transmission:
  // its PSN, on r's path, in that path's current generation, with no earlier
  // transmission that the same echo could name. Asked only of resent PSNs.
  [[nodiscard]] bool echo_names_latest(const detail::Connection& c,
                                       const detail::TxRecord& r) const {
    const wire::AckBody* a = ack_in_hand;
    return a != nullptr && a->echo_psn == r.psn && !(a->flags & wire::kAckEchoProbe) &&
           !(r.flags & detail::kRecEchoAmbiguous) && c.echoed_slot(a->echo_path_tag) == r.path;
  }
  // LOSS-4: the connection's first RTT sample (from `from`), lent to its
  // other paths.
  [[gnu::cold]] void lend_first_rtt(detail::Connection& c, const detail::Path& from, uint64_t rtt);
  // LOSS-4's RTO before LOSS-5's backoff.
  uint64_t base_rto(const detail::Path& p) const;
  uint64_t path_rto(const detail::Connection& c, const detail::Path& p) const;
  // When a PROBE sent now on p times out (PATH-4; PATH-6 for a silent path).
  TimeNs probe_deadline(const detail::Connection& c, const detail::Path& p, TimeNs now) const;
  // PATH-4: one more timeout of the path (an RTO or an unanswered PROBE);
  // true when it has failed and is to be retired.
  [[gnu::cold]] bool count_timeout(const detail::Connection& c, detail::Path& p);
  // PATH-6: a PROBE was answered, or work starts on a connection that was
  // idle (borrow_tx); paths probing a silent peer probe again now.
  [[gnu::noinline, gnu::cold]] void wake_silent_paths(detail::Connection& c, TimeNs now);
  void arm_rto(detail::Connection& c, detail::Path& p, TimeNs now);
  // x / loss_window_packets (PATH-5's EWMA gain), for every packet
  // acknowledged: a shift when the window is a power of two (the default)
  // rather than a division.
  [[nodiscard]] uint32_t per_loss_window(uint32_t x) const {
    return loss_window_shift >= 0 ? x >> loss_window_shift : x / loss_window;
  }
  uint32_t loss_window = 1;
  int loss_window_shift = 0;  // log2(loss_window), or -1 if not a power of two
  [[nodiscard]] uint32_t packet_cost(uint32_t payload) const {
    return payload + detail::kPacketOverhead;
  }
  // Requests posted and not yet completed (room_for_completion). Last: no
  // hot member moves for it.
  size_t wrs_open = 0;
  // Stale entries in `ready` (drop_ready).
  size_t ready_stale = 0;
};

}  // namespace metaroce
