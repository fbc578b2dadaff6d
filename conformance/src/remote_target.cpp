#include "metaroce/conformance/remote_target.hpp"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "metaroce/wire.hpp"
#include "peer.hpp"

namespace metaroce::conformance {

using nlohmann::json;

std::unique_ptr<RemoteTarget> RemoteTarget::open(const RemoteOptions& o, std::string& why) {
  if (o.entropy_count < TesterWire::kPorts) {
    why = "--entropy-count " + std::to_string(o.entropy_count) + ": the checks need " +
          std::to_string(TesterWire::kPorts) + " ports of the IUT's entropy block";
    return nullptr;
  }
  std::string iut_host;
  uint16_t iut_port = 0;
  if (!agent::split_host_port(o.iut, iut_host, iut_port)) {
    why = "--iut '" + o.iut + "' is not an a.b.c.d:port or [ipv6]:port";
    return nullptr;
  }
  // The agent answers hello once its IUT is fresh; only then do the
  // tester's sockets open, so that nothing of an earlier session reaches them.
  // An agent still closing the previous check's session may answer with an
  // error beginning "busy" (README, "Sessions"): then again, for up to the
  // timeout.
  std::unique_ptr<RemoteTarget> t;
  json reply;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
  for (;;) {
    const int fd = agent::tcp_connect(o.agent, o.timeout_ms, why);
    if (fd < 0) return nullptr;
    t.reset(new RemoteTarget(fd, o));
    if (t->call({{"op", "hello"}, {"protocol", agent::kProtocolVersion}}, reply)) break;
    // The agent's own error, not the text composed around it: "device:
    // busy" once matched ": busy" and was retried for 10 s.
    const std::string error = reply.value("error", std::string("no answer"));
    why = "agent " + o.agent + ": " + agent::quoted(error);
    if (!error.starts_with("busy") || std::chrono::steady_clock::now() > end) return nullptr;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Required: an agent of another version (or none said) would be asked
  // what it may not mean, and a report needs the IUT's name.
  const auto proto = reply.find("protocol");
  const auto name = reply.find("name");
  if (proto == reply.end() || !proto->is_number_unsigned() ||
      proto->get<uint64_t>() != agent::kProtocolVersion || name == reply.end() ||
      !name->is_string()) {
    why = "agent " + o.agent +
          ": hello's reply needs \"protocol\": " + std::to_string(agent::kProtocolVersion) +
          " (the version the tester speaks) and a \"name\" string: " + agent::quoted(t->last_line_);
    return nullptr;
  }
  // Opened: a "busy" of an earlier try is no reason for anything now (a
  // run stopped later appended it to its stop line).
  why.clear();
  if (!t->wire_.open(o.tester_ip, o.stranger_ip, o.entropy_base, why)) return nullptr;
  std::string bad_iut;
  if (!t->wire_.set_iut(iut_host, iut_port, bad_iut)) {
    why = "--iut '" + o.iut + "': " + bad_iut;
    return nullptr;
  }
  // Optional (agents before it do not send it): the IUT's paths per
  // connection, which CONN-2 judges its requests' ports against.
  if (const auto p = reply.find("paths"); p != reply.end()) {
    if (!p->is_number_unsigned() || p->get<uint64_t>() < 1 || p->get<uint64_t>() > kMaxPaths) {
      why = "agent " + o.agent + ": hello's \"paths\" is not 1 to " + std::to_string(kMaxPaths) +
            ": " + agent::quoted(t->last_line_);
      return nullptr;
    }
    t->paths_ = p->get<uint64_t>();
  }
  // Optional too: whether the IUT's datagrams carry a UDP checksum (ENC-5).
  if (const auto c = reply.find("udp_checksum"); c != reply.end()) {
    if (!c->is_boolean()) {
      why = "agent " + o.agent +
            ": hello's \"udp_checksum\" is not a boolean: " + agent::quoted(t->last_line_);
      return nullptr;
    }
    t->udp_checksum_ = c->get<bool>();
  }
  t->name_ = agent::quoted(name->get<std::string>()) + " at " + o.iut + " (agent " + o.agent + ")";
  return t;
}

bool RemoteTarget::check_addresses(std::string& why) {
  Peer p(*this);
  constexpr uint64_t kNonce = 0x6d72616464726573;
  // Only the request's answer (CONN-3, CONN-4: an ACCEPT or REJECT naming
  // its src_conn and nonce) shows that --iut is the IUT: any other
  // datagram (a service at that port echoing the request back, a stray
  // packet) was once taken for it, and the port it left from then blamed
  // on --entropy-base.
  const std::vector<Reply> rs =
      p.exchange_until(p.connect_req(kNonce), answers_request(p.conn(), kNonce));
  if (!broken_.empty()) {
    why = broken_;
    return false;
  }
  const Reply* answer = answer_to_request(rs, p.conn(), kNonce);
  if (answer == nullptr) {
    why = "--iut " + iut_ + ": the IUT sent " +
          (rs.empty() ? std::string("nothing")
                      : std::to_string(rs.size()) + (rs.size() == 1 ? " datagram" : " datagrams") +
                            ", none a CONNECT_ACCEPT or CONNECT_REJECT naming it,") +
          " back to a CONNECT_REQ sent there from " + wire_.tester_address() +
          " within 0.5 s: is it the address and UDP port the IUT receives on (and can the IUT "
          "reach the tester's address)?";
    return false;
  }
  // The port it left from, as the tester's mapping (check port 50000 =
  // --entropy-base) read it.
  const auto port =
      static_cast<uint16_t>(answer->entropy - TesterWire::kFirstCheckPort + entropy_base_);
  if (static_cast<uint16_t>(port - entropy_base_) >= entropy_count_) {
    why = "--entropy-base " + std::to_string(entropy_base_) + ": the IUT answered from UDP port " +
          std::to_string(port) + ", outside the entropy block " + std::to_string(entropy_base_) +
          ".." + std::to_string(uint32_t{entropy_base_} + entropy_count_ - 1) +
          " that --entropy-base and --entropy-count give (the first port the IUT sends from, and "
          "how many)";
    return false;
  }
  return true;
}

bool RemoteTarget::broke(const std::string& op, const std::string& why) {
  if (broken_.empty()) broken_ = "agent, " + op + ": " + why;  // lost(): the suite stops
  return false;
}

bool RemoteTarget::call(const json& request, json& reply) {
  const std::string op = request.value("op", std::string());
  std::string why;
  last_line_.clear();
  // One reply line a request, nothing unasked: a line more (a blank line
  // after each reply, a log line) once went unseen, and every later request
  // read the previous one's reply. (Before the first request, the "busy"
  // an agent may answer a connection with at once is no line unasked.)
  if (broken_.empty() && asked_ && !channel_.fill(why)) broke(op, why);
  if (broken_.empty() && asked_ && !channel_.buffered().empty())
    broke(op, "a line the agent sent unasked, before this request: " +
                  agent::quoted(channel_.buffered()));
  asked_ = true;
  if (broken_.empty() && (!channel_.write_line(request.dump(), why) ||
                          !channel_.read_line(last_line_, timeout_ms_, why)))
    broke(op, why);
  if (broken_.empty() && !channel_.buffered().empty())
    broke(op, "more than one line for one request: " + agent::quoted(last_line_) + " then " +
                  agent::quoted(channel_.buffered()));
  if (broken_.empty()) {
    reply = json::parse(last_line_, nullptr, false);
    const auto ok = reply.is_object() ? reply.find("ok") : reply.end();
    if (reply.is_discarded() || !reply.is_object() || ok == reply.end() || !ok->is_boolean())
      broke(op, "a reply that is not a JSON object with \"ok\": " + agent::quoted(last_line_));
    else if (ok->get<bool>())
      return true;
    else if (!reply.contains("error") || !reply["error"].is_string())
      reply["error"] = "(no error text)";
    if (broken_.empty() && !reply["error"].get<std::string>().starts_with("unknown op"))
      last_error_ = op + ": " + agent::quoted(reply["error"].get<std::string>());
  }
  if (!broken_.empty()) reply = json{{"ok", false}, {"error", broken_}};
  return false;
}

bool RemoteTarget::call_later_op(const json& request, json& reply) {
  if (call(request, reply)) return true;
  const std::string error = reply.value("error", std::string());
  if (broken_.empty() && !error.starts_with("unknown op")) {
    const std::string op = request.value("op", std::string());
    broke(op, "answered \"" + agent::quoted(error) + "\" (an agent without " + op +
                  " answers \"unknown op\", and the checks that need it skip)");
  }
  return false;
}

bool RemoteTarget::field(const json& reply, const char* op, const char* key, uint64_t& out,
                         uint64_t max) {
  const auto it = reply.find(key);
  if (it == reply.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max)
    return broke(op, std::string("a reply without an unsigned \"") + key + "\" (at most " +
                         std::to_string(max) + "): " + agent::quoted(last_line_));
  out = it->get<uint64_t>();
  return true;
}

std::vector<Sent> RemoteTarget::run_for(uint64_t ns) {
  // Lost: the check's verdict is void (the suite stops after it), so it
  // ends without waiting out its rounds.
  if (!broken_.empty()) return {};
  // The IUT progresses by itself: the rounds only receive.
  return wire_.run_for(
      std::chrono::nanoseconds(std::max<uint64_t>(ns, uint64_t(min_wait_us_) * 1000)), {});
}

bool RemoteTarget::read_region(const json& reply, Region& out) {
  uint64_t lkey = 0;
  Region g;
  if (!field(reply, "register_memory", "addr", g.addr) ||
      !field(reply, "register_memory", "length", g.length) ||
      !field(reply, "register_memory", "rkey", g.rkey) ||
      !field(reply, "register_memory", "lkey", lkey, UINT32_MAX))
    return false;
  g.lkey = static_cast<uint32_t>(lkey);
  out = g;
  return true;
}

bool RemoteTarget::register_memory(uint64_t length, uint32_t access, Region& out) {
  json r;
  return call({{"op", "register_memory"}, {"length", length}, {"access", access}}, r) &&
         read_region(r, out);
}

bool RemoteTarget::register_memory_at(uint64_t length, uint32_t access, uint64_t base,
                                      Region& out) {
  json r;
  Region g;
  if (!call({{"op", "register_memory"}, {"length", length}, {"access", access}, {"base", base}},
            r) ||
      !read_region(r, g))
    return false;
  if (g.addr != base) {
    // An agent that does not know "base" registered the region where it
    // chose: the check cannot use it.
    (void)deregister_memory(g);
    return false;
  }
  out = g;
  return true;
}

bool RemoteTarget::deregister_memory(const Region& r) {
  json reply;
  return call({{"op", "deregister_memory"}, {"lkey", r.lkey}}, reply);
}

// The tester reads and writes only inside regions the agent registered
// (their bytes readable after deregister_memory too): an error, or bytes
// of another length, is the agent's fault. Both once passed unseen:
// "memory unchanged" compared two empty reads and could not fail, and a
// refused write left a check blaming the IUT for bytes never written.
std::vector<uint8_t> RemoteTarget::read_memory(const Region& r, uint64_t offset, uint64_t length) {
  json reply;
  if (!call({{"op", "read_memory"}, {"lkey", r.lkey}, {"offset", offset}, {"length", length}},
            reply)) {
    broke("read_memory", "answered \"" + agent::quoted(reply.value("error", std::string())) +
                             "\" for a range inside a region it registered");
    return {};
  }
  const auto it = reply.find("hex");
  auto bytes =
      it != reply.end() && it->is_string() ? agent::from_hex(it->get<std::string>()) : std::nullopt;
  if (!bytes || bytes->size() != length) {
    broke("read_memory", "a reply without a \"hex\" string of the " + std::to_string(length) +
                             " bytes asked for: " + agent::quoted(last_line_));
    return {};
  }
  return *bytes;
}

void RemoteTarget::write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) {
  json reply;
  if (!call({{"op", "write_memory"},
             {"lkey", r.lkey},
             {"offset", offset},
             {"hex", agent::to_hex(bytes.data(), bytes.size())}},
            reply))
    broke("write_memory", "answered \"" + agent::quoted(reply.value("error", std::string())) +
                              "\" for a range inside a region it registered");
}

bool RemoteTarget::connect_to_tester(ConnId& out) {
  json r;
  uint64_t conn = 0;
  if (!call({{"op", "connect_to_tester"}, {"address", wire_.tester_address()}}, r) ||
      !field(r, "connect_to_tester", "conn", conn, UINT32_MAX))
    return false;
  out = ConnId{static_cast<uint32_t>(conn)};
  return true;
}

ConnId RemoteTarget::accepted() {
  json r;
  uint64_t conn = 0;
  if (!call({{"op", "accepted"}}, r) || !field(r, "accepted", "conn", conn, UINT32_MAX)) return {};
  return ConnId{static_cast<uint32_t>(conn)};
}

size_t RemoteTarget::accepted_count() {
  json r;
  uint64_t count = 0;
  if (!call({{"op", "accepted"}}, r) || !field(r, "accepted", "count", count)) return 0;
  return count;
}

namespace {

// A request of `op` posting the receive `wr` (post_recv adds its conn).
json receive_request(const char* op, const RecvWr& wr) {
  return {
      {"op", op}, {"wr_id", wr.wr_id}, {"addr", wr.addr}, {"length", wr.length}, {"lkey", wr.lkey}};
}

}  // namespace

Status RemoteTarget::posted(const char* op, bool ok, const json& r) {
  uint64_t status = 0;
  // The tester's work requests are well formed (README: the only errors
  // are a field missing or out of range, an unknown opcode): an error is
  // the agent's, and once read as the IUT's kInvalidArgument, failing a
  // check that wanted another refusal with the agent's text lost.
  if (!ok)
    broke(op, "answered \"" + agent::quoted(r.value("error", std::string())) +
                  "\" to a well-formed work request (the IUT's refusal is a \"status\")");
  else if (field(r, op, "status", status, 255) && status == 0)
    ++queued_;
  return broken_.empty() ? static_cast<Status>(status) : Status::kInvalidArgument;
}

Status RemoteTarget::post_send(ConnId conn, const SendWr& wr) {
  json r;
  const bool ok = call({{"op", "post_send"},
                        {"conn", conn.v},
                        {"wr_id", wr.wr_id},
                        {"opcode", agent::kWrOpcodes[static_cast<size_t>(wr.op)]},
                        {"local_addr", wr.local_addr},
                        {"length", wr.length},
                        {"lkey", wr.lkey},
                        {"remote_addr", wr.remote_addr},
                        {"rkey", wr.rkey},
                        {"imm", wr.imm}},
                       r);
  return posted("post_send", ok, r);
}

Status RemoteTarget::post_recv(ConnId conn, const RecvWr& wr) {
  json r;
  json request = receive_request("post_recv", wr);
  request["conn"] = conn.v;
  return posted("post_recv", call(request, r), r);
}

bool RemoteTarget::shared_receives(uint32_t depth) {
  json r;
  return call({{"op", "shared_receives"}, {"depth", depth}}, r);
}

Status RemoteTarget::post_shared_recv(const RecvWr& wr) {
  json r;
  // An agent without it ("unknown op") refuses the receive; PLACE-6 asks
  // shared_receives first, and skips without it.
  if (!call_later_op(receive_request("post_shared_recv", wr), r)) return Status::kInvalidArgument;
  return posted("post_shared_recv", true, r);
}

bool RemoteTarget::poll_completion(Completion& out) {
  json r;
  if (!call({{"op", "poll_completion"}}, r)) return false;
  constexpr const char* kOp = "poll_completion";
  const auto it = r.find("completion");
  // null: none ready; no field at all is a broken reply, not "none".
  if (it == r.end())
    return broke(kOp, "a reply without \"completion\" (null when none is ready): " +
                          agent::quoted(last_line_));
  if (it->is_null()) return false;
  // Each completion answers one work request queued (the oldest done):
  // one more is a completion returned again, and the checks' loops that
  // drain the queue ran for ever against an agent that peeked for a pop.
  if (++completions_ > queued_)
    return broke(kOp, "more completions (" + std::to_string(completions_) +
                          ") than work requests queued (" + std::to_string(queued_) +
                          "): does the agent remove the completion it returns?");
  uint64_t conn = 0, status = 0, byte_len = 0, imm = 0;
  Completion c;
  const auto op = it->is_object() && it->contains("op") && (*it)["op"].is_string()
                      ? agent::completion_op((*it)["op"].get<std::string>())
                      : std::nullopt;
  if (!it->is_object() || !op || !it->contains("has_imm") || !(*it)["has_imm"].is_boolean())
    return broke(
        kOp, "a completion without a known \"op\" or \"has_imm\": " + agent::quoted(last_line_));
  if (!field(*it, kOp, "wr_id", c.wr_id) || !field(*it, kOp, "conn", conn, UINT32_MAX) ||
      !field(*it, kOp, "status", status, 255) ||
      !field(*it, kOp, "byte_len", byte_len, UINT32_MAX) ||
      !field(*it, kOp, "imm", imm, UINT32_MAX))
    return false;
  c.conn = ConnId{static_cast<uint32_t>(conn)};
  c.status = static_cast<Status>(status);
  c.op = *op;
  c.byte_len = static_cast<uint32_t>(byte_len);
  c.imm = static_cast<uint32_t>(imm);
  c.has_imm = (*it)["has_imm"].get<bool>();
  out = c;
  return true;
}

bool RemoteTarget::close(ConnId conn) {
  json r;
  return call_later_op({{"op", "close"}, {"conn", conn.v}}, r);
}

bool RemoteTarget::conn_error(ConnId conn, Status& out) {
  json r;
  uint64_t status = 0;
  if (!call_later_op({{"op", "conn_error"}, {"conn", conn.v}}, r) ||
      !field(r, "conn_error", "status", status, 255))
    return false;
  out = static_cast<Status>(status);
  return true;
}

bool RemoteTarget::listen(bool accept, uint32_t max_connections) {
  json r;
  return call({{"op", "listen"}, {"accept", accept}, {"max_connections", max_connections}}, r);
}

bool RemoteTarget::start_psn_at(uint32_t psn) {
  json r;
  return call({{"op", "initial_psn"}, {"psn", psn}}, r);
}

bool RemoteTarget::set_keepalive(uint64_t keepalive_ns, uint64_t peer_timeout_ns) {
  json r;
  return call(
      {{"op", "keepalive"}, {"keepalive_ns", keepalive_ns}, {"peer_timeout_ns", peer_timeout_ns}},
      r);
}

bool RemoteTarget::set_rnr_retry_limit(uint32_t limit) {
  json r;
  return call({{"op", "rnr_retry_limit"}, {"limit", limit}}, r);
}

bool RemoteTarget::endpoint_stats(EndpointStats& out) {
  json r;
  if (!call_later_op({{"op", "stats"}}, r)) return false;
  for (const agent::DropCounter& c : agent::kDropCounters)
    if (!field(r, "stats", std::string(c.name).c_str(), out.*c.field)) return false;
  return true;
}

bool RemoteTarget::path_stats(ConnId conn, size_t path, PathStats& out) {
  json r;
  if (!call({{"op", "path_stats"}, {"conn", conn.v}, {"slot", path}}, r)) return false;
  constexpr const char* kOp = "path_stats";
  uint64_t srtt = 0, cwnd = 0, alpha = 0;
  // The fields the checks read; the agent may send the rest of PathStats too.
  if (!field(r, kOp, "srtt_ns", srtt) || !field(r, kOp, "cwnd_bytes", cwnd, UINT32_MAX) ||
      !field(r, kOp, "alpha_permille", alpha, UINT32_MAX))
    return false;
  PathStats ps;
  ps.srtt_ns = srtt;
  ps.cwnd_bytes = static_cast<uint32_t>(cwnd);
  ps.alpha_permille = static_cast<uint32_t>(alpha);
  const auto opt = [&](const char* key, auto& v) {
    const auto f = r.find(key);
    if (f != r.end() && f->is_number_unsigned()) v = f->template get<std::decay_t<decltype(v)>>();
  };
  opt("entropy", ps.entropy);
  opt("packets_sent", ps.packets_sent);
  opt("packets_acked", ps.packets_acked);
  opt("retransmissions", ps.retransmissions);
  opt("ce_marks", ps.ce_marks);
  opt("losses", ps.losses);
  opt("timeouts", ps.timeouts);
  opt("min_rtt_ns", ps.min_rtt_ns);
  opt("inflight_bytes", ps.inflight_bytes);
  opt("loss_rate_permille", ps.loss_rate_permille);
  opt("trims", ps.trims);
  opt("retirements", ps.retirements);
  opt("explorations", ps.explorations);
  opt("probes_sent", ps.probes_sent);
  if (const auto f = r.find("state"); f != r.end() && f->is_string())
    ps.state = f->get<std::string>() == "probing" ? PathState::kProbing : PathState::kActive;
  out = ps;
  return true;
}

}  // namespace metaroce::conformance
