// metaroce-conform-agent: the reference agent of the conformance suite's
// agent protocol (conformance/README.md): the reference UDP driver as an
// implementation under test in its own process, its application side served
// to one tester connection at a time over TCP, a fresh endpoint each.
//   metaroce-conform-agent --listen HOST:PORT --iut HOST:PORT
//                          [--entropy-base N --entropy-count M] [--paths P]
// It prints "listening on HOST:PORT" once ready (port 0: the kernel's
// choice). Exit status 2 on bad options or when the endpoint cannot open.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/cli_parse.hpp"
#include "common/number_range.hpp"
#include "metaroce/conformance/agent_protocol.hpp"
#include "metaroce/conformance/reference_iut.hpp"

namespace mc = metaroce::conformance;
namespace agent = metaroce::conformance::agent;
using nlohmann::json;

namespace {

// The arguments of one request, read with the first error kept.
struct Args {
  const json& j;
  std::string error;
  uint64_t u(const char* key, uint64_t max = UINT64_MAX) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_number_unsigned() && it->get<uint64_t>() <= max)
      return it->get<uint64_t>();
    if (error.empty())
      error = std::string("\"") + key + "\": an unsigned integer at most " + std::to_string(max) +
              " is required";
    return 0;
  }
  bool b(const char* key) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_boolean()) return it->get<bool>();
    if (error.empty()) error = std::string("\"") + key + "\": a boolean is required";
    return false;
  }
  std::string s(const char* key) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_string()) return it->get<std::string>();
    if (error.empty()) error = std::string("\"") + key + "\": a string is required";
    return {};
  }
};

// The receive that post_recv and post_shared_recv name (a.error says what
// was missing or out of range).
metaroce::RecvWr recv_wr(Args& a) {
  metaroce::RecvWr wr;
  wr.wr_id = a.u("wr_id");
  wr.addr = a.u("addr");
  wr.length = static_cast<uint32_t>(a.u("length", UINT32_MAX));
  wr.lkey = static_cast<uint32_t>(a.u("lkey", UINT32_MAX));
  return wr;
}

json fail(const std::string& why) { return json{{"ok", false}, {"error", why}}; }
json status_reply(const metaroce::udp::Error& e) {
  const metaroce::Status s = e ? e.status : metaroce::Status::kOk;
  return json{{"ok", true},
              {"status", static_cast<unsigned>(s)},
              {"status_name", metaroce::status_name(s)}};
}

class Agent {
 public:
  // `without`: the ops answered "unknown op", as an agent written before
  // them answers (close, conn_error, listen, initial_psn, stats, keepalive,
  // shared_receives, post_shared_recv, rnr_retry_limit came later; the checks that need them
  // then skip), and the later fields such an agent leaves out: hello's
  // "udp_checksum", register_memory's "base" (read as if absent).
  Agent(std::string address, metaroce::udp::Options opts, std::set<std::string> without)
      : address_(std::move(address)), opts_(opts), without_(std::move(without)) {}

  // A fresh endpoint with the session's defaults (listen changes them for
  // one session).
  bool reset() { return reopen(opts_); }
  [[nodiscard]] const std::string& open_error() const { return open_error_; }
  [[nodiscard]] int ep_fd() const { return iut_ ? iut_->ep().fd() : -1; }
  [[nodiscard]] std::string local_address() const { return iut_ ? iut_->ep().local_address() : ""; }

  // progress() until nothing moves (a bounded number of rounds).
  void pump() {
    for (int i = 0; iut_ && i < 64 && iut_->ep().progress() != 0; ++i) {
    }
  }

  std::string handle(const std::string& line) {
    const json req = json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object())
      return fail("bad request: not a JSON object").dump();
    const auto op = req.find("op");
    if (op == req.end() || !op->is_string()) return fail("bad request: no \"op\" string").dump();
    pump();
    json reply = without_.count(op->get<std::string>()) != 0
                     ? fail("unknown op \"" + op->get<std::string>() + "\"")
                     : dispatch(op->get<std::string>(), req);
    pump();
    return reply.dump(-1, ' ', false, json::error_handler_t::replace);
  }

 private:
  json dispatch(const std::string& op, const json& req) {
    if (op == "hello") {
      if (!iut_ && !reset()) return fail("the IUT cannot open: " + open_error_);
      json reply{{"ok", true},
                 {"protocol", agent::kProtocolVersion},
                 {"name", "metaroce UDP driver on " + local_address() + " (reference agent)"},
                 {"paths", opts_.engine.num_paths}};
      if (without_.count("udp_checksum") == 0) reply["udp_checksum"] = true;  // Linux computes it
      return reply;
    }
    if (!iut_) return fail("no IUT: " + open_error_);
    metaroce::udp::UdpEndpoint& ep = iut_->ep();
    Args a{req, {}};
    if (op == "register_memory") return register_memory(a);
    if (op == "deregister_memory") {
      const auto lkey = static_cast<uint32_t>(a.u("lkey", UINT32_MAX));
      if (!a.error.empty()) return fail(a.error);
      const auto e = ep.deregister_memory(lkey);
      return e ? fail(e.message) : json{{"ok", true}};
    }
    if (op == "read_memory" || op == "write_memory") return memory(op, a);
    if (op == "connect_to_tester") {
      const std::string address = a.s("address");
      if (!a.error.empty()) return fail(a.error);
      metaroce::ConnId conn;
      const auto e = ep.connect_start(address, conn);
      return e ? fail(e.message) : json{{"ok", true}, {"conn", conn.v}};
    }
    if (op == "accepted") {
      iut_->collect_accepted();
      return json{{"ok", true}, {"conn", iut_->accepted().v}, {"count", iut_->accepted_count()}};
    }
    if (op == "post_send") return post_send(a);
    if (op == "post_recv") {
      const metaroce::ConnId conn{static_cast<uint32_t>(a.u("conn", UINT32_MAX))};
      const metaroce::RecvWr wr = recv_wr(a);
      if (!a.error.empty()) return fail(a.error);
      return status_reply(ep.post_recv(conn, wr));
    }
    if (op == "post_shared_recv") {
      const metaroce::RecvWr wr = recv_wr(a);
      if (!a.error.empty()) return fail(a.error);
      return status_reply(ep.post_shared_recv(wr));
    }
    if (op == "shared_receives") {
      const auto depth = static_cast<uint32_t>(a.u("depth", UINT32_MAX));
      if (!a.error.empty()) return fail(a.error);
      const metaroce::udp::Options o = mc::ReferenceIut::sharing(opts_, depth);
      // Checked first: an endpoint that cannot open leaves the session no IUT.
      if (const std::string bad = metaroce::config_error(o.engine); !bad.empty()) return fail(bad);
      if (!reopen(o)) return fail("the IUT cannot reopen: " + open_error_);
      return json{{"ok", true}};
    }
    if (op == "close" || op == "conn_error") {
      const metaroce::ConnId conn{static_cast<uint32_t>(a.u("conn", UINT32_MAX))};
      if (!a.error.empty()) return fail(a.error);
      if (ep.state(conn) == metaroce::udp::ConnState::kUnknown)
        return fail("no connection " + std::to_string(conn.v));
      if (op == "conn_error") return status_reply(ep.conn_error(conn));
      ep.close(conn);
      return json{{"ok", true}};
    }
    if (op == "listen") {
      const bool accept = a.b("accept");
      const auto max = static_cast<uint32_t>(a.u("max_connections", UINT32_MAX));
      if (!a.error.empty()) return fail(a.error);
      if (!reopen(mc::ReferenceIut::listening(opts_, accept, max)))
        return fail("the IUT cannot reopen: " + open_error_);
      return json{{"ok", true}};
    }
    if (op == "initial_psn") {
      const auto psn = static_cast<uint32_t>(a.u("psn", UINT32_MAX));
      if (!a.error.empty()) return fail(a.error);
      if (!reopen(mc::ReferenceIut::starting_at(opts_, psn)))
        return fail("the IUT cannot reopen: " + open_error_);
      return json{{"ok", true}};
    }
    if (op == "keepalive") {
      const uint64_t keepalive = a.u("keepalive_ns");
      const uint64_t peer_timeout = a.u("peer_timeout_ns");
      if (!a.error.empty()) return fail(a.error);
      const metaroce::udp::Options o =
          mc::ReferenceIut::keeping_alive(opts_, keepalive, peer_timeout);
      // Checked first: an endpoint that cannot open leaves the session no IUT.
      if (const std::string bad = metaroce::config_error(o.engine); !bad.empty()) return fail(bad);
      if (!reopen(o)) return fail("the IUT cannot reopen: " + open_error_);
      return json{{"ok", true}};
    }
    if (op == "rnr_retry_limit") {
      const auto limit = static_cast<uint32_t>(a.u("limit", UINT32_MAX));
      if (!a.error.empty()) return fail(a.error);
      const metaroce::udp::Options o = mc::ReferenceIut::rnr_limited(opts_, limit);
      // Checked first: an endpoint that cannot open leaves the session no IUT.
      if (const std::string bad = metaroce::config_error(o.engine); !bad.empty()) return fail(bad);
      if (!reopen(o)) return fail("the IUT cannot reopen: " + open_error_);
      return json{{"ok", true}};
    }
    if (op == "stats") {
      const metaroce::EndpointStats s = ep.endpoint_stats();
      json reply{{"ok", true}};
      for (const agent::DropCounter& c : agent::kDropCounters)
        reply[std::string(c.name)] = s.*c.field;
      return reply;
    }
    if (op == "poll_completion") return poll_completion();
    if (op == "path_stats") return path_stats(a);
    return fail("unknown op \"" + op + "\"");
  }

  // A fresh endpoint with `o` (closing the old one at once): no
  // connections, no regions, nothing accepted. False and open_error_ when
  // it cannot open.
  bool reopen(const metaroce::udp::Options& o) {
    open_error_.clear();
    iut_ = mc::ReferenceIut::reopen(std::move(iut_), address_, o, open_error_);
    return iut_ != nullptr;
  }

  json register_memory(Args& a) {
    const uint64_t length = a.u("length", agent::kMaxRegion);
    const auto access = static_cast<uint32_t>(a.u("access", UINT32_MAX));
    // Optional (MR-4): the address the region's first byte is named by.
    const bool at_base = a.j.contains("base") && without_.count("base") == 0;
    const uint64_t base = at_base ? a.u("base") : 0;
    if (!a.error.empty()) return fail(a.error);
    metaroce::MemoryRegion mr;
    if (const auto e = at_base ? iut_->register_memory_at(length, base, access, mr)
                               : iut_->register_memory(length, access, mr))
      return fail(e.message.empty() ? std::string(metaroce::status_text(e.status)) : e.message);
    return json{
        {"ok", true}, {"addr", mr.addr}, {"length", length}, {"rkey", mr.rkey}, {"lkey", mr.lkey}};
  }

  json memory(const std::string& op, Args& a) {
    const auto lkey = static_cast<uint32_t>(a.u("lkey", UINT32_MAX));
    const uint64_t offset = a.u("offset");
    if (op == "read_memory") {
      const uint64_t length = a.u("length");
      if (!a.error.empty()) return fail(a.error);
      if (!iut_->memory().holds(lkey, offset, length))
        return fail("no region with lkey " + std::to_string(lkey) + " holds that range");
      const std::vector<uint8_t> bytes = iut_->memory().read(lkey, offset, length);
      return json{{"ok", true}, {"hex", agent::to_hex(bytes.data(), bytes.size())}};
    }
    const std::string hex = a.s("hex");
    if (!a.error.empty()) return fail(a.error);
    const auto bytes = agent::from_hex(hex);
    // from_hex refuses an odd length and a non-hex digit alike: the text
    // once asked an agent sent "zz" for an even number of digits.
    if (!bytes) return fail("\"hex\": two hex digits a byte (0-9, a-f, A-F) are required");
    if (!iut_->memory().holds(lkey, offset, bytes->size()))
      return fail("no region with lkey " + std::to_string(lkey) + " holds that range");
    iut_->memory().write(lkey, offset, *bytes);
    return json{{"ok", true}};
  }

  json post_send(Args& a) {
    const metaroce::ConnId conn{static_cast<uint32_t>(a.u("conn", UINT32_MAX))};
    const std::string opcode = a.s("opcode");
    metaroce::SendWr wr;
    wr.wr_id = a.u("wr_id");
    wr.local_addr = a.u("local_addr");
    wr.length = static_cast<uint32_t>(a.u("length", UINT32_MAX));
    wr.lkey = static_cast<uint32_t>(a.u("lkey", UINT32_MAX));
    wr.remote_addr = a.u("remote_addr");
    wr.rkey = a.u("rkey");
    wr.imm = static_cast<uint32_t>(a.u("imm", UINT32_MAX));
    if (!a.error.empty()) return fail(a.error);
    const auto op = agent::wr_opcode(opcode);
    if (!op) return fail("\"opcode\": unknown opcode \"" + opcode + "\"");
    wr.op = *op;
    return status_reply(iut_->ep().post_send(conn, wr));
  }

  json poll_completion() {
    metaroce::Completion c;
    if (!iut_->ep().poll_completion(c)) return json{{"ok", true}, {"completion", nullptr}};
    return json{{"ok", true},
                {"completion",
                 {{"wr_id", c.wr_id},
                  {"conn", c.conn.v},
                  {"status", static_cast<unsigned>(c.status)},
                  {"status_name", metaroce::status_name(c.status)},
                  {"op", agent::kCompletionOps[static_cast<size_t>(c.op)]},
                  {"byte_len", c.byte_len},
                  {"imm", c.imm},
                  {"has_imm", c.has_imm}}}};
  }

  json path_stats(Args& a) {
    const metaroce::ConnId conn{static_cast<uint32_t>(a.u("conn", UINT32_MAX))};
    const uint64_t slot = a.u("slot");
    if (!a.error.empty()) return fail(a.error);
    metaroce::PathStats p;
    if (!iut_->path_stats(conn, slot, p))
      return fail("connection " + std::to_string(conn.v) + " has no path slot " +
                  std::to_string(slot) + " (" + std::to_string(iut_->ep().path_stats(conn).size()) +
                  " slots)");
    return json{{"ok", true},
                {"entropy", p.entropy},
                {"state", p.state == metaroce::PathState::kActive ? "active" : "probing"},
                {"packets_sent", p.packets_sent},
                {"bytes_sent", p.bytes_sent},
                {"retransmissions", p.retransmissions},
                {"packets_acked", p.packets_acked},
                {"ce_marks", p.ce_marks},
                {"losses", p.losses},
                {"trims", p.trims},
                {"timeouts", p.timeouts},
                {"retirements", p.retirements},
                {"explorations", p.explorations},
                {"probes_sent", p.probes_sent},
                {"srtt_ns", p.srtt_ns},
                {"min_rtt_ns", p.min_rtt_ns},
                {"cwnd_bytes", p.cwnd_bytes},
                {"inflight_bytes", p.inflight_bytes},
                {"alpha_permille", p.alpha_permille},
                {"loss_rate_permille", p.loss_rate_permille}};
  }

  std::string address_;  // where the IUT listens (--iut)
  metaroce::udp::Options opts_;
  std::set<std::string> without_;
  std::unique_ptr<mc::ReferenceIut> iut_;
  std::string open_error_;
};

int accept_one(int listen_fd) {
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    const int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

// Serves one tester until it closes the connection (or breaks the protocol
// past repair: a line over agent::kMaxLine). Others are told "busy".
void serve(Agent& ag, int listen_fd, int fd) {
  agent::LineChannel ch(fd);
  std::string why, line;
  for (;;) {
    pollfd p[3] = {{ch.fd(), POLLIN, 0}, {listen_fd, POLLIN, 0}, {ag.ep_fd(), POLLIN, 0}};
    if (::poll(p, ag.ep_fd() >= 0 ? 3 : 2, -1) < 0) continue;
    if (p[2].revents != 0) ag.pump();
    // This tester first: its end of stream may come with the next one's
    // connection, which then is not busy.
    if (p[0].revents != 0) {
      const bool open = ch.fill(why);
      bool too_long = false;
      while (ch.next_line(line, too_long))
        if (!ch.write_line(ag.handle(line), why)) return;
      if (too_long) {
        (void)ch.write_line(
            fail("bad request: a line over " + std::to_string(agent::kMaxLine) + " bytes; closing")
                .dump(),
            why);
        return;
      }
      if (!open) return;
    }
    if (p[1].revents != 0) {
      agent::LineChannel other(accept_one(listen_fd));
      if (other.fd() >= 0)
        (void)other.write_line(fail("busy: the agent serves another tester").dump(), why);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "metaroce-conform-agent: the reference UDP driver behind the conformance agent "
      "protocol"};
  std::string listen, iut;
  uint16_t entropy_base = 0, entropy_count = 16;
  uint16_t paths = 4;
  app.add_option("--listen", listen, "HOST:PORT the tester connects to (TCP; port 0: any)")
      ->required();
  app.add_option("--iut", iut, "HOST:PORT the implementation under test receives on (UDP)")
      ->required();
  app.add_option("--entropy-base", entropy_base,
                 "first UDP source port of the IUT (default: the --iut port + 1)");
  // 0 once meant the default, so a mistyped count ran with 16 ports unasked.
  app.add_option("--entropy-count", entropy_count,
                 "source ports in the block, at least --paths (default 16)")
      ->check(metaroce::tools::number_in_range(1, 65535));
  app.add_option("--paths", paths, "paths per connection (hello tells the tester)")
      ->check(metaroce::tools::number_in_range(1, int{metaroce::kMaxPaths}));
  std::vector<std::string> without;
  app.add_option("--without", without,
                 "ops to answer \"unknown op\", as an agent written before them would, and "
                 "fields to leave out (hello's udp_checksum) or ignore (register_memory's base) "
                 "(for tests of the tester)")
      ->delimiter(',')
      ->check(CLI::IsMember({"close", "conn_error", "listen", "initial_psn", "stats", "keepalive",
                             "shared_receives", "post_shared_recv", "rnr_retry_limit", "base",
                             "udp_checksum"}));
  if (const auto rc = metaroce::tools::parse_command_line(app, argc, argv)) return *rc;
  if (entropy_count < paths) {
    std::fprintf(stderr,
                 "metaroce-conform-agent: --entropy-count %u must be at least --paths (%u): each "
                 "path needs a source port of its own\n",
                 unsigned{entropy_count}, unsigned{paths});
    return 2;
  }

  Agent ag(iut, mc::ReferenceIut::options(entropy_base, entropy_count, static_cast<uint8_t>(paths)),
           std::set<std::string>(without.begin(), without.end()));
  if (!ag.reset()) {
    std::fprintf(stderr, "metaroce-conform-agent: cannot open the IUT on %s: %s\n", iut.c_str(),
                 ag.open_error().c_str());
    return 2;
  }
  std::string bound, why;
  const int listen_fd = agent::tcp_listen(listen, bound, why);
  if (listen_fd < 0) {
    std::fprintf(stderr, "metaroce-conform-agent: %s\n", why.c_str());
    return 2;
  }
  std::printf("metaroce-conform-agent: listening on %s, IUT %s\n", bound.c_str(),
              ag.local_address().c_str());
  std::fflush(stdout);
  for (;;) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {ag.ep_fd(), POLLIN, 0}};
    if (::poll(p, ag.ep_fd() >= 0 ? 2 : 1, -1) < 0) continue;
    if (p[1].revents != 0) ag.pump();
    if (p[0].revents == 0) continue;
    const int fd = accept_one(listen_fd);
    if (fd < 0) continue;
    serve(ag, listen_fd, fd);
    // The next tester finds a fresh IUT; hello reports a failure to open.
    if (!ag.reset())
      std::fprintf(stderr, "metaroce-conform-agent: cannot reopen the IUT: %s\n",
                   ag.open_error().c_str());
  }
}
