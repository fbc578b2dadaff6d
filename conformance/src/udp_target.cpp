#include "metaroce/conformance/udp_target.hpp"

#include <sys/random.h>

#include <algorithm>
#include <chrono>

namespace metaroce::conformance {
namespace {

constexpr const char* kTesterIp = "127.0.0.3";
constexpr const char* kStrangerIp = "127.0.0.4";

Status status_of(const udp::Error& e) { return e ? e.status : Status::kOk; }

}  // namespace

std::unique_ptr<UdpTarget> UdpTarget::open(std::string& why) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    uint16_t r = 0;
    (void)getrandom(&r, sizeof(r), 0);
    std::unique_ptr<UdpTarget> t(new UdpTarget());
    const auto base = static_cast<uint16_t>(33000 + (r % 1500) * kTesterPorts);  // 33000..56999
    if (!t->wire_.open(kTesterIp, kStrangerIp, base, why)) continue;
    udp::Options o;
    o.entropy_base = base;
    o.entropy_count = kTesterPorts;
    o.engine.num_paths = 4;
    o.linger = std::chrono::milliseconds(0);
    udp::Error err;
    t->iut_ = udp::UdpEndpoint::open("127.0.0.1:" + std::to_string(base - 1), o, err);
    if (!t->iut_) {
      why = err.message;
      continue;
    }
    (void)t->wire_.set_iut("127.0.0.1", t->iut_->port());
    return t;
  }
  return nullptr;
}

UdpTarget::~UdpTarget() { iut_.reset(); }

std::string UdpTarget::name() const {
  return "metaroce UDP driver on " + iut_->local_address() + " (real sockets)";
}

void UdpTarget::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                        bool stranger) {
  wire_.deliver(datagram, entropy, ce, stranger);
}

std::vector<Sent> UdpTarget::run_for(uint64_t ns) {
  return wire_.run_for(std::chrono::nanoseconds(std::max<uint64_t>(ns, 2'000'000)), [this] {
    iut_->progress();
    ConnId c;
    while (iut_->try_accept(c)) {
      accepted_ = c;
      ++accepted_count_;
    }
  });
}

bool UdpTarget::register_memory(uint64_t length, uint32_t access, Region& out) {
  std::vector<uint8_t> mem(length, 0);
  MemoryRegion mr;
  if (iut_->register_memory(mem.data(), mem.size(), access, mr)) return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  memory_.add(mr.lkey, std::move(mem));
  return true;
}

bool UdpTarget::deregister_memory(const Region& r) { return !iut_->deregister_memory(r.lkey); }

std::vector<uint8_t> UdpTarget::read_memory(const Region& r, uint64_t offset, uint64_t length) {
  return memory_.read(r.lkey, offset, length);
}

void UdpTarget::write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) {
  memory_.write(r.lkey, offset, bytes);
}

bool UdpTarget::connect_to_tester(ConnId& out) {
  return !iut_->connect_start(wire_.tester_address(), out);
}

Status UdpTarget::post_send(ConnId conn, const SendWr& wr) {
  return status_of(iut_->post_send(conn, wr));
}

Status UdpTarget::post_recv(ConnId conn, const RecvWr& wr) {
  return status_of(iut_->post_recv(conn, wr));
}

bool UdpTarget::poll_completion(Completion& out) { return iut_->poll_completion(out); }

bool UdpTarget::path_stats(ConnId conn, size_t path, PathStats& out) {
  const std::vector<PathStats> all = iut_->path_stats(conn);
  if (path >= all.size()) return false;
  out = all[path];
  return true;
}

}  // namespace metaroce::conformance
