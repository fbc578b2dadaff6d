// The UDP driver for the MetaRoCE engine (see include/metaroce/udp.hpp).
//
// One progress round: recvmmsg batches from the receive socket (GRO segments
// split, ECN CE read from IP_TOS / IPV6_TCLASS), engine timers, then datagrams
// drained from poll_transmit_gather into preallocated slots (headers copied,
// payloads left in registered memory and handed to the kernel as iovecs),
// grouped by source port (one socket per entropy value) and peer into one
// sendmmsg per socket, with runs of equal-size datagrams to the same peer
// coalesced with UDP_SEGMENT (GSO). There are 8 x batch slots, flushed when
// full and at the end of the round: the engine spreads consecutive packets
// over the paths, so a path's share of a round is what one GSO run can hold.
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "address.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/udp.hpp"

namespace metaroce::udp {
namespace {

constexpr uint16_t kDefaultPort = 4792;
constexpr size_t kGsoMaxSegments = 64;  // UDP_MAX_SEGMENTS
constexpr size_t kGsoMaxBytes = 65000;  // below the 64 KiB UDP length limit
constexpr size_t kRxCtrlBytes = 128;
constexpr size_t kTxCtrlBytes = CMSG_SPACE(sizeof(uint16_t));
constexpr int kRxBatchesPerRound = 4;
constexpr size_t kGatherMin = 512;  // payloads up to this size are copied, not gathered
constexpr size_t kIcrc = 4;         // the trailer after a gathered payload
// Each transmit slot starts with room for the previous segment's trailer, so
// that in a GSO message that trailer and this segment's headers go to the
// kernel as one iovec: 2 per gathered segment instead of 3. The kernel's copy
// loop pays per iovec; a loopback sender's copy took about 10% less.
constexpr size_t kTxLead = kIcrc;
constexpr uint8_t kOpConnectReq = 0x20;
constexpr uint8_t kOpAck = 0x10;

TimeNs clock_now() {
  return TimeNs{static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count())};
}

int64_t realtime_ns() {
  timespec ts{};
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

bool env_disabled(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 ||
                          std::strcmp(v, "false") == 0 || std::strcmp(v, "no") == 0);
}

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%x", v);
  return b;
}

struct ConnInfo {
  ConnState state = ConnState::kConnecting;
  Status status = Status::kOk;
  PeerAddr peer;
};

// One datagram taken from the engine. Gathered (payload != nullptr): the
// headers are in the slot buffer, the payload stays in registered memory and
// the ICRC trailer is kept here; the kernel copies them from iovecs.
// Otherwise the whole datagram is in the slot buffer. Either way it starts
// kTxLead bytes into the buffer (slot_buf).
struct TxSlot {
  PeerAddr peer;
  const uint8_t* payload = nullptr;
  uint32_t len = 0;   // whole datagram
  uint16_t hlen = 0;  // headers in the slot buffer (gathered only)
  uint16_t sock = 0;  // index into Impl::tx_fds; entropy_count means the receive socket
  uint16_t key = 0;   // grouping key: 2 * sock, + 1 for ACKs (see build_messages)
  uint8_t trailer[4] = {};
};

}  // namespace

struct UdpEndpoint::Impl {
  Options opts;
  EndpointConfig cfg;
  std::unique_ptr<Endpoint> eng;
  int family = AF_INET;
  int rx_fd = -1;
  std::vector<int> tx_fds;  // entropy_count send sockets, then rx_fd (not owned twice)
  // The peer each send socket is connected to (see use_connected).
  std::vector<PeerAddr> tx_peer;
  std::vector<uint8_t> tx_peer_tried;
  int epfd = -1;
  int timer_fd = -1;
  int wake_fd = -1;
  PeerAddr local;
  uint16_t ebase = 0;
  uint16_t ecount = 0;
  bool gso = false;
  bool gro = false;
  bool closed = false;
  uint32_t batch = 32;

  // receive
  size_t rx_slot = 0;
  uint32_t rx_used = 0;  // messages the last recvmmsg filled
  std::vector<uint8_t> rx_buf;
  std::vector<mmsghdr> rx_msgs;
  std::vector<iovec> rx_iov;
  std::vector<sockaddr_storage> rx_addr;
  std::vector<uint8_t> rx_ctrl;

  // transmit: slots filled from poll_transmit_gather, then messages built
  // over them (grouped by socket, runs coalesced with GSO)
  size_t tx_slot_size = 0;
  size_t tx_cap = 0;  // slots
  std::vector<uint8_t> tx_buf;
  std::vector<TxSlot> tx_slots;
  std::vector<uint32_t> tx_order;
  std::vector<uint32_t> tx_bucket;  // counting sort by TxSlot::key
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
  // Test hook (env METAROCE_UDP_FAULT_EAGAIN=N): every Nth sendmmsg fails as
  // if the socket buffer were full.
  uint32_t fault_eagain_every = 0;
  uint32_t fault_calls = 0;

  // connections as seen from events
  std::unordered_map<uint32_t, ConnInfo> conns;
  std::deque<ConnId> accepted;
  PeerAddr recent[16];
  size_t recent_next = 0;

  IoStats io;
  uint64_t armed_ns = 0;  // timerfd deadline currently armed (0: none)

  // threading
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  std::atomic<bool> threaded{false};
  std::atomic<bool> running{false};
  std::atomic<bool> sleeping{false};
  // The application asked for fd(): it may sleep on it, so every round arms
  // the timerfd. Otherwise only the driver's own sleeps need it armed, and
  // arming per round (the ACK delay moves every other packet) costs a
  // timerfd_settime per two packets on a receiver.
  std::atomic<bool> fd_exported{false};

  ~Impl() { close_fds(); }

  void close_fds() {
    for (int fd : tx_fds)
      if (fd >= 0) ::close(fd);
    tx_fds.clear();
    for (int* fd : {&rx_fd, &epfd, &timer_fd, &wake_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  std::unique_lock<std::mutex> guard() {
    return threaded.load(std::memory_order_acquire) ? std::unique_lock<std::mutex>(mu)
                                                    : std::unique_lock<std::mutex>();
  }

  void wake_thread() {
    if (sleeping.load(std::memory_order_acquire)) {
      const uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof(one));
    }
  }

  // --- errors ---
  Error make_error(Status s, const std::string& what, ConnId conn) const {
    Error e;
    e.status = s;
    e.conn = conn.v;
    auto it = conns.find(conn.v);
    PeerAddr p = it != conns.end() ? it->second.peer : eng->peer_of(conn);
    if (p.len != 0) e.peer = format_address(p);
    e.message = what;
    if (!e.peer.empty()) e.message += " (peer " + e.peer;
    if (conn.v != 0)
      e.message += e.peer.empty() ? " (conn " + hex(conn.v) : ", conn " + hex(conn.v);
    if (!e.peer.empty() || conn.v != 0) e.message += ")";
    e.message += ": " + std::string(status_name(s)) + ": " + std::string(status_text(s));
    return e;
  }

  // --- setup ---
  bool setup_socket(int fd, bool is_rx, Error& err, const std::string& what) {
    const int one = 1;
    const int ect0 = kEcnEct0;
    if (family == AF_INET) {
      if (setsockopt(fd, IPPROTO_IP, IP_TOS, &ect0, sizeof(ect0)) != 0) {
        err.status = Status::kInvalidArgument;
        err.message = what + ": setsockopt(IP_TOS): " + errno_text(errno);
        return false;
      }
      (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    } else {
      if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &ect0, sizeof(ect0)) != 0) {
        err.status = Status::kInvalidArgument;
        err.message = what + ": setsockopt(IPV6_TCLASS): " + errno_text(errno);
        return false;
      }
      (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &ect0, sizeof(ect0));  // v4-mapped peers
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
      (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    }
    if (is_rx) {
      // Kernel arrival times, for IoStats::rx_wait_ns_*: how long datagrams
      // sat in the socket before this process read them (a process short of
      // CPU shows it there first, and its RTT samples include it).
      (void)setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
      const int sz = opts.rcvbuf_bytes;
      if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    }
    const int snd = opts.sndbuf_bytes;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd)) != 0)
      (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
    return true;
  }

  int open_bound(const PeerAddr& addr, bool is_rx, Error& err) {
    const std::string what =
        std::string(is_rx ? "receive" : "send") + " socket " + format_address(addr);
    const int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err.status = Status::kResourceExhausted;
      err.message = what + ": socket(): " + errno_text(errno);
      return -1;
    }
    if (family == AF_INET6) {
      // Dual-stack only when bound to the wildcard address.
      const bool any = std::all_of(addr.bytes, addr.bytes + 16, [](uint8_t b) { return b == 0; });
      const int v6only = any ? 0 : 1;
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    }
    if (!setup_socket(fd, is_rx, err, what)) {
      ::close(fd);
      return -1;
    }
    sockaddr_storage ss;
    socklen_t len = 0;
    if (!to_sockaddr(addr, family, ss, len) ||
        ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      const int e = errno;
      err.status = e == EADDRINUSE ? Status::kResourceExhausted : Status::kInvalidArgument;
      err.message = what + ": bind(): " + errno_text(e) +
                    (e == EADDRINUSE ? " (the port is used by another socket or process; choose "
                                       "another address or entropy block)"
                                     : "");
      err.peer = format_address(addr);
      ::close(fd);
      return -1;
    }
    return fd;
  }

  bool open(const std::string& address, Error& err) {
    std::string why;
    if (!parse_address(address, kDefaultPort, local, &why)) {
      err.status = Status::kInvalidArgument;
      err.message = "open " + address + ": " + why;
      return false;
    }
    family = address_is_v4(local) ? AF_INET : AF_INET6;
    cfg = opts.engine;
    batch = std::clamp<uint32_t>(opts.batch, 1, 1024);
    gso = opts.gso && !env_disabled("METAROCE_UDP_GSO");
    if (const char* f = std::getenv("METAROCE_UDP_FAULT_EAGAIN"))
      fault_eagain_every = static_cast<uint32_t>(std::strtoul(f, nullptr, 10));
    gro = opts.gro && !env_disabled("METAROCE_UDP_GRO");

    rx_fd = open_bound(local, true, err);
    if (rx_fd < 0) return false;
    {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getsockname(rx_fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        PeerAddr bound;
        if (from_sockaddr(reinterpret_cast<sockaddr*>(&ss), bound)) {
          local.bytes[16] = bound.bytes[16];
          local.bytes[17] = bound.bytes[17];
        }
      }
    }
    ecount = opts.entropy_count;
    const uint32_t base =
        opts.entropy_base != 0 ? opts.entropy_base : uint32_t{address_port(local)} + 1;
    if (ecount < std::max<uint16_t>(1, cfg.num_paths) || base + ecount - 1 > 65535 || base == 0) {
      err.status = Status::kInvalidArgument;
      err.message = "open " + address + ": entropy block " + std::to_string(base) + "+" +
                    std::to_string(ecount) +
                    " is invalid (needs at least num_paths=" + std::to_string(cfg.num_paths) +
                    " ports below 65536)";
      return false;
    }
    ebase = static_cast<uint16_t>(base);
    cfg.entropy_min = ebase;
    cfg.entropy_max = static_cast<uint16_t>(base + ecount - 1);
    if (opts.random_seed) {
      uint64_t seed = 0;
      if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
        seed = static_cast<uint64_t>(clock_now().ns) ^ static_cast<uint64_t>(::getpid());
      cfg.seed = seed | 1;
    }

    tx_fds.assign(ecount, -1);
    for (uint16_t i = 0; i < ecount; ++i) {
      PeerAddr a = local;
      const auto port = static_cast<uint16_t>(ebase + i);
      a.bytes[16] = static_cast<uint8_t>(port >> 8);
      a.bytes[17] = static_cast<uint8_t>(port);
      tx_fds[i] = open_bound(a, false, err);
      if (tx_fds[i] < 0) return false;
    }
    // GSO / GRO: detect at open.
    if (gso) {
      const int seg = 1200;
      gso = setsockopt(tx_fds[0], SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) == 0;
      if (gso) {
        const int zero = 0;
        (void)setsockopt(tx_fds[0], SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero));
      }
    }
    if (gro) {
      const int one = 1;
      gro = setsockopt(rx_fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
    }

    epfd = epoll_create1(EPOLL_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd < 0 || timer_fd < 0 || wake_fd < 0) {
      err.status = Status::kResourceExhausted;
      err.message = "open " + address + ": epoll/timerfd/eventfd: " + errno_text(errno);
      return false;
    }
    for (int fd : {rx_fd, timer_fd, wake_fd}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      (void)epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }

    eng = std::make_unique<Endpoint>(cfg);

    // Preallocated batches: nothing below allocates per packet.
    rx_slot = gro ? 65536 : size_t{cfg.mtu} + 512;
    rx_buf.assign(rx_slot * batch, 0);
    rx_msgs.assign(batch, mmsghdr{});
    rx_iov.assign(batch, iovec{});
    rx_addr.assign(batch, sockaddr_storage{});
    rx_ctrl.assign(kRxCtrlBytes * batch, 0);
    for (uint32_t i = 0; i < batch; ++i) {
      rx_iov[i].iov_base = rx_buf.data() + i * rx_slot;
      rx_iov[i].iov_len = rx_slot;
      msghdr& h = rx_msgs[i].msg_hdr;
      h.msg_name = &rx_addr[i];
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_iov = &rx_iov[i];
      h.msg_iovlen = 1;
      h.msg_control = rx_ctrl.data() + i * kRxCtrlBytes;
      h.msg_controllen = kRxCtrlBytes;
      h.msg_flags = 0;
    }
    // Transmit slots: several per socket of a connection's paths, so that
    // each path's packets of one round form GSO runs (the engine sprays
    // consecutive packets over the paths, one socket each).
    tx_slot_size = (size_t{cfg.mtu} + 256 + 63) & ~size_t{63};
    tx_cap = std::clamp<size_t>(size_t{batch} * 8, 64, 2048);
    tx_buf.assign(tx_slot_size * tx_cap, 0);
    tx_slots.assign(tx_cap, TxSlot{});
    tx_order.assign(tx_cap, 0);
    tx_peer.assign(ecount, PeerAddr{});
    tx_peer_tried.assign(ecount, 0);
    tx_bucket.assign(2 * (size_t{ecount} + 1) + 1, 0);
    tx_iov.assign(3 * tx_cap, iovec{});
    tx_msgs.assign(tx_cap, mmsghdr{});
    tx_msg_sock.assign(tx_cap, 0);
    tx_msg_segs.assign(tx_cap, 0);
    tx_msg_first.assign(tx_cap + 1, 0);
    tx_addr.assign(tx_cap, sockaddr_storage{});
    tx_ctrl.assign(kTxCtrlBytes * tx_cap, 0);
    return true;
  }

  // --- receive ---
  PeerAddr resolve_peer(const PeerAddr& src, const uint8_t* p, size_t n) {
    if (n >= 8) {
      const uint32_t dc = be::load32(p + 4);
      if (dc != 0) {
        const PeerAddr known = eng->peer_of(ConnId{dc});
        if (known.len != 0 && same_host(known, src)) return known;
        for (const PeerAddr& r : recent)  // a connection already gone (e.g. repeated DISCONNECT)
          if (r.len != 0 && same_host(r, src)) return r;
      }
    }
    return src;  // CONNECT_REQ: sent from the peer's receive port
  }

  size_t receive(TimeNs now) {
    size_t got = 0;
    const int64_t real_to_mono = static_cast<int64_t>(now.ns) - realtime_ns();
    for (int round = 0; round < kRxBatchesPerRound; ++round) {
      // Only the fields the kernel wrote in the last call need resetting.
      for (uint32_t i = 0; i < rx_used; ++i) {
        msghdr& h = rx_msgs[i].msg_hdr;
        h.msg_namelen = sizeof(sockaddr_storage);
        h.msg_controllen = kRxCtrlBytes;
        h.msg_flags = 0;
      }
      rx_used = 0;
      const int r = recvmmsg(rx_fd, rx_msgs.data(), batch, MSG_DONTWAIT, nullptr);
      if (r <= 0) break;
      rx_used = static_cast<uint32_t>(r);
      if (static_cast<uint32_t>(r) == batch && round + 1 == kRxBatchesPerRound)
        ++io.rx_backlogged_rounds;
      ++io.rx_syscalls;
      for (int i = 0; i < r; ++i) {
        msghdr& h = rx_msgs[i].msg_hdr;
        const size_t len = rx_msgs[i].msg_len;
        if ((h.msg_flags & MSG_TRUNC) != 0) {
          ++io.rx_truncated;
          continue;
        }
        uint8_t tos = 0;
        size_t seg = len;
        int64_t arrived = 0;  // kernel receive time, on the engine's clock
        for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
          if (c->cmsg_level == IPPROTO_IP &&
              (c->cmsg_type == IP_TOS || c->cmsg_type == IP_RECVTOS)) {
            tos = *reinterpret_cast<const uint8_t*>(CMSG_DATA(c));
          } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
            int v = 0;
            std::memcpy(&v, CMSG_DATA(c), sizeof(v));
            tos = static_cast<uint8_t>(v);
          } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v = 0;
            std::memcpy(&v, CMSG_DATA(c), sizeof(v));
            if (v > 0) seg = static_cast<size_t>(v);
          } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            timespec ts{};
            std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
            arrived = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + real_to_mono;
          }
        }
        if (arrived != 0) {
          const auto waited =
              static_cast<uint64_t>(std::max<int64_t>(static_cast<int64_t>(now.ns) - arrived, 0));
          io.rx_wait_ns_total += waited * ((len + seg - 1) / seg);  // per datagram
          io.rx_wait_ns_max = std::max(io.rx_wait_ns_max, waited);
        }
        PeerAddr src;
        if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&rx_addr[i]), src)) {
          ++io.rx_foreign;
          continue;
        }
        const bool ce = (tos & 3) == 3;
        const uint8_t* base = static_cast<const uint8_t*>(rx_iov[i].iov_base);
        if (seg < len) ++io.rx_gro_batches;
        // A GRO buffer's segments share path and ECN field: ACK-1 lets them
        // draw one ACK, so the engine is drained once per buffer (ACKs were
        // half of all datagrams, each a sendmmsg of its own on the path's
        // socket). CE-marked segments are drained one by one: every CE mark
        // keeps its own ACK (ACK-2).
        RxDatagram dg;
        dg.entropy = address_port(src);
        dg.ce = ce;
        // TRIM-2. IP GRO never merges datagrams of different TOS, so a whole
        // buffer shares the flag.
        dg.trimmed = (tos >> 2) == opts.trimmed_dscp;
        uint32_t resolved_dc = 0;  // the segments of a buffer normally share dst_conn
        bool resolved = false;
        for (size_t off = 0; off < len; off += seg) {
          const size_t n = std::min(seg, len - off);
          const uint32_t dc = n >= 8 ? be::load32(base + off + 4) : 0;
          if (!resolved || dc != resolved_dc || dc == 0) {
            dg.peer = resolve_peer(src, base + off, n);
            resolved_dc = dc;
            resolved = true;
          }
          dg.bytes = std::span<const uint8_t>(base + off, n);
          eng->handle_datagram(dg, now);
          if (ce) (void)pump_tx(now);
          ++io.rx_datagrams;
          io.rx_ce += ce ? 1 : 0;
          ++got;
        }
        if (!ce) (void)pump_tx(now);
      }
      if (static_cast<uint32_t>(r) < batch) break;
    }
    return got;
  }

  // --- transmit ---
  uint16_t choose_socket(uint16_t entropy, const uint8_t* p, size_t n) {
    if (n >= 2 && p[1] == kOpConnectReq) return ecount;  // from the receive port (see header)
    if (entropy >= ebase && entropy - ebase < ecount) return static_cast<uint16_t>(entropy - ebase);
    ++io.tx_remapped;  // an echo of the peer's port (ACK-7) outside our block
    return static_cast<uint16_t>(entropy % ecount);
  }

  int sock_fd(uint16_t s) const { return s == ecount ? rx_fd : tx_fds[s]; }

  // A send socket is connected to the first peer it sends to, and messages
  // to that peer then leave without an address: a connected UDP socket keeps
  // its route, an unconnected one looks it up for every message (a FIB
  // lookup, ~1% of a loopback sender's CPU). Messages to other peers still
  // carry their address. Nothing is received on send sockets, so the filter
  // a connect() installs changes nothing; ICMP errors it lets through come
  // back as ECONNREFUSED from a later send (see flush). Once per socket.
  bool use_connected(uint16_t sock, const PeerAddr& peer, const sockaddr_storage& ss,
                     socklen_t len) {
    if (sock == ecount) return false;  // the receive socket answers every peer
    if (tx_peer_tried[sock] == 0) {
      tx_peer_tried[sock] = 1;
      if (::connect(tx_fds[sock], reinterpret_cast<const sockaddr*>(&ss), len) == 0)
        tx_peer[sock] = peer;
    }
    return tx_peer[sock].len != 0 && tx_peer[sock] == peer;
  }

  // Fills slots from the engine; returns the number taken.
  size_t fill(TimeNs now) {
    TxDatagram tx;
    while (tx_count < tx_cap) {
      uint8_t* buf = slot_buf(tx_count);
      if (!eng->poll_transmit_gather(now, std::span<uint8_t>(buf, tx_slot_size - kTxLead), tx))
        break;
      TxSlot& s = tx_slots[tx_count];
      s.peer = tx.peer;
      // The slot holds mtu + 256 bytes, so a gathered packet also fits whole
      // (materialize_pending): headers are under 64 bytes, payload <= mtu.
      if (tx.payload.size() > kGatherMin) {
        s.payload = tx.payload.data();
        s.hlen = static_cast<uint16_t>(tx.header_len);
        s.len = static_cast<uint32_t>(tx.header_len + tx.payload.size() + kIcrc);
        std::memcpy(s.trailer, tx.trailer, kIcrc);
      } else {
        // Whole in the buffer: built so (no payload), or a small payload is
        // cheaper to copy than to describe with two more iovecs.
        if (!tx.payload.empty()) {
          std::memcpy(buf + tx.header_len, tx.payload.data(), tx.payload.size());
          std::memcpy(buf + tx.header_len + tx.payload.size(), tx.trailer, kIcrc);
        }
        s.payload = nullptr;
        s.hlen = 0;
        s.len = static_cast<uint32_t>(std::min(tx.len, tx_slot_size - kTxLead));
      }
      s.sock = choose_socket(tx.entropy, buf, s.len);
      s.key = static_cast<uint16_t>(2 * s.sock + (s.len >= 2 && buf[1] == kOpAck ? 1 : 0));
      ++tx_count;
    }
    return tx_count;
  }

  uint8_t* slot_buf(size_t slot) { return tx_buf.data() + slot * tx_slot_size + kTxLead; }

  // The iovecs of the segments tx_order[i, j) from tx_iov[at]; returns how
  // many. A gathered segment's trailer is copied in front of the next
  // segment's headers (kTxLead) and sent with them.
  size_t message_iov(size_t i, size_t j, size_t at) {
    const size_t first = at;
    const TxSlot* pending = nullptr;  // trailer not yet described
    for (size_t k = i; k < j; ++k) {
      const TxSlot& s = tx_slots[tx_order[k]];
      uint8_t* buf = slot_buf(tx_order[k]);
      size_t lead = 0;
      if (pending != nullptr) {
        std::memcpy(buf - kTxLead, pending->trailer, kIcrc);
        lead = kTxLead;
        pending = nullptr;
      }
      if (s.payload == nullptr) {
        tx_iov[at++] = {buf - lead, lead + s.len};
        continue;
      }
      tx_iov[at++] = {buf - lead, lead + s.hlen};
      tx_iov[at++] = {const_cast<uint8_t*>(s.payload), s.len - s.hlen - kIcrc};
      pending = &s;
    }
    if (pending != nullptr) tx_iov[at++] = {const_cast<uint8_t*>(pending->trailer), kIcrc};
    return at - first;
  }

  void build_messages() {
    // Group by socket (a counting sort, stable): one sendmmsg per socket, and
    // a path's packets of this batch adjacent so that they coalesce with GSO.
    // ACKs form their own group after the socket's other packets so that
    // they coalesce too; every other packet keeps its order on its socket.
    std::fill(tx_bucket.begin(), tx_bucket.end(), 0);
    for (size_t i = 0; i < tx_count; ++i) ++tx_bucket[tx_slots[i].key + 1u];
    for (size_t k = 1; k < tx_bucket.size(); ++k) tx_bucket[k] += tx_bucket[k - 1];
    for (size_t i = 0; i < tx_count; ++i)
      tx_order[tx_bucket[tx_slots[i].key]++] = static_cast<uint32_t>(i);
    tx_msg_count = 0;
    size_t i = 0;
    size_t niov = 0;
    while (i < tx_count) {
      const TxSlot& first = tx_slots[tx_order[i]];
      size_t j = i + 1;
      size_t bytes = first.len;
      if (gso) {
        while (j < tx_count && j - i < kGsoMaxSegments) {
          const TxSlot& s = tx_slots[tx_order[j]];
          if (s.sock != first.sock || !(s.peer == first.peer) || s.len > first.len ||
              bytes + s.len > kGsoMaxBytes)
            break;
          bytes += s.len;
          ++j;
          if (s.len < first.len) break;  // a shorter segment ends the run
        }
      }
      const size_t m = tx_msg_count++;
      msghdr& h = tx_msgs[m].msg_hdr;
      h = msghdr{};
      socklen_t alen = 0;
      if (!to_sockaddr(first.peer, family, tx_addr[m], alen)) {
        // e.g. an IPv6 peer on an IPv4 endpoint: nothing to send it on.
        io.tx_errors += j - i;
        --tx_msg_count;
        i = j;
        continue;
      }
      h.msg_iov = &tx_iov[niov];
      niov += message_iov(i, j, niov);
      if (!use_connected(first.sock, first.peer, tx_addr[m], alen)) {
        h.msg_name = &tx_addr[m];
        h.msg_namelen = alen;
      }
      h.msg_iovlen = static_cast<size_t>(&tx_iov[niov] - h.msg_iov);
      tx_msg_sock[m] = first.sock;
      tx_msg_segs[m] = static_cast<uint32_t>(j - i);
      tx_msg_first[m] = static_cast<uint32_t>(i);
      if (j - i > 1) {
        uint8_t* ctrl = tx_ctrl.data() + m * kTxCtrlBytes;
        std::memset(ctrl, 0, kTxCtrlBytes);
        h.msg_control = ctrl;
        h.msg_controllen = kTxCtrlBytes;
        cmsghdr* c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const auto seg = static_cast<uint16_t>(first.len);
        std::memcpy(CMSG_DATA(c), &seg, sizeof(seg));
      }
      i = j;
    }
    tx_msg_next = 0;
  }

  // Messages left unsent when a round ends (a full socket buffer) must not
  // point into the application's memory any more: once progress() returns it
  // may reuse a buffer whose request completed (the packet may be a
  // retransmission). Copy their payloads into the slots; rare.
  void materialize_pending() {
    for (size_t m = tx_msg_next; m < tx_msg_count; ++m) {
      msghdr& h = tx_msgs[m].msg_hdr;
      iovec* out = h.msg_iov;  // rewritten in place: never more iovecs than before
      size_t n = 0;
      for (uint32_t k = 0; k < tx_msg_segs[m]; ++k) {
        const uint32_t slot = tx_order[tx_msg_first[m] + k];
        TxSlot& s = tx_slots[slot];
        uint8_t* buf = slot_buf(slot);
        if (s.payload != nullptr) {
          const size_t plen = s.len - s.hlen - kIcrc;
          std::memcpy(buf + s.hlen, s.payload, plen);
          std::memcpy(buf + s.hlen + plen, s.trailer, kIcrc);
          s.payload = nullptr;
          ++io.tx_materialized;
        }
        out[n++] = {buf, s.len};
      }
      h.msg_iovlen = n;
    }
  }

  // Sends built messages; false if a socket buffer was full (the rest waits).
  bool flush() {
    bool refused = false;  // the last call reported a stale ICMP error
    while (tx_msg_next < tx_msg_count) {
      const uint16_t sock = tx_msg_sock[tx_msg_next];
      size_t end = tx_msg_next + 1;
      while (end < tx_msg_count && tx_msg_sock[end] == sock) ++end;
      if (fault_eagain_every != 0 && ++fault_calls % fault_eagain_every == 0) {
        ++io.tx_eagain;  // test hook: a full socket buffer (loopback never fills one)
        return false;
      }
      const int r = sendmmsg(sock_fd(sock), &tx_msgs[tx_msg_next],
                             static_cast<unsigned>(end - tx_msg_next), MSG_DONTWAIT);
      ++io.tx_syscalls;
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
          ++io.tx_eagain;
          return false;
        }
        if (errno == EINTR) continue;
        // A connected socket reports an ICMP error (e.g. a port unreachable
        // for an earlier datagram) once, on a later send that itself did not
        // go out: try that message again, once.
        if (errno == ECONNREFUSED && !refused) {
          refused = true;
          continue;
        }
        // The first message failed: drop it (the engine retransmits). A GSO
        // message the device cannot segment turns GSO off for good.
        if (tx_msg_segs[tx_msg_next] > 1 &&
            (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP))
          gso = false;
        io.tx_errors += tx_msg_segs[tx_msg_next];
        ++tx_msg_next;
        refused = false;
        continue;
      }
      for (int k = 0; k < r; ++k) {
        io.tx_datagrams += tx_msg_segs[tx_msg_next + k];
        if (tx_msg_segs[tx_msg_next + k] > 1) ++io.tx_gso_msgs;
      }
      tx_msg_next += static_cast<size_t>(r);
      refused = false;
    }
    tx_count = 0;
    tx_msg_count = 0;
    tx_msg_next = 0;
    return true;
  }

  // Drains the engine into free slots, sending each full batch. Called after
  // every input, or every GRO buffer (see receive), so ACKs are not
  // coalesced across a whole receive batch. Slots that are filled but not
  // full wait for end_round().
  size_t pump_tx(TimeNs now) {
    size_t taken = 0;
    for (;;) {
      if (tx_msg_count != 0 && !flush()) return taken;  // a socket buffer is full
      const size_t before = tx_count;
      fill(now);
      taken += tx_count - before;
      if (tx_count < tx_cap) return taken;
      build_messages();
    }
  }

  void end_round() {
    if (tx_count != 0 && tx_msg_count == 0) build_messages();
    if (tx_msg_count != 0 && !flush()) materialize_pending();
  }

  void remember(const PeerAddr& p) {
    for (const PeerAddr& r : recent)
      if (r == p) return;
    recent[recent_next] = p;
    recent_next = (recent_next + 1) % (sizeof(recent) / sizeof(recent[0]));
  }

  bool drain_events() {
    bool any = false;
    Event ev;
    while (eng->poll_event(ev)) {
      any = true;
      ConnInfo& ci = conns[ev.conn.v];
      if (ev.peer.len != 0) ci.peer = ev.peer;
      ci.status = ev.status;
      switch (ev.kind) {
        case EventKind::kConnected:
          ci.state = ConnState::kEstablished;
          remember(ci.peer);
          break;
        case EventKind::kAccepted:
          ci.state = ConnState::kEstablished;
          remember(ci.peer);
          accepted.push_back(ev.conn);
          break;
        case EventKind::kConnectFailed:
        case EventKind::kError: ci.state = ConnState::kError; break;
        case EventKind::kClosed: ci.state = ConnState::kClosed; break;
      }
    }
    return any;
  }

  void arm_timer(TimeNs now) {
    TimeNs next = eng->next_timeout();
    if (tx_msg_count != 0) next = std::min(next, now + 50 * kMicrosecond);  // retry a full socket
    const uint64_t want = next == TimeNs::never() ? 0 : std::max<uint64_t>(next.ns, 1);
    if (want == armed_ns) return;
    // An armed deadline still ahead and no later than the wanted one stays:
    // an early wake-up is harmless (progress() re-arms), and the deadline
    // moves later on most rounds, which would otherwise cost a syscall each.
    if (armed_ns > now.ns && (want == 0 || want > armed_ns)) return;
    armed_ns = want;
    itimerspec its{};
    if (want != 0) {
      its.it_value.tv_sec = static_cast<time_t>(want / kSecond);
      its.it_value.tv_nsec = static_cast<long>(want % kSecond);
    }
    (void)timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, nullptr);
  }

  size_t progress_locked() {
    if (closed) return 0;
    TimeNs now = clock_now();
    size_t moved = pump_tx(now);  // work posted since the last round
    moved += receive(now);
    now = clock_now();
    if (eng->next_timeout() <= now) eng->handle_timeout(now);
    moved += pump_tx(now);
    end_round();
    if (drain_events()) moved += 1;
    if (fd_exported.load(std::memory_order_relaxed)) arm_timer(now);
    return moved;
  }

  // Blocks on the epoll fd (non-threaded mode).
  void block(std::chrono::nanoseconds timeout) {
    if (timeout.count() <= 0) return;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    epoll_event evs[4];
    arm_timer(clock_now());
    const int n = epoll_wait(epfd, evs, 4, static_cast<int>(std::clamp<int64_t>(ms, 0, 1000)));
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.fd == timer_fd || evs[i].data.fd == wake_fd) {
        uint64_t v;
        (void)!::read(evs[i].data.fd, &v, sizeof(v));
        if (evs[i].data.fd == timer_fd) armed_ns = 0;
      }
    }
  }

  // Runs until pred() (checked under the lock) or the deadline.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::steady_clock::time_point deadline) {
    if (threaded.load(std::memory_order_acquire)) {
      std::unique_lock<std::mutex> lk(mu);
      for (;;) {
        if (pred()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return false;
        cv.wait_for(
            lk, std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)));
      }
    }
    for (;;) {
      const size_t moved = progress_locked();
      if (pred()) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (moved == 0)
        block(std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(1)) +
              std::chrono::microseconds(999));
    }
  }

  void thread_main() {
    uint32_t idle = 0;
    while (running.load(std::memory_order_acquire)) {
      size_t moved;
      {
        std::lock_guard<std::mutex> lk(mu);
        moved = progress_locked();
      }
      if (moved != 0) {
        idle = 0;
        cv.notify_all();
        continue;
      }
      if (++idle < 20000) {
        std::this_thread::yield();
        continue;
      }
      // Long idle: sleep on the epoll fd (datagram, timer, or a post wakes us).
      {
        std::lock_guard<std::mutex> lk(mu);
        arm_timer(clock_now());
      }
      sleeping.store(true, std::memory_order_release);
      epoll_event evs[4];
      const int n = epoll_wait(epfd, evs, 4, 1);
      sleeping.store(false, std::memory_order_release);
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.fd == timer_fd || evs[i].data.fd == wake_fd) {
          uint64_t v;
          (void)!::read(evs[i].data.fd, &v, sizeof(v));
          if (evs[i].data.fd == timer_fd) {
            std::lock_guard<std::mutex> lk(mu);
            armed_ns = 0;
          }
        }
      }
      if (n > 0) idle = 0;
    }
  }

  Error check_post(Status s, ConnId conn, const char* what) {
    if (s == Status::kOk) {
      wake_thread();
      return {};
    }
    return make_error(s, std::string(what) + " failed", conn);
  }
};

// --- UdpEndpoint ---

UdpEndpoint::UdpEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UdpEndpoint::~UdpEndpoint() {
  if (impl_) close(true);
}

std::unique_ptr<UdpEndpoint> UdpEndpoint::open(const std::string& address, const Options& opts,
                                               Error& err) {
  // Port 0 asks the kernel for a receive port; the entropy block after it may
  // be taken, so try a few.
  PeerAddr want;
  const bool any_port = parse_address(address, kDefaultPort, want) && address_port(want) == 0 &&
                        opts.entropy_base == 0;
  for (int attempt = 0;; ++attempt) {
    err = Error{};
    auto impl = std::make_unique<Impl>();
    impl->opts = opts;
    if (impl->open(address, err))
      return std::unique_ptr<UdpEndpoint>(new UdpEndpoint(std::move(impl)));
    if (err.status == Status::kOk) err.status = Status::kInvalidArgument;
    if (!any_port || err.status != Status::kResourceExhausted || attempt >= 16) return nullptr;
  }
}

std::string UdpEndpoint::local_address() const { return format_address(impl_->local); }
uint16_t UdpEndpoint::port() const { return address_port(impl_->local); }
uint16_t UdpEndpoint::entropy_min() const { return impl_->cfg.entropy_min; }
uint16_t UdpEndpoint::entropy_max() const { return impl_->cfg.entropy_max; }
bool UdpEndpoint::gso_enabled() const { return impl_->gso; }
bool UdpEndpoint::gro_enabled() const { return impl_->gro; }
int UdpEndpoint::fd() const {
  impl_->fd_exported.store(true, std::memory_order_relaxed);
  return impl_->epfd;
}

size_t UdpEndpoint::progress() {
  auto lk = impl_->guard();
  return impl_->progress_locked();
}

void UdpEndpoint::wait(std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool first = true;
  (void)impl_->run_until(
      [&] {
        const bool r = !first;
        first = false;
        return r;
      },
      deadline);
}

void UdpEndpoint::start_progress_thread() {
  if (impl_->running.load() || impl_->closed) return;
  impl_->threaded.store(true, std::memory_order_release);
  impl_->running.store(true, std::memory_order_release);
  impl_->thread = std::thread([this] { impl_->thread_main(); });
}

void UdpEndpoint::stop_progress_thread() {
  if (!impl_->running.load()) return;
  impl_->running.store(false, std::memory_order_release);
  const uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof(one));
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->threaded.store(false, std::memory_order_release);
}

Error UdpEndpoint::register_memory(void* addr, size_t length, uint32_t access, MemoryRegion& out) {
  auto lk = impl_->guard();
  const Status s = impl_->eng->register_memory(addr, length, access, out);
  if (s == Status::kOk) return {};
  return impl_->make_error(s, "register_memory(" + std::to_string(length) + " bytes) failed",
                           ConnId{});
}

Error UdpEndpoint::deregister_memory(uint32_t lkey) {
  auto lk = impl_->guard();
  const Status s = impl_->eng->deregister_memory(lkey);
  if (s == Status::kOk) return {};
  return impl_->make_error(s, "deregister_memory(lkey " + std::to_string(lkey) + ") failed",
                           ConnId{});
}

Error UdpEndpoint::connect(const std::string& address, std::chrono::milliseconds timeout,
                           ConnId& out) {
  out = ConnId{};
  PeerAddr peer;
  std::string why;
  if (!parse_address(address, kDefaultPort, peer, &why)) {
    Error e;
    e.status = Status::kInvalidArgument;
    e.peer = address;
    e.message = "connect to " + address + ": " + why;
    return e;
  }
  if (impl_->family == AF_INET && !address_is_v4(peer)) {
    Error e;
    e.status = Status::kInvalidArgument;
    e.peer = format_address(peer);
    e.message = "connect to " + e.peer + ": an IPv4 endpoint (" + local_address() +
                ") cannot reach an IPv6 peer";
    return e;
  }
  ConnId id;
  {
    auto lk = impl_->guard();
    const Status s = impl_->eng->connect(peer, clock_now(), id);
    if (s != Status::kOk) {
      Error e = impl_->make_error(s, "connect to " + format_address(peer) + " failed", ConnId{});
      e.peer = format_address(peer);
      return e;
    }
    ConnInfo& ci = impl_->conns[id.v];
    ci.state = ConnState::kConnecting;
    ci.peer = peer;
  }
  impl_->wake_thread();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool done = impl_->run_until(
      [&] { return impl_->conns[id.v].state != ConnState::kConnecting; }, deadline);
  auto lk = impl_->guard();
  const ConnInfo ci = impl_->conns[id.v];
  if (done && ci.state == ConnState::kEstablished) {
    out = id;
    return {};
  }
  if (!done) {
    impl_->eng->close(id, clock_now());
    impl_->conns[id.v].state = ConnState::kError;
    impl_->conns[id.v].status = Status::kConnectTimeout;
    return impl_->make_error(Status::kConnectTimeout,
                             "connect to " + format_address(peer) + " timed out after " +
                                 std::to_string(timeout.count()) + " ms",
                             id);
  }
  return impl_->make_error(ci.status == Status::kOk ? Status::kConnectTimeout : ci.status,
                           "connect to " + format_address(peer) + " failed", id);
}

bool UdpEndpoint::try_accept(ConnId& out) {
  auto lk = impl_->guard();
  if (impl_->accepted.empty()) return false;
  out = impl_->accepted.front();
  impl_->accepted.pop_front();
  return true;
}

Error UdpEndpoint::accept(std::chrono::milliseconds timeout, ConnId& out) {
  out = ConnId{};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!impl_->run_until([&] { return !impl_->accepted.empty(); }, deadline)) {
    Error e;
    e.status = Status::kConnectTimeout;
    e.message = "accept on " + local_address() + ": no connection within " +
                std::to_string(timeout.count()) + " ms";
    return e;
  }
  return try_accept(out) ? Error{} : Error{Status::kConnectTimeout, "accept: raced", "", 0};
}

void UdpEndpoint::close(ConnId conn) {
  auto lk = impl_->guard();
  impl_->eng->close(conn, clock_now());
  impl_->wake_thread();
}

ConnState UdpEndpoint::state(ConnId conn) const {
  auto lk = impl_->guard();
  auto it = impl_->conns.find(conn.v);
  return it == impl_->conns.end() ? ConnState::kUnknown : it->second.state;
}

std::string UdpEndpoint::peer_address(ConnId conn) const {
  auto lk = impl_->guard();
  auto it = impl_->conns.find(conn.v);
  if (it != impl_->conns.end()) return format_address(it->second.peer);
  const PeerAddr p = impl_->eng->peer_of(conn);
  return p.len != 0 ? format_address(p) : std::string();
}

Error UdpEndpoint::post_send(ConnId conn, const SendWr& wr) {
  auto lk = impl_->guard();
  return impl_->check_post(impl_->eng->post_send(conn, wr), conn, "post_send");
}

Error UdpEndpoint::post_recv(ConnId conn, const RecvWr& wr) {
  auto lk = impl_->guard();
  return impl_->check_post(impl_->eng->post_recv(conn, wr), conn, "post_recv");
}

namespace {
SendWr make_wr(uint64_t wr_id, WrOpcode op, const void* local, uint32_t len, uint32_t lkey,
               uint64_t raddr, uint64_t rkey, uint32_t imm) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.op = op;
  wr.local_addr = reinterpret_cast<uint64_t>(local);
  wr.length = len;
  wr.lkey = lkey;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  wr.imm = imm;
  return wr;
}
}  // namespace

Error UdpEndpoint::write(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                         uint32_t lkey, uint64_t remote_addr, uint64_t rkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kWrite, local, len, lkey, remote_addr, rkey, 0));
}

Error UdpEndpoint::write_imm(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                             uint32_t lkey, uint64_t remote_addr, uint64_t rkey, uint32_t imm) {
  return post_send(conn,
                   make_wr(wr_id, WrOpcode::kWriteImm, local, len, lkey, remote_addr, rkey, imm));
}

Error UdpEndpoint::read(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey,
                        uint64_t remote_addr, uint64_t rkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kRead, local, len, lkey, remote_addr, rkey, 0));
}

Error UdpEndpoint::send(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                        uint32_t lkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kSend, local, len, lkey, 0, 0, 0));
}

Error UdpEndpoint::recv(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.addr = reinterpret_cast<uint64_t>(local);
  wr.length = len;
  wr.lkey = lkey;
  return post_recv(conn, wr);
}

bool UdpEndpoint::poll_completion(Completion& out) {
  auto lk = impl_->guard();
  return impl_->eng->poll_completion(out);
}

size_t UdpEndpoint::poll_completions(Completion* out, size_t max) {
  auto lk = impl_->guard();
  size_t n = 0;
  while (n < max && impl_->eng->poll_completion(out[n])) ++n;
  return n;
}

bool UdpEndpoint::wait_completion(Completion& out, std::chrono::nanoseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  return impl_->run_until([&] { return impl_->eng->poll_completion(out); }, deadline);
}

Error UdpEndpoint::completion_error(const Completion& c) const {
  if (c.status == Status::kOk) return {};
  static constexpr const char* kOps[] = {"WRITE", "WRITE_IMM", "SEND",          "SEND_IMM",
                                         "READ",  "RECV",      "RECV_WRITE_IMM"};
  const auto op = static_cast<size_t>(c.op);
  auto lk = impl_->guard();
  return impl_->make_error(
      c.status,
      std::string(op < 7 ? kOps[op] : "?") + " wr_id " + std::to_string(c.wr_id) + " failed",
      c.conn);
}

EndpointStats UdpEndpoint::endpoint_stats() const {
  auto lk = impl_->guard();
  return impl_->eng->endpoint_stats();
}

bool UdpEndpoint::conn_stats(ConnId conn, ConnStats& out) const {
  auto lk = impl_->guard();
  const ConnStats* s = impl_->eng->conn_stats(conn);
  if (s == nullptr) return false;
  out = *s;
  return true;
}

std::vector<PathStats> UdpEndpoint::path_stats(ConnId conn) const {
  auto lk = impl_->guard();
  std::vector<PathStats> v(impl_->eng->path_count(conn));
  for (size_t i = 0; i < v.size(); ++i) (void)impl_->eng->path_stats(conn, i, v[i]);
  return v;
}

IoStats UdpEndpoint::io_stats() const {
  auto lk = impl_->guard();
  return impl_->io;
}

void UdpEndpoint::close(bool graceful) {
  if (impl_->closed) return;
  stop_progress_thread();
  if (graceful && impl_->eng) {
    std::vector<ConnId> open;
    const TimeNs now = clock_now();
    for (auto& [id, ci] : impl_->conns) {
      if (ci.state == ConnState::kEstablished || ci.state == ConnState::kConnecting) {
        impl_->eng->close(ConnId{id}, now);
        open.push_back(ConnId{id});
      }
    }
    if (!open.empty()) {
      const auto deadline = std::chrono::steady_clock::now() + impl_->opts.linger;
      (void)impl_->run_until(
          [&] {
            for (ConnId c : open) {
              const ConnState s = impl_->conns[c.v].state;
              if (s == ConnState::kEstablished || s == ConnState::kConnecting) return false;
            }
            return true;
          },
          deadline);
    }
  }
  impl_->closed = true;
  impl_->close_fds();
}

}  // namespace metaroce::udp
