#include "traffic.hpp"

#include <algorithm>

#include "pattern.hpp"

namespace metaroce::perf {

bool Sink::prepare(udp::UdpEndpoint& e, const TestParams& tp, RecvRing ring) {
  ep = &e;
  p = tp;
  rslot = ring.slot;
  rcount = ring.count;
  if (!rbuf.resize(ring.bytes())) return false;
  return !ep->register_memory(rbuf.data(), rbuf.size(), kAllAccess, rbuf_mr);
}

udp::Error Sink::post_ring(ConnId c) {
  conn = c;
  for (uint32_t i = 0; i < rcount; ++i)
    if (udp::Error e = post(i)) return e;
  return {};
}

bool Sink::expose(uint32_t size, uint32_t qd, bool fill) {
  if (!mem.resize(size_t{size} * qd)) return false;
  if (fill)
    for (uint32_t s = 0; s < qd; ++s) pattern_fill(mem.data() + size_t{s} * size, size, s);
  return !ep->register_memory(mem.data(), mem.size(), kAllAccess, mem_mr);
}

udp::Error Sink::post(uint32_t i) {
  return ep->recv(conn, kSinkWrId | i, rbuf.data() + size_t{i} * rslot, rslot, rbuf_mr.lkey);
}

bool Sink::on_completion(const Completion& c) {
  // Another connection's receive (a server's newcomer's Hello) is never ours.
  if ((c.wr_id & kSinkWrId) == 0 || c.conn != conn) return false;
  const auto i = static_cast<uint32_t>(c.wr_id & 0xffffffff);
  if (c.status != Status::kOk) return true;  // flushed at the end
  const uint8_t* buf = rbuf.data() + size_t{i} * rslot;
  Ctrl m;
  PathReport r;
  const std::span<const uint8_t> got{buf, std::min<size_t>(c.byte_len, rslot)};
  if (c.op == CompletionOp::kRecv && decode(got, m)) {
    ctrl.push_back(m);
  } else if (c.op == CompletionOp::kRecv && decode(got, r)) {
    path_reports.push_back(r);
  } else if (c.op == CompletionOp::kRecvWriteImm) {
    // WRITE_IMM with imm = low bits of seq: the slot holds pattern(seq).
    const uint64_t seq = next_seq++;
    if (c.imm != static_cast<uint32_t>(seq)) ++verify_errors;
    if (p.verify) {
      // Where this connection's packets split the slot (fixed once agreed).
      if (mtu == 0) mtu = ep->mtu_of(conn);
      verify_errors +=
          pattern_check_slot(mem.data() + size_t{seq % p.qd} * p.size, p.size, seq, p.qd, mtu);
    }
    bytes += p.size;
  } else if (c.op == CompletionOp::kRecv) {
    const uint64_t seq = next_seq++;
    if (p.verify) {
      verify_errors += c.byte_len != p.size ? 1 : 0;
      verify_errors += pattern_check(buf, std::min(c.byte_len, p.size), seq);
    }
    bytes += c.byte_len;
  }
  if (repost) (void)post(i);
  return true;
}

bool Generator::prepare(udp::UdpEndpoint& e, const TestParams& tp) {
  ep = &e;
  p = tp;
  if (!buf.resize(size_t{p.size} * p.qd)) return false;
  post_time.assign(p.qd, Clock::time_point{});
  lat.reserve(LatencySampler::kDefaultCapacity);
  // --verify: the first qd messages' patterns now, before the client
  // connects. Filled at the first pump instead, up to 4 GiB of first touches
  // and pattern held the first message back for seconds with GiB messages,
  // and the server gave up on a silent client (--peer-timeout-ms).
  if (p.verify)
    for (uint64_t seq = 0; seq < p.qd; ++seq) prepare_slot(seq);
  return !ep->register_memory(buf.data(), buf.size(), kAllAccess, mr);
}

void Generator::prepare_slot(uint64_t seq) {
  if (p.op == Op::kRead)
    // The slot still holds an earlier READ of the same server slot, that
    // is the same pattern: poison every byte, so that a byte this READ
    // does not deliver fails the check.
    pattern_poison(slot(seq), p.size, seq % p.qd);
  else
    pattern_fill(slot(seq), p.size, seq);
}

bool Generator::pump(uint64_t upto) {
  while (posted < upto && posted - completed < p.qd) {
    const uint64_t seq = posted;
    uint8_t* s = slot(seq);
    const uint64_t rslot = raddr + (seq % p.qd) * p.size;
    udp::Error e;
    // The first qd slots were prepared with the buffer (prepare()).
    if (p.verify && seq >= p.qd) prepare_slot(seq);
    switch (p.op) {
      case Op::kWrite:
        if (p.verify) {
          e = ep->write_imm(conn, seq, s, p.size, mr.lkey, rslot, rkey, static_cast<uint32_t>(seq));
        } else {
          e = ep->write(conn, seq, s, p.size, mr.lkey, rslot, rkey);
        }
        break;
      case Op::kRead: e = ep->read(conn, seq, s, p.size, mr.lkey, rslot, rkey); break;
      case Op::kSend: e = ep->send(conn, seq, s, p.size, mr.lkey); break;
    }
    if (e) {
      if (e.status == Status::kQueueFull) break;
      last_error = e;
      return false;
    }
    post_time[seq % p.qd] = Clock::now();
    ++posted;
  }
  return true;
}

bool Generator::on_completion(const Completion& c) {
  if ((c.wr_id & (kCtrlWrId | kSinkWrId)) != 0) return false;
  const uint64_t seq = c.wr_id;
  if (c.status != Status::kOk) {
    ++errors;
    if (!last_error) last_error = ep->completion_error(c);
    ++completed;
    return true;
  }
  const auto now = Clock::now();
  last_ok = now;
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - post_time[seq % p.qd]).count();
  lat.add(static_cast<uint64_t>(std::max<int64_t>(ns, 0)));
  if (p.op == Op::kRead && p.verify) verify_errors += pattern_check(slot(seq), p.size, seq % p.qd);
  bytes += p.size;
  ++completed;
  return true;
}

}  // namespace metaroce::perf
