// The table of --set keys, which are a config file's keys as well
// (config_file.cpp). Each entry converts one number into one field, with
// its range checked, so that a typo or a nonsense value fails the run up
// front instead of quietly simulating something else.
#include "metaroce/sim/settings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <type_traits>

namespace metaroce::sim {
namespace {

// Where a key changes a run. Some keys act on some transports only (the
// engine's on MetaRoCE's NICs, rc.* on the baselines' hosts) or only beside
// another setting (PFC thresholds without PFC): they are still taken, since
// a sweep gives one --set to every transport, but the run is said to be the
// same without them.
struct Scope {
  bool (*acts)(const SimConfig&);
  const char* where;  // what setting_idle_in() says when acts() is false
};

bool runs_engine(const SimConfig& c) { return !is_baseline(c.transport); }
bool has_pfc(const SimConfig& c) {
  // The baselines' PFC is fixed by the transport (Simulation's constructor).
  return c.transport == TransportKind::kRoceV2 || (runs_engine(c) && c.queue.pfc);
}

constexpr Scope kEveryRun{[](const SimConfig&) { return true; }, ""};
constexpr Scope kEngine{runs_engine, "metaroce and spray-nocc"};
// CC-3/CC-5's reactions: spray-nocc is the engine with congestion control off.
constexpr Scope kEngineCc{
    [](const SimConfig& c) { return c.transport == TransportKind::kMetaRoce; },
    "metaroce (spray-nocc runs without congestion control)"};
constexpr Scope kDcqcn{[](const SimConfig& c) { return is_baseline(c.transport) && c.rc.dcqcn; },
                       "rocev2 and irn with DCQCN (not with --no-dcqcn)"};
constexpr Scope kBaselineRed{
    [](const SimConfig& c) { return is_baseline(c.transport) && c.rc.own_ecn; },
    "rocev2 and irn without --fabric-ecn"};
constexpr Scope kQueueEcn{[](const SimConfig& c) { return runs_engine(c) || !c.rc.own_ecn; },
                          "metaroce and spray-nocc, and rocev2 and irn with --fabric-ecn"};
constexpr Scope kPfcChoice{runs_engine,
                           "metaroce and spray-nocc (rocev2 always runs with PFC, irn never)"};
constexpr Scope kPfc{has_pfc,
                     "runs with PFC: rocev2, and metaroce and spray-nocc with queue.pfc=1"};
// A port trims what it would drop, and a PFC port drops nothing.
constexpr Scope kTrimChoice{
    [](const SimConfig& c) { return runs_engine(c) && !c.queue.pfc; },
    "metaroce and spray-nocc without PFC (switches trim MetaRoCE data packets only, and only "
    "where they would drop them)"};
constexpr Scope kTrim{
    [](const SimConfig& c) { return runs_engine(c) && !c.queue.pfc && c.queue.trim; },
    "metaroce and spray-nocc with queue.trim=1, without PFC"};
constexpr Scope kLinkFaults{[](const SimConfig& c) {
                              return std::any_of(c.faults.begin(), c.faults.end(), [](auto& f) {
                                return f.kind == FaultSpec::Kind::kLinkDown ||
                                       f.kind == FaultSpec::Kind::kLinkUp;
                              });
                            },
                            "runs with a link_down or link_up fault"};

// CC-1: the simulator derives the initial window from the BDP unless
// initial_window_bdp is 0 (Simulation's constructor).
constexpr Scope kInitialCwnd{
    [](const SimConfig& c) { return runs_engine(c) && c.initial_window_bdp == 0; },
    "metaroce and spray-nocc with initial_window_bdp=0 (otherwise the BDP sets the window)"};

// The ranges of the engine's fields that config_error() judges: their types'.
constexpr double kU32 = 4294967295.0;
constexpr double kMaxUs = 1e12;

struct Setting {
  const char* key;
  const char* help;
  double min, max;
  SettingKind kind;
  std::function<void(SimConfig&, double)> set;
  Scope scope = kEveryRun;
};

uint64_t ns_from_us(double us) { return static_cast<uint64_t>(std::llround(us * 1000.0)); }
SimTime time_from_us(double us) { return SimTime{static_cast<uint64_t>(std::llround(us * 1e6))}; }
// A PFC threshold in bytes; -1: derived (QueueSpec).
std::optional<uint64_t> threshold(double v) {
  if (v < 0) return std::nullopt;
  return static_cast<uint64_t>(v);
}

// The part of a SimConfig that a struct of settable fields is.
template <class Part>
Part& part_of(SimConfig& c);
template <>
SimConfig& part_of(SimConfig& c) {
  return c;
}
template <>
EndpointConfig& part_of(SimConfig& c) {
  return c.endpoint;
}
template <>
CcConfig& part_of(SimConfig& c) {
  return c.endpoint.cc;
}
template <>
RecoveryConfig& part_of(SimConfig& c) {
  return c.endpoint.recovery;
}
template <>
QueueSpec& part_of(SimConfig& c) {
  return c.queue;
}
template <>
RcParams& part_of(SimConfig& c) {
  return c.rc;
}

template <class Member>
struct FieldOf;
template <class Part, class Field>
struct FieldOf<Field Part::*> {
  using PartType = Part;
  using Type = Field;
};

// A setting that stores its value (in range: the table checked it) into one
// field, through `convert` if given (a unit's), else cast to the field's type
// (a whole number's, a switch's v != 0, a real as it is).
template <auto kMember, auto kConvert = nullptr>
void store(SimConfig& c, double v) {
  using F = FieldOf<decltype(kMember)>;
  auto& field = part_of<typename F::PartType>(c).*kMember;
  if constexpr (std::is_null_pointer_v<decltype(kConvert)>)
    field = static_cast<typename F::Type>(v);
  else
    field = kConvert(v);
}

std::span<const Setting> table() {
  using enum SettingKind;
  static const Setting t[] = {
      {"cc.enabled", "per-path congestion control on (1) or off (0, oblivious spraying)", 0, 1,
       kSwitch, store<&CcConfig::enabled>, kEngineCc},
      // The engine's own fields below take their type's whole range here:
      // config_error() (engine/src/config.cpp) judges them, once every
      // setting is applied (engine_setting_error), so that its ranges and
      // words are the only ones. The durations stop at 1e12 us, which still
      // fits a nanosecond count, beyond which config_error's day refuses them.
      {"cc.initial_cwnd_packets",
       "CC-1 initial window of a connection, packets (only with initial_window_bdp=0, which "
       "otherwise derives it)",
       0, kU32, kInteger, store<&CcConfig::initial_cwnd_packets>, kInitialCwnd},
      {"cc.min_cwnd_packets", "CC-6 floor of a connection's windows, packets", 1, kMaxPacketCount,
       kInteger, store<&CcConfig::min_cwnd_packets>, kEngine},
      {"cc.max_cwnd_packets", "CC-6 ceiling of a path's window, packets (0: the connection window)",
       0, kMaxPacketCount, kInteger, store<&CcConfig::max_cwnd_packets>, kEngine},
      {"cc.dctcp_g_shift", "CC-3 alpha gain 1/2^N", 0, kMaxDctcpGShift, kInteger,
       store<&CcConfig::dctcp_g_shift>, kEngineCc},
      {"cc.target_queue_delay_us", "CC-5 queueing delay above the path's minimum RTT that cuts", 0,
       1e6, kReal, store<&CcConfig::target_queue_delay_ns, ns_from_us>, kEngineCc},
      {"cc.max_delay_decrease_pct", "CC-5 largest cut per RTT, percent", 0, 100, kInteger,
       store<&CcConfig::max_delay_decrease_pct>, kEngineCc},
      {"cc.explore_interval_us", "PATH-8 time between trials of a new entropy (0: off)", 0, 1e9,
       kReal, store<&CcConfig::explore_interval_ns, ns_from_us>, kEngine},
      {"cc.max_inflight_packets", "CC-9 connection cap in packets (0: from inflight_cap_bdp)", 0,
       kMaxPacketCount, kInteger, store<&CcConfig::max_inflight_packets>, kEngine},
      {"time_limit_ms",
       "simulated-time limit, ms (default 1000; metaroce-sim --time-limit-ms, a config file's "
       "time_limit_ms)",
       1e-6, 1e9, kReal,
       [](SimConfig& c, double v) {
         c.time_limit = SimTime{static_cast<uint64_t>(std::llround(v * 1e9))};
       }},
      {"reroute_us",
       "switches recompute ECMP groups without down links this long after a link goes down or "
       "up (-1: never, the default)",
       -1, 1e9, kReal,
       [](SimConfig& c, double v) {
         c.reroute_after = v < 0 ? SimTime::never() : SimTime{static_cast<uint64_t>(v * 1e6)};
       },
       kLinkFaults},
      {"inflight_cap_bdp",
       "CC-9 connection cap: this multiple of the fabric BDP, plus inflight_cap_packets (0: none)",
       0, 1000, kReal, store<&SimConfig::inflight_cap_bdp>, kEngine},
      {"inflight_cap_packets", "CC-9 connection cap: packets of queue on top of the BDP share", 0,
       kMaxPacketCount, kInteger, store<&SimConfig::inflight_cap_packets>, kEngine},
      {"initial_window_bdp", "CC-1 initial window as a multiple of the fabric BDP (0: engine's)", 0,
       1000, kReal, store<&SimConfig::initial_window_bdp>, kEngine},
      {"num_paths", "PATH-1 entropy values per connection", 1, kMaxPaths, kInteger,
       store<&EndpointConfig::num_paths>, kEngine},
      {"ack_every", "ACK-1 data packets per ACK", 0, 255, kInteger,
       store<&EndpointConfig::ack_every>, kEngine},
      {"ack_delay_us", "ACK-5 longest an ACK waits", 0, 1e6, kReal,
       store<&EndpointConfig::ack_delay_ns, ns_from_us>, kEngine},
      {"recovery.reorder_threshold", "LOSS-2 later packets acked on the same path", 1, 1024,
       kInteger, store<&RecoveryConfig::reorder_threshold>, kEngine},
      {"recovery.min_rto_us",
       "LOSS-4 smallest retransmission timeout (raises LOSS-5's max_rto, 10 ms, to it, unless "
       "recovery.max_rto_us is given)",
       1, 1e7, kReal,
       [](SimConfig& c, double v) {
         RecoveryConfig& r = c.endpoint.recovery;
         r.min_rto_ns = ns_from_us(v);
         if (!c.max_rto_given) r.max_rto_ns = std::max(r.max_rto_ns, r.min_rto_ns);
       },
       kEngine},
      {"recovery.max_rto_us",
       "LOSS-5 largest retransmission timeout (the simulated NICs': 10 ms; given, min_rto_us no "
       "longer raises it)",
       0, kMaxUs, kReal,
       [](SimConfig& c, double v) {
         c.endpoint.recovery.max_rto_ns = ns_from_us(v);
         c.max_rto_given = true;
       },
       kEngine},
      {"recovery.initial_rtt_us", "LOSS-4 RTT assumed before a path's first sample", 0, kMaxUs,
       kReal, store<&RecoveryConfig::initial_rtt_ns, ns_from_us>, kEngine},
      {"recovery.rto_failures_to_retire", "PATH-4 consecutive timeouts that retire a path", 0, kU32,
       kInteger, store<&RecoveryConfig::rto_failures_to_retire>, kEngine},
      {"recovery.loss_window_packets", "PATH-5 loss-rate EWMA gain 1/N", 0, kU32, kInteger,
       store<&RecoveryConfig::loss_window_packets>, kEngine},
      {"recovery.peer_timeout_us",
       "PATH-7 silence of a peer with data outstanding that fails the connection", 0, kMaxUs, kReal,
       store<&RecoveryConfig::peer_timeout_ns, ns_from_us>, kEngine},
      {"recovery.keepalive_us", "CONN-9 idle silence after which a connection PROBEs (0: never)", 0,
       kMaxUs, kReal, store<&RecoveryConfig::keepalive_ns, ns_from_us>, kEngine},
      {"recovery.rnr_retry_limit",
       "LOSS-7 RNR retries of one refused message before its request fails kRnrRetryExceeded "
       "(0: unlimited)",
       0, kU32, kInteger, store<&RecoveryConfig::rnr_retry_limit>, kEngine},
      {"recovery.rnr_retry_us", "LOSS-7 wait before a packet NAKed with RNR is resent", 0, kMaxUs,
       kReal, store<&RecoveryConfig::rnr_retry_ns, ns_from_us>, kEngine},
      {"recovery.retire_loss_pct", "PATH-5 loss rate that retires a path, percent", 0, 100,
       kInteger, store<&RecoveryConfig::retire_loss_pct>, kEngine},
      {"queue.buffer_bytes", "drop-tail limit per switch port, bytes", 1, 1e12, kBytes,
       store<&QueueSpec::buffer_bytes>},
      {"queue.ecn_kmin", "ECN marking starts above this queue, bytes", 0, 1e12, kBytes,
       store<&QueueSpec::ecn_kmin>, kQueueEcn},
      {"queue.ecn_kmax", "ECN marking reaches ecn_pmax here, bytes", 0, 1e12, kBytes,
       store<&QueueSpec::ecn_kmax>, kQueueEcn},
      {"queue.ecn_pmax", "ECN marking probability at ecn_kmax", 0, 1, kReal,
       store<&QueueSpec::ecn_pmax>, kQueueEcn},
      {"queue.pfc", "PFC in the fabric (rocev2 turns it on and irn off, whatever this says)", 0, 1,
       kSwitch, store<&QueueSpec::pfc>, kPfcChoice},
      {"queue.pfc_xoff_bytes",
       "PFC: a switch pauses an ingress port holding more than this, bytes (-1: buffer_bytes "
       "less the headroom, the default)",
       -1, 1e12, kBytes, store<&QueueSpec::pfc_xoff_bytes, threshold>, kPfc},
      {"queue.pfc_xon_bytes",
       "PFC: a switch resumes a paused ingress port at or below this, bytes, not above XOFF (-1: "
       "XOFF less two frames, the default)",
       -1, 1e12, kBytes, store<&QueueSpec::pfc_xon_bytes, threshold>, kPfc},
      {"queue.trim",
       "switches cut MetaRoCE data packets to their headers instead of dropping them (TRIM-1)", 0,
       1, kSwitch, store<&QueueSpec::trim>, kTrimChoice},
      {"queue.trim_priority",
       "trimmed headers overtake queued data (a header lane); 0: they wait in the data FIFO", 0, 1,
       kSwitch, store<&QueueSpec::trim_priority>, kTrim},
      {"queue.priority_dscp",
       "switches and NICs serve this DSCP at strict priority, outside PFC (48: where CNPs and "
       "MetaRoCE's ACKs and NAKs travel, ENC-6); 1-63, 64: no such class (0 is the data's)",
       1, 64, kInteger, store<&QueueSpec::priority_dscp>},
      {"queue.trim_allowance_bytes", "trimmed headers may take a port this far past buffer_bytes",
       0, 1e12, kBytes, store<&QueueSpec::trim_allowance_bytes>, kTrim},
      {"rc.ecn_kmin",
       "rocev2/irn: RED marking starts above this queue, bytes (not with --fabric-ecn)", 0, 1e12,
       kBytes, store<&RcParams::ecn_kmin>, kBaselineRed},
      {"rc.ecn_kmax", "rocev2/irn: RED marking reaches rc.ecn_pmax here, bytes", 0, 1e12, kBytes,
       store<&RcParams::ecn_kmax>, kBaselineRed},
      {"rc.ecn_pmax", "rocev2/irn: RED marking probability at rc.ecn_kmax", 0, 1, kReal,
       store<&RcParams::ecn_pmax>, kBaselineRed},
      {"rc.cnp_interval_us", "DCQCN: a receiver sends at most one CNP per flow this often", 0, 1e6,
       kReal, store<&RcParams::cnp_interval, time_from_us>, kDcqcn},
      {"rc.g", "DCQCN: alpha gain", 0, 1, kReal, store<&RcParams::g>, kDcqcn},
      {"rc.alpha_timer_us", "DCQCN: alpha decays once per this interval without a CNP", 0.001, 1e6,
       kReal, store<&RcParams::alpha_timer, time_from_us>, kDcqcn},
      {"rc.increase_timer_us", "DCQCN: rate-increase timer", 0.001, 1e6, kReal,
       store<&RcParams::increase_timer, time_from_us>, kDcqcn},
      {"rc.byte_counter", "DCQCN: bytes sent per rate-increase step", 1, 1e12, kBytes,
       store<&RcParams::byte_counter>, kDcqcn},
      {"rc.fast_recovery_steps", "DCQCN: F, fast-recovery steps before additive increase", 0, 1000,
       kInteger, store<&RcParams::fast_recovery_steps>, kDcqcn},
      {"rc.rai_mbps", "DCQCN: additive increase, Mbit/s", 0, 1e7, kInteger,
       store<&RcParams::rai_mbps>, kDcqcn},
      {"rc.rhai_mbps", "DCQCN: hyper increase, Mbit/s", 0, 1e7, kInteger,
       store<&RcParams::rhai_mbps>, kDcqcn},
      {"rc.min_rate_mbps", "DCQCN: lowest rate, Mbit/s", 1, 1e7, kInteger,
       store<&RcParams::min_rate_mbps>, kDcqcn},
      {"mtu",
       "payload bytes per data packet, every transport (default 4096; frame sizes, BDP windows "
       "and the PFC headroom follow)",
       kMinMtu, kMaxMtu, kBytes,
       [](SimConfig& c, double v) { c.set_mtu(static_cast<uint32_t>(v)); }},
      // A WR's length is 32 bits (SendWr::length).
      {"wr_bytes", "MetaRoCE: largest WRITE a flow posts, bytes (below 4 GiB)", 4096, 4294967295.0,
       kBytes, store<&SimConfig::wr_bytes>, kEngine},
      {"wire_overhead", "bytes of Ethernet/IP/UDP framing per packet", 0, 1024, kInteger,
       store<&SimConfig::wire_overhead>},
  };
  return t;
}

}  // namespace

std::string range_error(std::string_view what, long double value, double min, double max,
                        bool integer) {
  if (std::isfinite(value) && value >= min && value <= max &&
      (!integer || value == std::floor(value)))
    return {};
  std::ostringstream o;
  o << value;
  // Six digits may round a value past a bound onto it, or a fraction onto a
  // whole number ("9e+18" for 9e18 + 1, "1e+12" for 1e12 + 0.5): a message
  // that calls the bound out of range. Then every digit.
  const long double shown = std::strtold(o.str().c_str(), nullptr);
  if (std::isfinite(value) && shown >= min && shown <= max &&
      (!integer || shown == std::floor(shown))) {
    o.str("");
    o << std::setprecision(std::numeric_limits<long double>::digits10 + 2) << value;
  }
  std::ostringstream m;
  m << what << ": " << o.str() << " is not " << (integer ? "an integer " : "a value ") << "in ["
    << min << ", " << max << "]";
  return m.str();
}

bool apply_setting(SimConfig& cfg, std::string_view key, double value, std::string& err,
                   std::string_view option) {
  for (const Setting& s : table()) {
    if (key != s.key) continue;
    err = range_error(option.empty() ? "--set " + std::string(key) : std::string(option), value,
                      s.min, s.max, s.kind != SettingKind::kReal);
    if (!err.empty()) return false;
    s.set(cfg, value);
    return true;
  }
  err = "--set: unknown key '" + std::string(key) + "' (--list-settings shows them)";
  return false;
}

bool parse_setting(std::string_view assignment, std::string& key, double& value, std::string& err) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    err = "--set wants KEY=VALUE, got '" + std::string(assignment) + "'";
    return false;
  }
  key = assignment.substr(0, eq);
  const std::string_view text = assignment.substr(eq + 1);
  // from_chars, not strtod: strtod took "0x10" as 16 and " 5000" as 5000
  // (but refused "5000 "), where a config file refuses all three.
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size()) {
    err = "--set " + key + ": '" + std::string(text) + "' is not a number";
    return false;
  }
  if (ec == std::errc::result_out_of_range) {
    err = "--set " + key + ": " + std::string(text) + " is out of a double's range";
    return false;
  }
  return ec == std::errc{};
}

bool apply_setting(SimConfig& cfg, std::string_view assignment, std::string& err) {
  std::string key;
  double value = 0;
  return parse_setting(assignment, key, value, err) && apply_setting(cfg, key, value, err);
}

std::optional<SettingRange> setting_range(std::string_view key) {
  for (const Setting& s : table())
    if (key == s.key) return SettingRange{s.min, s.max, s.kind != SettingKind::kReal, s.kind};
  return std::nullopt;
}

std::string engine_setting_error(const SimConfig& cfg, std::vector<std::string>& keys) {
  keys.clear();
  std::string e = config_error(cfg.endpoint);
  // The engine names its fields ("recovery.min_rto_ns"); --set and a config
  // file name them in microseconds ("recovery.min_rto_us").
  std::string word;
  auto take = [&] {
    if (word.size() > 3 && word.ends_with("_ns")) word.replace(word.size() - 3, 3, "_us");
    if (setting_range(word) && std::find(keys.begin(), keys.end(), word) == keys.end())
      keys.push_back(word);
    word.clear();
  };
  for (const char ch : e) {
    if (std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_' || ch == '.') {
      word += ch;
    } else {
      take();
    }
  }
  take();
  return e;
}

std::string_view setting_idle_in(std::string_view key, const SimConfig& cfg) {
  for (const Setting& s : table())
    if (key == s.key) return s.scope.acts(cfg) ? "" : s.scope.where;
  return "";
}

std::vector<std::string_view> setting_keys() {
  std::vector<std::string_view> keys;
  for (const Setting& s : table()) keys.emplace_back(s.key);
  return keys;
}

std::string settings_help() {
  std::ostringstream o;
  for (const Setting& s : table()) o << "  " << s.key << "\n      " << s.help << "\n";
  return o.str();
}

}  // namespace metaroce::sim
