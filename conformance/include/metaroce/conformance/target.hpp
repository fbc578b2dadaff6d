// The implementation under test (IUT), as the conformance suite sees it: a
// wire on which a scripted peer (the tester) exchanges datagrams with it, and
// an agent that performs the IUT's application-side actions (register memory,
// post work, poll completions). The suite knows nothing else about the IUT:
// a NIC or another software stack conforms by implementing this interface
// over its own packet I/O and verbs. EngineTarget (engine_target.hpp) is the
// reference engine, in process, with a simulated clock.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::conformance {

// A datagram the IUT sent to the tester.
struct Sent {
  std::vector<uint8_t> bytes;  // the UDP payload
  uint16_t entropy = 0;        // its UDP source port
  uint8_t ecn = 0;             // its IP ECN codepoint (kEcnEct0 expected, ENC-4)
  uint8_t dscp = 0;            // its IP DSCP (the control class for ACK and NAK, ENC-6)
  bool to_stranger = false;    // addressed to the stranger address of Target::deliver
  // Its UDP destination port, numbered as `entropy` is (the tester's port
  // Peer::kEntropy + i): ENC-2 has every packet go to the peer's configured
  // port, the one the IUT connected to or a CONNECT_REQ's reply_port (its
  // source port with reply_port 0), never to the port a packet came from.
  // 0 where the target does not tell.
  uint16_t to_port = 0;
};

// Memory the IUT registered for a check: where the tester may aim its
// packets (addr, rkey) and the IUT's own handle for local use (lkey).
struct Region {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t rkey = 0;
  uint32_t lkey = 0;
};

class Target {
 public:
  virtual ~Target() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Whether run_for() simulates time exactly (checks of timing rules need it).
  [[nodiscard]] virtual bool simulated_time() const = 0;

  // ---- the wire ----
  // Hands the IUT a datagram from the tester's address (or, with `stranger`,
  // from another address the IUT has never seen), sent from UDP source port
  // `entropy`, with the IP ECN field CE when `ce`.
  virtual void deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                       bool stranger = false) = 0;
  // The same as a trimming switch forwards it (TRIM-1): with the TRIMMED
  // code point, DSCP 63 (wire::kDefaultTrimmedDscp), which the IUT reads as
  // RxDatagram::trimmed (TRIM-2). False when the target cannot (the check
  // then skips).
  [[nodiscard]] virtual bool deliver_trimmed(std::span<const uint8_t> /*datagram*/,
                                             uint16_t /*entropy*/, bool /*ce*/) {
    return false;
  }
  // Lets `ns` nanoseconds pass and returns what the IUT sent to the tester
  // meanwhile, in sending order. An in-process target simulates the time.
  virtual std::vector<Sent> run_for(uint64_t ns) = 0;

  // ---- the agent ----
  // Registers `length` bytes of zeroed memory with the access bits of
  // metaroce::kAccess*.
  [[nodiscard]] virtual bool register_memory(uint64_t length, uint32_t access, Region& out) = 0;
  // The same with the region's bytes named base..base+length-1 (MR-4: 0
  // makes every address an offset into the region), `out.addr` then `base`.
  // False when the target cannot choose a base, or refuses this one (a range
  // that wraps past 2^64 must be refused); MR-4's check then skips, or
  // passes the refusal.
  [[nodiscard]] virtual bool register_memory_at(uint64_t /*length*/, uint32_t /*access*/,
                                                uint64_t /*base*/, Region& /*out*/) {
    return false;
  }
  [[nodiscard]] virtual bool deregister_memory(const Region& r) = 0;
  [[nodiscard]] virtual std::vector<uint8_t> read_memory(const Region& r, uint64_t offset,
                                                         uint64_t length) = 0;
  virtual void write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) = 0;
  // Starts a connection from the IUT to the tester (its CONNECT_REQ follows
  // on the wire).
  [[nodiscard]] virtual bool connect_to_tester(ConnId& out) = 0;
  // The connection the IUT accepted from the tester's latest CONNECT_REQ, if
  // any, and how many it has accepted in all.
  [[nodiscard]] virtual ConnId accepted() = 0;
  [[nodiscard]] virtual size_t accepted_count() = 0;
  [[nodiscard]] virtual Status post_send(ConnId conn, const SendWr& wr) = 0;
  [[nodiscard]] virtual Status post_recv(ConnId conn, const RecvWr& wr) = 0;
  [[nodiscard]] virtual bool poll_completion(Completion& out) = 0;
  // Makes the IUT afresh, as listen() does, with a shared receive queue of
  // `depth` receives, one for all its connections (PLACE-6). False when the
  // IUT offers none (PLACE-6 is a MAY: the check then skips).
  [[nodiscard]] virtual bool shared_receives(uint32_t /*depth*/) { return false; }
  // Posts a receive to that queue, as post_recv posts one to a connection's.
  [[nodiscard]] virtual Status post_shared_recv(const RecvWr& /*wr*/) {
    return Status::kInvalidArgument;
  }
  // The state of path slot `path` of a connection (spec PathStats).
  [[nodiscard]] virtual bool path_stats(ConnId conn, size_t path, PathStats& out) = 0;
  // Closes a connection in order (CONN-7: its outstanding work completes
  // kFlushed, its DISCONNECT follows on the wire). False when the target
  // cannot be asked to (the checks of the closing side then skip).
  [[nodiscard]] virtual bool close(ConnId /*conn*/) { return false; }
  // Why a connection failed: the status it entered the error state with, or
  // its connect failed with (CONN-4's REJECT code, PATH-7's
  // kPeerUnreachable); kOk while it has not failed. False when the target
  // cannot tell (the checks then leave it out).
  [[nodiscard]] virtual bool conn_error(ConnId /*conn*/, Status& /*out*/) { return false; }
  // Makes the IUT afresh, as a new target finds it (no connections, memory
  // or completions), refusing every CONNECT_REQ (`accept` false) or
  // accepting at most `max_connections` connections at once (0: its own
  // limit), for CONN-4. False when the target cannot be set so (the check
  // then skips).
  [[nodiscard]] virtual bool listen(bool /*accept*/, uint32_t /*max_connections*/) { return false; }
  // The IUT's counters of packets dropped before a connection (spec
  // section 11's table: BAD-1 to BAD-8 count each one). False when it
  // cannot tell (the BAD checks then leave the counts unchecked and skip).
  [[nodiscard]] virtual bool endpoint_stats(EndpointStats& /*out*/) { return false; }
  // For testing only: makes the IUT afresh, as listen() does, so that the
  // first connection it then makes (connect_to_tester) or accepts (the
  // tester's CONNECT_REQ), before any memory is registered, starts at
  // initial PSN `psn`, which is otherwise random (SEQ-1). SEQ-2 so takes the
  // target's own PSNs across 2^32 as requester and as responder. False when
  // the target cannot be set so (the check then skips).
  [[nodiscard]] virtual bool start_psn_at(uint32_t /*psn*/) { return false; }
  // Makes the IUT afresh, as listen() does, with a keepalive of
  // `keepalive_ns` and a peer timeout of `peer_timeout_ns` (CONN-9): the
  // spec's 10 s and 2 s would hold a target in real time 12 s and more.
  // False when the target cannot be set so (the check then skips, in real
  // time; in simulated time it waits out the defaults).
  [[nodiscard]] virtual bool set_keepalive(uint64_t /*keepalive_ns*/,
                                           uint64_t /*peer_timeout_ns*/) {
    return false;
  }
  // Makes the IUT afresh, as listen() does, retrying a message its peer
  // refuses with RNR at most `limit` times (LOSS-7, NAK-4; 0: without end,
  // the spec's default). False when the target cannot be set so (the check
  // then skips).
  [[nodiscard]] virtual bool set_rnr_retry_limit(uint32_t /*limit*/) { return false; }
  // The IUT's entropy range (the UDP source ports its paths draw from, spec
  // PATH-1), {min, max} as Sent::entropy reads them; nullopt when the target
  // does not know it (PATH-1 then checks what it can without it).
  [[nodiscard]] virtual std::optional<std::pair<uint16_t, uint16_t>> entropy_range() const {
    return std::nullopt;
  }

  // Whether the IUT's datagrams carry a UDP checksum: false for one that
  // sends them with checksum 0 (IPv4 allows it), or with no UDP at all (the
  // engine in process); nullopt when the target does not tell. ENC-5: with
  // none, every data packet must set PC (its ICRC then covers the payload);
  // the check skips otherwise, the tester's sockets cannot see the field.
  [[nodiscard]] virtual std::optional<bool> udp_checksum() const { return std::nullopt; }

  // The UDP port the IUT sees for the tester's port `check_port` (numbered
  // as Sent::entropy is): what a CONNECT_REQ's reply_port names it by
  // (ENC-2, CONN-3). nullopt when the target does not tell (ENC-2's check
  // then leaves reply_port out, and skips saying so).
  [[nodiscard]] virtual std::optional<uint16_t> tester_port(uint16_t /*check_port*/) const {
    return std::nullopt;
  }

  // How many paths each of the IUT's connections uses (its entropy values
  // per connection, PATH-1); nullopt when the target does not tell (the
  // checks then assume the reference's 4). CONN-2 judges the order of the
  // first requests against it: a 2-path IUT's third request goes back to
  // its first port.
  [[nodiscard]] virtual std::optional<size_t> paths() const { return std::nullopt; }

  // Why the target itself can no longer be driven (a remote target's agent
  // went away or broke the protocol), empty while it can. The suite then
  // stops: what the IUT did after that says nothing about it.
  [[nodiscard]] virtual std::string lost() const { return {}; }
  // The latest error the target's agent answered a request with, empty
  // where it has none (the in-process targets): a check that fails because
  // the target refused a request (register_memory, connect_to_tester)
  // quotes it (run_rules), since the refusal's reason was once lost.
  [[nodiscard]] virtual std::string last_error() const { return {}; }
};

}  // namespace metaroce::conformance
