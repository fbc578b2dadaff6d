// Raw UDP baselines on loopback for bench/loopback (no MetaRoCE involved).
//
//   loopback-udp-blast blast    [--seconds S] [--seg 4096] [--gso-segs 15] [--batch 32] [--no-gso]
//                               [--no-gro] [--header N] [--ring]
//   loopback-udp-blast pingpong [--seconds S] [--size 8] [--busy]
//
// blast: a sender thread sends S seconds of seg-byte datagrams with sendmmsg
// (batch messages per call, each a UDP_SEGMENT super-datagram of gso-segs
// segments); a receiver thread drains them with recvmmsg + UDP_GRO. Prints one
// JSON object with the goodput the receiver saw (payload bytes / second) and
// the sender thread's CPU time per GB of payload.
// --header N sends each datagram as MetaRoCE's UDP driver does: an N-byte
// header and the seg-byte payload as two iovecs, the payloads read from a
// 4 MiB ring (metaroce-perf's 64 slots of 64 KiB). The kernel's copy of such
// a gathered message costs more per byte than one iovec; this measures it
// without MetaRoCE (BENCHMARKS.md, section 3). --ring alone keeps one iovec
// a message but reads it from that ring: the control that tells the cost of
// the iovecs from the cost of the larger source.
// pingpong: one thread echoes, the other sends size-byte datagrams one at a
// time and waits for the echo; prints round-trip p50/p99/p999 in microseconds.
// Both threads sleep in recv; --busy makes both spin on non-blocking reads
// instead, the like of metaroce-perf --busy (a sleeping receiver's round trip
// is mostly two wake-ups, which a busy-polled transport never pays).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace {
using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  double seconds = 5;
  uint32_t seg = 4096;
  uint32_t gso_segs = 15;  // 15 x 4096 = 61440 <= 65507
  uint32_t batch = 32;
  uint32_t size = 8;
  uint32_t header = 0;  // > 0: header + payload iovecs per datagram
  bool ring = false;    // payloads from the 4 MiB ring (implied by --header)
  bool busy = false;    // pingpong: spin on MSG_DONTWAIT reads, never sleep
  bool gso = true, gro = true;
};

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

int udp_socket(sockaddr_in& addr) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) die("socket");
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) die("bind");
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) die("getsockname");
  return fd;
}

int blast(const Args& a) {
  sockaddr_in raddr{}, saddr{};
  const int rfd = udp_socket(raddr);
  const int sfd = udp_socket(saddr);
  int buf = 16 << 20;
  (void)setsockopt(rfd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf));
  (void)setsockopt(rfd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  buf = 4 << 20;
  (void)setsockopt(sfd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  bool gro = a.gro;
  int one = 1;
  if (gro && setsockopt(rfd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) != 0) gro = false;
  timeval tv{0, 200000};
  (void)setsockopt(rfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(sfd, reinterpret_cast<sockaddr*>(&raddr), sizeof(raddr)) != 0) die("connect");
  bool gso = a.gso;
  const uint32_t per_msg = gso ? std::max<uint32_t>(1, a.gso_segs) : 1;
  const uint32_t dgram = a.header + a.seg;
  if (gso) {
    int sz = static_cast<int>(dgram);
    if (setsockopt(sfd, IPPROTO_UDP, UDP_SEGMENT, &sz, sizeof(sz)) != 0) gso = false;
  }
  const uint32_t nmsg = gso ? per_msg : 1;

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rx_bytes{0}, rx_dgrams{0};
  Clock::time_point first_rx{}, last_rx{};
  std::thread rx([&] {
    constexpr uint32_t kBatch = 32, kBuf = 65536;
    std::vector<char> mem(size_t{kBatch} * kBuf);
    mmsghdr msgs[kBatch];
    iovec iov[kBatch];
    alignas(cmsghdr) char ctrl[kBatch][64];
    uint64_t bytes = 0, dgrams = 0;
    bool started = false;
    while (true) {
      for (uint32_t i = 0; i < kBatch; ++i) {
        iov[i] = {mem.data() + size_t{i} * kBuf, kBuf};
        msgs[i].msg_hdr = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_control = ctrl[i];
        msgs[i].msg_hdr.msg_controllen = sizeof(ctrl[i]);
      }
      const int n = recvmmsg(rfd, msgs, kBatch, MSG_WAITFORONE, nullptr);
      if (n <= 0) {
        if (stop.load()) break;
        continue;
      }
      if (!started) {
        first_rx = Clock::now();
        started = true;
      }
      for (int i = 0; i < n; ++i) {
        const uint32_t len = msgs[i].msg_len;
        bytes += len;
        uint32_t seg = len;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c != nullptr;
             c = CMSG_NXTHDR(&msgs[i].msg_hdr, c))
          if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
            int g;
            std::memcpy(&g, CMSG_DATA(c), sizeof(g));
            seg = static_cast<uint32_t>(g);
          }
        dgrams += seg != 0 ? (len + seg - 1) / seg : 1;
      }
      last_rx = Clock::now();
    }
    rx_bytes = bytes;
    rx_dgrams = dgrams;
  });

  const size_t msg_bytes = size_t{dgram} * nmsg;
  // Payload only: --header's bytes are the transport's, not the goodput's.
  const double payload_share = static_cast<double>(a.seg) / static_cast<double>(dgram);
  std::vector<mmsghdr> msgs(a.batch);
  // One iovec a message, or header + payload a datagram (--header).
  const size_t iov_per_msg = a.header > 0 ? 2 * size_t{nmsg} : 1;
  std::vector<iovec> iov(a.batch * iov_per_msg);
  constexpr size_t kSlot = 65536, kSlots = 64;
  const bool ring = a.ring || a.header > 0;
  const size_t slot_bytes = std::max(kSlot, msg_bytes);
  std::vector<char> payload(ring ? slot_bytes * kSlots : msg_bytes * a.batch, 'x');
  std::vector<char> headers(size_t{a.header} * nmsg * a.batch, 'h');
  size_t next_slot = 0;
  // From the ring, messages take its next slots each call, as a stream of
  // WRITEs reads on through the source memory.
  auto fill_from_ring = [&] {
    for (uint32_t i = 0; i < a.batch; ++i) {
      char* src = payload.data() + next_slot * slot_bytes;
      next_slot = (next_slot + 1) % kSlots;
      iovec* v = &iov[i * iov_per_msg];
      if (a.header == 0) {
        v[0] = {src, msg_bytes};
        continue;
      }
      for (uint32_t k = 0; k < nmsg; ++k) {
        v[2 * k] = {headers.data() + (size_t{i} * nmsg + k) * a.header, a.header};
        v[2 * k + 1] = {src + size_t{k} * a.seg, a.seg};
      }
    }
  };
  for (uint32_t i = 0; i < a.batch; ++i) {
    if (!ring) iov[i] = {payload.data() + i * msg_bytes, msg_bytes};
    msgs[i].msg_hdr = {};
    msgs[i].msg_hdr.msg_iov = &iov[i * iov_per_msg];
    msgs[i].msg_hdr.msg_iovlen = iov_per_msg;
  }
  uint64_t tx_bytes = 0, calls = 0, eagain = 0;
  rusage ru0{}, ru1{};
  (void)getrusage(RUSAGE_THREAD, &ru0);
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  while (Clock::now() < end) {
    if (ring) fill_from_ring();
    const int n = sendmmsg(sfd, msgs.data(), a.batch, 0);
    ++calls;
    if (n < 0) {
      if (errno == EAGAIN || errno == ENOBUFS || errno == ECONNREFUSED) {
        ++eagain;
        continue;
      }
      die("sendmmsg");
    }
    tx_bytes += uint64_t(n) * msg_bytes;
  }
  const double tx_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  (void)getrusage(RUSAGE_THREAD, &ru1);
  auto cpu_s = [](const rusage& r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  const double tx_payload_gb = static_cast<double>(tx_bytes) * payload_share / 1e9;
  stop = true;
  rx.join();
  const double rx_secs = std::chrono::duration<double>(last_rx - first_rx).count();
  const double secs = std::max(rx_secs, tx_secs * 0.5);
  std::printf(
      "{\"mode\":\"blast\",\"seg\":%u,\"header\":%u,\"ring\":%s,\"gso\":%s,\"gso_segs\":%u,\"gro\":"
      "%s,"
      "\"batch\":%u,\"seconds\":%.3f,"
      "\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"rx_bytes\":%llu,\"rx_datagrams\":%llu,\"tx_calls\":%llu,"
      "\"tx_eagain\":%llu,\"delivered\":%.4f,\"tx_cpu_s_per_gb\":%.4f}\n",
      a.seg, a.header, ring ? "true" : "false", gso ? "true" : "false", nmsg,
      gro ? "true" : "false", a.batch, secs,
      static_cast<double>(tx_bytes) * payload_share * 8 / tx_secs / 1e9,
      static_cast<double>(rx_bytes.load()) * payload_share * 8 / secs / 1e9,
      static_cast<unsigned long long>(rx_bytes.load()),
      static_cast<unsigned long long>(rx_dgrams.load()), static_cast<unsigned long long>(calls),
      static_cast<unsigned long long>(eagain),
      tx_bytes ? static_cast<double>(rx_bytes.load()) / static_cast<double>(tx_bytes) : 0.0,
      tx_payload_gb > 0 ? (cpu_s(ru1) - cpu_s(ru0)) / tx_payload_gb : 0.0);
  close(rfd);
  close(sfd);
  return 0;
}

// The echo of the datagram sent at `sent`: a blocking recv (its SO_RCVTIMEO
// of 200 ms bounds the wait), or with MSG_DONTWAIT a spin bounded the same.
bool await_echo(int fd, std::vector<char>& in, int flags, Clock::time_point sent) {
  for (;;) {
    if (recv(fd, in.data(), in.size(), flags) >= 0) return true;
    if (flags == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    if (Clock::now() - sent > std::chrono::milliseconds(200)) return false;
  }
}

int pingpong(const Args& a) {
  sockaddr_in eaddr{}, caddr{};
  const int efd = udp_socket(eaddr);
  const int cfd = udp_socket(caddr);
  timeval tv{0, 200000};
  (void)setsockopt(efd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(cfd, reinterpret_cast<sockaddr*>(&eaddr), sizeof(eaddr)) != 0) die("connect");
  std::atomic<bool> stop{false};
  const int rflags = a.busy ? MSG_DONTWAIT : 0;
  std::thread echo([&] {
    char b[65536];
    while (!stop.load(std::memory_order_relaxed)) {
      sockaddr_in from{};
      socklen_t fl = sizeof(from);
      const ssize_t n =
          recvfrom(efd, b, sizeof(b), rflags, reinterpret_cast<sockaddr*>(&from), &fl);
      if (n > 0)
        (void)sendto(efd, b, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
    }
  });
  std::vector<char> msg(std::max<uint32_t>(a.size, 1), 'p');
  std::vector<char> in(65536);
  std::vector<uint32_t> rtt;
  rtt.reserve(1 << 22);
  uint64_t lost = 0;
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
  while (Clock::now() < end && rtt.size() < rtt.capacity()) {
    const auto s = Clock::now();
    if (send(cfd, msg.data(), msg.size(), 0) < 0) die("send");
    if (!await_echo(cfd, in, rflags, s)) {
      ++lost;
      continue;
    }
    rtt.push_back(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s).count()));
  }
  stop = true;
  echo.join();
  auto pct = [&](double q) {
    if (rtt.empty()) return 0.0;
    const size_t k =
        std::min(rtt.size() - 1, static_cast<size_t>(q * static_cast<double>(rtt.size())));
    std::nth_element(rtt.begin(), rtt.begin() + static_cast<long>(k), rtt.end());
    return rtt[k] / 1000.0;
  };
  const double p50 = pct(0.5), p99 = pct(0.99), p999 = pct(0.999);
  std::printf(
      "{\"mode\":\"pingpong\",\"size\":%u,\"busy\":%s,\"samples\":%zu,\"lost\":%llu,"
      "\"rtt_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f}}\n",
      a.size, a.busy ? "true" : "false", rtt.size(), static_cast<unsigned long long>(lost), p50,
      p99, p999);
  close(efd);
  close(cfd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s blast|pingpong [--seconds S] [--seg N] [--gso-segs N] [--batch N] "
                 "[--size N] [--no-gso] [--no-gro] [--header N] [--ring] [--busy]\n",
                 argv[0]);
    return 2;
  }
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    // A count in [lo, hi], or exit 2 naming the option: atoi let
    // "--header -4096" wrap into a size check that passed.
    auto count = [&](uint32_t lo, uint32_t hi) -> uint32_t {
      const char* v = val();
      char* rest = nullptr;
      errno = 0;
      const unsigned long n = std::strtoul(v, &rest, 10);
      if (errno != 0 || rest == v || *rest != '\0' || v[0] == '-' || n < lo || n > hi) {
        std::fprintf(stderr, "%s: want a whole number in %u..%u, got '%s'\n", k.c_str(), lo, hi, v);
        std::exit(2);
      }
      return static_cast<uint32_t>(n);
    };
    // Seconds in (0, 3600], or exit 2 naming the option: atof read "abc",
    // "-1" and "0" as a run of 0 s, which printed zeros and exited 0.
    auto seconds = [&]() -> double {
      const char* v = val();
      char* rest = nullptr;
      errno = 0;
      const double s = std::strtod(v, &rest);
      if (errno != 0 || rest == v || *rest != '\0' || !std::isfinite(s) || s <= 0 || s > 3600) {
        std::fprintf(stderr, "%s: want seconds, more than 0 and at most 3600, got '%s'\n",
                     k.c_str(), v);
        std::exit(2);
      }
      return s;
    };
    if (k == "--seconds")
      a.seconds = seconds();
    else if (k == "--seg")
      a.seg = count(1, 65507);
    else if (k == "--gso-segs")
      a.gso_segs = count(1, 64);  // UDP_MAX_SEGMENTS
    else if (k == "--batch")
      a.batch = count(1, 1024);  // UIO_MAXIOV for sendmmsg's vector
    else if (k == "--size")
      a.size = count(1, 65507);
    else if (k == "--no-gso")
      a.gso = false;
    else if (k == "--no-gro")
      a.gro = false;
    else if (k == "--header")
      a.header = count(0, 1024);
    else if (k == "--ring")
      a.ring = true;
    else if (k == "--busy")
      a.busy = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (uint64_t{a.header + a.seg} * a.gso_segs > 65507) {
    std::fprintf(stderr, "bad sizes: (header + seg) * gso-segs must be <= 65507\n");
    return 2;
  }
  if (a.mode == "blast") return blast(a);
  if (a.mode == "pingpong") return pingpong(a);
  std::fprintf(stderr, "unknown mode %s\n", a.mode.c_str());
  return 2;
}
