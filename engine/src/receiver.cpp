// Receive side: validation and direct placement of every data packet on
// arrival (no reorder buffer), the receive window, and ACK generation
// (spec SEQ-4, PLACE-*, READ-*, ACK-*, NAK-1/2, COMP-3).
#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "bitmap.hpp"
#include "bytes.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::before;
using detail::Connection;
using detail::ConnState;

namespace {
// MR-3: the source of a READ of no bytes, whatever key it named: never read.
constexpr uint8_t kNoBytes = 0;

// ACK-6's random draw, in [0, k): the packet's PSN and timestamp (BH bytes
// 8-15) hashed (Fibonacci hashing: times 2^64 / golden ratio, the top 32
// bits) and scaled. No state: deterministic for a deterministic sender.
uint32_t echo_draw(const RxDatagram& dg, uint32_t k) {
  const uint64_t h = wire::detail::load64(dg.bytes.data() + 8) * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(((h >> 32) * k) >> 32);
}

// ACK-6's draw between a pending echo and a newer one, in [0, k): a hash of
// the newer echo's PSN and timestamp mixed further than echo_draw's (the
// echo was itself chosen by echo_draw's hash being small): one splitmix64
// step from the pair as its state.
uint32_t echo_pick(const detail::Echo& e, uint32_t k) {
  uint64_t state = uint64_t{e.psn} << 32 | e.tsval;
  const uint64_t h = splitmix64(state);
  return static_cast<uint32_t>(((h >> 32) * k) >> 32);
}
}  // namespace

Status Endpoint::Impl::post_recv(Connection& c, const RecvWr& wr) {
  if (c.state != ConnState::kEstablished && c.state != ConnState::kConnecting)
    return Status::kNotConnected;
  uint8_t* buf = nullptr;
  if (wr.length > 0) {
    Status why = Status::kOk;
    buf = mrs.local(wr.lkey, wr.addr, wr.length, kAccessLocalWrite, why);
    if (buf == nullptr) return why;
  }
  if (rx_ctx(c) == nullptr) return Status::kResourceExhausted;
  detail::RxCtx& r = *c.rx;
  if (r.rq_tail - r.rq_head >= cfg.rq_depth) return Status::kQueueFull;
  if (!room_for_completion()) return Status::kResourceExhausted;
  detail::RecvEntry& e = r.rq[r.rq_tail & r.rq_mask];
  e = detail::RecvEntry{};
  e.wr = wr;
  e.wr.lkey = mrs.hold(wr.lkey);  // MR-6: released where the receive completes
  e.buf = buf;
  ++r.rq_tail;
  return Status::kOk;
}

const char* shared_recv_problem(const EndpointConfig& cfg) noexcept {
  return cfg.shared_rq_depth == 0 ? "shared_rq_depth is 0: the endpoint has no shared receive queue"
                                  : nullptr;
}

Status Endpoint::Impl::post_shared_recv(const RecvWr& wr) {
  if (shared_recv_problem(cfg) != nullptr) return Status::kInvalidArgument;
  uint8_t* buf = nullptr;
  if (wr.length > 0) {
    Status why = Status::kOk;
    buf = mrs.local(wr.lkey, wr.addr, wr.length, kAccessLocalWrite, why);
    if (buf == nullptr) return why;
  }
  if (srq_outstanding >= cfg.shared_rq_depth) return Status::kQueueFull;
  if (!room_for_completion()) return Status::kResourceExhausted;
  if (srq_outstanding == srq.size() && !grow_srq()) return Status::kResourceExhausted;
  detail::RecvEntry& e = srq[srq_tail++ & srq_mask];
  e = detail::RecvEntry{};
  e.wr = wr;
  e.wr.lkey = mrs.hold(wr.lkey);  // MR-6: released where the receive completes
  e.buf = buf;
  e.shared = true;
  ++srq_outstanding;
  return Status::kOk;
}

bool Endpoint::Impl::grow_srq() noexcept {
  std::vector<detail::RecvEntry> bigger;
  try {
    bigger.resize(
        std::min<size_t>(std::max<size_t>(16, srq.size() * 2), std::bit_ceil(cfg.shared_rq_depth)));
  } catch (const std::bad_alloc&) {
    return false;
  }
  const uint32_t count = srq_tail - srq_head;
  for (uint32_t i = 0; i < count; ++i) bigger[i] = srq[(srq_head + i) & srq_mask];
  srq = std::move(bigger);
  srq_mask = static_cast<uint32_t>(srq.size() - 1);
  srq_head = 0;
  srq_tail = count;
  return true;
}

bool Endpoint::Impl::take_shared(detail::RxCtx& r, uint32_t idx) {
  while (idx >= r.rq_tail - r.rq_head) {
    if (srq_head == srq_tail || r.rq_tail - r.rq_head >= cfg.rq_depth) return false;
    r.rq[r.rq_tail++ & r.rq_mask] = srq[srq_head++ & srq_mask];
    ++estats.shared_recvs_taken;
  }
  return true;
}

void Endpoint::Impl::give_back_shared(detail::RxCtx& r, const detail::RecvEntry* keep) {
  // Newest first, each in front of the ring: they come out again in the
  // order they were posted, ahead of receives posted since. Whatever a
  // message of the failed connection placed in one is not data anyone was
  // promised; the next message to take it overwrites what it covers.
  for (uint32_t i = r.rq_tail; i != r.rq_head;) {
    const detail::RecvEntry& e = r.rq[--i & r.rq_mask];
    if (!e.shared || &e == keep) continue;
    detail::RecvEntry& back = srq[--srq_head & srq_mask];
    back = detail::RecvEntry{};
    back.wr = e.wr;
    back.buf = e.buf;
    back.shared = true;
  }
}

void Endpoint::Impl::owe_ack(Connection& c, detail::Echo e, bool immediate, TimeNs now) {
  c.latest = e;
  owe_latest(c, immediate, now);
}

void Endpoint::Impl::owe_latest(Connection& c, bool immediate, TimeNs now) {
  const detail::Echo& e = c.latest;
  if (!immediate) {
    if (c.ack_deadline == TimeNs::never()) c.ack_deadline = now + cfg.ack_delay_ns;  // ACK-5
    return;
  }
  // Coalesce into a plain pending echo; keep every CE and duplicate echo
  // (ACK-2) separate while there is room. ACK-6: a plain echo that meets a
  // plain one still pending (a driver drains once per receive batch, ACK-1)
  // takes its place with probability arrivals / all arrivals so far, so the
  // ACK echoes any packet of the batch alike; the newest would always name
  // the path whose buffer the batch happened to end with.
  if (c.echo_count > 0 && c.echoes[c.echo_count - 1].flags == 0) {
    coalesce_echo(c);
  } else {
    c.echoes[c.echo_count < c.echoes.size() ? c.echo_count++ : c.echo_count - 1] = e;
    c.echo_weight = static_cast<uint16_t>(c.unacked);  // below 256: ACK-1's count is 8 bits
  }
  c.unacked = 0;
  c.ack_deadline = TimeNs::never();
}

// The weights are the arrivals ACK-1 counted for each echo, at least one (an
// ACK-4 trigger is not counted, and stands for itself).
void Endpoint::Impl::coalesce_echo(Connection& c) {
  const detail::Echo& e = c.latest;
  const uint32_t arrivals = std::max<uint32_t>(c.unacked, 1);
  const uint32_t all =
      std::min<uint32_t>(std::max<uint32_t>(c.echo_weight, 1) + arrivals, UINT16_MAX);
  c.echo_weight = static_cast<uint16_t>(all);
  if (e.flags != 0 || echo_pick(e, all) < arrivals) c.echoes[c.echo_count - 1] = e;
}

// emit_ack with SACK words: ACK-8, the fewest words that reach the highest
// PSN received.
bool Endpoint::Impl::emit_sack_ack(Connection& c, const detail::Echo& e, TimeNs now,
                                   std::span<uint8_t> buf, TxDatagram& out) {
  const uint32_t span = c.rx_high - (c.rx_cum + 1);
  const uint32_t words = std::min<uint32_t>(wire::kMaxSackWords, (span + 63) / 64);
  for (uint32_t j = 0; j < words; ++j) {
    const uint32_t base = c.rx_cum + 1 + 64 * j;
    tx_sack[j] = detail::bits64(c.rx->bits, base, c.wmask()) & detail::low_bits(c.rx_high - base);
  }
  const size_t h = wire::write_ack(buf, base_header(c, wire::Opcode::kAck, now), c.rx_cum, e.psn,
                                   e.tsval, e.tag, static_cast<uint8_t>(e.flags),
                                   std::span<const uint64_t>(tx_sack.data(), words));
  return ack_built(c, e, h, finish(buf, h, 0), out);
}

void Endpoint::Impl::on_probe(Connection& c, const RxDatagram& dg, const wire::Packet& p,
                              TimeNs now) {
  owe_ack(c, echo_of(dg, p, wire::kAckEchoProbe), true, now);
}

// TRIM-2: a switch cut the payload; the headers still say which packet.
// It is not received (nothing placed, no bit set, cum unmoved), and its
// sender hears at once, so it resends now rather than once LOSS-2 or the
// tail-loss probe (LOSS-8) finds the gap.
void Endpoint::Impl::on_trimmed(Connection& c, const RxDatagram& dg, const wire::Packet& p,
                                TimeNs now) {
  ++c.stats.trimmed_received;
  owe_ack(c, echo_of(dg, p, wire::kAckEchoTrimmed | (dg.ce ? wire::kAckEchoCe : 0)), true, now);
}

void Endpoint::Impl::complete_recvs(Connection& c, detail::RxCtx& r) {
  while (r.rq_head != r.rq_tail) {
    const detail::RecvEntry& e = r.rq[r.rq_head & r.rq_mask];
    if (!e.has_last || !before(e.last_psn, c.rx_cum)) break;  // COMP-3
    Completion comp;
    comp.wr_id = e.wr.wr_id;
    comp.conn = c.id;
    comp.op = e.write_imm ? CompletionOp::kRecvWriteImm : CompletionOp::kRecv;
    comp.byte_len = e.byte_len;
    comp.imm = e.imm;
    comp.has_imm = e.has_imm;
    complete(c, comp);
    ++c.stats.recv_completions;
    srq_outstanding -= e.shared;
    mrs.release(e.wr.lkey);
    ++r.rq_head;
    ++c.rsn_head;
  }
}

// READ-2, READ-3: a READ_REQ that passed on_data's checks queues its
// responses. Out of on_data, whose every packet of a WRITE stream paid for
// its code: one call a READ, not an instruction more a data packet.
void Endpoint::Impl::on_read_req(Connection& c, const wire::Packet& p, uint32_t psn, Status& why) {
  const wire::MessageHeader& mh = p.mh;
  if (tx_ctx(c) == nullptr) {
    why = Status::kRnr;  // READ-3's wait: no memory for the responses' queue yet
    return;
  }
  detail::TxCtx& t = *c.tx;
  const uint8_t* src = nullptr;
  if (mh.msg_len > kMaxMessageLength)  // READ-2: no requester may ask for more
    why = Status::kRemoteInvalidRequest;
  else
    src = mrs.remote(p.rh.rkey, p.rh.raddr, mh.msg_len, kAccessRemoteRead, why);
  if (src == nullptr && mh.msg_len == 0) {
    why = Status::kOk;  // MR-3: no bytes, no key to check
    src = &kNoBytes;
  }
  if (src == nullptr) return;
  if (t.resp_tail - t.resp_head >= resp_depth()) {
    // READ-3. A READ whose response has not all been sent is outstanding at
    // the requester, which may have max_reads: with as many such queued,
    // this one is beyond its limit. Otherwise the queue is full of responses
    // sent and not yet acknowledged, READs the requester has finished with
    // (their ACKs lost, say, while its READ_REQs got through): not its
    // fault, so it waits as for a receive buffer (RNR) until ACKs free some.
    why = t.resp_tail - t.resp_seg >= cfg.max_reads ? Status::kRemoteInvalidRequest : Status::kRnr;
    return;
  }
  // READ-5: served in the order of the requests' PSNs. One refused with RNR
  // (READ-3) comes again after a later one the queue took meanwhile, and was
  // served after it; it goes ahead of every later one not yet begun (a job
  // begun, or wholly sent, has response records naming its slot).
  uint32_t at = t.resp_tail++;
  for (; at != t.resp_seg; --at) {
    const detail::RespJob& prev = t.resp[(at - 1) & t.resp_mask];
    if ((at - 1 == t.resp_seg && prev.sent > 0) || before(prev.req_psn, psn)) break;
    t.resp[at & t.resp_mask] = prev;
  }
  // MR-6: its region's lkey held until the job goes (release_resp_jobs).
  const uint32_t lkey = mrs.hold(mrs.lkey_of(p.rh.rkey));
  t.resp[at & t.resp_mask] = detail::RespJob{
      psn, lkey, src, mh.msg_len, mh.msn, detail::packets_for(mh.msg_len, c.mtu), 0, 0};
  t.resp[at & t.resp_mask].raddr = p.rh.raddr;
}

void Endpoint::Impl::on_read_resp(Connection& c, const wire::Packet& p, Status& why) {
  // PLACE-4: responses land in the READ's own buffer; anything that does not
  // match an outstanding READ is dropped (a protocol error by the peer).
  why = Status::kRemoteInvalidRequest;
  if (!c.tx) return;
  detail::SqEntry* const read = c.tx->open_read(p.mh.msn);
  if (read == nullptr || p.mh.msg_len != read->wr.length) return;
  detail::SqEntry& e = *read;
  const auto len = static_cast<uint32_t>(p.payload.size());
  if (!response_fits(c, e, p)) return;
  if (!mrs.still_registered(e.wr.lkey, e.wr.length)) {
    why = Status::kLocalProtection;  // MR-5: the READ's target was deregistered
    return;
  }
  if (len > 0) std::memcpy(e.read_target + p.mh.offset, p.payload.data(), len);
  ++e.resp_received;
  why = Status::kOk;
}

// PLACE-4: a READ completes once it has counted resp_pkts responses, so each
// must be a different segment of it (5.2), or a bad responder could complete
// it with bytes never written: one of no bytes at offset msg_len passes
// TRIM-5, and so does a whole segment at an offset already placed, or at one
// between segments. Response k has PSN first + k (READ-2: consecutive PSNs),
// `first` known from the first response placed: each PSN places once
// (SEQ-4), so each segment does. (TRIM-5 has checked the payload's length.)
bool Endpoint::Impl::response_fits(const Connection& c, detail::SqEntry& e, const wire::Packet& p) {
  const uint32_t off = p.mh.offset;
  uint32_t k;
  if (e.resp_received == 0) {
    k = off / c.mtu;
    e.resp_first_psn = p.bh.psn - k;
  } else {
    k = p.bh.psn - e.resp_first_psn;
  }
  return k < e.resp_pkts && uint64_t{k} * c.mtu == off;
}

// MR-5: the buffer this packet would fill was deregistered under posted
// work. The fault is this application's: it fails with kLocalProtection,
// and the peer hears REMOTE_OPERATION_ERROR at once (as InfiniBand's Remote
// Operational Error) rather than waiting out PATH-7's timeout for an answer
// that will never come. Out of line: on_data's hot path kept its registers.
void Endpoint::Impl::on_memory_gone(Connection& c, const RxDatagram& dg, const wire::Packet& p,
                                    const detail::RecvEntry* rq_entry, TimeNs now) {
  c.owe_nak(wire::NakBody{p.bh.psn, static_cast<uint8_t>(Status::kRemoteOperationError), p.mh.msn,
                          c.rx_cum},
            dg.entropy);
  // The request at fault: the receive, or the READ whose target went.
  const detail::Culprit who =
      rq_entry != nullptr ? detail::Culprit::recv(static_cast<uint32_t>(rq_entry - c.rx->rq.data()))
                          : detail::Culprit::send_psn(c.tx->open_read(p.mh.msn)->first_psn);
  enter_error(c, Status::kLocalProtection, who, now);
}

// NAK-2: the failed receiver answers with its fatal NAK again. MR-5's READ
// responder whose region went named the READ_REQ, which its cum had passed:
// the requester, its READ long complete, takes a NAK naming a PSN it has
// acknowledged for stale (NAK-3), and would wait out its peer timeout. A
// packet at or beyond the cum (within the window: the peer sent it) is one
// the requester still holds unacknowledged (this end acknowledges nothing in
// ERROR), so the NAK names the first such packet instead, and is repeated so
// from then on. Every other fatal NAK
// names a packet at or beyond the cum already and is repeated unchanged, as
// is this one to a duplicate (a resent READ_REQ: its READ may still be open).
void Endpoint::Impl::repeat_nak(Connection& c, const RxDatagram& dg, const wire::Packet& p) {
  if (before(c.nak.nak_psn, c.rx_cum) && p.bh.psn - c.rx_cum < c.window()) {
    c.nak.nak_psn = p.bh.psn;
    c.nak.msn = p.mh.msn;
  }
  c.owe_nak(dg.entropy);
}

// TRIM-5: every packet of a message but its last carries exactly mtu bytes
// (SEQ-5). One with fewer lost them on the way: a trimmed packet whose
// TRIMMED code point a later hop rewrote passes the ICRC when PC is clear,
// and would otherwise be marked received with nothing placed.
bool Endpoint::Impl::payload_short(const Connection& c, const wire::Packet& p) {
  if (p.trimmed || p.bh.opcode == wire::Opcode::kReadReq) return false;
  return p.payload.size() != std::min<uint32_t>(c.mtu, p.mh.msg_len - p.mh.offset);
}

void Endpoint::Impl::on_data(Connection& c, const RxDatagram& dg, const wire::Packet& p,
                             TimeNs now) {
  if (payload_short(c, p)) {
    ++estats.bad_length;
    return;
  }
  if (c.state == ConnState::kError) {
    if (c.sent_fatal_nak()) repeat_nak(c, dg, p);  // NAK-2: we failed it; say so again
    return;
  }
  if (p.trimmed) {
    on_trimmed(c, dg, p, now);
    return;
  }
  if (rx_ctx(c) == nullptr) [[unlikely]]
    return;  // no memory for its context: dropped as if lost, and resent
  detail::RxCtx& r = *c.rx;
  const uint32_t mask = c.wmask();
  const uint32_t psn = p.bh.psn;
  const auto d = static_cast<int32_t>(psn - c.rx_cum);
  // rx_cum's own bit is never set (the PSN would have advanced it), so the
  // next expected packet needs no look at the bitmap.
  if (d < 0 ||
      (d > 0 && d < static_cast<int32_t>(c.window()) && detail::bit_get(r.bits, psn, mask))) {
    ++c.stats.duplicates_received;  // SEQ-4, PLACE-5
    trace(now, TraceKind::kDuplicate, c, wire::path_tag_slot(p.bh.path_tag), psn, 0);
    owe_ack(c, echo_of(dg, p, wire::kAckEchoDup | (dg.ce ? wire::kAckEchoCe : 0)), true,
            now);  // ACK-3
    return;
  }
  if (d >= static_cast<int32_t>(c.window())) {
    ++c.stats.out_of_window;
    return;
  }

  // NAK-1: validate, then place. The first failure decides; nothing is written.
  Status why = Status::kOk;
  const wire::MessageHeader& mh = p.mh;
  const auto plen = static_cast<uint32_t>(p.payload.size());
  const bool last = mh.offset + plen == mh.msg_len;
  detail::RecvEntry* rq_entry = nullptr;
  const wire::Opcode op = p.bh.opcode;
  // NAK-1, PLACE-3: every packet of a WRITE_IMM, not only its last, needs
  // its receive buffer posted; one that finds none draws RNR and is not placed.
  const bool uses_rq = wire::consumes_receive(op);
  uint8_t* dst = nullptr;
  if (op == wire::Opcode::kWrite || op == wire::Opcode::kWriteImm) {
    dst = mrs.remote(p.rh.rkey, p.rh.raddr - mh.offset, mh.msg_len, kAccessRemoteWrite, why);
    if (dst != nullptr)
      dst += mh.offset;
    else if (mh.msg_len == 0) [[unlikely]]
      why = Status::kOk;  // MR-3: no bytes, no key to check; dst stays null, nothing to place
  }
  if (why == Status::kOk && uses_rq) {
    const uint32_t idx = mh.msn - c.rsn_head;
    // PLACE-6: each RSN from the oldest open one to this has a message whose
    // last packet lies between cum and this packet, so an RSN further ahead
    // than this packet's PSN is garbage and takes nothing.
    if (idx >= r.rq_tail - r.rq_head &&
        (srq.empty() || idx > static_cast<uint32_t>(d) || !take_shared(r, idx))) {
      why = Status::kRnr;
    } else {
      rq_entry = &r.rq[(r.rq_head + idx) & r.rq_mask];
      if (op != wire::Opcode::kWriteImm) {
        if (mh.msg_len > rq_entry->wr.length)
          why = Status::kRemoteLengthError;
        else if (!mrs.still_registered(rq_entry->wr.lkey, mh.msg_len))
          why = Status::kLocalProtection;  // MR-5; a SEND of no bytes writes nothing there
        else
          dst = rq_entry->buf + mh.offset;
      }
    }
  }
  if (why == Status::kOk && op == wire::Opcode::kReadReq) on_read_req(c, p, psn, why);
  if (why == Status::kOk && op == wire::Opcode::kReadResp) on_read_resp(c, p, why);
  if (why == Status::kLocalProtection) {
    on_memory_gone(c, dg, p, rq_entry, now);
    return;
  }

  if (why == Status::kRnr) {
    // LOSS-7: a pending RNR NAK keeps naming the oldest refused PSN; the
    // sender resends from there.
    if (c.owe.nak && c.nak.code == static_cast<uint8_t>(Status::kRnr) && before(c.nak.nak_psn, psn))
      return;
    c.owe_nak(wire::NakBody{psn, static_cast<uint8_t>(Status::kRnr), mh.msn, c.rx_cum}, dg.entropy);
    return;
  }
  if (why != Status::kOk) {
    if (op == wire::Opcode::kReadResp) {
      ++estats.bad_length;  // PLACE-4: dropped, not NAKed
      return;
    }
    c.owe_nak(wire::NakBody{psn, static_cast<uint8_t>(why), mh.msn, c.rx_cum}, dg.entropy);
    // NAK-2: the fault is the peer's request; none of ours is named.
    enter_error(c, why, detail::Culprit::none(), now);
    return;
  }
  if (rq_entry != nullptr && last) {
    rq_entry->has_last = true;
    rq_entry->last_psn = psn;
    rq_entry->byte_len = mh.msg_len;
    rq_entry->write_imm = op == wire::Opcode::kWriteImm;
    rq_entry->has_imm = wire::has_imm(op);
    rq_entry->imm = p.imm;
  }

  // ACK-4: a packet that fills the last gap (it carries the cumulative PSN
  // past packets that arrived before it) is what a sprayed message's
  // completion waits for; delaying its ACK would delay the completion.
  bool fills_last_gap = false;
  const uint32_t old_cum = c.rx_cum;
  if (psn == c.rx_cum && c.rx_high == c.rx_cum) {
    // In order with nothing received beyond it: the PSN leaves the window at
    // once, so its bit is never set, and there was no gap to fill.
    c.rx_cum = c.rx_high = psn + 1;
  } else {
    detail::bit_set(r.bits, psn, mask);
    if (!before(psn, c.rx_high)) c.rx_high = psn + 1;
    // Advance over the received run a word at a time, clearing its bits.
    while (c.rx_cum != c.rx_high) {
      const uint32_t bit = c.rx_cum & 63;  // the window is a whole number of words
      uint64_t& word = r.bits[(c.rx_cum & mask) >> 6];
      const uint32_t room = std::min<uint32_t>(64 - bit, c.rx_high - c.rx_cum);
      const uint64_t ones = ~(word >> bit);  // lowest set bit: the first PSN missing
      const uint32_t run = ones == 0 ? 64 - bit : static_cast<uint32_t>(__builtin_ctzll(ones));
      const uint32_t n = std::min(run, room);
      word &= ~(detail::low_bits(n) << bit);
      c.rx_cum += n;
      if (n < room) break;
    }
    fills_last_gap = c.rx_cum == c.rx_high && c.rx_cum - old_cum > 1;
  }
  ++c.stats.data_packets_received;
  c.stats.data_bytes_received += plen;
  if (dg.ce) ++c.stats.ce_received;
  // PATH-7: a READ's response is progress of our own work. The peer's other
  // data is too while a READ of ours is outstanding: its responses wait
  // behind the message the peer has started (SEQ-5), however long that is.
  if (op == wire::Opcode::kReadResp || c.reads_outstanding > 0) c.last_progress = now;
  trace(now, TraceKind::kReceived, c, wire::path_tag_slot(p.bh.path_tag), psn, dg.ce);

  // ACK-2, ACK-4: these are acknowledged at once and echo themselves; the
  // others count towards ACK-1 and may be echoed by an ACK that covers several.
  const bool own = dg.ce || last || fills_last_gap || (p.bh.flags & wire::kFlagAckRequested);
  const bool immediate = own || ++c.unacked >= cfg.ack_every;
  // ACK-6: an ACK that covers several counted arrivals echoes one of them
  // drawn uniformly (reservoir sampling: the k-th replaces the choice with
  // probability 1/k). Always the newest, a path whose packets arrive in
  // step with the ACK count would never be echoed and so never measured.
  // The draw hashes the packet's PSN and timestamp (echo_draw): drawing from
  // the endpoint's PRNG instead cost ~40 instructions per data packet in the
  // engine bench (callgrind), this ~8.
  if (own || c.unacked <= 1 || echo_draw(dg, c.unacked) == 0)
    c.latest = echo_of(dg, p, dg.ce ? wire::kAckEchoCe : 0);
  owe_latest(c, immediate, now);
  if (c.rx_cum != old_cum) complete_recvs(c, r);
  if (op == wire::Opcode::kReadResp) complete_sends(c);
  // PLACE-1. The copy is made last (nothing above reads the destination, and
  // none of it is seen before this call returns): here the call has few live
  // values to save around it.
  if (dst != nullptr && plen > 0) std::memcpy(dst, p.payload.data(), plen);
}

}  // namespace metaroce
