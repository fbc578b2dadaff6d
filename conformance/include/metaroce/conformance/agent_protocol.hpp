// The agent protocol (conformance/README.md, "The agent protocol"): the
// tester drives the application side of an implementation under test in
// another process or on a NIC through a small agent, over TCP, one JSON
// object a line each way. Here: the line channel both ends use, TCP set-up,
// and the names the protocol gives to engine enums.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::conformance::agent {

inline constexpr int kProtocolVersion = 1;
// Longest line either end accepts (a read_memory of 4 MiB in hex, and more).
inline constexpr size_t kMaxLine = 16u << 20;
// Largest region an agent registers at the tester's request.
inline constexpr uint64_t kMaxRegion = 64u << 20;

// WrOpcode and CompletionOp by their protocol names, in enum order.
inline constexpr std::array<std::string_view, 5> kWrOpcodes = {"write", "write_imm", "send",
                                                               "send_imm", "read"};
inline constexpr std::array<std::string_view, 7> kCompletionOps = {
    "write", "write_imm", "send", "send_imm", "read", "recv", "recv_write_imm"};
// The `stats` op's fields: the EndpointStats counters of packets dropped
// before they reach a connection (spec section 11's table, BAD-1 to BAD-8).
struct DropCounter {
  std::string_view name;
  uint64_t EndpointStats::*field;
};
inline constexpr std::array<DropCounter, 8> kDropCounters = {{
    {"truncated", &EndpointStats::truncated},
    {"bad_version", &EndpointStats::bad_version},
    {"bad_opcode", &EndpointStats::bad_opcode},
    {"bad_checksum", &EndpointStats::bad_checksum},
    {"bad_length", &EndpointStats::bad_length},
    {"bad_field", &EndpointStats::bad_field},
    {"unknown_connection", &EndpointStats::unknown_connection},
    {"wrong_peer", &EndpointStats::wrong_peer},
}};
std::optional<WrOpcode> wr_opcode(std::string_view name);
std::optional<CompletionOp> completion_op(std::string_view name);

// Bytes as lower-case hex and back (nullopt on an odd length or a non-hex digit).
std::string to_hex(const uint8_t* p, size_t n);
std::optional<std::vector<uint8_t>> from_hex(std::string_view s);

// An agent's line as a person reads it: printable ASCII kept, any other
// byte as \xNN (so valid UTF-8 wherever it goes: a JSON report once
// aborted on a vendor's Latin-1 error text), cut after `max` bytes of the
// line ("..." then). Never re-serialised from the parsed reply: nlohmann's
// dump() recurses, and a reply nested a million deep overflowed the stack.
std::string quoted(std::string_view line, size_t max = 200);

// "host:port" or "[v6]:port" split; false when malformed, and for an
// unbracketed IPv6 address ("::1:5": an address, or ::1 port 5?).
bool split_host_port(const std::string& text, std::string& host, uint16_t& port);
// A TCP connection to `hostport` (-1 and `why` on failure, or after timeout_ms).
int tcp_connect(const std::string& hostport, int timeout_ms, std::string& why);
// A listening TCP socket on `hostport` (port 0: one the kernel picks);
// `bound` receives the address it listens on ("host:port").
int tcp_listen(const std::string& hostport, std::string& bound, std::string& why);

// One end of a connection carrying lines ('\n'-terminated), owning the fd.
class LineChannel {
 public:
  explicit LineChannel(int fd = -1) : fd_(fd) {}
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;
  ~LineChannel();
  [[nodiscard]] int fd() const { return fd_; }
  // Reads whatever the socket holds now (it must be readable or
  // non-blocking); false at end of stream or on an error (`why`).
  bool fill(std::string& why);
  // The next whole line buffered, without its '\n' (and '\r'). Sets
  // `too_long` when kMaxLine bytes arrived without one.
  bool next_line(std::string& line, bool& too_long);
  // Waits up to timeout_ms for a whole line; false (and `why`) on end of
  // stream, an error, a line over kMaxLine or the timeout.
  bool read_line(std::string& line, int timeout_ms, std::string& why);
  // What arrived and was not yet taken as a line.
  [[nodiscard]] std::string_view buffered() const { return in_; }
  // Writes `line` and a '\n' (blocking until sent); false on an error.
  bool write_line(std::string_view line, std::string& why);

 private:
  int fd_;
  std::string in_;
};

}  // namespace metaroce::conformance::agent
