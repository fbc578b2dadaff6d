// Steps several checks share: handshakes in either direction, and a WRITE
// from the target to the tester.
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
