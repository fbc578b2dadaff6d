// The simulation harness: two or more metaroce::Endpoint instances joined by
// a harness::Network, driven by a discrete-event loop on simulated time.
//
//   Harness h(HarnessConfig::two_nodes(paths, seed));
//   auto [a, b] = h.connect(0, 1);               // runs the handshake
//   (void)h.ep(0).post_send(a, wr);               // any engine command ...
//   h.run_until([&] { return h.completions(0).size() == 1; }, TimeNs{kSecond});
//
// Each step advances time to the earliest of: the next datagram arrival on
// any link and every endpoint's next_timeout(). At that instant it delivers
// every datagram due (handle_datagram with peer, entropy and CE), then calls
// handle_timeout on every endpoint whose deadline has come, in node order.
// After every input (and before computing the next event) it drains the
// endpoint's poll_transmit into the network (transmissions enter the link
// queue at once; the link serializes), and its completions and events into
// per-node vectors. Everything is single-threaded and deterministic: the
// same configuration and seed produce the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "metaroce/engine.hpp"
#include "metaroce/harness/network.hpp"

namespace metaroce::harness {

struct CompletionRecord : Completion {
  TimeNs time;  // simulated time it was polled
};

struct EventRecord : Event {
  TimeNs time;
};

struct HarnessConfig {
  NetworkConfig net;  // net.num_nodes is set to endpoints.size()
  // One per node. Seeds equal to another node's are replaced by a derived
  // seed, so endpoints never share keys, PSNs or entropy.
  std::vector<EndpointConfig> endpoints = std::vector<EndpointConfig>(2);
  // Use poll_transmit_gather (header + payload + trailer) instead of poll_transmit.
  bool gather = false;
  // Guard against an endpoint whose next_timeout() never moves: after this
  // many consecutive steps at one instant the harness stops and stalled() is true.
  uint64_t max_steps_per_instant = 1'000'000;
  // Guard against a timer that spins (next_timeout() a few ns ahead, again and
  // again, with nothing done): after this many handle_timeout calls in a row
  // on one node that produced no datagram, completion or event, at an average
  // spacing under 100 ns, the harness stops and stalled() is true. 0: off.
  uint64_t max_idle_timeouts = 10'000;

  // N identical paths (rate, delay) between two endpoints with default
  // configs; net.seed and the endpoint seeds derive from `seed`.
  static HarnessConfig two_nodes(uint32_t num_paths, uint64_t seed, PathConfig path = PathConfig{});
};

class Harness {
 public:
  explicit Harness(HarnessConfig cfg);
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  [[nodiscard]] size_t node_count() const { return nodes_.size(); }
  [[nodiscard]] Endpoint& ep(size_t node) { return *nodes_.at(node).ep; }
  [[nodiscard]] const Endpoint& ep(size_t node) const { return *nodes_.at(node).ep; }
  // The address node `node` has on the network (what peers pass to connect).
  [[nodiscard]] const PeerAddr& addr(size_t node) const { return nodes_.at(node).addr; }
  // Node owning an address, or SIZE_MAX.
  [[nodiscard]] size_t node_of(const PeerAddr& a) const;
  [[nodiscard]] Network& net() { return net_; }
  [[nodiscard]] const Network& net() const { return net_; }
  [[nodiscard]] TimeNs now() const { return now_; }
  [[nodiscard]] const HarnessConfig& config() const { return cfg_; }

  // Everything polled so far, in order. Tests may clear them.
  [[nodiscard]] std::vector<CompletionRecord>& completions(size_t node) {
    return nodes_.at(node).completions;
  }
  [[nodiscard]] std::vector<EventRecord>& events(size_t node) { return nodes_.at(node).events; }

  // Starts a connection from `a` to `b` and runs until `a` sees kConnected
  // and `b` kAccepted (or `deadline`, default now + 1 s). Returns the ids at
  // a and b; {0, 0} (invalid ids) on failure.
  std::pair<ConnId, ConnId> connect(size_t a, size_t b, TimeNs deadline = TimeNs::never());

  // Drains every endpoint's outputs at now() (call after commands such as
  // post_send; step() does it too).
  void flush();
  // Time of the next event (arrival or timer); never() when idle.
  [[nodiscard]] TimeNs next_event_time() const;
  // Advances to the next event and processes everything due at it. Returns
  // false when there is nothing left to do (or the harness stalled).
  bool step();
  // Steps until pred() is true (checked before every step) or the next event
  // lies beyond `deadline`; then time stands at the last event processed (or
  // at `deadline` if it ran out). Returns pred().
  bool run_until(const std::function<bool()>& pred, TimeNs deadline);
  // Runs every event up to now() + ns, then sets now() to that time.
  void run_for(uint64_t ns);
  // Moves time forward without processing anything (now must not pass an event).
  void advance_to(TimeNs t);

  [[nodiscard]] bool stalled() const { return stalled_; }
  // Why the harness stalled ("" if it did not).
  [[nodiscard]] const std::string& stall_reason() const { return stall_reason_; }
  // handle_timeout calls per node, and those that produced nothing.
  [[nodiscard]] uint64_t timeouts_handled(size_t node) const { return nodes_.at(node).timeouts; }
  [[nodiscard]] uint64_t idle_timeouts(size_t node) const { return nodes_.at(node).idle_timeouts; }
  [[nodiscard]] uint64_t steps() const { return steps_; }
  [[nodiscard]] uint64_t datagrams_delivered() const { return delivered_; }
  // Datagrams an endpoint addressed to an unknown PeerAddr (dropped).
  [[nodiscard]] uint64_t undeliverable() const { return undeliverable_; }

  // Installs the engine's trace on every endpoint (fn(ctx, ev); the node
  // index is not passed: use one ctx per call of set_engine_trace_for).
  void set_engine_trace_for(size_t node, TraceFn fn, void* ctx) { ep(node).set_trace(fn, ctx); }
  void set_net_trace(NetTraceFn fn) { net_.set_trace(std::move(fn)); }

 private:
  struct Node {
    std::unique_ptr<Endpoint> ep;
    PeerAddr addr;
    std::vector<uint8_t> txbuf;
    std::vector<uint8_t> gatherbuf;
    std::vector<CompletionRecord> completions;
    std::vector<EventRecord> events;
    uint64_t timeouts = 0;
    uint64_t idle_timeouts = 0;
    uint64_t idle_in_row = 0;
    TimeNs idle_row_start;
  };

  // Drains node's outputs; returns how many datagrams, completions and events.
  uint64_t drain(size_t node);
  void stall(std::string why);
  void deliver(const Delivery& d);

  HarnessConfig cfg_;
  Network net_;
  std::vector<Node> nodes_;
  TimeNs now_;
  bool stalled_ = false;
  std::string stall_reason_;
  uint64_t steps_ = 0;
  uint64_t steps_at_instant_ = 0;
  uint64_t delivered_ = 0;
  uint64_t undeliverable_ = 0;
};

// PeerAddr of node i in the harness: 10.0.x.y port 4792, len 6.
[[nodiscard]] PeerAddr harness_addr(size_t node);

}  // namespace metaroce::harness
