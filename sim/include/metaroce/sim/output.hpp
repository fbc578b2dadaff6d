// Output beyond the report: a packet capture of one link (classic libpcap),
// CSV time series (goodput, switch queues, per-path congestion state),
// per-flow completion times, the engine trace of one flow, and the names by
// which links are given on the command line. Nothing here runs unless asked
// for: a run without --pcap, --csv and --trace-flow builds none of it and pays
// nothing per packet.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/sim/network.hpp"
#include "metaroce/sim/time.hpp"

namespace metaroce::sim {

class Simulation;

// One link, or one direction of it: edge `edge` of the TopoGraph (the index
// faults use); fwd is the direction from edge.a to edge.b.
struct LinkRef {
  uint32_t edge = 0;
  bool fwd = true;
  bool rev = true;
};

// Accepted forms:
//   E, edge:E          both directions of edge E
//   host:H             host H's link, both directions
//   host:H-up          host H to its switch;  host:H-down: the switch to host H
//   sw:S:P             switch S's port P (switch index, 0-based; ports are
//                      numbered in edge order), both directions
//   sw:S:P-out         what switch S sends on port P;  sw:S:P-in: what it receives
// Returns false with a reason in err.
bool parse_link(const TopoGraph& g, const std::string& text, LinkRef& out, std::string& err);
// "host:H" or "sw:S:P": one end of edge e (b_side: edge.b, else edge.a).
[[nodiscard]] std::string link_end_name(const TopoGraph& g, uint32_t edge, bool b_side);
// "edge 12 (host:12 <-> sw:3:1 [tor])" plus " a->b" / " b->a" for one
// direction. A switch's tier is named for its fabric: tor, agg, core on a
// fat-tree; leaf, spine on a two-tier fabric (leaf-spine, rail-optimized).
[[nodiscard]] std::string link_name(const TopoGraph& g, const LinkRef& l);
// One line per edge: index, both ends (with the switch tier, as link_name),
// rate, delay. json: the same as a JSON array of objects (edge, a, a_switch,
// b, b_switch, rate_gbps, delay_us, parallel, parallel_of), for scripts.
[[nodiscard]] std::string list_links(const TopoGraph& g, bool json = false);

// The file an output option writes when it is given no file name:
// NAME-TRANSPORT followed by `suffix` (".pcap" for --pcap, "-trace-flowN.csv"
// for --trace-flow) in the current folder, so that runs of other presets and
// transports keep their own. NAME is the preset's or config file's name with
// every character but letters, digits, '.', '_' and '-' made '_' and a leading
// '.' too. A config file's name is free text: "rack/a" put the capture in a
// folder "rack" (created for it), "/x/y" in /x, "../y" in the parent folder.
[[nodiscard]] std::string default_output_path(const std::string& name, const std::string& transport,
                                              std::string_view suffix);

struct OutputOptions {
  std::string pcap_link;   // capture this link (parse_link) ...
  std::string pcap_path;   // ... into this file
  std::string csv_dir;     // time series and fcts.csv here (the folder is created)
  std::string watch_link;  // its queue goes into queues.csv (default: the pcap link)
  SimTime sample_interval = SimTime::from_us(5);
  uint32_t sampled_flows = 4;  // flows whose connection's paths go into paths.csv
  // MetaRoCE: the engine trace (sent, received, acked, lost, path changes) of
  // both ends of this flow goes into trace_path as CSV; -1: none.
  int64_t trace_flow = -1;
  std::string trace_path;
  [[nodiscard]] bool any() const {
    return !pcap_link.empty() || !csv_dir.empty() || trace_flow >= 0;
  }
};

// What --csv writes into its folder (report.json by the command line, after the run).
inline constexpr const char* kCsvDirFiles[] = {"throughput.csv", "queues.csv", "paths.csv",
                                               "fcts.csv", "report.json"};
// One file a run writes, with the option that names it.
struct OutputFile {
  std::string option;  // "--pcap-file", "--trace-file", "--csv"
  std::string path;
};
// The --pcap file: pcap_path, else sim.pcap in the current folder; the
// --trace-flow file: trace_path, else trace-flowN.csv there (metaroce-sim
// names both by default_output_path instead).
[[nodiscard]] std::string pcap_file_path(const OutputOptions& o);
[[nodiscard]] std::string trace_file_path(const OutputOptions& o);
[[nodiscard]] std::vector<OutputFile> output_files(const OutputOptions& o);
// Two of output_files() that are one file (compared by weakly_canonical, so
// "x" and "./d/../x" match): "--pcap-file 'A' and --trace-file 'B' are the
// same file"; or one of them that is one of `inputs`, the files the run was
// read from ("--pcap-file 'A' is --config 'A', which the run reads"); empty
// if none. SimOutput refuses such options before it opens any.
[[nodiscard]] std::string output_clash(const OutputOptions& o,
                                       const std::vector<OutputFile>& inputs = {});

// A classic libpcap file: nanosecond-resolution magic (a1b23c4d), link type
// Ethernet, records buffered in memory and written in large blocks.
class PcapFile {
 public:
  explicit PcapFile(const std::string& path);  // throws std::runtime_error
  ~PcapFile();
  PcapFile(const PcapFile&) = delete;
  PcapFile& operator=(const PcapFile&) = delete;
  void write(SimTime t, const uint8_t* frame, uint32_t caplen, uint32_t orig_len);
  // A record of head, then `zeros` zero bytes, then tail (caplen the three).
  void write(SimTime t, const uint8_t* head, uint32_t head_len, uint32_t zeros, const uint8_t* tail,
             uint32_t tail_len, uint32_t orig_len);
  // Flushes and closes; false if a write failed.
  bool close();
  [[nodiscard]] uint64_t records() const { return records_; }

  static constexpr uint32_t kMagicNs = 0xa1b23c4d;
  static constexpr uint32_t kLinkTypeEthernet = 1;
  static constexpr uint32_t kSnapLen = 65535;

 private:
  void flush();
  FILE* f_ = nullptr;
  std::vector<uint8_t> buf_;
  uint64_t records_ = 0;
  bool ok_ = true;
};

// The run's output files (--pcap, --csv), owned by the Simulation.
class SimOutput {
 public:
  explicit SimOutput(Simulation& sim);  // throws std::runtime_error (bad link, file)
  ~SimOutput();
  SimOutput(const SimOutput&) = delete;
  SimOutput& operator=(const SimOutput&) = delete;
  // Writes what is left (the last sample, fcts.csv), closes every file.
  // Idempotent; false if some write failed, with err naming each file that
  // failed ("write error in F; write error in G").
  bool close(std::string& err);
  [[nodiscard]] uint64_t pcap_records() const;

 private:
  class Capture;
  class Sampler;
  class FlowTrace;
  Simulation& sim_;
  std::unique_ptr<PcapFile> pcap_;
  std::unique_ptr<Capture> capture_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<FlowTrace> trace_;
  bool closed_ = false;
};

}  // namespace metaroce::sim
