// config_error: the ranges EndpointConfig's fields must lie in, checked in
// one place so that every driver refuses a bad option with the same words.
// The constructor (endpoint.cpp) clamps, as a backstop for callers that skip
// this check, the fields whose raw values would break the engine's own
// arithmetic (a byte count overflowing, a shift of 64 or more, a deadline
// wrapping); the others it runs with as given, which config_error would have
// refused.
#include <string>

#include "durations.hpp"
#include "impl.hpp"

namespace metaroce {
namespace {

struct Check {
  std::string error;

  void range(const char* name, uint64_t value, uint64_t lo, uint64_t hi, const char* rule) {
    if (!error.empty() || (value >= lo && value <= hi)) return;
    error = std::string(name) + " " + std::to_string(value) + " is out of range " +
            std::to_string(lo) + ".." + std::to_string(hi) + " (" + rule + ")";
  }
  void duration(const char* name, uint64_t ns, bool zero_allowed, const char* rule) {
    range(name, ns, zero_allowed ? 0 : 1, kMaxDurationNs, rule);
  }
  void require(bool ok, const std::string& why) {
    if (error.empty() && !ok) error = why;
  }
};

}  // namespace

std::string config_error(const EndpointConfig& cfg) {
  Check k;
  k.range("mtu", cfg.mtu, kMinMtu, kMaxMtu, "SEQ-5");
  k.range("window_log2", cfg.window_log2, kMinWindowLog2, kMaxWindowLog2, "SEQ-3");
  k.range("num_paths", cfg.num_paths, 1, kMaxPaths, "PATH-1");
  k.range("sq_depth", cfg.sq_depth, 1, detail::kRespSlotFlag, "send queue");
  k.range("rq_depth", cfg.rq_depth, 1, UINT16_MAX, "receive queue");
  k.range("shared_rq_depth", cfg.shared_rq_depth, 0, kMaxSharedRqDepth, "PLACE-6");
  k.range("max_reads", cfg.max_reads, 1, UINT8_MAX, "READ-3");
  k.range("ack_every", cfg.ack_every, 1, UINT8_MAX, "ACK-1");
  k.range("max_reads_served", cfg.max_reads_served, 1, UINT16_MAX, "READ-6");
  k.require(
      cfg.entropy_min <= cfg.entropy_max && cfg.entropy_max - cfg.entropy_min + 1u >= cfg.num_paths,
      "entropy range " + std::to_string(cfg.entropy_min) + ".." + std::to_string(cfg.entropy_max) +
          " holds fewer than num_paths " + std::to_string(cfg.num_paths) + " values (PATH-1)");
  k.range("control_dscp", cfg.control_dscp, 0, kMaxDscp, "ENC-6");
  k.range("data_dscp", cfg.data_dscp, 0, kMaxDscp, "ENC-6");
  k.range("max_connections", cfg.max_connections, 1, kConnIndexMask, "connection ids");
  k.range("connect_attempts", cfg.connect_attempts, 1, UINT16_MAX, "CONN-2");
  k.range("disconnect_attempts", cfg.disconnect_attempts, 1, UINT16_MAX, "CONN-7");

  const CcConfig& cc = cfg.cc;
  k.range("cc.initial_cwnd_packets", cc.initial_cwnd_packets, 1, kMaxPacketCount, "CC-1");
  k.range("cc.min_cwnd_packets", cc.min_cwnd_packets, 1, kMaxPacketCount, "CC-6");
  k.range("cc.max_cwnd_packets", cc.max_cwnd_packets, 0, kMaxPacketCount, "CC-6");
  // CC-6: the floor is the connection's, split over its paths; the ceiling
  // is each path's, max_cwnd_packets or the window (SEQ-3), whichever is
  // smaller. A floor above the ceilings would keep every cut from biting.
  // (The handshake may agree a smaller window with the peer; this judges
  // the endpoint's own.)
  if (cfg.window_log2 >= kMinWindowLog2 && cfg.window_log2 <= kMaxWindowLog2) {
    const uint64_t window = uint64_t{1} << cfg.window_log2;
    const uint64_t ceiling =
        cc.max_cwnd_packets == 0 ? window : std::min<uint64_t>(cc.max_cwnd_packets, window);
    k.require(ceiling * std::max<uint8_t>(cfg.num_paths, 1) >= cc.min_cwnd_packets,
              "cc.min_cwnd_packets " + std::to_string(cc.min_cwnd_packets) +
                  " is above num_paths " + std::to_string(cfg.num_paths) +
                  " times a path's largest window, " + std::to_string(ceiling) +
                  " packets (cc.max_cwnd_packets or the window; CC-6)");
  }
  k.range("cc.dctcp_g_shift", cc.dctcp_g_shift, 0, kMaxDctcpGShift, "CC-3");
  k.range("cc.max_delay_decrease_pct", cc.max_delay_decrease_pct, 0, 100, "CC-5");
  k.range("cc.max_inflight_packets", cc.max_inflight_packets, 0, kMaxPacketCount, "CC-9");

  const RecoveryConfig& r = cfg.recovery;
  k.range("recovery.reorder_threshold", r.reorder_threshold, 1, kMaxPacketCount, "LOSS-2");
  detail::for_each_duration(
      cfg, [&k](const char* name, uint64_t ns, bool zero_allowed, const char* rule) {
        k.duration(name, ns, zero_allowed, rule);
      });
  k.require(r.min_rto_ns <= r.max_rto_ns, "recovery.min_rto_ns " + std::to_string(r.min_rto_ns) +
                                              " is above recovery.max_rto_ns " +
                                              std::to_string(r.max_rto_ns) + " (LOSS-4)");
  // ACK-5, LOSS-4: a delayed ACK leaves up to ack_delay after its packet
  // arrived, and the sender's RTO is min_rto at the least: at min_rto or
  // more, every packet whose ACK waits out the delay is resent and its path
  // timed out (PATH-4), on any network. One configuration judges both ends:
  // the delay is the receiver's, the RTO the sender's.
  k.require(cfg.ack_delay_ns < r.min_rto_ns,
            "ack_delay_ns " + std::to_string(cfg.ack_delay_ns) +
                " is not below recovery.min_rto_ns " + std::to_string(r.min_rto_ns) +
                " (ACK-5, LOSS-4: a delayed ACK would come after the RTO)");
  // PATH-7, LOSS-4, CONN-9: the first retransmission of a lost packet, and a
  // keepalive's second PROBE after an unanswered first, come one RTO after
  // the send, min_rto at the least, while the peer timeout counts from that
  // send or earlier. At min_rto or less one lost packet fails a live
  // connection before anything is sent again. (keepalive_ns is the quiet
  // before the first PROBE and bounds neither.)
  k.require(r.peer_timeout_ns > r.min_rto_ns,
            "recovery.peer_timeout_ns " + std::to_string(r.peer_timeout_ns) +
                " is not above recovery.min_rto_ns " + std::to_string(r.min_rto_ns) +
                " (PATH-7, LOSS-4: one lost packet would fail the connection before its "
                "retransmission)");
  k.range("recovery.rto_failures_to_retire", r.rto_failures_to_retire, 1, UINT8_MAX, "PATH-4");
  k.range("recovery.loss_window_packets", r.loss_window_packets, 1, kMaxPacketCount, "PATH-5");
  k.range("recovery.retire_loss_pct", r.retire_loss_pct, 0, 100, "PATH-5");
  k.range("recovery.rnr_retry_limit", r.rnr_retry_limit, 0, UINT16_MAX - 1, "LOSS-7");
  return k.error;
}

}  // namespace metaroce
