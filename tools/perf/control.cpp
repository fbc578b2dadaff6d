#include "control.hpp"

#include <algorithm>
#include <cstring>

#include "metaroce/bytes.hpp"

namespace metaroce::perf {
namespace {

// The head every control message starts with: the magic, then the type.
void store_head(uint8_t* p, MsgType type) {
  be::store32(p + 0, kCtrlMagic);
  be::store32(p + 4, static_cast<uint32_t>(type));
}

// The type field of a control message, or 0 when the bytes are not one
// (wrong length or magic).
uint32_t message_type(std::span<const uint8_t> in) {
  if (in.size() != kCtrlBytes || be::load32(in.data()) != kCtrlMagic) return 0;
  return be::load32(in.data() + 4);
}

}  // namespace

void encode(const Ctrl& m, uint8_t (&out)[kCtrlBytes]) {
  uint8_t* p = out;
  store_head(p, m.type);
  be::store32(p + 8, m.op);
  be::store32(p + 12, m.size);
  be::store32(p + 16, m.qd);
  be::store32(p + 20, m.verify);
  be::store32(p + 24, m.bidir);
  be::store32(p + 28, m.refusal);
  be::store64(p + 32, m.addr);
  be::store64(p + 40, m.rkey);
  be::store64(p + 48, m.len);
  const bool hello = m.type == MsgType::kHello || m.type == MsgType::kHelloAck;
  be::store64(p + 56, hello ? m.path_reports : m.messages);
  be::store64(p + 64, m.bytes);
  be::store64(p + 72, m.verify_errors);
  be::store64(p + 80, m.rev_messages);
  be::store64(p + 88, m.rev_bytes);
  be::store64(p + 96, m.rev_retx);
  be::store64(p + 104, m.rev_ns);
  if (m.type == MsgType::kHelloAck) {
    std::fill(p + kBusyWithOffset, p + kCtrlBytes, uint8_t{0});
    std::copy_n(m.busy_with.begin(), std::min(m.busy_with.size(), kBusyWithBytes - 1),
                p + kBusyWithOffset);
  }
}

bool decode(std::span<const uint8_t> in, Ctrl& out) {
  const uint32_t type = message_type(in);
  const uint8_t* p = in.data();
  if (type < static_cast<uint32_t>(MsgType::kHello) ||
      type > static_cast<uint32_t>(MsgType::kResult))
    return false;
  out.type = static_cast<MsgType>(type);
  out.op = be::load32(p + 8);
  out.size = be::load32(p + 12);
  out.qd = be::load32(p + 16);
  out.verify = be::load32(p + 20);
  out.bidir = be::load32(p + 24);
  out.refusal = be::load32(p + 28);
  out.addr = be::load64(p + 32);
  out.rkey = be::load64(p + 40);
  out.len = be::load64(p + 48);
  const bool hello = out.type == MsgType::kHello || out.type == MsgType::kHelloAck;
  out.messages = hello ? 0 : be::load64(p + 56);
  out.path_reports = hello ? be::load64(p + 56) : 0;
  out.bytes = be::load64(p + 64);
  out.verify_errors = be::load64(p + 72);
  out.rev_messages = be::load64(p + 80);
  out.rev_bytes = be::load64(p + 88);
  out.rev_retx = be::load64(p + 96);
  out.rev_ns = be::load64(p + 104);
  out.busy_with.clear();
  if (out.type == MsgType::kHelloAck) {
    const auto* name = reinterpret_cast<const char*>(p + kBusyWithOffset);
    out.busy_with.assign(name, strnlen(name, kBusyWithBytes - 1));
    out.bytes = out.verify_errors = out.rev_messages = out.rev_bytes = out.rev_retx = out.rev_ns =
        0;
  }
  return true;
}

void encode(const PathReport& r, uint8_t (&out)[kCtrlBytes]) {
  uint8_t* p = out;
  store_head(p, MsgType::kPathReport);
  be::store32(p + 8, r.slot);
  be::store32(p + 12, r.slots);
  be::store32(p + 16, r.entropy);
  be::store32(p + 20, r.state);
  be::store64(p + 24, r.packets);
  be::store64(p + 32, r.retransmissions);
  be::store64(p + 40, r.ce_marks);
  be::store64(p + 48, r.srtt_ns);
  be::store64(p + 56, r.losses);
  be::store64(p + 64, r.timeouts);
  be::store64(p + 72, r.retirements);
  be::store64(p + 80, r.explorations);
  be::store64(p + 88, r.probes);
  be::store32(p + 96, r.cwnd_bytes);
  be::store32(p + 100, r.min_rtt_ns);
  be::store64(p + 104, r.bytes);
}

bool decode(std::span<const uint8_t> in, PathReport& out) {
  if (message_type(in) != static_cast<uint32_t>(MsgType::kPathReport)) return false;
  const uint8_t* p = in.data();
  out.slot = be::load32(p + 8);
  out.slots = be::load32(p + 12);
  out.entropy = be::load32(p + 16);
  out.state = be::load32(p + 20);
  out.packets = be::load64(p + 24);
  out.retransmissions = be::load64(p + 32);
  out.ce_marks = be::load64(p + 40);
  out.srtt_ns = be::load64(p + 48);
  out.losses = be::load64(p + 56);
  out.timeouts = be::load64(p + 64);
  out.retirements = be::load64(p + 72);
  out.explorations = be::load64(p + 80);
  out.probes = be::load64(p + 88);
  out.cwnd_bytes = be::load32(p + 96);
  out.min_rtt_ns = be::load32(p + 100);
  out.bytes = be::load64(p + 104);
  return true;
}

static_assert(kMaxQd + 1 + kMaxPathReports <= kRqDepth - 4u && 2 * kMaxQd + 16 <= kRqDepth - 4u,
              "a client's Result and every PathReport find receives at any depth, and every "
              "ring its 2 qd + 16");

Buffers plan_buffers(Side side, Op op, uint32_t size, uint32_t qd, bool bidir, uint32_t rq_depth) {
  const uint64_t messages = uint64_t{size} * qd;
  const bool client = side == Side::kClient;
  const bool send = op == Op::kSend;
  Buffers b;
  // The client's generator always runs; the server's only with --bidir. A
  // send's target is the peer's receive ring: the server exposes memory for
  // write and read only, the client (with --bidir) for the server's WRITEs
  // and READs.
  b.generator = client || bidir ? messages : 0;
  b.exposed = !send && (!client || bidir) ? messages : 0;
  // Receives for qd messages in flight and control, with qd + 16 to spare
  // (at most rq_depth - 4). The client's also hold the server's Result and
  // its PathReports (up to kMaxPathReports, when asked for: a read, or
  // --bidir), which arrive together at the end, when up to qd receives may
  // still hold the reverse load's last SENDs or WRITE_IMMs (--bidir write or
  // send; a READ takes none), not yet polled and posted again: the ring
  // keeps room for all of them besides those.
  const bool reports = client && (op == Op::kRead || bidir);
  const uint32_t reverse_held = client && bidir && op != Op::kRead ? qd : 0;
  const uint32_t limit = rq_depth > 4 ? rq_depth - 4 : 1;
  const uint32_t full = std::min<uint32_t>(
      limit, std::max<uint32_t>(2 * qd + 16, reports ? reverse_held + 1 + kMaxPathReports : 0));
  const bool data = send && (!client || bidir);  // data SENDs reach this ring
  b.ring.slot = std::max<uint32_t>(static_cast<uint32_t>(kCtrlBytes), data ? size : 0);
  b.ring.count = full;
  if (data && b.ring.bytes() > kRecvRingBudget) {
    // Message-sized buffers: as many as kRecvRingBudget holds, but qd + 1 at
    // the fewest, qd for the messages in flight and one for the control
    // message that follows them (the client's Done, the server's Result) or
    // for a receive consumed but not yet posted again. Only messages over
    // 256 MiB / (qd + 1) (1.27 MiB at qd 200) get no more, and each takes
    // longer on the wire than an end takes to poll and post a receive again.
    // A SEND that still finds none, like PathReports past the first few, is
    // retried every 100 us (RNR, LOSS-7) until the peer has posted one
    // again: that costs time, not the test.
    const uint32_t fewest = std::min(full, qd + 1);
    b.ring.count =
        static_cast<uint32_t>(std::clamp<uint64_t>(kRecvRingBudget / b.ring.slot, fewest, full));
  }
  return b;
}

Refusal check_hello(const Ctrl& hello) {
  if (hello.op > static_cast<uint32_t>(Op::kSend)) return Refusal::kBadOp;
  if (hello.size == 0 || hello.size > kMaxSize) return Refusal::kBadSize;
  if (hello.qd == 0 || hello.qd > kMaxQd) return Refusal::kBadQd;
  // The generator's and the exposed memory.
  if (uint64_t{hello.size} * hello.qd > kMaxBufferBytes) return Refusal::kTooLarge;
  // The receive rings, which for a send hold qd + 1 messages at the fewest.
  for (const Side side : {Side::kClient, Side::kServer})
    if (plan_buffers(side, static_cast<Op>(hello.op), hello.size, hello.qd, hello.bidir != 0)
            .ring.bytes() > kMaxBufferBytes)
      return Refusal::kTooLarge;
  return Refusal::kNone;
}

uint32_t largest_qd(Op op, uint32_t size, bool bidir) {
  Ctrl hello;
  hello.op = static_cast<uint32_t>(op);
  hello.size = size;
  hello.bidir = bidir ? 1 : 0;
  // Every buffer grows with the depth, so the first accepted from the top
  // is the largest.
  for (hello.qd = kMaxQd; hello.qd > 0; --hello.qd)
    if (check_hello(hello) == Refusal::kNone) return hello.qd;
  return 0;
}

std::string refusal_text(Refusal r, const std::string& busy_with) {
  switch (r) {
    case Refusal::kNone: return "accepted";
    case Refusal::kBadOp: return "unknown operation";
    case Refusal::kBadSize: return "message size outside 1.." + std::to_string(kMaxSize);
    case Refusal::kBadQd: return "queue depth outside 1.." + std::to_string(kMaxQd);
    case Refusal::kNoMemory: return "the server cannot register buffers for this size and depth";
    case Refusal::kTooLarge:
      return "message size x queue depth, or for a send its receive buffers (size x (queue "
             "depth + 1)), over " +
             std::to_string(kMaxBufferBytes >> 30) + " GiB";
    case Refusal::kBusy:
      return busy_with.empty() ? "server busy: another test is running"
                               : "server busy: a test with " + busy_with + " is running";
  }
  return "refusal " + std::to_string(static_cast<uint32_t>(r));
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kWrite: return "write";
    case Op::kRead: return "read";
    case Op::kSend: return "send";
  }
  return "?";
}

}  // namespace metaroce::perf
