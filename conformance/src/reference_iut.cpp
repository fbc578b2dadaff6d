#include "metaroce/conformance/reference_iut.hpp"

#include <chrono>
#include <vector>

namespace metaroce::conformance {

udp::Options ReferenceIut::options(uint16_t entropy_base, uint16_t entropy_count, uint8_t paths) {
  udp::Options o;
  o.entropy_base = entropy_base;
  o.entropy_count = entropy_count;
  o.engine.num_paths = paths;
  o.linger = std::chrono::milliseconds(0);
  return o;
}

std::unique_ptr<ReferenceIut> ReferenceIut::open(const std::string& addr, const udp::Options& o,
                                                 std::string& why) {
  udp::Error err;
  auto ep = udp::UdpEndpoint::open(addr, o, err);
  if (!ep) {
    why = err.message;
    return nullptr;
  }
  return std::unique_ptr<ReferenceIut>(new ReferenceIut(std::move(ep)));
}

std::unique_ptr<ReferenceIut> ReferenceIut::reopen(std::unique_ptr<ReferenceIut> old,
                                                   const std::string& addr, const udp::Options& o,
                                                   std::string& why) {
  if (old) old->ep().close(false);
  old.reset();  // its sockets go before the new endpoint binds their ports
  return open(addr, o, why);
}

udp::Options ReferenceIut::listening(udp::Options o, bool accept, uint32_t max_connections) {
  o.engine.accept_incoming = accept;
  if (max_connections != 0) o.engine.max_connections = max_connections;
  return o;
}

udp::Options ReferenceIut::keeping_alive(udp::Options o, uint64_t keepalive_ns,
                                         uint64_t peer_timeout_ns) {
  o.engine.recovery.keepalive_ns = keepalive_ns;
  o.engine.recovery.peer_timeout_ns = peer_timeout_ns;
  return o;
}

udp::Options ReferenceIut::rnr_limited(udp::Options o, uint32_t limit) {
  o.engine.recovery.rnr_retry_limit = limit;
  return o;
}

udp::Options ReferenceIut::sharing(udp::Options o, uint32_t depth) {
  o.engine.shared_rq_depth = depth;
  return o;
}

udp::Options ReferenceIut::starting_at(udp::Options o, uint32_t psn) {
  o.random_seed = false;
  o.engine.seed = seed_for_first_psn(psn);
  return o;
}

void ReferenceIut::collect_accepted() {
  ConnId c;
  while (ep_->try_accept(c)) {
    accepted_ = c;
    ++accepted_count_;
  }
}

udp::Error ReferenceIut::register_memory(uint64_t length, uint32_t access, MemoryRegion& out) {
  std::vector<uint8_t> mem(length, 0);
  udp::Error e = ep_->register_memory(mem.data(), mem.size(), access, out);
  if (!e) memory_.add(out.lkey, std::move(mem));
  return e;
}

udp::Error ReferenceIut::register_memory_at(uint64_t length, uint64_t base, uint32_t access,
                                            MemoryRegion& out) {
  std::vector<uint8_t> mem(length, 0);
  udp::Error e = ep_->register_memory_at(mem.data(), mem.size(), base, access, out);
  if (!e) memory_.add(out.lkey, std::move(mem));
  return e;
}

bool ReferenceIut::path_stats(ConnId conn, size_t path, PathStats& out) const {
  const std::vector<PathStats> all = ep_->path_stats(conn);
  if (path >= all.size()) return false;
  out = all[path];
  return true;
}

}  // namespace metaroce::conformance
