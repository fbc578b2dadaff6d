// The tester's half of a conformance target on real sockets (IPv4 or IPv6):
// one UDP socket per source port the checks send from, on the tester's
// address, and one on a stranger's address. The checks' source ports Peer::kEntropy + i
// (i < kPorts) are the real ports base + i, and the ports the implementation
// under test (IUT) sends from map back the same way: with `base` the first
// port of the IUT's own entropy block, ACK-7's "reply from the port of the
// packet echoed" holds exactly and reads as with the engine in process.
// UdpTarget (IUT in process) and RemoteTarget (IUT behind an agent) use it.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "metaroce/conformance/target.hpp"

namespace metaroce::conformance {

class TesterWire {
 public:
  static constexpr uint16_t kPorts = 16;              // check ports 50000..50015
  static constexpr uint16_t kFirstCheckPort = 50000;  // Peer::kEntropy: the IUT's base maps here
  TesterWire() = default;
  TesterWire(const TesterWire&) = delete;
  TesterWire& operator=(const TesterWire&) = delete;
  ~TesterWire();

  // Binds tester_ip:base..base+15 and stranger_ip:base (both IPv4, or both
  // IPv6, brackets optional); false and `why` (the address and errno) when a
  // port is taken or an address is missing or malformed.
  [[nodiscard]] bool open(const std::string& tester_ip, const std::string& stranger_ip,
                          uint16_t base, std::string& why);
  // Where deliver() sends: the IUT's receive address, of the tester's
  // address family once open() has run. False and `why` if not.
  [[nodiscard]] bool set_iut(const std::string& ip, uint16_t port, std::string& why);
  // Sends `datagram` to the IUT from check port `entropy` (outside the 16:
  // the first), or from the stranger, with IP ECN ECT(0), or CE when `ce`.
  // With `dscp`, the IP DSCP it carries (0 unless told; TRIM-2's TRIMMED code point).
  void deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce, bool stranger,
               uint8_t dscp = 0);
  // Appends every datagram waiting on the tester's sockets, then the
  // stranger's, with its source port mapped to a check port and its ECN.
  void receive(std::vector<Sent>& out);
  // Real time: until `ns` passed, rounds of `round()` (the IUT's own
  // progress, where it runs in this process) and receive(), 20 us apart.
  std::vector<Sent> run_for(std::chrono::nanoseconds ns, const std::function<void()>& round);
  // The tester's first socket ("ip:base", "[ip]:base"), where the IUT connects to.
  [[nodiscard]] std::string tester_address() const;
  [[nodiscard]] uint16_t base() const { return base_; }

 private:
  // What arrived on `fd`, the socket of check port `to_port` (Sent::to_port).
  void receive(int fd, bool stranger, uint16_t to_port, std::vector<Sent>& out);

  std::string tester_ip_;
  uint16_t base_ = 0;
  std::vector<int> tester_fds_;  // tester_ip:base_ + i
  int stranger_fd_ = -1;         // stranger_ip:base_
  sockaddr_storage iut_{};
  socklen_t iut_len_ = 0;
  int family_ = 0;  // AF_INET or AF_INET6, from open()
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(70000);
};

// A target whose tester's half is a TesterWire, in real time: the part
// UdpTarget and RemoteTarget share. Each opens wire_ as its IUT needs.
class TesterWireTarget : public Target {
 public:
  [[nodiscard]] bool simulated_time() const override { return false; }
  void deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
               bool stranger) override;
  bool deliver_trimmed(std::span<const uint8_t> datagram, uint16_t entropy, bool ce) override;
  [[nodiscard]] std::optional<uint16_t> tester_port(uint16_t check_port) const override;

 protected:
  TesterWire wire_;
};

}  // namespace metaroce::conformance
