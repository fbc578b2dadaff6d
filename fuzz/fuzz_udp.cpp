// libFuzzer target for the UDP driver's receive path (metaroce::udp), the
// code between the kernel and the engine that fuzz_engine does not reach:
// datagram lengths (empty and truncated ones included), GRO buffers split
// into segments, the TOS byte (ECN, and the DSCPs of the control class and of
// trimmed packets), peer lookup by source address and dst_conn, and the
// destination address a wildcard-bound socket reports.
//
// Two servers, each with a client connected to it over loopback:
//   server 0  on 127.0.0.1, GRO on (receive slots of 64 KiB)
//   server 1  on 0.0.0.0 (IP_PKTINFO on), GRO off and mtu 256: its receive
//             slots hold 768 bytes, so longer datagrams arrive truncated
// Each input is a list of datagrams, each one
//   [length: 2 bytes, big-endian] [flags: 1 byte] [tos: 1 byte, with flags
//   bit 1] [segment size: 2 bytes, with flags bit 3] [bytes]
// flags bit 0: overwrite bytes 4-7 (dst_conn) with the server's connection
//              id (in every segment),
//         bit 1: send with the TOS byte that follows (DSCP and ECN; else
//                ECT(0) and DSCP 0),
//         bit 2: send from another host's address (127.0.0.2) rather than
//                the client's (127.0.0.1: the engine takes any port of the
//                peer's host as one of its paths),
//         bit 3: send the bytes with one sendmsg as segments of the size that
//                follows (UDP_SEGMENT; the last one shorter): server 0 reads
//                them as one GRO buffer, server 1 as separate datagrams,
//         bit 4: to server 1 (else server 0),
//         bit 5: after bit 0, recompute each segment's ICRC, so that a
//                packet with a real dst_conn reaches the connection,
//         bit 6: with bit 0, overwrite bytes 16-19 (src_conn of a CONNECT or
//                DISCONNECT body) with the client's connection id;
// the length is taken modulo 2048, modulo 8192 with bit 3, and the segment
// size modulo 2048, at least 1 and large enough for 64 segments (the kernel's
// UDP_MAX_SEGMENTS). The datagrams are
// sent back to back to the servers, which then run their progress rounds
// until they have read them.
// Checked: nothing crashes or trips ASan/UBSan while the servers read them
// (each as a packet, a foreign or a truncated datagram; they wait up to
// 500 ms for them, as a full socket buffer may have dropped some).
//
// At exit the run's receive counters are printed; with
// METAROCE_FUZZ_UDP_REQUIRE=1 (the corpus replay test) the run fails unless
// it split a GRO buffer, truncated a datagram, read CE and control-class
// marks and rebuilt the servers after an input ended a connection: the seed
// corpus must keep reaching those branches.
//
// State: each input starts from the servers and connections the previous
// inputs left (socket buffers, counters, the driver's source cache and batch
// sizing); both are rebuilt after an input that ended a connection (a resealed
// DISCONNECT, say), so that later inputs still reach an established one. A
// crash found by a long run may need the inputs before it: replay the run's
// corpus with -runs=N.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "metaroce/udp.hpp"
#include "reseal.hpp"

namespace {

using metaroce::ConnId;
using metaroce::udp::ConnState;
using metaroce::udp::Error;
using metaroce::udp::IoStats;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;
using namespace std::chrono_literals;

constexpr size_t kMaxSegments = 64;  // UDP_MAX_SEGMENTS

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "fuzz_udp: %s\n", what.c_str());
  std::abort();
}

int socket_on(const char* ip) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (fd < 0 || inet_pton(AF_INET, ip, &a.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    die(std::string("a socket on ") + ip);
  return fd;
}

struct Server {
  std::unique_ptr<UdpEndpoint> ep, client;
  ConnId conn, client_conn;
  sockaddr_in to{};

  Server(const char* bind_to, const Options& o) {
    Error e;
    ep = UdpEndpoint::open(bind_to, o, e);
    Options co;
    co.entropy_count = 16;
    co.linger = 0ms;  // a rebuild tells no one: both ends go together
    if (ep) client = UdpEndpoint::open("127.0.0.1:0", co, e);
    if (!ep || !client) die(e.message);
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(ep->port());
    ep->start_progress_thread();
    if (client->connect("127.0.0.1:" + std::to_string(ep->port()), 2000ms, client_conn) ||
        ep->accept(1000ms, conn))
      die("a client did not connect");
    ep->stop_progress_thread();
  }
  bool established() const { return ep->state(conn) == ConnState::kEstablished; }
  uint64_t read_so_far() const {
    const IoStats io = ep->io_stats();
    return io.rx_datagrams + io.rx_foreign + io.rx_truncated + io.rx_ctrunc;
  }
};

struct World {
  std::unique_ptr<Server> servers[2];
  int same_host = -1, other_host = -1;

  World() {
    Options o;
    o.entropy_count = 16;
    o.linger = 0ms;
    servers[0] = std::make_unique<Server>("127.0.0.1:0", o);
    o.gro = false;
    o.engine.mtu = 256;
    servers[1] = std::make_unique<Server>("0.0.0.0:0", o);
    if (servers[1]->ep->gro_enabled()) die("server 1 has GRO on");
    same_host = socket_on("127.0.0.1");
    other_host = socket_on("127.0.0.2");
  }
  ~World() {
    ::close(same_host);
    ::close(other_host);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
};

// The run's receive counters, summed over every World it built.
struct Tally {
  unsigned long long inputs = 0, rebuilds = 0, timeouts = 0, datagrams = 0, gro_batches = 0,
                     truncated = 0, foreign = 0, ce = 0, control_class = 0;

  void add(const IoStats& a, const IoStats& b) {
    datagrams += b.rx_datagrams - a.rx_datagrams;
    gro_batches += b.rx_gro_batches - a.rx_gro_batches;
    truncated += b.rx_truncated - a.rx_truncated;
    foreign += b.rx_foreign - a.rx_foreign;
    ce += b.rx_ce - a.rx_ce;
    control_class += b.rx_control_class - a.rx_control_class;
  }
};
Tally g_tally;

void report_at_exit() {
  const Tally& t = g_tally;
  std::fprintf(stderr,
               "fuzz_udp: %llu inputs, %llu rebuilds, %llu waits timed out: rx_datagrams %llu, "
               "rx_gro_batches %llu, "
               "rx_truncated %llu, rx_foreign %llu, rx_ce %llu, rx_control_class %llu\n",
               t.inputs, t.rebuilds, t.timeouts, t.datagrams, t.gro_batches, t.truncated, t.foreign,
               t.ce, t.control_class);
  const char* require = std::getenv("METAROCE_FUZZ_UDP_REQUIRE");
  if (require == nullptr || std::strcmp(require, "1") != 0) return;
  if (t.gro_batches == 0 || t.truncated == 0 || t.ce == 0 || t.control_class == 0 ||
      t.rebuilds == 0) {
    std::fprintf(stderr,
                 "fuzz_udp: METAROCE_FUZZ_UDP_REQUIRE=1: the inputs left a receive branch "
                 "unreached (a counter above is 0)\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
}

// The world, rebuilt when an input ended one of its connections (a
// DISCONNECT, or a packet that failed it): later inputs would no longer reach
// an established connection's receive path. Never freed at exit: closing the
// endpoints there would only slow the exit.
World* g_world = nullptr;

World& world() {
  if (g_world == nullptr) {
    std::atexit(report_at_exit);
    g_world = new World;
  }
  return *g_world;
}

void rebuild_if_a_connection_ended() {
  if (g_world->servers[0]->established() && g_world->servers[1]->established()) return;
  delete g_world;
  g_world = new World;
  ++g_tally.rebuilds;
}

void put_conn(uint8_t* p, size_t at, uint32_t id) {
  for (size_t i = 0; i < 4; ++i) p[at + i] = static_cast<uint8_t>(id >> (24 - 8 * i));
}

// Sends dg from fd to `to`, as segments of `seg` bytes when seg is not 0;
// returns the datagrams the receiver will count (0 when the send failed).
uint64_t send_datagram(int fd, const sockaddr_in& to, const std::vector<uint8_t>& dg, size_t seg) {
  iovec iov{const_cast<uint8_t*>(dg.data()), dg.size()};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_in*>(&to);
  m.msg_namelen = sizeof(to);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(uint16_t))] = {};
  if (seg != 0) {
    m.msg_control = ctrl;
    m.msg_controllen = sizeof(ctrl);
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    const auto s = static_cast<uint16_t>(seg);
    std::memcpy(CMSG_DATA(c), &s, sizeof(s));
  }
  if (::sendmsg(fd, &m, 0) != static_cast<ssize_t>(dg.size())) return 0;
  return seg != 0 && dg.size() > seg ? (dg.size() + seg - 1) / seg : 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  IoStats before[2];
  uint64_t read_before[2];
  for (int s = 0; s < 2; ++s) {
    before[s] = w.servers[s]->ep->io_stats();
    read_before[s] = w.servers[s]->read_so_far();
  }
  uint64_t sent[2] = {0, 0};
  std::vector<uint8_t> dg;
  size_t at = 0;
  for (int records = 0; at + 3 <= size && records < 64; ++records) {
    const size_t raw_len = (size_t{data[at]} << 8) | data[at + 1];
    const uint8_t flags = data[at + 2];
    at += 3;
    int tos = 2;  // ECT(0)
    if ((flags & 2) != 0) tos = at < size ? data[at++] : 0;
    size_t seg = 0;
    if ((flags & 8) != 0) {
      seg = at + 2 <= size ? (size_t{data[at]} << 8) | data[at + 1] : 0;
      at = std::min(at + 2, size);
    }
    const size_t len = raw_len % ((flags & 8) != 0 ? 8192 : 2048);
    // The kernel refuses a send of 0-byte segments or of more than 64.
    if ((flags & 8) != 0)
      seg = std::max({seg % 2048, size_t{1}, (len + kMaxSegments - 1) / kMaxSegments});
    const size_t take = std::min(len, size - at);
    dg.assign(data + at, data + at + take);
    dg.resize(len, 0);  // short inputs still give the length asked for
    at += take;
    const int to = (flags & 16) != 0 ? 1 : 0;
    const Server& server = *w.servers[to];
    const size_t step = seg != 0 ? seg : dg.size();
    if ((flags & 1) != 0 && step >= 8) {
      for (size_t off = 0; off + 8 <= dg.size(); off += step) {
        put_conn(dg.data() + off, 4, server.conn.v);
        if ((flags & 0x40) != 0 && std::min(step, dg.size() - off) >= 20)
          put_conn(dg.data() + off, 16, server.client_conn.v);
        if ((flags & 0x20) != 0)
          metaroce::fuzz::reseal(std::span(dg).subspan(off, std::min(step, dg.size() - off)));
      }
    }
    const int fd = (flags & 4) != 0 ? w.other_host : w.same_host;
    (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
    sent[to] += send_datagram(fd, server.to, dg, seg);
  }
  // Read them all: server 0 counts a GRO buffer as its segments.
  const auto end = std::chrono::steady_clock::now() + 500ms;
  for (;;) {
    bool all = true;
    for (int s = 0; s < 2; ++s) {
      (void)w.servers[s]->ep->progress();
      all &= w.servers[s]->read_so_far() >= read_before[s] + sent[s];
    }
    if (all) break;
    if (std::chrono::steady_clock::now() > end) {  // the kernel may drop some
      ++g_tally.timeouts;
      break;
    }
  }
  for (int s = 0; s < 2; ++s) {
    (void)w.servers[s]->client->progress();
    g_tally.add(before[s], w.servers[s]->ep->io_stats());
  }
  ++g_tally.inputs;
  rebuild_if_a_connection_ended();
  return 0;
}
