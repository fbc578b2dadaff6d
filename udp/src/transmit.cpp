// The transmit side of a progress round: datagrams drained from the engine
// into slots, grouped by socket and peer into sendmmsg messages (runs
// coalesced with GSO), sent, and copied out of the application's memory when
// a full socket buffer holds them past the round.
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "address.hpp"
#include "impl.hpp"
#include "tsan.hpp"

#if METAROCE_HAVE_URING
#include <liburing.h>
#endif

namespace metaroce::udp {
namespace {

constexpr size_t kGsoMaxSegments = 64;  // UDP_MAX_SEGMENTS
constexpr size_t kGsoMaxBytes = 65000;  // below the 64 KiB UDP length limit

// A send that failed only because the socket buffer was full: the message
// waits for the next try.
bool buffer_full(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS; }

}  // namespace

uint16_t UdpEndpoint::Impl::choose_socket(uint16_t entropy) {
  if (entropy >= ebase && entropy - ebase < ecount) return static_cast<uint16_t>(entropy - ebase);
  ++io.tx_remapped;  // an echo of the peer's port (ACK-7) outside our block
  return static_cast<uint16_t>(entropy % ecount);
}

// A send socket is connected to the first peer it sends to, and messages
// to that peer then leave without an address: a connected UDP socket keeps
// its route, an unconnected one looks it up for every message (a FIB
// lookup, ~1% of a loopback sender's CPU). Messages to other peers still
// carry their address. Nothing is received on send sockets, so the filter
// a connect() installs changes nothing; ICMP errors it lets through come
// back from a later send (see stale_error). Once per socket.
bool UdpEndpoint::Impl::use_connected(uint16_t sock, const PeerAddr& peer,
                                      const sockaddr_storage& ss, socklen_t len) {
  if (tx_peer_tried[sock] == 0) {
    tx_peer_tried[sock] = 1;
    if (::connect(tx_fds[sock], reinterpret_cast<const sockaddr*>(&ss), len) == 0) {
      tx_peer[sock] = peer;
      if (wild) {  // the source the kernel chose for it (see build_messages)
        sockaddr_storage me{};
        socklen_t ml = sizeof(me);
        PeerAddr a;
        if (getsockname(tx_fds[sock], reinterpret_cast<sockaddr*>(&me), &ml) == 0 &&
            from_sockaddr(reinterpret_cast<const sockaddr*>(&me), a))
          std::memcpy(tx_src[sock].b, a.bytes, 16);
      }
    }
  }
  return connected_to(sock, peer);
}

// Fills slots from the engine; returns the number taken.
// The engine writes a datagram's 21-byte peer as two overlapping stores
// (16 bytes, then 8 from byte 13), which the CPU cannot forward to the
// 16-byte load of a copy right after the call: that copy waited for the
// stores to reach the cache, 2/3 of fill's samples on a loopback sender.
// So the datagrams alternate between two TxDatagrams and a slot's peer is
// copied after the next call, when the stores are long done.
size_t UdpEndpoint::Impl::fill(TimeNs now) {
  TxDatagram txs[2];
  TxSlot* pending_peer = nullptr;  // the last slot filled: its peer is in txs[(turn + 1) % 2]
  unsigned turn = 0;
  while (tx_count < tx_cap) {
    uint8_t* buf = slot_buf(tx_count);
    TxDatagram& tx = txs[turn];
    if (!eng->poll_transmit_gather(now, std::span<uint8_t>(buf, tx_head_size - kTxLead), tx)) break;
    if (pending_peer != nullptr) pending_peer->peer = txs[turn ^ 1].peer;
    TxSlot& s = tx_slots[tx_count];
    pending_peer = &s;
    turn ^= 1;
    s.copied = false;
    if (tx.payload.size() > kGatherMin) {
      s.payload = tx.payload.data();
      s.hlen = static_cast<uint16_t>(tx.header_len);
      s.len = static_cast<uint32_t>(tx.header_len + tx.payload.size() + kIcrc);
      std::memcpy(s.trailer, tx.trailer, kIcrc);
    } else {
      // Whole in the buffer: built so (no payload), or a small payload is
      // cheaper to copy than to describe with two more iovecs (the head
      // holds the largest headers, kGatherMin bytes and the ICRC: setup).
      if (!tx.payload.empty()) {
        std::memcpy(buf + tx.header_len, tx.payload.data(), tx.payload.size());
        std::memcpy(buf + tx.header_len + tx.payload.size(), tx.trailer, kIcrc);
      }
      s.payload = nullptr;
      s.hlen = 0;
      s.len = static_cast<uint32_t>(std::min(tx.len, tx_head_size - kTxLead));
    }
    s.dscp = tx.dscp;
    s.sock = choose_socket(tx.entropy);
    const bool ack = s.len >= 2 && wire::is_acknowledgement(buf[1]);
    s.ack = ack;
    ++tx_count;
  }
  if (pending_peer != nullptr) pending_peer->peer = txs[turn ^ 1].peer;
  return tx_count;
}

// The address `peer` reaches this wildcard-bound endpoint at, if known (see
// Impl::wild). Once per message; the cache holds the last peer.
const LocalIp* UdpEndpoint::Impl::source_for(const PeerAddr& peer) {
  if (src_cache_peer == peer) return &src_cache;
  if (const auto it = peer_src.find(peer); it != peer_src.end()) {
    src_cache_peer = peer;
    src_cache = it->second;
    src_cache_kept = true;
    return &src_cache;
  }
  // (A peer no connection names yet, answered in the call that heard it.)
  for (size_t k = recent_src.size(); k > 0; --k) {  // the newest first
    const auto& [p, at] = recent_src[(recent_next + k - 1) % recent_src.size()];
    if (p == peer) {
      src_cache_peer = peer;
      src_cache = at;
      src_cache_kept = false;
      return &src_cache;
    }
  }
  return nullptr;
}

// Message m's control data: UDP_SEGMENT when gso_size is not 0, the IP TOS
// when the slot's DSCP is not the socket's (ENC-6; IP_TOS also for a v4 peer
// of a dual-stack socket, whose IPv4 path ignores IPV6_TCLASS), and the
// source address when src is not null (IP_PKTINFO to a v4 peer, also from a
// dual-stack socket, IPV6_PKTINFO to a v6 one).
void UdpEndpoint::Impl::set_control(msghdr& h, size_t m, uint16_t gso_size, const TxSlot& s,
                                    const LocalIp* src) {
  const bool tos = s.dscp != cfg.data_dscp;
  if (gso_size == 0 && !tos && src == nullptr) return;
  uint8_t* ctrl = tx_ctrl.data() + m * kTxCtrlBytes;
  std::memset(ctrl, 0, kTxCtrlBytes);
  h.msg_control = ctrl;
  h.msg_controllen = kTxCtrlBytes;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  size_t used = 0;
  if (gso_size != 0) {
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    std::memcpy(CMSG_DATA(c), &gso_size, sizeof(gso_size));
    used += CMSG_SPACE(sizeof(uint16_t));
    c = CMSG_NXTHDR(&h, c);
  }
  if (tos) {
    const int value = tos_byte(s.dscp);
    const bool v4 = address_is_v4(s.peer);
    c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
    c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &value, sizeof(value));
    used += CMSG_SPACE(sizeof(int));
    c = CMSG_NXTHDR(&h, c);
  }
  if (src != nullptr) {
    if (address_is_v4(s.peer)) {
      in_pktinfo pi{};  // interface 0: the route picks it
      std::memcpy(&pi.ipi_spec_dst, src->b + 12, 4);
      c->cmsg_level = IPPROTO_IP;
      c->cmsg_type = IP_PKTINFO;
      c->cmsg_len = CMSG_LEN(sizeof(pi));
      std::memcpy(CMSG_DATA(c), &pi, sizeof(pi));
      used += CMSG_SPACE(sizeof(pi));
    } else {
      in6_pktinfo pi{};
      std::memcpy(&pi.ipi6_addr, src->b, 16);
      c->cmsg_level = IPPROTO_IPV6;
      c->cmsg_type = IPV6_PKTINFO;
      c->cmsg_len = CMSG_LEN(sizeof(pi));
      std::memcpy(CMSG_DATA(c), &pi, sizeof(pi));
      used += CMSG_SPACE(sizeof(pi));
    }
  }
  h.msg_controllen = used;
}

// The iovecs of the segments tx_order[i, j) from tx_iov[at]; returns how
// many. A gathered segment's trailer is copied in front of the next
// segment's headers (kTxLead) and sent with them.
size_t UdpEndpoint::Impl::message_iov(size_t i, size_t j, size_t at) {
  const size_t first = at;
  const TxSlot* pending = nullptr;  // trailer not yet described
  for (size_t k = i; k < j; ++k) {
    const TxSlot& s = tx_slots[tx_order[k]];
    uint8_t* buf = slot_buf(tx_order[k]);
    size_t lead = 0;
    if (pending != nullptr) {
      std::memcpy(buf - kTxLead, pending->trailer, kIcrc);
      lead = kTxLead;
      pending = nullptr;
    }
    if (s.payload == nullptr) {
      tx_iov[at++] = {buf - lead, lead + s.len};
      continue;
    }
    tx_iov[at++] = {buf - lead, lead + s.hlen};
    tx_iov[at++] = {const_cast<uint8_t*>(s.payload), s.len - s.hlen - kIcrc};
    pending = &s;
  }
  if (pending != nullptr) tx_iov[at++] = {const_cast<uint8_t*>(pending->trailer), kIcrc};
  return at - first;
}

void UdpEndpoint::Impl::build_messages() {
  // Group by socket (a counting sort, stable): a path's packets of this
  // batch adjacent so that they coalesce with GSO. ACKs and NAKs form
  // groups of their own, which coalesce too and go before every socket's
  // data: the control class (ENC-6) should not wait behind a round of data
  // in the host's own queues either. Every other packet keeps its order on
  // its socket.
  std::fill(tx_bucket.begin(), tx_bucket.end(), 0);
  const auto key = [&](const TxSlot& t) { return tx_group_key(t.ack, t.sock, ecount); };
  for (size_t i = 0; i < tx_count; ++i) ++tx_bucket[key(tx_slots[i]) + 1u];
  for (size_t k = 1; k < tx_bucket.size(); ++k) tx_bucket[k] += tx_bucket[k - 1];
  for (size_t i = 0; i < tx_count; ++i)
    tx_order[tx_bucket[key(tx_slots[i])]++] = static_cast<uint32_t>(i);
  tx_msg_count = 0;
  size_t i = 0;
  size_t niov = 0;
  while (i < tx_count) {
    const TxSlot& first = tx_slots[tx_order[i]];
    size_t j = i + 1;
    size_t bytes = first.len;
    if (gso.load(std::memory_order_relaxed) &&
        (gso_refused.empty() || !gso_refused.contains(first.peer))) {
      while (j < tx_count && j - i < kGsoMaxSegments) {
        const TxSlot& s = tx_slots[tx_order[j]];
        if (s.sock != first.sock || !(s.peer == first.peer) || s.dscp != first.dscp ||
            s.len > first.len || bytes + s.len > kGsoMaxBytes)
          break;
        bytes += s.len;
        ++j;
        if (s.len < first.len) break;  // a shorter segment ends the run
      }
    }
    const size_t m = tx_msg_count++;
    msghdr& h = tx_msgs[m].msg_hdr;
    h = msghdr{};
    // A wildcard-bound endpoint answers from the address the peer reached
    // (Impl::wild); a socket connected from that address already needs no
    // cmsg, which would cost the kernel a route lookup per message.
    const LocalIp* src = wild ? source_for(first.peer) : nullptr;
    bool connected = connected_to(first.sock, first.peer);
    if (src != nullptr && connected && tx_src[first.sock] == *src) src = nullptr;
    // The address only where the message names it, or the socket is yet to
    // be connected: most messages leave on a socket connected to their peer.
    if (!connected || src != nullptr) {
      socklen_t alen = 0;
      if (!to_sockaddr(first.peer, family, tx_addr[m], alen, scope)) {
        // e.g. an IPv6 peer on an IPv4 endpoint: nothing to send it on.
        io.tx_errors += j - i;
        --tx_msg_count;
        i = j;
        continue;
      }
      if (!connected) {
        connected = use_connected(first.sock, first.peer, tx_addr[m], alen);
        if (src != nullptr && connected && tx_src[first.sock] == *src) src = nullptr;
      }
      if (!connected || src != nullptr) {
        h.msg_name = &tx_addr[m];
        h.msg_namelen = alen;
      }
    }
    h.msg_iov = &tx_iov[niov];
    niov += message_iov(i, j, niov);
    h.msg_iovlen = static_cast<size_t>(&tx_iov[niov] - h.msg_iov);
    tx_msg_sock[m] = first.sock;
    tx_msg_segs[m] = static_cast<uint32_t>(j - i);
    tx_msg_first[m] = static_cast<uint32_t>(i);
    set_control(h, m, j - i > 1 ? static_cast<uint16_t>(first.len) : 0, first, src);
    i = j;
  }
  tx_msg_next = 0;
}

// Messages left unsent when a round ends (a full socket buffer) must not
// point into the application's memory any more: once progress() returns it
// may reuse a buffer whose request completed (the packet may be a
// retransmission). Copy them whole into tx_whole; rare. A message may be
// left over more than one round: its copied slots are not copied again.
void UdpEndpoint::Impl::materialize_pending() {
  for (size_t m = tx_msg_next; m < tx_msg_count; ++m) {
    msghdr& h = tx_msgs[m].msg_hdr;
    iovec* out = h.msg_iov;  // rewritten in place: never more iovecs than before
    size_t n = 0;
    for (uint32_t k = 0; k < tx_msg_segs[m]; ++k) {
      const uint32_t slot = tx_order[tx_msg_first[m] + k];
      TxSlot& s = tx_slots[slot];
      if (s.payload != nullptr) {
        uint8_t* whole = whole_buf(slot);
        const size_t plen = s.len - s.hlen - kIcrc;
        std::memcpy(whole, slot_buf(slot), s.hlen);
        std::memcpy(whole + s.hlen, s.payload, plen);
        std::memcpy(whole + s.hlen + plen, s.trailer, kIcrc);
        s.payload = nullptr;
        s.copied = true;
        ++io.tx_materialized;
      }
      out[n++] = {s.copied ? whole_buf(slot) : slot_buf(slot), s.len};
    }
    h.msg_iovlen = n;
  }
}

// Sends built messages; false if a socket buffer was full: that socket's
// messages wait, in their order, and every other socket's went (end_flush).
// io_uring pays where a round spans sockets (one submission instead of a
// sendmmsg per socket); a round on one socket (a latency-bound exchange, a
// receiver's ACKs) takes the one sendmmsg call, without the ring's own cost:
// about 0.5 us of an 8-byte WRITE's round trip (BENCHMARKS.md, section 3).
bool UdpEndpoint::Impl::flush() {
  if constexpr (tsan::kEnabled)
    for (size_t m = tx_msg_next; m < tx_msg_count; ++m)
      tsan::sent_to(tx_slots[tx_order[tx_msg_first[m]]].peer);
  if (ring == nullptr) return flush_sendmmsg();
  const uint16_t sock = tx_msg_sock[tx_msg_next];
  for (size_t m = tx_msg_next + 1; m < tx_msg_count; ++m)
    if (tx_msg_sock[m] != sock) return flush_uring();
  return flush_sendmmsg();
}

// Test hooks (loopback never fills a socket buffer, and its device always
// segments): METAROCE_UDP_FAULT_EAGAIN=N makes every Nth send (a sendmmsg
// call, or one message of an io_uring submission) meet a full buffer;
// METAROCE_UDP_FAULT_GSO=N makes every GSO message from the Nth on fail as
// from a device that refuses to segment it (EIO);
// METAROCE_UDP_FAULT_GSO_EINVAL_PORT=P every GSO message to a peer at port P
// as on a route that cannot take it (EINVAL); METAROCE_UDP_FAULT_FULL_SOCKET=K:N
// makes send socket K (the block's Kth port, from 0) meet a full buffer on its
// next N sends, while the other sockets' buffers have room;
// METAROCE_UDP_FAULT_ICMP=E:N makes the next N sends on send sockets
// connected to a peer fail with errno E, as a fatal ICMP error that came
// back for that peer would (two in a row: the retry meets one too), and
// METAROCE_UDP_FAULT_REFUSED=N with ECONNREFUSED (port unreachable).
// Returns the errno, or 0.
bool UdpEndpoint::Impl::eagain_fault() {
  return fault_eagain_every != 0 && ++fault_calls % fault_eagain_every == 0;
}
bool UdpEndpoint::Impl::full_socket_fault(uint16_t sock) {
  if (fault_full_left == 0 || sock != fault_full_sock) return false;
  --fault_full_left;
  return true;
}
int UdpEndpoint::Impl::icmp_fault(uint16_t sock) {
  if (fault_icmp_left == 0 || tx_peer[sock].len == 0) return 0;
  --fault_icmp_left;
  return fault_icmp_err;
}
int UdpEndpoint::Impl::gso_fault(size_t m) {
  if (tx_msg_segs[m] <= 1) return 0;
  if (fault_gso_from != 0 && ++fault_gso_msgs >= fault_gso_from) return EIO;
  if (fault_gso_port != 0 &&
      address_port(tx_slots[tx_order[tx_msg_first[m]]].peer) == fault_gso_port)
    return EINVAL;
  return 0;
}

// A send that failed with err may have failed for an earlier datagram: a
// connected socket keeps the fatal ICMP error for one (port unreachable as
// ECONNREFUSED, admin prohibited or host unreachable as EHOSTUNREACH, net
// unreachable, frag needed as EMSGSIZE, ...) and any socket the error of a
// sendmmsg that sent some messages first (the kernel keeps it for the next
// call), and reports it once, on the next send, whatever its peer; that send
// did not go out. So a failed message is tried again, once, before it is
// dropped and its peer blamed; a full buffer or EINTR is no such error.
bool UdpEndpoint::Impl::stale_error(int err) { return !buffer_full(err) && err != EINTR; }

// A stale error on a connected send socket is, for these errnos, the fatal
// ICMP error that its peer's host, or a router or firewall on the way, sent
// back for an earlier datagram (the kernel matches one to a connected socket
// only by its peer): port unreachable (ECONNREFUSED), a firewall's REJECT
// (host, network or communication administratively prohibited: EHOSTUNREACH,
// ENETUNREACH, EACCES over IPv6), ... Kept for that peer as its last failure,
// unless a send that failed outright says more: the same errno from a send's
// own failure (no route) fails its retry too, and drop_failed keeps that.
// Only ECONNREFUSED was kept, and a firewall's refusal read as a silent peer.
// (EMSGSIZE, frag needed, is no refusal: the route's MTU is the PMTU's.)
bool UdpEndpoint::Impl::icmp_refusal(int err) {
  switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EACCES:
    case EHOSTDOWN:
    case ENONET:
    case ENOPROTOOPT:
    case EPROTO: return true;
    default: return false;
  }
}
void UdpEndpoint::Impl::note_refused(uint16_t sock, int err) {
  if (!icmp_refusal(err) || tx_peer[sock].len == 0) return;
  const PeerAddr& peer = tx_peer[sock];
  if (const auto it = send_failed.find(peer); it != send_failed.end() && !it->second.icmp) return;
  keep_failure(peer, SendFailure{err, "ICMP", true});
}

// A connected send socket keeps its peer host's ICMP port unreachable
// (sk_err) until its next send reports it (note_refused), and one that never
// sends again never reports it: a connect's requests leave from a socket each
// (CONN-2), so with 8 paths the refusal of each went unseen and the failed
// connect read as a silent peer's. Read, and so cleared, with SO_ERROR on each
// send socket connected to `peer` when a connection to it ends in error (kept
// as a refusal, as a send would have) and when one is established (dropped: it
// answered since, and a refusal a later send met would blame it wrongly). A
// getsockopt per socket connected to the peer, per connection, never per packet.
void UdpEndpoint::Impl::take_refusals(const PeerAddr& peer, bool keep) {
  if (peer.len == 0) return;
  for (size_t s = 0; s < tx_peer.size(); ++s) {
    if (!(tx_peer[s] == peer)) continue;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(tx_fds[s], SOL_SOCKET, SO_ERROR, &err, &len) == 0 && keep)
      note_refused(static_cast<uint16_t>(s), err);
  }
}

// Message m's datagrams one call each, without UDP_SEGMENT; returns how many
// went, and err the errno of the first that did not.
size_t UdpEndpoint::Impl::send_unsegmented(size_t m, int& err) {
  msghdr h = tx_msgs[m].msg_hdr;
  constexpr size_t kSegCmsg = CMSG_SPACE(sizeof(uint16_t));  // first, where set (set_control)
  if (h.msg_controllen > kSegCmsg) {
    h.msg_control = static_cast<uint8_t*>(h.msg_control) + kSegCmsg;
    h.msg_controllen -= kSegCmsg;
  } else {
    h.msg_control = nullptr;
    h.msg_controllen = 0;
  }
  for (uint32_t k = 0; k < tx_msg_segs[m]; ++k) {
    const uint32_t slot = tx_order[tx_msg_first[m] + k];
    TxSlot& s = tx_slots[slot];
    iovec iov[3];
    size_t n = 0;
    if (s.payload == nullptr) {
      iov[n++] = {s.copied ? whole_buf(slot) : slot_buf(slot), s.len};
    } else {
      iov[n++] = {slot_buf(slot), s.hlen};
      iov[n++] = {const_cast<uint8_t*>(s.payload), s.len - s.hlen - kIcrc};
      iov[n++] = {s.trailer, kIcrc};
    }
    h.msg_iov = iov;
    h.msg_iovlen = n;
    ++io.tx_syscalls;
    if (::sendmsg(sock_fd(tx_msg_sock[m]), &h, MSG_DONTWAIT) < 0) {
      err = errno;
      return k;
    }
    ++io.tx_datagrams;
  }
  return tx_msg_segs[m];
}

// Message m could not be sent (errno err, not a full buffer): it is dropped
// and the engine retransmits its packets. A GSO message the device cannot
// segment (EIO: no checksum offload; EOPNOTSUPP) turns GSO off for good. One
// the route refused (EINVAL: its path MTU fell below a segment with headers,
// or a PKTINFO source is no longer local) says nothing of other peers' routes:
// that peer's messages go without GSO from now on (until its last connection
// ends, forget_source) and this one's datagrams go now, one by one. Otherwise
// the error is kept for the peer, so that a connection that fails for it says
// so (Impl::send_failed).
void UdpEndpoint::Impl::drop_failed(size_t m, int err, const char* call) {
  const PeerAddr& peer = tx_slots[tx_order[tx_msg_first[m]]].peer;
  size_t sent = 0;
  if (tx_msg_segs[m] > 1 && (err == EIO || err == EOPNOTSUPP)) {
    io.tx_errors += tx_msg_segs[m];
    gso.store(false, std::memory_order_relaxed);
    return;
  }
  if (tx_msg_segs[m] > 1 && err == EINVAL) {
    if (gso_refused.size() >= kMaxPeerSources) gso_refused.clear();  // bounded as send_failed
    try {
      gso_refused.insert(peer);
    } catch (const std::bad_alloc&) {
      // Unrecorded, short of memory: the next GSO message to the peer fails
      // the same way and comes here again.
    }
    sent = send_unsegmented(m, err);
    if (sent == tx_msg_segs[m]) return;
  }
  io.tx_errors += tx_msg_segs[m] - sent;
  if (buffer_full(err)) return;  // (while sending unsegmented): the engine retransmits
  // A send never fails ECONNREFUSED by itself: on a connected socket it is
  // always an ICMP port unreachable for the socket's peer, here met by the
  // retry too (another datagram of the socket drew one since). Kept as that
  // refusal: kept as this send's own failure, it read "sendmmsg: Connection
  // refused", and outlived the refusals that later sends met (note_refused
  // keeps an outright failure).
  if (const uint16_t sock = tx_msg_sock[m]; err == ECONNREFUSED && tx_peer[sock].len != 0) {
    note_refused(sock, err);
    return;
  }
  keep_failure(peer, SendFailure{err, call});
}

// Peer's last failure, for the errors that name it. Bounded as peer_src is
// (note_source): replies to junk from many addresses may fail too, and
// nothing else ends their entries. Short of memory for a new peer's entry,
// the failure goes unrecorded: an error message then says less of why, and
// nothing escapes the round.
void UdpEndpoint::Impl::keep_failure(const PeerAddr& peer, const SendFailure& f) {
  if (send_failed.size() >= kMaxPeerSources && send_failed.find(peer) == send_failed.end())
    send_failed.clear();
  try {
    send_failed[peer] = f;
  } catch (const std::bad_alloc&) {
  }
}

void UdpEndpoint::Impl::count_sent(size_t m) {
  io.tx_datagrams += tx_msg_segs[m];
  if (tx_msg_segs[m] > 1) ++io.tx_gso_msgs;
}

void UdpEndpoint::Impl::reset_tx() {
  tx_count = 0;
  tx_msg_count = 0;
  tx_msg_next = 0;
}

// A new flush: no socket is held yet.
void UdpEndpoint::Impl::begin_flush() {
  if (++tx_flush_gen == 0) {  // wrapped: stamps of 2^32 flushes ago would match
    std::fill(tx_sock_held.begin(), tx_sock_held.end(), 0);
    tx_flush_gen = 1;
  }
}

// Message m waits for the next flush: moved to position `kept` (never after
// m, so the messages still to send are untouched), which keeps the order of
// the messages kept. Its iovecs, address and control stay where they are:
// nothing builds messages until every kept one has gone.
void UdpEndpoint::Impl::keep_msg(size_t m, size_t& kept) {
  if (kept != m) {
    tx_msgs[kept] = tx_msgs[m];
    tx_msg_sock[kept] = tx_msg_sock[m];
    tx_msg_segs[kept] = tx_msg_segs[m];
    tx_msg_first[kept] = tx_msg_first[m];
  }
  ++kept;
}

// The flush is over: the `kept` messages moved to the front (keep_msg) wait
// for the next; false if there are any.
bool UdpEndpoint::Impl::end_flush(size_t kept) {
  if (kept == 0) {
    reset_tx();
    return true;
  }
  ++io.tx_eagain;
  tx_msg_next = 0;
  tx_msg_count = kept;
  return false;
}

// One sendmmsg per socket's run of messages. One that meets a full buffer
// holds its socket's messages, this run's and any later one's (a socket's
// ACKs and its data are separate runs, tx_group_key), which wait in order;
// the other sockets' runs still go: one full socket buffer held them all.
bool UdpEndpoint::Impl::flush_sendmmsg() {
  begin_flush();
  size_t kept = 0;
  bool refused = false;  // the last call's error may have been stale: tried again
  size_t m = tx_msg_next;
  while (m < tx_msg_count) {
    const uint16_t sock = tx_msg_sock[m];
    size_t end = m + 1;
    // (Under the GSO test hook one message per call, so that it counts each.)
    while (end < tx_msg_count && tx_msg_sock[end] == sock && fault_gso_from == 0 &&
           fault_gso_port == 0)
      ++end;
    if (sock_held(sock)) {  // behind its socket's refused message
      while (m < end) keep_msg(m++, kept);
      continue;
    }
    int r;
    int fault = 0;
    if (eagain_fault() || full_socket_fault(sock)) {
      r = -1;
      errno = EAGAIN;
    } else if ((fault = icmp_fault(sock)) != 0) {
      r = -1;
      errno = fault;
    } else if ((fault = gso_fault(m)) != 0) {
      r = -1;
      errno = fault;
    } else {
      r = sendmmsg(sock_fd(sock), &tx_msgs[m], static_cast<unsigned>(end - m), MSG_DONTWAIT);
      ++io.tx_syscalls;
    }
    if (r < 0) {
      if (buffer_full(errno)) {
        tx_sock_held[sock] = tx_flush_gen;
        while (m < end) keep_msg(m++, kept);
        refused = false;
        continue;
      }
      if (errno == EINTR) continue;
      if (stale_error(errno) && !refused) {
        note_refused(sock, errno);
        refused = true;
        continue;
      }
      drop_failed(m++, errno, "sendmmsg");  // the first message failed
      refused = false;
      continue;
    }
    for (int k = 0; k < r; ++k) count_sent(m + static_cast<size_t>(k));
    m += static_cast<size_t>(r);
    refused = false;
  }
  return end_flush(kept);
}

// One submission for every message of the round, whatever its socket. Each
// completes during the submission (MSG_DONTWAIT: a full buffer fails with
// EAGAIN instead of waiting). A socket's messages are linked, so that one
// that meets a full buffer cancels those after it on that socket: they stay,
// in their order, for the next try, and a path's packets never overtake each
// other (sendmmsg also stops at the first). The rest are done. One that
// fails otherwise (a stale ICMP error on a connected socket, say) also
// cancels those after it: they are sent here, in order, one call each.
bool UdpEndpoint::Impl::flush_uring() {
  begin_flush();
#if METAROCE_HAVE_URING
  constexpr int32_t kPending = INT32_MIN;
  unsigned queued = 0;
  io_uring_sqe* prev = nullptr;  // the last queued message's, to link to the next on its socket
  uint16_t prev_sock = 0;
  for (size_t m = tx_msg_next; m < tx_msg_count; ++m) {
    const uint16_t sock = tx_msg_sock[m];
    tx_msg_queued[m] = 0;
    // A message on a socket marked held was not submitted (a test hook, or
    // no ring entry): the later ones on that socket, in this run or a later
    // one, are not either (they are sent or kept below, in order).
    if (sock_held(sock)) {
      tx_msg_res[m] = -ECANCELED;  // as the link would have
      continue;
    }
    int fault = eagain_fault() || full_socket_fault(sock) ? EAGAIN : icmp_fault(sock);
    if (fault == 0) fault = gso_fault(m);
    if (fault != 0) {
      tx_msg_res[m] = -fault;
      tx_sock_held[sock] = tx_flush_gen;
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(ring);  // the ring holds tx_cap entries: never null
    if (sqe == nullptr) {
      tx_msg_res[m] = -EAGAIN;
      tx_sock_held[sock] = tx_flush_gen;
      continue;
    }
    if (prev != nullptr && prev_sock == sock) prev->flags |= IOSQE_IO_LINK;
    io_uring_prep_sendmsg(sqe, sock_fd(sock), &tx_msgs[m].msg_hdr, MSG_DONTWAIT);
    io_uring_sqe_set_data64(sqe, m);
    tx_msg_res[m] = kPending;
    tx_msg_queued[m] = 1;
    prev = sqe;
    prev_sock = sock;
    ++queued;
  }
  if (queued != 0) {
    // Completed during the call: the completions are read without another.
    int taken;
    do {
      taken = io_uring_submit(ring);
    } while (taken == -EINTR);
    ++io.tx_syscalls;
    unsigned seen = 0;
    while (taken > 0 && seen < static_cast<unsigned>(taken)) {
      io_uring_cqe* cqe = nullptr;
      const int r = io_uring_wait_cqe(ring, &cqe);
      if (r == -EINTR) continue;
      if (r != 0) break;
      tx_msg_res[io_uring_cqe_get_data64(cqe)] = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      ++seen;
    }
    if (taken != static_cast<int>(queued) || seen != queued) {
      // The kernel refused some (out of memory, a ring in a bad state):
      // give io_uring up and use sendmmsg from now on. What it never took
      // is left for that; what it took without a completion read back is
      // counted as sent, so that nothing goes out twice (the engine
      // retransmits whatever was not). Not seen on any kernel here.
      // The kernel takes entries in order: the first `taken` queued ones.
      int position = 0;
      for (size_t m = tx_msg_next; m < tx_msg_count; ++m) {
        if (tx_msg_queued[m] == 0) continue;
        ++position;
        if (tx_msg_res[m] == kPending) tx_msg_res[m] = position <= taken ? 0 : -EAGAIN;
      }
      release_ring();
    }
  }
#endif
  // A send here (the test hooks for GSO apply).
  auto send_now = [&](size_t m) {
    if (const int fault = icmp_fault(tx_msg_sock[m]); fault != 0) return -fault;
    if (const int fault = gso_fault(m); fault != 0) return -fault;
    ++io.tx_syscalls;
    return ::sendmsg(sock_fd(tx_msg_sock[m]), &tx_msgs[m].msg_hdr, MSG_DONTWAIT) >= 0 ? 0 : -errno;
  };
  size_t kept = 0;
  // The previous message on socket `go_sock` was done with here (sent, or
  // dropped for an error other than a full buffer): the ones its failure
  // cancelled go now, in their order, as sendmmsg goes on after such an error.
  bool go_on = false;
  uint16_t go_sock = 0;
  for (size_t m = tx_msg_next; m < tx_msg_count; ++m) {
    const uint16_t sock = tx_msg_sock[m];
    int res = tx_msg_res[m];
    if (res == -ECANCELED && go_on && go_sock == sock)
      res = eagain_fault() || full_socket_fault(sock) ? -EAGAIN : send_now(m);
    if (res < 0 && res != -ECANCELED && stale_error(-res)) {
      note_refused(sock, -res);
      res = send_now(m);
    }
    go_on = true;
    go_sock = sock;
    if (res >= 0) {
      count_sent(m);
    } else if (buffer_full(-res) || res == -ECANCELED) {  // cancelled: behind one that was
      keep_msg(m, kept);
      go_on = false;  // the rest of its socket's waits behind it
    } else {
      drop_failed(m, -res, "sendmsg");
    }
  }
  return end_flush(kept);
}

// Drains the engine into free slots, sending each full batch. Called after
// every input, or every receive call (see receive: one ACK per connection
// for a call's datagrams, ACK-1). Slots that are filled but not full wait
// for end_round().
size_t UdpEndpoint::Impl::pump_tx(TimeNs now) {
  size_t taken = 0;
  for (;;) {
    if (tx_msg_count != 0 && !flush()) return taken;  // a socket buffer is full
    const size_t before = tx_count;
    fill(now);
    taken += tx_count - before;
    if (tx_count < tx_cap) return taken;
    build_messages();
  }
}

}  // namespace metaroce::udp
