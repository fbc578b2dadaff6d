// ClosedTable: what the engine remembers of connections that ended, for as
// long as their peer may still repeat a control packet of theirs (spec
// CONN-3, CONN-7, section 4's states): a repeated DISCONNECT is answered
// again, a delayed CONNECT_REQ of an answered request opens no second
// connection, and a late ACCEPT of a connection given up while CONNECTING
// draws a DISCONNECT.
//
// A fixed ring of the last 64 records lost them within a resend window at
// the scale of a provider's endpoint (thousands of peers, connections set up
// on first use and torn down together), and the guarantees with them. Here
// each record stays until its own end, up to a limit that scales with the
// endpoint (set_limit); past it the oldest goes, and is counted.
//
// Two queues in order of close, one per lifetime (the short one of a
// requester's connection closed after its handshake: its peer's DISCONNECT
// resends; the long one of a request answered, or of a connection given up
// while CONNECTING), so that each queue's front ends first and expiry pops
// fronts. Two hash indexes (by connection id, by request) hold each
// record's queue and sequence number, so lookups are O(1) on average.
//
// Allocation happens only in add(), never on a lookup: a hash node per
// index, and the queues' and buckets' amortized growth, all bounded by the
// limit. A failed allocation drops the record (add() returns false) rather
// than throwing into the packet path. Storage is released once a queue
// shrinks to a quarter of its capacity, and entirely when both are empty.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "metaroce/status.hpp"
#include "metaroce/types.hpp"

namespace metaroce::detail {

struct ClosedRecord {
  ConnId id;
  uint32_t peer_conn = 0;  // 0: ended while CONNECTING
  PeerAddr peer;
  uint64_t nonce = 0;  // the peer's request it answered; 0: ours (a requester)
  // A requester's own nonce, for a connection that ended while CONNECTING
  // after its request left (0 otherwise): the responder may hold a
  // connection for it, which a late ACCEPT names (CONN-7).
  uint64_t abandoned_nonce = 0;
  Status reason = Status::kOk;  // its DISCONNECT's reason, for that ACCEPT (CONN-8)
  TimeNs until{0};              // the peer's DISCONNECT resends have stopped by then
  // A responder's: its requester's CONNECT_REQs have stopped by then (CONN-3).
  // One given up while CONNECTING: a late ACCEPT is answered until then.
  TimeNs requests_until{0};

  // Whether its CONN-3 / section 4 use outlasts `until`: the long queue's.
  [[nodiscard]] bool long_lived() const { return nonce != 0 || abandoned_nonce != 0; }
  [[nodiscard]] TimeNs end() const { return long_lived() ? requests_until : until; }
};

class ClosedTable {
 public:
  // `limit` records at most (at least 1); `salt` keys the request index's
  // hash, so that a peer choosing nonces cannot pick which bucket they fill.
  void configure(size_t limit, uint64_t salt) {
    limit_ = limit < 1 ? 1 : limit;
    salt_ = salt;
    by_request_ = decltype(by_request_)(0, RequestHash{salt});
  }

  // Drops the records ended by `now`, then, at the limit, the oldest (the
  // front that ends first); `pushed_out` counts the live ones dropped so.
  // False if an allocation failed: the record is not kept.
  bool add(const ClosedRecord& r, TimeNs now, uint64_t& pushed_out);
  // Drops every record ended by `now` (the engine's time, never a clock).
  void expire(TimeNs now);
  // When the next record ends: expire() has nothing to do before.
  [[nodiscard]] TimeNs next_end() const { return next_end_; }

  // The record of connection `id`, ended or not (the caller asks its times).
  [[nodiscard]] const ClosedRecord* by_id(ConnId id) const;
  // The record of the request (peer, src_conn, nonce) a responder answered.
  [[nodiscard]] const ClosedRecord* by_request(const PeerAddr& peer, uint32_t src_conn,
                                               uint64_t nonce) const;

  [[nodiscard]] size_t size() const { return queues_[0].size() + queues_[1].size(); }
  // Heap bytes held: 0 when empty.
  [[nodiscard]] size_t bytes() const;

 private:
  // A FIFO of records numbered by a sequence that never wraps, so that an
  // index entry names its record however the queue's storage moves.
  class Queue {
   public:
    [[nodiscard]] size_t size() const { return static_cast<size_t>(tail_ - head_); }
    [[nodiscard]] bool empty() const { return head_ == tail_; }
    [[nodiscard]] const ClosedRecord& front() const { return buf_[head_ & mask_]; }
    [[nodiscard]] uint64_t head() const { return head_; }
    [[nodiscard]] uint64_t tail() const { return tail_; }
    [[nodiscard]] const ClosedRecord* at(uint64_t seq) const {
      return seq - head_ < size() ? &buf_[seq & mask_] : nullptr;
    }
    [[nodiscard]] size_t bytes() const { return buf_.capacity() * sizeof(ClosedRecord); }
    // Room for one more, grown by doubling; throws std::bad_alloc.
    void reserve_one();
    uint64_t push(const ClosedRecord& r) {
      buf_[tail_ & mask_] = r;
      return tail_++;
    }
    void pop() { ++head_; }
    // Halves the storage while a quarter of it holds every record.
    void shrink();

   private:
    void resize(size_t capacity);
    std::vector<ClosedRecord> buf_;
    uint64_t mask_ = 0;
    uint64_t head_ = 0, tail_ = 0;
  };

  struct RequestKey {
    uint64_t nonce;
    uint32_t src_conn;
    PeerAddr peer;
    bool operator==(const RequestKey& o) const {
      return nonce == o.nonce && src_conn == o.src_conn && peer == o.peer;
    }
  };
  struct RequestHash {
    uint64_t salt;
    size_t operator()(const RequestKey& k) const;
  };
  // Index values: the queue in the low bit, the sequence number above.
  static uint64_t where(size_t queue, uint64_t seq) { return seq << 1 | queue; }
  [[nodiscard]] const ClosedRecord* at(uint64_t where) const {
    return queues_[where & 1].at(where >> 1);
  }
  void pop(size_t queue);
  void refresh_next_end();

  std::array<Queue, 2> queues_;  // 0: until; 1: requests_until
  std::unordered_map<uint32_t, uint64_t> by_id_;
  std::unordered_map<RequestKey, uint64_t, RequestHash> by_request_{0, RequestHash{0}};
  size_t limit_ = 64;
  uint64_t salt_ = 0;
  TimeNs next_end_ = TimeNs::never();
};

}  // namespace metaroce::detail
