// Every duration of EndpointConfig, once: config_error (config.cpp) checks
// each against its range and the constructor (endpoint.cpp) caps each at
// kMaxDurationNs. Two hand-kept lists of the same fields drifted apart.
#pragma once

#include <cstdint>
#include <type_traits>

#include "metaroce/config.hpp"

namespace metaroce::detail {

// Calls f(name, field, zero_allowed, rule) for each duration of `cfg`, in the
// order config_error reports them; field is a reference, const or not as cfg
// is. zero_allowed: 0 means "off" or "at once" rather than a mistake.
template <class Config, class F>
requires std::is_same_v<std::remove_const_t<Config>, EndpointConfig>
void for_each_duration(Config& cfg, F&& f) {
  f("ack_delay_ns", cfg.ack_delay_ns, true, "ACK-5");
  f("connect_retry_ns", cfg.connect_retry_ns, false, "CONN-2");
  f("context_idle_ns", cfg.context_idle_ns, true, "context pooling");
  f("cc.target_queue_delay_ns", cfg.cc.target_queue_delay_ns, true, "CC-5");
  f("cc.explore_interval_ns", cfg.cc.explore_interval_ns, true, "PATH-8");
  f("recovery.initial_rtt_ns", cfg.recovery.initial_rtt_ns, false, "LOSS-4");
  f("recovery.min_rto_ns", cfg.recovery.min_rto_ns, false, "LOSS-4");
  f("recovery.max_rto_ns", cfg.recovery.max_rto_ns, false, "LOSS-5");
  f("recovery.peer_timeout_ns", cfg.recovery.peer_timeout_ns, false, "PATH-7");
  f("recovery.keepalive_ns", cfg.recovery.keepalive_ns, true, "CONN-9");
  f("recovery.rnr_retry_ns", cfg.recovery.rnr_retry_ns, false, "LOSS-7");
}

}  // namespace metaroce::detail
