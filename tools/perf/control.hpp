// metaroce-perf's control messages: how a client and a server agree on a
// test and report its result, sent over the engine's own SEND/RECV on the
// test connection. A fixed layout of big-endian fields, so that a client and
// a server built for different machines understand each other:
//
//   offset size field
//        0    4 magic "MRPF"
//        4    4 type (1 Hello, 2 HelloAck, 3 Done, 4 Result; 5 PathReport,
//                 below)
//        8    4 op (0 write, 1 read, 2 send)      Hello
//       12    4 size (message bytes)              Hello
//       16    4 qd (messages outstanding)         Hello
//       20    4 verify (0 / 1)                    Hello
//       24    4 bidir (0 / 1)                     Hello
//       28    4 refusal (0: accepted)             HelloAck
//       32    8 addr  \  memory the peer may       Hello (bidir), HelloAck
//       40    8 rkey   > WRITE to or READ from
//       48    8 len   /
//       56    8 messages (Done: sent; Result: received)
//                 path_reports (Hello: 1 asks for PathReports;
//                 HelloAck: how many follow the Result, 0 from a
//                 server that sends none)
//       64    8 bytes
//       72    8 verify_errors                      Result
//       80    8 rev_messages \                     Result: the server's own
//       88    8 rev_bytes     | load (bidir)
//       96    8 rev_retx      |  (rev_retx: every packet the server
//                                            retransmitted, also for a READ's
//                                            responses without bidir)
//      104    8 rev_ns       /
//      112      (end)
//
// A PathReport (type 5) has the same size and header and carries the
// figures of one of the server's path slots; a server that was asked sends
// one per slot right after the Result (a read's data travels on them, and
// the reverse load of a write or send with --bidir):
//
//   offset size field
//        0    4 magic "MRPF"
//        4    4 type 5
//        8    4 slot
//       12    4 slots (how many the server reports)
//       16    4 entropy (UDP source port)
//       20    4 state (0 active, 1 probing)
//       24    8 packets (data packets sent, retransmissions included)
//       32    8 retransmissions
//       40    8 ce_marks
//       48    8 srtt_ns
//       56    8 losses
//       64    8 timeouts
//       72    8 retirements
//       80    8 explorations
//       88    8 probes
//       96    4 cwnd_bytes
//      100    4 (zero)
//      104    8 bytes (payload bytes sent)
//      112      (end)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace metaroce::perf {

enum class Op : uint32_t { kWrite = 0, kRead = 1, kSend = 2 };
enum class MsgType : uint32_t {
  kHello = 1,
  kHelloAck = 2,
  kDone = 3,
  kResult = 4,
  kPathReport = 5,
};

// Why a server refused a Hello (HelloAck.refusal).
enum class Refusal : uint32_t {
  kNone = 0,
  kBadOp = 1,
  kBadSize = 2,
  kBadQd = 3,
  kNoMemory = 4,
  kTooLarge = 5,  // size x qd over kMaxBufferBytes
};

inline constexpr uint32_t kCtrlMagic = 0x4d525046;  // "MRPF"
inline constexpr size_t kCtrlBytes = 112;
// The most PathReports a server sends (the engine's most path slots).
inline constexpr uint32_t kMaxPathReports = 32;
// What a server accepts; the client's options are checked against the same.
inline constexpr uint32_t kMaxSize = 1u << 30;
inline constexpr uint32_t kMaxQd = 200;
// Each end allocates size x qd bytes (x 2 with --bidir on the server): the
// largest size and depth together would be 200 GiB.
inline constexpr uint64_t kMaxBufferBytes = uint64_t{4} << 30;

struct Ctrl {
  MsgType type = MsgType::kHello;
  uint32_t op = 0;
  uint32_t size = 0;
  uint32_t qd = 0;
  uint32_t verify = 0;
  uint32_t bidir = 0;
  uint32_t refusal = 0;
  uint64_t addr = 0;
  uint64_t rkey = 0;
  uint64_t len = 0;
  uint64_t messages = 0;      // Done, Result
  uint64_t path_reports = 0;  // Hello, HelloAck: at offset 56, as messages
  uint64_t bytes = 0;
  uint64_t verify_errors = 0;
  uint64_t rev_messages = 0;
  uint64_t rev_bytes = 0;
  uint64_t rev_retx = 0;
  uint64_t rev_ns = 0;
};

void encode(const Ctrl& m, uint8_t (&out)[kCtrlBytes]);
// False when the bytes are not a control message (wrong length, magic or
// type); `out` is then unspecified.
bool decode(std::span<const uint8_t> in, Ctrl& out);

struct PathReport {
  uint32_t slot = 0;
  uint32_t slots = 0;
  uint32_t entropy = 0;
  uint32_t state = 0;  // 0 active, 1 probing
  uint64_t packets = 0;
  uint64_t retransmissions = 0;
  uint64_t ce_marks = 0;
  uint64_t srtt_ns = 0;
  uint64_t losses = 0;
  uint64_t timeouts = 0;
  uint64_t retirements = 0;
  uint64_t explorations = 0;
  uint64_t probes = 0;
  uint32_t cwnd_bytes = 0;
  uint64_t bytes = 0;
};

void encode(const PathReport& r, uint8_t (&out)[kCtrlBytes]);
// False when the bytes are not a PathReport (wrong length, magic or type).
bool decode(std::span<const uint8_t> in, PathReport& out);

// Whether a server can run the test a Hello asks for (the client asks too,
// before it allocates its own buffers).
Refusal check_hello(const Ctrl& hello);
std::string refusal_text(Refusal r);
const char* op_name(Op op);

}  // namespace metaroce::perf
