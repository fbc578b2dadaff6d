// Names of links on the command line (--pcap, --watch-link, --list-links),
// and of the capture --pcap writes.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <string_view>
#include <utility>

#include "metaroce/sim/output.hpp"

namespace metaroce::sim {
namespace {

bool parse_u32(std::string_view s, uint32_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Splits "X-suffix" into X and suffix ("" when none).
std::string_view cut_suffix(std::string_view s, std::string_view& suffix) {
  const size_t dash = s.rfind('-');
  if (dash == std::string_view::npos) {
    suffix = {};
    return s;
  }
  suffix = s.substr(dash + 1);
  return s.substr(0, dash);
}

// Port number of edge e at node n: ports are numbered in edge order.
uint32_t port_at(const TopoGraph& g, uint32_t node, uint32_t edge) {
  uint32_t port = 0;
  for (uint32_t i = 0; i < edge; ++i)
    if (g.edges[i].a == node || g.edges[i].b == node) ++port;
  return port;
}

// One direction of out.edge from a suffix: `away` (from the named end, which
// is edge.a when named_is_a) or `toward` it; no suffix: both directions.
bool set_direction(LinkRef& out, bool named_is_a, std::string_view suffix, const char* away,
                   const char* toward, std::string& err) {
  if (suffix.empty()) return true;
  if (suffix != away && suffix != toward) {
    err = std::string("link direction must be -") + away + " or -" + toward;
    return false;
  }
  out.fwd = (suffix == away) == named_is_a;
  out.rev = !out.fwd;
  return true;
}

// Whether the fabric has a third tier: a fat-tree's switches are ToRs,
// aggregation and core switches; a two-tier fabric's (leaf-spine,
// rail-optimized) leaves and spines. Read as Report's port kinds are.
bool three_tiers(const TopoGraph& g) {
  return std::any_of(g.switch_tier.begin(), g.switch_tier.end(), [](uint8_t t) { return t >= 2; });
}

// Named for the fabric it is in: a fat-tree's tier 1 is an agg, a
// leaf-spine's a spine (both read "agg/spine", tier 0 "tor/leaf").
const char* tier_name(const TopoGraph& g, bool three, uint32_t sw) {
  static const char* const kThree[] = {"tor", "agg", "core"};
  static const char* const kTwo[] = {"leaf", "spine"};
  const uint8_t t = sw < g.switch_tier.size() ? g.switch_tier[sw] : 0;
  if (three) return t < 3 ? kThree[t] : "switch";
  return t < 2 ? kTwo[t] : "switch";
}

// One end of edge e with its switch as a fault's `link` names it, the tier
// and the index within it: "sw:8:2 [agg 0]", "host:3". The tier alone
// ("[agg]") left the user to count a fault's "agg N" from sw:S.
std::string end_with_tier(const TopoGraph& g, bool three, uint32_t e, bool b_side) {
  std::string n = link_end_name(g, e, b_side);
  const uint32_t node = b_side ? g.edges[e].b : g.edges[e].a;
  if (node >= g.num_hosts) {
    const uint32_t sw = node - g.num_hosts;
    const auto in_tier = std::count(g.switch_tier.begin(), g.switch_tier.begin() + sw,
                                    sw < g.switch_tier.size() ? g.switch_tier[sw] : 0);
    n += std::string(" [") + tier_name(g, three, sw) + " " + std::to_string(in_tier) + "]";
  }
  return n;
}

}  // namespace

bool parse_link(const TopoGraph& g, const std::string& text, LinkRef& out, std::string& err) {
  std::string_view s = text;
  const auto n_edges = static_cast<uint32_t>(g.edges.size());
  out = LinkRef{};
  uint32_t v = 0;
  if (s.starts_with("edge:")) s.remove_prefix(5);
  if (parse_u32(s, v)) {
    if (v >= n_edges) {
      err = "edge " + std::to_string(v) + " out of range (" + std::to_string(n_edges) + " edges)";
      return false;
    }
    out.edge = v;
    return true;
  }
  std::string_view suffix;
  if (s.starts_with("host:")) {
    const std::string_view num = cut_suffix(s.substr(5), suffix);
    if (!parse_u32(num, v) || v >= g.num_hosts) {
      err = "no host '" + std::string(num) + "' (" + std::to_string(g.num_hosts) + " hosts)";
      return false;
    }
    for (uint32_t e = 0; e < n_edges; ++e) {
      const auto& ed = g.edges[e];
      if (ed.a != v && ed.b != v) continue;
      out.edge = e;
      return set_direction(out, ed.a == v, suffix, "up", "down", err);
    }
    err = "host " + std::to_string(v) + " has no link";
    return false;
  }
  if (s.starts_with("sw:")) {
    std::string_view rest = cut_suffix(s.substr(3), suffix);
    const size_t colon = rest.find(':');
    uint32_t sw = 0, port = 0;
    if (colon == std::string_view::npos || !parse_u32(rest.substr(0, colon), sw) ||
        !parse_u32(rest.substr(colon + 1), port) || sw >= g.num_switches) {
      err = "expected sw:S:P with S < " + std::to_string(g.num_switches);
      return false;
    }
    const uint32_t node = g.num_hosts + sw;
    uint32_t k = 0;
    for (uint32_t e = 0; e < n_edges; ++e) {
      const auto& ed = g.edges[e];
      if (ed.a != node && ed.b != node) continue;
      if (k++ != port) continue;
      out.edge = e;
      return set_direction(out, ed.a == node, suffix, "out", "in", err);
    }
    err = "switch " + std::to_string(sw) + " has " + std::to_string(k) + " ports";
    return false;
  }
  err = "link '" + text + "': expected E, edge:E, host:H[-up|-down] or sw:S:P[-out|-in]";
  return false;
}

std::string link_end_name(const TopoGraph& g, uint32_t edge, bool b_side) {
  const uint32_t node = b_side ? g.edges[edge].b : g.edges[edge].a;
  if (node < g.num_hosts) return "host:" + std::to_string(node);
  return "sw:" + std::to_string(node - g.num_hosts) + ":" + std::to_string(port_at(g, node, edge));
}

std::string link_name(const TopoGraph& g, const LinkRef& l) {
  const bool three = three_tiers(g);
  std::string s = "edge " + std::to_string(l.edge) + " (" + end_with_tier(g, three, l.edge, false) +
                  " <-> " + end_with_tier(g, three, l.edge, true) + ")";
  if (l.fwd != l.rev) s += l.fwd ? " a->b" : " b->a";
  return s;
}

std::string default_output_path(const std::string& name, const std::string& transport,
                                std::string_view suffix) {
  std::string s = name + "-" + transport;
  for (char& c : s) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-';
    if (!safe) c = '_';
  }
  if (s[0] == '.' || s[0] == '-') s[0] = '_';  // not hidden, "..", or read as an option
  return s.append(suffix);
}

std::string list_links(const TopoGraph& g, bool json) {
  std::string s = json ? "["
                       : "# edge  a  b  rate  delay   (--pcap / --watch-link take E, "
                         "host:H[-up|-down], sw:S:P[-out|-in])\n";
  char b[256];
  const bool three = three_tiers(g);
  // Parallel links (a leaf-spine's links_per_spine > 1) are told apart by
  // their index among the links joining the same two nodes: a fault's
  // `link = [A, B, I]`.
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> joining, seen;
  const auto ends = [&](uint32_t e) -> std::pair<uint32_t, uint32_t> {
    return std::minmax(g.edges[e].a, g.edges[e].b);
  };
  for (uint32_t e = 0; e < g.edges.size(); ++e) ++joining[ends(e)];
  for (uint32_t e = 0; e < g.edges.size(); ++e) {
    const auto& ed = g.edges[e];
    const double gbps = static_cast<double>(ed.spec.rate_mbps) / 1000.0;
    const uint32_t n = joining[ends(e)];
    if (json) {
      // The names a script hands to --pcap / --watch-link, and the switch as
      // a fault's `link` names it ("tor 0"), null for a host. Names hold no
      // character JSON would want escaped.
      const auto end = [&](bool b_side) {
        const std::string full = end_with_tier(g, three, e, b_side);
        const auto bracket = full.find(" [");
        const std::string name = full.substr(0, bracket);
        const std::string sw =
            bracket == std::string::npos
                ? "null"
                : "\"" + full.substr(bracket + 2, full.size() - bracket - 3) + "\"";
        return std::make_pair(name, sw);
      };
      const auto [a, a_sw] = end(false);
      const auto [bn, b_sw] = end(true);
      std::snprintf(b, sizeof b,
                    "%s\n  {\"edge\": %u, \"a\": \"%s\", \"a_switch\": %s, \"b\": \"%s\", "
                    "\"b_switch\": %s, \"rate_gbps\": %.12g, \"delay_us\": %.12g, "
                    "\"parallel\": %u, \"parallel_of\": %u}",
                    e == 0 ? "" : ",", e, a.c_str(), a_sw.c_str(), bn.c_str(), b_sw.c_str(), gbps,
                    ed.spec.delay.us(), seen[ends(e)]++, n);
      s += b;
      continue;
    }
    // %.12g, as the JSON: %.0f printed a 12.5 Gb/s link as 12 (or 13).
    std::snprintf(b, sizeof b, "%u  %s  %s  %.12g Gb/s  %.3f us", e,
                  end_with_tier(g, three, e, false).c_str(),
                  end_with_tier(g, three, e, true).c_str(), gbps, ed.spec.delay.us());
    s += b;
    if (n > 1)
      s += "  (parallel link " + std::to_string(seen[ends(e)]++) + " of " + std::to_string(n) + ")";
    s += "\n";
  }
  if (json) s += "\n]\n";
  return s;
}

}  // namespace metaroce::sim
