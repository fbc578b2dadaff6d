// The MetaRoCE protocol engine: a pure state machine (spec section 2).
//
// It never touches sockets, clocks or threads. A driver (UDP, simulator,
// conformance tester, libfabric provider) feeds it datagrams and the time, and
// drains from it datagrams to send, the next timer deadline, completions and
// connection events. Calls come in four kinds, as in quinn-proto:
//   commands   register_memory, connect, post_send, post_recv, close
//   inputs     handle_datagram, handle_timeout
//   outputs    poll_transmit, next_timeout, poll_completion, poll_event
//   getters    conn_stats, path_stats, endpoint_stats
// No call re-enters the driver; nothing fires from inside an input. The one
// exception is the optional trace sink (set_trace, trace.hpp's TraceFn):
// called synchronously from inside calls, in the middle of a change of
// state, so it may call the getters (they see the change half made) and
// nothing else of the Endpoint.
// An Endpoint is not thread-safe; one thread drives it.
//
// Drive it as: handle_datagram (or handle_timeout), then drain poll_transmit
// until it returns false, then sleep until next_timeout() or the next
// datagram. Drain after every input, with one exception: the datagrams of
// one receive batch (what one receive call returned) may be fed before
// draining, and then draw one ACK per connection (ACK-1; ACK-6 picks its
// echo), except those that must be answered one by one: CE-marked (ACK-2)
// and trimmed (TRIM-2) ones, each drained before it is fed (what the batch
// owes goes first, or its flagged echo takes the plain one's place) and
// after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "metaroce/config.hpp"
#include "metaroce/stats.hpp"
#include "metaroce/status.hpp"
#include "metaroce/trace.hpp"
#include "metaroce/types.hpp"

namespace metaroce {

struct MemoryRegion {
  uint32_t lkey = 0;  // names the region in local work requests
  uint64_t rkey = 0;  // random 64-bit key a peer names in WRITE / READ (MR-1)
  uint64_t addr = 0;  // first byte, as an integer address
  uint64_t length = 0;
  uint32_t access = 0;  // Access bits
};

enum class WrOpcode : uint8_t { kWrite, kWriteImm, kSend, kSendImm, kRead };

// The longest message a work request may carry, 2 GiB; longer is kInvalidArgument.
inline constexpr uint32_t kMaxMessageLength = 1u << 31;

// SendWr::flags. kSendUnsignaled: the work request reports no completion
// when it succeeds (a provider's injects and protocol messages, whose success
// nobody waits for); one that fails, flushed included, still completes with
// its wr_id and status (COMP-4). It still leaves the send queue in posting
// order, so a signaled request's completion implies that every request
// posted before it, unsignaled ones included, succeeded (COMP-2).
inline constexpr uint8_t kSendUnsignaled = 1u << 0;
inline constexpr uint8_t kSendFlagsAll = kSendUnsignaled;

// A send-queue work request. local_addr..+length must lie in region `lkey`
// (with kAccessLocalWrite for READ). For WRITE*/READ, remote_addr/rkey name
// the peer's memory.
struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode op = WrOpcode::kWrite;
  uint8_t flags = 0;  // kSend* bits; others are kInvalidArgument
  uint64_t local_addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;
  uint64_t rkey = 0;
  uint32_t imm = 0;
};
// flags lies in the padding after op: the send queue's entries keep their size.
static_assert(sizeof(SendWr) == 56);

// A receive buffer, consumed in posting order by SEND* and WRITE_IMM.
struct RecvWr {
  uint64_t wr_id = 0;
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

enum class CompletionOp : uint8_t {
  kWrite,
  kWriteImm,
  kSend,
  kSendImm,
  kRead,
  kRecv,
  kRecvWriteImm
};

struct Completion {
  uint64_t wr_id = 0;
  ConnId conn;
  Status status = Status::kOk;
  CompletionOp op = CompletionOp::kWrite;
  // The message's length: for kRecv the SEND's bytes placed in the receive
  // buffer; for kRecvWriteImm the WRITE_IMM's length, placed at its remote
  // address (the receive buffer holds nothing); for the sender's own
  // completions the length it posted.
  uint32_t byte_len = 0;
  uint32_t imm = 0;
  bool has_imm = false;
};

enum class EventKind : uint8_t {
  kConnected,      // our connect() completed
  kAccepted,       // a peer connected to us
  kConnectFailed,  // status says why (refused, version, timeout); reason: a REJECT's code
  kClosed,         // orderly close finished (either side)
  kError,          // connection entered the error state; status says why
};

struct Event {
  EventKind kind = EventKind::kConnected;
  ConnId conn;
  Status status = Status::kOk;
  PeerAddr peer;
  // kClosed by the peer's DISCONNECT (status kPeerClosed): the reason it gave
  // (CONN-8), kOk for an orderly close, else the status that had failed the
  // connection at the peer, passed on as it came even where appendix A has
  // no such code. kConnectFailed by a CONNECT_REJECT: its code as it came
  // (CONN-4), also one that `status` reads as kConnectRefused (a code 0,
  // which names no reason, reads kConnectRefused here too); kOk where an
  // ACCEPT offering an mtu below 256 failed it (CONN-3), so that status
  // kConnectRefused with reason kOk is that ACCEPT, never a REJECT. kOk for
  // every other event (kConnectFailed by unanswered requests included).
  Status reason = Status::kOk;
};

// A datagram handed in by the driver.
struct RxDatagram {
  PeerAddr peer;
  uint16_t entropy = 0;  // the UDP source port it arrived with
  bool ce = false;       // IP ECN field was CE (11)
  std::span<const uint8_t> bytes;
  // The IP DSCP was the TRIMMED code point (TRIM-1): a switch may have cut
  // the payload. Last, so that positional initializers of the fields above
  // stay valid.
  bool trimmed = false;
};

// A READ this endpoint answered has every response cumulatively acknowledged
// (EndpointConfig::read_served_events): no response of it will be read or
// resent, so its region may go (MR-5) without failing the connection; a
// rendezvous sender releases its buffer on it (the requester's FIN says only
// that the bytes were placed). A READ whose connection fails or closes first
// reports none: a connection in ERROR or CLOSED sends nothing.
struct ReadServed {
  ConnId conn;
  uint32_t lkey = 0;    // the region it read
  uint64_t addr = 0;    // the READ_REQ's raddr: base-relative (MR-4)
  uint32_t length = 0;  // its msg_len
};

inline constexpr uint8_t kEcnNotEct = 0;
inline constexpr uint8_t kEcnEct0 = 2;

// A datagram for the driver to send: UDP source port `entropy`, IP ECN `ecn`,
// IP DSCP `dscp` (ENC-6: the control class for acknowledgements).
// In gather mode the packet is buf[0, header_len) + payload + trailer (the ICRC);
// otherwise it is buf[0, len).
struct TxDatagram {
  PeerAddr peer;
  uint16_t entropy = 0;
  uint8_t ecn = kEcnEct0;
  uint8_t dscp = 0;
  size_t len = 0;  // whole datagram length
  size_t header_len = 0;
  std::span<const uint8_t> payload;  // gather mode only
  uint8_t trailer[4] = {};           // gather mode only
};

// Why a call would be refused kInvalidArgument for its arguments, in words
// that name the argument and its limit (a static string, nothing
// allocated); nullptr where the arguments pass. The engine's calls refuse
// exactly where these say why, so a driver's error message prints the
// reason rather than check the rules again. The first reason found is given.
//
// register_memory_at(addr, length, base, access): a null addr, length 0,
// access bits outside kAccessKnown, base + length - 1 past 2^64, or
// addr + length - 1 past the address space. register_memory is base = addr.
[[nodiscard]] const char* region_problem(const void* addr, size_t length, uint64_t base,
                                         uint32_t access) noexcept;
// post_send(conn, wr) of a connecting or established connection: op not a
// WrOpcode, length above kMaxMessageLength, or flags bits outside
// kSendFlagsAll. (The state and the memory are judged after: kNotConnected,
// kLocalProtection.)
[[nodiscard]] const char* send_wr_problem(const SendWr& wr) noexcept;
// post_shared_recv on an endpoint with this config: shared_rq_depth 0.
[[nodiscard]] const char* shared_recv_problem(const EndpointConfig& cfg) noexcept;

class Endpoint {
 public:
  // The one call that may throw std::bad_alloc (a constructor has no status
  // to return), with nothing of the endpoint left; every call after it
  // reports memory running short as a status, or drops what it cannot hold
  // as if lost. A driver's open reports it: UdpEndpoint::open, kResourceExhausted.
  explicit Endpoint(const EndpointConfig& cfg);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  [[nodiscard]] const EndpointConfig& config() const;

  // --- memory (MR-*) ---
  // kInvalidArgument for a null or empty range or unknown access bits
  // (region_problem says which).
  // Work requests and peers name the region's bytes by their addresses in
  // this process.
  [[nodiscard]] Status register_memory(void* addr, size_t length, uint32_t access,
                                       MemoryRegion& out);
  // The same, with the region's bytes named base..base+length-1 whatever
  // their addresses here (MR-4): base 0 makes every address an offset into
  // the region (libfabric without FI_MR_VIRT_ADDR; verbs' iova), and a
  // simulator's fixed bases keep its packets independent of where the heap
  // lies. kInvalidArgument also if base + length - 1 wraps past 2^64, or
  // addr + length - 1 does (region_problem). Either call: kResourceExhausted
  // with 2^22 - 1 table slots in use (regions registered, and spent slots,
  // below, that posted work still names), or when memory for the table runs
  // short (nothing registered; deregistering never allocates); registrations
  // in all are unlimited. An lkey comes round again only after its table
  // slot has served 1,024 registrations, and never while work posted with it
  // is outstanding (MR-6): until then a stale lkey is refused.
  [[nodiscard]] Status register_memory_at(void* addr, size_t length, uint64_t base, uint32_t access,
                                          MemoryRegion& out);
  // Later packets naming the rkey are NAKed kRemoteBadKey; later local use
  // is refused kLocalProtection. Work already posted never touches the region
  // again (MR-5): where it would, its connection fails kLocalProtection
  // instead, the request whose memory it was completing with that code
  // (COMP-5): a WRITE's or SEND's source when a packet of it is next built
  // (resends included), a READ's target, a receive buffer a SEND's bytes
  // would fill, and a READ this end answers from the region while any of its
  // responses is unacknowledged; where a packet of the peer's found the
  // memory gone (a SEND, a READ response, a READ_REQ served), the peer is
  // told by a NAK REMOTE_OPERATION_ERROR. Work that needs none of its bytes
  // any more fails nothing: a WRITE_IMM's receive or a SEND of no bytes
  // completes kOk, and a READ reported by poll_read_served
  // (read_served_events) is wholly acknowledged, so the region it read may
  // go. The memory may be reused as soon as this returns. kInvalidArgument
  // if lkey is unknown.
  [[nodiscard]] Status deregister_memory(uint32_t lkey);
  // The bytes [addr, addr + len) of the region `rkey` names, checked as an
  // arriving WRITE (kAccessRemoteWrite) or READ_REQ (kAccessRemoteRead) is
  // (PLACE-2, READ-2), for a provider that applies at the target an operation
  // the protocol lacks (an atomic carried in a SEND): kOk and `out` pointing
  // at addr's byte, or the code the peer's packet would be NAKed with:
  // kRemoteBadKey (no such region, or deregistered), kRemoteAccessDenied (a
  // right in `access` missing), kRemoteOutOfBounds (the range not wholly
  // inside). addr is named as peers name it (from the region's base, MR-4).
  // kInvalidArgument, `out` untouched, for len 0 or an `access` that is not
  // a nonzero combination of those two rights. The pointer is good until the
  // region is deregistered; the engine does nothing to order the caller's
  // accesses with the peer's WRITEs or READs to the same bytes.
  [[nodiscard]] Status local_view(uint64_t rkey, uint64_t addr, uint64_t len, uint32_t access,
                                  uint8_t*& out) const;

  // --- connections (CONN-*) ---
  // Starts the handshake; an Event kConnected or kConnectFailed follows.
  // max_mtu (0: none) lowers the mtu this connection offers below the
  // endpoint's, for a route that cannot carry the endpoint's (CONN-1).
  // kInvalidArgument, and no connection, for a max_mtu below 256 or a peer
  // whose len is 0 or more than its 20 bytes; kResourceExhausted, and no
  // connection, while max_connections are open (accepted ones count) or
  // when memory for one more runs short (nothing thrown). A peer
  // whose table is full refuses: kConnectFailed with kResourceExhausted.
  // attempts (0: EndpointConfig::connect_attempts) is how many CONNECT_REQs
  // this connection sends, connect_retry_ns apart, before it fails
  // kConnectTimeout (CONN-2): a driver whose caller waits seconds for a
  // server still starting keeps one connection, and its one nonce, for all
  // of them; a second connection opened after the first gave up made the
  // responder accept both when the first's request was read late.
  [[nodiscard]] Status connect(const PeerAddr& peer, TimeNs now, ConnId& out, uint16_t max_mtu = 0,
                               uint16_t attempts = 0);
  // Orderly close: outstanding work completes kFlushed, the peer is told.
  void close(ConnId conn, TimeNs now);
  [[nodiscard]] bool is_established(ConnId conn) const;
  // The connection's peer; also, for as long as its record lasts, the peer
  // of one that ended: after its handshake, however it ended (either end's
  // close, a failure), for max(connect_attempts, disconnect_attempts) x
  // connect_retry_ns (the peer's DISCONNECT repeats are answered, CONN-7),
  // and given up while CONNECTING, for 65,535 x connect_retry_ns (a late
  // ACCEPT is answered, spec section 4), unless pushed out sooner at the
  // limit (EndpointStats::closed_records_dropped); empty (len 0) for any
  // other id.
  [[nodiscard]] PeerAddr peer_of(ConnId conn) const;
  // The payload bytes of a data packet that the handshake agreed for an
  // established connection (CONN-3: the smaller offer, and so where SEQ-5
  // splits its messages); 0 for a connection in any other state.
  [[nodiscard]] uint16_t mtu_of(ConnId conn) const;

  // --- work requests ---
  // kQueueFull, kNotConnected, kNoSuchConnection, kLocalProtection (local
  // buffer not registered), kInvalidArgument (send_wr_problem says why) and
  // kResourceExhausted (no memory for the connection's queues, taken on
  // first use, or for the request's completion, whose room is taken now) are
  // returned at once and nothing is queued. Work requests may be posted while connecting.
  // post_recv's queue holds rq_depth receives, counting the shared ones the
  // connection took and has not completed (PLACE-6).
  [[nodiscard]] Status post_send(ConnId conn, const SendWr& wr);
  [[nodiscard]] Status post_recv(ConnId conn, const RecvWr& wr);
  // Posts a receive to the endpoint's shared queue (PLACE-6): a SEND or
  // WRITE_IMM that finds no receive posted on its connection takes shared
  // ones, oldest first. Its completion names the connection that used it; a
  // connection that closes or fails gives back the shared receives it took
  // and had not completed, so each completes once, on the connection whose
  // message filled it. kInvalidArgument if shared_rq_depth is 0
  // (shared_recv_problem), kQueueFull when shared_rq_depth receives are
  // outstanding (waiting here or taken and not yet completed),
  // kLocalProtection for a buffer not registered for local write,
  // kResourceExhausted (nothing queued, the receives before it kept) when
  // memory to grow the queue runs short: it grows as receives are posted,
  // not shared_rq_depth's worth at construction.
  [[nodiscard]] Status post_shared_recv(const RecvWr& wr);

  // --- inputs ---
  // A CONNECT_REQ whose dg.peer connect() would refuse (len 0, or more than
  // its 20 bytes) is dropped unanswered and counted in wrong_peer.
  void handle_datagram(const RxDatagram& dg, TimeNs now);
  // Call when now >= next_timeout(); calling early is harmless.
  void handle_timeout(TimeNs now);

  // --- outputs ---
  // Writes the next datagram into buf and returns true, or false when nothing
  // is ready (`out` is then unspecified: it may hold an earlier datagram).
  // Call until it returns false. A buf smaller than transmit_buffer_bytes(false)
  // (mtu + 52; mtu + 128 always suffices) is refused before anything is taken
  // from a queue: the call returns false and counts
  // EndpointStats::tx_buffer_too_small.
  [[nodiscard]] bool poll_transmit(TimeNs now, std::span<uint8_t> buf, TxDatagram& out);
  // The same, but the payload is not copied: out.payload points into the
  // registered memory the work request names (for a READ response, the region
  // the READ names). The engine never moves or frees it; its bytes stay as
  // they are until the application reuses that memory, which it may do once
  // the work request's completion (success or error) has been polled, or
  // after deregistering the region. A driver holding payloads past that
  // point must copy them first.
  // header_buf takes headers, and whole packets that carry no payload: at
  // least transmit_buffer_bytes(true) bytes, refused as above otherwise.
  [[nodiscard]] bool poll_transmit_gather(TimeNs now, std::span<uint8_t> header_buf,
                                          TxDatagram& out);
  // The smallest buffer poll_transmit (gather false) or poll_transmit_gather
  // (gather true) accepts with this endpoint's mtu.
  [[nodiscard]] size_t transmit_buffer_bytes(bool gather) const;
  // Earliest time at which handle_timeout has work; TimeNs::never() if none.
  [[nodiscard]] TimeNs next_timeout() const;
  [[nodiscard]] bool poll_completion(Completion& out);
  [[nodiscard]] bool poll_event(Event& out);
  // The READs served, in the order they were wholly acknowledged; none
  // unless EndpointConfig::read_served_events. At most the latest
  // EndpointConfig::max_reads_served wait: past that the oldest goes,
  // counted in EndpointStats::reads_served_dropped (READ-6).
  [[nodiscard]] bool poll_read_served(ReadServed& out);

  // --- getters ---
  [[nodiscard]] const EndpointStats& endpoint_stats() const;
  // nullptr for an unknown connection. A connection closed after its
  // handshake (by either end, or given up) keeps its final counters, its
  // own and its paths', while it is among the endpoint's last 64 closed.
  [[nodiscard]] const ConnStats* conn_stats(ConnId conn) const;
  [[nodiscard]] size_t path_count(ConnId conn) const;
  [[nodiscard]] bool path_stats(ConnId conn, size_t path, PathStats& out) const;
  void set_trace(TraceFn fn, void* ctx);

  // Bytes of engine state held for one idle, established connection
  // (excluding the pooled transmit context an active connection borrows).
  [[nodiscard]] static size_t idle_connection_bytes();
  // Bytes of the transmit/receive tracking context an active connection uses.
  [[nodiscard]] size_t active_context_bytes() const;
  // Bytes held now for the records of ended connections (CONN-7): 0 once
  // every record has passed its end and a handle_timeout, connect or
  // incoming CONNECT_REQ came after.
  [[nodiscard]] size_t closed_record_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaroce
