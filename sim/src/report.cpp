// The run's report as text: the JSON object `--json` prints (field names are
// an interface: scripts and BENCHMARKS.md read them) and the terminal summary.
#include <cstdio>
#include <string>

#include "metaroce/sim/simulation.hpp"

namespace metaroce::sim {

namespace {

struct Out {
  std::string s;
  bool first = true;
  void key(const char* k) {
    s += first ? "\n  \"" : ",\n  \"";
    first = false;
    s += k;
    s += "\": ";
  }
  void str(const char* k, const std::string& v) {
    key(k);
    s += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') {
        s += '\\';
        s += c;
      } else if (c == '\n') {
        s += "\\n";
      } else if (c == '\t') {
        s += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20) {  // JSON wants them escaped
        char u[8];
        std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(c));
        s += u;
      } else {
        s += c;
      }
    }
    s += '"';
  }
  void u(const char* k, uint64_t v) {
    key(k);
    s += std::to_string(v);
  }
  void d(const char* k, double v, int prec = 3) {
    key(k);
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", prec, v);
    s += b;
  }
};

}  // namespace

std::string Report::to_json(bool timing) const {
  Out o;
  o.s = "{";
  o.str("preset", name);
  o.str("transport", transport);
  o.str("topology", topology);
  o.u("seed", seed);
  o.u("hosts", hosts);
  o.u("flows", flows);
  o.u("flows_completed", flows_completed);
  o.u("flows_failed", flows_failed);
  o.d("completion_us", completion_us);
  o.d("ideal_us", ideal_us);
  o.d("completion_over_ideal", ideal_us > 0 ? completion_us / ideal_us : 0, 4);
  o.d("warmup_us", warmup_us);
  o.d("fct_p50_us", fct_p50_us);
  o.d("fct_p99_us", fct_p99_us);
  o.d("fct_max_us", fct_max_us);
  o.d("fct_mean_us", fct_mean_us);
  o.u("delivered_bytes", delivered_bytes);
  o.d("goodput_gbps", goodput_gbps);
  o.u("drops", drops);
  o.u("trimmed", trimmed);
  o.u("fault_drops", fault_drops);
  o.u("no_route_drops", no_route_drops);
  o.u("ecn_marks", ecn_marks);
  o.u("max_queue_bytes", max_queue_bytes);
  o.u("packets_forwarded", packets_forwarded);
  o.u("data_packets_sent", transport_totals.data_packets_sent);
  o.u("retransmissions", transport_totals.retransmissions);
  o.u("timeouts", transport_totals.timeouts);
  o.u("losses_declared", transport_totals.losses_declared);
  o.u("path_retirements", transport_totals.path_retirements);
  o.u("ce_received", transport_totals.ce_received);
  o.u("duplicates_received", transport_totals.duplicates_received);
  o.u("acks_sent", transport_totals.acks_sent);
  o.u("bad_packets", transport_totals.bad_packets);
  o.u("connect_failures", connect_failures);
  o.u("errors", errors);
  o.d("pfc_pause_us", pfc_pause_us);
  o.u("pfc_pauses", pfc_pauses);
  o.d("sim_time_us", sim_time_us);
  o.u("events", events);
  o.u("packet_pool_peak", packet_pool_peak);
  o.d("link_util_mean", link_util_mean, 4);
  o.d("link_util_max", link_util_max, 4);
  o.u("links_used", links_used);
  const std::pair<const char*, const double*> waits[] = {{"queue_wait_data_us", data_wait_us},
                                                         {"queue_wait_ctrl_us", ctrl_wait_us}};
  for (const auto& [key, v] : waits) {
    o.key(key);
    o.s += "{";
    const char* sep = "";
    for (size_t k = 0; k < kPortKinds; ++k) {
      if (port_kind_names[k] == nullptr) continue;
      char b[64];
      std::snprintf(b, sizeof b, "%s\"%s\": %.3f", sep, port_kind_names[k], v[k]);
      o.s += b;
      sep = ", ";
    }
    o.s += "}";
  }
  if (!per_path.empty()) {
    o.key("per_path");
    o.s += "[";
    for (size_t i = 0; i < per_path.size(); ++i) {
      const PathSlotTotals& p = per_path[i];
      char b[256];
      std::snprintf(b, sizeof b,
                    "%s\n    {\"slot\": %zu, \"packets_sent\": %llu, \"retransmissions\": %llu, "
                    "\"ce_marks\": %llu, \"losses\": %llu, \"timeouts\": %llu, "
                    "\"retirements\": %llu}",
                    i == 0 ? "" : ",", i, static_cast<unsigned long long>(p.packets_sent),
                    static_cast<unsigned long long>(p.retransmissions),
                    static_cast<unsigned long long>(p.ce_marks),
                    static_cast<unsigned long long>(p.losses),
                    static_cast<unsigned long long>(p.timeouts),
                    static_cast<unsigned long long>(p.retirements));
      o.s += b;
    }
    o.s += "\n  ]";
  }
  char dg[32];
  std::snprintf(dg, sizeof dg, "%016llx", static_cast<unsigned long long>(digest));
  o.str("digest", dg);
  if (timing) {
    o.d("wall_s", wall_s);
    o.d("events_per_s", events_per_s, 0);
    o.d("peak_rss_mib", peak_rss_mib, 1);
  }
  o.s += "\n}\n";
  return o.s;
}

std::string Report::to_text(bool timing) const {
  char b[2048];
  std::string s;
  // Why flows failed, where the run knows: a handshake that gave up.
  std::string failed = std::to_string(flows_failed) + " failed";
  if (connect_failures > 0)
    failed += ": " + std::to_string(connect_failures) +
              (connect_failures == 1 ? " connection" : " connections") +
              " not established, the handshake gave up";
  const std::string unfinished =
      flows_completed == flows ? ""
                               : " (lower bounds: " + std::to_string(flows - flows_completed) +
                                     (flows - flows_completed == 1 ? " flow" : " flows") +
                                     " unfinished, counted at their age when the run ended)";
  // Said only when it happens: a host cut off by a link down and a reroute.
  const std::string no_route = no_route_drops == 0
                                   ? ""
                                   : "  no route: " + std::to_string(no_route_drops) +
                                         " packets lost, their destination host unreachable\n";
  std::snprintf(
      b, sizeof b,
      "%s  transport=%s  seed=%llu\n  topology: %s, %u hosts\n"
      "  flows: %llu/%llu completed (%s)\n"
      "  completion: %.3f us  (ideal %.3f us, ratio %.3f; after a %.1f us connection warm-up)\n"
      "  FCT%s: p50 %.3f us  p99 %.3f us  max %.3f us  mean %.3f us\n"
      "  goodput: %.3f Gbit/s  (%llu payload bytes delivered over the completion time)\n"
      "  network: %llu drops, %llu trimmed, %llu fault drops, %llu ECN marks, max queue %llu B, "
      "pfc pause %.1f us\n%s"
      "  transport: %llu data packets, %llu retransmissions, %llu timeouts, %llu path "
      "retirements, %llu CE received\n"
      "  events: %llu  digest %016llx\n",
      name.c_str(), transport.c_str(), static_cast<unsigned long long>(seed), topology.c_str(),
      hosts, static_cast<unsigned long long>(flows_completed),
      static_cast<unsigned long long>(flows), failed.c_str(), completion_us, ideal_us,
      ideal_us > 0 ? completion_us / ideal_us : 0.0, warmup_us, unfinished.c_str(), fct_p50_us,
      fct_p99_us, fct_max_us, fct_mean_us, goodput_gbps,
      static_cast<unsigned long long>(delivered_bytes), static_cast<unsigned long long>(drops),
      static_cast<unsigned long long>(trimmed), static_cast<unsigned long long>(fault_drops),
      static_cast<unsigned long long>(ecn_marks), static_cast<unsigned long long>(max_queue_bytes),
      pfc_pause_us, no_route.c_str(),
      static_cast<unsigned long long>(transport_totals.data_packets_sent),
      static_cast<unsigned long long>(transport_totals.retransmissions),
      static_cast<unsigned long long>(transport_totals.timeouts),
      static_cast<unsigned long long>(transport_totals.path_retirements),
      static_cast<unsigned long long>(transport_totals.ce_received),
      static_cast<unsigned long long>(events), static_cast<unsigned long long>(digest));
  s += b;
  std::snprintf(
      b, sizeof b, "  links: utilization mean %.1f %%, max %.1f %% (%llu directions used)\n",
      100 * link_util_mean, 100 * link_util_max, static_cast<unsigned long long>(links_used));
  s += b;
  s += "  mean queue wait, us (data / control):";
  const char* sep = "";
  for (size_t k = 0; k < kPortKinds; ++k) {
    if (port_kind_names[k] == nullptr) continue;
    std::snprintf(b, sizeof b, "%s %s %.2f/%.2f", sep, port_kind_names[k], data_wait_us[k],
                  ctrl_wait_us[k]);
    s += b;
    sep = ",";
  }
  s += "\n";
  if (!per_path.empty()) {
    // The JSON's six counts: losses and retirements tell a lossy path from
    // a slow one.
    s += "  per path slot (data packets / retx / CE / losses / timeouts / retirements):";
    for (size_t i = 0; i < per_path.size(); ++i) {
      const PathSlotTotals& p = per_path[i];
      std::snprintf(b, sizeof b, "%s %zu: %llu/%llu/%llu/%llu/%llu/%llu", i == 0 ? "" : ",", i,
                    static_cast<unsigned long long>(p.packets_sent),
                    static_cast<unsigned long long>(p.retransmissions),
                    static_cast<unsigned long long>(p.ce_marks),
                    static_cast<unsigned long long>(p.losses),
                    static_cast<unsigned long long>(p.timeouts),
                    static_cast<unsigned long long>(p.retirements));
      s += b;
    }
    s += "\n";
  }
  if (timing) {
    std::snprintf(b, sizeof b, "  wall: %.3f s  (%.0f events/s), peak RSS %.1f MiB\n", wall_s,
                  events_per_s, peak_rss_mib);
    s += b;
  }
  return s;
}

}  // namespace metaroce::sim
