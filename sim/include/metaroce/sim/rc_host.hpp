// Baseline transports, simulator-only (the engine is not involved): a
// reliable-connection NIC model with one path per connection (a fixed UDP
// source port per QP, so ECMP pins the QP to one path), DCQCN rate control,
// and one of two loss-recovery schemes:
//
//   RoCEv2 (go_back_n = true): the receiver accepts only the expected PSN. The
//     first out-of-sequence packet triggers one sequence NAK (carrying the
//     expected PSN); later out-of-order packets are dropped silently until the
//     expected one arrives. The sender goes back to the NAKed PSN, or to the
//     oldest unacknowledged one on a timeout. Run over a PFC (lossless) fabric.
//   IRN (go_back_n = false): the receiver keeps out-of-order packets (a bitmap)
//     and answers each one with a NACK carrying the cumulative ACK and the PSN
//     that arrived (a SACK). The sender enters recovery, retransmits each
//     hole below the highest SACKed PSN once per recovery episode, leaves
//     recovery when the cumulative ACK passes the PSN that was next when it
//     entered (a NACK that carries such an ACK ends the episode and, its
//     hole being a new loss, opens the next); a timeout (RTO_low when fewer
//     than N packets are in flight, RTO_high otherwise) marks everything
//     unSACKed as lost. In-flight packets are capped at the BDP. No PFC.
//
// DCQCN (Zhu et al., SIGCOMM 2015): the notification point (receiver) sends a
// CNP when a CE-marked packet arrives, at most once per cnp_interval per QP.
// The reaction point (sender) on a CNP: R_T = R_C, R_C = R_C (1 - alpha/2),
// alpha = (1 - g) alpha + g, and the timer/byte counters restart; every
// alpha_timer without a CNP alpha = (1 - g) alpha. Rate increase events come
// from a timer (every increase_timer) and a byte counter (every byte_counter
// bytes sent): while both counters are below F, fast recovery R_C = (R_T +
// R_C)/2; when one of them is past F, additive increase R_T += R_AI then the
// same averaging; when both are, hyper increase R_T += i R_HAI. The sender
// paces data packets at R_C (starting at line rate).
//
// Packets carry real RoCEv2 header sizes on the wire (BTH 12, RETH 16 on a
// message's first packet, AETH 4 on ACK/NAK, ICRC 4; CNP = BTH + 16 reserved +
// ICRC; the IRN NACK adds a 4-byte SACK PSN) plus the simulator's framing
// overhead. A flow is one WRITE message on its own QP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "metaroce/sim/metaroce_host.hpp"
#include "metaroce/sim/network.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {

struct RcParams {
  bool go_back_n = true;        // RoCEv2; false: IRN selective repeat
  uint32_t mtu = 4096;          // payload bytes per packet
  uint32_t window_packets = 0;  // cap on PSNs outstanding (0: none; IRN: the BDP)
  SimTime rto_high = SimTime::from_us(320);
  SimTime rto_low = SimTime::from_us(100);
  uint32_t rto_low_packets =
      0;  // RTO_low when fewer than this many are in flight (0: never; IRN 3)
  // DCQCN.
  bool dcqcn = true;
  SimTime cnp_interval = SimTime::from_us(50);
  double g = 1.0 / 256.0;
  SimTime alpha_timer = SimTime::from_us(55);
  SimTime increase_timer = SimTime::from_us(55);
  uint64_t byte_counter = 10ull * 1024 * 1024;
  uint32_t fast_recovery_steps = 5;  // F
  uint64_t rai_mbps = 100;     // additive increase (40 Mb/s at 40G in the paper, scaled to 100G)
  uint64_t rhai_mbps = 1'000;  // hyper increase
  uint64_t min_rate_mbps = 100;
  // Switch ECN marking used with the baselines (the DCQCN paper's RED
  // setting: 5 KB / 200 KB / 1 %); own_ecn = false keeps the preset's.
  bool own_ecn = true;
  uint64_t ecn_kmin = 5'000, ecn_kmax = 200'000;
  double ecn_pmax = 0.01;
};

class RcHost;

// A set of PSNs at or above a moving base, as a ring of bits: IRN's
// bitmaps (the sender's SACKed PSNs, the receiver's out-of-order ones) span
// only the PSNs in flight, from the cumulative ACK up, which the window caps
// at the BDP, so a flow's state stays that size whatever its length (one
// byte per packet of the flow, allocated at its start, took 244 MB for a
// 1e12-byte flow).
class PsnWindow {
 public:
  // Whether psn is in the set; every PSN below base() counts as in it.
  [[nodiscard]] bool contains(uint32_t psn) const {
    if (psn < base_) return true;
    if (psn - base_ >= bits()) return false;
    return ((words_[word(psn)] >> (psn & 63)) & 1) != 0;
  }
  // Adds psn (>= base()), growing the ring to reach it.
  void insert(uint32_t psn);
  // Drops every PSN below `base` (ignored when not above the current one).
  void advance(uint32_t base);
  // Frees the ring (the flow is over).
  void release() {
    words_.clear();
    words_.shrink_to_fit();
  }
  [[nodiscard]] uint32_t base() const { return base_; }
  // Bytes the ring holds.
  [[nodiscard]] size_t bytes() const { return words_.capacity() * sizeof(uint64_t); }

 private:
  [[nodiscard]] uint64_t bits() const { return uint64_t{words_.size()} * 64; }
  [[nodiscard]] size_t word(uint32_t psn) const { return (psn >> 6) & (words_.size() - 1); }
  std::vector<uint64_t> words_;  // a power of two of them; bit psn mod bits()
  uint32_t base_ = 0;
};

struct RcRx {             // receiver state of one QP (one flow)
  uint32_t expected = 0;  // next in-order PSN (cumulative ACK)
  bool nak_sent = false;  // go-back-N: NAK outstanding for this gap
  SimTime last_cnp = SimTime::never();
  PsnWindow got;  // IRN: packets held from `expected` up (base() == expected)
};

struct RcTotals {
  uint64_t data_packets_sent = 0, retransmissions = 0, timeouts = 0, naks = 0, cnps = 0,
           ce_received = 0, duplicates_received = 0, acks_sent = 0, ooo_dropped = 0;
};

struct RcShared {
  RcShared(Network& n, FlowTable& f, const RcParams& p);
  Network& net;
  FlowTable& flows;
  RcParams prm;
  uint32_t wire_overhead = 66;
  std::vector<RcRx> rx;      // by flow id (the receiving host's state)
  std::vector<uint32_t> qp;  // by flow id: the QP's index in its sending host
  std::vector<RcHost*> hosts;

  // Payload bytes of flow f the receiver has in order (its cumulative ACK).
  [[nodiscard]] uint64_t delivered_bytes(uint32_t flow) const;
  // The RoCEv2 headers p stands for (BTH, then RETH on a message's first
  // packet, AETH on ACK/NAK, AETH + the SACKed PSN on an IRN NACK, 16 reserved
  // bytes on a CNP; no ICRC), synthesized from the simulator's packet
  // (captures, --pcap). Returns their length (at most kMaxRoceHeader).
  static constexpr size_t kMaxRoceHeader = 32;
  // Flow N's destination QP is kFirstQpn + N, in the BTH's 24 bits: QPs 0
  // and 1 are InfiniBand's management QPs (SMI, GSI), which Wireshark
  // decodes as MADs. A run has at most kMaxFlows flows.
  static constexpr uint32_t kFirstQpn = 0x100;
  static constexpr uint64_t kMaxFlows = (uint64_t{1} << 24) - kFirstQpn;
  // "" for a run of `flows` flows, else why not (more than kMaxFlows).
  [[nodiscard]] static std::string flow_count_error(uint64_t flows);
  // IBTA's largest message, 2^31 bytes: a flow is one WRITE, its length the
  // RETH's 32-bit DMA Length.
  static constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 31;
  size_t roce_headers(const Packet& p, uint8_t* out) const;
};

// A QP's sending state, for the CSV time series.
struct RcQpState {
  uint16_t entropy = 0;
  double rate_mbps = 0;   // DCQCN current rate (R_C)
  double alpha = 0;       // DCQCN alpha
  uint32_t inflight = 0;  // PSNs sent and not cumulatively acknowledged
  bool recovery = false;  // IRN recovery episode
};

class RcHost final : public SimHost {
 public:
  RcHost(RcShared& shared, uint32_t host, uint64_t line_rate_mbps);
  ~RcHost() override;
  void start_flow(uint32_t flow, SimTime now) override;
  void receive(Packet* p, uint32_t in_port, SimTime now) override;
  void port_idle(uint32_t port, SimTime now) override;
  void on_event(SimTime now) override;  // timers: pacing, RTO, DCQCN
  void add_totals(TransportTotals& t) const override;
  [[nodiscard]] const RcTotals& totals() const { return tot_; }
  // The sending state of flow f's QP (false: not opened here).
  [[nodiscard]] bool qp_state(uint32_t flow, RcQpState& out) const;
  // The UDP source port of flow f's QP (fixed: one ECMP path).
  static uint16_t entropy_of(uint32_t flow);
  // Bytes of IRN loss-recovery state flow f holds: the SACK bitmap of its
  // QP here (its sender) and its receiver's bitmap; 0 if the QP is not here.
  [[nodiscard]] size_t recovery_state_bytes(uint32_t flow) const;

 private:
  struct Qp {
    uint32_t flow = 0, dst = 0, npkts = 0;
    uint64_t bytes = 0;
    uint16_t entropy = 0;
    uint32_t una = 0, nxt = 0, max_sent = 0;
    // IRN: PSNs SACKed from una up (base() == una)
    PsnWindow sacked;
    uint32_t high_sack = 0, recover = 0, cursor = 0;
    bool recovery = false;
    SimTime rto_at = SimTime::never();
    // DCQCN
    double rc = 0, rt = 0, alpha = 1.0;
    SimTime next_send{0};
    SimTime alpha_at = SimTime::never(), inc_at = SimTime::never();
    uint32_t t_count = 0, bc_count = 0;
    uint64_t bytes_since = 0;
    bool done = false;
  };
  friend struct RcShared;  // roce_headers() reads the packet types
  enum : uint8_t { kData = 1, kAck = 2, kNak = 3, kSack = 4, kCnp = 5 };

  void service(SimTime now);
  void pull(SimTime now);
  void send_ctrl(uint8_t type, uint32_t flow, uint32_t dst, uint32_t psn, uint32_t aux,
                 SimTime now);
  // The PSN qp would send next, or UINT32_MAX.
  uint32_t next_psn(Qp& q);
  // Every byte of `flow` in order at this receiver: dependents may start.
  void note_delivery(uint32_t flow, SimTime now);
  void on_data(Packet* p, SimTime now);
  void on_ack(uint8_t type, uint32_t flow, uint32_t cum, uint32_t sack, SimTime now);
  void on_cnp(Qp& q, SimTime now);
  void rate_increase(Qp& q);
  void arm_rto(Qp& q, SimTime now);
  void timers(Qp& q, SimTime now);

  RcShared& sh_;
  uint64_t line_mbps_;
  std::vector<Qp> qps_;           // every QP opened here
  std::vector<uint32_t> active_;  // indices into qps_ with work left
  Ring<Packet*> ctrl_;            // ACK / NAK / CNP waiting for the NIC (sent first)
  size_t rr_ = 0;
  RcTotals tot_;
};

}  // namespace metaroce::sim
