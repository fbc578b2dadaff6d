// A host NIC running the unmodified MetaRoCE engine (metaroce::Endpoint).
//
// The NIC pulls: whenever its link is idle it asks the engine for the next
// datagram (poll_transmit_gather), so the engine's timestamps are the real
// send times and there is no unbounded host queue. Every input (a datagram
// arriving, the engine's timer, a new flow) is followed by draining
// completions and events, a pull if the link is idle, and re-arming the
// host's single timer at the engine's next_timeout().
//
// Payload bytes are not simulated. A packet carries the engine's header bytes
// and ICRC trailer plus a payload length; the receiving engine gets a
// datagram buffer of the right size whose payload region is scratch memory.
// Endpoints run with cover_payload = false (ICRC over headers only) so the
// scratch payload passes the check, and every endpoint registers one shared
// scratch region that all WRITEs target (contents are meaningless).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "metaroce/engine.hpp"
#include "metaroce/sim/network.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {

class MetaRoceHost;

// State shared by all hosts of one simulation (no globals).
struct MetaRoceShared {
  MetaRoceShared(Network& n, FlowTable& f, uint64_t region_bytes, uint16_t mtu);
  Network& net;
  FlowTable& flows;
  std::vector<uint8_t> region;  // registered by every endpoint
  std::vector<uint8_t> txhdr;   // header buffer for poll_transmit_gather
  std::vector<uint8_t> rxbuf;   // datagram buffer handed to handle_datagram
  uint32_t wire_overhead = 66;
  uint64_t wr_bytes = 256 * 1024;  // bytes per WRITE; flows are split into WRs of this size
  // Some flows have dependents, so receivers keep receives posted for the
  // WRITE_IMM that ends each of them.
  bool signalled_flows = false;
  std::vector<MetaRoceHost*> hosts;
  uint64_t undeliverable = 0;
  uint64_t connect_failures = 0;
  uint64_t errors = 0;
};

struct TransportTotals {
  uint64_t data_packets_sent = 0;
  uint64_t retransmissions = 0;
  uint64_t timeouts = 0;
  uint64_t losses_declared = 0;
  uint64_t path_retirements = 0;
  uint64_t ce_received = 0;
  uint64_t duplicates_received = 0;
  uint64_t acks_sent = 0;
  uint64_t bad_packets = 0;  // dropped by an endpoint's validation
};

// A host NIC of any transport (the MetaRoCE engine or a baseline).
class SimHost : public Node, public EventSource {
 public:
  virtual void start_flow(uint32_t flow, SimTime now) = 0;
  virtual void add_totals(TransportTotals& t) const = 0;
  // Warm-up (SimConfig::preconnect): open the connection to `dst` now, so that
  // the workload finds it established. Transports without a handshake ignore it.
  virtual void preconnect(uint32_t dst, SimTime now) {
    (void)dst;
    (void)now;
  }
  // Every connection preconnect() opened has been established or has failed.
  [[nodiscard]] virtual bool connections_settled() const { return true; }
};

class MetaRoceHost final : public SimHost {
 public:
  MetaRoceHost(MetaRoceShared& shared, uint32_t host, const EndpointConfig& cfg);
  ~MetaRoceHost() override;

  void start_flow(uint32_t flow, SimTime now) override;
  void preconnect(uint32_t dst, SimTime now) override;
  [[nodiscard]] bool connections_settled() const override {
    return connects_settled_ >= conns_.size();
  }
  void receive(Packet* p, uint32_t in_port, SimTime now) override;
  void port_idle(uint32_t port, SimTime now) override;
  void on_event(SimTime now) override;  // engine timer

  [[nodiscard]] Endpoint& endpoint() { return ep_; }
  [[nodiscard]] const MemoryRegion& region() const { return mr_; }
  void add_totals(TransportTotals& t) const override;
  // All connections this host opened or accepted.
  [[nodiscard]] std::vector<ConnId> connections() const;
  // The connection this host opened to host dst (false: none yet).
  [[nodiscard]] bool connection_to(uint32_t dst, ConnId& out) const;
  // Payload bytes accepted by this host's connections (not duplicates).
  [[nodiscard]] uint64_t data_bytes_received() const;

  static PeerAddr addr(uint32_t host);
  static uint32_t host_of(const PeerAddr& a);

 private:
  // The WRs of one flow not yet posted, as a run: posted one at a time, so a
  // flow of 1e15 bytes is one entry, not 4e9 WRs allocated up front (that
  // ended in std::bad_alloc; a 32-bit count wrapped to one WR of 0 bytes).
  struct Pending {
    uint32_t flow;
    SendWr wr;  // the template: addresses and keys
    ConnId conn;
    uint64_t wrs;    // WRs left, the next included
    uint64_t left;   // their bytes
    uint64_t chunk;  // bytes a WR
    bool imm_last;   // the last WR is a WRITE_IMM (the flow has dependents)
    [[nodiscard]] SendWr next() const;
    void advance();
  };
  void service(SimTime now);
  void pull(SimTime now);
  void post(Pending p, SimTime now);
  // A zero-length receive for a WRITE_IMM that signals a flow's delivery.
  void post_receive(ConnId conn);
  // Receives kept posted on each accepted connection when flows signal.
  static constexpr uint32_t kPostedReceives = 32;
  // The connection to `dst`, opened on first use (connection_to only looks it
  // up); nullptr if connect() refused.
  const ConnId* open_connection(uint32_t dst, SimTime now);

  MetaRoceShared& sh_;
  Endpoint ep_;
  MemoryRegion mr_;
  std::unordered_map<uint32_t, ConnId> conns_;  // by destination host (opened here)
  std::vector<ConnId> accepted_;
  size_t connects_settled_ = 0;  // kConnected or kConnectFailed events seen
  std::deque<Pending> backlog_;  // runs whose next WR was refused with kQueueFull, in order
};

}  // namespace metaroce::sim
