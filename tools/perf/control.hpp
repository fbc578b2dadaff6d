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
//       64    8 bytes                             (HelloAck: busy_with, below)
//       72    8 verify_errors                      Result
//       80    8 rev_messages \                     Result: the server's own
//       88    8 rev_bytes     | load (bidir)
//       96    8 rev_retx      |  (rev_retx: every packet the server
//                                            retransmitted, also for a READ's
//                                            responses without bidir)
//      104    8 rev_ns       /
//      112      (end)
//
// A HelloAck that refuses a test because another one runs (refusal 6,
// busy) names that test's client in bytes 64..111 instead: its address as
// ASCII ("ip:port" or "[ip6]:port", 47 bytes at most), NUL-padded. Every
// other HelloAck has zeros there (an older server's too): no name.
//
// A send's target is the peer's receives: its HelloAck's addr, rkey and len
// are 0, and a --bidir send's Hello names a token region that nothing reaches
// (an older server takes a --bidir Hello with addr 0 as none).
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
//      100    4 min_rtt_ns (the least RTT sample; an older server sends 0)
//      104    8 bytes (payload bytes sent)
//      112      (end)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "metaroce/config.hpp"

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
  kTooLarge = 5,  // a buffer over kMaxBufferBytes (size x qd, or a send's receive ring)
  kBusy = 6,      // another client's test is running (HelloAck.busy_with names it)
};

inline constexpr uint32_t kCtrlMagic = 0x4d525046;  // "MRPF"
inline constexpr size_t kCtrlBytes = 112;
// The most PathReports a server sends (the engine's most path slots).
inline constexpr uint32_t kMaxPathReports = 32;
// What a server accepts; the client's options are checked against the same.
inline constexpr uint32_t kMaxSize = 1u << 30;
inline constexpr uint32_t kMaxQd = 200;
// Receive queue entries per connection on both ends (the engine's default is
// 256): enough for the 2 qd + 16 receives plan_buffers gives at kMaxQd. With
// 256 the rings stopped growing at qd 118, and a send --bidir at qd 200 drew
// 23-28 thousand RNR NAKs.
inline constexpr uint16_t kRqDepth = 512;
// The most bytes of any one buffer an end allocates for a test (plan_buffers:
// its generator's, the memory it exposes, its receive ring), so at most two
// of them, 8 GiB, with --bidir: the largest size and depth together would be
// 200 GiB.
inline constexpr uint64_t kMaxBufferBytes = uint64_t{4} << 30;
// The most bytes of a receive ring whose buffers must each hold a whole
// message (plan_buffers), unless qd + 1 of them are more. metaroce-perf's
// default depth keeps size x qd within the same 256 MiB.
inline constexpr uint64_t kRecvRingBudget = uint64_t{256} << 20;

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
  // HelloAck: the client whose test keeps the server busy (kBusy), at offset
  // 64 instead of bytes..rev_ns; at most kBusyWithBytes - 1 characters.
  std::string busy_with;
};
inline constexpr size_t kBusyWithOffset = 64;
inline constexpr size_t kBusyWithBytes = kCtrlBytes - kBusyWithOffset;

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
  uint32_t min_rtt_ns = 0;  // the least RTT sample (CC-5's base); below 4 s
  uint64_t bytes = 0;
};

void encode(const PathReport& r, uint8_t (&out)[kCtrlBytes]);
// False when the bytes are not a PathReport (wrong length, magic or type).
bool decode(std::span<const uint8_t> in, PathReport& out);

enum class Side { kClient, kServer };

// The receive buffers one end posts on the test connection: `count` of
// `slot` bytes each, consumed in posting order and posted again as they are.
struct RecvRing {
  uint32_t slot = 0;
  uint32_t count = 0;
  uint64_t bytes() const { return uint64_t{slot} * count; }
};

// What one end of a test allocates (and registers) for it.
struct Buffers {
  RecvRing ring;
  uint64_t exposed = 0;    // the memory the peer WRITEs to or READs from
  uint64_t generator = 0;  // the generator's qd message slots
};

// The buffers `side` allocates for a test of `op`, `size`, `qd` (and
// --bidir), with receive queues of `rq_depth` entries. SENDs consume
// receives in posting order, control and data on one ring, so a ring that
// data SENDs reach (the server's for send, the client's for send with
// --bidir) holds `size` bytes per buffer; every other holds one control
// message (kCtrlBytes), which a WRITE_IMM's notice also fits. A ring of
// control-sized buffers posts 2 qd + 16 (the client's with PathReports to
// come: at least qd + 1 + kMaxPathReports); a message-sized one as many
// while they fit in kRecvRingBudget, else as many as fit, and never fewer
// than qd + 1 (see control.cpp).
Buffers plan_buffers(Side side, Op op, uint32_t size, uint32_t qd, bool bidir,
                     uint32_t rq_depth = kRqDepth);

// Whether a server can run the test a Hello asks for (the client asks too,
// before it allocates its own buffers): besides the fields' ranges, every
// buffer plan_buffers gives either end is at most kMaxBufferBytes.
Refusal check_hello(const Ctrl& hello);
// The deepest queue, at most kMaxQd, that check_hello accepts for a Hello of
// `op`, `size` and `bidir`; 0 when not even depth 1 fits.
uint32_t largest_qd(Op op, uint32_t size, bool bidir);
// Why a server refused; for kBusy with the client whose test runs (busy_with
// of the HelloAck), when known.
std::string refusal_text(Refusal r, const std::string& busy_with = {});
const char* op_name(Op op);

}  // namespace metaroce::perf
