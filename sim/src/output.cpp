// --pcap (a capture of one link) and --csv (time series, FCTs), and the
// report's link utilization and per-path totals.
#include "metaroce/sim/output.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "metaroce/bytes.hpp"
#include "metaroce/sim/simulation.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::sim {
namespace {

constexpr size_t kEthIpUdp = 14 + 20 + 8;  // synthesized framing in front of the datagram
constexpr size_t kMaxFrame =
    kEthIpUdp + std::max<size_t>(Packet::kMaxHeader + 4, RcShared::kMaxRoceHeader);
constexpr size_t kRoceIcrc = 4;

// CRC-32 (IEEE 802.3, reflected 0xEDB88320), the CRC of RoCEv2's ICRC; crc
// is the running value without the final inversion (start 0xffffffff).
uint32_t crc32_ieee(uint32_t crc, const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

// RoCEv2's ICRC (IBTA annex A17) of a frame written by write_framing: CRC-32
// over 8 bytes of ones (the absent LRH), the IPv4 and UDP headers with the
// fields routers change (TOS, TTL, IP and UDP checksums) set to ones, the
// BTH with its reserved byte 4 set to ones, the other transport headers, then
// `zeros` payload bytes of zero. Sent least significant byte first, as NICs do.
void roce_icrc(const uint8_t* frame, size_t roce_headers, uint32_t zeros, uint8_t out[4]) {
  uint8_t masked[8 + 20 + 8 + 12];
  std::memset(masked, 0xff, 8);
  std::memcpy(masked + 8, frame + 14, 20 + 8 + 12);
  uint8_t* ip = masked + 8;
  ip[1] = 0xff;  // TOS (DSCP + ECN)
  ip[8] = 0xff;  // TTL
  ip[10] = ip[11] = 0xff;
  ip[20 + 6] = ip[20 + 7] = 0xff;  // UDP checksum
  ip[28 + 4] = 0xff;               // BTH reserved byte
  uint32_t crc = crc32_ieee(0xffffffffu, masked, sizeof masked);
  crc = crc32_ieee(crc, frame + kEthIpUdp + 12, roce_headers - 12);
  static constexpr uint8_t kZero[256] = {};
  for (uint32_t left = zeros; left > 0;) {
    const uint32_t n = std::min<uint32_t>(left, sizeof kZero);
    crc = crc32_ieee(crc, kZero, n);
    left -= n;
  }
  crc = ~crc;
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(crc >> (8 * i));
}

// Ethernet + IPv4 + UDP for p carrying a datagram of `datagram` bytes. Host
// h is 10.0.0.0 + h with MAC 02:00:<h as 4 bytes>; TTL counts the switches
// passed; the ECN field is the packet's (ECT(0), or CE where marked); the
// DSCP is the packet's (the control class on ACK, NAK and CNP, ENC-6; 0
// otherwise), or the TRIMMED code point on a packet a switch cut (TRIM-1).
void write_framing(const Packet& p, uint32_t datagram, uint8_t* o) {
  o[0] = 0x02;
  o[1] = 0x00;
  be::store32(o + 2, p.dst);
  o[6] = 0x02;
  o[7] = 0x00;
  be::store32(o + 8, p.src);
  be::store16(o + 12, 0x0800);
  uint8_t* ip = o + 14;
  ip[0] = 0x45;
  const uint8_t dscp = p.trimmed ? wire::kDefaultTrimmedDscp : p.dscp;
  ip[1] = static_cast<uint8_t>((dscp << 2) | (p.ecn & 3));
  be::store16(ip + 2, static_cast<uint16_t>(std::min<uint32_t>(65535, 28 + datagram)));
  be::store16(ip + 4, 0);
  be::store16(ip + 6, 0x4000);  // DF
  ip[8] = static_cast<uint8_t>(64 - std::min<uint32_t>(p.hops, 63));
  ip[9] = 17;
  be::store16(ip + 10, 0);
  be::store32(ip + 12, 0x0a000000u + p.src);
  be::store32(ip + 16, 0x0a000000u + p.dst);
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += be::load16(ip + i);
  while ((sum >> 16) != 0) sum = (sum & 0xffff) + (sum >> 16);
  be::store16(ip + 10, static_cast<uint16_t>(~sum));
  uint8_t* udp = ip + 20;
  be::store16(udp, p.entropy);
  be::store16(udp + 2, p.dport);
  be::store16(udp + 4, static_cast<uint16_t>(std::min<uint32_t>(65535, 8 + datagram)));
  be::store16(udp + 6, 0);  // no checksum (as RoCEv2)
}

FILE* open_or_throw(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot create " + path);
  return f;
}

// One more failure after those already in err: each part of the output
// that failed is named, not only the last.
void add_error(std::string& err, const std::string& what) {
  err += (err.empty() ? "" : "; ") + what;
}

LinkRef parse_or_throw(const TopoGraph& g, const std::string& text) {
  LinkRef l;
  std::string err;
  if (!parse_link(g, text, l, err)) throw std::runtime_error(err);
  return l;
}

}  // namespace

// ------------------------------------------------------------------ PcapFile

PcapFile::PcapFile(const std::string& path) : f_(open_or_throw(path)) {
  buf_.reserve(1 << 20);
  // Host byte order, as libpcap writes it (readers tell by the magic).
  const uint32_t magic = kMagicNs, zone = 0, sigfigs = 0, snaplen = kSnapLen,
                 network = kLinkTypeEthernet;
  const uint16_t version[2] = {2, 4};
  uint8_t h[24];
  std::memcpy(h, &magic, 4);
  std::memcpy(h + 4, version, 4);
  std::memcpy(h + 8, &zone, 4);
  std::memcpy(h + 12, &sigfigs, 4);
  std::memcpy(h + 16, &snaplen, 4);
  std::memcpy(h + 20, &network, 4);
  buf_.insert(buf_.end(), h, h + sizeof h);
}

PcapFile::~PcapFile() { close(); }

void PcapFile::write(SimTime t, const uint8_t* frame, uint32_t caplen, uint32_t orig_len) {
  write(t, frame, caplen, 0, nullptr, 0, orig_len);
}

void PcapFile::write(SimTime t, const uint8_t* head, uint32_t head_len, uint32_t zeros,
                     const uint8_t* tail, uint32_t tail_len, uint32_t orig_len) {
  const uint32_t caplen = head_len + zeros + tail_len;
  if (buf_.size() + 16 + caplen > buf_.capacity()) flush();
  const uint32_t rec[4] = {static_cast<uint32_t>(t.ps / 1'000'000'000'000ull),
                           static_cast<uint32_t>(t.ps % 1'000'000'000'000ull / 1000), caplen,
                           orig_len};
  const auto* r = reinterpret_cast<const uint8_t*>(rec);
  buf_.insert(buf_.end(), r, r + sizeof rec);
  buf_.insert(buf_.end(), head, head + head_len);
  buf_.insert(buf_.end(), zeros, uint8_t{0});
  if (tail_len > 0) buf_.insert(buf_.end(), tail, tail + tail_len);
  ++records_;
}

void PcapFile::flush() {
  if (f_ != nullptr && !buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
    ok_ = false;
  buf_.clear();
}

bool PcapFile::close() {
  if (f_ == nullptr) return ok_;
  flush();
  if (std::fclose(f_) != 0) ok_ = false;
  f_ = nullptr;
  return ok_;
}

// ------------------------------------------------------------------ Capture

// Taps one or both directions of a link. A port announces a packet when it
// is queued, with the time it will start to cross the link; records wait in
// a per-direction queue, ordered by start, until no earlier one can come
// (every later announcement starts at or after its `now`), so the file is in
// time order. A packet of the priority lane (network.hpp) starts before data
// queued ahead of it, so it is inserted, not appended; equal starts keep
// their order.
class SimOutput::Capture final : public PacketTap {
 public:
  Capture(PcapFile& file, Simulation& sim, const LinkRef& link)
      : file_(file), rc_(sim.rc_shared_.get()), overhead_(sim.cfg_.wire_overhead) {
    if (link.fwd) dir_[0] = &sim.net_->edge_port(link.edge, false);
    if (link.rev) dir_[1] = &sim.net_->edge_port(link.edge, true);
    for (Port* p : dir_)
      if (p != nullptr) p->tap = this;
  }
  ~Capture() override {
    for (Port* p : dir_)
      if (p != nullptr && p->tap == this) p->tap = nullptr;
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  void on_transmit(const Packet& p, const Port& port, SimTime now, SimTime start) override {
    Rec r;
    r.at = start;
    const uint32_t datagram = p.wire_bytes > overhead_ ? p.wire_bytes - overhead_ : 0;
    size_t hdr;
    if (rc_ != nullptr) {
      // Recorded whole: Wireshark's InfiniBand dissector calls a packet cut
      // before its payload malformed and one without its ICRC truncated. The
      // payload, which the model does not carry, is zeros; the ICRC is the
      // one a RoCEv2 NIC would compute over them.
      hdr = rc_->roce_headers(p, r.data + kEthIpUdp);
      write_framing(p, datagram, r.data);
      r.zeros = datagram >= hdr + kRoceIcrc ? static_cast<uint32_t>(datagram - hdr - kRoceIcrc) : 0;
      roce_icrc(r.data, hdr, r.zeros, r.tail);
      r.tail_len = kRoceIcrc;
    } else {
      // The engine's own encoding, as the host handed it over; a packet
      // without payload is whole (headers and ICRC), data stops at the payload.
      hdr = p.header_len;
      std::memcpy(r.data + kEthIpUdp, p.hdr, hdr);
      if (p.payload_len == 0) {
        std::memcpy(r.data + kEthIpUdp + hdr, p.trailer, p.trailer_len);
        hdr += p.trailer_len;
      }
      write_framing(p, datagram, r.data);
    }
    r.orig = static_cast<uint32_t>(kEthIpUdp + datagram);
    r.caplen = static_cast<uint32_t>(std::min<size_t>(kEthIpUdp + hdr, r.orig));
    std::deque<Rec>& q = pending_[&port == dir_[0] ? 0 : 1];
    q.insert(std::upper_bound(q.begin(), q.end(), r.at,
                              [](SimTime at, const Rec& e) { return at < e.at; }),
             r);
    emit(now);
  }
  // Writes every record that starts at or before t.
  void emit(SimTime t) {
    for (;;) {
      int d = -1;
      for (int i = 0; i < 2; ++i)
        if (!pending_[i].empty() && pending_[i].front().at <= t &&
            (d < 0 || pending_[i].front().at < pending_[d].front().at))
          d = i;
      if (d < 0) return;
      const Rec& r = pending_[d].front();
      file_.write(r.at, r.data, r.caplen, r.zeros, r.tail, r.tail_len, r.orig);
      pending_[d].pop_front();
    }
  }

 private:
  struct Rec {
    SimTime at;
    uint32_t caplen = 0, orig = 0;     // caplen: of data
    uint32_t zeros = 0, tail_len = 0;  // then zeros zero bytes and tail
    uint8_t data[kMaxFrame];
    uint8_t tail[kRoceIcrc];
  };
  PcapFile& file_;
  const RcShared* rc_;
  uint32_t overhead_;
  Port* dir_[2] = {nullptr, nullptr};
  std::deque<Rec> pending_[2];
};

// ------------------------------------------------------------------ Sampler

// One observer event every sample interval (it neither counts as an event
// nor moves the clock, so the report and digest are those of a run without
// it). Writes throughput.csv, queues.csv and paths.csv as it goes.
class SimOutput::Sampler final : public EventSource {
 public:
  Sampler(Simulation& sim, const std::string& dir, const LinkRef* watch)
      : sim_(sim), dir_(dir), dt_(sim.cfg_.output.sample_interval) {
    thr_ = open_or_throw(dir + "/throughput.csv");
    queues_ = open_or_throw(dir + "/queues.csv");
    paths_ = open_or_throw(dir + "/paths.csv");
    for (FILE* f : {thr_, queues_, paths_}) std::setvbuf(f, nullptr, _IOFBF, 1 << 16);
    Network& net = *sim.net_;
    for (size_t s = 0; s < net.num_switches(); ++s)
      for (Port* p : net.sw(static_cast<uint32_t>(s)).ports) switch_ports_.push_back(p);
    std::fputs("time_us,delivered_bytes,goodput_gbps,flows_completed\n", thr_);
    std::fputs("time_us,max_queue_bytes,mean_queue_bytes,busy_ports", queues_);
    if (watch != nullptr) {
      const TopoGraph& g = net.graph();
      for (int rev = 0; rev < 2; ++rev) {
        if (!(rev != 0 ? watch->rev : watch->fwd)) continue;
        watch_.push_back(&net.edge_port(watch->edge, rev != 0));
        std::fprintf(queues_, ",%s>%s_bytes", link_end_name(g, watch->edge, rev != 0).c_str(),
                     link_end_name(g, watch->edge, rev == 0).c_str());
      }
    }
    std::fputs("\n", queues_);
    std::fputs(
        "time_us,flow,src,dst,path,entropy,state,cwnd_bytes,inflight_bytes,srtt_ns,rate_mbps,"
        "alpha,ce_marks,losses,timeouts,retransmissions,packets_sent\n",
        paths_);
    const size_t nf = sim.flows_->size();
    const size_t n = std::min<size_t>(sim.cfg_.output.sampled_flows, nf);
    for (size_t i = 0; i < n; ++i) flows_.push_back(static_cast<uint32_t>(i * nf / n));
    set_observer(true);
    sim.sched_.schedule(*this, dt_);
  }
  ~Sampler() override {
    sim_.sched_.cancel(*this);
    for (FILE* f : {thr_, queues_, paths_})
      if (f != nullptr) std::fclose(f);
  }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void on_event(SimTime t) override {
    sample(t);
    // Nothing else pending: the run is over (no sample past its end).
    if (sim_.sched_.pending_count() > 0 && !sim_.flows_->all_done())
      sim_.sched_.schedule(*this, t + dt_);
  }

  // The last (partial) interval, fcts.csv; closes the files. The interval
  // ends where run() got to, as the report's completion does: a run cut off
  // by its time limit ends there, not at its last event, which may come long
  // before (its rows stopped at the last sample or event before the limit).
  bool close(std::string& err) {
    sim_.sched_.cancel(*this);
    const SimTime end = sim_.run_end();
    if (end > last_) sample(end);
    bool ok = true;
    const std::pair<FILE**, const char*> files[] = {
        {&thr_, "throughput.csv"}, {&queues_, "queues.csv"}, {&paths_, "paths.csv"}};
    for (const auto& [f, name] : files) {
      // Closed also after an error (ferror first: fclose frees the FILE).
      const bool failed = std::ferror(*f) != 0;
      if (std::fclose(*f) != 0 || failed) {
        ok = false;
        add_error(err, "write error in " + dir_ + "/" + name);
      }
      *f = nullptr;
    }
    if (!write_fcts()) {
      ok = false;
      add_error(err, "write error in " + dir_ + "/fcts.csv");
    }
    return ok;
  }

 private:
  void sample(SimTime t) {
    const uint64_t delivered = sim_.delivered_bytes();
    const double interval = (t - last_).seconds();
    const double gbps =
        interval > 0 ? static_cast<double>(delivered - last_delivered_) * 8e-9 / interval : 0;
    std::fprintf(thr_, "%.3f,%llu,%.3f,%zu\n", t.us(), static_cast<unsigned long long>(delivered),
                 gbps, sim_.flows_->completed());
    uint64_t mx = 0, sum = 0, busy = 0;
    for (const Port* p : switch_ports_) {
      const uint64_t b = p->backlog_bytes(t);
      mx = std::max(mx, b);
      sum += b;
      busy += b > 0 ? 1 : 0;
    }
    std::fprintf(queues_, "%.3f,%llu,%.1f,%llu", t.us(), static_cast<unsigned long long>(mx),
                 switch_ports_.empty()
                     ? 0.0
                     : static_cast<double>(sum) / static_cast<double>(switch_ports_.size()),
                 static_cast<unsigned long long>(busy));
    for (const Port* p : watch_)
      std::fprintf(queues_, ",%llu", static_cast<unsigned long long>(p->backlog_bytes(t)));
    std::fputs("\n", queues_);
    for (uint32_t f : flows_) sample_paths(t, f);
    last_ = t;
    last_delivered_ = delivered;
  }

  void sample_paths(SimTime t, uint32_t flow) {
    const FlowSpec& fs = sim_.flows_->at(flow).spec;
    const double us = t.us();
    if (sim_.shared_) {
      MetaRoceHost& h = *sim_.shared_->hosts.at(fs.src);
      ConnId c;
      if (!h.connection_to(fs.dst, c)) return;
      const size_t n = h.endpoint().path_count(c);
      PathStats ps;
      for (size_t i = 0; i < n; ++i) {
        if (!h.endpoint().path_stats(c, i, ps)) continue;
        std::fprintf(paths_, "%.3f,%u,%u,%u,%zu,%u,%s,%u,%u,%llu,,,%llu,%llu,%llu,%llu,%llu\n", us,
                     flow, fs.src, fs.dst, i, ps.entropy,
                     ps.state == PathState::kActive ? "active" : "probing", ps.cwnd_bytes,
                     ps.inflight_bytes, static_cast<unsigned long long>(ps.srtt_ns),
                     static_cast<unsigned long long>(ps.ce_marks),
                     static_cast<unsigned long long>(ps.losses),
                     static_cast<unsigned long long>(ps.timeouts),
                     static_cast<unsigned long long>(ps.retransmissions),
                     static_cast<unsigned long long>(ps.packets_sent));
      }
    } else if (sim_.rc_shared_) {
      RcQpState q;
      if (!sim_.rc_shared_->hosts.at(fs.src)->qp_state(flow, q)) return;
      std::fprintf(paths_, "%.3f,%u,%u,%u,0,%u,%s,,%llu,,%.1f,%.4f,,,,,\n", us, flow, fs.src,
                   fs.dst, q.entropy, q.recovery ? "recovery" : "active",
                   static_cast<unsigned long long>(uint64_t{q.inflight} * sim_.rc_shared_->prm.mtu),
                   q.rate_mbps, q.alpha);
    }
  }

  bool write_fcts() const {
    FILE* f = std::fopen((dir_ + "/fcts.csv").c_str(), "wb");
    if (f == nullptr) return false;
    std::fputs("flow,src,dst,bytes,start_us,finish_us,fct_us\n", f);
    for (size_t i = 0; i < sim_.flows_->size(); ++i) {
      const FlowState& s = sim_.flows_->at(i);
      std::fprintf(f, "%zu,%u,%u,%llu,%.3f,", i, s.spec.src, s.spec.dst,
                   static_cast<unsigned long long>(s.spec.bytes), s.spec.start.us());
      if (s.done())
        std::fprintf(f, "%.3f,%.3f\n", s.finish.us(), (s.finish - s.spec.start).us());
      else
        std::fputs(",\n", f);
    }
    const bool ok = std::ferror(f) == 0;
    return std::fclose(f) == 0 && ok;
  }

  Simulation& sim_;
  std::string dir_;
  SimTime dt_;
  FILE* thr_ = nullptr;
  FILE* queues_ = nullptr;
  FILE* paths_ = nullptr;
  std::vector<const Port*> switch_ports_;
  std::vector<const Port*> watch_;
  std::vector<uint32_t> flows_;
  SimTime last_{0};
  uint64_t last_delivered_ = 0;
};

// ------------------------------------------------------------------ FlowTrace

// The engine's own trace (metaroce/trace.hpp) of both ends of one flow, one
// CSV line per event, so that a flow's slow finish can be read packet by
// packet: when each was sent, on which path, when it was declared lost and
// why. Each end's endpoint carries its other connections too (in a
// permutation a host also receives one flow); the conn column tells them apart.
class SimOutput::FlowTrace {
 public:
  // Throws unless flow `given` exists and both its ends run the engine; on
  // its own so that SimOutput refuses a bad flow before it opens any file.
  // The flow as given, 64 bits: cast to 32 first, 4294967299 traced flow 3.
  static uint32_t check(const Simulation& sim, int64_t given) {
    if (given < 0 || static_cast<uint64_t>(given) >= sim.flows_->size())
      throw std::runtime_error("--trace-flow " + std::to_string(given) + ": the workload has " +
                               std::to_string(sim.flows_->size()) + " flows");
    const auto flow = static_cast<uint32_t>(given);
    const FlowSpec& spec = sim.flows_->at(flow).spec;
    if (dynamic_cast<MetaRoceHost*>(sim.hosts_.at(spec.src).get()) == nullptr ||
        dynamic_cast<MetaRoceHost*>(sim.hosts_.at(spec.dst).get()) == nullptr)
      throw std::runtime_error("--trace-flow needs a transport that runs the engine");
    return flow;
  }

  FlowTrace(Simulation& sim, int64_t given, const std::string& path) {
    const uint32_t flow = check(sim, given);
    const FlowSpec& spec = sim.flows_->at(flow).spec;
    auto* src = static_cast<MetaRoceHost*>(sim.hosts_.at(spec.src).get());
    auto* dst = static_cast<MetaRoceHost*>(sim.hosts_.at(spec.dst).get());
    f_ = open_or_throw(path);
    path_ = path;
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 16);
    std::fprintf(f_, "# flow %u: host %u -> host %u\n", flow, spec.src, spec.dst);
    std::fputs("time_us,host,conn,event,path,psn,aux\n", f_);
    sinks_[0] = {this, spec.src};
    sinks_[1] = {this, spec.dst};
    src->endpoint().set_trace(&FlowTrace::record, &sinks_[0]);
    if (dst != src) dst->endpoint().set_trace(&FlowTrace::record, &sinks_[1]);
    hosts_[0] = src;
    hosts_[1] = dst;
  }
  ~FlowTrace() {
    for (MetaRoceHost* h : hosts_) h->endpoint().set_trace(nullptr, nullptr);
    std::string ignored;
    (void)close(ignored);
  }
  FlowTrace(const FlowTrace&) = delete;
  FlowTrace& operator=(const FlowTrace&) = delete;

  bool close(std::string& err) {
    if (f_ == nullptr) return true;
    const bool ok = std::fclose(f_) == 0 && !failed_;
    f_ = nullptr;
    if (!ok) add_error(err, "write error in " + path_);
    return ok;
  }

 private:
  struct Sink {
    FlowTrace* self = nullptr;
    uint32_t host = 0;
  };

  static void record(void* ctx, const TraceEvent& ev) {
    auto* sink = static_cast<Sink*>(ctx);
    FlowTrace& t = *sink->self;
    if (t.f_ == nullptr) return;
    if (std::fprintf(t.f_, "%.3f,%u,%u,%s,%u,%u,%u\n", static_cast<double>(ev.time.ns) * 1e-3,
                     sink->host, ev.conn.v, trace_kind_name(ev.kind), ev.path, ev.psn, ev.aux) < 0)
      t.failed_ = true;
  }

  FILE* f_ = nullptr;
  std::string path_;
  bool failed_ = false;
  Sink sinks_[2];
  MetaRoceHost* hosts_[2] = {};
};

// ------------------------------------------------------------------ SimOutput

SimOutput::SimOutput(Simulation& sim) : sim_(sim) {
  const OutputOptions& o = sim.cfg_.output;
  const TopoGraph& g = sim.net_->graph();
  // Every check before the first file is opened ("wb"): a bad --watch-link
  // or --trace-flow found after it had cut the previous run's capture to its
  // header and its time series to their headers, beside its old fcts.csv.
  if (const std::string clash = output_clash(o, sim.cfg_.input_files); !clash.empty())
    throw std::runtime_error(clash);
  LinkRef pcap_link, watch;
  const LinkRef* watched = nullptr;
  if (!o.pcap_link.empty()) {
    pcap_link = parse_or_throw(g, o.pcap_link);
    watch = pcap_link;
    watched = &watch;
  }
  if (!o.watch_link.empty()) {
    watch = parse_or_throw(g, o.watch_link);
    watched = &watch;
  }
  if (!o.csv_dir.empty() && o.sample_interval.ps == 0)
    throw std::runtime_error("sample interval must be > 0");
  if (o.trace_flow >= 0) (void)FlowTrace::check(sim, o.trace_flow);
  if (!o.pcap_link.empty()) {
    pcap_ = std::make_unique<PcapFile>(pcap_file_path(o));
    capture_ = std::make_unique<Capture>(*pcap_, sim, pcap_link);
  }
  if (!o.csv_dir.empty()) sampler_ = std::make_unique<Sampler>(sim, o.csv_dir, watched);
  if (o.trace_flow >= 0)
    trace_ = std::make_unique<FlowTrace>(sim, o.trace_flow, trace_file_path(o));
}

SimOutput::~SimOutput() {
  std::string err;
  close(err);
}

bool SimOutput::close(std::string& err) {
  if (closed_) return true;
  closed_ = true;
  bool ok = true;
  // Every part's failure: a failed capture was named only if the CSV files
  // and the trace were written.
  std::string errs;
  if (capture_) {
    capture_->emit(SimTime::never());
    capture_.reset();
  }
  if (pcap_ && !pcap_->close()) {
    ok = false;
    add_error(errs, "write error in " + pcap_file_path(sim_.cfg_.output));
  }
  if (sampler_ && !sampler_->close(errs)) ok = false;
  sampler_.reset();
  if (trace_ && !trace_->close(errs)) ok = false;
  trace_.reset();
  if (!ok) err = errs;
  return ok;
}

uint64_t SimOutput::pcap_records() const { return pcap_ ? pcap_->records() : 0; }

// ------------------------------------------------------------------ Simulation

bool Simulation::close_output(std::string& err) { return output_ ? output_->close(err) : true; }

namespace {
// Report::kFatTreePortKinds order (tier 0 a ToR or leaf, 1 an agg or spine,
// 2 a core); kPortKinds for a link the names do not cover.
size_t port_kind(const TopoGraph& g, const Port& p) {
  const uint32_t from = p.owner->id, to = p.pipe.to->id;
  if (from < g.num_hosts) return 0;
  const int tier_from = g.switch_tier[from - g.num_hosts];
  if (to < g.num_hosts) return tier_from == 0 ? 5 : Report::kPortKinds;
  const int tier_to = g.switch_tier[to - g.num_hosts];
  if (tier_to > tier_from) return tier_from == 0 ? 1 : tier_from == 1 ? 2 : Report::kPortKinds;
  if (tier_to < tier_from) return tier_from == 2 ? 3 : tier_from == 1 ? 4 : Report::kPortKinds;
  return Report::kPortKinds;
}
}  // namespace

void Simulation::add_link_and_path_stats(Report& r) const {
  const SimTime now = run_end();
  double sum = 0;
  SimTime data[Report::kPortKinds] = {}, ctrl[Report::kPortKinds] = {};
  uint64_t nd[Report::kPortKinds] = {}, nc[Report::kPortKinds] = {};
  Network& net = *net_;
  for (uint32_t e = 0; e < net.graph().edges.size(); ++e) {
    for (bool rev : {false, true}) {
      const Port& p = net.edge_port(e, rev);
      const size_t k = port_kind(net.graph(), p);
      if (k < Report::kPortKinds) {
        data[k] += p.stats().data_wait;
        ctrl[k] += p.stats().ctrl_wait;
        nd[k] += p.stats().data_packets;
        nc[k] += p.stats().ctrl_packets;
      }
      // Against the capacity the link had over the run, each rate for as
      // long as it lasted: after a rate fault, the final rate would count
      // the time before it at the wrong rate (and give more than 100 %).
      // A port counts a packet when it fixes its departure, at enqueue: what
      // a run cut off by its time limit still had queued never crossed.
      const double capacity = p.capacity_bits(now);
      if (p.stats().tx_packets == 0 || !(capacity > 0)) continue;
      const uint64_t sent = p.stats().tx_bytes;
      const double u =
          static_cast<double>(sent - std::min(sent, p.unsent_bytes(now))) * 8.0 / capacity;
      sum += u;
      r.link_util_max = std::max(r.link_util_max, u);
      ++r.links_used;
    }
  }
  r.link_util_mean = r.links_used > 0 ? sum / static_cast<double>(r.links_used) : 0;
  const auto& tiers = net.graph().switch_tier;
  if (std::none_of(tiers.begin(), tiers.end(), [](uint8_t t) { return t >= 2; }))
    r.port_kind_names = Report::kTwoTierPortKinds;
  for (size_t k = 0; k < Report::kPortKinds; ++k) {
    r.data_wait_us[k] = nd[k] ? data[k].seconds() * 1e6 / static_cast<double>(nd[k]) : 0;
    r.ctrl_wait_us[k] = nc[k] ? ctrl[k].seconds() * 1e6 / static_cast<double>(nc[k]) : 0;
  }
  if (!shared_) return;
  PathStats ps;
  for (MetaRoceHost* h : shared_->hosts) {
    for (ConnId c : h->connections()) {
      const size_t n = h->endpoint().path_count(c);
      if (r.per_path.size() < n) r.per_path.resize(n);
      for (size_t i = 0; i < n; ++i) {
        if (!h->endpoint().path_stats(c, i, ps)) continue;
        PathSlotTotals& s = r.per_path[i];
        s.packets_sent += ps.packets_sent;
        s.retransmissions += ps.retransmissions;
        s.ce_marks += ps.ce_marks;
        s.losses += ps.losses;
        s.timeouts += ps.timeouts;
        s.retirements += ps.retirements;
      }
    }
  }
}

}  // namespace metaroce::sim
