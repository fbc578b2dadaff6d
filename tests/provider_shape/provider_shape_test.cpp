// The UDP driver driven exactly as the planned libfabric RDM provider would
// drive it for Open MPI's mtl/ofi (docs/design/libfabric-provider.md): one
// UdpEndpoint per rank, all in one process; an address vector of the ranks'
// local_address() strings; connect_start on first send, posting at once;
// every incoming message taken from the shared receive queue into provider
// bounce buffers; tags carried in a provider header at the front of each
// SEND payload and matched here, in the provider, with an unexpected-message
// queue; the sender's rank carried as remote CQ data in SEND_IMM's immediate;
// large messages by rendezvous (the receiver READs the sender's registered
// buffer, then SENDs a FIN); a HELLO as the first SEND on every connection
// the provider opens, checked by the receiver before it takes that
// connection's messages (gap G4(a)). Every byte is checked, and every
// completion is accounted for: a wrong byte, a message matched out of order,
// a lost or doubled completion, a message before its connection's HELLO, or
// an error status fails the test.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "metaroce/udp.hpp"

namespace metaroce::udp {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kAnySource = UINT64_MAX;  // FI_ADDR_UNSPEC

// The provider's header at the front of every SEND payload. The engine's
// 32-bit immediate holds the remote CQ data (cq_data_size 4), so the 64-bit
// tag travels here.
enum class Op : uint8_t { kEager = 1, kRts = 2, kFin = 3, kHello = 4 };
struct Hdr {
  uint8_t op = 0;
  uint8_t pad[7] = {};
  uint64_t tag = 0;
};
struct RtsBody {  // after Hdr: what the receiver READs, and the token its FIN names
  uint64_t len = 0;
  uint64_t addr = 0;
  uint64_t rkey = 0;
  uint64_t token = 0;
};
// After Hdr in a HELLO: what a receiver must share with the sender before
// it takes the sender's eager messages, which a bounce slot too small for
// them would turn into kRemoteLengthError and a failed connection (PLACE-3).
constexpr uint32_t kProviderVersion = 1;
constexpr uint32_t kFeatureReadRendezvous = 1;  // an RTS names memory for the receiver to READ
constexpr uint32_t kFeatures = kFeatureReadRendezvous;
struct HelloBody {
  uint32_t version = 0;
  uint32_t eager_max = 0;
  uint32_t slot_size = 0;
  uint32_t features = 0;
  char name[64] = {};  // the sender's fi_getname (local_address()), NUL-padded
};
constexpr size_t kEagerMax = 8192;  // payload bytes; larger goes by rendezvous (the default)
// The least eager limit a rank may have, and the most a rank sends eager to
// a peer whose HELLO it has not heard yet: a first message above the peer's
// limit would fail the connection kRemoteLengthError, and as messages of one
// connection arrive in any order (multipath), it may do so before the HELLO
// posted ahead of it arrives, which the receiver then never completes (17
// of 20 runs of AFirstMessageAboveThePeersLimit... sent eager).
constexpr size_t kEagerFloor = 8192;
constexpr size_t slot_size(size_t eager_max) { return sizeof(Hdr) + sizeof(RtsBody) + eager_max; }
// A HELLO fits any peer's slot, whatever its eager limit, from 64 bytes up.
static_assert(sizeof(Hdr) + sizeof(HelloBody) <= slot_size(64));

// Every byte of a message depends on sender, receiver, message number and
// offset, so a misplaced, shifted or swapped message shows.
uint8_t pattern(uint32_t src, uint32_t dst, uint32_t k, uint64_t off) {
  uint64_t x = (uint64_t{src} << 48) ^ (uint64_t{dst} << 40) ^ (uint64_t{k} << 32) ^ off;
  x *= 0x9e3779b97f4a7c15ull;
  return static_cast<uint8_t>(x >> 56);
}

// Open MPI's mtl/ofi tag layout with FI_REMOTE_CQ_DATA: the communicator's
// context id above the MPI tag; the source rank travels as CQ data.
uint64_t make_tag(uint32_t ctx, uint32_t mpi_tag) { return (uint64_t{ctx} << 32) | mpi_tag; }

struct Recv {  // a posted fi_trecv
  uint64_t src = kAnySource;
  uint64_t tag = 0, ignore = 0;
  uint8_t* buf = nullptr;
  size_t len = 0;
  // Filled in at completion (what fi_cq_readfrom would report).
  bool done = false;
  uint64_t got_src = kAnySource, got_tag = 0, got_len = 0;
  uint32_t cq_data = 0;
  bool has_cq_data = false;
};

struct Unexpected {  // a message that found no posted receive
  uint64_t src = 0, tag = 0;
  uint32_t cq_data = 0;
  bool has_cq_data = false;
  Op op = Op::kEager;
  std::vector<uint8_t> data;  // eager payload, copied out of the bounce buffer
  RtsBody rts;
};

// One rank's provider state: what fi_endpoint, fi_av and the CQ hold.
struct Rank {
  uint32_t me = 0;
  std::unique_ptr<UdpEndpoint> ep;
  std::vector<std::string>* av = nullptr;  // fi_addr_t -> address
  size_t eager_max = kEagerMax;
  size_t slot = slot_size(kEagerMax);  // a bounce buffer's bytes
  // A first contact lasts this long before its messages fail: the job's
  // startup timeout, not the engine's 8 x 10 ms (gap G2).
  std::chrono::milliseconds connect_budget = 20s;
  bool hello = true;  // sends a HELLO first on each connection, and requires one
  // What this rank has heard on each connection peers opened to it.
  struct Heard {
    bool hello = false;
    std::string refused;  // why its HELLO was refused; its messages are dropped
  };
  std::map<uint32_t, Heard> heard;
  // Peers whose HELLO disagreed with this rank, and why: the error the
  // provider reports (FI_EPROTO) for sends to them and messages from them.
  std::map<uint64_t, std::string> incompatible;
  std::set<uint64_t> heard_from;  // peers whose HELLO agreed with this rank
  // Sends failed by the provider for an incompatible peer (what
  // fi_cq_readerr would report, FI_EPROTO with the HELLO's words).
  std::vector<std::string> send_errors;
  size_t hellos = 0, dropped = 0;
  std::vector<Status> failed;           // the status of every failed completion
  std::map<uint64_t, ConnId> tx;        // fi_addr_t -> connection opened on first use
  std::map<uint32_t, uint64_t> src_of;  // any connection -> fi_addr_t (FI_SOURCE)
  // Bounce buffers, all posted to the shared receive queue.
  std::vector<uint8_t> bounce;
  MemoryRegion bounce_mr;
  size_t bounce_slots = 0;
  // Staging for outgoing headers and eager payloads (fi_tinject copies).
  std::vector<uint8_t> staging;
  MemoryRegion staging_mr;
  size_t staging_next = 0;
  std::deque<Recv*> posted;
  std::deque<Unexpected> unexpected;
  size_t unexpected_seen = 0;
  // Operations in flight, by wr_id.
  struct Pending {
    enum Kind { kEagerSend, kRtsSend, kFinSend, kRead, kHelloSend } kind = kEagerSend;
    Recv* recv = nullptr;    // kRead: the receive it fills
    uint64_t token = 0;      // kRead: the sender's token; kRtsSend: its own
    uint64_t src = 0;        // kRead: the sender
    uint32_t read_lkey = 0;  // kRead: the user buffer's registration
    bool completed = false;
  };
  std::map<uint64_t, Pending> pending;
  uint64_t next_wr = 1ull << 32;  // below: bounce slot numbers
  // Rendezvous sends waiting for their FIN, by token: the region to release.
  struct RtsWaiting {
    uint32_t lkey = 0;
    uint64_t dst = 0;
  };
  std::map<uint64_t, RtsWaiting> rts_waiting;
  size_t sends_done = 0, rndv_sends_done = 0;
  std::vector<std::string> failures;

  void fail(const std::string& what) {
    failures.push_back("rank " + std::to_string(me) + ": " + what);
  }

  // First use of a peer: connect_start, and post at once (CONN-6, CONN-11),
  // the HELLO first.
  ConnId conn_to(uint64_t dst) {
    if (auto it = tx.find(dst); it != tx.end()) return it->second;
    ConnId c;
    const Error e = ep->connect_start((*av)[dst], c, connect_budget);
    if (e) fail("connect_start: " + e.message);
    tx[dst] = c;
    src_of[c.v] = dst;
    if (hello) send_hello(dst);
    return c;
  }

  // A provider control message (a FIN, a HELLO): header and body, staged.
  template <typename Body>
  void send_control(uint64_t dst, Op op, const Body& body, Pending::Kind kind) {
    SendWr wr;
    wr.wr_id = next_wr++;
    wr.op = WrOpcode::kSend;
    wr.lkey = staging_mr.lkey;
    uint8_t* s = stage(sizeof(Hdr) + sizeof body, wr.local_addr);
    Hdr h;
    h.op = static_cast<uint8_t>(op);
    std::memcpy(s, &h, sizeof h);
    std::memcpy(s + sizeof h, &body, sizeof body);
    wr.length = sizeof(Hdr) + sizeof body;
    post(dst, wr, {kind});
  }

  void send_hello(uint64_t dst) {
    HelloBody b{kProviderVersion, static_cast<uint32_t>(eager_max), static_cast<uint32_t>(slot),
                kFeatures};
    const std::string name = ep->local_address();
    std::memcpy(b.name, name.data(), std::min(name.size(), sizeof b.name - 1));
    send_control(dst, Op::kHello, b, Pending::kHelloSend);
  }

  // A peer's HELLO, the first message of the connection it opened: anything
  // this rank does not share refuses the peer. Either way this rank's own
  // HELLO answers it (on the connection it opens to the peer, if it had
  // none), as EFA's handshake answers a first packet: the peer learns that
  // it may send eager up to the limit, or why it is refused.
  void on_hello(Heard& from, uint64_t src, const uint8_t* p, size_t len) {
    from.hello = true;
    ++hellos;
    const std::string peer = "rank " + std::to_string(src) + " (" + (*av)[src] + ")";
    std::string why;
    HelloBody b;
    if (len != sizeof(Hdr) + sizeof b) {
      why = peer + " sent a HELLO of " + std::to_string(len) + " bytes, not " +
            std::to_string(sizeof(Hdr) + sizeof b);
    } else {
      std::memcpy(&b, p + sizeof(Hdr), sizeof b);
      b.name[sizeof b.name - 1] = 0;
      if (b.version != kProviderVersion) {
        why = peer + " speaks provider protocol version " + std::to_string(b.version) +
              ", this rank " + std::to_string(kProviderVersion);
      } else if (b.eager_max != eager_max || b.slot_size != slot) {
        why = peer + " sends eager messages of up to " + std::to_string(b.eager_max) +
              " bytes (bounce slots of " + std::to_string(b.slot_size) + "), this rank takes " +
              std::to_string(eager_max) + " (slots of " + std::to_string(slot) +
              "): the ranks were built or configured with different eager limits";
      } else if (b.features != kFeatures) {
        why = peer + " has feature bits " + std::to_string(b.features) + ", this rank " +
              std::to_string(kFeatures);
      } else if ((*av)[src] != b.name) {
        why = peer + " calls itself \"" + std::string(b.name) + "\"";
      }
    }
    if (why.empty()) {
      heard_from.insert(src);
    } else {
      from.refused = why;
      incompatible.emplace(src, "HELLO: " + why);
      // Rendezvous sends to it wait for a FIN that will not come.
      for (auto it = rts_waiting.begin(); it != rts_waiting.end();) {
        if (it->second.dst != src) {
          ++it;
          continue;
        }
        const Error e = ep->deregister_memory(it->second.lkey);
        if (e) fail("deregister: " + e.message);
        send_errors.push_back("rendezvous send " + std::to_string(it->first) + ": " +
                              incompatible.at(src));
        it = rts_waiting.erase(it);
      }
    }
    (void)conn_to(src);
  }

  uint8_t* stage(size_t n, uint64_t& addr) {
    if (staging_next + n > staging.size()) {
      fail("staging area exhausted");
      staging_next = 0;
    }
    uint8_t* p = staging.data() + staging_next;
    addr = staging_mr.addr + staging_next;
    staging_next += (n + 63) & ~size_t{63};
    return p;
  }

  void post(uint64_t dst, const SendWr& wr, Pending p) {
    pending[wr.wr_id] = p;
    const Error e = ep->post_send(conn_to(dst), wr);
    if (e) fail("post_send: " + e.message);
  }

  // fi_tsenddata: eager up to eager_max (kEagerFloor until the peer's HELLO
  // is heard), rendezvous above. False, posting nothing, to a peer found
  // incompatible (the error is incompatible[dst]).
  bool tsend(uint64_t dst, uint64_t tag, const uint8_t* data, size_t len, uint32_t cq_data) {
    if (incompatible.count(dst) != 0) return false;
    const bool known = !hello || heard_from.count(dst) != 0;
    SendWr wr;
    wr.wr_id = next_wr++;
    wr.op = WrOpcode::kSendImm;
    wr.imm = cq_data;
    wr.lkey = staging_mr.lkey;
    if (len <= (known ? eager_max : std::min(eager_max, kEagerFloor))) {
      uint8_t* p = stage(sizeof(Hdr) + len, wr.local_addr);
      Hdr h;
      h.op = static_cast<uint8_t>(Op::kEager);
      h.tag = tag;
      std::memcpy(p, &h, sizeof h);
      if (len != 0) std::memcpy(p + sizeof h, data, len);
      wr.length = static_cast<uint32_t>(sizeof(Hdr) + len);
      post(dst, wr, {Pending::kEagerSend});
      return true;
    }
    // The user's buffer is registered for the peer's READ (Open MPI's mtl
    // passes unregistered memory; the provider registers it, FI_MR_LOCAL off).
    MemoryRegion mr;
    const Error e = ep->register_memory(const_cast<uint8_t*>(data), len, kAccessRemoteRead, mr);
    if (e) fail("register for rendezvous: " + e.message);
    uint8_t* p = stage(sizeof(Hdr) + sizeof(RtsBody), wr.local_addr);
    Hdr h;
    h.op = static_cast<uint8_t>(Op::kRts);
    h.tag = tag;
    RtsBody b{len, mr.addr, mr.rkey, wr.wr_id};
    std::memcpy(p, &h, sizeof h);
    std::memcpy(p + sizeof h, &b, sizeof b);
    wr.length = sizeof(Hdr) + sizeof(RtsBody);
    rts_waiting[wr.wr_id] = {mr.lkey, dst};
    post(dst, wr, {Pending::kRtsSend, nullptr, wr.wr_id});
    return true;
  }

  static bool matches(const Recv& r, uint64_t src, uint64_t tag) {
    return (r.src == kAnySource || r.src == src) && ((r.tag ^ tag) & ~r.ignore) == 0;
  }

  void start_read(Recv* r, uint64_t src, const RtsBody& b) {
    if (b.len > r->len) {
      fail("rendezvous message longer than its receive (FI_ETRUNC)");
      return;
    }
    MemoryRegion mr;
    const Error e = ep->register_memory(r->buf, b.len, kAccessLocalWrite, mr);
    if (e) fail("register READ target: " + e.message);
    SendWr wr;
    wr.wr_id = next_wr++;
    wr.op = WrOpcode::kRead;
    wr.local_addr = mr.addr;
    wr.length = static_cast<uint32_t>(b.len);
    wr.lkey = mr.lkey;
    wr.remote_addr = b.addr;
    wr.rkey = b.rkey;
    Pending p{Pending::kRead, r, b.token, src, mr.lkey};
    post(src, wr, p);
  }

  void deliver(Recv* r, const Unexpected& m) {
    r->got_src = m.src;
    r->got_tag = m.tag;
    r->cq_data = m.cq_data;
    r->has_cq_data = m.has_cq_data;
    if (m.op == Op::kRts) {
      r->got_len = m.rts.len;
      start_read(r, m.src, m.rts);
      return;
    }
    if (m.data.size() > r->len) fail("eager message longer than its receive (FI_ETRUNC)");
    // An empty vector's data() may be null, which memcpy must not get even for 0 bytes.
    if (!m.data.empty()) std::memcpy(r->buf, m.data.data(), std::min(m.data.size(), r->len));
    r->got_len = m.data.size();
    r->done = true;
  }

  // fi_trecv: the unexpected queue first, in arrival order.
  void trecv(Recv* r) {
    for (auto it = unexpected.begin(); it != unexpected.end(); ++it) {
      if (!matches(*r, it->src, it->tag)) continue;
      const Unexpected m = std::move(*it);
      unexpected.erase(it);
      deliver(r, m);
      return;
    }
    posted.push_back(r);
  }

  // Which rank a connection's message came from: our own connection (a FIN
  // or READ answer comes back on it), or one a peer opened, known by its
  // peer address in the address vector.
  std::optional<uint64_t> source(ConnId c) {
    if (auto it = src_of.find(c.v); it != src_of.end()) return it->second;
    const std::string peer = ep->peer_address(c);
    for (uint64_t i = 0; i < av->size(); ++i)
      if ((*av)[i] == peer) {
        src_of[c.v] = i;
        return i;
      }
    fail("a message on connection " + std::to_string(c.v) + " from \"" + peer +
         "\", which is in no address vector entry");
    return std::nullopt;
  }

  void repost(uint64_t n) {
    const Error e = ep->post_shared_recv(
        {n, bounce_mr.addr + n * slot, static_cast<uint32_t>(slot), bounce_mr.lkey});
    if (e) fail("post_shared_recv: " + e.message);
  }

  void on_recv(const Completion& c) {
    const uint64_t n = c.wr_id;
    const uint8_t* p = bounce.data() + n * slot;
    const auto src = source(c.conn);
    Hdr h;
    if (c.byte_len < sizeof h) {
      fail("a message shorter than the provider header: " + std::to_string(c.byte_len));
      repost(n);
      return;
    }
    std::memcpy(&h, p, sizeof h);
    if (!src) {
      repost(n);
      return;
    }
    if (hello) {
      Heard& from = heard[c.conn.v];
      if (h.op == static_cast<uint8_t>(Op::kHello)) {
        if (from.hello) fail("a second HELLO from rank " + std::to_string(*src));
        on_hello(from, *src, p, c.byte_len);
        repost(n);
        return;
      }
      // COMP-3: the receives of a connection complete in its order, and the
      // HELLO was the first work posted on it.
      if (!from.hello)
        fail("provider op " + std::to_string(h.op) + " from rank " + std::to_string(*src) +
             " before its connection's HELLO");
      if (!from.refused.empty()) {
        ++dropped;
        repost(n);
        return;
      }
    }
    if (h.op == static_cast<uint8_t>(Op::kFin)) {
      RtsBody b;
      std::memcpy(&b, p + sizeof h, sizeof b);
      auto it = rts_waiting.find(b.token);
      if (it == rts_waiting.end()) {
        fail("FIN for an unknown rendezvous " + std::to_string(b.token));
      } else {
        const Error e = ep->deregister_memory(it->second.lkey);
        if (e) fail("deregister: " + e.message);
        rts_waiting.erase(it);
        ++rndv_sends_done;
      }
      repost(n);
      return;
    }
    Unexpected m;
    m.src = *src;
    m.tag = h.tag;
    m.cq_data = c.imm;
    m.has_cq_data = c.has_imm;
    m.op = static_cast<Op>(h.op);
    if (m.op == Op::kRts) {
      std::memcpy(&m.rts, p + sizeof h, sizeof m.rts);
    } else if (m.op == Op::kEager) {
      m.data.assign(p + sizeof h, p + c.byte_len);
    } else {
      fail("unknown provider op " + std::to_string(h.op));
    }
    repost(n);  // the bytes are copied out: the slot goes back at once
    for (auto it = posted.begin(); it != posted.end(); ++it) {
      if (!matches(**it, m.src, m.tag)) continue;
      Recv* r = *it;
      posted.erase(it);
      deliver(r, m);
      return;
    }
    ++unexpected_seen;
    unexpected.push_back(std::move(m));
  }

  void on_completion(const Completion& c) {
    if (c.status != Status::kOk) {
      failed.push_back(c.status);
      fail("completion wr_id " + std::to_string(c.wr_id) + ": " + ep->completion_error(c).message);
      return;
    }
    if (c.op == CompletionOp::kRecv) {
      if (c.wr_id >= bounce_slots) fail("a receive completion naming no bounce slot");
      on_recv(c);
      return;
    }
    auto it = pending.find(c.wr_id);
    if (it == pending.end() || it->second.completed) {
      fail("a completion for no outstanding operation, wr_id " + std::to_string(c.wr_id));
      return;
    }
    Pending& p = it->second;
    p.completed = true;
    switch (p.kind) {
      case Pending::kEagerSend: ++sends_done; break;
      case Pending::kRtsSend: break;  // the send completes at FIN
      case Pending::kFinSend: break;
      case Pending::kHelloSend: break;
      case Pending::kRead: {
        if (c.op != CompletionOp::kRead) fail("a READ completed as another op");
        const Error e = ep->deregister_memory(p.read_lkey);
        if (e) fail("deregister: " + e.message);
        p.recv->done = true;
        RtsBody b;
        b.token = p.token;
        send_control(p.src, Op::kFin, b, Pending::kFinSend);
        break;
      }
    }
  }

  // What fi_cq_read does with FI_PROGRESS_MANUAL: a progress round, then
  // the engine's completions, turned into the provider's.
  void progress() {
    ep->progress();
    ConnId accepted;
    while (ep->try_accept(accepted)) (void)source(accepted);
    Completion c;
    while (ep->poll_completion(c)) on_completion(c);
  }

  size_t outstanding() const {
    size_t n = 0;
    for (const auto& [id, p] : pending) n += p.completed ? 0 : 1;
    return n;
  }
};

Options provider_options(uint32_t bounce_slots) {
  Options o;
  o.entropy_count = 4;  // ports are a resource when a host runs many ranks
  o.engine.num_paths = 4;
  o.engine.shared_rq_depth = bounce_slots;
  // connect_attempts stays CONN-2's 8 x 10 ms: a first contact lasts
  // Rank::connect_budget instead (connect_start's budget), and a close
  // towards an absent peer stays short.
  o.linger = 50ms;
  return o;
}

struct World {
  std::vector<std::string> av;
  std::vector<std::unique_ptr<Rank>> ranks;

  // Rank i's eager limit is eager_max[i], kEagerMax past its end.
  explicit World(uint32_t n, uint32_t bounce_slots = 32, size_t staging_bytes = 4 << 20,
                 const std::vector<size_t>& eager_max = {}) {
    for (uint32_t i = 0; i < n; ++i) {
      auto r = std::make_unique<Rank>();
      r->me = i;
      r->eager_max = i < eager_max.size() ? eager_max[i] : kEagerMax;
      EXPECT_GE(r->eager_max, kEagerFloor) << "rank " << i;
      r->slot = slot_size(r->eager_max);
      Error err;
      r->ep = UdpEndpoint::open("127.0.0.1:0", provider_options(bounce_slots), err);
      if (!r->ep) {
        ADD_FAILURE() << err.message;
        return;
      }
      av.push_back(r->ep->local_address());  // fi_getname, exchanged by the launcher
      r->bounce_slots = bounce_slots;
      r->bounce.assign(bounce_slots * r->slot, 0);
      EXPECT_FALSE(r->ep->register_memory(r->bounce.data(), r->bounce.size(), kAccessLocalWrite,
                                          r->bounce_mr));
      r->staging.assign(staging_bytes, 0);
      EXPECT_FALSE(r->ep->register_memory(r->staging.data(), r->staging.size(), 0, r->staging_mr));
      for (uint64_t s = 0; s < bounce_slots; ++s) r->repost(s);
      ranks.push_back(std::move(r));
    }
    for (auto& r : ranks) r->av = &av;
  }

  void progress() {
    for (auto& r : ranks) r->progress();
  }

  // Drives every rank until `done`, or fails after `limit`.
  template <typename Done>
  bool run_until(Done done, std::chrono::seconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      progress();
      if (done()) return true;
    }
    return false;
  }

  void expect_no_failures() {
    for (auto& r : ranks)
      for (const auto& f : r->failures) ADD_FAILURE() << f;
  }
};

std::vector<uint8_t> message(uint32_t src, uint32_t dst, uint32_t k, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = pattern(src, dst, k, i);
  return v;
}

// Where the first wrong byte of a received message is, or -1.
int64_t first_wrong(const uint8_t* got, uint32_t src, uint32_t dst, uint32_t k, size_t len) {
  for (size_t i = 0; i < len; ++i)
    if (got[i] != pattern(src, dst, k, i)) return static_cast<int64_t>(i);
  return -1;
}

// Eager sizes around the header, the mtu (4096) and the eager limit.
constexpr size_t kSizes[] = {0, 1, 17, 1000, 4096 - sizeof(Hdr), 4096, 4097, kEagerMax};
constexpr uint32_t kPerPeer = 12;  // eager messages each rank sends each other rank
constexpr uint32_t kMpiTags = 3;   // message k carries MPI tag k % 3: repeats match in order
constexpr uint32_t kCtx = 7;       // the communicator's context id
constexpr size_t kLarge = (1 << 20) + 123;

// One message from rank 0 to rank 1, MPI tag k: rank 1's receive, posted
// first, with room to spare, and rank 0's send.
struct OneMessage {
  std::vector<uint8_t> sent, got;
  Recv r;
  bool posted = false;  // tsend took it
  OneMessage(World& w, uint32_t k, size_t len)
      : sent(message(0, 1, k, len)), got(len + 1000, 0xee) {
    r.src = 0;
    r.tag = make_tag(kCtx, k);
    r.buf = got.data();
    r.len = got.size();
    w.ranks[1]->trecv(&r);
    posted = w.ranks[0]->tsend(1, r.tag, sent.data(), sent.size(), 0);
  }
  OneMessage(const OneMessage&) = delete;  // rank 1 holds &r
  OneMessage& operator=(const OneMessage&) = delete;
  // The receive holds the message, every byte right, and nothing past it.
  ::testing::AssertionResult arrived(uint32_t k) const {
    if (!r.done) return ::testing::AssertionFailure() << "message " << k << " never completed";
    if (r.got_src != 0 || r.got_len != sent.size())
      return ::testing::AssertionFailure()
             << "message " << k << ": " << r.got_len << " bytes from " << r.got_src;
    if (const int64_t at = first_wrong(got.data(), 0, 1, k, sent.size()); at >= 0)
      return ::testing::AssertionFailure() << "message " << k << ": byte " << at << " is wrong";
    for (size_t i = sent.size(); i < got.size(); ++i)
      if (got[i] != 0xee)
        return ::testing::AssertionFailure() << "message " << k << ": byte " << i << " written";
    return ::testing::AssertionSuccess();
  }
};

size_t eager_len(uint32_t k) { return kSizes[k % std::size(kSizes)]; }

// Open MPI's first exchange over a connectionless endpoint: every rank sends
// every other rank tagged messages right after the address vector is
// filled, before any connection exists; one rendezvous message each to the
// next rank. A receiver posts receives for some senders before anything
// arrives (expected) and, for its predecessor, only once that rank's
// messages wait in the unexpected queue; half the large receives are
// posted late too, so their RTS is unexpected.
TEST(ProviderShape, TaggedAllToAllWithUnexpectedAndRendezvous) {
  constexpr uint32_t kRanks = 4;
  World w(kRanks);
  ASSERT_EQ(w.ranks.size(), kRanks);

  // recvs[dst][src][k]: the receive for message k from src.
  std::vector<std::vector<std::vector<std::unique_ptr<Recv>>>> recvs(kRanks);
  std::vector<std::vector<std::vector<uint8_t>>> rbuf(kRanks);
  std::vector<std::vector<uint8_t>> large_src(kRanks), large_dst(kRanks);
  std::vector<std::unique_ptr<Recv>> large_recv(kRanks);
  const auto make_recv = [&](uint32_t dst, uint32_t src, uint32_t k) {
    auto r = std::make_unique<Recv>();
    r->src = src;
    r->tag = make_tag(kCtx, k % kMpiTags);
    rbuf[dst].emplace_back(kEagerMax + 64, 0xee);  // longer than any: byte_len is checked
    r->buf = rbuf[dst].back().data();
    r->len = rbuf[dst].back().size();
    return r;
  };
  for (uint32_t d = 0; d < kRanks; ++d) {
    recvs[d].resize(kRanks);
    rbuf[d].reserve(kRanks * kPerPeer);
    for (uint32_t s = 0; s < kRanks; ++s)
      if (s != d)
        for (uint32_t k = 0; k < kPerPeer; ++k) recvs[d][s].push_back(make_recv(d, s, k));
    large_src[d] = message(d, (d + 1) % kRanks, 1000, kLarge);
    large_dst[d].assign(kLarge + 100, 0xee);
    large_recv[d] = std::make_unique<Recv>();
    large_recv[d]->src = kAnySource;  // MPI_ANY_SOURCE
    large_recv[d]->tag = make_tag(kCtx, 1000);
    large_recv[d]->buf = large_dst[d].data();
    large_recv[d]->len = large_dst[d].size();
  }
  const auto pred = [&](uint32_t d) { return (d + kRanks - 1) % kRanks; };

  // Expected receives first: every sender but the predecessor; large ones
  // on even ranks.
  for (uint32_t d = 0; d < kRanks; ++d) {
    for (uint32_t s = 0; s < kRanks; ++s)
      if (s != d && s != pred(d))
        for (auto& r : recvs[d][s]) w.ranks[d]->trecv(r.get());
    if (d % 2 == 0) w.ranks[d]->trecv(large_recv[d].get());
  }
  // First contact: every rank sends at once; nothing is connected yet.
  std::vector<std::vector<uint8_t>> payload;
  for (uint32_t s = 0; s < kRanks; ++s) {
    for (uint32_t d = 0; d < kRanks; ++d) {
      if (d == s) continue;
      for (uint32_t k = 0; k < kPerPeer; ++k) {
        const auto m = message(s, d, k, eager_len(k));
        w.ranks[s]->tsend(d, make_tag(kCtx, k % kMpiTags), m.data(), m.size(), s);
      }
    }
    w.ranks[s]->tsend((s + 1) % kRanks, make_tag(kCtx, 1000), large_src[s].data(), kLarge, s);
  }
  // The predecessor's messages all wait unexpected (and the odd ranks' RTS)
  // before their receives are posted.
  const bool arrived = w.run_until([&] {
    for (uint32_t d = 0; d < kRanks; ++d) {
      size_t waiting = 0;
      for (const auto& m : w.ranks[d]->unexpected) waiting += m.src == pred(d) ? 1 : 0;
      if (waiting < kPerPeer + (d % 2 == 1 ? 1 : 0)) return false;
    }
    return true;
  });
  w.expect_no_failures();
  ASSERT_TRUE(arrived) << "the predecessors' messages did not all arrive unexpected";
  for (uint32_t d = 0; d < kRanks; ++d) {
    for (auto& r : recvs[d][pred(d)]) w.ranks[d]->trecv(r.get());
    if (d % 2 == 1) w.ranks[d]->trecv(large_recv[d].get());
  }
  const bool finished = w.run_until([&] {
    for (uint32_t d = 0; d < kRanks; ++d) {
      const Rank& r = *w.ranks[d];
      if (r.sends_done != (kRanks - 1) * kPerPeer || r.rndv_sends_done != 1 ||
          r.outstanding() != 0 || !large_recv[d]->done)
        return false;
      for (uint32_t s = 0; s < kRanks; ++s)
        for (const auto& rc : recvs[d][s])
          if (!rc->done) return false;
    }
    return true;
  });
  w.expect_no_failures();
  for (uint32_t d = 0; d < kRanks; ++d) {
    const Rank& r = *w.ranks[d];
    EXPECT_EQ(r.sends_done, (kRanks - 1) * kPerPeer) << "rank " << d << " eager sends completed";
    EXPECT_EQ(r.rndv_sends_done, 1u) << "rank " << d << " rendezvous sends completed";
    EXPECT_EQ(r.outstanding(), 0u) << "rank " << d;
    EXPECT_TRUE(r.unexpected.empty()) << "rank " << d << " has unmatched messages";
    EXPECT_TRUE(r.posted.empty()) << "rank " << d << " has receives never matched";
    EXPECT_GE(r.unexpected_seen, kPerPeer) << "rank " << d;
    EXPECT_EQ(r.hellos, kRanks - 1) << "rank " << d << ": one HELLO from each peer's connection";
    for (uint32_t s = 0; s < kRanks; ++s) {
      for (uint32_t k = 0; k < recvs[d][s].size(); ++k) {
        const Recv& rc = *recvs[d][s][k];
        ASSERT_TRUE(rc.done) << s << " -> " << d << " message " << k << " never completed";
        EXPECT_EQ(rc.got_src, s);  // FI_SOURCE
        EXPECT_EQ(rc.got_tag, make_tag(kCtx, k % kMpiTags));
        EXPECT_TRUE(rc.has_cq_data);  // FI_REMOTE_CQ_DATA
        EXPECT_EQ(rc.cq_data, s);
        ASSERT_EQ(rc.got_len, eager_len(k)) << s << " -> " << d << " message " << k;
        EXPECT_EQ(first_wrong(rc.buf, s, d, k, rc.got_len), -1)
            << s << " -> " << d << " message " << k << " (" << rc.got_len << " bytes)";
        // Nothing is written past the message.
        for (size_t i = rc.got_len; i < rc.len; ++i)
          ASSERT_EQ(rc.buf[i], 0xee) << s << " -> " << d << " message " << k << " byte " << i;
      }
    }
    const Recv& lr = *large_recv[d];
    ASSERT_TRUE(lr.done) << "rank " << d << "'s large receive";
    EXPECT_EQ(lr.got_src, pred(d));
    EXPECT_EQ(lr.cq_data, pred(d));
    ASSERT_EQ(lr.got_len, kLarge);
    EXPECT_EQ(first_wrong(lr.buf, pred(d), d, 1000, kLarge), -1)
        << "large " << pred(d) << " -> " << d;
    for (size_t i = kLarge; i < lr.len; ++i) ASSERT_EQ(lr.buf[i], 0xee) << "large, byte " << i;
  }
  EXPECT_TRUE(finished);
}

// Open MPI's mtl/ofi sends a rank's messages to itself through the provider
// (CONN-10): the first send to its own address opens a connection to itself,
// and the message comes back through the shared receive queue with its own
// rank as the source.
TEST(ProviderShape, SendToSelfGoesThroughTheProvider) {
  World w(2);
  ASSERT_EQ(w.ranks.size(), 2u);
  Rank& r = *w.ranks[0];
  const auto m = message(0, 0, 5, 3000);
  const auto big = message(0, 0, 6, kLarge);
  std::vector<uint8_t> got(4000, 0xee), got_big(kLarge, 0xee);
  Recv small, large;
  small.src = 0;
  small.tag = make_tag(kCtx, 5);
  small.buf = got.data();
  small.len = got.size();
  large.src = 0;
  large.tag = make_tag(kCtx, 6);
  large.buf = got_big.data();
  large.len = got_big.size();
  r.trecv(&small);
  r.tsend(0, make_tag(kCtx, 6), big.data(), big.size(), 0);  // its RTS waits unexpected
  r.tsend(0, make_tag(kCtx, 5), m.data(), m.size(), 0);
  ASSERT_TRUE(w.run_until([&] { return small.done && !r.unexpected.empty(); }, 10s));
  r.trecv(&large);
  const bool done = w.run_until(
      [&] { return large.done && r.rndv_sends_done == 1 && r.sends_done == 1 && !r.outstanding(); },
      10s);
  w.expect_no_failures();
  ASSERT_TRUE(done);
  EXPECT_EQ(small.got_src, 0u);
  ASSERT_EQ(small.got_len, m.size());
  EXPECT_EQ(first_wrong(got.data(), 0, 0, 5, m.size()), -1);
  EXPECT_EQ(r.hellos, 1u);  // its own
  EXPECT_EQ(large.got_src, 0u);
  ASSERT_EQ(large.got_len, kLarge);
  EXPECT_EQ(first_wrong(got_big.data(), 0, 0, 6, kLarge), -1);
}

// Fewer bounce buffers than messages in flight: the shared receive queue
// runs dry and senders meet RNR (LOSS-7) until the receiver's provider
// reposts its slots. Nothing is lost or reordered: a rank's messages with
// one tag still match in the order they were sent.
TEST(ProviderShape, FewBounceBuffersDrawRnrAndLoseNothing) {
  constexpr uint32_t kRanks = 3;
  constexpr uint32_t kMsgs = 40;
  World w(kRanks, /*bounce_slots=*/2);
  ASSERT_EQ(w.ranks.size(), kRanks);
  std::vector<std::vector<std::unique_ptr<Recv>>> recvs(kRanks);
  std::vector<std::vector<std::vector<uint8_t>>> bufs(kRanks);
  for (uint32_t d = 0; d < kRanks; ++d) {
    bufs[d].reserve((kRanks - 1) * kMsgs);
    for (uint32_t s = 0; s < kRanks; ++s) {
      if (s == d) continue;
      for (uint32_t k = 0; k < kMsgs; ++k) {
        auto r = std::make_unique<Recv>();
        r->src = s;
        r->tag = make_tag(kCtx, 1);  // one tag: order decides the match
        bufs[d].emplace_back(kEagerMax, 0);
        r->buf = bufs[d].back().data();
        r->len = kEagerMax;
        w.ranks[d]->trecv(r.get());
        recvs[d].push_back(std::move(r));
      }
    }
  }
  for (uint32_t s = 0; s < kRanks; ++s)
    for (uint32_t d = 0; d < kRanks; ++d)
      if (d != s)
        for (uint32_t k = 0; k < kMsgs; ++k) {
          const auto m = message(s, d, k, 2000 + 97 * k);
          w.ranks[s]->tsend(d, make_tag(kCtx, 1), m.data(), m.size(), s);
        }
  const bool done = w.run_until([&] {
    for (uint32_t d = 0; d < kRanks; ++d) {
      if (w.ranks[d]->sends_done != (kRanks - 1) * kMsgs) return false;
      for (const auto& r : recvs[d])
        if (!r->done) return false;
    }
    return true;
  });
  w.expect_no_failures();
  ASSERT_TRUE(done);
  uint64_t rnr = 0;
  for (uint32_t d = 0; d < kRanks; ++d) {
    // RNR is counted per connection only: the provider sums its own.
    for (const auto& [conn, src] : w.ranks[d]->src_of) {
      ConnStats cs;
      if (w.ranks[d]->ep->conn_stats(ConnId{conn}, cs)) rnr += cs.rnr_naks_sent;
    }
    for (size_t i = 0; i < recvs[d].size(); ++i) {
      const Recv& r = *recvs[d][i];
      const uint32_t k = static_cast<uint32_t>(i % kMsgs);
      ASSERT_EQ(r.got_src, r.src);
      ASSERT_EQ(r.got_len, 2000 + 97 * k) << r.src << " -> " << d << " message " << k;
      EXPECT_EQ(first_wrong(r.buf, static_cast<uint32_t>(r.src), d, k, r.got_len), -1)
          << r.src << " -> " << d << " message " << k;
    }
  }
  EXPECT_GT(rnr, 0u) << "the shared queue never ran dry: the test did not test RNR";
}

// Under FI_PROGRESS_MANUAL a rank that computes without entering MPI
// acknowledges nothing, and after peer_timeout (2 s, PATH-7) its peers'
// connections fail kPeerUnreachable, though the datagrams wait in its socket
// and are placed when it resumes: delivered, yet failed at the sender
// (docs/design/libfabric-provider.md, gap G1). The provider therefore runs
// the driver's progress thread while the application is away; with it, a
// message sent to a rank that computes for longer than peer_timeout arrives
// and completes at the sender.
TEST(ProviderShape, ARankComputingPastThePeerTimeoutKeepsItsPeersWithTheProgressThread) {
  World w(2);
  ASSERT_EQ(w.ranks.size(), 2u);
  Rank& a = *w.ranks[0];
  Rank& b = *w.ranks[1];
  OneMessage m0(w, 0, 3000);
  ASSERT_TRUE(w.run_until([&] { return m0.r.done && a.sends_done == 1; }, 10s));
  // b computes: its application calls nothing, its provider's thread runs.
  b.ep->start_progress_thread();
  OneMessage m1(w, 1, 3000);
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::nanoseconds(provider_options(1).engine.recovery.peer_timeout_ns) +
                     500ms;
  while (std::chrono::steady_clock::now() < until) a.progress();
  b.ep->stop_progress_thread();
  const bool done = w.run_until([&] { return m1.r.done && a.sends_done == 2; }, 10s);
  w.expect_no_failures();
  ASSERT_TRUE(done);
  EXPECT_TRUE(m1.arrived(1));
}

// A wider mix: six ranks, each sending every rank, itself included, 16
// eager messages of sizes spread over 0..kEagerMax and one rendezvous
// message, all with one tag so that order decides every match; half the
// receives are posted before anything is sent and half after the first
// messages have arrived, with fewer bounce buffers than messages in flight.
TEST(ProviderShape, EveryRankToEveryRankItselfIncludedEagerAndRendezvous) {
  constexpr uint32_t kRanks = 6;
  constexpr uint32_t kEager = 16;
  constexpr size_t kBig = 200000;
  const auto len_of = [](uint32_t k) { return k == kEager ? kBig : (k * 977) % (kEagerMax + 1); };
  World w(kRanks, /*bounce_slots=*/8, /*staging_bytes=*/16 << 20);
  ASSERT_EQ(w.ranks.size(), kRanks);
  // recvs[d][s * (kEager + 1) + k]: the receive for message k from s.
  std::vector<std::vector<std::unique_ptr<Recv>>> recvs(kRanks);
  std::vector<std::vector<std::vector<uint8_t>>> bufs(kRanks);
  std::vector<std::vector<uint8_t>> sent;
  sent.reserve(kRanks * kRanks * (kEager + 1));
  const auto early = [](uint32_t s, uint32_t d) { return (s + d) % 2 == 0; };
  for (uint32_t d = 0; d < kRanks; ++d) {
    bufs[d].reserve(kRanks * (kEager + 1));
    for (uint32_t s = 0; s < kRanks; ++s)
      for (uint32_t k = 0; k <= kEager; ++k) {
        auto r = std::make_unique<Recv>();
        r->src = s;
        r->tag = make_tag(kCtx, k == kEager ? 999 : 1);
        bufs[d].emplace_back(std::max(len_of(k), kEagerMax), 0);
        r->buf = bufs[d].back().data();
        r->len = bufs[d].back().size();
        if (early(s, d)) w.ranks[d]->trecv(r.get());
        recvs[d].push_back(std::move(r));
      }
  }
  for (uint32_t s = 0; s < kRanks; ++s)
    for (uint32_t d = 0; d < kRanks; ++d)
      for (uint32_t k = 0; k <= kEager; ++k) {
        sent.push_back(message(s, d, k, len_of(k)));
        w.ranks[s]->tsend(d, make_tag(kCtx, k == kEager ? 999 : 1), sent.back().data(),
                          sent.back().size(), s);
      }
  for (int i = 0; i < 200; ++i) w.progress();
  for (uint32_t d = 0; d < kRanks; ++d)
    for (auto& r : recvs[d])
      if (!early(static_cast<uint32_t>(r->src), d)) w.ranks[d]->trecv(r.get());
  const bool done = w.run_until([&] {
    for (uint32_t d = 0; d < kRanks; ++d) {
      // outstanding(): the FINs' own send completions too.
      if (w.ranks[d]->sends_done != kRanks * kEager || w.ranks[d]->rndv_sends_done != kRanks ||
          w.ranks[d]->outstanding() != 0)
        return false;
      for (const auto& r : recvs[d])
        if (!r->done) return false;
    }
    return true;
  });
  w.expect_no_failures();
  ASSERT_TRUE(done);
  for (uint32_t d = 0; d < kRanks; ++d) {
    EXPECT_EQ(w.ranks[d]->hellos, kRanks) << "rank " << d << ": one from each rank, itself too";
    EXPECT_TRUE(w.ranks[d]->unexpected.empty()) << "rank " << d;
    EXPECT_EQ(w.ranks[d]->outstanding(), 0u) << "rank " << d;
    for (uint32_t s = 0; s < kRanks; ++s)
      for (uint32_t k = 0; k <= kEager; ++k) {
        const Recv& r = *recvs[d][s * (kEager + 1) + k];
        ASSERT_EQ(r.got_src, s);
        ASSERT_EQ(r.got_len, len_of(k)) << s << " -> " << d << " message " << k;
        EXPECT_EQ(first_wrong(r.buf, s, d, k, r.got_len), -1)
            << s << " -> " << d << " message " << k;
      }
  }
}

// A first contact with a peer that runs no progress for 300 ms, as an MPI
// rank computing between calls: its CONNECT_REQs wait in its socket. The
// engine's own budget (8 requests 10 ms apart, CONN-2, left as it is) would
// fail the connect and flush the message posted on it (gap G2); the
// provider's connect_start budget outlasts the pause, and the message
// arrives, its HELLO still first on the connection that the peer accepts.
// A budget shorter than the pause fails the send kConnectTimeout instead:
// the budget is what carries the first contact.
TEST(ProviderShape, AFirstContactOutlastsAPeerThatComputes) {
  for (const auto budget : {std::chrono::milliseconds(20s), std::chrono::milliseconds(100ms)}) {
    const bool enough = budget > 300ms;
    SCOPED_TRACE(enough ? "budget 20 s" : "budget 100 ms");
    World w(2);
    ASSERT_EQ(w.ranks.size(), 2u);
    Rank& a = *w.ranks[0];
    a.connect_budget = budget;
    ASSERT_EQ(w.ranks[1]->connect_budget, 20s);  // the provider's, as every other test runs it
    ASSERT_EQ(provider_options(1).engine.connect_attempts, EndpointConfig{}.connect_attempts);
    OneMessage m(w, 3, 5000);
    const auto until = std::chrono::steady_clock::now() + 300ms;
    while (std::chrono::steady_clock::now() < until) a.progress();  // rank 1 computes
    if (enough) {
      const bool done = w.run_until([&] { return m.r.done && a.sends_done == 1; }, 10s);
      w.expect_no_failures();
      ASSERT_TRUE(done);
      EXPECT_TRUE(m.arrived(3));
      EXPECT_EQ(w.ranks[1]->hellos, 1u);
      continue;
    }
    // The HELLO and the message, both flushed when the budget ran out.
    const bool ended = w.run_until([&] { return a.failed.size() >= 2; }, 10s);
    for (int i = 0; i < 100; ++i) w.progress();  // rank 1 hears the late requests out
    ASSERT_TRUE(ended);
    // The first work request fails with the connect, the one behind it flushed.
    EXPECT_EQ(a.failed, (std::vector<Status>{Status::kConnectTimeout, Status::kFlushed}));
    ASSERT_FALSE(a.failures.empty());
    EXPECT_NE(a.failures[0].find("timed out after 100 ms"), std::string::npos) << a.failures[0];
    EXPECT_EQ(a.sends_done, 0u);
    EXPECT_FALSE(m.r.done);
    EXPECT_TRUE(w.ranks[1]->failures.empty());
  }
}

// Gap G4(a): two ranks built with different eager limits (16 KiB and the
// default 8 KiB). The HELLO that opens rank 0's connection names its limit,
// and rank 1 refuses the peer at once, with both limits in the error; rank
// 1's own HELLO back tells rank 0, whose provider then refuses to send it
// anything. No completion fails: nothing reaches the engine's placement
// check. Without the HELLO the first, short message is delivered and the
// mismatch shows only when a message between the two limits fails the
// connection kRemoteLengthError (PLACE-3), naming no limit. With the
// HELLO, here and in every other test, it is the first receive completion
// of each connection at its receiver (COMP-3; Rank::on_recv fails the test
// otherwise). The short message, placed before rank 1 read the HELLO,
// completed at rank 0 though rank 1's provider dropped it: a mismatch is
// the job's end, not a state to go on from.
TEST(ProviderShape, DifferentEagerLimitsAreFoundFromTheHello) {
  constexpr size_t kLong = 12000;  // above rank 1's limit, below rank 0's
  for (const bool hello : {true, false}) {
    SCOPED_TRACE(hello ? "with the HELLO" : "without");
    World w(2, 32, 4 << 20, {16384, kEagerMax});
    ASSERT_EQ(w.ranks.size(), 2u);
    Rank& a = *w.ranks[0];
    Rank& b = *w.ranks[1];
    a.hello = b.hello = hello;
    OneMessage first(w, 1, 100);  // within both limits
    ASSERT_TRUE(first.posted);
    if (hello) {
      ASSERT_TRUE(w.run_until([&] { return a.incompatible.count(1) && !a.outstanding(); }, 10s));
      ASSERT_EQ(b.incompatible.size(), 1u);
      const std::string& at_b = b.incompatible.at(0);
      EXPECT_NE(at_b.find("rank 0 (" + w.av[0] + ") sends eager messages of up to 16384 bytes"),
                std::string::npos)
          << at_b;
      EXPECT_NE(at_b.find("this rank takes 8192"), std::string::npos) << at_b;
      EXPECT_NE(at_b.find("different eager limits"), std::string::npos) << at_b;
      const std::string& at_a = a.incompatible.at(1);
      EXPECT_NE(at_a.find("up to 8192 bytes"), std::string::npos) << at_a;
      EXPECT_NE(at_a.find("this rank takes 16384"), std::string::npos) << at_a;
      EXPECT_EQ(b.hellos, 1u);
      EXPECT_EQ(a.hellos, 1u);
      EXPECT_FALSE(first.r.done);  // a refused peer's messages are not taken
      EXPECT_EQ(b.dropped, 1u);
      OneMessage later(w, 2, kLong);
      EXPECT_FALSE(later.posted);  // refused by the provider, with the HELLO's error
      for (int i = 0; i < 100; ++i) w.progress();
      w.expect_no_failures();
      EXPECT_TRUE(a.failed.empty());
      EXPECT_TRUE(b.failed.empty());
      EXPECT_FALSE(later.r.done);
      continue;
    }
    ASSERT_TRUE(w.run_until([&] { return first.r.done && a.sends_done == 1; }, 10s));
    EXPECT_TRUE(first.arrived(1));
    OneMessage later(w, 2, kLong);
    ASSERT_TRUE(later.posted);
    ASSERT_TRUE(w.run_until([&] { return !a.failed.empty(); }, 10s));
    EXPECT_EQ(a.failed[0], Status::kRemoteLengthError);
    EXPECT_TRUE(a.incompatible.empty());
    EXPECT_TRUE(b.incompatible.empty());
    EXPECT_FALSE(later.r.done);
  }
}

// G4(a) at first contact: the rank with the larger limit sends a message
// between the two limits before it has heard its peer's HELLO. It goes by
// rendezvous (above kEagerFloor), so nothing reaches the engine's length
// check: the receiver refuses the peer from its HELLO, dropping the RTS, and
// its HELLO back lets the sender fail that rendezvous send with the same
// words. Sent eager instead, it would fail the connection
// kRemoteLengthError, and as its first packet may arrive before the HELLO
// (num_paths 4), the receiver would often never see the HELLO at all.
TEST(ProviderShape, AFirstMessageAboveThePeersLimitGoesByRendezvousAndIsRefused) {
  World w(2, 32, 4 << 20, {16384, kEagerMax});
  ASSERT_EQ(w.ranks.size(), 2u);
  Rank& a = *w.ranks[0];
  Rank& b = *w.ranks[1];
  OneMessage first(w, 1, 12000);  // above rank 1's limit, below rank 0's
  ASSERT_TRUE(first.posted);
  ASSERT_TRUE(w.run_until([&] { return !a.send_errors.empty() && !a.outstanding(); }, 10s));
  for (int i = 0; i < 100; ++i) w.progress();
  w.expect_no_failures();
  EXPECT_TRUE(a.failed.empty());  // no kRemoteLengthError, nor any other
  EXPECT_TRUE(b.failed.empty());
  ASSERT_EQ(a.send_errors.size(), 1u);
  EXPECT_NE(a.send_errors[0].find("rank 1 (" + w.av[1] + ") sends eager messages of up to 8192"),
            std::string::npos)
      << a.send_errors[0];
  EXPECT_NE(a.send_errors[0].find("this rank takes 16384"), std::string::npos) << a.send_errors[0];
  EXPECT_TRUE(a.rts_waiting.empty());
  ASSERT_EQ(b.incompatible.count(0), 1u);
  EXPECT_NE(b.incompatible.at(0).find("up to 16384 bytes"), std::string::npos);
  EXPECT_EQ(b.hellos, 1u);
  EXPECT_EQ(b.dropped, 1u);  // the RTS
  EXPECT_FALSE(first.r.done);
}

}  // namespace
}  // namespace metaroce::udp
