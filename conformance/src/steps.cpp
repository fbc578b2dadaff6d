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

bool target_connects(Target& t, Peer& peer, ConnId& conn, std::string& why, uint8_t max_reads) {
  if (!t.connect_to_tester(conn)) {
    why = "the target could not start a connection";
    return false;
  }
  const std::vector<Reply> sent = peer.run_until(has(wire::Opcode::kConnectReq), 1000);
  const auto reqs = of(sent, wire::Opcode::kConnectReq);
  if (reqs.empty()) {
    why = "no CONNECT_REQ after connect";
    return false;
  }
  peer.accept(*reqs.front(), max_reads);
  return true;
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

const Reply* nak_of(const std::vector<Reply>& rs) {
  const auto naks = of(rs, wire::Opcode::kNak);
  return naks.empty() ? nullptr : naks.front();
}

Outcome expect_nak(Target& t, uint32_t conn_id, const Region& r, uint8_t code,
                   const std::function<Bytes(const Peer&)>& make) {
  Peer p(t, conn_id);
  std::string why;
  if (!tester_connects(p, why, 0xA0 + conn_id)) return fail(why);
  const Bytes before = t.read_memory(r, 0, r.length);
  const std::vector<Reply> rs = p.exchange_until(
      make(p), [](const std::vector<Reply>& got) { return nak_of(got) != nullptr; });
  const Reply* nak = nak_of(rs);
  if (nak == nullptr) return fail("no NAK (expected code " + hex32(code) + ")");
  if (nak->pkt.nak.code != code)
    return fail("NAK code " + hex32(nak->pkt.nak.code) + ", expected " + hex32(code));
  if (nak->pkt.nak.nak_psn != p.next_psn) return fail("the NAK names another PSN");
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
  std::vector<uint8_t> fill(len);
  std::iota(fill.begin(), fill.end(), uint8_t{7});
  t.write_memory(src, 0, fill);
  if (t.post_send(conn, to_tester(WrOpcode::kWrite, src, len, wr_id)) != Status::kOk) {
    why = "the target refused a WRITE";
    return false;
  }
  return true;
}

}  // namespace metaroce::conformance
