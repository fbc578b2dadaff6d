// Opening a UdpEndpoint: the receive socket, one send socket per entropy
// value, GSO/GRO detection, the epoll/timerfd/eventfd trio, the engine and the
// preallocated receive and transmit batches; and closing the descriptors.
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "address.hpp"
#include "impl.hpp"

#if METAROCE_HAVE_URING
#include <liburing.h>
#endif

namespace metaroce::udp {
namespace {

bool env_disabled(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 ||
                          std::strcmp(v, "false") == 0 || std::strcmp(v, "no") == 0);
}

std::string errno_text(int e) { return std::string(std::strerror(e)); }

// Options::batch's ceiling: UIO_MAXIOV, the most messages one sendmmsg or
// recvmmsg call takes.
constexpr uint32_t kMaxBatch = 1024;

// What is wrong with the caller's options, empty if nothing; judged before
// any socket opens.
std::string options_error(const Options& opts) {
  // The entropy range is the driver's to assign (open() takes it from the
  // entropy block), so the caller's is not judged.
  EndpointConfig judged = opts.engine;
  judged.entropy_min = 0;
  judged.entropy_max = UINT16_MAX;
  if (std::string bad = config_error(judged); !bad.empty()) return "Options::engine: " + bad;
  // A DSCP is 6 bits: the receive path compares the TOS byte's upper six
  // with this, so 64..255 (a TOS byte given for a DSCP, say) matched no
  // packet and turned trimming's fast NAK off without a word (TRIM-2).
  if (opts.trimmed_dscp > kMaxDscp)
    return "Options::trimmed_dscp " + std::to_string(opts.trimmed_dscp) +
           " is out of range 0..63 (a DSCP, not a TOS byte: TRIM-1)";
  // ENC-6: neither class may take the TRIMMED code point (config_error has
  // checked that each is 0-63), or every packet of that class would arrive
  // as a cut one (TRIM-2).
  const EndpointConfig& cfg = opts.engine;
  if (cfg.control_dscp == opts.trimmed_dscp || cfg.data_dscp == opts.trimmed_dscp)
    return "a DSCP is 0-63 and not the TRIMMED one, " + std::to_string(opts.trimmed_dscp) +
           " (control_dscp " + std::to_string(cfg.control_dscp) + ", data_dscp " +
           std::to_string(cfg.data_dscp) + ")";
  // The driver's own options, judged as the engine's are: a socket buffer of
  // 0 or less reached the kernel as its smallest (2,304 bytes to receive:
  // most datagrams of a burst lost), and a batch out of range was clamped.
  if (opts.rcvbuf_bytes <= 0)
    return "Options::rcvbuf_bytes " + std::to_string(opts.rcvbuf_bytes) + " is not positive";
  if (opts.sndbuf_bytes <= 0)
    return "Options::sndbuf_bytes " + std::to_string(opts.sndbuf_bytes) + " is not positive";
  if (opts.batch < 1 || opts.batch > kMaxBatch)
    return "Options::batch " + std::to_string(opts.batch) + " is out of range 1.." +
           std::to_string(kMaxBatch);
  // A negative linger was taken as none: close(true) skipped the DISCONNECT
  // handshakes it was asked for. 0 is the way to ask for that.
  if (opts.linger.count() < 0)
    return "Options::linger " + std::to_string(opts.linger.count()) +
           " ms is negative (0: close without waiting for the peers)";
  return {};
}

// A descriptor limit met while opening (EMFILE): what the endpoint holds
// and the limit. The kernel's "Too many open files" named one send socket,
// and neither the option that sizes the block nor the limit to raise.
std::string fd_limit_text(uint16_t ecount) {
  rlimit lim{};
  const std::string soft = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                               ? std::to_string(lim.rlim_cur)
                               : std::string("unknown");
  return "the endpoint holds Options::entropy_count (" + std::to_string(ecount) +
         ") send sockets and 5 more descriptors (its receive socket, an epoll, a timer, an "
         "eventfd, an io_uring), and this process's RLIMIT_NOFILE (soft limit " +
         soft + ") leaves fewer free; lower Options::entropy_count or raise the limit (ulimit -n)";
}

}  // namespace

void UdpEndpoint::Impl::release_ring() {
#if METAROCE_HAVE_URING
  if (ring != nullptr) {
    io_uring_queue_exit(ring);
    delete ring;
    ring = nullptr;
  }
#endif
}

void UdpEndpoint::Impl::close_fds() {
  release_ring();
  for (int fd : tx_fds)
    if (fd >= 0) ::close(fd);
  tx_fds.clear();
  for (int* fd : {&rx_fd, &epfd, &timer_fd, &wake_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

bool UdpEndpoint::Impl::setup_socket(int fd, bool is_rx, Error& err, const std::string& what) {
  const int one = 1;
  const int tos = tos_byte(cfg.data_dscp);  // unless a message says otherwise
  if (family == AF_INET) {
    if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) != 0) {
      err.status = Status::kInvalidArgument;
      err.message = what + ": setsockopt(IP_TOS): " + errno_text(errno);
      return false;
    }
    (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  } else {
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos)) != 0) {
      err.status = Status::kInvalidArgument;
      err.message = what + ": setsockopt(IPV6_TCLASS): " + errno_text(errno);
      return false;
    }
    (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));  // v4-mapped peers
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  }
  if (is_rx && wild) {
    // Each datagram's destination address, to answer from it (Impl::wild).
    // An IPv4 datagram on a dual-stack socket reports it as v4-mapped.
    if (family == AF_INET)
      (void)setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    else
      (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
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

int UdpEndpoint::Impl::open_bound(const PeerAddr& addr, bool is_rx, Error& err) {
  const std::string what =
      std::string(is_rx ? "receive" : "send") + " socket " + format_address(addr);
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    socket_errno = errno;
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
  if (!to_sockaddr(addr, family, ss, len, scope) ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    bind_errno = e;
    // (No status names a port in use better: kResourceExhausted, which
    // UdpEndpoint::open also reads as "try another port" for port 0. open()
    // says which port of which block, and what to do.)
    err.status = e == EADDRINUSE ? Status::kResourceExhausted : Status::kInvalidArgument;
    // (No peer: open() has none. This was the endpoint's own address, which
    // an application that logs Error::peer then named as the remote side;
    // the message names the address.)
    err.message = what + ": bind(): " + errno_text(e);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool UdpEndpoint::Impl::open(const std::string& address, Error& err) {
  // The status before the words, which open() reports all the same where
  // memory for them runs short.
  if (const AddressFault f = address_fault(address, kDefaultPort, local, AF_UNSPEC, &scope);
      f != AddressFault::kNone) {
    err = address_fault_error("open", address, f, AF_UNSPEC, false);
    return false;
  }
  family = address_is_v4(local) ? AF_INET : AF_INET6;
  {
    const bool v4 = family == AF_INET;
    wild = std::all_of(local.bytes + (v4 ? 12 : 0), local.bytes + 16,
                       [](uint8_t b) { return b == 0; });
  }
  cfg = opts.engine;
  if (std::string bad = options_error(opts); !bad.empty()) {
    err.status = Status::kInvalidArgument;
    err.message = "open " + address + ": " + bad;
    return false;
  }
  batch = opts.batch;
  gso = opts.gso && !env_disabled("METAROCE_UDP_GSO");
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_EAGAIN"))
    fault_eagain_every = static_cast<uint32_t>(std::strtoul(f, nullptr, 10));
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_GSO"))
    fault_gso_from = static_cast<uint32_t>(std::strtoul(f, nullptr, 10));
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_GSO_EINVAL_PORT"))
    fault_gso_port = static_cast<uint16_t>(std::strtoul(f, nullptr, 10));
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_FULL_SOCKET")) {  // K:N
    char* end = nullptr;
    fault_full_sock = static_cast<uint16_t>(std::strtoul(f, &end, 10));
    if (*end == ':') fault_full_left = static_cast<uint32_t>(std::strtoul(end + 1, nullptr, 10));
  }
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_REFUSED")) {
    fault_icmp_err = ECONNREFUSED;
    fault_icmp_left = static_cast<uint32_t>(std::strtoul(f, nullptr, 10));
  }
  if (const char* f = std::getenv("METAROCE_UDP_FAULT_ICMP")) {  // E:N, E an errno number
    char* end = nullptr;
    fault_icmp_err = static_cast<int>(std::strtol(f, &end, 10));
    if (*end == ':') fault_icmp_left = static_cast<uint32_t>(std::strtoul(end + 1, nullptr, 10));
  }
  if (const char* f = std::getenv("METAROCE_UDP_RX_CTRL_BYTES"))
    rx_ctrl_len = std::min<size_t>(std::strtoul(f, nullptr, 10), kRxCtrlBytes);
  gro = opts.gro && !env_disabled("METAROCE_UDP_GRO");

  rx_fd = open_bound(local, true, err);
  if (rx_fd < 0) {
    if (socket_errno == EMFILE)
      err.message =
          "open " + address + ": " + err.message + ": " + fd_limit_text(opts.entropy_count);
    if (bind_errno == EADDRINUSE)
      err.message = "open " + address + ": " + err.message + ": another socket holds port " +
                    std::to_string(address_port(local)) +
                    " (another endpoint's receive port, or a port of its entropy block: an "
                    "endpoint also holds the entropy_count ports after its own); choose another "
                    "port, or port 0 for one the kernel picks";
    return false;
  }
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
  local_text = format_address(local);
  ecount = opts.entropy_count;
  const uint32_t base =
      opts.entropy_base != 0 ? opts.entropy_base : uint32_t{address_port(local)} + 1;
  if (ecount < std::max<uint16_t>(1, cfg.num_paths) || base + ecount - 1 > 65535 || base == 0) {
    block_past_end = base + ecount - 1 > 65535 && opts.entropy_base == 0;
    err.status = Status::kInvalidArgument;
    err.message = "open " + address + ": entropy block " + std::to_string(base) + "+" +
                  std::to_string(ecount) +
                  " is invalid (needs at least num_paths=" + std::to_string(cfg.num_paths) +
                  " ports, the first at least 1 and the last, base + count - 1, at most 65535)";
    return false;
  }
  // The block's ports only send; each is bound by its own socket, and the
  // receive port is the receive socket's. One inside the block failed that
  // socket's bind with "port P of its entropy block is in use", P the
  // endpoint's own receive port, and advice to choose another receive port.
  if (const uint32_t rport = address_port(local); rport >= base && rport <= base + ecount - 1) {
    err.status = Status::kInvalidArgument;
    err.message = "open " + address + ": Options::entropy_base " + std::to_string(base) +
                  " and entropy_count " + std::to_string(ecount) + " put the receive port " +
                  std::to_string(rport) + " in the entropy block (" + std::to_string(base) + "-" +
                  std::to_string(base + ecount - 1) +
                  "), whose ports only send; start the block past the receive port (entropy_base "
                  "0: the port after it)";
    return false;
  }
  ebase = static_cast<uint16_t>(base);
  cfg.entropy_min = ebase;
  // Requests leave from the entropy ports (CONN-2), which only send: they
  // name this one, where the answers must come (spec section 3.12).
  cfg.reply_port = address_port(local);
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
    if (tx_fds[i] < 0) {
      if (socket_errno == EMFILE)
        err.message = "open " + address + ": " + err.message + ": " + fd_limit_text(ecount);
      if (bind_errno == EADDRINUSE) {
        const std::string block = std::to_string(ebase) + "-" + std::to_string(cfg.entropy_max);
        err.message =
            "open " + address + ": port " + std::to_string(port) + " of its entropy block " +
            block + " is in use (" + err.message + "): the endpoint sends from " +
            count_text(ecount, "port", "ports") + " (Options::entropy_count), " +
            (opts.entropy_base != 0
                 ? "from Options::entropy_base " + std::to_string(ebase)
                 : "the ones after its receive port " + std::to_string(address_port(local))) +
            ", and needs every one free; choose another receive port (or port 0, for one the "
            "kernel picks with a free block after it) or set Options::entropy_base to the first "
            "of " +
            count_text(ecount, "free port", "free ports");
      }
      return false;
    }
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
    const int e = errno;
    err.status = Status::kResourceExhausted;
    err.message = "open " + address + ": epoll/timerfd/eventfd: " + errno_text(e);
    if (e == EMFILE) err.message += ": " + fd_limit_text(ecount);
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
  rx_per_call = rx_count_for(rx_slot);  // until a call shows the datagrams' size
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
    h.msg_controllen = rx_ctrl_len;
    h.msg_flags = 0;
  }
  // Transmit slots: many per socket of a connection's paths, so that each
  // path's packets of one round form long GSO runs (the engine sprays
  // consecutive packets over the paths, one socket each). 32 per recvmmsg
  // batch: with 8 (256 slots) a loopback WRITE over 8 paths made runs of
  // 12.2 segments and one submission per 200 datagrams; with 32, 13.6 and
  // 400, and moved 5 % more (BENCHMARKS.md section 3, stop 22).
  tx_head_size =
      (kTxLead +
       std::max(eng->transmit_buffer_bytes(true), wire::kMaxDataHeaderSize + kGatherMin + kIcrc) +
       63) &
      ~size_t{63};
  tx_whole_size = wire::kMaxDataHeaderSize + cfg.mtu + kIcrc;
  tx_cap = std::clamp<size_t>(size_t{batch} * 32, 64, 4096);
  tx_head.assign(tx_head_size * tx_cap, 0);
  tx_whole = std::make_unique_for_overwrite<uint8_t[]>(tx_whole_size * tx_cap);  // see impl.hpp
  tx_slots.assign(tx_cap, TxSlot{});
  tx_order.assign(tx_cap, 0);
  tx_peer.assign(ecount, PeerAddr{});
  tx_peer_tried.assign(ecount, 0);
  tx_src.assign(ecount, LocalIp{});
  recent_src.assign(wild ? std::max<size_t>(64, batch) : 0, {});
  ended.reserve(kEndedKept + 1);  // end_conn and take_accepted push one before trimming
  tx_bucket.assign(2 * size_t{ecount} + 1, 0);
  tx_iov.assign(3 * tx_cap, iovec{});
  tx_msgs.assign(tx_cap, mmsghdr{});
  tx_msg_sock.assign(tx_cap, 0);
  tx_msg_segs.assign(tx_cap, 0);
  tx_msg_first.assign(tx_cap + 1, 0);
  tx_addr.assign(tx_cap, sockaddr_storage{});
  tx_ctrl.assign(kTxCtrlBytes * tx_cap, 0);
  tx_msg_res.assign(tx_cap, 0);
  tx_sock_held.assign(size_t{ecount} + 1, 0);
  tx_msg_queued.assign(tx_cap, 0);
  setup_uring();
  return true;
}

// Options::io_uring: a ring with an entry for every message a round can
// build. Where io_uring is missing or forbidden (an old kernel,
// kernel.io_uring_disabled, a container's seccomp filter) sendmmsg does it.
// The send sockets are not registered with the ring (IOSQE_FIXED_FILE),
// though that spares each message a file look-up (fget/fput, 0.7 % of a
// loopback sender's samples): the ring's table keeps them open until its
// teardown, which the kernel runs later, so a killed server restarted on
// its port found its entropy block still bound (tests/perf peer-loss).
void UdpEndpoint::Impl::setup_uring() {
#if METAROCE_HAVE_URING
  if (!opts.io_uring || env_disabled("METAROCE_UDP_URING")) return;
  auto* r = new ::io_uring{};
  if (io_uring_queue_init(static_cast<unsigned>(tx_cap), r, 0) != 0) {
    delete r;
    return;
  }
  ring = r;
  // A kernel with io_uring but without its sendmsg (5.1, 5.2, or a sandbox
  // that offers only some operations) would fail every message.
  io_uring_probe* probe = io_uring_get_probe_ring(ring);
  const bool sendmsg_ok = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_SENDMSG);
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!sendmsg_ok) release_ring();
#endif
}

}  // namespace metaroce::udp
