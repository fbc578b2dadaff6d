// `metaroce-bench harness`: goodput of one connection over the seeded
// lossy-multipath harness, against the same run with no loss and no failure
// (the baseline is run first, in the same process, with the same seed).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench.hpp"
#include "metaroce/engine.hpp"
#include "metaroce/harness/harness.hpp"
#include "metaroce/udp.hpp"

namespace metaroce::bench {
namespace {

using harness::Harness;
using harness::HarnessConfig;
using harness::PathConfig;

struct Outcome {
  double seconds = 0;  // simulated time from first post to last completion
  uint64_t completed = 0, failed = 0;
  uint64_t data_errors = 0;  // bytes that differ from the source
  uint64_t packets_sent = 0, retransmissions = 0, duplicates = 0;
  uint64_t retirements = 0, timeouts = 0;
  double failover_ms = -1;
  double detect_ms = -1;  // fault -> first timeout loss or state change on the failed link
  bool finished = false;
  std::vector<PathStats> paths;
};

// Unequal delays so that packets of one message arrive reordered (the case
// that defeats dup-ack loss detection); 25 Gbit/s each.
PathConfig path_config(uint32_t i) {
  static const uint64_t delays_us[] = {2, 5, 10, 20, 3, 7, 12, 15};
  PathConfig p;
  p.rate_bps = 25 * harness::kGbps;
  p.delay_ns = delays_us[i % 8] * kMicrosecond;
  p.queue_limit_bytes = 512 * 1024;
  p.ecn_threshold_bytes = 64 * 1024;
  p.overhead_bytes = 8 + 20 + 18 + 20;  // UDP, IPv4, Ethernet, preamble + gap
  return p;
}

constexpr uint64_t kFabricLinkBps = 500'000'000;

// bench/fabric's links (tbf at 500 Mbit/s with a 400 KB queue, nftables
// loss, no CE marking), with a one-way delay on the scale of two veth hops
// and a router. The real fabric adds what this one lacks: its processes wait
// for the VM's two cores. A shortfall here is the protocol's own.
PathConfig fabric_link() {
  PathConfig p;
  p.rate_bps = kFabricLinkBps;
  p.delay_ns = 50 * kMicrosecond;
  p.queue_limit_bytes = 400 * 1024;
  p.overhead_bytes = 8 + 20 + 18 + 20;
  return p;
}

// Links reached by entropy through the network's own mapping (--fabric hashes
// them; e % links was wrong there since stop 12).
void print_paths_per_link(const harness::Network& net, const std::vector<uint16_t>& entropies) {
  std::vector<uint32_t> per(net.num_paths(), 0);
  for (uint16_t e : entropies) ++per[net.path_of(e)];
  std::fprintf(stderr, " | paths per link:");
  for (uint32_t n : per) std::fprintf(stderr, " %u", n);
  std::fprintf(stderr, "\n");
}

Outcome transfer(const HarnessOptions& o, double loss, int fail_path, TimeNs fail_at) {
  HarnessConfig hc = HarnessConfig::two_nodes(o.paths, o.seed);
  hc.net.hash_paths = o.fabric;  // bench/fabric's routers hash ports (policy 3)
  for (uint32_t i = 0; i < o.paths; ++i) {
    hc.net.paths[i] = o.fabric ? fabric_link() : path_config(i);
    hc.net.paths[i].loss = loss;
  }
  if (fail_path >= 0) hc.net.paths[static_cast<size_t>(fail_path)].down_at = fail_at;
  for (auto& e : hc.endpoints) {
    if (o.fabric) {
      // Entropies reach links by a seeded hash, as on bench/fabric.
      const uint64_t seed = e.seed;
      e = udp::Options{}.engine;
      e.seed = seed;
      e.num_paths = static_cast<uint8_t>(o.entropies);
    } else {
      e.num_paths = static_cast<uint8_t>(o.paths);
      // Data-center timer scale: RTTs here are 4-40 us plus queueing.
      e.recovery.min_rto_ns = 500 * kMicrosecond;
      e.recovery.initial_rtt_ns = 50 * kMicrosecond;
    }
    if (o.explore_ms >= 0) e.cc.explore_interval_ns = static_cast<uint64_t>(o.explore_ms * 1e6);
  }
  Harness h(hc);
  // The first timeout-declared loss or path state change after the fault, on
  // a path whose entropy reaches the failed link, is when the sender noticed
  // (the engine's trace, not a guess from the wire; a random-loss timeout on a
  // live path is not the failure's). With --trace-paths the same trace
  // reports each path change on stderr.
  struct Watch {
    TimeNs fail_at{0};
    int fail_path = -1;
    TimeNs first = TimeNs::never();
    const HarnessOptions* o = nullptr;
    Harness* h = nullptr;
    std::vector<PathStats> before;  // each path's stats at its latest loss
    std::vector<TimeNs> counted;    // each path's latest loss counted against it (PATH-5)
    std::vector<uint16_t> entropy;  // each path's entropy now
    TimeNs last_timeout = TimeNs::never();
    uint32_t last_timeout_path = 0;
  } watch;
  watch.fail_at = fail_at;
  watch.fail_path = fail_path;
  watch.o = &o;
  watch.h = &h;
  const bool tracing = fail_path >= 0 || o.trace_paths;
  if (tracing) {
    h.ep(0).set_trace(
        [](void* ctx, const TraceEvent& ev) {
          auto* w = static_cast<Watch*>(ctx);
          if (ev.path >= w->entropy.size()) return;  // the handshake, before the paths exist
          const uint32_t link = w->h->net().path_of(w->entropy[ev.path]);
          const bool moves = ev.kind == TraceKind::kPathState ||
                             ev.kind == TraceKind::kPathRetired ||
                             ev.kind == TraceKind::kPathExplored;
          const auto cause = static_cast<LossCause>(ev.aux);
          const bool signal = (ev.kind == TraceKind::kLost && cause == LossCause::kTimeout) ||
                              ev.kind == TraceKind::kPathState ||
                              ev.kind == TraceKind::kPathRetired;
          if (signal && ev.time >= w->fail_at && w->first == TimeNs::never() &&
              static_cast<int>(link) == w->fail_path)
            w->first = ev.time;
          if (moves) w->entropy[ev.path] = static_cast<uint16_t>(ev.psn);
          if (!w->o->trace_paths) return;
          if (ev.kind == TraceKind::kLost) {
            (void)w->h->ep(0).path_stats(ev.conn, ev.path, w->before[ev.path]);
            if (cause == LossCause::kReorder || cause == LossCause::kTailProbe)
              w->counted[ev.path] = ev.time;
            // One line per timeout, not per packet it declares lost.
            if (cause == LossCause::kTimeout &&
                (ev.time != w->last_timeout || ev.path != w->last_timeout_path)) {
              w->last_timeout = ev.time;
              w->last_timeout_path = ev.path;
              std::fprintf(stderr, "%9.3f ms path %2u %-14s link %u\n",
                           static_cast<double>(ev.time.ns) / 1e6, ev.path, "timeout", link);
            }
            return;
          }
          if (!moves) return;
          const PathStats& b = w->before[ev.path];
          const char* what = "state";
          if (ev.kind == TraceKind::kPathRetired) {
            // PATH-5 retires an ACTIVE path at a loss it counted; PATH-4
            // one whose probes or RTOs timed out.
            what = b.state != PathState::kActive    ? "PATH-4 probes"
                   : w->counted[ev.path] == ev.time ? "PATH-5 loss"
                                                    : "PATH-4 rto";
          } else if (ev.kind == TraceKind::kPathExplored) {
            what = "PATH-8 explore";
          }
          std::fprintf(stderr, "%9.3f ms path %2u %-14s link %u -> %u",
                       static_cast<double>(ev.time.ns) / 1e6, ev.path, what, link,
                       w->h->net().path_of(static_cast<uint16_t>(ev.psn)));
          if (ev.kind == TraceKind::kPathState)
            std::fprintf(stderr, " now %s", ev.aux == 0 ? "active" : "probing");
          else if (ev.kind == TraceKind::kPathRetired)
            std::fprintf(stderr, " loss %u.%u%% srtt %.0f us min_rtt %.0f us cwnd %u",
                         b.loss_rate_permille / 10, b.loss_rate_permille % 10,
                         static_cast<double>(b.srtt_ns) / 1e3,
                         static_cast<double>(b.min_rtt_ns) / 1e3, b.cwnd_bytes);
          print_paths_per_link(w->h->net(), w->entropy);
        },
        &watch);
  }
  auto [a, b] = h.connect(0, 1);
  Outcome out;
  if (!a.valid()) return out;
  for (size_t i = 0; i < h.ep(0).path_count(a); ++i) {
    PathStats ps;
    (void)h.ep(0).path_stats(a, i, ps);
    watch.before.push_back(ps);
    watch.counted.push_back(TimeNs::never());
    watch.entropy.push_back(ps.entropy);
  }
  if (o.trace_paths) {
    std::fprintf(stderr, "%9.3f ms start", static_cast<double>(h.now().ns) / 1e6);
    print_paths_per_link(h.net(), watch.entropy);
    if (fail_path >= 0)
      std::fprintf(stderr, "%9.3f ms link %d fails\n", static_cast<double>(fail_at.ns) / 1e6,
                   fail_path);
  }

  const uint32_t msg = 1u << 20;
  const uint64_t total = o.size_mib;
  const uint64_t slots = std::min<uint64_t>(total, 64);
  std::vector<uint8_t> src(slots * msg), dst(slots * msg, 0);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>((i * 131 + (i >> 12)) ^ o.seed);
  MemoryRegion ms, md;
  (void)h.ep(0).register_memory(src.data(), src.size(), 0, ms);
  (void)h.ep(1).register_memory(dst.data(), dst.size(), kAccessRemoteWrite, md);

  uint64_t posted = 0;
  const uint32_t qd = 8;
  auto post = [&] {
    if (h.ep(0).post_send(a, slot_write(ms, md, msg, slots, posted)) == Status::kOk) ++posted;
  };
  const TimeNs start = h.now();
  for (uint32_t i = 0; i < qd && posted < total; ++i) post();
  h.flush();
  size_t seen = 0;
  TimeNs last = start;
  h.run_until(
      [&] {
        auto& c = h.completions(0);
        for (; seen < c.size(); ++seen) {
          if (c[seen].status == Status::kOk)
            ++out.completed;
          else
            ++out.failed;
          last = c[seen].time;
          if (posted < total) post();
        }
        if (posted > out.completed + out.failed) h.flush();
        return out.completed + out.failed == total;
      },
      start + 60 * kSecond);
  out.finished = out.completed + out.failed == total;
  out.seconds = static_cast<double>(last.since(start)) / 1e9;
  // Every slot was last written by the final round of writes: compare it all.
  for (size_t i = 0; i < src.size(); ++i) out.data_errors += src[i] != dst[i];
  if (const ConnStats* s = h.ep(0).conn_stats(a)) {
    out.packets_sent = s->data_packets_sent;
    out.retransmissions = s->retransmissions;
    out.retirements = s->path_retirements;
    out.timeouts = s->timeouts;
  }
  if (const ConnStats* s = h.ep(1).conn_stats(b)) out.duplicates = s->duplicates_received;
  for (size_t i = 0; i < h.ep(0).path_count(a); ++i) {
    PathStats ps;
    if (h.ep(0).path_stats(a, i, ps)) out.paths.push_back(ps);
  }
  if (o.trace_paths) {
    for (uint32_t l = 0; l < o.paths; ++l) {
      const auto& ls = h.net().stats(0, 1, l);
      std::fprintf(stderr,
                   "link %u: %llu packets delivered, %llu queue drops, %llu random losses, "
                   "highest backlog %llu KB\n",
                   l, static_cast<unsigned long long>(ls.packets_delivered),
                   static_cast<unsigned long long>(ls.dropped_queue),
                   static_cast<unsigned long long>(ls.lost),
                   static_cast<unsigned long long>(ls.max_backlog_bytes / 1024));
    }
  }
  if (fail_path >= 0) {
    if (watch.first != TimeNs::never())
      out.detect_ms = static_cast<double>(watch.first.since(fail_at)) / 1e6;
    const auto& ls = h.net().stats(0, 1, static_cast<uint32_t>(fail_path));
    out.failover_ms = ls.last_data_while_down == TimeNs::never()
                          ? 0.0
                          : static_cast<double>(ls.last_data_while_down.since(fail_at)) / 1e6;
  }
  return out;
}

}  // namespace

int run_harness(const HarnessOptions& o) {
  if (o.fail_path >= static_cast<int>(o.paths)) {
    std::fprintf(stderr, "--fail-path %d: only %u paths\n", o.fail_path, o.paths);
    return 2;
  }
  HarnessOptions quiet = o;
  quiet.trace_paths = false;  // the lossy run's paths only
  const Outcome base = transfer(quiet, 0.0, -1, TimeNs::never());
  // The failure comes halfway through the baseline's transfer time.
  const TimeNs fail_at{static_cast<uint64_t>(base.seconds * 1e9 / 2) + 1'000'000};
  const Outcome run = transfer(o, o.loss, o.fail_path, fail_at);
  const double bytes = static_cast<double>(o.size_mib) * (1 << 20);
  const double base_gbps = base.seconds > 0 ? bytes * 8 / base.seconds / 1e9 : 0;
  const double gbps = run.seconds > 0 && run.finished ? bytes * 8 / run.seconds / 1e9 : 0;

  Report r("harness");
  if (o.fabric) {
    r.num("links", o.paths, "links of 500 Mbit/s, 400 KB queues, no ECN (bench/fabric's)");
    r.num("entropies", o.entropies, "paths per connection, spread over the links by entropy");
    r.num("capacity_gbps", static_cast<double>(o.paths * kFabricLinkBps) / 1e9,
          "sum of the link rates");
  } else {
    r.num("paths", o.paths, "network paths (25 Gbit/s each, unequal delays)");
  }
  r.given("loss", o.loss, "random loss on every path");
  r.num("fail_path", o.fail_path, "path taken down mid-transfer (-1: none)");
  r.exact("seed", o.seed, "seed");
  r.num("goodput_gbps", gbps, "this run");
  r.num("lossless_goodput_gbps", base_gbps, "same transfer, no loss, no failure");
  r.num("goodput_ratio", base_gbps > 0 ? gbps / base_gbps : 0, "goodput / lossless goodput");
  r.fraction("spurious_retx_fraction",
             run.packets_sent
                 ? static_cast<double>(run.duplicates) / static_cast<double>(run.packets_sent)
                 : 0,
             "retransmissions whose original also arrived / data packets sent");
  r.fraction("retx_fraction",
             run.packets_sent
                 ? static_cast<double>(run.retransmissions) / static_cast<double>(run.packets_sent)
                 : 0,
             "retransmissions / data packets sent");
  r.num("data_errors", static_cast<double>(run.data_errors), "bytes that differ at the receiver");
  r.num("completed", static_cast<double>(run.completed), "1 MiB writes completed OK");
  r.num("failed", static_cast<double>(run.failed), "writes completed with an error");
  r.num("path_retirements", static_cast<double>(run.retirements), "entropy values replaced");
  // Early in a transfer over deep queues a timeout is the usual source of
  // the resends that spurious_retx_fraction counts.
  r.num("timeouts", static_cast<double>(run.timeouts), "paths' retransmission timeouts (LOSS-5)");
  r.num("failover_ms", run.failover_ms,
        "path down -> last data packet sent onto it (-1: no failure)");
  r.num("detect_ms", run.detect_ms,
        "path down -> first timeout loss, state change or retirement of a path on that "
        "link");
  r.print(o.json);
  if (!o.json) {
    // "timeouts", not "rto": a count beside srtt_us, not a duration.
    std::printf("\n  %-4s %-7s %-7s %12s %8s %8s %8s %8s %8s %6s %6s\n", "path", "entropy", "state",
                "packets", "retx", "CE", "losses", "timeouts", "srtt_us", "cwndKB", "retired");
    for (size_t i = 0; i < run.paths.size(); ++i) {
      const PathStats& p = run.paths[i];
      std::printf("  %-4zu %-7u %-7s %12llu %8llu %8llu %8llu %8llu %8.1f %6u %6llu\n", i,
                  p.entropy, p.state == PathState::kActive ? "active" : "probing",
                  static_cast<unsigned long long>(p.packets_sent),
                  static_cast<unsigned long long>(p.retransmissions),
                  static_cast<unsigned long long>(p.ce_marks),
                  static_cast<unsigned long long>(p.losses),
                  static_cast<unsigned long long>(p.timeouts), static_cast<double>(p.srtt_ns) / 1e3,
                  p.cwnd_bytes / 1024, static_cast<unsigned long long>(p.retirements));
    }
  }
  return run.finished && run.data_errors == 0 && run.failed == 0 ? 0 : 1;
}

}  // namespace metaroce::bench
