// Registered memory misused as an application can: zero bytes, overlapping
// regions, ranges out by one byte at either end, an lkey whose region went, an
// rkey of another endpoint, and regions deregistered while a WRITE or READ
// from or into them is in flight (MR-1..MR-5). Each is refused at the post or
// completes with an error naming the peer and the connection; no byte outside
// a granted range, or of a region after its deregistration, is touched.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "metaroce/udp.hpp"
#include "udp_misuse.hpp"
#include "udp_pair.hpp"

using namespace std::chrono_literals;
using metaroce::Completion;
using metaroce::ConnId;
using metaroce::MemoryRegion;
using metaroce::Status;
using metaroce::udp::ConnState;
using metaroce::udp::Error;
using metaroce::udp::UdpEndpoint;
using namespace metaroce::udp::test;

namespace {

// The next completion of `ep`, pumping both.
bool next_completion(Pair& p, UdpEndpoint& ep, Completion& c) {
  return pump(p, [&] { return ep.poll_completion(c); });
}

// The client's next completion: wr_id `wr_id`, failed `want`, naming the
// server and the connection.
void expect_failure(Pair& p, uint64_t wr_id, Status want) {
  Completion c;
  ASSERT_TRUE(next_completion(p, *p.client, c));
  EXPECT_EQ(c.wr_id, wr_id);
  EXPECT_EQ(c.status, want);
  expect_names(*p.client, c, p.server->local_address());
}

bool all_equal(const uint8_t* p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

}  // namespace

TEST(UdpMemoryMisuse, ZeroBytesNoAddressAndUnknownAccessAreRefused) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  std::vector<uint8_t> buf(64);
  MemoryRegion mr;
  Error e = ep->register_memory(buf.data(), 0, kAllAccess, mr);
  EXPECT_EQ(e.status, Status::kInvalidArgument);
  EXPECT_NE(e.message.find("length is 0"), std::string::npos) << e.message;
  e = ep->register_memory(nullptr, 64, kAllAccess, mr);
  EXPECT_NE(e.message.find("addr is null"), std::string::npos) << e.message;
  e = ep->register_memory(buf.data(), 64, 0x80, mr);
  EXPECT_NE(e.message.find("access has bits outside kAccessKnown"), std::string::npos) << e.message;
  e = ep->register_memory_at(buf.data(), 64, UINT64_MAX - 10, kAllAccess, mr);
  EXPECT_NE(e.message.find("passes 2^64"), std::string::npos) << e.message;
  // An lkey never given, and one given and taken back twice.
  e = ep->deregister_memory(12345);
  EXPECT_EQ(e.status, Status::kInvalidArgument) << e.message;
  EXPECT_NE(e.message.find("lkey 12345"), std::string::npos) << e.message;
  ASSERT_FALSE(ep->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  EXPECT_FALSE(ep->deregister_memory(mr.lkey));
  e = ep->deregister_memory(mr.lkey);
  EXPECT_TRUE(e);
  EXPECT_NE(e.message.find("lkey " + std::to_string(mr.lkey)), std::string::npos) << e.message;
}

// Two regions over the same bytes are two regions: each serves its own rkey,
// and deregistering one leaves the other whole.
TEST(UdpMemoryMisuse, OverlappingRegionsServeEachItsOwnKey) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  std::vector<uint8_t> src(12288), dst(12288, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  MemoryRegion smr, a, b;
  ASSERT_FALSE(p.client->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.server->register_memory(dst.data(), 8192, kAllAccess, a));
  ASSERT_FALSE(p.server->register_memory(dst.data() + 4096, 8192, kAllAccess, b));
  ASSERT_FALSE(p.server->deregister_memory(a.lkey));
  ASSERT_FALSE(p.client->write(p.cconn, 1, src.data() + 4096, 8192, smr.lkey, b.addr, b.rkey));
  Completion c;
  ASSERT_TRUE(next_completion(p, *p.client, c));
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(0, std::memcmp(dst.data() + 4096, src.data() + 4096, 8192));
  EXPECT_TRUE(all_equal(dst.data(), 4096, 0));
  // The deregistered one's key is unknown now (MR-1), and the write that
  // names it writes nothing.
  ASSERT_FALSE(p.client->write(p.cconn, 2, src.data(), 4096, smr.lkey, a.addr, a.rkey));
  expect_failure(p, 2, Status::kRemoteBadKey);
  EXPECT_TRUE(all_equal(dst.data(), 4096, 0));
}

// A local range one byte past either end of its region is refused at the
// post (MR-3), with the range, the region and the lkey in words; the exact
// range is taken.
TEST(UdpMemoryMisuse, ALocalRangeOutByOneByteIsRefusedAtThePost) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid());
  std::vector<uint8_t> buf(4096 + 2);
  MemoryRegion mr, rmr;
  ASSERT_FALSE(p.client->register_memory(buf.data() + 1, 4096, kAllAccess, mr));
  std::vector<uint8_t> remote(4096);
  ASSERT_FALSE(p.server->register_memory(remote.data(), remote.size(), kAllAccess, rmr));
  for (const int shift : {-1, 1}) {
    SCOPED_TRACE(shift);
    uint8_t* at = buf.data() + 1 + shift;
    for (const bool read : {false, true}) {
      const Error e = read ? p.client->read(p.cconn, 9, at, 4096, mr.lkey, rmr.addr, rmr.rkey)
                           : p.client->write(p.cconn, 9, at, 4096, mr.lkey, rmr.addr, rmr.rkey);
      EXPECT_EQ(e.status, Status::kLocalProtection) << e.message;
      EXPECT_NE(e.message.find("not all inside lkey " + std::to_string(mr.lkey)), std::string::npos)
          << e.message;
      EXPECT_EQ(e.conn, p.cconn.v);
      EXPECT_EQ(e.peer, p.server->local_address());
    }
    // A receive buffer too.
    const Error e = p.client->recv(p.cconn, 9, at, 4096, mr.lkey);
    EXPECT_EQ(e.status, Status::kLocalProtection) << e.message;
  }
  Completion c;
  EXPECT_FALSE(p.client->poll_completion(c));  // a refused post completes nothing
  ASSERT_FALSE(p.client->write(p.cconn, 10, buf.data() + 1, 4096, mr.lkey, rmr.addr, rmr.rkey));
  ASSERT_TRUE(next_completion(p, *p.client, c));
  EXPECT_EQ(c.status, Status::kOk);
}

// A remote range one byte past either end of the peer's region fails the
// request kRemoteOutOfBounds (MR-3), naming the peer and the connection; the
// region's bytes, and those around it, are untouched. Each on its own
// connection, since the NAK ends the one it comes on.
TEST(UdpMemoryMisuse, ARemoteRangeOutByOneByteFailsAndWritesNothing) {
  std::vector<uint8_t> src(4096, 0xab);
  for (const bool read : {false, true}) {
    for (const int shift : {-1, 1}) {
      SCOPED_TRACE(std::string(read ? "READ" : "WRITE") + " shift " + std::to_string(shift));
      Pair p = connect_pair("127.0.0.1");
      ASSERT_TRUE(p.cconn.valid());
      std::vector<uint8_t> dst(4096 + 2, 0x11), local(4096, 0x22);
      MemoryRegion smr, lmr, dmr;
      ASSERT_FALSE(p.client->register_memory(src.data(), src.size(), kAllAccess, smr));
      ASSERT_FALSE(p.client->register_memory(local.data(), local.size(), kAllAccess, lmr));
      ASSERT_FALSE(p.server->register_memory(dst.data() + 1, 4096, kAllAccess, dmr));
      const uint64_t raddr = dmr.addr + shift;
      ASSERT_FALSE(read ? p.client->read(p.cconn, 3, local.data(), 4096, lmr.lkey, raddr, dmr.rkey)
                        : p.client->write(p.cconn, 3, src.data(), 4096, smr.lkey, raddr, dmr.rkey));
      expect_failure(p, 3, Status::kRemoteOutOfBounds);
      EXPECT_TRUE(all_equal(dst.data(), dst.size(), 0x11));
      EXPECT_TRUE(all_equal(local.data(), local.size(), 0x22));
    }
  }
}

// An lkey whose region was deregistered is refused at the post, saying so;
// an rkey of another endpoint's region is unknown to the peer (kRemoteBadKey).
TEST(UdpMemoryMisuse, AStaleLkeyAndAnotherEndpointsRkeyAreNamed) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid());
  std::vector<uint8_t> src(4096, 5), dst(4096, 0), third_buf(4096, 0);
  MemoryRegion smr, dmr, tmr;
  ASSERT_FALSE(p.client->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.server->register_memory(dst.data(), dst.size(), kAllAccess, dmr));
  ASSERT_FALSE(p.client->deregister_memory(smr.lkey));
  Error e = p.client->write(p.cconn, 1, src.data(), 4096, smr.lkey, dmr.addr, dmr.rkey);
  EXPECT_EQ(e.status, Status::kLocalProtection) << e.message;
  EXPECT_NE(e.message.find("deregistered since"), std::string::npos) << e.message;
  EXPECT_EQ(e.conn, p.cconn.v);
  // Registered again: a new lkey; the old one stays refused (MR-5).
  MemoryRegion again;
  ASSERT_FALSE(p.client->register_memory(src.data(), src.size(), kAllAccess, again));
  EXPECT_NE(again.lkey, smr.lkey);
  e = p.client->write(p.cconn, 1, src.data(), 4096, smr.lkey, dmr.addr, dmr.rkey);
  EXPECT_EQ(e.status, Status::kLocalProtection) << e.message;
  auto third = open_on("127.0.0.1");
  ASSERT_TRUE(third);
  ASSERT_FALSE(third->register_memory(third_buf.data(), third_buf.size(), kAllAccess, tmr));
  ASSERT_FALSE(p.client->write(p.cconn, 2, src.data(), 4096, again.lkey, tmr.addr, tmr.rkey));
  expect_failure(p, 2, Status::kRemoteBadKey);
  EXPECT_TRUE(all_equal(dst.data(), dst.size(), 0));
  EXPECT_TRUE(all_equal(third_buf.data(), third_buf.size(), 0));
}

namespace {

constexpr size_t kBig = 16 << 20;  // more than one round sends or acknowledges

// Pumps until `ep` has taken `n` more datagrams of the transfer.
bool until_received(Pair& p, const UdpEndpoint& ep, uint64_t n) {
  const uint64_t from = ep.io_stats().rx_datagrams;
  return pump(p, [&] { return ep.io_stats().rx_datagrams >= from + n; });
}

// A connected pair with a kBig WRITE (wr_id 1) from the client's `src` into
// the server's `dst` under way: some of its packets have arrived.
struct WriteInFlight {
  Pair p = connect_pair("127.0.0.1");
  std::vector<uint8_t> src = std::vector<uint8_t>(kBig, 0x5a);
  std::vector<uint8_t> dst = std::vector<uint8_t>(kBig, 0);
  MemoryRegion smr, dmr;
  // Whether it got that far.
  bool started() {
    if (!p.cconn.valid() || p.client->register_memory(src.data(), src.size(), kAllAccess, smr) ||
        p.server->register_memory(dst.data(), dst.size(), kAllAccess, dmr) ||
        p.client->write(p.cconn, 1, src.data(), kBig, smr.lkey, dmr.addr, dmr.rkey) ||
        p.client->write(p.cconn, 2, src.data(), 64, smr.lkey, dmr.addr, dmr.rkey))
      return false;
    return until_received(p, *p.server, 16);
  }
};

}  // namespace

// MR-5, the source's side: a WRITE's source region deregistered mid-transfer
// fails the WRITE kLocalProtection, naming peer and connection, and the work
// behind it completes kFlushed; no byte is sent from the region after.
TEST(UdpMemoryMisuse, AWritesSourceDeregisteredInFlightFailsIt) {
  WriteInFlight w;
  ASSERT_TRUE(w.started());
  Pair& p = w.p;
  ASSERT_FALSE(p.client->deregister_memory(w.smr.lkey));
  // What the region holds from now on must never reach the peer.
  std::memset(w.src.data(), 0xee, w.src.size());
  Completion c;
  ASSERT_TRUE(next_completion(p, *p.client, c));
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, Status::kLocalProtection);
  expect_names(*p.client, c, p.server->local_address());
  // Not "outside a registered region", which the post had checked: what
  // happened since.
  Error e = p.client->completion_error(c);
  EXPECT_NE(e.message.find("was deregistered while"), std::string::npos) << e.message;
  ASSERT_TRUE(next_completion(p, *p.client, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, Status::kFlushed);
  expect_names(*p.client, c, p.server->local_address());
  e = p.client->completion_error(c);
  EXPECT_NE(e.message.find("kLocalProtection (memory"), std::string::npos) << e.message;
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kError);
  e = p.client->conn_error(p.cconn);
  EXPECT_EQ(e.status, Status::kLocalProtection);
  EXPECT_NE(e.message.find("was deregistered while"), std::string::npos) << e.message;
  // No NAK tells the peer, which has no fault of its own (MR-5): the
  // application's close does (CONN-8), with the reason.
  p.client->close(p.cconn);
  ASSERT_TRUE(pump(p, [&] { return p.server->state(p.sconn) != ConnState::kEstablished; }));
  EXPECT_EQ(p.server->state(p.sconn), ConnState::kClosed);
  for (size_t i = 0; i < w.dst.size(); ++i)
    ASSERT_NE(w.dst[i], 0xee) << "byte " << i << " was sent after its region was deregistered";
}

// MR-5, the target's side: the region a WRITE lands in, deregistered
// mid-transfer, takes no byte after; the WRITE fails with the peer's NAK.
TEST(UdpMemoryMisuse, AWritesTargetDeregisteredInFlightTakesNoMoreBytes) {
  WriteInFlight w;
  ASSERT_TRUE(w.started());
  Pair& p = w.p;
  ASSERT_FALSE(p.server->deregister_memory(w.dmr.lkey));
  std::memset(w.dst.data(), 0xee, w.dst.size());
  expect_failure(p, 1, Status::kRemoteBadKey);
  ASSERT_TRUE(pump(p, [&] { return p.server->state(p.sconn) != ConnState::kEstablished; }));
  EXPECT_TRUE(all_equal(w.dst.data(), w.dst.size(), 0xee));
}

// MR-5 for a READ: its local target deregistered mid-transfer fails it
// kLocalProtection and takes no byte after; the source region, deregistered
// at the responder, fails it kRemoteOperationError.
TEST(UdpMemoryMisuse, AReadsTargetOrSourceDeregisteredInFlightFailsIt) {
  for (const bool at_responder : {false, true}) {
    SCOPED_TRACE(at_responder ? "source deregistered" : "target deregistered");
    Pair p = connect_pair("127.0.0.1");
    ASSERT_TRUE(p.cconn.valid());
    std::vector<uint8_t> local(kBig, 0), remote(kBig, 0x5a);
    MemoryRegion lmr, rmr;
    ASSERT_FALSE(p.client->register_memory(local.data(), local.size(), kAllAccess, lmr));
    ASSERT_FALSE(p.server->register_memory(remote.data(), remote.size(), kAllAccess, rmr));
    ASSERT_FALSE(p.client->read(p.cconn, 1, local.data(), kBig, lmr.lkey, rmr.addr, rmr.rkey));
    ASSERT_TRUE(until_received(p, *p.client, 16));  // some responses have arrived
    if (at_responder) {
      ASSERT_FALSE(p.server->deregister_memory(rmr.lkey));
      std::memset(remote.data(), 0xee, remote.size());
    } else {
      ASSERT_FALSE(p.client->deregister_memory(lmr.lkey));
      std::memset(local.data(), 0xee, local.size());
    }
    Completion c;
    ASSERT_TRUE(next_completion(p, *p.client, c));
    EXPECT_EQ(c.wr_id, 1u);
    EXPECT_EQ(c.status, at_responder ? Status::kRemoteOperationError : Status::kLocalProtection);
    expect_names(*p.client, c, p.server->local_address());
    const Error e = p.client->completion_error(c);
    EXPECT_NE(e.message.find(at_responder ? "deregistered there" : "was deregistered while"),
              std::string::npos)
        << e.message;
    ASSERT_TRUE(pump(p, [&] { return p.server->state(p.sconn) != ConnState::kEstablished; }));
    if (at_responder) {
      for (size_t i = 0; i < local.size(); ++i)
        ASSERT_NE(local[i], 0xee) << "byte " << i << " was read after its region went";
    } else {
      EXPECT_TRUE(all_equal(local.data(), local.size(), 0xee));
    }
  }
}
