// Prints the ranges config_error() enforces, probed at their edges, for
// check_spec.py --ranges to hold the spec's parameter tables (sections 8.3,
// 9, appendix B) to them:
//
//   range NAME LO HI     NAME refused out of LO..HI ("any": never refused)
//   relation TEXT        a relation between fields, refused just past its edge
//
// Each range is read from config_error's own words for a value outside it
// (0, else the field's largest), then probed: LO and HI draw no complaint
// about the field, LO - 1 and HI + 1 (where the type holds them) draw
// exactly that range. Exit 1, saying what, where a probe disagrees.
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "metaroce/config.hpp"

namespace {

using metaroce::EndpointConfig;

struct Field {
  const char* name;  // as config_error names it
  std::function<void(EndpointConfig&, uint64_t)> set;
  uint64_t type_max;
};

// (clang-format reads the lambda's parameter in a macro as a product.)
// clang-format off
#define METAROCE_FIELD(path)                                                               \
  Field{#path,                                                                             \
        [](EndpointConfig& c, uint64_t v) { c.path = static_cast<decltype(c.path)>(v); },  \
        std::numeric_limits<decltype(EndpointConfig{}.path)>::max()}
// clang-format on

std::vector<Field> fields() {
  return {METAROCE_FIELD(mtu),
          METAROCE_FIELD(window_log2),
          METAROCE_FIELD(num_paths),
          METAROCE_FIELD(sq_depth),
          METAROCE_FIELD(rq_depth),
          METAROCE_FIELD(shared_rq_depth),
          METAROCE_FIELD(max_reads),
          METAROCE_FIELD(ack_every),
          METAROCE_FIELD(max_reads_served),
          METAROCE_FIELD(ack_delay_ns),
          METAROCE_FIELD(entropy_min),
          METAROCE_FIELD(entropy_max),
          METAROCE_FIELD(control_dscp),
          METAROCE_FIELD(data_dscp),
          METAROCE_FIELD(reply_port),
          METAROCE_FIELD(max_connections),
          METAROCE_FIELD(connect_retry_ns),
          METAROCE_FIELD(connect_attempts),
          METAROCE_FIELD(disconnect_attempts),
          METAROCE_FIELD(context_idle_ns),
          METAROCE_FIELD(seed),
          METAROCE_FIELD(cc.initial_cwnd_packets),
          METAROCE_FIELD(cc.min_cwnd_packets),
          METAROCE_FIELD(cc.max_cwnd_packets),
          METAROCE_FIELD(cc.dctcp_g_shift),
          METAROCE_FIELD(cc.target_queue_delay_ns),
          METAROCE_FIELD(cc.max_delay_decrease_pct),
          METAROCE_FIELD(cc.max_inflight_packets),
          METAROCE_FIELD(cc.explore_interval_ns),
          METAROCE_FIELD(recovery.reorder_threshold),
          METAROCE_FIELD(recovery.initial_rtt_ns),
          METAROCE_FIELD(recovery.min_rto_ns),
          METAROCE_FIELD(recovery.max_rto_ns),
          METAROCE_FIELD(recovery.rto_failures_to_retire),
          METAROCE_FIELD(recovery.loss_window_packets),
          METAROCE_FIELD(recovery.retire_loss_pct),
          METAROCE_FIELD(recovery.rnr_retry_limit),
          METAROCE_FIELD(recovery.peer_timeout_ns),
          METAROCE_FIELD(recovery.keepalive_ns),
          METAROCE_FIELD(recovery.rnr_retry_ns)};
}

#undef METAROCE_FIELD

// config_error with the field at v, the rest at their defaults.
std::string error_at(const Field& f, uint64_t v) {
  EndpointConfig c;
  f.set(c, v);
  return metaroce::config_error(c);
}

// The range config_error names for the field at v, if it refuses v for it:
// "NAME V is out of range LO..HI (RULE)".
bool range_named(const Field& f, uint64_t v, uint64_t& lo, uint64_t& hi) {
  const std::string e = error_at(f, v);
  const std::string head = std::string(f.name) + " " + std::to_string(v) + " is out of range ";
  if (e.rfind(head, 0) != 0) return false;
  return std::sscanf(e.c_str() + head.size(), "%" SCNu64 "..%" SCNu64, &lo, &hi) == 2;
}

bool probe(const Field& f) {
  uint64_t lo = 0, hi = 0;
  if (!range_named(f, 0, lo, hi) && !range_named(f, f.type_max, lo, hi)) {
    std::printf("range %s any\n", f.name);
    return true;
  }
  uint64_t l = 0, h = 0;
  bool ok = lo <= hi && !range_named(f, lo, l, h) && !range_named(f, hi, l, h);
  if (lo > 0) ok = ok && range_named(f, lo - 1, l, h) && l == lo && h == hi;
  if (hi < f.type_max) ok = ok && range_named(f, hi + 1, l, h) && l == lo && h == hi;
  if (!ok) {
    std::fprintf(stderr,
                 "%s: config_error names %" PRIu64 "..%" PRIu64 " but does not hold to it\n",
                 f.name, lo, hi);
    return false;
  }
  std::printf("range %s %" PRIu64 " %" PRIu64 "\n", f.name, lo, hi);
  return true;
}

// A relation: set(c, false) is accepted, set(c, true), one step beyond its
// edge, refused.
struct Relation {
  const char* text;
  std::function<void(EndpointConfig&, bool past)> set;
};

std::vector<Relation> relations() {
  return {
      {"recovery.min_rto_ns <= recovery.max_rto_ns",
       [](EndpointConfig& c, bool past) {
         c.recovery.min_rto_ns = c.recovery.max_rto_ns + (past ? 1 : 0);
       }},
      {"ack_delay_ns < recovery.min_rto_ns",
       [](EndpointConfig& c, bool past) {
         c.ack_delay_ns = c.recovery.min_rto_ns - (past ? 0 : 1);
       }},
      {"recovery.peer_timeout_ns > recovery.min_rto_ns",
       [](EndpointConfig& c, bool past) {
         c.recovery.peer_timeout_ns = c.recovery.min_rto_ns + (past ? 0 : 1);
       }},
      {"entropy_max - entropy_min + 1 >= num_paths",
       [](EndpointConfig& c, bool past) {
         c.entropy_min = static_cast<uint16_t>(c.entropy_max - c.num_paths + (past ? 2 : 1));
       }},
      {"entropy_min <= entropy_max",
       [](EndpointConfig& c, bool past) {
         c.num_paths = 1;
         c.entropy_max = 1000;
         c.entropy_min = past ? 1001 : 1000;
       }},
      {"cc.min_cwnd_packets <= num_paths * min(cc.max_cwnd_packets, 2^window_log2)",
       [](EndpointConfig& c, bool past) {
         c.num_paths = 3;
         c.cc.max_cwnd_packets = 10;
         c.cc.min_cwnd_packets = past ? 31 : 30;
       }},
      {"cc.min_cwnd_packets <= num_paths * 2^window_log2 (cc.max_cwnd_packets 0)",
       [](EndpointConfig& c, bool past) {
         c.num_paths = 2;
         c.window_log2 = 6;
         c.cc.min_cwnd_packets = past ? 129 : 128;
       }},
  };
}

bool probe(const Relation& r) {
  EndpointConfig in, out;
  r.set(in, false);
  r.set(out, true);
  const std::string e_in = metaroce::config_error(in), e_out = metaroce::config_error(out);
  if (!e_in.empty() || e_out.empty()) {
    std::fprintf(stderr, "relation %s: inside %s, past %s\n", r.text,
                 e_in.empty() ? "accepted" : ("refused: " + e_in).c_str(),
                 e_out.empty() ? "accepted" : ("refused: " + e_out).c_str());
    return false;
  }
  std::printf("relation %s\n", r.text);
  return true;
}

}  // namespace

int main() {
  bool ok = metaroce::config_error(EndpointConfig{}).empty();
  if (!ok) std::fprintf(stderr, "the defaults are refused\n");
  for (const Field& f : fields()) ok = probe(f) && ok;
  for (const Relation& r : relations()) ok = probe(r) && ok;
  return ok ? 0 : 1;
}
