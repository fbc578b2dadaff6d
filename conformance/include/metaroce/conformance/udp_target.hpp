// The reference UDP driver (include/metaroce/udp.hpp) as a conformance
// target, over real sockets and in real time: the implementation under test
// is a UdpEndpoint on 127.0.0.1, the tester sends from its own sockets on
// 127.0.0.3 and a stranger's on 127.0.0.4. The tester's source ports
// 50000-50015 of the checks are mapped onto a block of 16 ports chosen at
// open(), and so are the target's own entropy values (its block is the same
// 16 numbers), so that ACK-7's "reply from the port of the packet echoed"
// holds exactly and reads the same as with the engine in process. The wire
// half is TesterWire (tester_wire.hpp), which RemoteTarget shares.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metaroce/conformance/reference_iut.hpp"
#include "metaroce/conformance/target.hpp"
#include "metaroce/conformance/tester_wire.hpp"

namespace metaroce::conformance {

class UdpTarget : public TesterWireTarget {
 public:
  static constexpr uint16_t kTesterPorts = TesterWire::kPorts;  // check ports 50000..50015
  // nullptr and `why` when the sockets cannot be had (no free port block, or
  // no 127.0.0.3 / 127.0.0.4 on this host).
  static std::unique_ptr<UdpTarget> open(std::string& why);
  ~UdpTarget() override;

  [[nodiscard]] std::string name() const override;
  // Real time, at least 2 ms: a reply the engine sends at once must cross
  // the kernel and a progress round first.
  std::vector<Sent> run_for(uint64_t ns) override;
  bool register_memory(uint64_t length, uint32_t access, Region& out) override;
  bool register_memory_at(uint64_t length, uint32_t access, uint64_t base, Region& out) override;
  bool deregister_memory(const Region& r) override;
  std::vector<uint8_t> read_memory(const Region& r, uint64_t offset, uint64_t length) override;
  void write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) override;
  bool connect_to_tester(ConnId& out) override;
  ConnId accepted() override { return iut_->accepted(); }
  size_t accepted_count() override { return iut_->accepted_count(); }
  Status post_send(ConnId conn, const SendWr& wr) override;
  Status post_recv(ConnId conn, const RecvWr& wr) override;
  bool poll_completion(Completion& out) override;
  // The driver reopened with a shared receive queue (as listen()).
  bool shared_receives(uint32_t depth) override;
  Status post_shared_recv(const RecvWr& wr) override;
  bool path_stats(ConnId conn, size_t path, PathStats& out) override;
  bool close(ConnId conn) override;
  bool conn_error(ConnId conn, Status& out) override;
  // The driver reopened on the same ports with the setting; if it cannot
  // (a port taken meanwhile), the target is lost.
  bool listen(bool accept, uint32_t max_connections) override;
  // The same, with the engine's seed chosen (udp::Options::random_seed off).
  bool start_psn_at(uint32_t psn) override;
  // The same, with CONN-9's keepalive and the peer timeout set.
  bool set_keepalive(uint64_t keepalive_ns, uint64_t peer_timeout_ns) override;
  bool set_rnr_retry_limit(uint32_t limit) override;
  bool endpoint_stats(EndpointStats& out) override {
    out = iut_->ep().endpoint_stats();
    return true;
  }
  [[nodiscard]] std::string lost() const override { return lost_; }
  // The driver under test, for a test that acts on it beside the checks as
  // an application would (its progress thread started: the one place it
  // refuses close(conn)).
  [[nodiscard]] udp::UdpEndpoint& driver() { return iut_->ep(); }
  [[nodiscard]] std::optional<size_t> paths() const override { return options_.engine.num_paths; }
  // Linux computes it on every datagram the driver sends.
  [[nodiscard]] std::optional<bool> udp_checksum() const override { return true; }
  // Its block, base..base+15, maps onto the check ports 50000..50015.
  [[nodiscard]] std::optional<std::pair<uint16_t, uint16_t>> entropy_range() const override {
    return std::pair{TesterWire::kFirstCheckPort,
                     static_cast<uint16_t>(TesterWire::kFirstCheckPort + kTesterPorts - 1)};
  }

 private:
  UdpTarget() = default;
  // The driver reopened on the same ports with `o`; false and lost_ if not.
  bool reopen(const udp::Options& o);
  std::unique_ptr<ReferenceIut> iut_;
  std::string iut_addr_;  // 127.0.0.1:base - 1
  udp::Options options_;  // what it opened with
  std::string lost_;
};

}  // namespace metaroce::conformance
