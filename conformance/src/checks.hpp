// The checks of the suite (suite.cpp lists them in spec order) and the steps
// several of them share.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>

#include "metaroce/conformance/suite.hpp"
#include "peer.hpp"

namespace metaroce::conformance {

inline Outcome fail(std::string why) { return {false, std::move(why)}; }
inline Outcome pass(std::string what = {}) { return {true, std::move(what)}; }
inline Outcome skip(std::string why) { return {true, std::move(why), true}; }

// The tester connects to the target; false with `why` if it did not answer.
bool tester_connects(Peer& peer, std::string& why, uint64_t nonce = 0xC0FFEE);
// The same, and the target registers `r` (4 KiB, REMOTE_WRITE unless told)
// for the tester's packets.
bool tester_connects_to_memory(Target& t, Peer& peer, Region& r, std::string& why,
                               uint32_t access = kAccessRemoteWrite, uint64_t length = 4096,
                               std::vector<Reply>* handshake = nullptr);
// The same with LOCAL_WRITE (unless told), and `conn` the target's side of
// the connection, on which receives are posted.
bool tester_connects_for_receives(Target& t, Peer& peer, Region& r, ConnId& conn, std::string& why,
                                  uint32_t access = kAccessLocalWrite);
// The target connects to the tester, which accepts (advertising max_reads).
// `answered`: the target's src_conns of its connections the check answered
// before (Peer::target_conn), whose requests are passed over: in real time a
// request resent before its ACCEPT arrived (a loaded host) may come with the
// new one, and once took its place (CONN-7's second connection then never
// connected).
bool target_connects(Target& t, Peer& peer, ConnId& conn, std::string& why, uint8_t max_reads = 16,
                     const std::set<uint32_t>& answered = {});
// `n` bytes counting up from `first` (wrapping at 256): data whose bytes
// show where each landed.
Bytes counting(size_t n, uint8_t first);
// The target connects to the tester twice, as `a` (`ca`) and then as `b`
// (`cb`): b's wait passes over a's request resent (`answered`).
bool target_connects_twice(Target& t, Peer& a, ConnId& ca, Peer& b, ConnId& cb, std::string& why);
// Work from the target to the tester: `op` of `len` bytes of `local`, at an
// address and key the tester makes up.
SendWr to_tester(WrOpcode op, const Region& local, uint32_t len, uint64_t wr_id);
// A WRITE from the target to the tester: `len` bytes of a registered region.
bool target_writes(Target& t, ConnId conn, uint32_t len, uint64_t wr_id, std::string& why);
// The target connects to the tester and WRITEs `len` bytes to it; `sent`
// receives what it sends in the next `ns` (200 us unless told).
bool target_connects_and_writes(Target& t, Peer& peer, uint32_t len, std::vector<Reply>& sent,
                                std::string& why, uint64_t ns = 200'000);
// The target connects to the tester and WRITEs 100 bytes (wr_id 1), left
// unacknowledged: empty once a packet of it came, else why not.
std::string target_write_outstanding(Target& t, Peer& peer);
// The first data packet of each path slot among `data`: what the target's
// paths were "at first" (a path retired since sends from a new entropy
// under a new generation, PATH-2).
std::map<uint16_t, const Reply*> first_per_slot(const std::vector<const Reply*>& data);
// Fails unless every path_tag among `data` was sent from one source port.
bool one_port_per_tag(const std::vector<const Reply*>& data, std::string& why);
// The tester's answer while it holds its cumulative ACK of the target's
// packets at `cum` (SEQ-3, MR-5): a SACK of every PSN in `got` (distances
// from cum) but cum's, echoing `echo` when given, and the same for each
// PROBE among `rs`, echoed as one: a target in real time whose first packet
// goes unacknowledged long (a loaded host) may take its paths for dead,
// probe them and wait for the answers (SEQ-3 once saw 16 packets only).
void sack_all_but_cum(Peer& p, uint32_t cum, const std::set<uint32_t>& got, const Reply* echo,
                      const std::vector<Reply>& rs);
// SEQ-3's hold: the target's data fills the tester's window (W, from
// p.window_log2) while the tester holds its cumulative ACK at `cum` and
// SACKs the rest (sack_all_but_cum), for up to 200 ms. `got` receives the
// PSNs seen (distances from cum), `echo` (when given) the latest WRITE
// packet. Empty once all W came; else why not: a PSN past the window ("PSN
// cum + n sent with cum held" and `held`), what `early` (when given) finds
// wrong in a round's replies, or too few PSNs.
std::string window_held_full(
    Target& t, Peer& p, uint32_t cum, std::set<uint32_t>& got, Reply* echo, const std::string& held,
    const std::function<std::string(const std::vector<Reply>&)>& early = nullptr);
// Each PROBE among `rs` answered with an ACK of everything before `cum`,
// echoing it (ECHO_PROBE), from the port it came from.
void answer_probes(Peer& p, std::span<const Reply> rs, uint32_t cum);
// Peer::run_until `want`, and on a target in real time each PROBE that
// comes meanwhile answered with an ACK of `cum` (acknowledging nothing the
// check has not): a target kept from its tester a while (a loaded host)
// may take its paths for dead and send nothing new until a PROBE is
// answered (PATH-4). In simulated time, run_until as it is.
template <class Want>
std::vector<Reply> run_until_answering_probes(Target& t, Peer& p, Want want, uint32_t cum,
                                              uint64_t ns = 100'000) {
  size_t seen = 0;
  return p.run_until(
      [&](const std::vector<Reply>& rs) {
        if (want(rs) || t.simulated_time()) return true;
        answer_probes(p, std::span(rs).subspan(seen), cum);
        seen = rs.size();
        return false;
      },
      ns);
}
// What the packets just sent drew, for judging that they drew nothing: one
// wait of `ns` in simulated time; on a target in real time, a wait of
// `real_ns` and one more, since an answer sent late in a wait may reach the
// tester only in the next (an agent waiting for a CPU). Judged from one
// wait, such an answer arrived during the next step's wait and was taken
// for that step's (BAD-7's check passed a target that answered unknown
// connections one wait late).
std::vector<Reply> drawn(Target& t, Peer& p, uint64_t ns = 100'000, uint64_t real_ns = 5'000'000);
// `packet`, sent from the check port, and what it drew, as above: the
// exchange() of a packet that must draw nothing.
std::vector<Reply> drawn(Target& t, Peer& p, std::span<const uint8_t> packet, uint64_t ns = 100'000,
                         uint64_t real_ns = 5'000'000);
// Sends `packet` (from check port `entropy`) and waits for the ACK that
// echoes `psn`: whether it came.
bool acknowledged(Peer& p, std::span<const uint8_t> packet, uint32_t psn,
                  uint16_t entropy = Peer::kEntropy);
// The first NAK among `rs`, or null.
const Reply* nak_of(const std::vector<Reply>& rs);
// Sends `packet` and waits for a NAK: empty if it is `code` naming `psn`
// (and `msn`, when given), else what came ("drew no NAK ...", "drew NAK
// ..., not ..."). `seen` (when given) receives everything the target sent
// meanwhile.
// With `probe_cum`, PROBEs are answered meanwhile (run_until_answering_probes).
std::string draws_nak(Peer& p, std::span<const uint8_t> packet, uint8_t code, uint32_t psn,
                      std::optional<uint32_t> msn = std::nullopt,
                      std::vector<Reply>* seen = nullptr,
                      std::optional<uint32_t> probe_cum = std::nullopt, Target* t = nullptr);
// Sends the packet `make` builds (at the peer's next PSN) on a fresh
// connection of the tester (id `conn_id`) and expects NAK `code` naming it,
// with nothing written in `r`.
Outcome expect_nak(Target& t, uint32_t conn_id, const Region& r, uint8_t code,
                   const std::function<Bytes(const Peer&)>& make);
// The same for a one-packet WRITE of `len` bytes at rkey/raddr.
Outcome expect_nak(Target& t, uint32_t conn_id, const Region& r, uint64_t rkey, uint64_t raddr,
                   uint32_t len, uint8_t code);
// BAD-*: the EndpointStats counter a malformed packet must raise (spec
// section 11's table), and the packets of it a check sends.
struct Counted {
  uint64_t EndpointStats::*field;
  const char* name;
  uint64_t n;
};
// The target's drop counters now; nullopt when it does not report them.
std::optional<EndpointStats> drop_counters(Target& t);
// After `what` was sent: why the counter did not rise by c.n since
// `before`; empty when it did, or when the target reports no counters.
std::string count_missing(Target& t, const std::optional<EndpointStats>& before, const Counted& c,
                          const std::string& what);
// What a BAD check that found nothing wrong comes to: a pass, or a skip
// when the target reported no counters (`before` nullopt) to check.
Outcome passed_counting(const std::optional<EndpointStats>& before);
// BAD-*: `send_bad` delivers a variant of a good one-packet WRITE (a
// fresh connection's first) that the target must ignore (`what` says how it
// is bad): no reply, nothing written, `counted` raised; the good one then
// lands.
Outcome ignored_then_served(Target& t, const std::string& what, const Counted& counted,
                            const std::function<void(Peer&, const Bytes& good)>& send_bad);
// PSN order is modulo 2^32 (SEQ-2): a target may start anywhere, wrap included.
inline bool psn_after(uint32_t a, uint32_t b) { return Psn{b}.before(Psn{a}); }
inline uint32_t later_psn(uint32_t a, uint32_t b) { return psn_after(b, a) ? b : a; }
constexpr uint64_t kTesterRkey = 0x1111222233334444ull;
constexpr uint64_t kTesterAddr = 0x10000;
// WRITEs from the tester into a region of the target, built packet by
// packet: a message of whole packets, each sent without AR to see which
// draw ACKs (ACK-1, ACK-4), or one-packet messages of 100 bytes, whole or
// cut short as a trimming switch cuts them (TRIM-2, TRIM-5).
struct TesterWrites {
  explicit TesterWrites(Target& target) : t(target), p(target) {}
  // Connects, registers `length` bytes and takes `psns` PSNs; what failed if not.
  std::string open(uint32_t psns, uint64_t length = 4096) {
    std::string why;
    if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite, length)) return why;
    len = psns * p.mtu;
    first = p.next_psn;
    p.next_psn += psns;
    return {};
  }
  // Packet `k` of one message over all the PSNs, without AR.
  [[nodiscard]] Bytes part(uint32_t k) const {
    return p.write_part(first + k, r.rkey, r.addr + k * p.mtu, Bytes(p.mtu, 0x4b), k * p.mtu, len,
                        false);
  }
  // One-packet message `k`, at r.addr + 128 k, with `keep` bytes of its
  // payload, naming `rkey` (the region's if 0).
  [[nodiscard]] Bytes cut(uint32_t k, size_t keep, uint64_t rkey = 0) const {
    return p.write_part(first + k, rkey != 0 ? rkey : r.rkey, r.addr + 128 * k,
                        std::span(payload).first(keep), 0, static_cast<uint32_t>(payload.size()));
  }
  Target& t;
  Peer p;
  Region r;
  uint32_t len = 0, first = 0;
  Bytes payload = Bytes(100, 0x55);
};

// wire_checks.cpp
Outcome check_enc1(Target& t);
Outcome check_enc2(Target& t);
Outcome check_enc3(Target& t);
Outcome check_enc4(Target& t);
Outcome check_enc5(Target& t);
Outcome check_enc6(Target& t);
Outcome check_int2(Target& t);
Outcome check_bad7(Target& t);
// bad_checks.cpp
Outcome check_bad4(Target& t);
Outcome check_bad8(Target& t);
Outcome check_bad1(Target& t);
Outcome check_bad2(Target& t);
Outcome check_ver1(Target& t);
Outcome check_bad3(Target& t);
Outcome check_bad5(Target& t);
Outcome check_bad6(Target& t);
// connection_checks.cpp
Outcome check_conn1(Target& t);
Outcome check_conn2(Target& t);
Outcome check_conn3(Target& t);
Outcome check_conn3_failed(Target& t);
Outcome check_conn6(Target& t);
Outcome check_conn7(Target& t);
Outcome check_seq1(Target& t);
Outcome check_conn11(Target& t);
Outcome check_conn10(Target& t);
// teardown_checks.cpp
Outcome check_conn4(Target& t);
Outcome check_conn7_close(Target& t);
Outcome check_conn7_abandoned(Target& t);
Outcome check_comp5(Target& t);
Outcome check_conn8(Target& t);
Outcome check_path7(Target& t);
Outcome check_conn9(Target& t);
// closed_checks.cpp
Outcome check_after_close(Target& t);
// data_checks.cpp
Outcome check_seq2(Target& t);
Outcome check_seq2_target(Target& t);
Outcome check_seq3(Target& t);
Outcome check_place1(Target& t);
Outcome check_ack4(Target& t);
Outcome check_ack1(Target& t);
Outcome check_ack8(Target& t);
Outcome check_seq4(Target& t);
Outcome check_seq6(Target& t);
Outcome check_ack7(Target& t);
Outcome check_probe_answered(Target& t);
// path_checks.cpp
Outcome check_sched2(Target& t);
Outcome check_path1(Target& t);
Outcome check_path2(Target& t);
// memory_checks.cpp
Outcome check_place2(Target& t);
Outcome check_mr1(Target& t);
Outcome check_mr2(Target& t);
Outcome check_mr3(Target& t);
Outcome check_mr4(Target& t);
// trim_checks.cpp
Outcome check_trim5(Target& t);
Outcome check_trim2(Target& t);
Outcome check_ack2(Target& t);
Outcome check_seq5(Target& t);
Outcome check_trim3(Target& t);
Outcome check_loss8(Target& t);
Outcome check_loss8_tail_by_send_time(Target& t);
// timing_checks.cpp
Outcome check_loss4(Target& t);
Outcome check_cc3(Target& t);
Outcome check_path3(Target& t);
Outcome check_trim4(Target& t);
Outcome check_loss5(Target& t);
Outcome check_cc1(Target& t);
Outcome check_cc2(Target& t);
Outcome check_cc6(Target& t);
// read_checks.cpp
Outcome check_read1(Target& t);
Outcome check_read2(Target& t);
Outcome check_place4(Target& t);
Outcome check_read3(Target& t);
Outcome check_read3_responder(Target& t);
Outcome check_read4(Target& t);
Outcome check_read5(Target& t);
Outcome check_mr5_waiting_read(Target& t);
Outcome check_sched4(Target& t);
// error_checks.cpp
Outcome check_nak1(Target& t);
Outcome check_nak2(Target& t);
Outcome check_nak3(Target& t);
Outcome check_nak4(Target& t);
Outcome check_loss7(Target& t);
Outcome check_loss7_read(Target& t);
Outcome check_loss7_limit(Target& t);
Outcome check_ack9(Target& t);
// receive_checks.cpp
Outcome check_place3(Target& t);
Outcome check_place5(Target& t);
Outcome check_place6(Target& t);
Outcome check_comp(Target& t);
Outcome check_comp3(Target& t);
Outcome check_mr5(Target& t);
Outcome check_mr5_read(Target& t);

}  // namespace metaroce::conformance
