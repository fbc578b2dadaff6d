// An application's wrong Options and addresses, as open() and connect() meet
// them: each is refused with kInvalidArgument (or, for a resource the host
// lacks, kResourceExhausted) and words that name the field, and nothing is
// left open: no descriptor, no port held, no connection.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/resource.h>

#include <chrono>
#include <string>
#include <vector>

#include "metaroce/udp.hpp"
#include "udp_pair.hpp"

using namespace std::chrono_literals;
using metaroce::ConnId;
using metaroce::PeerAddr;
using metaroce::Status;
using metaroce::udp::Error;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;
using namespace metaroce::udp::test;

namespace {

// This process's open descriptors: a refused open leaves none behind.
size_t open_fds() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

// open() refuses `o` on `address`: `status`, a message that holds `words`,
// and no descriptor left open.
void refused(const std::string& address, const Options& o, Status status,
             const std::string& words) {
  const size_t before = open_fds();
  Error err;
  EXPECT_EQ(UdpEndpoint::open(address, o, err), nullptr) << address << ": " << words;
  EXPECT_EQ(err.status, status) << err.message;
  EXPECT_NE(err.message.find(words), std::string::npos) << err.message;
  EXPECT_TRUE(err.peer.empty()) << err.peer;  // open() has no peer
  EXPECT_EQ(open_fds(), before) << err.message;
}

// Whether a plain socket can bind `port` on 127.0.0.1: a refused open holds
// none of the ports it tried.
bool port_free(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST(UdpBadOptions, QueueDepthsOutOfRangeAreNamed) {
  Options o = test_options();
  o.engine.sq_depth = 0;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "sq_depth 0");
  o = test_options();
  o.engine.sq_depth = 0xffff;  // past the send queue's most (its slots share 15 bits)
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "sq_depth 65535");
  o = test_options();
  o.engine.rq_depth = 0;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "rq_depth 0");
  o = test_options();
  o.engine.shared_rq_depth = metaroce::kMaxSharedRqDepth + 1;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "shared_rq_depth");
  o = test_options();
  o.engine.max_connections = 0;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "max_connections 0");
  o = test_options();
  o.engine.mtu = 100;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "mtu 100");
  // The largest depths the engine takes open.
  o = test_options();
  o.engine.sq_depth = 0x8000;
  o.engine.rq_depth = 0xffff;
  Error err;
  EXPECT_NE(UdpEndpoint::open("127.0.0.1:0", o, err), nullptr) << err.message;
}

// trimmed_dscp is compared with a received TOS byte's upper six bits: one
// of 64..255 (a TOS byte typed for the DSCP, 0xb8 for 46) was taken, and
// matched no packet, so trimmed packets read as whole ones (TRIM-2).
TEST(UdpBadOptions, ATrimmedDscpOutOfRangeIsNamed) {
  for (const int dscp : {64, 0xb8, 255}) {
    Options o = test_options();
    o.trimmed_dscp = static_cast<uint8_t>(dscp);
    refused("127.0.0.1:0", o, Status::kInvalidArgument,
            "Options::trimmed_dscp " + std::to_string(dscp) + " is out of range 0..63");
  }
  Options o = test_options();
  o.trimmed_dscp = 62;  // the most that is no class's own
  Error err;
  EXPECT_NE(UdpEndpoint::open("127.0.0.1:0", o, err), nullptr) << err.message;
}

TEST(UdpBadOptions, EntropyBlocksOutOfRangeAreNamed) {
  Options o = test_options();
  o.entropy_count = 0;
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "needs at least num_paths=8");
  o.entropy_count = 7;  // fewer than num_paths (8)
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "needs at least num_paths=8");
  o = test_options();
  o.entropy_base = 65530;  // 16 ports from 65530 run past 65535
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "entropy block 65530+16 is invalid");
  o = test_options();
  o.entropy_count = 65535;  // no receive port leaves room for it
  refused("127.0.0.1:0", o, Status::kInvalidArgument, "is invalid");
  // A fixed receive port too near the end: its block would pass 65535.
  o = test_options();
  refused("127.0.0.1:65530", o, Status::kInvalidArgument, "entropy block 65531+16 is invalid");
  EXPECT_TRUE(port_free(65530));
}

TEST(UdpBadOptions, AnEntropyBlockOverTheReceivePortIsNamed) {
  // The block must not hold the endpoint's own receive port: every send
  // socket binds its port, and one of them would be the receive socket's.
  const uint16_t port = closed_port("127.0.0.1");
  ASSERT_NE(port, 0);
  Options o = test_options();
  o.entropy_base = static_cast<uint16_t>(port - 3);
  const std::string at = "127.0.0.1:" + std::to_string(port);
  refused(at, o, Status::kInvalidArgument,
          "Options::entropy_base " + std::to_string(port - 3) +
              " and entropy_count 16 put the "
              "receive port " +
              std::to_string(port) + " in the entropy block");
  EXPECT_TRUE(port_free(port));
  EXPECT_TRUE(port_free(static_cast<uint16_t>(port - 3)));
}

TEST(UdpBadOptions, MoreSendSocketsThanTheDescriptorLimitIsNamed) {
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  const size_t have = open_fds();
  rlimit low = old;
  low.rlim_cur = have + 40;  // room for a receive socket and some 30 send sockets
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  Options o = test_options();
  o.entropy_count = 64;
  const size_t before = open_fds();
  Error err;
  auto ep = UdpEndpoint::open("127.0.0.1:0", o, err);
  const size_t after = open_fds();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(ep, nullptr);
  EXPECT_EQ(err.status, Status::kResourceExhausted) << err.message;
  EXPECT_NE(err.message.find("Too many open files"), std::string::npos) << err.message;
  // What to change: the block's size, or the limit.
  EXPECT_NE(err.message.find("Options::entropy_count (64)"), std::string::npos) << err.message;
  EXPECT_NE(err.message.find("RLIMIT_NOFILE"), std::string::npos) << err.message;
  EXPECT_EQ(after, before) << err.message;
}

TEST(UdpBadOptions, BadAddressesAreRefusedWithTheirReason) {
  const Options o = test_options();
  for (const char* bad : {"", "127.0.0.1:70000", "127.0.0.1:-1", "127.0.0.1:abc", "300.1.1.1:5000",
                          "10.0.1", "[::1", "[::1]:", "::1:5", "host.invalid:5000"}) {
    SCOPED_TRACE(bad);
    const size_t before = open_fds();
    Error err;
    EXPECT_EQ(UdpEndpoint::open(bad, o, err), nullptr);
    EXPECT_EQ(err.status, Status::kInvalidArgument) << err.message;
    EXPECT_NE(err.message.find(std::string("open ") + bad + ": "), std::string::npos)
        << err.message;
    EXPECT_GT(err.message.size(), std::string("open ").size() + std::string(bad).size() + 2)
        << err.message;
    EXPECT_EQ(open_fds(), before);
  }
  // An address of no interface here: bind() says so.
  refused("192.0.2.1:5000", o, Status::kInvalidArgument, "bind(): Cannot assign requested address");
}

TEST(UdpBadOptions, ConnectToBadAddressesOpensNoConnection) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  for (const char* bad :
       {"", "127.0.0.1:70000", "127.0.0.1:0", "[::1]:5000", "10.0.1", "host.invalid:5000"}) {
    SCOPED_TRACE(bad);
    ConnId id{7};
    const Error e = ep->connect(bad, 100ms, id);
    EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
    EXPECT_NE(e.message.find(std::string("connect to ")), std::string::npos) << e.message;
    EXPECT_FALSE(id.valid());
  }
  // A binary address of the other family, and a malformed one.
  PeerAddr v6;
  ASSERT_TRUE(metaroce::udp::parse_address("[::1]:5000", 0, v6));
  ConnId id{7};
  Error e = ep->connect_start(v6, id);
  EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
  EXPECT_NE(e.message.find("cannot reach an IPv6 peer"), std::string::npos) << e.message;
  EXPECT_EQ(e.peer, "[::1]:5000");
  EXPECT_FALSE(id.valid());
  PeerAddr junk = v6;
  junk.bytes[18] = 5;
  e = ep->connect_start(junk, id);
  EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
  EXPECT_FALSE(id.valid());
  // Nothing was sent, and the endpoint still connects.
  EXPECT_EQ(ep->io_stats().tx_datagrams, 0u);
  EXPECT_EQ(ep->endpoint_stats().datagrams_sent, 0u);
  Pair p;
  p.server = open_on("127.0.0.1");
  p.client = std::move(ep);
  ASSERT_TRUE(p.server);
  handshake(p, p.server->local_address());
  EXPECT_EQ(p.client->state(p.cconn), metaroce::udp::ConnState::kEstablished);
}

TEST(UdpBadOptions, AnIPv6EndpointRefusesAnIPv4PeerAndAnIPv4OneAnIPv6Peer) {
  auto v4 = open_on("127.0.0.1");
  ASSERT_TRUE(v4);
  ConnId id;
  Error e = v4->connect_start("[::1]:" + std::to_string(v4->port()), id);
  EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
  EXPECT_NE(e.message.find(v4->local_address()), std::string::npos) << e.message;
  Error err;
  auto v6 = UdpEndpoint::open("[::1]:0", test_options(), err);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback: " << err.message;
  e = v6->connect_start(v4->local_peer_addr(), id);
  EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
  EXPECT_NE(e.message.find("cannot reach an IPv4 peer"), std::string::npos) << e.message;
  EXPECT_EQ(e.peer, v4->local_address());
  EXPECT_FALSE(id.valid());
  EXPECT_EQ(v6->io_stats().tx_datagrams, 0u);
}

namespace {

// An IPv4 address of one of this host's interfaces other than loopback, or
// "" where there is none.
std::string interface_ipv4() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return {};
  std::string found;
  for (const ifaddrs* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(s4->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &s4->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  ::freeifaddrs(all);
  return found;
}

// `ep` refuses a connect to `host` at ports of its own entropy block, in
// every form, at once: kInvalidArgument naming the peer and the block,
// no connection, nothing sent.
void refuses_own_block(UdpEndpoint& ep, const std::string& host) {
  const std::string block =
      std::to_string(ep.entropy_min()) + "-" + std::to_string(ep.entropy_max());
  for (const uint16_t port :
       {ep.entropy_min(), static_cast<uint16_t>(ep.entropy_min() + 3), ep.entropy_max()}) {
    const std::string peer = host + ":" + std::to_string(port);
    SCOPED_TRACE(ep.local_address() + " connecting to " + peer);
    const uint64_t sent = ep.io_stats().tx_datagrams;
    ConnId id{7};
    const auto start = std::chrono::steady_clock::now();
    Error e = ep.connect(peer, 2000ms, id);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms) << "not refused at once";
    EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
    EXPECT_NE(e.message.find("connect to "), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("this endpoint's own entropy block (" + block), std::string::npos)
        << e.message;
    EXPECT_FALSE(e.peer.empty());
    EXPECT_FALSE(id.valid());
    e = ep.connect_start(peer, id);
    EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
    EXPECT_FALSE(id.valid());
    PeerAddr pa;
    ASSERT_TRUE(metaroce::udp::parse_address(peer, 0, pa));
    e = ep.connect_start(pa, id, 1000ms);
    EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
    EXPECT_NE(e.message.find("own entropy block"), std::string::npos) << e.message;
    EXPECT_FALSE(id.valid());
    (void)ep.progress();
    EXPECT_EQ(ep.io_stats().tx_datagrams, sent) << "a request went out";
  }
}

}  // namespace

// A peer address on this host whose port is one of the endpoint's own send
// ports (a server restarted on a port the client's block now holds, its old
// address kept): the requests went to the endpoint's own send sockets, which
// nothing reads, and the connect waited out its whole timeout ("timed out
// after 2000 ms", naming nothing). Refused at once, for the endpoint's own
// address, and for a wildcard-bound one for loopback, an interface's address
// and the wildcard address, v4-mapped too.
TEST(UdpBadOptions, AConnectToAPortOfItsOwnEntropyBlockIsRefusedAtOnce) {
  struct Case {
    std::string bound;
    std::vector<std::string> peers;
  };
  std::vector<Case> cases = {
      {"127.0.0.1", {"127.0.0.1", "[::ffff:127.0.0.1]", "0.0.0.0"}},
      {"0.0.0.0", {"127.0.0.1", "127.0.0.2", "0.0.0.0"}},
  };
  if (const std::string ip = interface_ipv4(); !ip.empty()) cases[1].peers.push_back(ip);
  Error err;
  if (UdpEndpoint::open("[::1]:0", test_options(), err) != nullptr) {
    cases.push_back({"::1", {"[::1]"}});
    cases.push_back({"::", {"[::1]", "[::ffff:127.0.0.1]", "127.0.0.1"}});
  }
  for (const Case& c : cases) {
    auto ep = open_on(c.bound);
    ASSERT_TRUE(ep) << c.bound;
    for (const std::string& peer : c.peers) refuses_own_block(*ep, peer);
  }
}

// What the refusal must not catch: a peer whose port is in the block's
// numeric range at an address the endpoint is not bound to (another
// loopback address, another host) is reached as any other, and the
// endpoint still connects to its own receive port (CONN-10).
TEST(UdpBadOptions, APeerElsewhereOnAPortOfTheBlocksRangeIsReached) {
  auto client = open_on("127.0.0.1", with_handshake_budget(test_options()));
  ASSERT_TRUE(client);
  Error err;
  auto server = UdpEndpoint::open("127.0.0.2:" + std::to_string(client->entropy_min() + 3),
                                  test_options(), err);
  ASSERT_TRUE(server) << err.message;
  server->start_progress_thread();
  ConnId c, s;
  Error e = client->connect(server->local_address(), kHandshakeTimeout, c);
  EXPECT_FALSE(e) << e.message;
  e = server->accept(kHandshakeTimeout, s);
  EXPECT_FALSE(e) << e.message;
  server->stop_progress_thread();
  ConnId far;
  e = client->connect_start("192.0.2.1:" + std::to_string(client->entropy_min()), far);
  EXPECT_FALSE(e) << e.message;
  EXPECT_TRUE(far.valid());
  client->close(far);
  ConnId self;
  e = client->connect_start(client->local_address(), self);
  EXPECT_FALSE(e) << e.message;
  EXPECT_TRUE(self.valid());
}
