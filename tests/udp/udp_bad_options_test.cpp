// An application's wrong Options and addresses, as open() and connect() meet
// them: each is refused with kInvalidArgument (or, for a resource the host
// lacks, kResourceExhausted) and words that name the field, and nothing is
// left open: no descriptor, no port held, no connection.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <string>

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
