// How the engine's bookkeeping scales with what an endpoint holds: MPI over
// a libfabric provider registers and deregisters memory constantly (a
// registration cache holds many regions) and opens and closes many
// connections. Google Benchmark; after the runs, the ratio of the largest
// case's cost per operation to the smallest's: about 1 where an operation
// is O(1) amortized, about the size ratio where it is linear.
//
//   metaroce-scale-bench [--benchmark_filter=...] [other Google Benchmark flags]
//
// --benchmark_format=json|csv prints that on stdout, and the ratios on stderr.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::bench {
namespace {

// Live regions, kept across the calls Google Benchmark makes while it sizes
// the run: registering a million takes longer than the timed loop.
struct Registered {
  std::unique_ptr<Endpoint> ep;
  std::vector<uint8_t> bytes = std::vector<uint8_t>(64);
};

Registered& with_live(int64_t live) {
  static std::map<int64_t, Registered> kept;
  Registered& r = kept[live];
  if (!r.ep) {
    kept.clear();  // one endpoint at a time: a million regions is ~100 MB
    Registered& fresh = kept[live];
    fresh.ep = std::make_unique<Endpoint>(EndpointConfig{});
    MemoryRegion mr;
    for (int64_t i = 0; i < live; ++i)
      if (fresh.ep->register_memory(fresh.bytes.data(), fresh.bytes.size(), 0, mr) != Status::kOk)
        std::abort();
    return fresh;
  }
  return r;
}

// MR-6: one region registered and deregistered over and over beside `live`
// others (a registration cache's churn). Its slot's 1,024 generations are
// spent every 1,024 cycles, and the slot must start over. The largest case
// fills the table (2^22 - 1 slots) but for that one slot: a search for a
// free slot, or a restart that looked past its own slot, would show there.
void RegisterDeregister(benchmark::State& state) {
  Registered& r = with_live(state.range(0));
  MemoryRegion mr;
  for (auto _ : state) {
    if (r.ep->register_memory(r.bytes.data(), r.bytes.size(), 0, mr) != Status::kOk) {
      state.SkipWithError("registration refused");
      break;
    }
    benchmark::DoNotOptimize(mr.lkey);
    (void)r.ep->deregister_memory(mr.lkey);
  }
  state.SetItemsProcessed(state.iterations());
}
constexpr int64_t kAllButOneSlot = (int64_t{1} << 22) - 2;
BENCHMARK(RegisterDeregister)->Arg(1'000)->Arg(100'000)->Arg(1'000'000)->Arg(kAllButOneSlot);

// n connections, each waiting to send its CONNECT_REQ (so in the endpoint's
// ready ring), closed in one batch: what destroy_connection costs while
// many others wait to send. With the second argument 1 their deadlines are
// computed first (next_timeout), as a driver does after each batch; with 0
// each closed connection still waits in the list of deadlines to compute,
// which it leaves in O(1) (it was looked for there, linear in its length).
void CloseBatch(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  const bool flushed = state.range(1) != 0;
  EndpointConfig cfg;
  cfg.max_connections = n;
  PeerAddr peer;
  peer.len = 1;
  for (auto _ : state) {
    state.PauseTiming();
    auto ep = std::make_unique<Endpoint>(cfg);
    std::vector<ConnId> conns(n);
    const TimeNs now{1000};
    for (uint32_t i = 0; i < n; ++i)
      if (ep->connect(peer, now, conns[i]) != Status::kOk) std::abort();
    if (flushed) benchmark::DoNotOptimize(ep->next_timeout());
    state.ResumeTiming();
    for (const ConnId c : conns) ep->close(c, now);
    state.PauseTiming();
    ep.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(CloseBatch)
    ->ArgsProduct({{10'000, 100'000}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// Keeps each run's time per item, to print the ratios when all have run,
// and passes every report on to the reporter --benchmark_format selects:
// the library builds that one only when given no reporter, so a console
// reporter of our own printed a table for --benchmark_format=json or csv.
class Ratios : public benchmark::BenchmarkReporter {
 public:
  // The library's own, kept by it for the process's life: not ours to free.
  Ratios() : display_(benchmark::CreateDefaultDisplayReporter()) {}
  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const auto items = run.counters.find("items_per_second");
      if (!run.error_occurred && items != run.counters.end() && items->second.value > 0)
        ns_per_item_[run.benchmark_name()] = 1e9 / items->second.value;
    }
    display_->ReportRuns(runs);
  }
  void Finalize() override { display_->Finalize(); }
  // The ratios go beside a console table on stdout; after JSON or CSV they
  // would make stdout unreadable to the program reading it: stderr then.
  void print(const std::string& small, const std::string& large) const {
    const auto s = ns_per_item_.find(small), l = ns_per_item_.find(large);
    if (s == ns_per_item_.end() || l == ns_per_item_.end()) return;
    std::FILE* out = dynamic_cast<benchmark::ConsoleReporter*>(display_) ? stdout : stderr;
    std::fprintf(out, "ratio %s / %s, cost per operation: %.2f (%.1f ns / %.1f ns)\n",
                 large.c_str(), small.c_str(), l->second / s->second, l->second, s->second);
  }

 private:
  benchmark::BenchmarkReporter* display_;
  std::map<std::string, double> ns_per_item_;
};

}  // namespace
}  // namespace metaroce::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  metaroce::bench::Ratios reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print("RegisterDeregister/1000", "RegisterDeregister/1000000");
  reporter.print("RegisterDeregister/1000",
                 "RegisterDeregister/" + std::to_string(metaroce::bench::kAllButOneSlot));
  reporter.print("CloseBatch/10000/1/iterations:3", "CloseBatch/100000/1/iterations:3");
  reporter.print("CloseBatch/10000/0/iterations:3", "CloseBatch/100000/0/iterations:3");
  benchmark::Shutdown();
  return 0;
}
