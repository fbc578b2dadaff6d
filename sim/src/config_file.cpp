// TOML scenario files: one reader per section, each checking its keys, so a
// typo or a wrong type is reported with its file, line and key.
#include "metaroce/sim/config_file.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "metaroce/sim/settings.hpp"
#include "metaroce/sim/topology.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {
namespace {

constexpr uint64_t kMbpsPerGbps = 1000;
// A link's rate and delay go into picosecond products (the BDP: round trip
// x rate) that must hold in 64 bits: at 100 Tb/s, a round trip of 6 links of
// 10 ms each is 1.2e19 ps x Mb/s. Beyond, llround itself is undefined (a
// 1e30 Gb/s link read an ideal of 0 us).
constexpr double kMinGbps = 0.001;
constexpr double kMaxGbps = 100'000;
constexpr double kMaxLinkDelayUs = 10'000;
// Host ids are 16 bits in the captures' addresses (10.0.x.x). The links'
// bound is 20 times the largest fat-tree's (k = 64: 196,608): it keeps a
// dimension typed one digit too long from allocating without end (4e9
// spines ended in std::bad_alloc and abort).
constexpr double kMaxHosts = 65'536;
constexpr double kMaxLinks = 4'194'304;
// Flows in one scenario: 64 times rail1024-allreduce64m's 260,096 (an
// all-to-all of 4096 hosts fits), and below the flow ids' 32 bits.
constexpr double kMaxFlows = 16'777'216;

// "FILE:LINE:COLUMN: message"
std::string located(const std::string& source, const toml::source_region& where,
                    const std::string& msg) {
  return source + ":" + std::to_string(where.begin.line) + ":" +
         std::to_string(where.begin.column) + ": " + msg;
}

class Reader {
 public:
  Reader(std::string source, std::string base_dir, uint64_t seed, std::vector<std::string>* given)
      : source_(std::move(source)), base_dir_(std::move(base_dir)), seed_(seed), given_(given) {}

  SimConfig read(const toml::table& root) {
    // Beside the scenario's own keys, the settings table's (settings.cpp),
    // named as --set names them: KEY at the top, SECTION.KEY as KEY in
    // [SECTION]. num_paths and ack_every, say, are EndpointConfig's own
    // fields, outside its cc and recovery: top-level keys, as on --set.
    std::vector<std::string_view> allowed = {"name", "topology", "workload", "fault"};
    std::vector<std::string> sections;
    for (const std::string_view k : setting_keys()) {
      const size_t dot = k.find('.');
      if (dot != std::string_view::npos &&
          std::find(sections.begin(), sections.end(), k.substr(0, dot)) == sections.end())
        sections.emplace_back(k.substr(0, dot));
      if (std::find(allowed.begin(), allowed.end(), k.substr(0, dot)) == allowed.end())
        allowed.push_back(k.substr(0, dot));
    }
    keys(root, "", allowed);
    SimConfig c;
    c.name = opt_string(root, "", "name").value_or("config");
    // The report's first line and --pcap's file name: "" gave an empty line
    // and "-metaroce.pcap". Refused, as metaroce-sim refuses an empty value
    // of its options; leaving the key out gives the documented "config".
    if (std::all_of(c.name.begin(), c.name.end(),
                    [](unsigned char ch) { return std::isspace(ch) != 0; }))
      fail(*root.get("name"),
           "name: empty or blank; give the report a name, or leave the key out for \"config\"");
    for (auto&& [k, n] : root)
      if (setting_range(k.str())) tunable(c, k, n, std::string(k.str()), "");
    c.topo = topology(table(root, "", "topology"));
    for (const std::string& section : sections)
      if (root.contains(section)) tunables(table(root, "", section), section, c);
    if (root.contains("queue")) queue_check(*root.get("queue")->as_table(), c.queue);
    engine_check(root, c);
    const toml::array& wl = array(root, "", "workload");
    if (wl.empty()) fail(root, "workload: at least one [[workload]] is needed");
    for (const toml::node& w : wl) workload(as_table(w, "workload"), c);
    if (root.contains("fault")) {
      std::vector<const toml::table*> where;
      for (const toml::node& f : array(root, "", "fault")) {
        where.push_back(&as_table(f, "fault"));
        c.faults.push_back(fault(*where.back(), where.size() - 1, c.topo));
      }
      link_sequence(c.faults, where);
    }
    return c;
  }

 private:
  // ---------------------------------------------------------------- sections

  TopoGraph topology(const toml::table& t) {
    const std::string kind = string(t, "topology", "kind");
    std::vector<std::string_view> allowed;
    if (kind == "fat_tree") {
      allowed = {"k"};
    } else if (kind == "leaf_spine") {
      allowed = {"leaves", "hosts_per_leaf", "spines", "links_per_spine"};
    } else if (kind == "rail") {
      allowed = {"servers", "rails", "servers_per_group", "spines"};
    } else {
      fail(*t.get("kind"), "topology.kind: unknown '" + kind + "' (leaf_spine, fat_tree, rail)");
    }
    for (const char* k :
         {"kind", "host_rate_gbps", "host_delay_us", "fabric_rate_gbps", "fabric_delay_us"})
      allowed.emplace_back(k);
    keys(t, "topology", allowed);  // a typo is named before the key it misspells is missed
    const LinkSpec host = link(t, "host"), fabric = link(t, "fabric");
    auto dim = [&](const char* k) { return u32(t, "topology", k); };
    // Counted before the build, in doubles: the builders multiply in 32 bits,
    // and 65536 leaves x 65537 hosts wrapped to 65536 hosts, all on leaf 0.
    auto size_check = [&](double hosts, double links) {
      if (hosts > kMaxHosts) fail(t, "topology: " + count(hosts) + " hosts, more than 65536");
      if (links > kMaxLinks) fail(t, "topology: " + count(links) + " links, more than 4194304");
    };
    if (kind == "fat_tree") {
      const uint32_t k = dim("k");
      if (k < 2 || k % 2 != 0 || k > 64) fail(*t.get("k"), "topology.k: an even number 2..64");
      return fat_tree(k, host, fabric);
    }
    if (kind == "leaf_spine") {
      const uint32_t lps = t.contains("links_per_spine") ? dim("links_per_spine") : 1;
      const uint32_t leaves = dim("leaves"), per_leaf = dim("hosts_per_leaf");
      const uint32_t spines = dim("spines");
      const double hosts = static_cast<double>(leaves) * per_leaf;
      size_check(hosts, hosts + static_cast<double>(leaves) * spines * lps);
      return build(t, [&] { return leaf_spine(leaves, per_leaf, spines, host, fabric, lps); });
    }
    const uint32_t servers = dim("servers"), rails = dim("rails");
    const uint32_t per_group = dim("servers_per_group"), spines = dim("spines");
    const double hosts = static_cast<double>(servers) * rails;
    // (servers_per_group 0, or not dividing servers: the builder's message)
    if (per_group != 0)
      size_check(hosts, hosts + static_cast<double>(servers / per_group) * rails * spines);
    rail_ = {servers, rails};
    return build(t,
                 [&] { return rail_optimized(servers, rails, per_group, spines, host, fabric); });
  }

  template <class F>
  TopoGraph build(const toml::table& t, F&& f) {
    try {
      TopoGraph g = f();
      if (g.num_hosts > kMaxHosts) fail(t, "topology: more than 65536 hosts");
      return g;
    } catch (const std::invalid_argument& e) {
      fail(t, std::string("topology: ") + e.what());
    }
  }

  LinkSpec link(const toml::table& t, const std::string& which) {
    LinkSpec l;
    const std::string rate = which + "_rate_gbps", delay = which + "_delay_us";
    l.rate_mbps = rate_mbps(*t.get(rate), "topology." + rate, number(t, "topology", rate));
    const double us = opt_number(t, "topology", delay).value_or(1.0);
    if (!(us >= 0)) fail(*t.get(delay), "topology." + delay + ": must be >= 0");
    if (us > kMaxLinkDelayUs) fail(*t.get(delay), "topology." + delay + ": at most 10000 (10 ms)");
    l.delay = SimTime{static_cast<uint64_t>(std::llround(us * 1e6))};
    return l;
  }

  // [queue] as a whole, once its keys are read (tunables()): each in range,
  // ecn_kmin may still lie above ecn_kmax, or XON above XOFF.
  void queue_check(const toml::table& t, const QueueSpec& q) const {
    if (const std::string e = queue_spec_error(q); !e.empty()) {
      // Located at the key the message starts with ("queue.KEY (...").
      const std::string key = e.substr(6, e.find(' ') - 6);
      fail(t.contains(key) ? *t.get(key) : static_cast<const toml::node&>(t), e);
    }
  }

  // [queue], [cc], [recovery], [rc]: each key is the --set key
  // "SECTION.KEY", with its conversion and range (settings.cpp); the
  // engine's fields are judged together by engine_check() once all are
  // read, the queue's by queue_check().
  void tunables(const toml::table& t, const std::string& section, SimConfig& c) {
    for (auto&& [k, n] : t) tunable(c, k, n, dotted(section, k.str()), section);
  }

  // One key of the settings table, written as its kind is (SettingKind): a
  // switch true or false, a byte count with or without a unit, else a
  // number; the range and message are --set's (a file took [queue]'s byte
  // counts up to 9e18 where --set stopped at 1e12, and refused a PFC
  // threshold's -1, "derived", that --set takes).
  void tunable(SimConfig& c, const toml::key& k, const toml::node& n, const std::string& key,
               const std::string& section) {
    const auto range = setting_range(key);
    if (!range)
      fail(k.source(), "unknown key '" + key + "' (metaroce-sim --list-settings shows the " +
                           section + ".* keys)");
    note(key);
    double v = 0;
    if (range->kind == SettingKind::kSwitch) {
      if (!n.is_boolean()) fail(n, key + ": expected true or false");
      v = n.as_boolean()->get() ? 1 : 0;
    } else if (range->kind == SettingKind::kBytes) {
      v = static_cast<double>(byte_count(n, key));
    } else {
      if (!n.is_number()) fail(n, key + ": expected a number");
      v = *n.value<double>();
    }
    setting(c, n, key, v);
  }

  // The engine configuration the file leaves, checked by the engine's
  // config_error() as the simulated NICs' is, and located at the first key
  // of the file the message names (a field no key sets: the first section).
  void engine_check(const toml::table& root, const SimConfig& c) const {
    std::vector<std::string> named;
    const std::string e = engine_setting_error(c, named);
    if (e.empty()) return;
    for (const std::string& key : named) {
      const size_t dot = key.find('.');
      const toml::node* n = root.get(key.substr(0, dot));
      if (n != nullptr && dot != std::string::npos)
        n = n->is_table() ? n->as_table()->get(key.substr(dot + 1)) : nullptr;
      if (n != nullptr) fail(*n, e);
    }
    for (const char* section : {"cc", "recovery"})
      if (root.contains(section)) fail(*root.get(section), e);
    fail(root, e);
  }

  void workload(const toml::table& t, SimConfig& c) {
    const std::string kind = string(t, "workload", "kind");
    const uint32_t hosts = c.topo.num_hosts;
    // Each workload draws from its own seed (its position), so adding one
    // does not change the others.
    const uint64_t seed = derive_seed(seed_, 0x776b6c64, ++workloads_);
    const SimTime start = time_us(t, "start_us");
    std::vector<FlowSpec> f;
    try {
      if (kind == "permutation") {
        keys(t, "workload", {"kind", "bytes", "start_us"});
        f = permutation(hosts, bytes(t, "workload", "bytes"), seed);
      } else if (kind == "all_to_all") {
        keys(t, "workload", {"kind", "bytes", "start_us"});
        room(t, c, kind, static_cast<double>(hosts) * (hosts == 0 ? 0 : hosts - 1));
        f = all_to_all(hosts, bytes(t, "workload", "bytes"));
      } else if (kind == "incast") {
        keys(t, "workload", {"kind", "bytes", "start_us", "receiver", "senders"});
        const uint32_t rx = t.contains("receiver") ? u32(t, "workload", "receiver") : 0;
        f = incast(hosts, rx, u32(t, "workload", "senders"), bytes(t, "workload", "bytes"), seed);
      } else if (kind == "allreduce") {
        keys(t, "workload", {"kind", "bytes", "start_us", "rings", "hosts"});
        const auto r = rings(t, hosts, seed);
        double n = 0;
        for (const auto& ring : r)
          n += 2 * static_cast<double>(ring.size()) *
               static_cast<double>(ring.empty() ? 0 : ring.size() - 1);
        room(t, c, kind, n);
        f = ring_allreduce(r, bytes(t, "workload", "bytes"));
      } else if (kind == "background") {
        keys(t, "workload", {"kind", "bytes", "start_us", "flows", "load", "mean_gap_us"});
        const uint64_t b = bytes(t, "workload", "bytes");
        SimTime gap;
        if (t.contains("load") == t.contains("mean_gap_us"))
          fail(t, "workload (background): give exactly one of 'load' and 'mean_gap_us'");
        if (t.contains("load")) {
          const double load = number(t, "workload", "load");
          if (!(load > 0 && load <= 1)) fail(*t.get("load"), "workload.load: must be in (0, 1]");
          gap = background_gap(hosts, b, c.topo.host_rate_mbps, load);
        } else {
          gap = time_us(t, "mean_gap_us");
          if (gap.ps == 0)  // every flow at once: not Poisson arrivals
            fail(*t.get("mean_gap_us"), "workload.mean_gap_us: must be > 0");
        }
        const uint32_t flows = u32(t, "workload", "flows");
        room(t, c, kind, flows);
        f = background(hosts, b, flows, gap, start, seed);
      } else if (kind == "matrix") {
        keys(t, "workload", {"kind", "file", "start_us"});
        f = matrix(t, hosts, c.input_files);
      } else {
        fail(*t.get("kind"), "workload.kind: unknown '" + kind +
                                 "' (permutation, all_to_all, incast, allreduce, background, "
                                 "matrix)");
      }
    } catch (const std::invalid_argument& e) {
      fail(t, std::string("workload (") + kind + "): " + e.what());
    }
    // One that adds no flow (flows = 0, senders = 0, an empty matrix file)
    // would let the scenario run nothing and exit 0, as if it had passed.
    if (f.empty()) fail(t, "workload (" + kind + "): adds no flow");
    room(t, c, kind, static_cast<double>(f.size()));  // a traffic matrix's, counted once read
    const auto base = static_cast<uint32_t>(c.flows.size());
    for (FlowSpec& s : f) {
      if (kind != "background") s.start += start;
      for (uint32_t& d : s.after)
        if (d != UINT32_MAX) d += base;  // dependencies index this workload's flows
      c.flows.push_back(s);
    }
  }

  // Refuses a workload that would take the scenario past kMaxFlows before it
  // is generated: 4e9 background flows, or an all-to-all of 65536 hosts,
  // allocated until std::bad_alloc aborted the process.
  void room(const toml::table& t, const SimConfig& c, const std::string& kind, double n) const {
    if (static_cast<double>(c.flows.size()) + n > kMaxFlows)
      fail(t, "workload (" + kind + "): " + count(n) + " flows, the scenario more than " +
                  count(kMaxFlows));
  }

  // `seed`: the workload's, so that two jobs of rails rings are placed apart.
  std::vector<std::vector<uint32_t>> rings(const toml::table& t, uint32_t hosts, uint64_t seed) {
    if (t.contains("hosts")) {
      if (t.contains("rings")) fail(t, "workload (allreduce): give 'rings' or 'hosts', not both");
      std::vector<uint32_t> ring;
      std::vector<uint8_t> seen(hosts, 0);
      for (const toml::node& n : array(t, "workload", "hosts")) {
        const auto h = n.value_exact<int64_t>();  // 5.0 is not a host id
        if (!h || *h < 0 || *h >= hosts)
          fail(n, "workload.hosts: host ids 0.." + std::to_string(hosts - 1));
        if (seen[static_cast<size_t>(*h)]++ != 0) fail(n, "workload.hosts: a host twice");
        ring.push_back(static_cast<uint32_t>(*h));
      }
      return {ring};
    }
    const std::string how = opt_string(t, "workload", "rings").value_or("hosts");
    if (how == "hosts") {
      std::vector<uint32_t> ring(hosts);
      for (uint32_t i = 0; i < hosts; ++i) ring[i] = i;
      return {ring};
    }
    if (how == "rails") {
      if (!rail_)
        fail(*t.get("rings"), "workload.rings = \"rails\" needs topology.kind = \"rail\"");
      return rail_rings(rail_->first, rail_->second, derive_seed(seed, 0x72616c73));
    }
    fail(*t.get("rings"), "workload.rings: unknown '" + how + "' (hosts, rails)");
  }

  std::vector<FlowSpec> matrix(const toml::table& t, uint32_t hosts,
                               std::vector<OutputFile>& inputs) {
    std::string path = string(t, "workload", "file");
    if (!path.empty() && path[0] != '/' && !base_dir_.empty()) path = base_dir_ + "/" + path;
    inputs.push_back({"workload.file", path});
    std::ifstream in(path);
    // A folder opens and reads as empty: it was "adds no flow".
    if (!in || std::filesystem::is_directory(path))
      fail(*t.get("file"), "workload.file: cannot open '" + path + "'" + (in ? " (a folder)" : ""));
    return read_traffic_matrix(in, hosts, path);
  }

  FaultSpec fault(const toml::table& t, size_t index, const TopoGraph& g) {
    keys(t, "fault", {"at_us", "kind", "edge", "link", "rate_gbps", "drop"});
    FaultSpec f;
    f.at = time_us(t, "at_us");
    const std::string kind = string(t, "fault", "kind");
    // "fault 2 (link_down)": the file's faults counted from 0, as the
    // warnings of faults past the time limit count them.
    const std::string what = "fault " + std::to_string(index) + " (" + kind + ")";
    if (t.contains("edge") == t.contains("link"))
      fail(t, what + ": give exactly one of 'edge' (an edge id) and 'link' (its two nodes)");
    if (t.contains("edge")) {
      f.edge = u32(t, "fault", "edge");
      if (f.edge >= g.edges.size())
        fail(*t.get("edge"),
             what + ": fault.edge: edge ids 0.." + std::to_string(g.edges.size() - 1));
    } else {
      f.edge = edge_between(t, what, g);
    }
    auto only = [&](const char* allowed) {
      for (const char* k : {"rate_gbps", "drop"})
        if (t.contains(k) && std::string_view(k) != allowed)
          fail(*t.get(k), std::string("fault.") + k + ": not used by kind '" + kind + "'");
    };
    if (kind == "link_down" || kind == "link_up") {
      only("");
      f.kind = kind == "link_down" ? FaultSpec::Kind::kLinkDown : FaultSpec::Kind::kLinkUp;
    } else if (kind == "rate") {
      only("rate_gbps");
      f.kind = FaultSpec::Kind::kRate;
      // Below 1 Mb/s is refused as a topology's rate is (it was raised to
      // 1 Mb/s without a word).
      f.rate_mbps =
          rate_mbps(*t.get("rate_gbps"), "fault.rate_gbps", number(t, "fault", "rate_gbps"));
    } else if (kind == "gray") {
      only("drop");
      f.kind = FaultSpec::Kind::kGrayDrop;
      f.drop = number(t, "fault", "drop");
      if (!(f.drop >= 0 && f.drop <= 1)) fail(*t.get("drop"), "fault.drop: must be in [0, 1]");
    } else {
      fail(*t.get("kind"), "fault.kind: unknown '" + kind + "' (link_down, link_up, rate, gray)");
    }
    return f;
  }

  // Each link's link_down and link_up faults, in the order they act (time,
  // then the file's order), alternate from up: a link_up of a link that is
  // up, or a link_down of one that is down, does nothing, and is a mistake
  // of the file (a link_up written before its link_down left the link down
  // for the rest of the run).
  void link_sequence(const std::vector<FaultSpec>& faults,
                     const std::vector<const toml::table*>& where) const {
    std::vector<size_t> order;
    for (size_t i = 0; i < faults.size(); ++i)
      if (faults[i].kind == FaultSpec::Kind::kLinkDown ||
          faults[i].kind == FaultSpec::Kind::kLinkUp)
        order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return faults[a].at < faults[b].at; });
    std::map<uint32_t, size_t> last;  // edge -> its latest link_down / link_up
    for (const size_t i : order) {
      const FaultSpec& f = faults[i];
      const bool down = f.kind == FaultSpec::Kind::kLinkDown;
      const auto it = last.find(f.edge);
      const bool was_down =
          it != last.end() && faults[it->second].kind == FaultSpec::Kind::kLinkDown;
      if (down != was_down) {
        last[f.edge] = i;
        continue;
      }
      std::ostringstream o;
      o << std::setprecision(15) << "fault " << i << " (" << (down ? "link_down" : "link_up")
        << ", edge " << f.edge << ") at " << f.at.us() << " us: the link is "
        << (down ? "down" : "up") << " then";
      if (it != last.end()) {
        o << " (fault " << it->second << " took it " << (down ? "down" : "up") << " at "
          << faults[it->second].at.us() << " us)";
      } else {
        for (const size_t j : order)
          if (faults[j].edge == f.edge && faults[j].kind == FaultSpec::Kind::kLinkDown) {
            o << " (its link_down, fault " << j << ", is at " << faults[j].at.us()
              << (faults[j].at == f.at ? " us too, after it in the file: faults at one "
                                         "instant act in the file's order)"
                                       : " us, later)");
            break;
          }
      }
      o << "; a link's link_down and link_up alternate, starting with link_down";
      fail(*where[i], o.str());
    }
  }

  // `link = [A, B]` or `[A, B, I]`: node ids, or names "host N" and the
  // fabric's switch tiers, as --list-links names them: "tor N", "agg N",
  // "core N" on a fat-tree, "leaf N", "spine N" on a two-tier fabric
  // (leaf-spine, rail); N counts within the tier. A leaf-spine with
  // links_per_spine > 1 joins a leaf and a spine by parallel links: I picks
  // one, 0-based in edge order; [A, B] alone names the only link joining
  // them, and is refused where several do (it took the first without a
  // word, and a link_down of "the" link left the others up).
  uint32_t edge_between(const toml::table& t, const std::string& what, const TopoGraph& g) {
    const toml::array& a = array(t, "fault", "link");
    if (a.size() != 2 && a.size() != 3)
      fail(*t.get("link"), what +
                               ": fault.link: two nodes and an optional index, e.g. [\"leaf 0\", "
                               "\"spine 3\"] or [\"leaf 0\", \"spine 3\", 1]");
    const uint32_t x = node_id(*a.get(0), what, g), y = node_id(*a.get(1), what, g);
    std::vector<uint32_t> joining;
    for (uint32_t e = 0; e < g.edges.size(); ++e)
      if ((g.edges[e].a == x && g.edges[e].b == y) || (g.edges[e].a == y && g.edges[e].b == x))
        joining.push_back(e);
    if (joining.empty()) fail(*t.get("link"), what + ": fault.link: no link joins these two nodes");
    const std::string pair = node_name(g, x) + " and " + node_name(g, y);
    const std::string edges = joining.size() == 1 ? "edge " + std::to_string(joining[0])
                                                  : "edges " + std::to_string(joining.front()) +
                                                        ".." + std::to_string(joining.back());
    const std::string last = std::to_string(joining.size() - 1);
    if (a.size() == 2) {
      if (joining.size() > 1)
        fail(*t.get("link"),
             what + ": fault.link: " + pair + " are joined by " + std::to_string(joining.size()) +
                 " parallel links (" + edges + "): name one as [\"" + node_name(g, x) + "\", \"" +
                 node_name(g, y) + "\", I], I 0.." + last + " in edge order, or give edge = E");
      return joining[0];
    }
    const toml::node& n = *a.get(2);
    const auto i = n.value_exact<int64_t>();
    if (!i || *i < 0)
      fail(n, what +
                  ": fault.link: the third element is a link's index among those joining the two "
                  "nodes, a whole number >= 0");
    if (static_cast<uint64_t>(*i) >= joining.size())
      fail(n, what + ": fault.link: link " + std::to_string(*i) + " of " + pair +
                  ": they are joined by " + std::to_string(joining.size()) +
                  (joining.size() == 1 ? " link" : " links") + ", 0.." + last + " (" + edges + ")");
    return joining[static_cast<size_t>(*i)];
  }

  // A node as a fault names it: "host 3", "leaf 0", "core 2".
  static std::string node_name(const TopoGraph& g, uint32_t id) {
    if (id < g.num_hosts) return "host " + std::to_string(id);
    const uint32_t sw = id - g.num_hosts;
    const uint8_t tier = g.switch_tier[sw];
    const auto& tiers = tier_names(g);
    const auto index = std::count(g.switch_tier.begin(), g.switch_tier.begin() + sw, tier);
    return std::string(tiers[tier]) + " " + std::to_string(index);
  }

  // A fat-tree's tiers are ToR, aggregation and core switches; a two-tier
  // fabric's leaves and spines.
  static const std::vector<std::string_view>& tier_names(const TopoGraph& g) {
    static const std::vector<std::string_view> kThree = {"tor", "agg", "core"};
    static const std::vector<std::string_view> kTwo = {"leaf", "spine"};
    return three_tiers(g) ? kThree : kTwo;
  }
  static bool three_tiers(const TopoGraph& g) {
    return std::any_of(g.switch_tier.begin(), g.switch_tier.end(),
                       [](uint8_t tier) { return tier >= 2; });
  }

  // The fabric's tiers and what each holds: "host 0..15, tor 0..7, agg
  // 0..7, core 0..3".
  static std::string node_ranges(const TopoGraph& g, const std::vector<std::string_view>& tiers) {
    std::string s = "host 0.." + std::to_string(g.num_hosts - 1);
    for (size_t tier = 0; tier < tiers.size(); ++tier) {
      const auto n = std::count(g.switch_tier.begin(), g.switch_tier.end(), tier);
      if (n > 0) s += ", " + std::string(tiers[tier]) + " 0.." + std::to_string(n - 1);
    }
    return s;
  }

  uint32_t node_id(const toml::node& n, const std::string& what, const TopoGraph& g) {
    const uint32_t total = g.num_hosts + g.num_switches;
    // A name of the other kind of fabric is refused: "agg 0" on a
    // leaf-spine took spine 0 and "spine 0" on a fat-tree agg 0, without a
    // word.
    const bool three = three_tiers(g);
    static const std::vector<std::string_view> kThree = {"tor", "agg", "core"};
    static const std::vector<std::string_view> kTwo = {"leaf", "spine"};
    const std::vector<std::string_view>& tiers = tier_names(g);
    const std::string fabric = "this fabric (" + g.name + ") has " + node_ranges(g, tiers);
    if (auto id = n.value_exact<int64_t>()) {
      if (*id < 0 || *id >= total)
        fail(n, what + ": fault.link: node ids 0.." + std::to_string(total - 1));
      return static_cast<uint32_t>(*id);
    }
    const auto s = n.value_exact<std::string>();
    std::istringstream in(s.value_or(""));
    std::string word;
    int64_t idx = -1;
    std::string rest;
    if (!s || !(in >> word >> idx) || (in >> rest) || idx < 0)
      fail(n, what + ": fault.link: a node is an id or \"KIND N\": " + fabric);
    if (word == "host") {
      if (idx >= g.num_hosts) fail(n, what + ": fault.link: no " + *s + ": " + fabric);
      return static_cast<uint32_t>(idx);
    }
    const auto tier = std::find(tiers.begin(), tiers.end(), word);
    if (tier == tiers.end()) {
      const std::vector<std::string_view>& other = three ? kTwo : kThree;
      if (std::find(other.begin(), other.end(), word) != other.end())
        fail(n, what + ": fault.link: \"" + *s + "\": no " + word + " tier here: " + fabric);
      fail(n, what + ": fault.link: unknown node kind '" + word + "' in \"" + *s + "\": " + fabric);
    }
    int64_t seen = 0;
    for (uint32_t i = 0; i < g.switch_tier.size(); ++i)
      if (g.switch_tier[i] == tier - tiers.begin() && seen++ == idx) return g.num_hosts + i;
    fail(n, what + ": fault.link: no " + *s + ": " + fabric);
  }

  void note(const std::string& key) {
    if (given_ != nullptr) given_->push_back(key);
  }

  // A key that is also a --set key, checked by --set's table (settings.cpp):
  // one range and one message, "KEY: VALUE is not ... in [MIN, MAX]",
  // whichever way the value is given.
  void setting(SimConfig& c, const toml::node& n, const std::string& key, double v) const {
    std::string err;
    if (!apply_setting(c, key, v, err, key)) fail(n, err);
  }

  // ---------------------------------------------------------------- values

  [[noreturn]] void fail(const toml::node& n, const std::string& msg) const {
    fail(n.source(), msg);
  }
  [[noreturn]] void fail(const toml::source_region& where, const std::string& msg) const {
    throw ConfigError(located(source_, where, msg));
  }

  void keys(const toml::table& t, const std::string& section,
            std::initializer_list<std::string_view> allowed) const {
    keys(t, section, std::vector<std::string_view>(allowed));
  }
  void keys(const toml::table& t, const std::string& section,
            const std::vector<std::string_view>& allowed) const {
    for (auto&& kv : t) {
      const toml::key& k = kv.first;
      bool ok = false;
      for (std::string_view a : allowed) ok = ok || k.str() == a;
      if (!ok)
        fail(k.source(),
             "unknown key '" + (section.empty() ? "" : section + ".") + std::string(k.str()) + "'");
    }
  }

  // "queue.pfc", or "name" at the top level (not ".name").
  static std::string dotted(const std::string& section, std::string_view key) {
    return section.empty() ? std::string(key) : section + "." + std::string(key);
  }

  const toml::node& need(const toml::table& t, const std::string& section,
                         std::string_view key) const {
    const toml::node* n = t.get(key);
    if (n == nullptr)
      fail(t, "missing key '" + (section.empty() ? "" : section + ".") + std::string(key) + "'");
    return *n;
  }

  const toml::table& as_table(const toml::node& n, const std::string& what) const {
    if (!n.is_table()) fail(n, what + ": expected a table");
    return *n.as_table();
  }

  const toml::table& table(const toml::table& t, const std::string& section,
                           std::string_view key) const {
    return as_table(need(t, section, key), std::string(key));
  }

  const toml::array& array(const toml::table& t, const std::string& section,
                           std::string_view key) const {
    const toml::node& n = need(t, section, key);
    if (n.is_table())  // [workload] written for [[workload]]
      fail(n, dotted(section, key) + ": expected an array of tables, [[" + std::string(key) +
                  "]], not [" + std::string(key) + "]");
    if (!n.is_array()) fail(n, dotted(section, key) + ": expected an array");
    return *n.as_array();
  }

  std::string string(const toml::table& t, const std::string& section, std::string_view key) {
    const toml::node& n = need(t, section, key);
    if (!n.is_string()) fail(n, dotted(section, key) + ": expected a string");
    return n.as_string()->get();
  }

  std::optional<std::string> opt_string(const toml::table& t, const std::string& section,
                                        std::string_view key) {
    if (!t.contains(key)) return std::nullopt;
    return string(t, section, key);
  }

  double number(const toml::table& t, const std::string& section, std::string_view key) const {
    const toml::node& n = need(t, section, key);
    if (!n.is_number()) fail(n, dotted(section, key) + ": expected a number");
    return *n.value<double>();
  }

  std::optional<double> opt_number(const toml::table& t, const std::string& section,
                                   std::string_view key) const {
    if (!t.contains(key)) return std::nullopt;
    return number(t, section, key);
  }

  double positive(const toml::node& n, const std::string& what, double v) const {
    if (!(v > 0)) fail(n, what + ": must be > 0");
    return v;
  }

  // A whole count as the message names it (1e+20 for 65536^4 is not one).
  static std::string count(double v) {
    std::ostringstream o;
    o << std::fixed << std::setprecision(0) << v;
    return o.str();
  }

  // Gb/s, as written, to Mb/s.
  uint64_t rate_mbps(const toml::node& n, const std::string& what, double gbps) const {
    positive(n, what, gbps);
    // The documented range: 0.0006 was taken as 1 Mb/s, 0.0004 refused.
    if (gbps < kMinGbps) fail(n, what + ": at least 0.001 (1 Mb/s)");
    if (gbps > kMaxGbps) fail(n, what + ": at most 100000 (100 Tb/s)");
    // Links run at whole Mb/s: 12.3456 ran at 12.346 without a word. The
    // tolerance takes a decimal's binary rounding (2.675 x 1000).
    const double mbps = gbps * kMbpsPerGbps;
    if (std::abs(mbps - std::round(mbps)) > 1e-9 * mbps) {
      char shortest[32];
      const auto r = std::to_chars(shortest, shortest + sizeof shortest, gbps);
      fail(n, what + ": " + std::string(shortest, r.ptr) +
                  " is not a whole number of Mb/s (rates are whole Mb/s: 0.001 Gb/s steps)");
    }
    return static_cast<uint64_t>(std::llround(mbps));
  }

  uint32_t u32(const toml::table& t, const std::string& section, std::string_view key) const {
    const toml::node& n = need(t, section, key);
    const auto v = n.value_exact<int64_t>();
    if (!v || *v < 0 || *v > UINT32_MAX)
      fail(n, dotted(section, key) + ": expected a whole number >= 0");
    return static_cast<uint32_t>(*v);
  }

  // A time in microseconds (default 0), >= 0.
  SimTime time_us(const toml::table& t, std::string_view key) const {
    if (!t.contains(key)) return SimTime{0};
    const toml::node& n = *t.get(key);
    const auto v = n.value<double>();
    if (!n.is_number() || !v || !(*v >= 0 && *v <= 1e12))
      fail(n, std::string(key) + ": expected a number of microseconds >= 0 (at most 1e12)");
    return SimTime{static_cast<uint64_t>(std::llround(*v * 1e6))};
  }

  // A workload's byte count: a number, or a string with a unit ("64KiB",
  // "2 MiB", "1MB", "4096B"), in [1, kMaxFlowBytes], with the range check
  // and message of --set and of a traffic matrix (flow_bytes_error).
  uint64_t bytes(const toml::table& t, const std::string& section, std::string_view key) const {
    const toml::node& n = need(t, section, key);
    const std::string what = dotted(section, key);
    const long double b = byte_count(n, what);
    if (const std::string e = flow_bytes_error(what, b); !e.empty()) fail(n, e);
    return static_cast<uint64_t>(b);
  }

  // A byte count as written, for its key's range check (bytes(), or --set's
  // for a key that is also a --set key): an integer exactly (long double
  // holds every int64_t), a float as it is (9e18 is a whole number; 2.5 is
  // refused by the range check as --set refuses it), a string with a unit
  // rounded to whole bytes.
  long double byte_count(const toml::node& n, const std::string& what) const {
    if (auto v = n.value_exact<int64_t>()) return static_cast<long double>(*v);
    if (n.is_floating_point()) return *n.value<double>();
    const auto s = n.value<std::string>();
    if (!s) fail(n, what + ": expected a byte count (4096 or \"64KiB\")");
    std::istringstream in(*s);
    double v = 0;
    std::string unit, rest;
    in >> v >> unit;
    static const std::pair<const char*, double> kUnits[] = {{"B", 1},
                                                            {"KB", 1e3},
                                                            {"MB", 1e6},
                                                            {"GB", 1e9},
                                                            {"KiB", 1024},
                                                            {"MiB", 1024 * 1024},
                                                            {"GiB", 1024 * 1024 * 1024.0}};
    double mult = 0;
    for (const auto& [u, m] : kUnits)
      if (unit == u) mult = m;
    if (!in || mult == 0 || (in >> rest) || !(v >= 0))
      fail(n, what + ": '" + *s + "' is not a byte count (units B, KB, MB, GB, KiB, MiB, GiB)");
    // std::round, not llround: defined for any double (llround of 1e39 is
    // not). A positive count stays positive (0.4 B would round to 0).
    const double r = std::round(v * mult);
    if (r == 0 && v > 0) fail(n, what + ": '" + *s + "' is less than one byte");
    return r;
  }

  std::string source_;
  std::string base_dir_;
  uint64_t seed_;
  uint64_t workloads_ = 0;
  std::vector<std::string>* given_;
  std::optional<std::pair<uint32_t, uint32_t>> rail_;  // (servers, rails) of a rail topology
};

}  // namespace

SimConfig parse_config(std::string_view text, const std::string& source,
                       const std::string& base_dir, TransportKind transport, uint64_t seed,
                       std::vector<std::string>* given) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(located(source, e.source(), std::string(e.description())));
  }
  SimConfig c = Reader(source, base_dir, seed, given).read(root);
  c.transport = transport;
  c.seed = seed;
  return c;
}

SimConfig load_config_file(const std::string& path, TransportKind transport, uint64_t seed,
                           std::vector<std::string>* given) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open");
  // A folder opens and reads as empty: it was "missing key 'topology'".
  if (std::filesystem::is_directory(path)) throw ConfigError(path + ": cannot open (a folder)");
  std::ostringstream text;
  text << in.rdbuf();
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  SimConfig c = parse_config(text.str(), path, dir, transport, seed, given);
  c.input_files.insert(c.input_files.begin(), {"--config", path});
  return c;
}

}  // namespace metaroce::sim
