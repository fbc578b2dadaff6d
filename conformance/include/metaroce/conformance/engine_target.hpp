// The reference engine as a conformance target: one Endpoint in process, a
// simulated clock that run_for() advances from timer to timer, and memory
// the agent allocates itself.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "metaroce/conformance/memory_store.hpp"
#include "metaroce/conformance/target.hpp"

namespace metaroce::conformance {

class EngineTarget : public Target {
 public:
  // The settings the checks assume of a reference endpoint: 4 paths, the
  // spec's defaults otherwise, accepting connections.
  static EndpointConfig default_config();
  explicit EngineTarget(const EndpointConfig& cfg = default_config());
  ~EngineTarget() override;

  [[nodiscard]] std::string name() const override { return "metaroce engine (in process)"; }
  [[nodiscard]] bool simulated_time() const override { return true; }
  void deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
               bool stranger) override;
  bool deliver_trimmed(std::span<const uint8_t> datagram, uint16_t entropy, bool ce) override;
  std::vector<Sent> run_for(uint64_t ns) override;
  bool register_memory(uint64_t length, uint32_t access, Region& out) override;
  bool register_memory_at(uint64_t length, uint32_t access, uint64_t base, Region& out) override;
  bool deregister_memory(const Region& r) override;
  std::vector<uint8_t> read_memory(const Region& r, uint64_t offset, uint64_t length) override;
  void write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) override;
  bool connect_to_tester(ConnId& out) override;
  ConnId accepted() override { return accepted_; }
  size_t accepted_count() override { return accepted_count_; }
  Status post_send(ConnId conn, const SendWr& wr) override;
  Status post_recv(ConnId conn, const RecvWr& wr) override;
  bool poll_completion(Completion& out) override;
  bool shared_receives(uint32_t depth) override;
  Status post_shared_recv(const RecvWr& wr) override { return ep_->post_shared_recv(wr); }
  bool path_stats(ConnId conn, size_t path, PathStats& out) override;
  bool close(ConnId conn) override;
  bool conn_error(ConnId conn, Status& out) override;
  bool listen(bool accept, uint32_t max_connections) override;
  bool start_psn_at(uint32_t psn) override;
  bool set_rnr_retry_limit(uint32_t limit) override;
  bool endpoint_stats(EndpointStats& out) override {
    out = ep_->endpoint_stats();
    return true;
  }
  [[nodiscard]] std::optional<std::pair<uint16_t, uint16_t>> entropy_range() const override {
    return std::pair{ep_->config().entropy_min, ep_->config().entropy_max};
  }
  [[nodiscard]] std::optional<size_t> paths() const override { return ep_->config().num_paths; }
  // No UDP at all: the ICRC is all that protects a payload.
  [[nodiscard]] std::optional<bool> udp_checksum() const override { return false; }
  // The tester's ports are the checks' own here. The engine leaves a
  // request's reply_port to its driver (section 2): in process every
  // datagram of the tester's is from the one peer address, port kPort.
  [[nodiscard]] std::optional<uint16_t> tester_port(uint16_t check_port) const override {
    return check_port;
  }

 protected:
  [[nodiscard]] const EndpointConfig& config() const { return ep_->config(); }
  // A fresh endpoint with `cfg`, as a new target has: the memory, the
  // connections and what was accepted are gone.
  void reopen(const EndpointConfig& cfg);

 private:
  void collect(std::vector<Sent>& out);
  // The port the tester and the stranger receive on (Peer::kEntropy).
  static constexpr uint16_t kPort = 50000;

  std::unique_ptr<Endpoint> ep_;
  TimeNs now_{1'000'000'000};
  PeerAddr tester_, stranger_;
  MemoryStore memory_;
  std::vector<uint8_t> buf_;
  ConnId accepted_;
  size_t accepted_count_ = 0;
  std::map<uint32_t, Status> failed_;  // by connection id: its kConnectFailed or kError
};

}  // namespace metaroce::conformance
