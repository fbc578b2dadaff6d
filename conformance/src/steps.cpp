// Steps several checks share: handshakes in either direction, and a WRITE
// from the target to the tester.
#include <functional>
#include <numeric>

#include "checks.hpp"

namespace metaroce::conformance {

bool tester_connects(Peer& peer, std::string& why, uint64_t nonce) {
  return peer.connect(nonce, why);
}

bool tester_connects_to_memory(Target& t, Peer& peer, Region& r, std::string& why, uint32_t access,
                               uint64_t length, std::vector<Reply>* handshake) {
  if (!peer.connect(0xC0FFEE, why, handshake)) return false;
  if (t.register_memory(length, access, r)) return true;
  why = "the target could not register memory";
  return false;
}

bool tester_connects_for_receives(Target& t, Peer& peer, Region& r, ConnId& conn, std::string& why,
                                  uint32_t access) {
  if (!tester_connects_to_memory(t, peer, r, why, access)) return false;
  conn = t.accepted();
  if (conn.valid()) return true;
  why = "the target reports no accepted connection";
  return false;
}

bool target_connects(Target& t, Peer& peer, ConnId& conn, std::string& why, uint8_t max_reads,
                     const std::set<uint32_t>& answered) {
  if (!t.connect_to_tester(conn)) {
    why = "the target could not start a connection";
    return false;
  }
  const auto fresh = [&answered](const std::vector<Reply>& got) -> const Reply* {
    for (const Reply* r : of(got, wire::Opcode::kConnectReq))
      if (answered.count(r->pkt.connect.src_conn) == 0) return r;
    return nullptr;
  };
  const std::vector<Reply> sent = peer.run_until(
      [&fresh](const std::vector<Reply>& got) { return fresh(got) != nullptr; }, 1000);
  const Reply* req = fresh(sent);
  if (req == nullptr) {
    why = "no CONNECT_REQ after connect";
    return false;
  }
  peer.accept(*req, max_reads);
  return true;
}

bool target_connects_twice(Target& t, Peer& a, ConnId& ca, Peer& b, ConnId& cb, std::string& why) {
  return target_connects(t, a, ca, why) && target_connects(t, b, cb, why, 16, {a.target_conn});
}

Bytes counting(size_t n, uint8_t first) {
  Bytes out(n);
  std::iota(out.begin(), out.end(), first);
  return out;
}

SendWr to_tester(WrOpcode op, const Region& local, uint32_t len, uint64_t wr_id) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.op = op;
  wr.local_addr = local.addr;
  wr.length = len;
  wr.lkey = local.lkey;
  wr.remote_addr = kTesterAddr;
  wr.rkey = kTesterRkey;
  return wr;
}

bool target_connects_and_writes(Target& t, Peer& peer, uint32_t len, std::vector<Reply>& sent,
                                std::string& why, uint64_t ns) {
  ConnId conn;
  if (!target_connects(t, peer, conn, why) || !target_writes(t, conn, len, 1, why)) return false;
  sent = peer.run_until(has(wire::Opcode::kWrite), ns);
  return true;
}

std::string target_write_outstanding(Target& t, Peer& peer) {
  ConnId conn;
  std::string why;
  if (!target_connects(t, peer, conn, why) || !target_writes(t, conn, 100, 1, why)) return why;
  const std::vector<Reply> sent = peer.run_until(has(wire::Opcode::kWrite));
  return of(sent, wire::Opcode::kWrite).empty() ? "no data" : "";
}

std::map<uint16_t, const Reply*> first_per_slot(const std::vector<const Reply*>& data) {
  std::map<uint16_t, const Reply*> out;
  for (const Reply* d : data) out.emplace(wire::path_tag_slot(d->pkt.bh.path_tag), d);
  return out;
}

bool one_port_per_tag(const std::vector<const Reply*>& data, std::string& why) {
  std::map<uint16_t, uint16_t> port_of_tag;
  for (const Reply* d : data) {
    const auto [it, fresh] = port_of_tag.emplace(d->pkt.bh.path_tag, d->entropy);
    if (!fresh && it->second != d->entropy) {
      why = "path_tag " + hex32(d->pkt.bh.path_tag) + " sent from ports " +
            std::to_string(it->second) + " and " + std::to_string(d->entropy);
      return false;
    }
  }
  return true;
}

std::vector<Reply> drawn(Target& t, Peer& p, uint64_t ns, uint64_t real_ns) {
  if (t.simulated_time()) return p.run(ns);
  std::vector<Reply> rs = p.run(real_ns);
  for (Reply& r : p.run(real_ns)) rs.push_back(std::move(r));  // bytes keep their storage
  return rs;
}

std::vector<Reply> drawn(Target& t, Peer& p, std::span<const uint8_t> packet, uint64_t ns,
                         uint64_t real_ns) {
  p.send(packet);
  return drawn(t, p, ns, real_ns);
}

std::optional<EndpointStats> drop_counters(Target& t) {
  EndpointStats s;
  if (!t.endpoint_stats(s)) return std::nullopt;
  return s;
}

std::string count_missing(Target& t, const std::optional<EndpointStats>& before, const Counted& c,
                          const std::string& what) {
  if (!before) return {};
  const std::optional<EndpointStats> after = drop_counters(t);
  if (!after) return "the target stopped reporting its counters";
  const uint64_t rose = (*after).*c.field - (*before).*c.field;
  if (rose >= c.n) return {};
  return what + ": " + std::to_string(c.n) + " dropped, counter " + c.name + " rose by " +
         std::to_string(rose);
}

Outcome passed_counting(const std::optional<EndpointStats>& before) {
  if (before) return pass();
  return skip(
      "dropped, nothing changed; the counts unchecked: the target does not report its counters "
      "(agent op stats)");
}

void sack_all_but_cum(Peer& p, uint32_t cum, const std::set<uint32_t>& got, const Reply* echo,
                      const std::vector<Reply>& rs) {
  std::vector<uint32_t> sacked;
  for (const uint32_t a : got)
    if (a != 0) sacked.push_back(cum + a);
  if (echo != nullptr) p.send(p.sack(cum, sacked, *echo), echo->entropy);
  for (const Reply* probe : of(rs, wire::Opcode::kProbe))
    p.send(p.sack(cum, sacked, *probe, wire::kAckEchoProbe), probe->entropy);
}

bool acknowledged(Peer& p, std::span<const uint8_t> packet, uint32_t psn, uint16_t entropy) {
  return ack_of(p.exchange_until(packet, acks(psn), 100'000, entropy), psn) != nullptr;
}

std::string window_held_full(Target& t, Peer& p, uint32_t cum, std::set<uint32_t>& got, Reply* echo,
                             const std::string& held,
                             const std::function<std::string(const std::vector<Reply>&)>& early) {
  const uint32_t window = 1u << p.window_log2;
  const uint64_t step = t.simulated_time() ? 20'000 : 2'000'000;
  for (uint64_t waited = 0; waited < 200'000'000 && got.size() < window; waited += step) {
    const std::vector<Reply> rs = p.run(step);
    const Reply* last = nullptr;
    for (const Reply* d : of(rs, wire::Opcode::kWrite)) {
      const uint32_t ahead = d->pkt.bh.psn - cum;
      if (ahead >= window)
        return "PSN cum + " + std::to_string(ahead) + " sent with cum held" + held;
      got.insert(ahead);
      last = d;
    }
    if (early)
      if (std::string e = early(rs); !e.empty()) return e;
    sack_all_but_cum(p, cum, got, last, rs);
    if (last != nullptr && echo != nullptr) *echo = *last;  // the ACK reads its header only
  }
  if (got.size() < window)
    return "only " + std::to_string(got.size()) + " of the window's " + std::to_string(window) +
           " PSNs sent: the check saw no window reached";
  return {};
}

void answer_probes(Peer& p, std::span<const Reply> rs, uint32_t cum) {
  for (const Reply& r : rs)
    if (r.error == wire::ParseError::kOk && r.pkt.bh.opcode == wire::Opcode::kProbe)
      p.send(p.ack(cum, r, wire::kAckEchoProbe), r.entropy);
}

const Reply* nak_of(const std::vector<Reply>& rs) {
  const auto naks = of(rs, wire::Opcode::kNak);
  return naks.empty() ? nullptr : naks.front();
}

std::string draws_nak(Peer& p, std::span<const uint8_t> packet, uint8_t code, uint32_t psn,
                      std::optional<uint32_t> msn, std::vector<Reply>* seen,
                      std::optional<uint32_t> probe_cum, Target* t) {
  std::vector<Reply> own;
  std::vector<Reply>& rs = seen != nullptr ? *seen : own;
  if (probe_cum && t != nullptr) {
    p.send(packet);
    rs = run_until_answering_probes(*t, p, has(wire::Opcode::kNak), *probe_cum);
  } else {
    rs = p.exchange_until(packet, has(wire::Opcode::kNak));
  }
  const Reply* n = nak_of(rs);
  if (n == nullptr) return "drew no NAK (expected code " + code_text(code) + ")";
  const wire::NakBody& k = n->pkt.nak;
  if (k.code == code && k.nak_psn == psn && (!msn || k.msn == *msn)) return {};
  return "drew NAK " + code_text(k.code) + " naming " + hex32(k.nak_psn) +
         (msn ? " (msn " + hex32(k.msn) + ")" : "") + ", not " + code_text(code) + " naming " +
         hex32(psn) + (msn ? " (msn " + hex32(*msn) + ")" : "");
}

Outcome expect_nak(Target& t, uint32_t conn_id, const Region& r, uint8_t code,
                   const std::function<Bytes(const Peer&)>& make) {
  Peer p(t, conn_id);
  std::string why;
  if (!tester_connects(p, why, 0xA0 + conn_id)) return fail(why);
  const Bytes before = t.read_memory(r, 0, r.length);
  why = draws_nak(p, make(p), code, p.next_psn);
  if (!why.empty()) return fail("the packet " + why);
  if (t.read_memory(r, 0, r.length) != before) return fail("the refused packet changed memory");
  return pass();
}

Outcome expect_nak(Target& t, uint32_t conn_id, const Region& r, uint64_t rkey, uint64_t raddr,
                   uint32_t len, uint8_t code) {
  return expect_nak(t, conn_id, r, code, [&](const Peer& p) {
    return p.write(p.next_psn, rkey, raddr, Bytes(len, 0x77));
  });
}

bool target_writes(Target& t, ConnId conn, uint32_t len, uint64_t wr_id, std::string& why) {
  Region src;
  if (!t.register_memory(len, 0, src)) {
    why = "the target could not register memory";
    return false;
  }
  t.write_memory(src, 0, counting(len, 7));
  if (t.post_send(conn, to_tester(WrOpcode::kWrite, src, len, wr_id)) != Status::kOk) {
    why = "the target refused a WRITE";
    return false;
  }
  return true;
}

}  // namespace metaroce::conformance
