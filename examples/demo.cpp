// metaroce-demo: two MetaRoCE endpoints on a simulated lossy multipath
// network (harness/), one path failing halfway through a bulk transfer.
//
// Node 0 WRITEs --size MiB into node 1 as 1 MiB WRITEs, --qd outstanding at
// a time. Each WRITE carries its own seeded pattern; when it completes, the
// target slot is checked byte by byte and poisoned before it is reused, and
// at the end every slot must still hold the poison (no late or stray writes).
// Everything runs in simulated time: the goodput is what the protocol would
// reach on that network, not how fast this machine simulates it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/cli_parse.hpp"
#include "common/number_range.hpp"
#include "metaroce/engine.hpp"
#include "metaroce/harness/harness.hpp"

namespace {

using metaroce::kMicrosecond;
using metaroce::kMillisecond;
using metaroce::kSecond;
using metaroce::TimeNs;
namespace mh = metaroce::harness;

// The pattern of WRITE number `index`: 8 bytes at a time from splitmix64.
void fill_pattern(uint8_t* p, size_t len, uint64_t seed, uint64_t index) {
  mh::SplitMix64 sm(mh::mix_seed(seed, index, 0xd3));
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    const uint64_t x = sm.next();
    std::memcpy(p + i, &x, 8);
  }
  if (i < len) {
    const uint64_t x = sm.next();
    std::memcpy(p + i, &x, len - i);
  }
}

constexpr uint8_t kPoison = 0xEE;
// Each side's buffer (--wr-size x outstanding WRITEs) is allocated and touched
// up front: a bound that says so beats std::bad_alloc or the OOM killer.
constexpr size_t kMaxBufferBytes = size_t{1} << 30;

const char* state_name(metaroce::PathState s) {
  return s == metaroce::PathState::kActive ? "active" : "probing";
}

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  uint32_t paths = 4;
  double loss = 0.01;
  uint64_t size_mib = 256;
  uint32_t qd = 8;
  uint32_t wr_kib = 1024;
  double rate_gbps = 25;
  int fail_path = 2;
  double deadline_s = 0;
  bool trace_failover = false;

  CLI::App app{"MetaRoCE demo: bulk WRITEs over a simulated lossy multipath network"};
  app.add_option("--seed", seed, "seed of the network and the endpoints")
      ->check(metaroce::tools::not_negative())
      ->capture_default_str();
  app.add_option("--paths", paths, "network paths (ECMP on UDP source port)")
      ->check(metaroce::tools::number_in_range(1, 32))
      ->capture_default_str();
  app.add_option("--loss", loss, "random loss probability on every path")
      ->check(metaroce::tools::number_in_range(0.0, 0.5))
      ->capture_default_str();
  app.add_option("--size", size_mib, "MiB to transfer")
      ->check(metaroce::tools::number_in_range(1, 65536))
      ->capture_default_str();
  app.add_option("--qd", qd, "outstanding WRITEs")
      ->check(metaroce::tools::number_in_range(1, 128))
      ->capture_default_str();
  app.add_option("--wr-size", wr_kib, "KiB per WRITE")
      ->check(metaroce::tools::number_in_range(1, 65536))
      ->capture_default_str();
  app.add_option("--rate", rate_gbps, "Gbit/s per path")
      ->check(metaroce::tools::number_in_range(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--fail-path", fail_path,
                 "path that fails halfway through (-1: none; by default 2, none with --paths "
                 "under 3)")
      ->capture_default_str();
  app.add_option("--deadline", deadline_s,
                 "simulated seconds before giving up (0: 20 times the ideal transfer time, at "
                 "least 600)")
      ->check(metaroce::tools::number_in_range(0.0, 1e6))
      ->capture_default_str();
  app.add_flag("--trace-failover", trace_failover, "print the path events of the sender");
  if (const auto rc = metaroce::tools::parse_command_line(app, argc, argv)) return *rc;
  // The default names the scenario's path 2; with fewer paths there is none to
  // fail, which is not the user's error (only a --fail-path they gave is).
  if (app.count("--fail-path") == 0 && fail_path >= static_cast<int>(paths)) fail_path = -1;
  // A path the network does not have used to mean no failure at all, silently.
  if (fail_path < -1 || fail_path >= static_cast<int>(paths)) {
    (void)app.exit(CLI::ValidationError(
        "--fail-path", std::to_string(fail_path) + " is neither -1 (none) nor a path, 0.." +
                           std::to_string(paths - 1) + " (--paths " + std::to_string(paths) + ")"));
    return metaroce::tools::kExitBadOptions;
  }

  // Never more slots than WRITEs: --size 1 --wr-size 65536 --qd 128 asked for
  // 16 GiB to move 1 MiB.
  const size_t wr_size = size_t{wr_kib} * 1024;
  const uint64_t total = size_mib * 1024 * 1024;
  const uint64_t n_wrs = (total + wr_size - 1) / wr_size;
  const auto slots = static_cast<size_t>(std::min<uint64_t>(qd, n_wrs));
  if (wr_size * slots > kMaxBufferBytes) {
    (void)app.exit(CLI::ValidationError(
        "--wr-size x --qd", std::to_string(wr_kib) + " KiB x " + std::to_string(slots) +
                                " outstanding needs " + std::to_string((wr_size * slots) >> 20) +
                                " MiB on each side; at most " +
                                std::to_string(kMaxBufferBytes >> 20) + " MiB"));
    return metaroce::tools::kExitBadOptions;
  }

  // ---- network: unequal delays, equal rates, a shallow-ish ECN queue
  static constexpr uint64_t kDelaysUs[] = {2, 5, 10, 20};
  mh::HarnessConfig cfg = mh::HarnessConfig::two_nodes(paths, seed);
  for (uint32_t i = 0; i < paths; ++i) {
    auto& p = cfg.net.paths[i];
    p.rate_bps = static_cast<uint64_t>(rate_gbps * 1e9);
    p.delay_ns = kDelaysUs[i % 4] * (1 + i / 4) * kMicrosecond;
    p.queue_limit_bytes = 2 * 1024 * 1024;
    p.ecn_threshold_bytes = 200 * 1024;
    p.overhead_bytes = 8 + 20 + 18 + 20;  // UDP, IPv4, Ethernet + FCS, preamble + gap
    p.loss = loss;
  }
  mh::Harness h(cfg);
  const auto ids = h.connect(0, 1);
  const metaroce::ConnId conn = ids.first;
  const metaroce::ConnId peer_conn = ids.second;
  if (!conn.valid()) {
    std::fprintf(stderr, "connection failed\n");
    return 1;  // 2 means a bad option only
  }

  struct Ctx {
    uint64_t t0 = 0;
    bool on = false;
    uint64_t last_timeout_ns = UINT64_MAX;  // one line per timeout, not per lost packet
    uint8_t last_timeout_slot = 0;
  } trace_ctx;
  if (trace_failover) {
    h.set_engine_trace_for(
        0,
        [](void* ctx, const metaroce::TraceEvent& ev) {
          auto* c = static_cast<Ctx*>(ctx);
          if (!c->on) return;
          if (ev.kind == metaroce::TraceKind::kPathRetired)
            std::printf("  %10.1f us  slot %u retired: entropy %u -> %u\n", us(ev.time.ns - c->t0),
                        ev.path, ev.aux, ev.psn);
          else if (ev.kind == metaroce::TraceKind::kPathState)
            std::printf("  %10.1f us  slot %u now %s\n", us(ev.time.ns - c->t0), ev.path,
                        ev.aux == 0 ? "active" : "probing");
          else if (ev.kind == metaroce::TraceKind::kLost &&
                   static_cast<metaroce::LossCause>(ev.aux) == metaroce::LossCause::kTimeout &&
                   (ev.time.ns != c->last_timeout_ns || ev.path != c->last_timeout_slot)) {
            c->last_timeout_ns = ev.time.ns;
            c->last_timeout_slot = ev.path;
            std::printf("  %10.1f us  slot %u retransmission timeout\n", us(ev.time.ns - c->t0),
                        ev.path);
          }
        },
        &trace_ctx);
  }

  // ---- memory: one slot per outstanding WRITE on each side
  std::vector<uint8_t> src(wr_size * slots), dst(wr_size * slots, kPoison);
  metaroce::MemoryRegion src_mr, dst_mr;
  if (h.ep(0).register_memory(src.data(), src.size(), metaroce::kAccessLocalWrite, src_mr) !=
          metaroce::Status::kOk ||
      h.ep(1).register_memory(dst.data(), dst.size(), metaroce::kAccessRemoteWrite, dst_mr) !=
          metaroce::Status::kOk) {
    std::fprintf(stderr, "memory registration failed\n");
    return 1;
  }

  auto wr_len = [&](uint64_t i) {
    return static_cast<uint32_t>(std::min<uint64_t>(wr_size, total - i * wr_size));
  };
  // bytes_checked counts each completed WRITE's own length (the last one may be
  // short): the goodput is that over the simulated time.
  uint64_t posted = 0, completed = 0, bytes_checked = 0, bytes_bad = 0, failed_wrs = 0;
  auto post_next = [&] {
    const uint64_t i = posted;
    const size_t slot = static_cast<size_t>(i % slots);
    fill_pattern(src.data() + slot * wr_size, wr_len(i), seed, i);
    metaroce::SendWr wr;
    wr.wr_id = i;
    wr.op = metaroce::WrOpcode::kWrite;
    wr.local_addr = src_mr.addr + slot * wr_size;
    wr.length = wr_len(i);
    wr.lkey = src_mr.lkey;
    wr.remote_addr = dst_mr.addr + slot * wr_size;
    wr.rkey = dst_mr.rkey;
    if (h.ep(0).post_send(conn, wr) != metaroce::Status::kOk) return false;
    ++posted;
    return true;
  };

  std::printf("MetaRoCE demo (seed %" PRIu64 ")\n", seed);
  std::printf("  %" PRIu64 " MiB as %" PRIu64 " WRITEs of %u KiB, %u outstanding\n", size_mib,
              n_wrs, wr_kib, qd);
  std::printf("  %u paths x %.1f Gbit/s, one-way delays", paths, rate_gbps);
  for (uint32_t i = 0; i < paths; ++i)
    std::printf("%s%.0f", i ? "/" : " ", us(cfg.net.paths[i].delay_ns));
  std::printf(" us, %.1f%% random loss on every path\n", loss * 100);
  if (fail_path >= 0)
    std::printf("  path %d fails for good once half the data is acknowledged\n", fail_path);
  if (trace_failover) std::printf("\n  sender path events:\n");
  std::fflush(stdout);
  const auto wall0 = std::chrono::steady_clock::now();
  const TimeNs start = h.now();
  trace_ctx.t0 = start.ns;
  trace_ctx.on = true;
  TimeNs fail_at = TimeNs::never();
  while (posted < n_wrs && posted < qd) post_next();
  size_t seen = 0;
  bool error = false;
  // A fixed 600 s failed a clean --paths 1 --rate 0.1 --size 8192 (687 s at line
  // rate): the default follows the offered load, on the paths that stay up.
  const double live_bps = rate_gbps * 1e9 * (paths - (fail_path >= 0 && paths > 1 ? 1 : 0));
  const double ideal_s = static_cast<double>(total) * 8.0 / live_bps;
  if (deadline_s == 0) deadline_s = std::max(600.0, 20.0 * ideal_s);
  const TimeNs deadline = start + static_cast<uint64_t>(deadline_s * 1e9);
  while (completed < n_wrs && !error) {
    auto& comps = h.completions(0);
    if (!h.run_until([&] { return comps.size() > seen; }, deadline)) break;
    for (; seen < comps.size(); ++seen) {
      const auto& c = comps[seen];
      if (c.status != metaroce::Status::kOk) {
        std::fprintf(stderr, "WRITE %" PRIu64 " failed: %s\n", c.wr_id,
                     std::string(metaroce::status_name(c.status)).c_str());
        ++failed_wrs;
        error = true;
        continue;
      }
      if (c.wr_id != completed) {
        std::fprintf(stderr, "completion order: got %" PRIu64 ", expected %" PRIu64 "\n", c.wr_id,
                     completed);
        error = true;
      }
      // Verify the slot against the pattern still in the source slot, then poison it.
      const size_t slot = static_cast<size_t>(c.wr_id % slots);
      const uint32_t len = wr_len(c.wr_id);
      const uint8_t* got = dst.data() + slot * wr_size;
      const uint8_t* want = src.data() + slot * wr_size;
      bytes_checked += len;  // the wrong ones are counted apart
      if (std::memcmp(got, want, len) != 0)
        for (uint32_t k = 0; k < len; ++k) bytes_bad += got[k] != want[k];
      std::memset(dst.data() + slot * wr_size, kPoison, len);
      ++completed;
      if (fail_path >= 0 && fail_at == TimeNs::never() && completed * 2 >= n_wrs) {
        fail_at = h.now();
        h.net().set_outage(static_cast<uint32_t>(fail_path), fail_at);
      }
      if (posted < n_wrs) post_next();
    }
  }
  const TimeNs end = h.now();
  // A bare FAIL sent the user looking at the byte check for a run that had
  // simply stopped.
  if (completed < n_wrs && !error) {
    if (h.stalled())
      std::fprintf(stderr, "harness stalled: %s\n", h.stall_reason().c_str());
    else
      std::fprintf(stderr,
                   "%" PRIu64 " of %" PRIu64
                   " WRITEs completed within the simulated deadline of %g s (--deadline)\n",
                   completed, n_wrs, deadline_s);
  }
  // Let stragglers (retransmissions, duplicates) arrive: nothing may land.
  h.run_for(5 * kMillisecond);
  uint64_t late = 0;
  for (uint8_t b : dst) late += b != kPoison;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  // ---- report
  const uint64_t sim_ns = end.since(start);
  const auto* cs = h.ep(0).conn_stats(conn);
  const auto* rs = h.ep(1).conn_stats(peer_conn);
  if (fail_at != TimeNs::never())
    std::printf("\n  path %d failed at %.3f ms\n", fail_path,
                static_cast<double>(fail_at.since(start)) / 1e6);
  else
    std::printf("\n");
  std::printf("  simulated time   %10.3f ms\n", static_cast<double>(sim_ns) / 1e6);
  std::printf("  goodput          %10.2f Gbit/s  (of %.1f Gbit/s of links)\n",
              sim_ns ? static_cast<double>(bytes_checked) * 8.0 / static_cast<double>(sim_ns) : 0.0,
              rate_gbps * paths);
  if (cs != nullptr) {
    std::printf("  data packets     %10" PRIu64 "  retransmitted %" PRIu64 " (%.2f%%)\n",
                cs->data_packets_sent, cs->retransmissions,
                cs->data_packets_sent ? 100.0 * static_cast<double>(cs->retransmissions) /
                                            static_cast<double>(cs->data_packets_sent)
                                      : 0.0);
    std::printf("  losses declared  %10" PRIu64 "  timeouts %" PRIu64 ", path retirements %" PRIu64
                "\n",
                cs->losses_declared, cs->timeouts, cs->path_retirements);
  }
  if (rs != nullptr)
    std::printf("  receiver         %10" PRIu64 " packets placed, %" PRIu64 " duplicates, %" PRIu64
                " CE-marked, %" PRIu64 " ACKs\n",
                rs->data_packets_received, rs->duplicates_received, rs->ce_received, rs->acks_sent);
  const auto& es = h.ep(1).endpoint_stats();
  std::printf("  bad ICRC drops   %10" PRIu64 "\n", es.bad_checksum);

  std::printf("\n  sender paths (engine slots; net path = entropy %% %u)\n", paths);
  std::printf("  %4s %7s %4s %8s %9s %7s %7s %6s %7s %6s %9s %9s\n", "slot", "entropy", "net",
              "state", "packets", "retx", "CE", "losses", "timeout", "retire", "srtt us",
              "cwnd KiB");
  for (size_t s = 0; s < h.ep(0).path_count(conn); ++s) {
    metaroce::PathStats ps;
    if (!h.ep(0).path_stats(conn, s, ps)) continue;
    std::printf("  %4zu %7u %4u %8s %9" PRIu64 " %7" PRIu64 " %7" PRIu64 " %6" PRIu64 " %7" PRIu64
                " %6" PRIu64 " %9.1f %9.1f\n",
                s, ps.entropy, ps.entropy % paths, state_name(ps.state), ps.packets_sent,
                ps.retransmissions, ps.ce_marks, ps.losses, ps.timeouts, ps.retirements,
                us(ps.srtt_ns), ps.cwnd_bytes / 1024.0);
  }

  std::printf("\n  network paths (data direction 0->1 | ACK direction 1->0)\n");
  std::printf("  %4s %6s %9s %9s %7s %7s %7s %9s %8s\n", "path", "delay", "packets", "delivered",
              "lost", "q-drop", "CE", "dead-drop", "acks");
  for (uint32_t p = 0; p < paths; ++p) {
    const auto& f = h.net().stats(0, 1, p);
    const auto& b = h.net().stats(1, 0, p);
    std::printf("  %4u %4.0fus %9" PRIu64 " %9" PRIu64 " %7" PRIu64 " %7" PRIu64 " %7" PRIu64
                " %9" PRIu64 " %8" PRIu64 "\n",
                p, us(cfg.net.paths[p].delay_ns), f.packets_sent, f.packets_delivered, f.lost,
                f.dropped_queue, f.ce_marked, f.dropped_down + b.dropped_down, b.packets_sent);
  }
  if (fail_at != TimeNs::never()) {
    const auto d = h.net().stats(0, 1, static_cast<uint32_t>(fail_path));
    if (d.last_data_while_down != TimeNs::never())
      std::printf("\n  failover: %" PRIu64
                  " data packets entered path %d after it failed, the "
                  "last %.1f us after the failure\n",
                  d.data_while_down, fail_path, us(d.last_data_while_down.since(fail_at)));
    else
      std::printf("\n  failover: no data packet entered path %d after it failed\n", fail_path);
  }

  const bool pass = !error && completed == n_wrs && bytes_bad == 0 && late == 0;
  std::printf("\n  byte check: %" PRIu64 " of %" PRIu64 " bytes verified, %" PRIu64
              " wrong, %" PRIu64 " written late or astray -> %s\n",
              bytes_checked - bytes_bad, total, bytes_bad, late, pass ? "PASS" : "FAIL");
  std::printf("  (%.2f s of wall-clock time, %" PRIu64 " datagrams simulated)\n", wall,
              h.datagrams_delivered());
  return pass ? 0 : 1;
}
