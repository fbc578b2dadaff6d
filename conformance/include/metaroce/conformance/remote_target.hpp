// An implementation under test (IUT) in another process or on a NIC: the
// tester's packets go over real UDP sockets to the IUT's address (the wire
// half, TesterWire), and its application side is driven through an agent
// speaking the agent protocol over TCP (agent_protocol.hpp; the reference
// agent is tools/conformance/agent.cpp). Real time, like UdpTarget: the
// checks of timing rules that need a simulated clock skip.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "metaroce/conformance/agent_protocol.hpp"
#include "metaroce/conformance/target.hpp"
#include "metaroce/conformance/tester_wire.hpp"

namespace metaroce::conformance {

struct RemoteOptions {
  std::string agent;           // the agent, TCP "host:port"
  std::string iut;             // where the IUT receives, UDP "a.b.c.d:port" / "[v6]:port"
  uint16_t entropy_base = 0;   // the IUT's first source port ...
  uint16_t entropy_count = 0;  // ... and how many (at least TesterWire::kPorts)
  std::string tester_ip =
      "127.0.0.3";  // the tester's address (the IUT's family), reachable from it
  std::string stranger_ip = "127.0.0.4";  // another local address the IUT never saw
  int timeout_ms = 10000;                 // for the agent's reply to each request
  // The least run_for() waits: a reply crosses the kernel twice and waits
  // for the agent's process to get a CPU (on a busy host, a scheduler slice).
  int min_wait_us = 5000;
};

class RemoteTarget : public TesterWireTarget {
 public:
  // Connects to the agent (a fresh IUT for this target: hello) and binds the
  // tester's sockets on the IUT's entropy block; nullptr and `why` if not.
  static std::unique_ptr<RemoteTarget> open(const RemoteOptions& o, std::string& why);

  [[nodiscard]] std::string name() const override { return name_; }
  // Real time, at least RemoteOptions::min_wait_us.
  std::vector<Sent> run_for(uint64_t ns) override;
  bool register_memory(uint64_t length, uint32_t access, Region& out) override;
  // register_memory with "base"; false (MR-4's check skips) when the agent
  // refuses it, or answers with another "addr" (an agent that ignores the
  // field registers at its own address).
  bool register_memory_at(uint64_t length, uint32_t access, uint64_t base, Region& out) override;
  bool deregister_memory(const Region& r) override;
  std::vector<uint8_t> read_memory(const Region& r, uint64_t offset, uint64_t length) override;
  void write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) override;
  bool connect_to_tester(ConnId& out) override;
  ConnId accepted() override;
  size_t accepted_count() override;
  Status post_send(ConnId conn, const SendWr& wr) override;
  Status post_recv(ConnId conn, const RecvWr& wr) override;
  bool poll_completion(Completion& out) override;
  // The agent's `shared_receives` and `post_shared_recv`; false (PLACE-6's
  // check skips) when it refuses the first.
  bool shared_receives(uint32_t depth) override;
  Status post_shared_recv(const RecvWr& wr) override;
  bool path_stats(ConnId conn, size_t path, PathStats& out) override;
  // The agent's `close`, `conn_error` and `listen`; false (the check skips) when it
  // refuses them, an agent of protocol 1 without them included.
  bool close(ConnId conn) override;
  bool conn_error(ConnId conn, Status& out) override;
  bool listen(bool accept, uint32_t max_connections) override;
  // The agent's `initial_psn`; false (the check skips) when it has none.
  bool start_psn_at(uint32_t psn) override;
  // The agent's `keepalive`; false (the check skips) when it has none.
  bool set_keepalive(uint64_t keepalive_ns, uint64_t peer_timeout_ns) override;
  bool set_rnr_retry_limit(uint32_t limit) override;
  // The agent's `stats`; false (the BAD checks skip their counts) when it
  // has none.
  bool endpoint_stats(EndpointStats& out) override;
  // --entropy-base..+count-1, mapped as the tester maps it (from 50000);
  // unknown for a block so large that its mapping wraps past 65535.
  [[nodiscard]] std::optional<std::pair<uint16_t, uint16_t>> entropy_range() const override {
    const uint32_t last = uint32_t{TesterWire::kFirstCheckPort} + entropy_count_ - 1;
    if (entropy_count_ == 0 || last > 65535) return std::nullopt;
    return std::pair{TesterWire::kFirstCheckPort, static_cast<uint16_t>(last)};
  }

  // Whether --iut and --entropy-base name the IUT: a CONNECT_REQ sent to
  // --iut draws its answer, a CONNECT_ACCEPT or CONNECT_REJECT naming its
  // src_conn and nonce (within 0.5 s), and it leaves from a port of the
  // entropy block. False and `why`, naming the option, if not: a run with a
  // wrong one failed checks with the tester's mapped ports in their text
  // ("port 46009 is outside the entropy range 50000-50015") or with "no
  // CONNECT_ACCEPT", as if the IUT broke its rules. The answer opens a
  // connection: this target's session is for this only.
  bool check_addresses(std::string& why);

  // The path count the agent's hello told ("paths"), if it told one.
  [[nodiscard]] std::optional<size_t> paths() const override { return paths_; }
  // What the agent's hello told ("udp_checksum"), if it told it.
  [[nodiscard]] std::optional<bool> udp_checksum() const override { return udp_checksum_; }

  // The failure of the agent connection itself (empty if none); the target
  // answers every later request as failed.
  [[nodiscard]] std::string lost() const override { return broken_; }
  // The latest "ok": false the agent answered ("op: error"; "unknown op"
  // left out), which a check's failure quotes.
  [[nodiscard]] std::string last_error() const override { return last_error_; }

 private:
  RemoteTarget(int fd, const RemoteOptions& o)
      : channel_(fd),
        timeout_ms_(o.timeout_ms),
        min_wait_us_(o.min_wait_us),
        entropy_count_(o.entropy_count),
        entropy_base_(o.entropy_base),
        iut_(o.iut) {}
  // Sends one request and reads its reply. False when the agent answered
  // "ok": false (`reply` holds its "error") or the connection broke (then
  // broken_ says how).
  bool call(const nlohmann::json& request, nlohmann::json& reply);
  // The same for an op that came after the first agents and that cannot
  // fail on what the checks ask (close, conn_error, stats): an agent
  // without it answers "unknown op" (false: the checks that need it skip);
  // any other error breaks the session. A skip there would hide the
  // agent's own error text behind "the target cannot be asked to" and
  // exit 0.
  bool call_later_op(const nlohmann::json& request, nlohmann::json& reply);
  // Unsigned field `key` of a reply to `op` (at most `max`); a reply
  // without it breaks the connection as malformed.
  bool field(const nlohmann::json& reply, const char* op, const char* key, uint64_t& out,
             uint64_t max = UINT64_MAX);
  // The region a register_memory reply names (with or without "base"); a
  // reply missing a field breaks the connection, as field() does.
  bool read_region(const nlohmann::json& reply, Region& out);
  bool broke(const std::string& op, const std::string& why);
  // The status of a post_send / post_recv / post_shared_recv reply (`ok`:
  // call()'s result), counting the work request as queued when 0; an
  // error, or a reply without "status", breaks the session.
  Status posted(const char* op, bool ok, const nlohmann::json& r);

  agent::LineChannel channel_;
  int timeout_ms_;
  int min_wait_us_;
  uint16_t entropy_count_;
  uint16_t entropy_base_;
  std::string iut_;
  std::string name_;
  std::string broken_;
  // The latest reply as it came (what the errors quote: agent::quoted).
  std::string last_line_;
  std::string last_error_;
  bool asked_ = false;  // a request was sent on this connection
  // Work requests the agent queued (status 0) and completions it returned:
  // never more of the second.
  uint64_t queued_ = 0;
  uint64_t completions_ = 0;
  std::optional<size_t> paths_;
  std::optional<bool> udp_checksum_;
};

}  // namespace metaroce::conformance
