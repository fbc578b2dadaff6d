// The reference UDP driver as an implementation under test, with what the
// agent side of a target keeps around it: the memory it registers for the
// checks (so the tester can read and write it) and the connections it
// accepted. UdpTarget drives one in the tester's process;
// metaroce-conform-agent serves one over the agent protocol.
#pragma once

#include <memory>
#include <string>

#include "metaroce/conformance/memory_store.hpp"
#include "metaroce/udp.hpp"

namespace metaroce::conformance {

class ReferenceIut {
 public:
  // What the checks assume: `paths` paths (4), the entropy block given (0:
  // the driver's default after the port), no linger on close.
  static udp::Options options(uint16_t entropy_base, uint16_t entropy_count, uint8_t paths = 4);
  // nullptr and `why` when the endpoint cannot open on `addr`.
  static std::unique_ptr<ReferenceIut> open(const std::string& addr, const udp::Options& o,
                                            std::string& why);
  // `old` closed at once (its peers are not told), and a fresh one opened
  // on the same `addr` with `o`: a new session's IUT.
  static std::unique_ptr<ReferenceIut> reopen(std::unique_ptr<ReferenceIut> old,
                                              const std::string& addr, const udp::Options& o,
                                              std::string& why);
  // `o` refusing every connection (`accept` false, CONN-4: kConnectRefused)
  // or accepting at most `max_connections` (0: as `o` says; beyond it,
  // kResourceExhausted).
  static udp::Options listening(udp::Options o, bool accept, uint32_t max_connections);
  // `o` with CONN-9's keepalive and the peer timeout set (Target::set_keepalive).
  static udp::Options keeping_alive(udp::Options o, uint64_t keepalive_ns,
                                    uint64_t peer_timeout_ns);
  // `o` retrying an RNR-refused message at most `limit` times (LOSS-7;
  // Target::set_rnr_retry_limit).
  static udp::Options rnr_limited(udp::Options o, uint32_t limit);
  // `o` with a shared receive queue of `depth` receives (Target::shared_receives).
  static udp::Options sharing(udp::Options o, uint32_t depth);
  // `o` with the engine's seed set so that its first connection, made or
  // accepted, starts at initial PSN `psn` (Target::start_psn_at; tests only).
  static udp::Options starting_at(udp::Options o, uint32_t psn);

  [[nodiscard]] udp::UdpEndpoint& ep() { return *ep_; }
  [[nodiscard]] MemoryStore& memory() { return memory_; }
  // Takes the connections accepted since the last call; the latest is
  // accepted(), and accepted_count() counts them all.
  void collect_accepted();
  [[nodiscard]] ConnId accepted() const { return accepted_; }
  [[nodiscard]] size_t accepted_count() const { return accepted_count_; }
  // Registers `length` zeroed bytes kept in memory(); the driver's error if not.
  udp::Error register_memory(uint64_t length, uint32_t access, MemoryRegion& out);
  // The same with its bytes named from `base` (MR-4).
  udp::Error register_memory_at(uint64_t length, uint64_t base, uint32_t access, MemoryRegion& out);
  // Path slot `path` of a connection; false if it has no such slot.
  bool path_stats(ConnId conn, size_t path, PathStats& out) const;

 private:
  explicit ReferenceIut(std::unique_ptr<udp::UdpEndpoint> ep) : ep_(std::move(ep)) {}
  std::unique_ptr<udp::UdpEndpoint> ep_;
  MemoryStore memory_;
  ConnId accepted_;
  size_t accepted_count_ = 0;
};

}  // namespace metaroce::conformance
