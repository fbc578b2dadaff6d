// The tester's side of a connection, built packet by packet with the engine's
// own codecs (include/metaroce/wire.hpp): handshakes in either direction,
// data packets, ACKs and READ responses, and decoding what the target sends.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "metaroce/conformance/target.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::conformance {

// A datagram the target sent, decoded. `bytes` owns what `pkt` points into.
struct Reply {
  std::vector<uint8_t> bytes;
  uint16_t entropy = 0;
  uint8_t ecn = 0;
  uint8_t dscp = 0;
  bool to_stranger = false;
  uint16_t to_port = 0;  // Sent::to_port
  wire::ParseError error = wire::ParseError::kOk;
  wire::Packet pkt;
};

using Bytes = std::vector<uint8_t>;

class Peer {
 public:
  static constexpr uint16_t kEntropy = 50000;  // the tester's default source port
  static constexpr uint32_t kInitialPsn = 0x00100000;

  Peer(Target& t, uint32_t conn_id = 0x7e57) : t_(t), conn_(conn_id) {}

  // ---- the tester connects to the target ----
  Bytes connect_req(uint64_t nonce, uint8_t version = wire::kVersion) const;
  // Sends a CONNECT_REQ and waits for the ACCEPT; false (and why) if none.
  // `replies` (when given) receives everything the target sent meanwhile.
  bool connect(uint64_t nonce, std::string& why, std::vector<Reply>* replies = nullptr);

  // ---- the target connects to the tester ----
  // Answers a CONNECT_REQ the target sent with an ACCEPT, advertising
  // `max_reads`; the target's connection then names this peer's conn id.
  // Sent from the request's source port, or from check port `from`.
  void accept(const Reply& req, uint8_t max_reads = 16, uint16_t from = 0);
  // Answers it with a CONNECT_REJECT of `code` instead (CONN-4).
  void reject(const Reply& req, Status code);

  // ---- packets ----
  // A WRITE of `payload` at rkey/raddr as one message of one packet, with the
  // AR flag (acknowledge at once) unless told otherwise.
  Bytes write(uint32_t psn, uint64_t rkey, uint64_t raddr, std::span<const uint8_t> payload,
              uint16_t path_tag = 1, bool ack_requested = true) const;
  // One packet, with AR unless told otherwise, of a WRITE of `msg_len`
  // bytes: `payload` at `offset` in the message, at `raddr` (the message
  // starts at raddr - offset).
  Bytes write_part(uint32_t psn, uint64_t rkey, uint64_t raddr, std::span<const uint8_t> payload,
                   uint32_t offset, uint32_t msg_len, bool ack_requested = true) const;
  Bytes read_req(uint32_t psn, uint32_t read_seq, uint64_t rkey, uint64_t raddr,
                 uint32_t len) const;
  Bytes read_resp(uint32_t psn, uint32_t read_seq, uint32_t offset, uint32_t msg_len,
                  std::span<const uint8_t> payload) const;
  // A one-packet message of any data opcode, with AR: `msn` its RSN (SEND*,
  // WRITE_IMM), `rkey`/`raddr` where the opcode has an RDMA header, `imm`
  // where it has immediate data.
  Bytes message(wire::Opcode op, uint32_t psn, uint32_t msn, std::span<const uint8_t> payload,
                uint64_t rkey = 0, uint64_t raddr = 0, uint32_t imm = 0) const;
  // A NAK of the target's packet `nak_psn` (its `msn`), with our `cum`.
  Bytes nak(uint32_t nak_psn, uint8_t code, uint32_t msn, uint32_t cum) const;
  // A PROBE of the tester's path `path_tag` (3.11: AR set unless told, `psn`
  // opaque).
  Bytes probe(uint16_t path_tag = 1, uint32_t psn = 0, bool ack_requested = true) const;
  // A DISCONNECT of the target's connection, naming `src_conn` as ours and
  // giving `reason` (CONN-8); with `ack`, the DISCONNECT_ACK of the target's
  // DISCONNECT.
  Bytes disconnect(uint32_t src_conn, bool ack = false, uint8_t reason = 0) const;
  // An ACK of everything before `cum`, echoing `echo` (a data packet of the
  // target's) with the echo flags `flags` (wire::kAckEcho*).
  Bytes ack(uint32_t cum, const Reply& echo, uint8_t flags = 0) const;
  // The same with the PSNs `sacked` (all beyond `cum`) in its SACK words.
  Bytes sack(uint32_t cum, const std::vector<uint32_t>& sacked, const Reply& echo,
             uint8_t flags = 0) const;
  // A packet with its dst_conn replaced (BAD-7) and the ICRC made good.
  static Bytes with_dst_conn(Bytes p, uint32_t dst_conn);
  // The target's own CONNECT_REQ `req` as it comes back to an endpoint that
  // connects to its own address (CONN-10), but naming reply_port 0: its
  // answer then goes to the port the tester handed it in from, not to the
  // target's receive port at the tester's address, where nothing listens.
  static Bytes own_request(const Reply& req);

  // ---- the wire ----
  void send(std::span<const uint8_t> p, uint16_t entropy = kEntropy, bool ce = false,
            bool stranger = false) {
    t_.deliver(p, entropy, ce, stranger);
  }
  // Lets `ns` pass and returns what the target sent, decoded.
  std::vector<Reply> run(uint64_t ns = 100'000);
  std::vector<Reply> exchange(std::span<const uint8_t> p, uint64_t ns = 100'000,
                              uint16_t entropy = kEntropy, bool ce = false) {
    send(p, entropy, ce);
    return run(ns);
  }
  // run(ns), and on a target in real time (another process, perhaps on a
  // loaded host, that may not get a CPU within one wait) more waits of `ns`,
  // up to `patience_ns` in all, until `want` holds for what arrived; after
  // such a late arrival, one more wait gathers what follows it. Silence is
  // still judged with run(): only waits for a reply take this. Patience
  // also ends after 4 x patience_ns of the tester's clock: a target's real
  // waits last longer than `ns` (RemoteTarget's at least 5 ms), and waits of
  // 1 us counted as such would wait on a silent target for most of an hour.
  template <class Want>
  std::vector<Reply> run_until(Want want, uint64_t ns = 100'000,
                               uint64_t patience_ns = 500'000'000) {
    std::vector<Reply> rs = run(ns);
    if (want(rs) || t_.simulated_time()) return rs;
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(4 * patience_ns);
    for (uint64_t waited = ns; waited < patience_ns && std::chrono::steady_clock::now() < give_up;
         waited += ns) {
      for (Reply& r : run(ns)) rs.push_back(std::move(r));  // bytes keep their storage
      if (want(rs)) {
        for (Reply& r : run(ns)) rs.push_back(std::move(r));
        break;
      }
    }
    return rs;
  }
  // run_until the target reports a completion into `c`; what it sends
  // meanwhile is dropped.
  bool await_completion(Completion& c, uint64_t ns = 100'000) {
    bool got = false;
    (void)run_until([&](const std::vector<Reply>&) { return got = got || t_.poll_completion(c); },
                    ns);
    return got;
  }
  template <class Want>
  std::vector<Reply> exchange_until(std::span<const uint8_t> p, Want want, uint64_t ns = 100'000,
                                    uint16_t entropy = kEntropy, bool ce = false) {
    send(p, entropy, ce);
    return run_until(want, ns);
  }

  // The target's side of the connection: its conn id, the PSN it started at
  // and our next PSN toward it.
  uint32_t target_conn = 0;
  uint32_t target_initial_psn = 0;
  // The PSN our side starts at, announced in our CONNECT_REQ or ACCEPT (set
  // both before the handshake to start elsewhere, SEQ-2), and the next one.
  uint32_t initial_psn = kInitialPsn;
  uint32_t next_psn = kInitialPsn;
  // The connection's mtu: what the tester offers (set it before the
  // handshake to offer less, SEQ-5), then the smaller of its offer and the
  // target's.
  uint32_t mtu = 4096;
  // The connection's window_log2: what the tester offers (set it before
  // the handshake to offer less), then the smaller of the two, at least 6
  // (SEQ-3).
  uint8_t window_log2 = 10;
  // PC on the data packets the peer builds (INT-2): cleared, their ICRC
  // covers the headers only.
  bool cover_payload = true;
  // The tester's CONNECT_REQ (connect): its reply_port (0: the port it
  // leaves from, 3.12) and the check port it leaves from.
  uint16_t reply_port = 0;
  uint16_t request_from = kEntropy;
  uint32_t conn() const { return conn_; }

 private:
  wire::BaseHeader header(wire::Opcode op, uint32_t psn, uint16_t path_tag = 0) const;
  // Answers the target's CONNECT_REQ with `op` (ACCEPT, or REJECT of `code`).
  void answer(const Reply& req, wire::Opcode op, uint8_t max_reads, Status code, uint16_t from = 0);
  Bytes write_packet(uint32_t psn, uint64_t rkey, uint64_t raddr, std::span<const uint8_t> payload,
                     uint16_t path_tag, bool ack_requested, uint32_t offset,
                     uint32_t msg_len) const;
  Target& t_;
  uint32_t conn_;
};

// Replies of one opcode: pointers into `rs`, which must outlive them (a
// temporary would not, in a range-for: hence the deleted overload).
std::vector<const Reply*> of(const std::vector<Reply>& rs, wire::Opcode op);
std::vector<const Reply*> of(std::vector<Reply>&& rs, wire::Opcode op) = delete;
// The first copy of each PSN among `rs`: a target in real time may resend a
// packet (its tail-loss probe) before the tester answers it.
std::vector<const Reply*> firsts(const std::vector<const Reply*>& rs);
// The first ACK among `rs` that echoes `psn` with every flag of `echo_flags`
// (wire::kAckEcho*), or null.
const Reply* ack_of(const std::vector<Reply>& rs, uint32_t psn, uint8_t echo_flags = 0);
// The answer among `rs` to the CONNECT_REQ of connection `conn` with
// `nonce`: the first CONNECT_ACCEPT or CONNECT_REJECT naming both (CONN-3,
// CONN-4), or null.
const Reply* answer_to_request(const std::vector<Reply>& rs, uint32_t conn, uint64_t nonce);
// Conditions for Peer::run_until and exchange_until: a reply of opcode `op`
// came; an ACK as ack_of finds it came; the answer to a request came.
inline auto has(wire::Opcode op) {
  return [op](const std::vector<Reply>& rs) { return !of(rs, op).empty(); };
}
inline auto answers_request(uint32_t conn, uint64_t nonce) {
  return [conn, nonce](const std::vector<Reply>& rs) {
    return answer_to_request(rs, conn, nonce) != nullptr;
  };
}
inline auto acks(uint32_t psn, uint8_t echo_flags = 0) {
  return [psn, echo_flags](const std::vector<Reply>& rs) {
    return ack_of(rs, psn, echo_flags) != nullptr;
  };
}
// What the spec reserves in `r` and finds set (1.3: reserved fields and
// bits are sent as zero): "ACK packet byte 32 is 0x01 (ACK body bytes 16-19
// reserved)", empty when all are zero. Read from the raw bytes at the
// spec's offsets (BH byte 0 bits 1-0, ACK flags 0xf0 and body bytes 16-19,
// NAK and DISCONNECT* body bytes 5-7): decode() ignores them. Also what 3.3
// fixes in ACK, NAK, CONNECT_* and DISCONNECT*, which a receiver ignores
// too: BH path_tag 0, psn 0, AR clear ("ACK packet BH psn is 0x5 (3.3: ...)").
std::string reserved_set(const Reply& r);
std::string hex32(uint64_t v);
// A status or NAK code as failure texts print it: "0x02 (kRemoteBadKey)", or
// "0xee (not in appendix A)", so a code reads the same in every check.
std::string code_text(uint8_t code);
inline std::string code_text(Status s) { return code_text(static_cast<uint8_t>(s)); }

}  // namespace metaroce::conformance
