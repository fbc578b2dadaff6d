// What ThreadSanitizer cannot see: the ordering a datagram carries from the
// thread that sent it to the thread that received it. The kernel orders
// them (a sendmmsg's writes happen before the recvmmsg that returns its
// datagram), but TSan models no socket, so two endpoints of one process, each
// on its own progress thread, raced in its eyes wherever one's
// application read what the other's thread wrote and learnt of it only by
// datagram: a WRITE's target memory read after the initiator's completion
// (tests/udp: Udp.GsoRefusedByOneRouteFallsBackForThatPeerOnly,
// UdpStranger.MalformedDatagramsAreCountedAndARealConnectionKeepsEveryByte).
// Each receive port is one channel, as TSan treats a pipe: a send releases
// its destination's, a receive acquires its own. Per port, not one for the
// process: an endpoint's sends do not order its own receives, so two threads
// on one endpoint without its lock (the threading contract's breach) still
// race in its eyes. Nothing outside a -fsanitize=thread build.
#pragma once

#include "metaroce/engine.hpp"

#if defined(__SANITIZE_THREAD__)
#define METAROCE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define METAROCE_TSAN 1
#endif
#endif

#ifdef METAROCE_TSAN
#include "metaroce/udp.hpp"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace metaroce::udp::tsan {
inline constexpr bool kEnabled = true;
// One byte per UDP port: only its address matters to TSan.
inline char port_channel[65536];
inline void sent_to(const PeerAddr& peer) { __tsan_release(&port_channel[address_port(peer)]); }
inline void received_on(const PeerAddr& local) {
  __tsan_acquire(&port_channel[address_port(local)]);
}
}  // namespace metaroce::udp::tsan
#else
namespace metaroce::udp::tsan {
inline constexpr bool kEnabled = false;
inline void sent_to(const PeerAddr&) {}
inline void received_on(const PeerAddr&) {}
}  // namespace metaroce::udp::tsan
#endif
