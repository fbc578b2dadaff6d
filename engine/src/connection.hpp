// Per-connection state. A connection is a small always-present core (this
// struct without its contexts) plus two tracking contexts borrowed from the
// endpoint's pools while there is work: TxCtx (send queue, per-PSN records,
// per-path send order) and RxCtx (receive window bitmap, receive queue).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "metaroce/engine.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::detail {

inline constexpr uint32_t kPacketOverhead = 64;    // bytes charged per packet on top of payload
inline constexpr uint16_t kRespSlotFlag = 0x8000;  // TxRecord::slot names a READ response job
inline constexpr uint32_t kFix = 1u << 16;         // fixed-point one for alpha and loss EWMA
inline constexpr uint32_t kNoSlot = UINT32_MAX;

// Sequence order modulo 2^32 (SEQ-2): a comes before b.
[[nodiscard]] inline bool before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
inline constexpr uint8_t kNoPath = 0xff;
// Room for the longest data headers (WRITE_IMM: 48 bytes), copied whole.
inline constexpr size_t kHeaderTemplateSize = wire::kMaxDataHeaderSize;

enum class ConnState : uint8_t { kConnecting, kEstablished, kError, kClosing, kClosed };

struct Path {
  uint16_t entropy = 0;
  uint16_t generation = 0;
  PathState state = PathState::kActive;
  bool slow_start = true;
  bool has_rtt = false;
  uint8_t consecutive_rtos = 0;
  uint8_t backoff = 0;
  uint32_t cwnd = 0;       // bytes
  uint32_t inflight = 0;   // bytes
  uint32_t cwnd_frac = 0;  // additive-increase accumulator
  uint32_t alpha = kFix;   // DCTCP alpha, fixed point (CC-3)
  uint32_t win_acked = 0;  // bytes acked in the current alpha window
  uint32_t win_pkts = 0;   // packets acked in the current alpha window
  uint32_t win_ce = 0;     // CE echoes in the current alpha window
  uint32_t loss_ewma = 0;  // fixed point (PATH-5)
  uint32_t outcomes = 0;
  uint32_t next_pseq = 0;           // per-path transmission number (LOSS-1)
  uint32_t ring_head = 0;           // oldest pseq still in the send-order ring
  uint32_t highest_acked_pseq = 0;  // valid when any_acked
  bool any_acked = false;
  uint64_t srtt = 0, rttvar = 0, min_rtt = 0;
  TimeNs rto_deadline = TimeNs::never();
  TimeNs tlp_deadline = TimeNs::never();  // tail-loss probe (LOSS-8)
  uint32_t tlp_pseq = 0;                  // send-order number the outstanding TLP took
  TimeNs tlp_sent{0};                     // when the outstanding TLP was sent
  bool tlp_outstanding = false;
  bool held = false;  // LOSS-8: a tail packet was resent elsewhere; no new data until it answers
  bool fresh = true;  // new entropy: starts at the initial window
  // LOSS-8, the connection's tail: when the path last carried a resend, and
  // the newest PSN sent by then. A resend made after the newest PSN was last
  // sent is younger than that packet's acknowledgement tells of.
  uint32_t resent_newest = 0;
  TimeNs resent_at{0};
  // PATH-6: the connection's last_progress, low 32 bits, at the first of the
  // path's consecutive timeouts: unchanged at the last, nothing was
  // acknowledged meanwhile (a false match needs progress a multiple of
  // 2^32 ns later to the nanosecond). 32 bits fill a hole: a wider field
  // would grow the path and its indexing on every packet.
  uint32_t progress_mark = 0;
  TimeNs last_congestion{0};  // last CE echo or delay signal (PATH-5)
  TimeNs probe_deadline = TimeNs::never();
  TimeNs last_decrease{0};
  TimeNs next_send{0};  // pacing while cwnd is below one packet (CC-6)
  // CC-2: the latest time SCHED-1 passed this path over with data to send,
  // its window full; the window grows only within two of its round trips.
  TimeNs window_full{0};
  PathStats stats;

  [[nodiscard]] uint16_t tag(uint8_t slot) const { return wire::make_path_tag(slot, generation); }
};

// The work request's opcodes are listed in the wire opcodes' order, one
// below them: an addition per packet, not a switch.
constexpr wire::Opcode data_opcode(WrOpcode op) {
  return static_cast<wire::Opcode>(static_cast<uint8_t>(op) + 1);
}
static_assert(data_opcode(WrOpcode::kWrite) == wire::Opcode::kWrite &&
              data_opcode(WrOpcode::kWriteImm) == wire::Opcode::kWriteImm &&
              data_opcode(WrOpcode::kSend) == wire::Opcode::kSend &&
              data_opcode(WrOpcode::kSendImm) == wire::Opcode::kSendImm &&
              data_opcode(WrOpcode::kRead) == wire::Opcode::kReadReq);

// The packets a message of len bytes takes (SEQ-5): 1 for an empty one.
// Computed in 64 bits: a 32-bit len + mtu - 1 wraps for len near 2^32.
[[nodiscard]] inline uint32_t packets_for(uint32_t len, uint32_t mtu) {
  return len == 0 ? 1 : static_cast<uint32_t>((uint64_t{len} + mtu - 1) / mtu);
}

// One entry per PSN in the send window, indexed by psn & (W-1).
struct TxRecord {
  uint32_t psn = 0;
  uint32_t pseq = 0;  // transmission number on `path` of the latest send
  uint16_t slot = 0;  // send-queue slot, or kRespSlotFlag | response job slot
  uint16_t len = 0;   // payload bytes
  uint8_t path = 0;
  uint8_t flags = 0;
  uint8_t tx_count = 0;
  // TRIM-3: the low byte of the latest transmission's tsval, which an echo
  // of it carries back (echo_tsval), where an earlier one's differs (but 1
  // time in 256). In what was the record's padding: it stays 16 bytes.
  uint8_t tsval_lo = 0;
};
static_assert(sizeof(TxRecord) == 16);
inline constexpr uint8_t kRecInFlight = 0x01;
inline constexpr uint8_t kRecAcked = 0x02;
inline constexpr uint8_t kRecQueued = 0x04;  // waiting in the retransmit queue
// LOSS-2: an echo of the PSN on the latest transmission's path may name an
// earlier transmission too (one sent on that path, or a third or later
// transmission), so it does not say that the latest arrived.
inline constexpr uint8_t kRecEchoAmbiguous = 0x08;

// post_send sets every field in place (no clearing of the whole entry first):
// a field added here is to be set there too.
struct SqEntry {
  SendWr wr;
  const uint8_t* local = nullptr;  // resolved local buffer (source, or READ target)
  uint8_t* read_target = nullptr;
  uint32_t npkts = 0;  // packets this WR sends (READ: 1 request)
  uint32_t sent = 0;   // packets assigned a PSN so far
  uint32_t msn = 0;    // RSN or read sequence
  uint32_t first_psn = 0;
  uint32_t resp_pkts = 0;      // READ: response packets expected
  uint32_t resp_received = 0;  // READ: response packets placed
  Status status = Status::kOk;
  bool failed = false;
  // READ: the PSN of response packet 0 in the responder's space, known from
  // the first response placed (PLACE-4). In what was the entry's padding.
  uint32_t resp_first_psn = 0;
};
static_assert(sizeof(SqEntry) == 104);

// A READ we are serving (READ-2): response packets in our PSN space.
struct RespJob {
  uint32_t req_psn = 0;  // served once every PSN up to the request has arrived (READ-5)
  uint32_t lkey = 0;     // the region src lies in: served only while it is registered
  const uint8_t* src = nullptr;
  uint32_t len = 0;
  uint32_t read_seq = 0;
  uint32_t npkts = 0;
  uint32_t sent = 0;
  uint32_t first_psn = 0;
  uint64_t raddr = 0;  // as the READ_REQ named it: ReadServed reports it
};

struct TxCtx {
  std::vector<TxRecord> records;     // W
  std::vector<uint64_t> acked_bits;  // W bits: PSNs in [cum_acked, next_psn) acked
  std::vector<uint32_t> path_rings;  // num_paths x W psns, in send order per path
  std::vector<uint32_t> retx;        // W psns, FIFO
  uint32_t retx_head = 0, retx_tail = 0;
  // A message, READ response or retransmission is waiting to be sent.
  [[nodiscard]] bool has_unsent() const {
    return sq_seg != sq_tail || resp_seg != resp_tail || retx_head != retx_tail;
  }
  // CC-2: the latest time CC-9's cap held data back; every path's window may
  // grow within two of its round trips of it.
  TimeNs capped{0};
  // PATH-8: a move is a trial, measured against the interval before it.
  // Here, not in Connection: only a sending connection explores, and an idle
  // one starts afresh.
  struct Exploration {
    TimeNs next{0};           // next tick; 0: not started; never: a moved path is not back yet
    TimeNs mark_time{0};      // start of the window being measured
    uint64_t mark_acked = 0;  // packets acknowledged on all paths by mark_time
    // The rate counts only time the connection was limited by its windows:
    // from an ACK that left data waiting to the next ACK, with the packets
    // that one acknowledges. The rest (idle: from an ACK that left nothing
    // to send to the first that leaves some) is summed here, since the mark.
    TimeNs idle_since{0};                      // the open idle stretch's start (while idle)
    uint64_t idle_since_acked = 0;             // packets acknowledged by idle_since
    uint64_t idle_ns = 0, idle_acked = 0;      // closed idle stretches since the mark
    uint64_t before_acked = 0, before_ns = 0;  // the window before the move
    uint16_t old_entropy = 0;                  // the moved path's entropy before the move
    uint8_t trial = kNoPath;                   // the moved path, until its trial is judged
    uint8_t backoff = 0;                       // failed trials in a row: the interval doubles
    bool reverting = false;                    // the draining path goes back to old_entropy
    bool idle = false;  // the latest ACK left nothing to send (not window-limited)
  };
  Exploration explore;
  // The send queue and READ responses are rings of power-of-two capacity
  // (at least the configured depth), indexed by masking the free-running
  // counters: a modulo by a run-time size was a division on every packet.
  std::vector<SqEntry> sq;  // sq_depth, rounded up
  uint32_t sq_mask = 0;
  uint32_t sq_head = 0, sq_seg = 0, sq_tail = 0;  // complete <= head <= seg(menting) <= tail
  std::vector<RespJob> resp;                      // 4 x max_reads, rounded up
  uint32_t resp_mask = 0;
  uint32_t resp_head = 0, resp_seg = 0, resp_tail = 0;
  // read_seq -> sq index of an outstanding READ. A power of two in size, so
  // that the mapping stays one across read_seq's 32-bit wrap (2^32 is a
  // multiple of it): sized peer_max_reads, 10 say, two READs either side of
  // the wrap shared a slot and the older one's responses were all dropped.
  std::vector<uint32_t> read_slot;
  [[nodiscard]] uint32_t& read_slot_of(uint32_t read_seq) {
    return read_slot[read_seq & (read_slot.size() - 1)];
  }
  // The READ of ours with this read sequence that still awaits responses,
  // or null: what a READ_RESP (PLACE-4) or a NAK naming a READ (MR-5) must
  // match.
  [[nodiscard]] SqEntry* open_read(uint32_t read_seq) {
    const uint32_t si = read_slot_of(read_seq);
    if (si >= sq.size()) return nullptr;
    SqEntry& e = sq[si];
    const bool open = e.wr.op == WrOpcode::kRead && e.sent > 0 && e.msn == read_seq &&
                      e.resp_received < e.resp_pkts;
    return open ? &e : nullptr;
  }
  // The data headers of one WRITE or SEND message, patched for each of its
  // packets (wire::patch_data_headers): building every field of every packet
  // was a third of the cost of sending one. Written whole for the first
  // message of an opcode; a later message of the same opcode patches only
  // its own fields (wire::patch_message_headers).
  std::array<uint8_t, kHeaderTemplateSize> hdr{};
  uint32_t hdr_slot = kNoSlot;  // send-queue slot whose message `hdr` holds
  uint8_t hdr_len = 0;          // 0: `hdr` holds nothing of this connection's
};

// The work request a failure names (COMP-5, NAK-3, MR-5); every other one
// completes kFlushed. A PSN the peer sent names none of ours: our own send
// queue's PSNs are another numbering, and one compared against them could
// blame a request that has nothing to do with the fault.
struct Culprit {
  enum class Kind : uint8_t { kNone, kSendPsn, kOldestSend, kRecv };
  Kind kind = Kind::kNone;
  uint32_t psn = 0;     // kSendPsn: a PSN of our send queue; else 0 (the trace's, trace.hpp)
  uint32_t rq_pos = 0;  // kRecv: the receive's rq position
  static Culprit none() { return {}; }
  static Culprit send_psn(uint32_t at) { return {Kind::kSendPsn, at, 0}; }
  static Culprit oldest_send() { return {Kind::kOldestSend, 0, 0}; }  // a timeout
  static Culprit recv(uint32_t position) { return {Kind::kRecv, 0, position}; }
};

struct RecvEntry {
  RecvWr wr;
  uint8_t* buf = nullptr;
  uint32_t last_psn = 0;
  uint32_t byte_len = 0;
  uint32_t imm = 0;
  bool has_last = false;
  bool has_imm = false;
  bool write_imm = false;
  bool shared = false;  // taken from the endpoint's shared queue (PLACE-6)
};

// An ACK we owe (ACK-6, ACK-7): the packet it echoes and where it goes.
// Sixteen bytes with no padding (flags a whole word): copied, as for every
// data packet, with two 8-byte moves straight from registers; with a byte of
// flags and three of padding it was built on the stack and copied from there.
struct Echo {
  uint32_t psn = 0;
  uint32_t tsval = 0;
  uint16_t tag = 0;
  uint16_t entropy = 0;
  uint32_t flags = 0;  // wire::kAckEcho* bits, an ACK's flags byte
};
static_assert(sizeof(Echo) == 16);

struct RxCtx {
  std::vector<uint64_t> bits;  // W bits: PSNs in [cum, cum+W) received
  std::vector<RecvEntry> rq;   // rq_depth, rounded up to a power of two
  uint32_t rq_mask = 0;
  uint32_t rq_head = 0, rq_tail = 0;  // head = oldest not completed (rsn Connection::rsn_head)
};

struct Connection {
  ConnId id;
  uint32_t index = 0;
  ConnState state = ConnState::kConnecting;
  bool is_requester = false;
  PeerAddr peer;
  uint8_t peer_max_reads = 0;  // here, it fills the padding after `peer`
  uint32_t peer_conn = 0;
  uint32_t cwnd_floor = 0;  // CC-6, bytes per path (Impl::set_cwnd_floor)
  uint64_t nonce = 0;
  uint32_t initial_psn = 0;
  uint16_t mtu = 0;
  // window() - 1, kept rather than the log2: the per-packet ring indexing
  // and window tests then load it, not shift it into place each time.
  uint16_t window_mask = 0;
  uint8_t num_paths = 0;
  uint8_t rr_next = 0;
  // CONN-2 requests (or DISCONNECTs) sent; two bytes, because a budget above
  // 255 wrapped a one-byte count and the connection never gave up.
  uint16_t attempts = 0;
  bool timer_dirty = false;  // deadline to recompute (Impl::flush_timers)
  // PATH-8: the slot emptying before it moves to a new entropy (kNoPath:
  // none); read for every packet sent, so kept here, not in `explore`.
  uint8_t draining_slot = kNoPath;
  // CONN-2: the CONNECT_REQs this requester sends before it gives up, where
  // connect() was given a number (0: EndpointConfig::connect_attempts). In
  // what was padding, so no hot member moves.
  uint16_t connect_attempts = 0;

  // Control packets owed, in one block of two words: every poll asks whether
  // any is (owes_control), and two loads and an OR answer.
  struct Owed {
    bool connect = false, accept = false, disconnect = false, nak = false;
    uint32_t probe = 0;  // bit per path slot
    uint32_t tlp = 0;    // bit per path slot: tail-loss probes (LOSS-8)
    uint32_t spare = 0;  // always zero: completes the second word
  };
  Owed owe;
  wire::NakBody nak;
  // NAK-2: this end failed the connection with a fatal NAK, which it repeats
  // to whatever the peer sends. An RNR NAK sent earlier is no such answer.
  [[nodiscard]] bool sent_fatal_nak() const {
    return nak.code != 0 && nak.code != static_cast<uint8_t>(Status::kRnr);
  }
  uint16_t nak_entropy = 0;
  // A NAK is owed: `nak` again (NAK-2's repeat), or a new one. It leaves on
  // the entropy of the packet it answers.
  void owe_nak(uint16_t entropy) {
    owe.nak = true;
    nak_entropy = entropy;
  }
  void owe_nak(const wire::NakBody& body, uint16_t entropy) {
    nak = body;
    owe_nak(entropy);
  }
  Status error = Status::kOk;

  // Sender side.
  uint32_t next_psn = 0;   // next new PSN
  uint32_t cum_acked = 0;  // every PSN before it acknowledged
  uint32_t next_rsn = 0;   // receive sequence numbers we assign to SEND*/WRITE_IMM
  uint32_t next_read_seq = 0;
  uint32_t reads_outstanding = 0;
  uint32_t sq_count = 0;
  // PATH-6: bit per path slot retired while the whole connection heard
  // nothing (the peer, or every path's link, is silent): its probes take
  // turns with the other silent paths' at the connection's silent interval.
  // A mask, so that work starting after an idle spell asks with one load
  // whether any path is to be woken.
  uint32_t silent_paths = 0;
  bool resp_turn = true;  // SCHED-4: a READ response goes next if both queues have a message ready
  // PATH-6: PROBEs of silent paths left unanswered since the silence began;
  // the silent interval grows by half with each.
  uint8_t silent_probes = 0;
  uint8_t keepalive_probes = 0;  // CONN-9: PROBEs sent since keepalive_at (saturates at 255)
  // CONN-9: the path slot of the next PROBE. Apart from the count, which
  // stops at 255: the slot taken from it stayed on one path from the 256th
  // PROBE on (a peer_timeout above ~27 s at the default max_rto), and a dead
  // link there failed the keepalive of a live peer. (In padding before rnr_until.)
  uint8_t keepalive_slot = 0;
  // CONN-9: a send was posted since this connection's timers last ran, and
  // last_activity holds the time of the engine call before it, which may be
  // long past: the engine has no clock at a post (Impl::run_timers).
  bool post_unstamped = false;
  TimeNs rnr_until{0};
  TimeNs last_progress{0};
  // LOSS-8: when the latest tail-loss resend went, if one has (then
  // tail_resent). A resend that a tail-loss timer finds unanswered with no
  // progress since is left to its RTO, which backs off: else two paths hand a
  // lost packet to each other every timer, without end, while the peer is gone.
  TimeNs tail_resent_at{0};
  // LOSS-8, the connection's tail: when the newest PSN was last resent (read
  // only while that PSN's record counts more than one transmission).
  TimeNs newest_resent_at{0};
  bool tail_resent = false;
  // LOSS-7: RNR pauses since rnr_psn, the oldest PSN refused, was first
  // refused (counted only under a retry limit). In tail_resent's padding.
  uint16_t rnr_retries = 0;
  uint32_t rnr_psn = 0;
  TimeNs last_activity{0};  // last send posted or packet handled: CONN-9, context release
  // CONN-9: when the first PROBE of the keepalive now waiting for an answer
  // left (0: none ever has), and when the next is due. Anything handled
  // from the peer since (last_activity) answers it.
  TimeNs keepalive_at{0};
  TimeNs keepalive_next{0};
  [[nodiscard]] bool keepalive_waiting() const {
    return keepalive_at.ns != 0 && last_activity < keepalive_at;
  }
  TimeNs control_deadline = TimeNs::never();  // connect / disconnect retry

  // Receiver side.
  uint32_t rx_cum = 0;   // every PSN before it received
  uint32_t rx_high = 0;  // one past the highest PSN received
  uint32_t unacked = 0;
  TimeNs ack_deadline = TimeNs::never();
  // ACKs owed now, oldest first. Only an ESTABLISHED connection owes any:
  // the receive path owes them in no other state, and leaving ESTABLISHED
  // (Impl::enter_error, Impl::close) drops those owed (forget_acks).
  std::array<Echo, 4> echoes{};
  uint8_t echo_count = 0;
  uint16_t echo_weight = 0;  // arrivals the newest pending echo stands for, when plain (ACK-6)
  Echo latest;               // arrival the next delayed ACK echoes (ACK-5, ACK-6)
  uint32_t rsn_head = 0;     // RSN of the oldest receive not yet completed
  // CC-6: the largest window of a path, bytes (Impl::set_cwnd_floor). Here,
  // it fills the padding before the contexts.
  uint32_t max_cwnd = 0;

  std::unique_ptr<TxCtx> tx;
  std::unique_ptr<RxCtx> rx;
  std::vector<Path> paths;  // num_paths entries, sized once at creation
  ConnStats stats;

  [[nodiscard]] uint32_t window() const { return uint32_t{window_mask} + 1; }
  // PATH-6: whether the path in `slot` is silent (silent_paths).
  [[nodiscard]] bool path_silent(uint32_t slot) const { return (silent_paths >> slot) & 1; }
  // The slot an ACK's echo_path_tag names (Path::tag), or -1 when there is
  // no such slot or it has since moved to a new generation (PATH-3): an echo
  // of a replaced entropy says nothing about its successor.
  [[nodiscard]] int echoed_slot(uint16_t tag) const {
    const uint8_t slot = wire::path_tag_slot(tag);
    // A generation is kept below 2^11 (renew_path), so it needs no mask.
    if (slot >= num_paths || wire::path_tag_generation(tag) != paths[slot].generation) return -1;
    return slot;
  }
  [[nodiscard]] uint8_t window_log2() const {
    return static_cast<uint8_t>(std::countr_one(window_mask));
  }
  void set_window_log2(uint8_t log2) { window_mask = static_cast<uint16_t>((1u << log2) - 1); }
  // Whether anything in `owe` is set: asked on every poll, so two loads.
  // NAK-2, CONN-7: a connection failed or closing acknowledges nothing: the
  // ACKs owed, and those the ACK delay would owe, are dropped.
  void forget_acks() {
    echo_count = 0;
    unacked = 0;
    ack_deadline = TimeNs::never();
  }
  [[nodiscard]] bool owes_control() const {
    static_assert(sizeof(Owed) == 2 * sizeof(uint64_t));
    uint64_t v[2];
    std::memcpy(v, &owe, sizeof v);
    return (v[0] | v[1]) != 0;
  }
  [[nodiscard]] uint32_t wmask() const { return window_mask; }
};

}  // namespace metaroce::detail
