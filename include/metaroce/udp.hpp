// MetaRoCE over Linux UDP sockets: a driver that runs the sans-IO engine
// (metaroce/engine.hpp) unchanged over one receive socket and one send socket
// per entropy value (UDP source port).
//
//   // Port 0: a free port the kernel picks, with a free entropy block after
//   // it. (A fixed port holds the 64 after it too: one on 4792 holds
//   // 4793-4856, so a peer on this host cannot open on 4800.)
//   auto ep = metaroce::udp::UdpEndpoint::open("127.0.0.1:0", {}, err);
//   err = ep->connect("127.0.0.1:4792", 1s, conn);     // blocking handshake
//   err = ep->write(conn, wr_id, buf, len, mr.lkey, raddr, rkey);
//   while (!ep->poll_completion(c)) ep->progress();   // or start_progress_thread()
//
// Every call that returns an Error is [[nodiscard]]: check it, or cast it to
// void where a failure changes nothing (and say why).
//
// Ports: the endpoint receives on its address/port (default 4792, ENC-2) and
// sends from a block of `entropy_count` consecutive ports (default: the 64
// ports after the receive port). Every packet leaves from its path's entropy
// port, each CONNECT_REQ from the next (spec CONN-2), naming the receive port
// as its reply_port (section 3.12): a peer is known by its IP address and
// receive port, a request's source mapped to that. Incoming packets are
// matched to their peer by dst_conn.
//
// Threading: an endpoint is single-threaded. Either the application calls
// progress() (or a blocking helper) itself, or it starts the progress thread
// (start_progress_thread; sleeping by default, busy-polling on request); then
// every public call takes one mutex (per call, never per packet). With
// Options::thread_safe every public call takes it always, progress thread or
// not: any number of application threads may call any of them at once
// (FI_THREAD_SAFE), posting, polling and driving progress themselves. Off
// (the default), calls without the thread take no lock and must come from
// one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/engine.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::udp {

// An Error's message where memory for its words ran short: the call returns
// its status (and connection) all the same, never std::bad_alloc. Also what
// UdpEndpoint::peer_address() returns in place of an address it found no
// memory to format.
inline constexpr std::string_view kOutOfMemoryWords = "out of memory";

// An error from the UDP endpoint: a status, and where known the peer address
// and connection id it concerns. ok() when status is kOk and message is empty.
// [[nodiscard]]: a call's Error left unread is a failure nobody sees.
struct [[nodiscard]] Error {
  Status status = Status::kOk;
  std::string message;  // human-readable, names peer and connection where known
  std::string peer;     // "ip:port" or "[ip6]:port", empty if none
  uint32_t conn = 0;    // connection id, 0 if none
  [[nodiscard]] bool ok() const { return status == Status::kOk && message.empty(); }
  explicit operator bool() const { return !ok(); }  // true when there is an error
};

// --- addresses (one place maps sockaddr <-> PeerAddr) ---
// PeerAddr layout used by this driver: bytes[0..16) IPv6 address (IPv4 as
// v4-mapped ::ffff:a.b.c.d), bytes[16..18) port big-endian, bytes[18] 4 or 6.
// Parses "a.b.c.d[:port]", "[v6]:port", "[v6]" or "v6" (no port) or a bare host name
// resolved with getaddrinfo (its first answer; connect and open resolve a
// name to the addresses the endpoint reaches: an IPv4 endpoint's IPv4, one
// bound to an IPv6 address IPv6, one on [::] either). default_port fills a
// missing port. Digits and dots that are not a.b.c.d ("10.0.1", "9999") are
// refused, not read as inet_aton's shorthand, and so is an unbracketed IPv6
// address whose last group could be a port ("::1:5": write [::1]:5, or
// [::1:5] for that address). A link-local IPv6 address's
// interface ("[fe80::1%eth0]") is not kept in PeerAddr: an endpoint opened on
// one reaches link-local peers through that interface, and only it can.
// A name the resolver could not look up for want of memory (getaddrinfo's
// EAI_MEMORY) or for want of an answer from the name service (EAI_AGAIN) is
// not a bad address: parse_address_checked tells them apart by status, and
// so do open() and connect() (kResourceExhausted; kConnectTimeout, as for a
// peer that does not answer: a later try may resolve it); `why` says which.
// The decision allocates nothing; `why`'s words do, and may throw
// std::bad_alloc (with `why` null, nothing is allocated).
[[nodiscard]] bool parse_address(const std::string& text, uint16_t default_port, PeerAddr& out,
                                 std::string* why = nullptr);
// parse_address as an Error, which never throws: empty where the text
// parses (out set); otherwise kInvalidArgument (the text), kResourceExhausted
// (EAI_MEMORY) or kConnectTimeout (EAI_AGAIN), with parse_address's
// explanation, or kOutOfMemoryWords where no memory is left for it (the
// status decided before the words). No peer or connection named. A caller
// that must not throw passes a view of text it holds (a std::string built
// for the call is the caller's allocation).
[[nodiscard]] Error parse_address_checked(std::string_view text, uint16_t default_port,
                                          PeerAddr& out) noexcept;
// "a.b.c.d:port" or "[v6]:port" (inet_ntop's text), "?" for a PeerAddr that
// is not one of this driver's. Allocates the string: std::bad_alloc where
// memory runs short. format_address_text gives the same text in a fixed
// buffer, with nothing allocated and nothing thrown.
[[nodiscard]] std::string format_address(const PeerAddr& a);
struct AddressText {
  // "[" + INET6_ADDRSTRLEN's 45 characters + "]:" + 5 digits, and a NUL.
  static constexpr size_t kCapacity = 56;
  char chars[kCapacity] = {};  // NUL-terminated
  uint8_t size = 0;
  [[nodiscard]] std::string_view view() const noexcept { return {chars, size}; }
};
[[nodiscard]] AddressText format_address_text(const PeerAddr& a) noexcept;
[[nodiscard]] uint16_t address_port(const PeerAddr& a);
[[nodiscard]] bool address_is_v4(const PeerAddr& a);

struct Options {
  // Engine configuration. entropy_min/entropy_max are overwritten with the
  // driver's port block and reply_port with the receive port; everything else
  // is passed through, and open()
  // refuses a field out of its range (config_error(), kInvalidArgument).
  // Changes from the engine defaults, all because this driver runs in a
  // process on a general-purpose host:
  // - The ICRC covers headers only, since the UDP checksum (always computed
  //   by Linux here) protects the payload (spec INT-2). A CRC-32C over every
  //   4 KiB payload in software costs more than the rest of the engine's
  //   per-packet work.
  // - CC-5's target queue delay is 1 ms (engine: 50 us) and LOSS-4's min_rto
  //   10 ms (engine: 1 ms). RTT samples here include the time both processes
  //   wait for a CPU: on a shared host one scheduler slice is 1-4 ms. With the
  //   engine's values every such wait read as a queue (each path's window
  //   stayed at about 7 packets) or as a dead path (hundreds of spurious
  //   timeouts a second, each restarting slow start). Tail losses are still
  //   repaired after 1.25 srtt (LOSS-8), and ECN (CC-4) still reacts at once.
  EndpointConfig engine = [] {
    EndpointConfig c;
    c.cover_payload = false;
    c.cc.target_queue_delay_ns = 1 * kMillisecond;
    c.recovery.min_rto_ns = 10 * kMillisecond;
    return c;
  }();
  // First source port of the block; 0: the receive port + 1.
  uint16_t entropy_base = 0;
  uint16_t entropy_count = 64;  // ports in the block (>= num_paths)
  bool random_seed = true;      // replace engine.seed with getrandom() (keys, conn ids, PSNs)
  // recvmmsg batch: at most this many datagrams a call, and as many as about
  // 512 KiB holds (8 GRO buffers); transmit holds 32 x batch datagrams per round,
  // at least 64 and at most 4,096 (batch 128 reaches it). 1..1024 (open()
  // refuses others).
  uint32_t batch = 32;
  bool gso = true;  // UDP_SEGMENT where the kernel offers it (env METAROCE_UDP_GSO=0 disables)
  bool gro = true;  // UDP_GRO where the kernel offers it (env METAROCE_UDP_GRO=0 disables)
  // Send each round's messages, for every socket, with one io_uring
  // submission instead of one sendmmsg per socket, where the kernel offers
  // io_uring and the build has liburing (env METAROCE_UDP_URING=0 disables).
  // Every path is its own socket, so a round spread over 8 paths took 8
  // system calls; udp/README.md has the measurements.
  bool io_uring = true;
  // Whether a connection a peer opens waits in the accept queue for
  // accept()/try_accept() (G10 of docs/design/libfabric-provider.md). Off: it
  // is established and used as any other, but never queued (an endpoint that
  // learns its peers' connections from their completions, and names their
  // peers with peer_addr(), need not drain a queue every round), and
  // accept() is refused at once (kInvalidArgument), try_accept() false.
  bool queue_accepted = true;
  // Every public call locks the endpoint's mutex, also without the progress
  // thread, so that several application threads may use one endpoint at
  // once (posting, polling, progress(), the blocking helpers; G11 of
  // docs/design/libfabric-provider.md, FI_THREAD_SAFE). A thread blocked in
  // wait(), wait_completion(), connect() or accept() lets the mutex go while
  // it waits on fd(), and runs its own rounds as before: other threads post
  // and poll meanwhile, and a datagram that one thread's round takes is
  // another's completion. Another thread's post, connect_start or
  // close(conn) wakes such a thread at once to send it, and a round another
  // thread runs moves the waiter's timer to an earlier deadline it set, as
  // for the sleeping progress thread. close() from one thread ends the
  // others' waits (as with the progress thread). Off: no lock without the
  // thread, and calls must come from one thread at a time. The lock is per
  // call, never per packet.
  bool thread_safe = false;
  // DSCP a trimming switch gives a packet it cut (spec TRIM-1, TRIM-2); datagrams
  // that arrive with it are handed to the engine flagged trimmed. 0-63 (a DSCP,
  // not a TOS byte): open() refuses more (kInvalidArgument).
  uint8_t trimmed_dscp = wire::kDefaultTrimmedDscp;
  // Socket buffers, more than 0 (open() refuses 0 or less, which the kernel
  // would take as its smallest, 2,304 bytes for a receive buffer).
  int rcvbuf_bytes = 16 << 20;  // SO_RCVBUF(FORCE) of the receive socket
  int sndbuf_bytes = 4 << 20;   // SO_SNDBUF of each send socket
  // Close(): how long to let DISCONNECT handshakes run before closing sockets
  // (0: not at all; open() refuses a negative one).
  std::chrono::milliseconds linger{100};
};

// Driver counters (the engine keeps its own: endpoint_stats()).
struct IoStats {
  uint64_t rx_datagrams = 0;    // after GRO splitting
  uint64_t rx_syscalls = 0;     // recvmmsg calls that returned data
  uint64_t rx_gro_batches = 0;  // received buffers that carried more than one segment
  uint64_t rx_ce = 0;           // datagrams with ECN CE
  // Datagrams with the control class's DSCP (ENC-6): the peer's ACKs and
  // NAKs where it marks them as this endpoint does. None while ACKs arrive
  // means the network rewrote the DSCP, and switches cannot serve them first.
  uint64_t rx_control_class = 0;
  uint64_t rx_truncated = 0;  // datagrams larger than the receive buffer
  uint64_t rx_foreign = 0;    // datagrams of another address family, or empty
  // Received buffers whose control data the kernel cut short (MSG_CTRUNC):
  // their ECN, DSCP or GRO segment size may be missing. One whose segment
  // size is missing (GRO on) is dropped, as it could not be split; the
  // others are handed on, a missing ECN field read as not CE (udp/README.md).
  uint64_t rx_ctrunc = 0;
  uint64_t rx_wait_ns_total = 0;  // summed over datagrams: kernel arrival to handling
  uint64_t rx_wait_ns_max = 0;
  // Rounds whose last recvmmsg came back full (4 calls a round, each of up to
  // `batch` datagrams, sized to about 512 KiB): datagrams may have been left unread.
  uint64_t rx_backlogged_rounds = 0;
  uint64_t tx_datagrams = 0;
  uint64_t tx_syscalls = 0;  // sendmmsg calls, or io_uring submissions (uring_enabled())
  uint64_t tx_gso_msgs = 0;  // messages sent with UDP_SEGMENT (more than one segment)
  uint64_t tx_eagain = 0;    // sends that left messages for a full socket buffer (retried)
  uint64_t tx_errors = 0;    // datagrams dropped on a send error
  uint64_t tx_remapped =
      0;  // entropy outside our block mapped into it (ACK-7 with a foreign block)
  uint64_t tx_materialized = 0;  // payloads copied because a full socket buffer held them
                                 // past the end of a round (normally sent from memory)
  // The progress thread's returns from epoll_wait (a datagram, a timer, a
  // wake-up, or in kBusy its 1 ms timeout) and its rounds: how often an idle
  // endpoint takes a core.
  uint64_t thread_wakeups = 0;
  uint64_t thread_rounds = 0;
  // Connections the engine accepted that the driver found no memory to
  // record (its table or the accept queue): each closed at once, its peer
  // told by the DISCONNECT, rather than std::bad_alloc out of progress().
  uint64_t accepts_dropped = 0;
};

// How the progress thread waits between rounds (start_progress_thread).
enum class ProgressMode : uint8_t {
  // Blocks on fd() with no timeout: a datagram, the timerfd armed at the
  // engine's next_timeout(), or an eventfd that posts, connects and close()
  // write to wake it. An idle endpoint costs nothing between its timers (an
  // established connection's keepalive, CONN-9); each wake-up costs a few
  // microseconds of latency (udp/README.md has the measurements).
  kSleeping,
  // Yields about 20,000 times after each round that moved nothing, then
  // sleeps on fd() for at most 1 ms at a time: a few percent of a core per
  // idle endpoint, for the lowest latency when cores are spare.
  kBusy,
};

// State of one connection as the driver saw it from engine events.
enum class ConnState : uint8_t { kConnecting, kEstablished, kClosed, kError, kUnknown };

class UdpEndpoint {
 public:
  // Opens the receive socket on `address` ("ip:port", "[ip6]:port"; port
  // missing: 4792, ENC-2; port 0: a free port the kernel chooses, see port())
  // and the send sockets of the entropy block (default: the entropy_count
  // ports after the receive port; with port 0 and no entropy_base, open tries
  // again when they are taken or would run past 65535). nullptr and err set on failure: a port in
  // use is kResourceExhausted, its message naming the port, whether it is the receive port or one
  // of the entropy block (and the block), and what to do (another port, or Options::entropy_base).
  // A block that holds the receive port (Options::entropy_base) is kInvalidArgument, naming both.
  // Out of descriptors (EMFILE: an endpoint holds entropy_count + 5) is kResourceExhausted, naming
  // Options::entropy_count and the process's RLIMIT_NOFILE. Memory short for the endpoint (its
  // tables and batches, the engine's) is kResourceExhausted, never std::bad_alloc; so is a host
  // name the resolver had no memory to look up (EAI_MEMORY), and one the name service did not
  // answer for (EAI_AGAIN) is kConnectTimeout (parse_address). A refused open leaves nothing open.
  // An endpoint on a wildcard address (0.0.0.0, or [::], which serves IPv4 peers too) answers each
  // peer from the address that peer reached it at, as a peer takes a connection's packets only from
  // the address it knows.
  [[nodiscard]] static std::unique_ptr<UdpEndpoint> open(const std::string& address,
                                                         const Options& opts, Error& err);
  // close(). Where code that the endpoint's own progress thread runs (an
  // allocator's or a signal's hook: the driver calls none of the
  // application's) destroys it, that thread cannot join itself, and inside
  // a round it holds the endpoint's mutex: the thread then closes the
  // endpoint, gracefully, once its round is over, and ends (detached). The
  // destructor returns at once; the sockets close a round and a linger
  // later. Never throws (it threw std::system_error there: terminate).
  ~UdpEndpoint();
  UdpEndpoint(const UdpEndpoint&) = delete;
  UdpEndpoint& operator=(const UdpEndpoint&) = delete;

  // Local address ("ip:port") and port of the receive socket; the entropy block.
  // The text is formatted once, at open: a reference to the endpoint's own
  // string, valid while the endpoint lives, that no call allocates, so it
  // cannot fail (a copy the caller makes is the caller's allocation).
  [[nodiscard]] const std::string& local_address() const noexcept;
  // The same as a PeerAddr: what a peer passes to connect_start(const
  // PeerAddr&) to reach this endpoint, and what its peer_addr() of the
  // connection then reads (the datagrams' source address with the receive
  // port). For an endpoint bound to a wildcard address (0.0.0.0, [::]) it is
  // that wildcard address with the port, which names no host to a peer: such
  // an endpoint's peers know it by whichever of its addresses they reach,
  // and their peer_addr() names the address its answers came from, which
  // differs from this. A provider that needs one name per endpoint binds to
  // a specific address.
  [[nodiscard]] PeerAddr local_peer_addr() const;
  [[nodiscard]] uint16_t port() const;
  [[nodiscard]] uint16_t entropy_min() const;
  [[nodiscard]] uint16_t entropy_max() const;
  [[nodiscard]] bool gso_enabled() const;
  [[nodiscard]] bool gro_enabled() const;
  [[nodiscard]] bool uring_enabled() const;  // Options::io_uring in effect

  // --- progress ---
  // An epoll fd that becomes readable when progress() has work (a datagram or
  // an engine timer). Do not read from it.
  [[nodiscard]] int fd() const;
  // One round: receive (up to a few batches), timers, transmit, and collect
  // events. Returns how much the round moved, 0 when nothing: the datagrams
  // received, plus those taken from the engine to send (sent now, or held
  // while the socket buffer is full), plus 1 where the round collected any
  // engine event (a connection established or ended, say). Not a packet
  // count: IoStats counts the datagrams sent and received. Called while
  // the sleeping progress thread waits (or, under Options::thread_safe,
  // another thread blocked in wait()), it moves that thread's timer to an
  // earlier deadline the round set (a delayed ACK for a datagram this round
  // took from under it, say), which the thread would otherwise sleep past.
  size_t progress();
  // One progress() round; if nothing moved, waits on fd() (a datagram, a
  // timer, a post) at most `timeout`, and runs another, until one moves
  // something. With the progress thread: until one of its rounds moves
  // something, at most `timeout`. On the progress thread itself (code it
  // runs), which would wait for its own rounds, it returns at once.
  void wait(std::chrono::nanoseconds timeout);
  // A thread calling progress() (see ProgressMode); every public call then
  // locks. Work posted from any thread is sent at once: the post wakes it.
  // It answers peers (ACKs, keepalives, handshakes) and runs the timers
  // while the application computes, so that a peer does not time out a rank
  // that calls nothing for longer than peer_timeout_ns. A second call while
  // it runs does nothing (its mode stays). True while the thread runs; false
  // after close(), or where no thread could be started (no memory for it,
  // or the system's limit on threads): then nothing changed, and the
  // caller's own calls drive progress, as before (no exception comes out).
  // Without Options::thread_safe, it is one of the calls that come one
  // thread at a time: no other call may run while it is made (a call
  // already under way took no lock, and the thread's rounds would run
  // beside it); once it returns true, any thread may call. Under
  // Options::thread_safe, threads starting it at once start one, and
  // one that starts it while another closes the endpoint either starts it
  // before the close, which stops it, or is refused.
  bool start_progress_thread(ProgressMode mode = ProgressMode::kSleeping) noexcept;
  // Joins the thread. Another thread's call that waits on its rounds then
  // goes on without it: wait() returns, and a blocking call (connect,
  // accept, wait_completion, ...) runs its own rounds until it ends as it
  // would have (it used to wait out its timeout). Without
  // Options::thread_safe, calls are then one thread's at a time again: none
  // other until that one returns. True once the thread is joined (or where
  // none ran). False, with nothing changed (the thread runs on), where the
  // caller is the progress thread itself, which cannot join itself: code
  // that the thread runs (an allocator's or a signal's hook: the driver
  // calls none of the application's) must leave the stop to another
  // thread. Never throws.
  bool stop_progress_thread() noexcept;
  // On the progress thread. Code that the thread runs (an allocator's or a
  // signal's hook: the driver calls none of the application's) runs inside
  // one of its rounds, which hold the endpoint's mutex; the mutex is not
  // recursive, so there every call that takes it (all but the accessors of
  // what open() fixed: local_address(), port(), fd(), ...) returns at once
  // with nothing done, where it deadlocked:
  // - an Error: kInvalidArgument, "<call> (conn 0x5): called on this
  //   endpoint's progress thread, which holds the endpoint's lock inside its
  //   rounds (nothing done; ...)" (its connection, where it has one; e.conn
  //   too): register_memory*, deregister_memory,
  //   connect_start (either form, before it asks the resolver or the
  //   routing table), conn_error, post_* (and write, read, send,
  //   recv, ...), the post_*_error calls and completion_error;
  // - try_post_*: kInvalidArgument (post_*_error, called there, says why);
  // - a count or a bool: nothing, as if there were none: progress() and
  //   poll_completions() 0, poll_completion(), poll_read_served(),
  //   try_accept() and conn_stats() false, path_stats() 0 (the vector form:
  //   empty), close(ConnId) false;
  // - a value: none: state() kUnknown, peer_addr() an empty PeerAddr (and
  //   peer_address() ""), mtu_of() 0, endpoint_stats() and io_stats() all
  //   zero, uring_enabled() false.
  // The blocking calls and close() are refused there too (above and below).
  // They are refused anywhere on that thread, as the blocking calls are
  // (outside a round too: a signal while it sleeps). The check is one
  // thread-local compare, and only where the call locks.

  // --- memory ---
  Error register_memory(void* addr, size_t length, uint32_t access, MemoryRegion& out);
  // The region's bytes named base..base+length-1 (spec MR-4; base 0: peers
  // name them by offset). The pointer helpers below (write, read, send,
  // recv) name local memory by its address here, so they fit only regions
  // registered at their own address: name others through post_send/post_recv.
  // Short of memory (the engine's, or the driver's record of the region),
  // either is kResourceExhausted, saying memory ran short (the engine's
  // region table may be full instead), and nothing is registered: no
  // std::bad_alloc comes out of these, nor out of connect_start, accept or
  // progress() (udp/README.md, "Short of memory").
  Error register_memory_at(void* addr, size_t length, uint64_t base, uint32_t access,
                           MemoryRegion& out);
  Error deregister_memory(uint32_t lkey);

  // --- connections ---
  // Blocking handshake. Errors: kConnectTimeout, kConnectRefused,
  // kVersionMismatch, kInvalidArgument (bad address, port 0, a peer of the
  // other family: an IPv4 endpoint reaches only IPv4 peers, one bound to an
  // IPv6 address only IPv6 ones, one on [::] both; a port of this endpoint's own entropy block at
  // an address that reaches its own sockets, its own or, bound to 0.0.0.0 / [::], any of this
  // host's, where its requests would come back to its own send sockets: at once, nothing sent,
  // naming the block); all name peer and conn. A request the kernel
  // refused to send (no route, a broadcast address, ...) is dropped like a lost one, and the error
  // names the kernel's ("sending failed: sendmmsg: Network is unreachable", or "sendmsg: ..."
  // when the round went through io_uring). Requests that the peer's host answered with ICMP port
  // unreachable add "the peer's host answered with ICMP port unreachable (Connection refused): no
  // socket listened at its port" to the kConnectTimeout, whatever num_paths, and ones a firewall
  // rejected "the peer's network answered with ICMP destination unreachable, administratively
  // prohibited (No route to host): a firewall or router rejected the datagrams" (udp/README.md).
  // Requests go on, one every connect_retry_ns (10 ms), for the whole `timeout` (about timeout /
  // connect_retry_ns of them), also after ICMP refusals and failed sends: a peer that starts within
  // it is reached. All come from one connection (one id and nonce: a peer slow to read them accepts
  // it once), which asks the engine for that many (spec CONN-2; never fewer than
  // Options::engine.connect_attempts, at most 65,535, 655 s by default: a longer timeout ends
  // there). The error names the connection and reads "timed out after T ms", or "no answer to N
  // requests 10 ms apart (...)" where the requests ran out before the timeout; answers that came
  // from another host than the peer's, which are dropped (spec BAD-8: a NAT, or a peer answering
  // from another of its addresses), are named with their source and count, and the status's words
  // read "no answer from the peer's address" (conn_error() says the same). A timeout of 0 gives
  // none: one round of the engine's connect_attempts requests, which where they ran out in it read
  // "... (Options::engine. connect_attempts)". A REJECT ends it at once, each code with its own
  // status and words, naming the peer: kConnectRefused "the peer refused the connection",
  // kVersionMismatch "the peer speaks another protocol version", kResourceExhausted "the peer holds
  // as many connections as its max_connections allows, or had no memory for this one" (each
  // "(CONNECT_REJECT)"), and one answering a request repeated to a connection that had failed at
  // the peer, its ACCEPT lost (spec CONN-3), kConnectRefused "the peer's connection had failed,
  // with kRemoteBadKey: ..." (the status it failed with); this endpoint's own limit is
  // kResourceExhausted too, at once, and says "this endpoint holds as many connections as
  // Options::engine.max_connections allows (N)"; short of memory below that limit it says "out of
  // memory for the connection" (nothing sent, nothing left open). Called on this endpoint's
  // progress thread itself (code it runs: an allocator's or a signal's hook), which would wait for
  // its own rounds, it is kInvalidArgument at once, "called on this endpoint's progress thread
  // ...", nothing sent; so are accept(), and a close() there is refused. A negative timeout is
  // refused (kInvalidArgument), as is one for accept().
  Error connect(const std::string& address, std::chrono::milliseconds timeout, ConnId& out);
  // The same with the peer as a binary address, checked as connect_start(const
  // PeerAddr&, ...) checks it (below).
  Error connect(const PeerAddr& peer, std::chrono::milliseconds timeout, ConnId& out);
  // Non-blocking: starts the handshake and returns the connection at once,
  // CONNECTING, which fails kConnectTimeout after the engine's
  // connect_attempts requests (8 x 10 ms by default; it opens no other). Work may be posted on it
  // right away; it goes out once the peer accepts (spec CONN-6), as a connectionless endpoint that
  // connects on first use needs. progress() runs the handshake; state() tells how it ended (a
  // failure also flushes the posted work with its status).
  Error connect_start(const std::string& address, ConnId& out);
  // The same, requesting for `budget` as connect() does for its timeout, so
  // that a peer busy for longer than 80 ms (one that calls into its library
  // only now and then) is still reached; the work posted on it is sent once
  // the peer accepts. When its requests run out the connection fails
  // kConnectTimeout and its work completes kConnectTimeout: at the end of the
  // budget, or of connect_attempts' requests where those last longer (80 ms
  // by default), or of CONN-2's 65,535 where the budget is longer still; the
  // completion's error says which. Budget 0:
  // connect_start(address, out); a negative one is refused
  // (kInvalidArgument).
  Error connect_start(const std::string& address, ConnId& out, std::chrono::milliseconds budget);
  // The same with the peer as a binary address (the string forms parse theirs
  // and call these), as a provider's address vector holds it: another
  // endpoint's local_peer_addr(), a peer_addr(), or parse_address()'s. A
  // PeerAddr that is not one of this driver's (len other than 19, a family
  // byte other than 4 or 6, an IPv4 one without the v4-mapped prefix) is
  // kInvalidArgument, as are port 0 and a peer of a family the endpoint does
  // not reach. A link-local IPv6 peer is reached through the endpoint's own
  // interface (PeerAddr holds none). A bad address (either form, a name that
  // does not resolve too) is judged before its words: kInvalidArgument also
  // with no memory left for them (the message then kOutOfMemoryWords). A
  // name the resolver had no memory for (EAI_MEMORY) is kResourceExhausted,
  // "out of memory resolving ...", and one the name service did not answer
  // for (EAI_AGAIN) kConnectTimeout, "no answer from the name service for
  // ...": neither says the address is wrong, and a later try may succeed.
  Error connect_start(const PeerAddr& peer, ConnId& out);
  Error connect_start(const PeerAddr& peer, ConnId& out, std::chrono::milliseconds budget);
  // Next incoming connection; kConnectTimeout if none arrives in time. Every
  // connection a peer opens waits in a queue until accept() or try_accept()
  // takes it, ended or not (a few bytes each, without bound): an endpoint
  // that peers connect to must take them, even if only to close them, or
  // open with Options::queue_accepted off.
  // Except one its requester had given up: a requester whose connect gave
  // up a connection for its unanswered requests (connect() and
  // connect_start when their time runs out) answers a late
  // ACCEPT with a DISCONNECT giving kConnectTimeout (spec section 4,
  // CONN-8), and a connection so closed before accept() or try_accept()
  // looks is skipped: its peer never had it. The rest cannot be told from
  // live ones in time, and are handed over:
  // - one whose DISCONNECT comes after it was taken closes at once (state()
  //   kClosed, its work kPeerClosed);
  // - one whose ACCEPT came after its requester stopped remembering it
  //   (65,535 x connect_retry after it gave up, or sooner where
  //   max_connections later ends pushed the record out: its engine's
  //   memory; any time before, however late the ACCEPT) draws nothing: it
  //   stays established, its peer never uses it, and its keepalive
  //   (CONN-9) ends it kPeerUnreachable;
  // - one closed while connecting (close(), or connect() at the caller's
  //   timeout) is answered as any close, reason 0, and reads kClosed.
  // With a connect() that opened several, the one its peer uses comes last.
  Error accept(std::chrono::milliseconds timeout, ConnId& out);
  // Non-blocking: the next accepted connection, if any.
  bool try_accept(ConnId& out);
  // Orderly close of one connection (outstanding work completes kFlushed).
  // True unless refused: false, nothing done, on the endpoint's progress
  // thread itself (see "On the progress thread", above). An id the endpoint
  // never had, or one already closed, is no refusal.
  bool close(ConnId conn);
  // kUnknown for an id this endpoint never had. A connection that ended
  // (kClosed, kError) is remembered, for state(), conn_error() and
  // peer_address(), until 1024 later ones have ended (one waiting in the
  // accept queue: until then after it is taken); then it reads
  // kUnknown (with an empty conn_error(); peer_address() still names the
  // peer while the engine holds the connection or remembers it as recently
  // closed), so that an endpoint serving peers for a long time keeps only
  // the latest.
  [[nodiscard]] ConnState state(ConnId conn) const;
  // Why a connection in kError ended: the status that ended it (a NAK's code
  // such as kRemoteLengthError, kPeerUnreachable, kConnectTimeout, ...) with
  // its peer and id, and the kernel's error if the last send to the peer
  // failed. An empty Error for a connection in any other state.
  [[nodiscard]] Error conn_error(ConnId conn) const;
  // The peer as its datagrams' source address and its receive port, in the
  // form local_address() uses ("a.b.c.d:port", also for an IPv4 peer of a
  // dual-stack endpoint; "[v6]:port", inet_ntop's canonical text, no scope):
  // the string the peer's own local_address() returns, unless the peer is
  // bound to a wildcard address, which its local_address() names instead.
  // "" for a connection the endpoint does not know. It never throws: where
  // memory for the text runs short (one longer than std::string holds in its
  // own buffer, 15 characters in libstdc++: "[fe80::1]:4792" fits,
  // "10.100.200.10:4792" does not) it returns kOutOfMemoryWords, which no
  // address reads as (compare with it). peer_addr() needs no memory.
  [[nodiscard]] std::string peer_address(ConnId conn) const noexcept;
  // The same as a PeerAddr (len 0 where peer_address() is empty): equal to
  // the peer's local_peer_addr() unless the peer is bound to a wildcard
  // address, with no text formatted or parsed, for a provider that matches
  // accepted connections to its address vector's binary entries.
  [[nodiscard]] PeerAddr peer_addr(ConnId conn) const;
  // The mtu the handshake agreed (Endpoint::mtu_of): the smaller of the
  // requester's offer, lowered to what its route carries, and the
  // responder's own; 0 for a connection not established.
  [[nodiscard]] uint16_t mtu_of(ConnId conn) const;

  // --- work requests (queued; progress() sends them) ---
  // On a connection that ended (state() kClosed or kError) a post is
  // kNotConnected and names what ended it ("the connection is closed", "the
  // connection was closed by the peer (kPeerClosed)", with ", after it failed
  // the connection with kRemoteBadKey: ..." where the peer's DISCONNECT gave
  // a reason (spec CONN-8), "the connection ended with kPeerUnreachable
  // (...)"), also after the engine has let the connection go (it read
  // "kNoSuchConnection: unknown connection id"); so is one on a connection
  // close(conn) closed whose DISCONNECT is not answered yet ("the
  // application closed the connection (close(conn))", state() kEstablished
  // until then). kLocalProtection names the
  // opcode, wr_id, address range and lkey, and which is wrong: an lkey that
  // names no region, bytes outside it (its range given), or a READ target or
  // receive buffer in a region without kAccessLocalWrite.
  Error post_send(ConnId conn, const SendWr& wr);
  Error post_recv(ConnId conn, const RecvWr& wr);
  // A receive any connection may take (spec PLACE-6), for endpoints that
  // serve many peers; needs Options::engine.shared_rq_depth > 0. Its
  // completion names the connection whose message filled it.
  Error post_shared_recv(const RecvWr& wr);
  // The same posts returning the status alone: a refusal (kQueueFull above
  // all, which a provider turns into -FI_EAGAIN and its caller retries in a
  // loop) allocates nothing and formats no text. The Error forms are these and, on a refusal, the
  // *_error call below; the words of a refusal are wanted only when it is
  // reported, and those calls give them: the same Error the Error form would
  // have returned, if nothing changed in between (a refusal that names
  // what ended the connection reads the connection as it is when asked).
  [[nodiscard]] Status try_post_send(ConnId conn, const SendWr& wr);
  [[nodiscard]] Status try_post_recv(ConnId conn, const RecvWr& wr);
  [[nodiscard]] Status try_post_shared_recv(const RecvWr& wr);
  // The Error of a post refused with `s` (an empty Error for kOk).
  [[nodiscard]] Error post_send_error(Status s, ConnId conn, const SendWr& wr) const;
  [[nodiscard]] Error post_recv_error(Status s, ConnId conn, const RecvWr& wr) const;
  [[nodiscard]] Error post_shared_recv_error(Status s, const RecvWr& wr) const;
  Error write(ConnId conn, uint64_t wr_id, const void* local, uint32_t len, uint32_t lkey,
              uint64_t remote_addr, uint64_t rkey);
  Error write_imm(ConnId conn, uint64_t wr_id, const void* local, uint32_t len, uint32_t lkey,
                  uint64_t remote_addr, uint64_t rkey, uint32_t imm);
  Error read(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey,
             uint64_t remote_addr, uint64_t rkey);
  Error send(ConnId conn, uint64_t wr_id, const void* local, uint32_t len, uint32_t lkey);
  Error recv(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey);

  // --- completions ---
  bool poll_completion(Completion& out);
  // Up to `max` completions into out[0..max); the number taken. A null `out`
  // has room for none: 0, and the completions stay for the next call.
  size_t poll_completions(Completion* out, size_t max);
  // progress()/wait until a completion arrives; false on timeout, and at
  // once on the progress thread itself (code it runs), which would wait for
  // its own rounds.
  bool wait_completion(Completion& out, std::chrono::nanoseconds timeout);
  // An Error describing a failed completion (peer, conn, status). A kFlushed
  // one says what flushed it, rather than the engine's "connection entered
  // the error state first": "the application closed the connection
  // (close(conn))", "the endpoint was closed (close())", "the connect failed
  // first" or "the connection failed first", adding what ended a connection
  // that ended otherwise than by a close here, as conn_error() says it ("; the
  // connection ended with kRemoteLengthError (...)", "... kConnectRefused").
  // A buffer out of its region is refused at the post, so a completion (or
  // connection) that fails kLocalProtection says that memory a request used
  // "was deregistered while the request was outstanding (MR-5)"; and
  // kRemoteOperationError, that a reference peer sends it for that.
  [[nodiscard]] Error completion_error(const Completion& c) const;
  // The next READ this endpoint served whose responses are all acknowledged
  // (metaroce::ReadServed: connection, lkey, address, length); false when
  // none. Only with Options::engine.read_served_events (off by default;
  // on, an endpoint that polls none keeps one entry per READ it serves): a
  // rendezvous sender releases its buffer on it, as the requester's FIN says
  // only that the bytes were placed (G3 of docs/design/libfabric-provider.md).
  bool poll_read_served(ReadServed& out);

  // --- statistics ---
  [[nodiscard]] EndpointStats endpoint_stats() const;
  // False for an unknown connection; a closed one keeps its final counters,
  // its own and its paths', while among the endpoint's last 64 closed
  // (Endpoint::conn_stats).
  [[nodiscard]] bool conn_stats(ConnId conn, ConnStats& out) const;
  // Empty for an unknown connection, and where no memory is left for the
  // vector (it never throws). The array form needs none and tells the two
  // apart: it fills out[0..min(n, max)) and returns n, the connection's
  // paths (0: unknown); path_stats(conn, nullptr, 0) only counts them.
  [[nodiscard]] std::vector<PathStats> path_stats(ConnId conn) const noexcept;
  [[nodiscard]] size_t path_stats(ConnId conn, PathStats* out, size_t max) const noexcept;
  [[nodiscard]] IoStats io_stats() const;

  // Closes every connection, stops the progress thread and closes the
  // sockets. Graceful: the peers are told (DISCONNECT) and close() waits up
  // to opts.linger for their answers; otherwise they are not told. Either
  // way each connection's outstanding work completes kFlushed (its
  // completions can still be polled after close()), and state() reads
  // kClosed for every connection that was open (kError stays). Afterwards
  // post_*, connect, accept and register_memory return kNotConnected ("the
  // endpoint is closed", naming the connection or peer; deregister_memory
  // still works, for the caller's teardown), as do a connect and an accept
  // that another thread's close() ends, and wait_completion returns false at once when no
  // completion is left. With the progress thread running, other threads' calls wait until close()
  // is done (it holds the endpoint's mutex). Idempotent: true once closed.
  // False, with nothing changed, where the caller is the progress thread
  // itself (code it runs: an allocator's or a signal's hook), which cannot
  // join itself and inside a round holds the mutex close() takes: close from
  // another thread, or destroy the endpoint (the thread then closes it after
  // its round, ~UdpEndpoint). Never throws there (it threw std::system_error).
  bool close(bool graceful = true);

  struct Impl;

 private:
  explicit UdpEndpoint(std::unique_ptr<Impl> impl);
  Error connect_wait(ConnId id, std::chrono::milliseconds timeout, ConnId& out);
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaroce::udp
