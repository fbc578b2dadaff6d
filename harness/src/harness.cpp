#include "metaroce/harness/harness.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace metaroce::harness {
namespace {

HarnessConfig normalize(HarnessConfig cfg) {
  if (cfg.endpoints.empty()) throw std::invalid_argument("Harness: need at least one endpoint");
  cfg.net.num_nodes = static_cast<uint32_t>(cfg.endpoints.size());
  for (size_t i = 0; i < cfg.endpoints.size(); ++i) {
    for (;;) {
      bool dup = false;
      for (size_t j = 0; j < i; ++j) dup = dup || cfg.endpoints[j].seed == cfg.endpoints[i].seed;
      if (!dup) break;
      cfg.endpoints[i].seed = mix_seed(cfg.endpoints[i].seed, i + 1, 0x5eed);
    }
  }
  return cfg;
}

// Cap on datagrams one endpoint may emit in a single drain; more means the
// engine keeps answering poll_transmit forever.
constexpr uint64_t kMaxDrain = 10'000'000;

}  // namespace

PeerAddr harness_addr(size_t node) {
  PeerAddr a;
  const auto host = static_cast<uint16_t>(node + 1);
  a.bytes[0] = 10;
  a.bytes[1] = 0;
  a.bytes[2] = static_cast<uint8_t>(host >> 8);
  a.bytes[3] = static_cast<uint8_t>(host);
  a.bytes[4] = 0x12;  // port 4792
  a.bytes[5] = 0xb8;
  a.len = 6;
  return a;
}

HarnessConfig HarnessConfig::two_nodes(uint32_t num_paths, uint64_t seed, PathConfig path) {
  HarnessConfig c;
  // Network refuses zero paths; this quietly made it one.
  if (num_paths == 0)
    throw std::invalid_argument("HarnessConfig::two_nodes: need at least one path");
  c.net.paths.assign(num_paths, path);
  c.net.seed = mix_seed(seed, 0x6e6574);
  c.endpoints.assign(2, EndpointConfig{});
  for (size_t i = 0; i < 2; ++i) c.endpoints[i].seed = mix_seed(seed, i + 1);
  return c;
}

Harness::Harness(HarnessConfig cfg) : cfg_(normalize(std::move(cfg))), net_(cfg_.net) {
  nodes_.resize(cfg_.endpoints.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    n.ep = std::make_unique<Endpoint>(cfg_.endpoints[i]);
    n.addr = harness_addr(i);
    n.txbuf.resize(n.ep->transmit_buffer_bytes(false));
    n.gatherbuf.resize(n.ep->transmit_buffer_bytes(true));
  }
}

Harness::~Harness() = default;

size_t Harness::node_of(const PeerAddr& a) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].addr == a) return i;
  return SIZE_MAX;
}

void Harness::stall(std::string why) {
  if (!stalled_) stall_reason_ = std::move(why);
  stalled_ = true;
}

uint64_t Harness::drain(size_t node) {
  Node& n = nodes_[node];
  TxDatagram tx;
  uint64_t outputs = 0;
  for (uint64_t count = 0;; ++count) {
    if (count >= kMaxDrain) {
      stall("node " + std::to_string(node) + ": poll_transmit never returned false");
      break;
    }
    std::span<const uint8_t> bytes;
    if (cfg_.gather) {
      if (!n.ep->poll_transmit_gather(now_, n.gatherbuf, tx)) break;
      // Reassemble header + payload + trailer, as a sendmsg() would.
      const size_t trailer = tx.len - tx.header_len - tx.payload.size();
      if (tx.len > n.txbuf.size() || trailer > sizeof(tx.trailer))
        throw std::runtime_error("Harness: inconsistent gather datagram");
      std::memcpy(n.txbuf.data(), n.gatherbuf.data(), tx.header_len);
      if (!tx.payload.empty())
        std::memcpy(n.txbuf.data() + tx.header_len, tx.payload.data(), tx.payload.size());
      std::memcpy(n.txbuf.data() + tx.header_len + tx.payload.size(), tx.trailer, trailer);
      bytes = std::span<const uint8_t>(n.txbuf.data(), tx.len);
    } else {
      if (!n.ep->poll_transmit(now_, n.txbuf, tx)) break;
      bytes = std::span<const uint8_t>(n.txbuf.data(), std::min(tx.len, n.txbuf.size()));
    }
    ++outputs;
    const size_t dst = node_of(tx.peer);
    if (dst == SIZE_MAX) {
      ++undeliverable_;
      continue;
    }
    (void)net_.send(static_cast<uint32_t>(node), static_cast<uint32_t>(dst), tx.entropy, tx.ecn,
                    bytes, now_);
  }
  Completion c;
  while (n.ep->poll_completion(c)) {
    CompletionRecord r;
    static_cast<Completion&>(r) = c;
    r.time = now_;
    n.completions.push_back(r);
    ++outputs;
  }
  Event e;
  while (n.ep->poll_event(e)) {
    EventRecord r;
    static_cast<Event&>(r) = e;
    r.time = now_;
    n.events.push_back(r);
    ++outputs;
  }
  return outputs;
}

void Harness::flush() {
  for (size_t i = 0; i < nodes_.size(); ++i) drain(i);
}

void Harness::deliver(const Delivery& d) {
  Node& n = nodes_[d.dst];
  RxDatagram rx;
  rx.peer = nodes_[d.src].addr;
  rx.entropy = d.entropy;
  rx.ce = d.ce();
  rx.trimmed = d.trimmed;
  rx.bytes = d.bytes;
  n.ep->handle_datagram(rx, now_);
  ++delivered_;
  drain(d.dst);
}

TimeNs Harness::next_event_time() const {
  TimeNs t = net_.next_delivery();
  for (const auto& n : nodes_) t = std::min(t, n.ep->next_timeout());
  return t;
}

bool Harness::step() {
  if (stalled_) return false;
  flush();
  TimeNs t = next_event_time();
  if (t == TimeNs::never()) return false;
  if (t <= now_) {
    t = now_;
    if (++steps_at_instant_ > cfg_.max_steps_per_instant) {
      stall("time stuck at " + std::to_string(now_.ns) + " ns for " +
            std::to_string(steps_at_instant_) + " steps");
      return false;
    }
  } else {
    steps_at_instant_ = 0;
  }
  now_ = t;
  Delivery d;
  while (net_.pop_delivery(now_, d)) deliver(d);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    if (n.ep->next_timeout() <= now_) {
      n.ep->handle_timeout(now_);
      ++n.timeouts;
      if (drain(i) != 0) {
        n.idle_in_row = 0;
        continue;
      }
      ++n.idle_timeouts;
      if (n.idle_in_row++ == 0) n.idle_row_start = now_;
      if (cfg_.max_idle_timeouts != 0 && n.idle_in_row >= cfg_.max_idle_timeouts &&
          now_.since(n.idle_row_start) < n.idle_in_row * 100) {
        stall("node " + std::to_string(i) + ": timer spins: " + std::to_string(n.idle_in_row) +
              " handle_timeout calls in " + std::to_string(now_.since(n.idle_row_start)) +
              " ns did nothing (next_timeout " + std::to_string(n.ep->next_timeout().ns) +
              ", now " + std::to_string(now_.ns) + ")");
      }
    }
  }
  ++steps_;
  return !stalled_;
}

bool Harness::run_until(const std::function<bool()>& pred, TimeNs deadline) {
  for (;;) {
    flush();
    if (pred()) return true;
    const TimeNs t = next_event_time();
    if (t == TimeNs::never() || (t > deadline && t > now_)) {
      if (deadline != TimeNs::never() && now_ < deadline) now_ = deadline;
      return pred();
    }
    if (!step()) return pred();
  }
}

void Harness::run_for(uint64_t ns) {
  const TimeNs deadline = now_ + ns;
  (void)run_until([] { return false; }, deadline);
  advance_to(deadline);
}

void Harness::advance_to(TimeNs t) {
  if (t > now_) now_ = t;
}

std::pair<ConnId, ConnId> Harness::connect(size_t a, size_t b, TimeNs deadline) {
  if (deadline == TimeNs::never()) deadline = now_ + kSecond;
  const size_t ea = nodes_.at(a).events.size();
  const size_t eb = nodes_.at(b).events.size();
  ConnId ca;
  if (ep(a).connect(addr(b), now_, ca) != Status::kOk) return {};
  ConnId cb;
  bool connected = false;
  auto done = [&] {
    auto& eva = nodes_[a].events;
    auto& evb = nodes_[b].events;
    for (size_t i = ea; i < eva.size() && !connected; ++i)
      if (eva[i].conn == ca && eva[i].kind == EventKind::kConnected) connected = true;
    for (size_t i = eb; i < evb.size() && !cb.valid(); ++i)
      if (evb[i].kind == EventKind::kAccepted && evb[i].peer == addr(a)) cb = evb[i].conn;
    return connected && cb.valid();
  };
  if (!run_until(done, deadline)) return {};
  return {ca, cb};
}

}  // namespace metaroce::harness
