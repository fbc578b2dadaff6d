// ClosedTable (engine/src/closed_table.hpp, spec CONN-3, CONN-7): the
// records of ended connections, each kept until its own end, the one nearest
// its end pushed out at the limit, indexed by id and by request.
#include "closed_table.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace metaroce::test {
namespace {

using detail::ClosedRecord;
using detail::ClosedTable;

PeerAddr peer(uint8_t b) {
  PeerAddr p;
  p.len = 1;
  p.bytes[0] = b;
  return p;
}

// A requester's record (the short queue): it ends at `until`.
ClosedRecord requesters(uint32_t id, uint64_t until) {
  ClosedRecord r;
  r.id = ConnId{id};
  r.peer_conn = 7;
  r.peer = peer('A');
  r.until = TimeNs{until};
  return r;
}

// A responder's record of request `nonce` (the long queue): it ends at
// `requests_until`.
ClosedRecord responders(uint32_t id, uint64_t nonce, uint64_t requests_until) {
  ClosedRecord r = requesters(id, requests_until / 2);
  r.nonce = nonce;
  r.requests_until = TimeNs{requests_until};
  return r;
}

ClosedTable table(size_t limit) {
  ClosedTable t;
  t.configure(limit, 0x5eed);
  return t;
}

// CONN-7: each record stays until its own end, whatever the lifetime of
// those closed before it: a requester's ends before a responder's that
// closed earlier.
TEST(ClosedTable, ARecordEndsAtItsOwnEndBehindALongerOne) {
  ClosedTable t = table(64);
  uint64_t dropped = 0;
  ASSERT_TRUE(t.add(responders(1, 11, 1000), TimeNs{0}, dropped));
  ASSERT_TRUE(t.add(requesters(2, 100), TimeNs{1}, dropped));
  t.expire(TimeNs{100});
  EXPECT_EQ(t.by_id(ConnId{2}), nullptr);
  ASSERT_NE(t.by_id(ConnId{1}), nullptr);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.next_end(), TimeNs{1000});
}

// CONN-7: at the limit the record nearest its end goes, of either queue:
// here the requester's, though the responder's closed first.
TEST(ClosedTable, AtTheLimitTheRecordNearestItsEndGoes) {
  ClosedTable t = table(2);
  uint64_t dropped = 0;
  ASSERT_TRUE(t.add(responders(1, 11, 1000), TimeNs{0}, dropped));
  ASSERT_TRUE(t.add(requesters(2, 100), TimeNs{1}, dropped));
  ASSERT_TRUE(t.add(requesters(3, 200), TimeNs{2}, dropped));
  EXPECT_EQ(dropped, 1u);
  EXPECT_EQ(t.by_id(ConnId{2}), nullptr);
  EXPECT_NE(t.by_id(ConnId{1}), nullptr);
  EXPECT_NE(t.by_request(peer('A'), 7, 11), nullptr);
  EXPECT_NE(t.by_id(ConnId{3}), nullptr);
}

// An id (reused after 2,047 generations of its slot) or a request recorded
// again while its older record lasts: the older record's end leaves the
// index naming the newer one.
TEST(ClosedTable, AnOlderRecordsEndLeavesTheNewerRecordOfItsKeyIndexed) {
  ClosedTable t = table(64);
  uint64_t dropped = 0;
  ASSERT_TRUE(t.add(responders(1, 11, 1000), TimeNs{0}, dropped));
  ASSERT_TRUE(t.add(responders(1, 11, 3000), TimeNs{10}, dropped));
  t.expire(TimeNs{1000});
  EXPECT_EQ(t.size(), 1u);
  const ClosedRecord* r = t.by_id(ConnId{1});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->requests_until, TimeNs{3000});
  r = t.by_request(peer('A'), 7, 11);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->requests_until, TimeNs{3000});
}

}  // namespace
}  // namespace metaroce::test
