// ClosedTable (closed_table.hpp): records of ended connections, each kept
// until its own end, bounded by a limit, indexed by id and by request.
#include "closed_table.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <utility>

#include "metaroce/rng.hpp"

namespace metaroce::detail {

namespace {
// A queue's smallest storage: a close or two allocate once, not per record.
constexpr size_t kMinCapacity = 16;
}  // namespace

size_t ClosedTable::RequestHash::operator()(const RequestKey& k) const {
  uint64_t h = splitmix64_mix(k.nonce ^ salt);
  h = splitmix64_mix(h ^ k.src_conn);
  // Only the address's len bytes: PeerAddr's == ignores the rest.
  const size_t len = std::min<size_t>(k.peer.len, sizeof k.peer.bytes);
  for (size_t i = 0; i < len; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, k.peer.bytes + i, std::min<size_t>(8, len - i));
    h = splitmix64_mix(h ^ word);
  }
  return static_cast<size_t>(h ^ k.peer.len);
}

void ClosedTable::Queue::resize(size_t capacity) {
  std::vector<ClosedRecord> moved(capacity);
  for (uint64_t s = head_; s != tail_; ++s) moved[s & (capacity - 1)] = buf_[s & mask_];
  buf_ = std::move(moved);
  mask_ = capacity - 1;
}

void ClosedTable::Queue::reserve_one() {
  if (size() < buf_.size()) return;
  resize(buf_.empty() ? kMinCapacity : buf_.size() * 2);
}

void ClosedTable::Queue::shrink() {
  if (empty()) {
    buf_ = std::vector<ClosedRecord>();  // back to no storage (= {} keeps the capacity)
    mask_ = 0;
    return;
  }
  if (buf_.size() <= kMinCapacity || size() > buf_.size() / 4) return;
  try {
    resize(buf_.size() / 2);
  } catch (const std::bad_alloc&) {
    // Kept as it is: only memory that could not yet be given back.
  }
}

void ClosedTable::pop(size_t queue) {
  Queue& q = queues_[queue];
  const ClosedRecord& r = q.front();
  const uint64_t mine = where(queue, q.head());
  // An index entry a later record of the same key took over stays.
  if (auto it = by_id_.find(r.id.v); it != by_id_.end() && it->second == mine) by_id_.erase(it);
  if (r.nonce != 0) {
    auto it = by_request_.find(RequestKey{r.nonce, r.peer_conn, r.peer});
    if (it != by_request_.end() && it->second == mine) by_request_.erase(it);
  }
  q.pop();
}

void ClosedTable::refresh_next_end() {
  next_end_ = TimeNs::never();
  for (const Queue& q : queues_)
    if (!q.empty()) next_end_ = std::min(next_end_, q.front().end());
}

void ClosedTable::expire(TimeNs now) {
  if (now < next_end_) return;
  for (size_t i = 0; i < queues_.size(); ++i) {
    while (!queues_[i].empty() && queues_[i].front().end() <= now) pop(i);
    queues_[i].shrink();
  }
  if (size() == 0) {
    // Buckets are never given back by erase: a burst's would stay for good.
    by_id_ = decltype(by_id_)();  // moved in: = {} would clear and keep the buckets
    by_request_ = decltype(by_request_)(0, RequestHash{salt_});
  }
  refresh_next_end();
}

bool ClosedTable::add(const ClosedRecord& r, TimeNs now, uint64_t& pushed_out) {
  expire(now);
  while (size() >= limit_) {
    // The front that ends first: the record needed for the shortest while.
    const size_t oldest = queues_[0].empty()                                     ? 1
                          : queues_[1].empty()                                   ? 0
                          : queues_[0].front().end() <= queues_[1].front().end() ? 0
                                                                                 : 1;
    pop(oldest);
    ++pushed_out;
  }
  const size_t queue = r.long_lived() ? 1 : 0;
  Queue& q = queues_[queue];
  const uint64_t mine = where(queue, q.tail());
  try {
    q.reserve_one();
    by_id_[r.id.v] = mine;
    if (r.nonce != 0) by_request_[RequestKey{r.nonce, r.peer_conn, r.peer}] = mine;
  } catch (const std::bad_alloc&) {
    // Undone so that no entry names the sequence number the next record
    // takes; the queue's storage, grown or not, is consistent either way.
    if (auto it = by_id_.find(r.id.v); it != by_id_.end() && it->second == mine) by_id_.erase(it);
    refresh_next_end();
    return false;
  }
  q.push(r);
  refresh_next_end();
  return true;
}

const ClosedRecord* ClosedTable::by_id(ConnId id) const {
  if (id.v == 0) return nullptr;
  const auto it = by_id_.find(id.v);
  return it == by_id_.end() ? nullptr : at(it->second);
}

const ClosedRecord* ClosedTable::by_request(const PeerAddr& peer, uint32_t src_conn,
                                            uint64_t nonce) const {
  const auto it = by_request_.find(RequestKey{nonce, src_conn, peer});
  return it == by_request_.end() ? nullptr : at(it->second);
}

size_t ClosedTable::bytes() const {
  // A hash node holds the pair and a next pointer (and libstdc++ caches the
  // request key's hash); buckets are a pointer each, the single inline
  // bucket of an empty map none.
  const auto buckets = [](const auto& m) {
    return m.bucket_count() > 1 ? m.bucket_count() * sizeof(void*) : 0;
  };
  return queues_[0].bytes() + queues_[1].bytes() +
         by_id_.size() * (sizeof(std::pair<const uint32_t, uint64_t>) + sizeof(void*)) +
         by_request_.size() * (sizeof(std::pair<const RequestKey, uint64_t>) + 2 * sizeof(void*)) +
         buckets(by_id_) + buckets(by_request_);
}

}  // namespace metaroce::detail
