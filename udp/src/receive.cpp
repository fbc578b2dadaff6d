// The receive side of a progress round: recvmmsg batches from the receive
// socket, GRO buffers split into datagrams, ECN and kernel arrival times read
// from the control messages, each datagram matched to its peer and handed to
// the engine.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <new>

#include "address.hpp"
#include "impl.hpp"
#include "metaroce/wire.hpp"
#include "tsan.hpp"

namespace metaroce::udp {
namespace {

constexpr int kRxBatchesPerRound = 4;

int64_t realtime_ns() {
  timespec ts{};
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

// known: a connection of the engine's names the peer.
PeerAddr UdpEndpoint::Impl::resolve_peer(const PeerAddr& src, const uint8_t* p, size_t n,
                                         bool& known) {
  known = false;
  // (0 for a CONNECT_REQ, whose dst_conn a responder does not read, 3.12:
  // read, a request naming another connection of this endpoint took that
  // connection's peer, on the same host, and its ACCEPT went there.)
  if (const uint32_t dc = wire::peek_dst_conn({p, n}); dc != 0) {
    // The engine also names the peer of a connection a DISCONNECT closed
    // a moment ago, so that the DISCONNECT's repeats find it (CONN-7).
    if (const PeerAddr conn_peer = eng->peer_of(ConnId{dc}); conn_peer.len != 0) {
      if (same_host(conn_peer, src)) {
        known = true;
        return conn_peer;
      }
      note_foreign(dc, src);  // the engine drops it (BAD-8)
    }
  }
  // A CONNECT_REQ leaves from the peer's next entropy port (CONN-2) and names
  // the port it receives on (reply_port): the connection, and CONN-3's
  // duplicates, are known by that address. 0 names the source port itself.
  if (const uint16_t reply = wire::request_reply_port({p, n}); reply != 0)
    return with_port(src, reply);
  return src;
}

void UdpEndpoint::Impl::note_foreign(uint32_t dc, const PeerAddr& src) {
  if (const auto it = conns.find(dc); it != conns.end()) {
    ++it->second.foreign_datagrams;
    it->second.foreign_src = src;
  }
}

// A wildcard-bound endpoint learns the address `peer` reaches it at (see
// Impl::wild). Checked once per received buffer: the cache holds the last
// peer, so a busy connection costs a comparison. Only a peer a connection
// names (known) gets an entry in peer_src; others go to recent_src. A cache
// that holds a recent_src entry (the CONNECT_REQ's, which the ACCEPT looked
// up) is no entry in peer_src: the connection's first datagrams, which match
// it, still make one. They used not to, and once later sources had moved the
// cache and passed over the ring, the peer was answered from the route's
// address, which it drops (Udp.WildcardServerKeepsTheAddressAfterNewSources).
void UdpEndpoint::Impl::note_source(const PeerAddr& peer, const LocalIp& at, bool known) {
  if (src_cache_peer == peer && src_cache == at && (src_cache_kept || !known)) return;
  bool kept = true;
  if (auto it = peer_src.find(peer); it != peer_src.end()) {
    it->second = at;
  } else {
    bool stored = false;
    if (known) {
      // Bounded: late packets of connections gone would grow it without end.
      if (peer_src.size() >= peer_src_limit) evict_idle_sources();
      try {
        peer_src[peer] = at;  // allocates for a new peer only
        stored = true;
      } catch (const std::bad_alloc&) {
        // Short of memory: kept in the ring, as an unknown peer's, until a
        // later datagram of the peer tries again; never std::bad_alloc out
        // of progress().
      }
    }
    if (!stored) {
      if (recent_src.empty()) return;
      recent_src[recent_next] = {peer, at};
      recent_next = (recent_next + 1) % recent_src.size();
      kept = false;
    }
  }
  src_cache_peer = peer;
  src_cache = at;
  src_cache_kept = kept;
}

size_t UdpEndpoint::Impl::receive(TimeNs now) {
  size_t got = 0;
  const int64_t real_to_mono = static_cast<int64_t>(now.ns) - realtime_ns();
  for (int round = 0; round < kRxBatchesPerRound; ++round) {
    // Only the fields the kernel wrote in the last call need resetting.
    for (uint32_t i = 0; i < rx_used; ++i) {
      msghdr& h = rx_msgs[i].msg_hdr;
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_controllen = rx_ctrl_len;
      h.msg_flags = 0;
    }
    rx_used = 0;
    const uint32_t asked = rx_per_call;
    const int r = recvmmsg(rx_fd, rx_msgs.data(), asked, MSG_DONTWAIT, nullptr);
    if (r <= 0) break;
    tsan::received_on(local);
    // The engine times paths by the echoes these datagrams carry (LOSS-6):
    // the round's clock, read before its sends and earlier batches, would
    // date an ACK before packets it echoes had left. On loopback it did: ACKs
    // of this round's own sends read as 0 ns round trips, and every path's
    // min_rtt was 0, which CC-5 takes as the path's empty-queue delay.
    if (round > 0) now = clock_now();
    rx_used = static_cast<uint32_t>(r);
    if (static_cast<uint32_t>(r) == asked && round + 1 == kRxBatchesPerRound)
      ++io.rx_backlogged_rounds;
    ++io.rx_syscalls;
    size_t call_bytes = 0;
    for (int i = 0; i < r; ++i) {
      msghdr& h = rx_msgs[i].msg_hdr;
      const size_t len = rx_msgs[i].msg_len;
      call_bytes += len;
      if ((h.msg_flags & MSG_TRUNC) != 0) {
        ++io.rx_truncated;
        continue;
      }
      // An empty datagram is no packet of any protocol here, and its length
      // would divide the GRO segment arithmetic below by zero.
      if (len == 0) {
        ++io.rx_foreign;
        continue;
      }
      uint8_t tos = 0;
      bool have_tos = false;  // ECN and DSCP read
      size_t seg = len;
      bool have_seg = false;  // a GRO buffer's segment size read
      int64_t arrived = 0;    // kernel receive time, on the engine's clock
      LocalIp dst;            // the address it was sent to (wild only)
      bool have_dst = false;
      // A control message the kernel cut short (MSG_CTRUNC) holds less than
      // its value, or nothing: the bytes after it are an earlier datagram's.
      const auto holds = [](const cmsghdr* c, size_t n) { return c->cmsg_len >= CMSG_LEN(n); };
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == IPPROTO_IP && (c->cmsg_type == IP_TOS || c->cmsg_type == IP_RECVTOS) &&
            holds(c, 1)) {
          tos = *reinterpret_cast<const uint8_t*>(CMSG_DATA(c));
          have_tos = true;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
                   holds(c, sizeof(int))) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof(v));
          tos = static_cast<uint8_t>(v);
          have_tos = true;
        } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && holds(c, sizeof(int))) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof(v));
          if (v > 0) seg = static_cast<size_t>(v);
          have_seg = true;
        } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                   holds(c, sizeof(timespec))) {
          timespec ts{};
          std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
          arrived = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + real_to_mono;
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO &&
                   holds(c, sizeof(in_pktinfo))) {
          in_pktinfo pi{};
          std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
          dst.b[10] = dst.b[11] = 0xff;  // v4-mapped
          // The local address (for a broadcast datagram, the interface's),
          // not the header's destination, which may be no address of ours.
          std::memcpy(dst.b + 12, &pi.ipi_spec_dst, 4);
          have_dst = true;
        } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO &&
                   holds(c, sizeof(in6_pktinfo))) {
          in6_pktinfo pi{};
          std::memcpy(&pi, CMSG_DATA(c), sizeof(pi));
          std::memcpy(dst.b, &pi.ipi6_addr, 16);  // an IPv4 one v4-mapped on a dual-stack socket
          // A group or broadcast destination (a v4-mapped one from 224.0.0.0
          // up on a dual-stack socket) is no source to answer from.
          have_dst = !IN6_IS_ADDR_MULTICAST(&pi.ipi6_addr) &&
                     !(IN6_IS_ADDR_V4MAPPED(&pi.ipi6_addr) && pi.ipi6_addr.s6_addr[12] >= 224);
        }
      }
      // Control data cut short (the kernel had more to say than the buffer
      // holds; kRxCtrlBytes leaves room for all it says now). A GRO buffer
      // that lost its segment size cannot be split: its datagrams are
      // dropped, and the engine retransmits them as lost. With GRO on, any
      // buffer without one is dropped, as a single datagram carries none.
      // One whose TOS was lost is handed on as not CE, of the data class and
      // not trimmed: a congestion mark lost at worst, never data (a trimmed
      // packet taken as whole is dropped by the engine for its missing payload).
      if ((h.msg_flags & MSG_CTRUNC) != 0) {
        ++io.rx_ctrunc;
        if (gro && !have_seg) continue;
      }
      if (arrived != 0) {
        const auto waited =
            static_cast<uint64_t>(std::max<int64_t>(static_cast<int64_t>(now.ns) - arrived, 0));
        io.rx_wait_ns_total += waited * ((len + seg - 1) / seg);  // per datagram
        io.rx_wait_ns_max = std::max(io.rx_wait_ns_max, waited);
      }
      PeerAddr src;
      if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&rx_addr[i]), src)) {
        ++io.rx_foreign;
        continue;
      }
      const bool ce = have_tos && (tos & 3) == 3;
      const bool control =
          have_tos && (tos >> 2) == cfg.control_dscp && cfg.control_dscp != cfg.data_dscp;
      const uint8_t* base = static_cast<const uint8_t*>(rx_iov[i].iov_base);
      if (seg < len) ++io.rx_gro_batches;
      RxDatagram dg;
      dg.entropy = address_port(src);
      dg.ce = ce;
      // TRIM-2. IP GRO never merges datagrams of different TOS, so a whole
      // buffer shares the flag.
      dg.trimmed = have_tos && (tos >> 2) == opts.trimmed_dscp;
      // What the call owes so far goes first: a flagged echo would take the
      // place of a plain one still pending, and its RTT sample with it (ACK-6).
      if (ce || dg.trimmed) (void)pump_tx(now);
      uint32_t resolved_dc = 0;  // the segments of a buffer normally share dst_conn
      bool resolved = false;
      bool known = false;
      for (size_t off = 0; off < len; off += seg) {
        const size_t n = std::min(seg, len - off);
        const uint32_t dc = wire::peek_dst_conn({base + off, n});
        // (Each segment of a peer no connection names is resolved on its
        // own: one from another host is counted, note_foreign.)
        if (!resolved || dc != resolved_dc || dc == 0 || !known) {
          dg.peer = resolve_peer(src, base + off, n, known);
          resolved_dc = dc;
          resolved = true;
          if (have_dst) note_source(dg.peer, dst, known);
        }
        dg.bytes = std::span<const uint8_t>(base + off, n);
        eng->handle_datagram(dg, now);
        if (ce || dg.trimmed) (void)pump_tx(now);  // ACK-2, TRIM-2: each answered at once
        ++io.rx_datagrams;
        io.rx_ce += ce ? 1 : 0;
        io.rx_control_class += control ? 1 : 0;
        ++got;
      }
    }
    // ACK-1 lets the datagrams of one receive call draw one ACK per
    // connection, so the engine is drained once per call. Drained once per
    // GRO buffer, a loopback receiver sent an ACK per 13 data packets and its
    // sender spent 8 % of its core receiving them; once per call, one per
    // about 120 and 4-10 % more goodput (BENCHMARKS.md, section 3). CE-marked
    // and trimmed segments were drained one by one above: each keeps its own
    // ACK (ACK-2, TRIM-2), where four pending echoes would be all a connection
    // keeps.
    (void)pump_tx(now);
    // The next call is sized on this one's mean datagram: ACKs and unbatched
    // packets fill the whole batch, GRO buffers as many as kRxBytesPerCall holds.
    rx_per_call = rx_count_for(call_bytes / static_cast<size_t>(r));
    if (static_cast<uint32_t>(r) < asked) break;
  }
  return got;
}

}  // namespace metaroce::udp
