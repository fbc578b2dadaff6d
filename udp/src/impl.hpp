// UdpEndpoint::Impl: the UDP driver's internals (include/metaroce/udp.hpp),
// split by job over several files:
//   setup.cpp         sockets opened and configured, GSO/GRO detected, batches
//                     preallocated; descriptors closed
//   receive.cpp       recvmmsg batches handed to the engine
//   transmit.cpp      the engine's datagrams into slots, then sendmmsg messages
//   progress.cpp      the progress round, events, the timerfd, blocking waits
//                     and the progress thread
//   errors.cpp        the Error values the public calls return
//   udp_endpoint.cpp  the public UdpEndpoint methods
//
// One progress round: recvmmsg batches from the receive socket (GRO segments
// split, ECN CE read from IP_TOS / IPV6_TCLASS), engine timers, then datagrams
// drained from poll_transmit_gather into preallocated slots (headers copied,
// payloads left in registered memory and handed to the kernel as iovecs),
// grouped by source port (one socket per entropy value) and peer into one
// sendmmsg per socket, with runs of equal-size datagrams to the same peer
// coalesced with UDP_SEGMENT (GSO). There are 32 x batch slots, flushed when
// full and at the end of the round: the engine spreads consecutive packets
// over the paths, so a path's share of a round is what one GSO run can hold.
#pragma once

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "metaroce/ring.hpp"
#include "metaroce/udp.hpp"

struct io_uring;  // liburing's, where the build has it (METAROCE_HAVE_URING)

namespace metaroce::udp {

enum class AddressFault : uint8_t;  // address.hpp

// The endpoint whose progress thread this is (none on other threads): set
// by the thread itself (progress.cpp), read by Impl::on_progress_thread.
// Constant-initialized, so that a read is one thread-local load, no call.
extern constinit thread_local const UdpEndpoint::Impl* t_progress_of;

inline constexpr uint16_t kDefaultPort = wire::kDefaultUdpPort;  // ENC-2

// "1 port", "64 ports": a count and its noun, singular or plural, for
// messages ("1 ports" read as a typo in an error meant to be exact).
[[nodiscard]] std::string count_text(uint64_t n, std::string_view one, std::string_view many);
// A datagram's control data: the IP TOS / IPV6_TCLASS (24 bytes), UDP_GRO's
// segment size (24), SCM_TIMESTAMPNS (32) and, on a wildcard-bound endpoint,
// the address it arrived at (IP_PKTINFO 32, IPV6_PKTINFO 40): at most 120.
inline constexpr size_t kRxCtrlBytes = 160;
// What one recvmmsg may bring in. The kernel copies a whole call's
// datagrams before the first is handled, and the placement copy then reads
// them back: 32 GRO buffers of 64 KiB (2 MiB, this VM's L2) had them read
// from L3, and a loopback WRITE's receiver, which bounded it, moved 48-49
// Gbit/s; 8-16 buffers a call, 56-61 (BENCHMARKS.md section 3, stop 22).
inline constexpr size_t kRxBytesPerCall = 512 * 1024;
// A message's control data: its GSO segment size, the IP TOS of a
// control-class message (ENC-6), whose DSCP differs from the socket's, and
// on a wildcard-bound endpoint the source address (IP_PKTINFO /
// IPV6_PKTINFO: the address the peer reaches us at, see Impl::peer_src).
inline constexpr size_t kTxCtrlBytes =
    CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int)) +
    std::max(CMSG_SPACE(sizeof(in_pktinfo)), CMSG_SPACE(sizeof(in6_pktinfo)));
inline constexpr size_t kIcrc = 4;  // the trailer after a gathered payload
// The IP TOS byte of a packet of class `dscp` (ENC-6), always ECT(0) (ENC-4):
// every send socket's own for the data class, a message's cmsg for another.
inline int tos_byte(uint8_t dscp) { return (dscp << 2) | kEcnEct0; }
// Each transmit slot starts with room for the previous segment's trailer, so
// that in a GSO message that trailer and this segment's headers go to the
// kernel as one iovec: 2 per gathered segment instead of 3. The kernel's copy
// loop pays per iovec; a loopback sender's copy took about 10% less.
inline constexpr size_t kTxLead = kIcrc;
inline constexpr size_t kGatherMin = 512;  // payloads up to this size are copied, not gathered

inline TimeNs clock_now() {
  return TimeNs{static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count())};
}

// An IP address (IPv4 as v4-mapped), as in PeerAddr::bytes[0..16).
struct LocalIp {
  uint8_t b[16] = {};
  bool operator==(const LocalIp&) const = default;
};

// PeerAddr as an unordered_map key: its address and port.
struct PeerAddrHash {
  size_t operator()(const PeerAddr& p) const {
    uint64_t a, b;
    std::memcpy(&a, p.bytes, 8);
    std::memcpy(&b, p.bytes + 8, 8);
    const uint64_t port = (uint64_t{p.bytes[16]} << 8) | p.bytes[17];
    return static_cast<size_t>((a * 0x9e3779b97f4a7c15ULL) ^
                               (b + (port << 40)) * 0xc2b2ae3d27d4eb4fULL);
  }
};

// A send to a peer that failed other than for a full socket buffer (e.g.
// ENETUNREACH, EACCES): the message is dropped and the engine only sees
// silence, so its error says what the kernel said. Or (icmp) the peer's
// host or a router on the way answered an earlier datagram with a fatal ICMP
// error, which a connected send socket reports on its next send (that send
// is tried again and goes): port unreachable (ECONNREFUSED: nothing listened
// at the peer's port, its process gone, say), or a firewall's REJECT
// (administratively prohibited: EHOSTUNREACH, ENETUNREACH, EACCES), ... The engine still waits out
// its timeout (a peer restarting on the port answers again); the error then says why nothing
// answered.
struct SendFailure {
  int err = 0;  // errno; 0: none
  const char* call = "";
  bool icmp = false;
};

// A connection that close() must still end (connecting or established).
inline bool live(ConnState s) {
  return s == ConnState::kConnecting || s == ConnState::kEstablished;
}

struct ConnInfo {
  ConnState state = ConnState::kConnecting;
  Status status = Status::kOk;
  PeerAddr peer;
  SendFailure send_failure;  // the peer's last, when the connection ended
  // The event's reason: closed by the peer, the reason it gave (CONN-8);
  // refused, the CONNECT_REJECT's code (CONN-4).
  Status peer_reason = Status::kOk;
  // In Impl::accepted, not taken yet: the entry outlives kEndedKept later
  // ends, so that the application taking it learns how it ended (see
  // trim_ended); `passed` when trim_ended went past it.
  bool queued = false;
  bool passed = false;
  // Counted in Impl::live_peers, under counted_peer (count_live).
  bool counted = false;
  PeerAddr counted_peer;
  // Who closed it while it was live, here: its work completes kFlushed at
  // once, before the close ends (kClosed), and completion_error says why.
  enum class Closer : uint8_t { kNone, kApplication, kEndpoint };
  Closer closer = Closer::kNone;
  // A connect with a budget (connect_start(addr, out, budget), connect()):
  // the budget it was given, kept for its error. The engine connection
  // requests for all of it (connect_attempts_for).
  int64_t budget_ms = 0;
  // Datagrams naming this connection that came from another host than its
  // peer's, which the engine drops (BAD-8), and the last one's source: a
  // connect whose ACCEPTs all came so (a NAT, a server answering from
  // another of its addresses) says so, where it said only "no answer".
  uint64_t foreign_datagrams = 0;
  PeerAddr foreign_src;
};

// The connections' table, whose walks (a range-for, an algorithm from
// begin()) are counted, look-ups not: a round that ends connections must not
// walk it per connection ended, which made the round that ends thousands at
// once quadratic in their number (Udp.ManyVanishedPeersEndInLinearTime
// counts the walks: none in a round now, only close() walks it). A count
// rather than the round's time, which a loaded machine stretches.
struct ConnTable : std::unordered_map<uint32_t, ConnInfo> {
  using Map = std::unordered_map<uint32_t, ConnInfo>;
  static inline std::atomic<uint64_t> walks{0};  // all endpoints' (a test's, read between rounds)
  Map::iterator begin() noexcept {
    walks.fetch_add(1, std::memory_order_relaxed);
    return Map::begin();
  }
  Map::const_iterator begin() const noexcept {
    walks.fetch_add(1, std::memory_order_relaxed);
    return Map::begin();
  }
};

// One datagram taken from the engine. Gathered (payload != nullptr): the
// headers are in the slot buffer, the payload stays in registered memory and
// the ICRC trailer is kept here; the kernel copies them from iovecs.
// Otherwise the whole datagram is in the slot buffer. Either way it starts
// kTxLead bytes into the buffer (slot_buf).
struct TxSlot {
  PeerAddr peer;
  const uint8_t* payload = nullptr;
  uint32_t len = 0;     // whole datagram
  uint16_t hlen = 0;    // headers in the slot buffer (gathered only)
  uint16_t sock = 0;    // index into Impl::tx_fds
  bool ack = false;     // an ACK or NAK: grouped before data (tx_group_key)
  bool copied = false;  // whole in tx_whole (materialize_pending), not in the slot's head
  uint8_t dscp = 0;     // ENC-6: a GSO run never mixes classes
  uint8_t trailer[4] = {};
};

// A slot's group in build_messages' counting sort: each socket's ACKs and
// NAKs (sock), then each socket's data (entropy_count + sock), so that a
// round's control class goes first. entropy_count may be 65535: up to
// 131070 keys, so 32 bits (16 wrapped from entropy_count 32768 on and put
// data among the ACKs).
inline uint32_t tx_group_key(bool ack, uint16_t sock, uint16_t ecount) {
  return ack ? uint32_t{sock} : uint32_t{ecount} + sock;
}

struct UdpEndpoint::Impl {
  Options opts;
  EndpointConfig cfg;
  std::unique_ptr<Endpoint> eng;
  int family = AF_INET;
  int rx_fd = -1;
  std::vector<int> tx_fds;  // entropy_count send sockets (a CONNECT_REQ too, CONN-2)
  // The peer each send socket is connected to (see use_connected).
  std::vector<PeerAddr> tx_peer;
  std::vector<uint8_t> tx_peer_tried;
  int epfd = -1;
  int timer_fd = -1;
  int wake_fd = -1;
  PeerAddr local;
  // local's text (local_address()), formatted at open, where memory short
  // fails the open: the call that returns it then allocates nothing.
  std::string local_text;
  // Bound to the wildcard address (0.0.0.0 or ::): the kernel would pick a
  // datagram's source address by route, which need not be the address the
  // peer sent to (and takes answers from: a peer matches a connection's
  // datagrams by address). So the receive socket reports each datagram's
  // destination (IP_PKTINFO / IPV6_RECVPKTINFO), peer_src keeps the latest
  // for each peer (keyed as the engine names peers: the address and port of
  // its receive socket, what resolve_peer returns), and a message to that
  // peer names it as its source (set_control), unless the message leaves on
  // a send socket connected from that address already (tx_src).
  bool wild = false;
  // The interface of a link-local address the endpoint is bound to
  // ("[fe80::1%eth0]:port"): link-local peers are reached through it.
  uint32_t scope = 0;
  std::unordered_map<PeerAddr, LocalIp, PeerAddrHash> peer_src;
  static constexpr size_t kMaxPeerSources = 4096;  // see note_source
  size_t peer_src_limit = kMaxPeerSources;
  PeerAddr src_cache_peer;  // the last peer_src (or recent_src) entry looked up or stored
  LocalIp src_cache;
  bool src_cache_kept = false;  // the entry is peer_src's, not recent_src's (note_source)
  // Sources no connection vouches for yet (a CONNECT_REQ's, or junk's):
  // their latest, in a ring allocated at open, so that datagrams from ever
  // new addresses (a spoofed flood) allocate nothing. It holds the sources
  // of a receive call at least, which the call's answers (an ACCEPT) need.
  std::vector<std::pair<PeerAddr, LocalIp>> recent_src;
  size_t recent_next = 0;
  std::vector<LocalIp> tx_src;  // each connected send socket's source address
  // open: the port the kernel chose leaves no room for the entropy block
  // after it (another port may).
  bool block_past_end = false;
  int bind_errno = 0;    // open_bound's last bind() failure (open() explains EADDRINUSE)
  int socket_errno = 0;  // its last socket() failure (open() explains EMFILE)
  uint16_t ebase = 0;
  uint16_t ecount = 0;
  // Written by the round that gives GSO up (drop_failed), which may be the
  // progress thread's, and read unlocked by gso_enabled().
  std::atomic<bool> gso{false};
  bool gro = false;
  std::atomic<bool> closed{false};  // set under mu; read unlocked by connect_start, accept
  uint32_t batch = 32;

  // receive
  size_t rx_slot = 0;
  uint32_t rx_used = 0;      // messages the last recvmmsg filled
  uint32_t rx_per_call = 1;  // messages the next recvmmsg asks for: rx_count_for
  [[nodiscard]] uint32_t rx_count_for(size_t bytes_per_msg) const {
    return static_cast<uint32_t>(
        std::clamp<size_t>(kRxBytesPerCall / std::max<size_t>(bytes_per_msg, 1), 1, batch));
  }
  std::vector<uint8_t> rx_buf;
  std::vector<mmsghdr> rx_msgs;
  std::vector<iovec> rx_iov;
  std::vector<sockaddr_storage> rx_addr;
  std::vector<uint8_t> rx_ctrl;
  // The control data each receive message offers: kRxCtrlBytes, or less
  // under the test hook METAROCE_UDP_RX_CTRL_BYTES=N, which has the kernel
  // cut it short (MSG_CTRUNC).
  size_t rx_ctrl_len = kRxCtrlBytes;

  // transmit: slots filled from poll_transmit_gather, then messages built
  // over them (grouped by socket, runs coalesced with GSO)
  // A slot's head (tx_head_size bytes in tx_head): the lead, then headers,
  // or a whole datagram without payload or with a small one. Heads are
  // packed, so a round's headers share pages and cache lines. The room
  // to copy a gathered datagram whole (tx_whole) is touched only when a full
  // socket buffer makes that necessary, so its pages usually stay unallocated
  // (glibc maps a block this large on its own).
  size_t tx_head_size = 0;
  size_t tx_whole_size = 0;
  size_t tx_cap = 0;  // slots
  std::vector<uint8_t> tx_head;
  std::unique_ptr<uint8_t[]> tx_whole;
  std::vector<TxSlot> tx_slots;
  std::vector<uint32_t> tx_order;
  std::vector<uint32_t> tx_bucket;  // counting sort by tx_group_key
  std::vector<iovec> tx_iov;        // 3 per slot
  std::vector<mmsghdr> tx_msgs;
  std::vector<uint16_t> tx_msg_sock;
  std::vector<uint32_t> tx_msg_segs;
  std::vector<uint32_t> tx_msg_first;  // first index into tx_order
  std::vector<sockaddr_storage> tx_addr;
  std::vector<uint8_t> tx_ctrl;
  size_t tx_count = 0;      // slots filled
  size_t tx_msg_count = 0;  // messages built
  size_t tx_msg_next = 0;   // next message to send
  // The sockets held in this flush (tx_sock_held[s] == tx_flush_gen; one per
  // send socket, then the receive socket): one of their messages met a full
  // buffer (or, with io_uring, was not submitted), and their later messages
  // wait behind it, in order, while other sockets' still go. A generation
  // per flush, so that no flush clears it.
  std::vector<uint32_t> tx_sock_held;
  uint32_t tx_flush_gen = 0;
  // Options::io_uring: one submission sends a round's messages on every
  // socket (flush_uring); nullptr where io_uring is off or unavailable.
  ::io_uring* ring = nullptr;
  std::vector<int32_t> tx_msg_res;     // each message's completion (bytes or -errno)
  std::vector<uint8_t> tx_msg_queued;  // submitted in this flush (not failed by a test hook)
  // Test hooks (eagain_fault, gso_fault in transmit.cpp).
  uint32_t fault_eagain_every = 0;
  uint32_t fault_calls = 0;
  uint32_t fault_gso_from = 0;
  uint32_t fault_gso_msgs = 0;
  uint16_t fault_gso_port = 0;
  uint16_t fault_full_sock = 0;  // METAROCE_UDP_FAULT_FULL_SOCKET=K:N (full_socket_fault)
  uint32_t fault_full_left = 0;
  int fault_icmp_err = 0;  // METAROCE_UDP_FAULT_ICMP=E:N, ..._REFUSED=N (icmp_fault)
  uint32_t fault_icmp_left = 0;
  // Peers whose route refused a GSO message (drop_failed): sent without.
  std::unordered_set<PeerAddr, PeerAddrHash> gso_refused;

  // connections as seen from events
  ConnTable conns;
  // Connections that ended (kClosed, kError), oldest first: each keeps its
  // entry in conns, for state(), conn_error() and peer_address(), until
  // kEndedKept later ones have ended; then it goes (end_conn). A ring with
  // room for them all from open, so that a connection's end, on the progress
  // path, allocates nothing and cannot throw.
  static constexpr size_t kEndedKept = 1024;
  Ring<uint32_t> ended;
  // Each peer's connections that are connecting or established: whether a
  // peer still has one, asked as each connection ends (forget_source), in
  // one look-up rather than a walk over every connection, which made the
  // round that ends thousands at once quadratic in their number.
  std::unordered_map<PeerAddr, uint32_t, PeerAddrHash> live_peers;
  // Unbounded: a connection dropped from it would stay open, unknown to
  // the application (udp.hpp, accept()). One that finds no memory to be
  // recorded here is closed instead (record_accepted).
  std::deque<ConnId> accepted;
  // Each peer's last failed send (drop_failed), until a connection to it
  // is established or its last one ends; rare, so a map.
  std::unordered_map<PeerAddr, SendFailure, PeerAddrHash> send_failed;

  // The registered regions as the engine names them (base, length, access),
  // by lkey: read only when a post fails kLocalProtection, to say which of
  // its lkey, range or access is wrong (local_protection_text).
  struct Region {
    uint64_t base = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  };
  std::unordered_map<uint32_t, Region> regions;

  // CONN-2's request count for a connection that is to last `budget_ms`
  // (0: the engine's connect_attempts): enough to cover it, never fewer than
  // connect_attempts, at most 65,535 (a longer budget ends there).
  [[nodiscard]] uint16_t connect_attempts_for(int64_t budget_ms) const;
  // The fewest requests, connect_retry_ns apart, that span `budget_ms`
  // (unclamped; 0 for none): what connect_attempts_for clamps, and what a
  // spent budget's error compares its requests with.
  [[nodiscard]] uint64_t requests_covering(int64_t budget_ms) const;

  IoStats io;
  uint64_t armed_ns = 0;  // timerfd deadline currently armed (0: none)

  // threading
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  std::atomic<bool> threaded{false};
  std::atomic<bool> running{false};
  // Held by start_progress_thread from its check to the thread's start, by
  // stop_progress_thread from the stop to `threaded` lowered and by close()
  // from the stop to `closed` raised: one at a time, a second caller (two
  // threads closing at once) waiting until the thread is joined. Taken
  // before mu, never under it.
  std::mutex join_mu;
  // The endpoint destroyed by code its own progress thread runs (an
  // allocator's or a signal's hook: ~UdpEndpoint): the thread owns the
  // Impl from then on, and closes and frees it after its round.
  std::unique_ptr<Impl> orphan;
  // The thread blocks (or is about to) on epfd: wake_thread writes wake_fd.
  std::atomic<bool> sleeping{false};
  // Application threads blocked on epfd with the mutex let go (block() under
  // Options::thread_safe): close() waits for them to leave before it closes
  // the fds, whose numbers a later open could otherwise hand them; a post
  // wakes them (wake_thread) and a round moves their timer (progress_locked),
  // as for the sleeping thread. Changed under mu, and every wake_thread that
  // writes for a waiter runs under mu: the last waiter to leave drains
  // wake_fd (block()), and no signal can follow that read.
  std::atomic<uint32_t> epoll_waiters{0};
  ProgressMode mode = ProgressMode::kSleeping;  // set before the thread starts
  // The application asked for fd(): it may sleep on it, so every round arms
  // the timerfd. Otherwise only the driver's own sleeps need it armed, and
  // arming per round (the ACK delay moves every other packet) costs a
  // timerfd_settime per two packets on a receiver.
  std::atomic<bool> fd_exported{false};

  ~Impl() { close_fds(); }

  // setup.cpp
  void close_fds();
  bool setup_socket(int fd, bool is_rx, Error& err, const std::string& what);
  int open_bound(const PeerAddr& addr, bool is_rx, Error& err);
  bool open(const std::string& address, Error& err);

  // receive.cpp
  PeerAddr resolve_peer(const PeerAddr& src, const uint8_t* p, size_t n, bool& known);
  // A datagram naming connection `dc` from `src`, on another host than the
  // connection's peer (ConnInfo::foreign_datagrams).
  void note_foreign(uint32_t dc, const PeerAddr& src);
  void note_source(const PeerAddr& peer, const LocalIp& at, bool known);
  size_t receive(TimeNs now);

  // transmit.cpp
  uint16_t choose_socket(uint16_t entropy);
  int sock_fd(uint16_t s) const { return tx_fds[s]; }
  bool use_connected(uint16_t sock, const PeerAddr& peer, const sockaddr_storage& ss,
                     socklen_t len);
  // Send socket `sock` is connected to `peer` (use_connected made it so).
  [[nodiscard]] bool connected_to(uint16_t sock, const PeerAddr& peer) const {
    return tx_peer[sock].len != 0 && tx_peer[sock] == peer;
  }
  size_t fill(TimeNs now);
  uint8_t* slot_buf(size_t slot) { return tx_head.data() + slot * tx_head_size + kTxLead; }
  uint8_t* whole_buf(size_t slot) { return tx_whole.get() + slot * tx_whole_size; }
  size_t message_iov(size_t i, size_t j, size_t at);
  const LocalIp* source_for(const PeerAddr& peer);
  void set_control(msghdr& h, size_t m, uint16_t gso_size, const TxSlot& s, const LocalIp* src);
  void build_messages();
  void materialize_pending();
  bool flush();
  bool flush_sendmmsg();
  bool flush_uring();
  void begin_flush();
  [[nodiscard]] bool sock_held(uint16_t s) const { return tx_sock_held[s] == tx_flush_gen; }
  void keep_msg(size_t m, size_t& kept);
  bool end_flush(size_t kept);
  bool eagain_fault();
  bool full_socket_fault(uint16_t sock);
  int icmp_fault(uint16_t sock);
  int gso_fault(size_t m);
  static bool stale_error(int err);
  static bool icmp_refusal(int err);
  void note_refused(uint16_t sock, int err);
  void keep_failure(const PeerAddr& peer, const SendFailure& f);
  void take_refusals(const PeerAddr& peer, bool keep);
  size_t send_unsegmented(size_t m, int& err);
  void drop_failed(size_t m, int err, const char* call);
  void count_sent(size_t m);
  void reset_tx();
  void setup_uring();
  void release_ring();  // io_uring given up (or the endpoint closed): sendmmsg from now on
  size_t pump_tx(TimeNs now);

  // progress.cpp
  // The lock of a public call: taken while the progress thread runs, and
  // always under Options::thread_safe; otherwise none (one application
  // thread, nothing to order).
  std::unique_lock<std::mutex> guard() {
    return opts.thread_safe || threaded.load(std::memory_order_acquire)
               ? std::unique_lock<std::mutex>(mu)
               : std::unique_lock<std::mutex>();
  }
  // guard() for a call that does not wait for rounds (a post, a poll, the
  // stats, ...): false, nothing held, where the caller is the progress
  // thread itself (code it runs: an allocator's or a signal's hook), which
  // inside its rounds holds the mutex: the mutex is not recursive, and
  // guard() deadlocked there. Asked only where the call locks, as one
  // thread-local load and compare before the lock: try_lock first, asking
  // only where it fails, cost more (glibc's trylock is no inlined fast path:
  // about 5 ns a call more than lock, against about 1 for the compare).
  [[nodiscard]] bool guard_call(std::unique_lock<std::mutex>& lk) {
    if (!opts.thread_safe && !threaded.load(std::memory_order_acquire)) return true;
    if (on_progress_thread()) return false;
    lk = std::unique_lock<std::mutex>(mu);
    return true;
  }
  void wake_thread();
  void join_thread();  // stops the progress thread, join_mu held; `threaded` stays as it is
  // close()'s work once the thread is stopped, the mutex held (`lk`).
  void close_locked(std::unique_lock<std::mutex>& lk, bool graceful);
  // The thread's end where the endpoint was destroyed on it (`orphan`):
  // closed gracefully, the thread detached, the Impl freed.
  void finish_orphaned();
  // The caller runs on this endpoint's progress thread (which cannot join
  // itself: std::thread::join throws std::system_error, EDEADLK). Set by
  // the thread itself, so no std::thread object is read that
  // start_progress_thread may still be assigning.
  [[nodiscard]] bool on_progress_thread() const noexcept { return t_progress_of == this; }
  void end_round();
  void forget_source(const PeerAddr& p);
  void evict_idle_sources();
  void end_conn(uint32_t id, ConnInfo& ci, ConnState s);  // s: kClosed or kError
  void trim_ended();
  // After ci.state or ci.peer changed. False where a peer newly live found
  // no memory for its entry: ci is then not counted (nothing changed).
  bool count_live(ConnInfo& ci);
  // Connections connecting or established (live_peers' counts summed): an
  // error path's, not a round's.
  [[nodiscard]] size_t live_count() const;
  // An accepted connection's entry (and place in the accept queue): false,
  // nothing recorded and the engine's connection closed, where memory ran
  // short (counted in IoStats::accepts_dropped).
  bool record_accepted(std::unordered_map<uint32_t, ConnInfo>::iterator at, ConnId conn);
  bool record_connecting(ConnId id, const PeerAddr& peer, int64_t budget_ms);
  bool drain_events();
  void arm_timer(TimeNs now);
  size_t progress_locked();
  // Waits on epfd at most `timeout`. With `lk` holding the mutex it is let
  // go for the wait (other threads' calls go on meanwhile) and held again on
  // return; without, the wait holds whatever the caller holds.
  void block(std::chrono::nanoseconds timeout, std::unique_lock<std::mutex>* lk = nullptr);

  // Runs until pred() (checked under the lock) or the deadline.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::steady_clock::time_point deadline) {
    if (threaded.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lk(mu);
      // Until another thread's stop_progress_thread (which clears `threaded`
      // under the mutex, and wakes this): then the caller's own rounds,
      // below, where it waited out its deadline with no round to come.
      while (threaded.load(std::memory_order_acquire)) {
        if (pred()) return true;
        if (closed) return false;  // nothing more will come
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return false;
        cv.wait_for(
            lk, std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)));
      }
    }
    // The caller's own rounds; under Options::thread_safe each with the
    // mutex, let go while it blocks, as other threads may run theirs.
    std::unique_lock<std::mutex> lk = guard();
    for (;;) {
      const size_t moved = progress_locked();
      if (pred()) return true;
      if (closed) return false;  // no sockets: nothing more will come
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (moved == 0)
        block(std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)) +
                  std::chrono::microseconds(999),
              &lk);
    }
  }

  void thread_main();
  void sleeping_main();
  void busy_main();
  // Reads the timerfd and the eventfd among `n` events of epoll_wait.
  void consume_wakeups(const epoll_event* evs, int n);

  // The accept queue (udp_endpoint.cpp): the next connection to hand over,
  // past those whose requester had given them up (abandoned()).
  [[nodiscard]] static bool abandoned(const ConnInfo& ci);
  void skip_abandoned();
  bool take_accepted(ConnId& out);

  // udp_endpoint.cpp: connect_start's checks of a parsed peer (`address`:
  // as the caller named it, for the errors; null: the PeerAddr form), then
  // the connection.
  Error connect_checked(const PeerAddr& peer, uint32_t peer_scope, const std::string* address,
                        ConnId& out, std::chrono::milliseconds budget);
  // Datagrams to `peer`'s address at a port of this endpoint's come to its own
  // sockets (connect_checked refuses its entropy block's ports there).
  [[nodiscard]] bool reaches_own_sockets(const PeerAddr& peer) const;

  // errors.cpp
  // The Error `words` builds, or where memory for its words runs short (every
  // allocation failing), out_of_memory_error(s, conn): a call that reports
  // an error never throws std::bad_alloc in its place, nor loses its status.
  // A call's own allocations before it knows its status fail it
  // kResourceExhausted the same way (s = kResourceExhausted around them).
  template <typename F>
  [[nodiscard]] static Error error_or(Status s, ConnId conn, F&& words) noexcept {
    try {
      return words();
    } catch (const std::bad_alloc&) {
      return out_of_memory_error(s, conn);
    }
  }
  // An address's fault (address_fault) as a call's Error: the fault's status
  // (address_fault_status), and "<what> <text>: <its words>", or the words
  // alone for an empty `what`; e.peer is the text where `names_peer`.
  // `family`: as given to address_fault. Never throws (error_or).
  [[nodiscard]] static Error address_fault_error(std::string_view what, std::string_view text,
                                                 AddressFault f, int family,
                                                 bool names_peer) noexcept;
  // Status s of connection conn, its message the fixed kOutOfMemoryWords.
  [[nodiscard]] static Error out_of_memory_error(Status s, ConnId conn) noexcept;
  // kOutOfMemoryWords as a std::string, built in its own buffer.
  [[nodiscard]] static std::string out_of_memory_text() noexcept;
  std::string name_in_error(Error& e, ConnId conn) const;
  // " (conn 0x5)" where no peer is named; empty for no connection. Reads no
  // table, so a call refused on the progress thread can name its connection too.
  static std::string conn_in_words(ConnId conn);
  Error make_error(Status s, const std::string& what, ConnId conn) const;
  // The same with `text` for the status's own words.
  Error make_error(Status s, const std::string& what, ConnId conn, std::string_view text) const;
  // A status that ended a connection, in words that say whose it was:
  // status_text's, except for a connect the peer's answer failed, which the
  // engine's texts cannot name (which answer, which code, whose limit).
  // `code`: the event's reason (a CONNECT_REJECT's code, CONN-4, or the
  // status that failed the peer's connection, CONN-3; kOk for an ACCEPT
  // refused for its mtu, CONN-3).
  [[nodiscard]] static std::string ended_text(Status s, Status code);
  // A request's failure in words: status_text's, except where this
  // engine's cause is known (MR-5's kLocalProtection and
  // kRemoteOperationError), which the engine's texts do not name.
  [[nodiscard]] static std::string request_failure_text(Status s);
  // What a kFlushed completion of connection `ci` (nullptr: forgotten)
  // was flushed by, as the status's words.
  [[nodiscard]] static std::string flushed_text(const ConnInfo* ci);
  // CONN-1: the mtu (0: the endpoint's) a connection to `peer` offers.
  [[nodiscard]] Error route_mtu_cap(const PeerAddr& peer, uint16_t& cap) const;
  [[nodiscard]] Error closed_error(const std::string& what, ConnId conn = ConnId{},
                                   const std::string& peer = "") const;
  // "sendmmsg: Network is unreachable" for the peer's last failed send, or "".
  [[nodiscard]] std::string send_failure_text(const PeerAddr& peer) const;
  [[nodiscard]] static std::string send_failure_text(const SendFailure& f);
  [[nodiscard]] SendFailure send_failure_of(const PeerAddr& peer) const;
  // The failure as a clause of an error message: "the last send to the peer
  // failed: sendmmsg: ..." or, for an ICMP refusal, what it means; "" for none.
  [[nodiscard]] static std::string send_failure_clause(const SendFailure& f);
  // The datagrams of connection `ci` that came from another host, dropped
  // (BAD-8), as a clause of an error message; "" for none.
  [[nodiscard]] static std::string foreign_clause(const ConnInfo& ci);
  // kConnectTimeout's words for connection `ci`: status_text's "no answer
  // to connection request", or, where answers came from another host
  // (foreign_clause), that none came from the peer's address.
  [[nodiscard]] static std::string_view connect_timeout_text(const ConnInfo& ci);
  // Both of connection `ci`'s (send_failure_clause, foreign_clause), "; "
  // between them; "" for neither.
  [[nodiscard]] static std::string failure_clauses(const ConnInfo& ci);
  // A post's refusal `s` in words (an empty Error for kOk): the try_post_*
  // calls return the status alone, and the text is built only here.
  [[nodiscard]] Error post_error(Status s, ConnId conn, const char* what) const;
  // A post that failed kLocalProtection: "post_send (WRITE wr_id 5: 64 bytes
  // at 0x1000-0x103f, lkey 3) failed: <why>", why from `regions`. `what`
  // names the call and opcode; `need` is the access the buffer needs.
  [[nodiscard]] Error local_protection_error(const char* what, ConnId conn, uint64_t wr_id,
                                             uint64_t addr, uint32_t len, uint32_t lkey,
                                             uint32_t need) const;
  // What ended a connection that ended (kClosed, kError): "ended with
  // kRemoteLengthError (...)", "was closed by the peer (kPeerClosed)" or "is
  // closed", and the failure its sends met, as a clause after "the connection".
  [[nodiscard]] static std::string how_it_ended(const ConnInfo& ci);
};

}  // namespace metaroce::udp
