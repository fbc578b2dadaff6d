#include "metaroce/harness/network.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "metaroce/wire.hpp"

namespace metaroce::harness {
namespace {

__extension__ using u128 = unsigned __int128;

bool is_data_opcode(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && wire::is_data(static_cast<wire::Opcode>(bytes[1]));
}

// TRIM-1: what a trimming switch keeps of a data packet, its headers and
// the ICRC; 0 for a packet it would not trim (not data, or too short to hold
// the headers its opcode names: dropped as before).
size_t trimmed_size(std::span<const uint8_t> bytes) {
  if (!is_data_opcode(bytes)) return 0;
  const size_t kept = wire::header_size(static_cast<wire::Opcode>(bytes[1])) + wire::kIcrcSize;
  return bytes.size() >= kept ? kept : 0;
}

void accumulate(LinkStats& sum, const LinkStats& s) {
  sum.packets_sent += s.packets_sent;
  sum.bytes_sent += s.bytes_sent;
  sum.packets_delivered += s.packets_delivered;
  sum.bytes_delivered += s.bytes_delivered;
  sum.dropped_queue += s.dropped_queue;
  sum.trimmed += s.trimmed;
  sum.lost += s.lost;
  sum.corrupted += s.corrupted;
  sum.duplicated += s.duplicated;
  sum.ce_marked += s.ce_marked;
  sum.dropped_down += s.dropped_down;
  sum.max_backlog_bytes = std::max(sum.max_backlog_bytes, s.max_backlog_bytes);
  sum.data_while_down += s.data_while_down;
  if (s.last_data_while_down != TimeNs::never() &&
      (sum.last_data_while_down == TimeNs::never() ||
       s.last_data_while_down > sum.last_data_while_down))
    sum.last_data_while_down = s.last_data_while_down;
}

}  // namespace

// ---------------------------------------------------------------- Ring

Network::Packet& Network::Ring::push_back() {
  if (count_ == slots_.size()) {
    // Grow to twice the size, keeping FIFO order and every slot's buffer.
    std::vector<Packet> bigger(std::max<size_t>(16, slots_.size() * 2));
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    // Keep the spare buffers of the old ring too.
    for (size_t i = count_; i < slots_.size(); ++i)
      bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    slots_ = std::move(bigger);
    head_ = 0;
  }
  Packet& p = slots_[(head_ + count_) % slots_.size()];
  ++count_;
  return p;
}

void Network::Ring::pop_back() { --count_; }

void Network::Ring::pop_front() {
  head_ = (head_ + 1) % slots_.size();
  --count_;
}

// ---------------------------------------------------------------- Network

Network::Network(NetworkConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.num_nodes < 1) throw std::invalid_argument("Network: num_nodes must be >= 1");
  if (cfg_.paths.empty()) throw std::invalid_argument("Network: need at least one path");
  // NaN compares false both ways: read as a probability it meant "never".
  auto probability = [](double p) { return p >= 0.0 && p <= 1.0; };
  for (size_t i = 0; i < cfg_.paths.size(); ++i) {
    const PathConfig& p = cfg_.paths[i];
    if (!probability(p.loss) || !probability(p.duplicate) || !probability(p.corrupt))
      throw std::invalid_argument("Network: path " + std::to_string(i) +
                                  ": loss, duplicate and corrupt must be probabilities in [0, 1]");
  }
  const uint32_t n = cfg_.num_nodes;
  const uint32_t np = num_paths();
  links_.resize(size_t{n} * n * np);
  for (uint32_t s = 0; s < n; ++s)
    for (uint32_t d = 0; d < n; ++d)
      for (uint32_t p = 0; p < np; ++p) {
        Link& l = links_[index(s, d, p)];
        l.cfg = cfg_.paths[p];
        l.rng.reseed(mix_seed(cfg_.seed, s, d, p));
        l.src = s;
        l.dst = d;
        l.path = p;
      }
}

size_t Network::index(uint32_t src, uint32_t dst, uint32_t path) const {
  return (size_t{src} * cfg_.num_nodes + dst) * num_paths() + path;
}

// links_.at() caught only an index past the whole table: link_config(0, 1, 4)
// with 4 paths was link (1, 0, 0), the reverse direction, silently.
size_t Network::checked_index(const char* who, uint32_t src, uint32_t dst, uint32_t path) const {
  if (src >= cfg_.num_nodes || dst >= cfg_.num_nodes)
    throw std::out_of_range(std::string("Network::") + who + ": no node " +
                            std::to_string(std::max(src, dst)) + " (" +
                            std::to_string(cfg_.num_nodes) + " nodes)");
  check_path(who, path);
  return index(src, dst, path);
}

void Network::check_path(const char* who, uint32_t path) const {
  if (path >= num_paths())
    throw std::out_of_range(std::string("Network::") + who + ": no path " + std::to_string(path) +
                            " (" + std::to_string(num_paths()) + " paths)");
}

PathConfig& Network::link_config(uint32_t src, uint32_t dst, uint32_t path) {
  return links_[checked_index("link_config", src, dst, path)].cfg;
}

void Network::set_outage(uint32_t path, TimeNs down_at, TimeNs up_at) {
  check_path("set_outage", path);
  for (auto& l : links_)
    if (l.path == path) {
      l.cfg.down_at = down_at;
      l.cfg.up_at = up_at;
    }
}

bool Network::down_during(const PathConfig& c, TimeNs from, TimeNs to) {
  // [from, to] intersects [down_at, up_at)
  return c.down_at != TimeNs::never() && c.down_at <= to && from < c.up_at;
}

bool Network::is_down(uint32_t src, uint32_t dst, uint32_t path, TimeNs t) const {
  return down_during(links_[checked_index("is_down", src, dst, path)].cfg, t, t);
}

const LinkStats& Network::stats(uint32_t src, uint32_t dst, uint32_t path) const {
  return links_[checked_index("stats", src, dst, path)].stats;
}

LinkStats Network::path_totals(uint32_t path) const {
  check_path("path_totals", path);
  LinkStats sum;
  for (const auto& l : links_)
    if (l.path == path) accumulate(sum, l.stats);
  return sum;
}

LinkStats Network::totals() const {
  LinkStats sum;
  for (const auto& l : links_) accumulate(sum, l.stats);
  return sum;
}

uint64_t Network::backlog(const Link& l, TimeNs t) {
  if (l.cfg.rate_bps == 0 || l.busy_until <= t) return 0;
  // Bytes the serializer still has to send: ceil(remaining_ns * rate / 8e9).
  const u128 bits_x1e9 = static_cast<u128>(l.busy_until.ns - t.ns) * l.cfg.rate_bps;
  const u128 per_byte = u128{8} * kSecond;
  return static_cast<uint64_t>((bits_x1e9 + per_byte - 1) / per_byte);
}

uint64_t Network::backlog_bytes(uint32_t src, uint32_t dst, uint32_t path, TimeNs t) const {
  return backlog(links_[checked_index("backlog_bytes", src, dst, path)], t);
}

void Network::trace(NetTraceKind k, const Link& l, TimeNs t, uint16_t entropy,
                    std::span<const uint8_t> bytes, uint64_t aux) const {
  if (!trace_) return;
  NetTraceEvent ev{t,
                   k,
                   l.src,
                   l.dst,
                   l.path,
                   entropy,
                   static_cast<uint8_t>(bytes.size() >= 2 ? bytes[1] : 0),
                   static_cast<uint32_t>(bytes.size()),
                   aux,
                   bytes};
  trace_(ev);
}

bool Network::send(uint32_t src, uint32_t dst, uint16_t entropy, uint8_t ecn,
                   std::span<const uint8_t> bytes, TimeNs now) {
  if (src >= cfg_.num_nodes || dst >= cfg_.num_nodes)
    throw std::out_of_range("Network::send: bad node id");
  Link& l = links_[index(src, dst, path_of(entropy))];
  l.stats.packets_sent++;
  l.stats.bytes_sent += bytes.size();
  if (down_during(l.cfg, now, now)) {
    l.stats.dropped_down++;
    if (is_data_opcode(bytes)) {
      l.stats.last_data_while_down = now;
      l.stats.data_while_down++;
    }
    trace(NetTraceKind::kDropDown, l, now, entropy, bytes, 0);
    return false;
  }
  // Fixed draw order per offered packet: duplicate?, then per copy
  // loss?, corrupt? (+ bit index). Zero probabilities draw nothing.
  const bool dup = l.rng.chance(l.cfg.duplicate);
  const bool ok = enqueue_one(l, bytes, entropy, ecn, now);
  if (dup) {
    l.stats.duplicated++;
    trace(NetTraceKind::kDuplicate, l, now, entropy, bytes, 0);
    enqueue_one(l, bytes, entropy, ecn, now);
  }
  return ok;
}

bool Network::enqueue_one(Link& l, std::span<const uint8_t> bytes, uint16_t entropy, uint8_t ecn,
                          TimeNs now) {
  const PathConfig& c = l.cfg;
  // After an outage the queue was flushed: the serializer is idle again. A
  // packet enqueued at down_at itself is dead too (down_during counts it): the
  // usual set_outage(p, now, ...) comes right after packets entered at `now`,
  // and `<` left their serialization time as phantom backlog after up_at.
  if (c.down_at != TimeNs::never() && c.down_at < c.up_at && l.last_enqueue <= c.down_at &&
      c.down_at <= now && l.busy_until > c.down_at) {
    // Whatever was still queued or in flight at down_at is gone; drop it now
    // so the FIFO stays ordered by arrival.
    while (!l.queue.empty() && down_during(c, l.queue.back().enqueued, l.queue.back().arrival)) {
      l.stats.dropped_down++;
      const Packet& p = l.queue.back();
      trace(NetTraceKind::kDropDown, l, c.down_at, p.entropy, p.data, 1);
      l.queue.pop_back();
    }
    l.busy_until = now;
    l.carry = 0;
  }
  l.last_enqueue = now;
  uint64_t wire = bytes.size() + c.overhead_bytes;
  const uint64_t q = backlog(l, now);
  bool trimmed = false;
  if (c.queue_limit_bytes != kUnlimited && q + wire > c.queue_limit_bytes) {
    const size_t kept = c.trim ? trimmed_size(bytes) : 0;
    if (kept == 0 || q + kept + c.overhead_bytes > c.queue_limit_bytes + c.trim_allowance_bytes) {
      l.stats.dropped_queue++;
      trace(NetTraceKind::kDropQueue, l, now, entropy, bytes, q);
      return false;
    }
    l.stats.trimmed++;
    trace(NetTraceKind::kTrim, l, now, entropy, bytes, q);
    const size_t h = kept - wire::kIcrcSize;
    trim_buf_.assign(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(h));
    trim_buf_.insert(trim_buf_.end(), bytes.end() - wire::kIcrcSize, bytes.end());
    bytes = trim_buf_;
    wire = kept + c.overhead_bytes;
    trimmed = true;
  }
  bool mark = false;
  if ((ecn == kEct0 || ecn == kEct1) && c.ecn_threshold_bytes != kUnlimited &&
      q > c.ecn_threshold_bytes) {
    mark = true;
    ecn = kCe;
  }
  l.stats.max_backlog_bytes = std::max(l.stats.max_backlog_bytes, q + wire);

  // Serialize: start when the link is free, exact long-run rate thanks to the
  // carried remainder.
  TimeNs start = now;
  if (l.busy_until > now) {
    start = l.busy_until;
  } else {
    l.carry = 0;
  }
  uint64_t ser = 0;
  if (c.rate_bps != 0) {
    const u128 num = static_cast<u128>(wire) * 8 * kSecond + l.carry;
    ser = static_cast<uint64_t>(num / c.rate_bps);
    l.carry = static_cast<uint64_t>(num % c.rate_bps);
  }
  l.busy_until = start + ser;

  if (l.rng.chance(c.loss)) {
    l.stats.lost++;
    trace(NetTraceKind::kLoss, l, now, entropy, bytes, 0);
    return false;
  }
  if (mark) {
    l.stats.ce_marked++;
    trace(NetTraceKind::kCeMark, l, now, entropy, bytes, q);
  }
  Packet& p = l.queue.push_back();
  p.enqueued = now;
  p.arrival = l.busy_until + c.delay_ns;
  p.entropy = entropy;
  p.ecn = ecn;
  p.corrupted = false;
  p.trimmed = trimmed;
  p.data.assign(bytes.begin(), bytes.end());
  if (l.rng.chance(c.corrupt) && !p.data.empty()) {
    const uint64_t bit = l.rng.below(p.data.size() * 8);
    p.data[bit / 8] = static_cast<uint8_t>(p.data[bit / 8] ^ (1u << (bit % 8)));
    p.corrupted = true;
    l.stats.corrupted++;
    trace(NetTraceKind::kCorrupt, l, now, entropy, bytes, bit);
  }
  trace(NetTraceKind::kEnqueue, l, now, entropy, bytes, q);
  return true;
}

TimeNs Network::next_delivery() const {
  TimeNs t = TimeNs::never();
  for (const auto& l : links_)
    if (!l.queue.empty()) t = std::min(t, l.queue.front().arrival);
  return t;
}

size_t Network::in_flight() const {
  size_t n = 0;
  for (const auto& l : links_) n += l.queue.size();
  return n;
}

bool Network::pop_delivery(TimeNs now, Delivery& out) {
  for (;;) {
    Link* best = nullptr;
    for (auto& l : links_)
      if (!l.queue.empty() && l.queue.front().arrival <= now &&
          (best == nullptr || l.queue.front().arrival < best->queue.front().arrival))
        best = &l;
    if (best == nullptr) return false;
    Link& l = *best;
    Packet& p = l.queue.front();
    l.queue.pop_front();  // the slot (and p.data) stays intact until the next push
    const std::span<const uint8_t> bytes(p.data.data(), p.data.size());
    if (down_during(l.cfg, p.enqueued, p.arrival)) {
      l.stats.dropped_down++;
      trace(NetTraceKind::kDropDown, l, p.arrival, p.entropy, bytes, 1);
      continue;
    }
    if (p.corrupted && cfg_.udp_checksum) {
      trace(NetTraceKind::kDropChecksum, l, p.arrival, p.entropy, bytes, 0);
      continue;
    }
    l.stats.packets_delivered++;
    l.stats.bytes_delivered += p.data.size();
    trace(NetTraceKind::kDeliver, l, p.arrival, p.entropy, bytes, 0);
    out.time = p.arrival;
    out.src = l.src;
    out.dst = l.dst;
    out.path = l.path;
    out.entropy = p.entropy;
    out.ecn = p.ecn;
    out.corrupted = p.corrupted;
    out.trimmed = p.trimmed;
    out.bytes = bytes;
    return true;
  }
}

}  // namespace metaroce::harness
