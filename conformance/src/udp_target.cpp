#include "metaroce/conformance/udp_target.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cstdio>

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
    t->iut_addr_ = "127.0.0.1:" + std::to_string(base - 1);
    t->options_ = ReferenceIut::options(base, kTesterPorts);
    t->iut_ = ReferenceIut::open(t->iut_addr_, t->options_, why);
    if (!t->iut_) continue;
    if (!t->wire_.set_iut("127.0.0.1", t->iut_->ep().port(), why)) return nullptr;
    return t;
  }
  return nullptr;
}

UdpTarget::~UdpTarget() { iut_.reset(); }

std::string UdpTarget::name() const {
  return "metaroce UDP driver on " + (iut_ ? iut_->ep().local_address() : iut_addr_) +
         " (real sockets)";
}

std::vector<Sent> UdpTarget::run_for(uint64_t ns) {
  return wire_.run_for(std::chrono::nanoseconds(std::max<uint64_t>(ns, 2'000'000)), [this] {
    iut_->ep().progress();
    iut_->collect_accepted();
  });
}

bool UdpTarget::register_memory(uint64_t length, uint32_t access, Region& out) {
  MemoryRegion mr;
  if (iut_->register_memory(length, access, mr)) return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  return true;
}

bool UdpTarget::register_memory_at(uint64_t length, uint32_t access, uint64_t base, Region& out) {
  MemoryRegion mr;
  if (iut_->register_memory_at(length, base, access, mr)) return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  return true;
}

bool UdpTarget::deregister_memory(const Region& r) { return !iut_->ep().deregister_memory(r.lkey); }

std::vector<uint8_t> UdpTarget::read_memory(const Region& r, uint64_t offset, uint64_t length) {
  return iut_->memory().read(r.lkey, offset, length);
}

void UdpTarget::write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) {
  iut_->memory().write(r.lkey, offset, bytes);
}

bool UdpTarget::connect_to_tester(ConnId& out) {
  return !iut_->ep().connect_start(wire_.tester_address(), out);
}

Status UdpTarget::post_send(ConnId conn, const SendWr& wr) {
  return status_of(iut_->ep().post_send(conn, wr));
}

Status UdpTarget::post_recv(ConnId conn, const RecvWr& wr) {
  return status_of(iut_->ep().post_recv(conn, wr));
}

bool UdpTarget::shared_receives(uint32_t depth) {
  return reopen(ReferenceIut::sharing(options_, depth));
}

Status UdpTarget::post_shared_recv(const RecvWr& wr) {
  return status_of(iut_->ep().post_shared_recv(wr));
}

bool UdpTarget::poll_completion(Completion& out) { return iut_->ep().poll_completion(out); }

bool UdpTarget::path_stats(ConnId conn, size_t path, PathStats& out) {
  return iut_->path_stats(conn, path, out);
}

bool UdpTarget::close(ConnId conn) {
  if (iut_->ep().close(conn)) return true;
  // The driver refuses only on its own progress thread, which this target
  // never starts (run_for calls progress() itself): a refusal is the
  // target's fault, not the IUT's, and stops the run saying so (the check
  // skips, its outcome dropped), where silence let the check wait on a
  // close that never began.
  char id[16];
  std::snprintf(id, sizeof(id), "0x%x", conn.v);
  lost_ = std::string("the UDP driver refused close (conn ") + id +
          "), as it does on its progress thread, which this target never starts";
  return false;
}

bool UdpTarget::conn_error(ConnId conn, Status& out) {
  if (iut_->ep().state(conn) == udp::ConnState::kUnknown) return false;
  out = status_of(iut_->ep().conn_error(conn));
  return true;
}

bool UdpTarget::listen(bool accept, uint32_t max_connections) {
  return reopen(ReferenceIut::listening(options_, accept, max_connections));
}

bool UdpTarget::start_psn_at(uint32_t psn) {
  return reopen(ReferenceIut::starting_at(options_, psn));
}

bool UdpTarget::set_keepalive(uint64_t keepalive_ns, uint64_t peer_timeout_ns) {
  return reopen(ReferenceIut::keeping_alive(options_, keepalive_ns, peer_timeout_ns));
}

bool UdpTarget::set_rnr_retry_limit(uint32_t limit) {
  const udp::Options o = ReferenceIut::rnr_limited(options_, limit);
  // A limit the engine refuses leaves the target as it was.
  if (!config_error(o.engine).empty()) return false;
  return reopen(o);
}

bool UdpTarget::reopen(const udp::Options& o) {
  std::string why;
  iut_ = ReferenceIut::reopen(std::move(iut_), iut_addr_, o, why);
  if (iut_) return true;
  // The ports were taken meanwhile: the target is no more, and the suite
  // stops after the check, which must not use it again.
  lost_ = "the UDP driver could not reopen: " + why;
  return false;
}

}  // namespace metaroce::conformance
