// Simulator output: the pcap capture of a link (file format, record count,
// headers that the engine's codec decodes), the CSV time series (columns,
// same bytes for one seed), link names, and that output costs the run
// nothing it could see (same report and digest with and without it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "metaroce/sim/presets.hpp"
#include "metaroce/sim/simulation.hpp"
#include "metaroce/sim/topology.hpp"
#include "metaroce/sim/workload.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::sim {
namespace {

namespace fs = std::filesystem;

// A folder of this process's own, removed when the test ends: two build trees
// running the suite at once never write into each other's files, and no run
// leaves its captures behind.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(fs::path(::testing::TempDir()) /
              ("metaroce_sim_output_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  fs::path operator/(const std::string& file) const { return path_ / file; }
  std::string string() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint32_t le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // pcap fields are in the writer's (host) byte order
  return v;
}
uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

struct PcapRecord {
  uint64_t ns = 0;
  uint32_t orig_len = 0;
  std::vector<uint8_t> bytes;  // caplen bytes
};

std::vector<PcapRecord> read_pcap(const fs::path& p) {
  const std::string s = slurp(p);
  const auto* d = reinterpret_cast<const uint8_t*>(s.data());
  EXPECT_GE(s.size(), 24u);
  EXPECT_EQ(le32(d), 0xa1b23c4du);  // nanosecond resolution
  uint16_t ver[2];
  std::memcpy(ver, d + 4, 4);
  EXPECT_EQ(ver[0], 2);
  EXPECT_EQ(ver[1], 4);
  EXPECT_EQ(le32(d + 20), 1u);  // LINKTYPE_ETHERNET
  std::vector<PcapRecord> out;
  size_t off = 24;
  while (off + 16 <= s.size()) {
    PcapRecord r;
    const uint32_t sec = le32(d + off), nsec = le32(d + off + 4), cap = le32(d + off + 8);
    r.orig_len = le32(d + off + 12);
    EXPECT_LT(nsec, 1'000'000'000u);
    r.ns = uint64_t{sec} * 1'000'000'000 + nsec;
    off += 16;
    if (off + cap > s.size()) {
      ADD_FAILURE() << "record runs past the end";
      break;
    }
    r.bytes.assign(d + off, d + off + cap);
    off += cap;
    out.push_back(std::move(r));
  }
  EXPECT_EQ(off, s.size());
  return out;
}

SimConfig small(const std::string& preset_name, TransportKind t, uint64_t seed = 1) {
  return preset(preset_name, t, seed);
}

TEST(Pcap, MetaRoceLinkCaptureIsValidAndDecodes) {
  const ScratchDir dir("pcap_metaroce");
  SimConfig cfg = small("fattree16-perm", TransportKind::kMetaRoce);
  cfg.output.pcap_link = "16";  // ToR 0 - agg: both directions
  cfg.output.pcap_path = (dir / "l16.pcap").string();
  Simulation sim(std::move(cfg));
  sim.run();
  ASSERT_TRUE(sim.finished());
  std::string err;
  ASSERT_TRUE(sim.close_output(err)) << err;
  const uint64_t carried = sim.net().edge_port(16, false).stats().tx_packets +
                           sim.net().edge_port(16, true).stats().tx_packets;
  const auto recs = read_pcap(dir / "l16.pcap");
  ASSERT_GT(carried, 100u);
  EXPECT_EQ(recs.size(), carried);
  EXPECT_EQ(sim.output()->pcap_records(), carried);

  std::set<uint16_t> entropies;
  uint64_t prev_ns = 0, data = 0, whole = 0, ce = 0;
  for (const PcapRecord& r : recs) {
    ASSERT_GE(r.bytes.size(), 42u + wire::kBaseHeaderSize);
    EXPECT_GE(r.ns, prev_ns);  // time order
    prev_ns = r.ns;
    const uint8_t* e = r.bytes.data();
    EXPECT_EQ(be16(e + 12), 0x0800);
    const uint8_t* ip = e + 14;
    EXPECT_EQ(ip[0], 0x45);
    EXPECT_EQ(ip[9], 17);
    EXPECT_EQ(be16(ip + 2) + 14u, r.orig_len);  // IP total length = the true size
    const uint8_t ecn = ip[1] & 3;
    EXPECT_TRUE(ecn == 2 || ecn == 3) << int{ecn};
    ce += ecn == 3 ? 1 : 0;
    uint32_t sum = 0;  // IPv4 header checksum verifies
    for (int i = 0; i < 20; i += 2) sum += be16(ip + i);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    EXPECT_EQ(sum, 0xffffu);
    const uint8_t* udp = ip + 20;
    entropies.insert(be16(udp));
    EXPECT_EQ(be16(udp + 2), 4792);
    EXPECT_EQ(be16(udp + 4) + 34u, r.orig_len);
    const std::span<const uint8_t> got(r.bytes.data() + 42, r.bytes.size() - 42);
    wire::Packet pkt;
    if (r.bytes.size() == r.orig_len) {
      // No payload: the whole datagram, ICRC included, as the engine sent it.
      ASSERT_EQ(wire::decode(got, pkt), wire::ParseError::kOk);
      ++whole;
      continue;
    }
    // Data: headers only (caplen), the payload and ICRC are cut.
    wire::BaseHeader bh;
    ASSERT_EQ(wire::decode_base(got, bh), wire::ParseError::kOk);
    ASSERT_TRUE(wire::carries_payload(bh.opcode));
    ASSERT_EQ(got.size(), wire::header_size(bh.opcode));
    const size_t payload = r.orig_len - r.bytes.size() - wire::kIcrcSize;
    std::vector<uint8_t> dg(got.begin(), got.end());
    dg.resize(got.size() + payload + wire::kIcrcSize, 0);
    const uint32_t icrc = wire::crc32c(0, got.data(), got.size());  // cover_payload = false
    for (int i = 0; i < 4; ++i)
      dg[got.size() + payload + i] = static_cast<uint8_t>(icrc >> (24 - 8 * i));
    ASSERT_EQ(wire::decode(dg, pkt), wire::ParseError::kOk);
    EXPECT_EQ(pkt.payload.size(), payload);
    ++data;
  }
  EXPECT_GT(data, 0u);
  EXPECT_GT(whole, 0u);
  EXPECT_GT(entropies.size(), 8u);  // many paths cross one uplink
  (void)ce;
}

TEST(Pcap, SameSeedSameBytesWhileAnotherSimulationLives) {
  // Two runs of one seed, the first still alive while the second runs, so
  // that nothing of the second sits where the first's did: their captures
  // hold the same bytes. (The WRITEs' raddr once carried a heap address.)
  const ScratchDir dir("pcap_twice");
  std::vector<std::unique_ptr<Simulation>> sims;
  std::string bytes[2];
  for (int run = 0; run < 2; ++run) {
    SimConfig cfg = small("fattree16-perm", TransportKind::kMetaRoce);
    cfg.output.pcap_link = "16";
    cfg.output.pcap_path = (dir / ("run" + std::to_string(run) + ".pcap")).string();
    sims.push_back(std::make_unique<Simulation>(std::move(cfg)));
    sims.back()->run();
    std::string err;
    ASSERT_TRUE(sims.back()->close_output(err)) << err;
    std::ifstream in(dir / ("run" + std::to_string(run) + ".pcap"), std::ios::binary);
    bytes[run].assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes[0].size(), 10'000u);
  EXPECT_TRUE(bytes[0] == bytes[1]);
}

TEST(Pcap, BaselineCaptureCarriesRoceHeadersAndOneDirection) {
  const ScratchDir dir("pcap_irn");
  SimConfig cfg = small("fattree16-perm", TransportKind::kIrn);
  cfg.output.pcap_link = "host:0-up";
  cfg.output.pcap_path = (dir / "h0.pcap").string();
  Simulation sim(std::move(cfg));
  sim.run();
  std::string err;
  ASSERT_TRUE(sim.close_output(err)) << err;
  const auto recs = read_pcap(dir / "h0.pcap");
  EXPECT_EQ(recs.size(), sim.net().host_port(0).stats().tx_packets);
  std::set<uint16_t> ports;
  for (const PcapRecord& r : recs) {
    ASSERT_GE(r.bytes.size(), 42u + 12);
    // Whole, ICRC included (Wireshark takes a cut RoCE packet for a malformed one).
    EXPECT_EQ(r.bytes.size(), r.orig_len);
    const uint8_t* udp = r.bytes.data() + 34;
    EXPECT_EQ(r.bytes[26 + 3], 0);  // source address: host 0
    EXPECT_EQ(be16(udp + 2), 4791);
    ports.insert(be16(udp));
    const uint8_t op = udp[8];
    EXPECT_TRUE(op == 0x06 || op == 0x07 || op == 0x08 || op == 0x0a || op == 0x11 || op == 0x81)
        << int{op};
  }
  // One source port for host 0's QP, one for the ACKs of the flow it receives.
  EXPECT_EQ(ports.size(), 2u);
}

TEST(Csv, FilesHaveTheirColumnsAndSameBytesForOneSeed) {
  std::string files[2][4];
  const char* names[] = {"throughput.csv", "queues.csv", "paths.csv", "fcts.csv"};
  uint64_t total_bytes = 0;
  for (int run = 0; run < 2; ++run) {
    const ScratchDir dir("csv" + std::to_string(run));
    SimConfig cfg = small("fattree16-perm", TransportKind::kMetaRoce, 5);
    cfg.output.csv_dir = dir.string();
    cfg.output.watch_link = "host:3-down";
    total_bytes = 0;
    for (const auto& f : cfg.flows) total_bytes += f.bytes;
    Simulation sim(std::move(cfg));
    sim.run();
    std::string err;
    ASSERT_TRUE(sim.close_output(err)) << err;
    for (int i = 0; i < 4; ++i) files[run][i] = slurp(dir / names[i]);
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(files[0][i], files[1][i]) << names[i];
  auto header = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  EXPECT_EQ(header(files[0][0]), "time_us,delivered_bytes,goodput_gbps,flows_completed");
  EXPECT_EQ(header(files[0][1]),
            "time_us,max_queue_bytes,mean_queue_bytes,busy_ports,sw:1:1>host:3_bytes");
  EXPECT_EQ(header(files[0][2]),
            "time_us,flow,src,dst,path,entropy,state,cwnd_bytes,inflight_bytes,srtt_ns,"
            "rate_mbps,alpha,ce_marks,losses,timeouts,retransmissions,packets_sent");
  EXPECT_EQ(header(files[0][3]), "flow,src,dst,bytes,start_us,finish_us,fct_us");
  // Every flow has a row; the last throughput row has every byte delivered.
  const std::string& fct = files[0][3];
  EXPECT_EQ(std::count(fct.begin(), fct.end(), '\n'), 17);
  const std::string& thr = files[0][0];
  const size_t last = thr.rfind('\n', thr.size() - 2) + 1;
  const std::string row = thr.substr(last);
  EXPECT_EQ(row.substr(row.find(',') + 1, row.find(',', row.find(',') + 1) - row.find(',') - 1),
            std::to_string(total_bytes));
  EXPECT_GT(std::count(thr.begin(), thr.end(), '\n'), 10);
  EXPECT_NE(files[0][2].find(",active,"), std::string::npos);
}

// The report's max_queue_bytes is at least every queues.csv sample of it,
// for every transport: it was taken before the arriving packet was added,
// and never for the priority lane or a trimmed header, so the CSV showed
// deeper queues than the report (fattree16-perm: 84646 against 80982 B).
TEST(Csv, ReportMaxQueueIsAtLeastEverySample) {
  for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kSprayNoCc,
                                TransportKind::kRoceV2, TransportKind::kIrn}) {
    for (const char* name : {"fattree16-perm", "fattree16-allreduce"}) {
      const std::string label = std::string(name) + " " + transport_name(t);
      const ScratchDir dir("maxq");
      SimConfig cfg = small(name, t);
      cfg.output.csv_dir = dir.string();
      cfg.output.sample_interval = SimTime::from_ns(500);
      Simulation sim(std::move(cfg));
      sim.run();
      std::string err;
      ASSERT_TRUE(sim.close_output(err)) << err;
      std::istringstream csv(slurp(dir / "queues.csv"));
      std::string line;
      std::getline(csv, line);  // the header
      uint64_t csv_max = 0;
      size_t rows = 0;
      for (; std::getline(csv, line); ++rows) {
        const size_t a = line.find(',') + 1;
        csv_max = std::max<uint64_t>(csv_max, std::stoull(line.substr(a, line.find(',', a) - a)));
      }
      EXPECT_GT(rows, 100u) << label;
      EXPECT_GT(csv_max, 0u) << label;
      EXPECT_LE(csv_max, sim.report().max_queue_bytes) << label;
    }
  }
}

// The time series ends where the run did, as the report's completion: a run
// cut off by its time limit has its last row at the limit, not at its last
// event (host 0's link dropping everything: the engine's last event before
// the limit comes well before it, and the rows stopped there or at the last
// sample before it).
TEST(Csv, LastRowIsAtTheEndOfTheRunNotAtTheLastEvent) {
  const ScratchDir dir("csv_end");
  const LinkSpec l{};
  SimConfig cfg;
  cfg.name = "lone-dropped";
  cfg.topo = fat_tree(4, l, l);
  cfg.flows = {FlowSpec{0, 15, 1 << 20, SimTime{0}, {UINT32_MAX, UINT32_MAX}}};
  FaultSpec f{SimTime{0}, FaultSpec::Kind::kGrayDrop, 0};  // edge 0: host 0's link
  f.drop = 1.0;
  cfg.faults.push_back(f);
  cfg.time_limit = SimTime::from_us(1000);
  cfg.output.csv_dir = dir.string();
  cfg.output.sample_interval = SimTime::from_us(400);
  Simulation sim(std::move(cfg));
  sim.run();
  std::string err;
  ASSERT_TRUE(sim.close_output(err)) << err;
  const Report r = sim.report();
  ASSERT_EQ(r.flows_completed, 0u);
  ASSERT_LT(r.sim_time_us, r.warmup_us + 1000.0);  // the last event came before the limit
  for (const char* name : {"throughput.csv", "queues.csv"}) {
    const std::string t = slurp(dir / name);
    ASSERT_FALSE(t.empty()) << name;
    const std::string row = t.substr(t.rfind('\n', t.size() - 2) + 1);
    EXPECT_NEAR(std::stod(row.substr(0, row.find(','))), r.warmup_us + 1000.0, 1e-3)
        << name << ": " << row;
  }
}

TEST(Output, LeavesReportAndDigestUnchanged) {
  for (TransportKind t : {TransportKind::kMetaRoce, TransportKind::kRoceV2, TransportKind::kIrn}) {
    for (const char* name : {"fattree16-perm-gray", "incast8-256k"}) {
      Simulation off(small(name, t, 2));
      off.run();
      ASSERT_TRUE(off.flows().all_done()) << name;  // (a stuck run samples up to 1 s)
      const ScratchDir dir(std::string("same_") + transport_name(t) + name);
      SimConfig cfg = small(name, t, 2);
      cfg.output.pcap_link = "sw:0:0";
      cfg.output.pcap_path = (dir / "x.pcap").string();
      cfg.output.csv_dir = dir.string();
      cfg.output.sample_interval = SimTime::from_ns(700);
      Simulation on(std::move(cfg));
      on.run();
      std::string err;
      ASSERT_TRUE(on.close_output(err)) << err;
      EXPECT_EQ(on.report().to_json(false), off.report().to_json(false))
          << transport_name(t) << " " << name;
    }
  }
}

TEST(Trace, FlowTraceHasBothEndsAndLeavesTheDigestUnchanged) {
  Simulation off(small("fattree16-perm-gray", TransportKind::kMetaRoce, 3));
  off.run();
  const ScratchDir dir("trace");
  SimConfig cfg = small("fattree16-perm-gray", TransportKind::kMetaRoce, 3);
  const FlowSpec spec = cfg.flows.at(2);
  cfg.output.trace_flow = 2;
  cfg.output.trace_path = (dir / "t.csv").string();
  Simulation on(std::move(cfg));
  on.run();
  std::string err;
  ASSERT_TRUE(on.close_output(err)) << err;
  EXPECT_EQ(on.report().to_json(false), off.report().to_json(false));
  const std::string t = slurp(dir / "t.csv");
  EXPECT_EQ(t.substr(0, t.find('\n')),
            "# flow 2: host " + std::to_string(spec.src) + " -> host " + std::to_string(spec.dst));
  EXPECT_NE(t.find("\ntime_us,host,conn,event,path,psn,aux\n"), std::string::npos);
  // The sender's data packets and the receiver's acceptance of them.
  const std::string src = "," + std::to_string(spec.src) + ",";
  const std::string dst = "," + std::to_string(spec.dst) + ",";
  size_t sent = 0, received = 0;
  for (size_t at = t.find('\n'); at != std::string::npos; at = t.find('\n', at + 1)) {
    const std::string line = t.substr(at + 1, t.find('\n', at + 1) - at - 1);
    const size_t host_at = line.find(',');
    if (host_at == std::string::npos) continue;
    const std::string host = line.substr(host_at, line.find(',', host_at + 1) - host_at + 1);
    if (host == src && line.find(",sent,") != std::string::npos) ++sent;
    if (host == dst && line.find(",received,") != std::string::npos) ++received;
  }
  const size_t packets = (spec.bytes + 4095) / 4096;
  EXPECT_GE(sent, packets);
  EXPECT_GE(received, packets);
  // A baseline runs no engine: a clear error, not an empty file.
  SimConfig rc = small("fattree16-perm-gray", TransportKind::kRoceV2, 3);
  rc.output.trace_flow = 2;
  rc.output.trace_path = (dir / "r.csv").string();
  EXPECT_THROW(Simulation{std::move(rc)}, std::runtime_error);
}

// A bad --watch-link or --trace-flow was found after the capture and the
// time series had been opened "wb": the previous run's files were cut to
// their headers before the refusal. Every check now comes first.
TEST(Output, RefusedOptionsLeaveThePreviousRunsFilesAsTheyWere) {
  const ScratchDir dir("refused");
  fs::create_directories(dir / "csv");
  const std::vector<fs::path> kept = {dir / "x.pcap", dir / "csv/throughput.csv",
                                      dir / "csv/queues.csv", dir / "csv/paths.csv", dir / "t.csv"};
  for (const fs::path& f : kept)
    std::ofstream(f) << "previous run's " << f.filename().string() << "\n";
  const auto config = [&](TransportKind t) {
    SimConfig cfg = small("fattree16-perm", t);
    cfg.output.pcap_link = "16";
    cfg.output.pcap_path = (dir / "x.pcap").string();
    cfg.output.csv_dir = (dir / "csv").string();
    cfg.output.trace_flow = 0;
    cfg.output.trace_path = (dir / "t.csv").string();
    return cfg;
  };
  SimConfig bad_watch = config(TransportKind::kMetaRoce);
  bad_watch.output.watch_link = "bogus";
  SimConfig bad_flow = config(TransportKind::kMetaRoce);
  bad_flow.output.trace_flow = 99;
  SimConfig bad_transport = config(TransportKind::kRoceV2);
  for (SimConfig* cfg : {&bad_watch, &bad_flow, &bad_transport}) {
    EXPECT_THROW(Simulation{std::move(*cfg)}, std::runtime_error);
    for (const fs::path& f : kept)
      EXPECT_EQ(slurp(f), "previous run's " + f.filename().string() + "\n") << f;
  }
}

TEST(Scheduler, ObserverNeitherCountsNorMovesTheClock) {
  struct Obs final : EventSource {
    Scheduler* s = nullptr;
    std::vector<SimTime> seen;
    void on_event(SimTime t) override { seen.push_back(t); }
  };
  struct Ev final : EventSource {
    void on_event(SimTime) override {}
  };
  Scheduler s;
  Obs o;
  Ev e;
  o.set_observer(true);
  s.schedule(e, SimTime::from_us(1));
  s.schedule(o, SimTime::from_us(2));
  s.run();
  EXPECT_EQ(s.events(), 1u);
  EXPECT_EQ(s.now(), SimTime::from_us(1));
  ASSERT_EQ(o.seen.size(), 1u);
  EXPECT_EQ(o.seen[0], SimTime::from_us(2));
}

TEST(Links, NamesParseToEdgesAndDirections) {
  const SimConfig c = small("fattree16-perm", TransportKind::kMetaRoce);
  const TopoGraph& g = c.topo;
  LinkRef l;
  std::string err;
  ASSERT_TRUE(parse_link(g, "17", l, err));
  EXPECT_EQ(l.edge, 17u);
  EXPECT_TRUE(l.fwd && l.rev);
  ASSERT_TRUE(parse_link(g, "host:5-up", l, err));
  EXPECT_EQ(l.edge, 5u);  // fat-tree: host h is edge h, host on side a
  EXPECT_TRUE(l.fwd && !l.rev);
  ASSERT_TRUE(parse_link(g, "host:5-down", l, err));
  EXPECT_TRUE(!l.fwd && l.rev);
  ASSERT_TRUE(parse_link(g, "sw:0:2-in", l, err));  // ToR 0's first uplink, from the agg
  EXPECT_EQ(l.edge, 16u);
  EXPECT_TRUE(!l.fwd && l.rev);
  EXPECT_EQ(link_name(g, l), "edge 16 (sw:0:2 [tor 0] <-> sw:8:0 [agg 0]) b->a");
  for (const char* bad : {"48", "host:16", "sw:20:0", "sw:0:9", "host:1-sideways", "x"})
    EXPECT_FALSE(parse_link(g, bad, l, err)) << bad;
  EXPECT_NE(list_links(g).find("16  sw:0:2 [tor 0]  sw:8:0 [agg 0]  100 Gb/s  1.000 us\n"),
            std::string::npos);
}

// Switch tiers are named for the fabric: a fat-tree's ToR, agg and core, a
// leaf-spine's or rail-optimized fabric's leaf and spine. Both read
// "tor/leaf" and "agg/spine", so a fat-tree's aggs were labelled spines and
// a leaf-spine's spines aggs; the capture's line (link_name) named no tier.
TEST(Links, TiersAreNamedForTheirFabric) {
  const LinkSpec l{};
  const TopoGraph ft = fat_tree(4, l, l);
  const std::string ft_list = list_links(ft);
  EXPECT_NE(ft_list.find("0  host:0  sw:0:0 [tor 0]"), std::string::npos) << ft_list;
  const uint32_t agg_core = fat_tree_agg_core_edge(4, 0, 0);  // agg 0 (switch 8), core 0 (16)
  EXPECT_NE(ft_list.find(std::to_string(agg_core) + "  sw:8:2 [agg 0]  sw:16:0 [core 0]"),
            std::string::npos)
      << ft_list;
  EXPECT_EQ(link_name(ft, LinkRef{agg_core, true, true}),
            "edge " + std::to_string(agg_core) + " (sw:8:2 [agg 0] <-> sw:16:0 [core 0])");
  for (const char* wrong : {"[leaf", "[spine", "[tor/leaf]", "[agg/spine]"})
    EXPECT_EQ(ft_list.find(wrong), std::string::npos) << wrong;

  // 2 leaves x 2 hosts, 2 spines: edge 4 joins leaf 0 (switch 0) and spine 0 (switch 2).
  const TopoGraph ls = leaf_spine(2, 2, 2, l, l);
  const std::string ls_list = list_links(ls);
  EXPECT_NE(ls_list.find("\n0  host:0  sw:0:0 [leaf 0]"), std::string::npos) << ls_list;
  EXPECT_NE(ls_list.find("\n4  sw:0:2 [leaf 0]  sw:2:0 [spine 0]"), std::string::npos) << ls_list;
  EXPECT_EQ(link_name(ls, LinkRef{4, true, false}),
            "edge 4 (sw:0:2 [leaf 0] <-> sw:2:0 [spine 0]) a->b");
  // 4 servers x 2 rails in groups of 2: 4 rail leaves, 2 spines; 8 host links first.
  const TopoGraph rail = rail_optimized(4, 2, 2, 2, l, l);
  const std::string rail_list = list_links(rail);
  EXPECT_NE(rail_list.find("\n1  host:1  sw:1:0 [leaf 1]"), std::string::npos) << rail_list;
  EXPECT_NE(rail_list.find("\n8  sw:0:2 [leaf 0]  sw:4:0 [spine 0]"), std::string::npos)
      << rail_list;
  for (const std::string* list : {&ls_list, &rail_list})
    for (const char* wrong : {"[tor", "[agg", "[core", "[tor/leaf]", "[agg/spine]"})
      EXPECT_EQ(list->find(wrong), std::string::npos) << wrong << "\n" << *list;
}

// --list-links names each switch as a fault's `link` does, tier and index
// within it ("[spine 1]": it read "[spine]", and a fault's "spine N" had to
// be counted from sw:S), and tells parallel links (links_per_spine > 1)
// apart by the index `link = [A, B, I]` takes.
TEST(Links, ListingNamesSwitchesAndParallelLinksAsFaultsDo) {
  const LinkSpec l{};
  // 2 leaves x 2 hosts, 2 spines, 2 links each: leaf 0 - spine 1 on edges 6, 7.
  const TopoGraph ls = leaf_spine(2, 2, 2, l, l, 2);
  const std::string list = list_links(ls);
  EXPECT_NE(list.find("\n6  sw:0:4 [leaf 0]  sw:3:0 [spine 1]  100 Gb/s  1.000 us  (parallel link "
                      "0 of 2)\n7  sw:0:5 [leaf 0]  sw:3:1 [spine 1]  100 Gb/s  1.000 us  "
                      "(parallel link 1 of 2)\n"),
            std::string::npos)
      << list;
  EXPECT_NE(list.find("\n11  sw:1:5 [leaf 1]  sw:3:3 [spine 1]  100 Gb/s  1.000 us  (parallel "
                      "link 1 of 2)\n"),
            std::string::npos)
      << list;
  EXPECT_NE(list.find("\n0  host:0  sw:0:0 [leaf 0]  100 Gb/s  1.000 us\n"), std::string::npos);
  // A rate that is not whole Gb/s, as the JSON gives it (it read 12 Gb/s).
  LinkSpec odd{};
  odd.rate_mbps = 12'500;
  EXPECT_NE(
      list_links(leaf_spine(2, 2, 2, odd, l)).find("\n0  host:0  sw:0:0 [leaf 0]  12.5 Gb/s  "),
      std::string::npos);
  // One link a pair: no such note.
  EXPECT_EQ(list_links(leaf_spine(2, 2, 2, l, l)).find("parallel"), std::string::npos);
  const std::string ft = list_links(fat_tree(4, l, l));
  EXPECT_EQ(ft.find("parallel"), std::string::npos);
  EXPECT_NE(ft.find("  sw:19:3 [core 3]"), std::string::npos) << ft;
  EXPECT_NE(ft.find("  sw:15:"), std::string::npos);
  EXPECT_NE(ft.find("sw:15:0 [agg 7]"), std::string::npos) << ft;
}

// --list-links --json: the listing as a JSON array, one object an edge, with
// what the text gives (the ends as --pcap takes them, the switch as a fault
// names it, rate, delay, the parallel index); --json was ignored and a
// script got the text.
TEST(Links, JsonListingHoldsWhatTheTextDoes) {
  LinkSpec l{};
  l.delay = SimTime{500'000};  // 0.5 us
  const TopoGraph ls = leaf_spine(2, 2, 2, l, l, 2);
  const std::string j = list_links(ls, true);
  ASSERT_EQ(j.rfind("[\n  {\"edge\": 0, ", 0), 0u) << j;
  EXPECT_NE(j.find("{\"edge\": 0, \"a\": \"host:0\", \"a_switch\": null, \"b\": \"sw:0:0\", "
                   "\"b_switch\": \"leaf 0\", \"rate_gbps\": 100, \"delay_us\": 0.5, "
                   "\"parallel\": 0, \"parallel_of\": 1}"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("{\"edge\": 7, \"a\": \"sw:0:5\", \"a_switch\": \"leaf 0\", \"b\": "
                   "\"sw:3:1\", \"b_switch\": \"spine 1\", \"rate_gbps\": 100, \"delay_us\": "
                   "0.5, \"parallel\": 1, \"parallel_of\": 2}"),
            std::string::npos)
      << j;
  // One object an edge, comma-separated, and the text listing unchanged.
  EXPECT_EQ(std::count(j.begin(), j.end(), '{'), static_cast<long>(ls.edges.size()));
  EXPECT_EQ(std::count(j.begin(), j.end(), '}'), static_cast<long>(ls.edges.size()));
  EXPECT_EQ(j.find("}\n  {"), std::string::npos) << j;
  EXPECT_EQ(j.substr(j.size() - 4), "}\n]\n");
  EXPECT_EQ(list_links(ls).rfind("# edge", 0), 0u);
}

// --pcap without --pcap-file: NAME-TRANSPORT.pcap in the current folder (and
// --trace-flow N without --trace-file NAME-TRANSPORT-trace-flowN.csv). A
// config file's name is free text; "rack/a" wrote into a folder "rack"
// (created for it), "/x/y" into /x, "../y" into the parent folder.
TEST(Pcap, DefaultFileNameStaysInTheCurrentFolder) {
  EXPECT_EQ(default_output_path("fattree128-perm2mb", "metaroce", ".pcap"),
            "fattree128-perm2mb-metaroce.pcap");
  EXPECT_EQ(default_output_path("leafspine32-mixed", "spray-nocc", ".pcap"),
            "leafspine32-mixed-spray-nocc.pcap");
  EXPECT_EQ(default_output_path("k_4.v2", "irn", ".pcap"), "k_4.v2-irn.pcap");
  EXPECT_EQ(default_output_path("rack/a", "irn", ".pcap"), "rack_a-irn.pcap");
  EXPECT_EQ(default_output_path("/x/y", "rocev2", ".pcap"), "_x_y-rocev2.pcap");
  EXPECT_EQ(default_output_path("../y", "metaroce", ".pcap"), "_._y-metaroce.pcap");
  EXPECT_EQ(default_output_path("a\\b c:d*?\n", "irn", ".pcap"), "a_b_c_d___-irn.pcap");
  EXPECT_EQ(default_output_path("", "irn", ".pcap"), "_irn.pcap");
  EXPECT_EQ(default_output_path(".hidden", "irn", ".pcap"), "_hidden-irn.pcap");
  EXPECT_EQ(default_output_path("rack/a", "spray-nocc", "-trace-flow3.csv"),
            "rack_a-spray-nocc-trace-flow3.csv");
}

// The queue-wait rows name the ports as the fabric has them: a fat-tree's
// ToR / agg / core, a two-tier fabric's leaf / spine (it read tor_up and
// agg_down, and agg_up / core_down at 0, which it has no ports of). The
// values are those of the same kinds of port.
TEST(Report, PortKindsAreNamedByTheFabricsTiers) {
  const auto keys = [](const std::string& json) {
    const size_t at = json.find("\"queue_wait_data_us\": {");
    EXPECT_NE(at, std::string::npos);
    std::string k;
    for (size_t i = json.find('{', at) + 1; json[i] != '}'; ++i) {
      if (json[i] != '"') continue;
      const size_t end = json.find('"', i + 1);
      k += json.substr(i + 1, end - i - 1) + " ";
      i = end;
    }
    return k;
  };
  const LinkSpec l{};
  for (const bool rail : {false, true}) {
    SimConfig c = small("fattree16-perm", TransportKind::kMetaRoce);
    c.topo = rail ? rail_optimized(4, 2, 2, 2, l, l) : leaf_spine(2, 4, 2, l, l);
    c.flows = permutation(8, 256 * 1024, 1);
    Simulation sim(std::move(c));
    sim.run();
    const Report r = sim.report();
    ASSERT_EQ(r.flows_completed, 8u);
    const std::string json = r.to_json(false), text = r.to_text(false);
    EXPECT_EQ(keys(json), "nic leaf_up spine_down leaf_down ") << rail;
    EXPECT_EQ(json.find("\"tor_"), std::string::npos) << json;
    EXPECT_EQ(json.find("\"agg_"), std::string::npos);
    EXPECT_EQ(json.find("\"core_"), std::string::npos);
    EXPECT_NE(text.find("mean queue wait, us (data / control): nic "), std::string::npos);
    EXPECT_NE(text.find(", leaf_up "), std::string::npos) << text;
    EXPECT_NE(text.find(", spine_down "), std::string::npos);
    EXPECT_NE(text.find(", leaf_down "), std::string::npos);
    EXPECT_EQ(text.find("tor_"), std::string::npos);
  }
  Simulation ft(small("fattree16-perm", TransportKind::kMetaRoce));
  ft.run();
  const Report r = ft.report();
  EXPECT_EQ(keys(r.to_json(false)), "nic tor_up agg_up core_down agg_down tor_down ");
  EXPECT_NE(r.to_text(false).find(", core_down "), std::string::npos);
}

// The text report's per-path line carries the six counts the JSON's
// per_path does (docs/sim/README.md, "Report fields"): it left out losses
// and retirements, the counts that tell a lossy path from a slow one.
TEST(Report, TextPerPathLineHasEveryCountOfTheJson) {
  Report r;
  r.per_path = {{1, 2, 3, 4, 5, 6}, {10, 20, 30, 40, 50, 60}};
  const std::string text = r.to_text(false);
  EXPECT_NE(text.find("  per path slot (data packets / retx / CE / losses / timeouts / "
                      "retirements): 0: 1/2/3/4/5/6, 1: 10/20/30/40/50/60\n"),
            std::string::npos)
      << text;
  const std::string json = r.to_json(false);
  EXPECT_NE(json.find("{\"slot\": 1, \"packets_sent\": 10, \"retransmissions\": 20, "
                      "\"ce_marks\": 30, \"losses\": 40, \"timeouts\": 50, \"retirements\": 60}"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace metaroce::sim
