#include "metaroce/conformance/suite.hpp"

#include <algorithm>
#include <array>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

constexpr std::array kChecks = {
    Check{"ENC-1",
          "every datagram decodes as exactly one packet, its reserved bits zero, control packets' "
          "BH path_tag and psn 0; a WRITE with a byte after its ICRC is dropped",
          check_enc1},
    Check{"ENC-2",
          "every datagram goes to the peer's configured port, not to the port a packet came from",
          check_enc2},
    Check{"ENC-3",
          "a path keeps its source port, in the entropy range, paths differ; a peer may change its "
          "port",
          check_enc3},
    Check{"ENC-4", "every datagram is ECT(0); a CE-marked packet is echoed ECHO_CE", check_enc4},
    Check{"ENC-5",
          "with no UDP checksum, every data packet (each opcode) sets PC: its ICRC covers the "
          "payload",
          check_enc5},
    Check{"ENC-6", "ACK and NAK carry the control DSCP (48), every other packet DSCP 0",
          check_enc6},
    Check{"INT-2", "a WRITE with PC clear, its ICRC over the headers only, is placed", check_int2},
    Check{"BAD-4, INT-1",
          "a WRITE with a payload or header bit flipped under its ICRC, a READ_REQ, ACK, NAK, "
          "DISCONNECT or PROBE with a header bit flipped, draw nothing, change nothing; an ACK's "
          "sack_words flipped to 17 counts as a bad checksum",
          check_bad4},
    Check{"BAD-1",
          "a WRITE or an ACK shorter than its headers and ICRC, or than 20 bytes, draws nothing "
          "and changes nothing",
          check_bad1},
    Check{"BAD-2, CONN-5",
          "a WRITE or an ACK of version 2 draws nothing and changes nothing; a CONNECT_REQ of "
          "version 2 draws a version-1 CONNECT_REJECT 0x48, one of 43 bytes nothing",
          check_bad2},
    Check{"VER-1",
          "a CONNECT_REQ of version 2, 64 bytes with no ICRC or 44 with a bad one, draws the "
          "version-1 REJECT 0x48, no longer; one naming src_conn 0 or nonce 0 nothing",
          check_ver1},
    Check{"BAD-3", "a WRITE or an ACK with an unknown opcode draws nothing and changes nothing",
          check_bad3},
    Check{"BAD-5",
          "a WRITE with payload past msg_len - offset or offset past msg_len, a READ_REQ or ACK "
          "with payload, draw nothing and change nothing",
          check_bad5},
    Check{"BAD-6",
          "a READ_REQ with offset 1, an ACK with sack_words 17, a NAK with code 0 or 8 draw "
          "nothing and change nothing",
          check_bad6},
    Check{"BAD-7", "data for an unknown dst_conn draws nothing and changes nothing", check_bad7},
    Check{"BAD-8",
          "a WRITE, ACK, NAK, DISCONNECT or PROBE for a connection from another address is "
          "dropped: nothing lands, completes, fails or closes, no reply",
          check_bad8},
    Check{"CONN-1", "CONNECT_REQ fields: dst_conn 0, ids, version, fresh nonce", check_conn1},
    Check{"CONN-2",
          "an unanswered CONNECT_REQ is resent unchanged every 10 ms, 8 in all, one per path "
          "from the entropy values in turn, then kConnectTimeout",
          check_conn2},
    Check{"CONN-3", "a repeated CONNECT_REQ draws the same ACCEPT and no second connection",
          check_conn3},
    Check{"CONN-3",
          "a CONNECT_REQ repeated to the connection a bad-key WRITE failed draws CONNECT_REJECT "
          "0x02, no ACCEPT",
          check_conn3_failed},
    Check{"CONN-4",
          "a CONNECT_REJECT fails the target's connection with its code; refusing, it answers "
          "0x47, at its connection limit 0x4a",
          check_conn4},
    Check{"CONN-6", "data before the ACCEPT is dropped unacknowledged, accepted when resent",
          check_conn6},
    Check{"CONN-7",
          "a DISCONNECT from another src_conn is dropped; the peer's draws a DISCONNECT_ACK "
          "naming both ends, again when repeated, and flushes work kPeerClosed",
          check_conn7},
    Check{"CONN-7",
          "closing: work flushed at once, no data after; DISCONNECT resent every 10 ms from each "
          "path in turn until the peer's DISCONNECT_ACK, 8 in all",
          check_conn7_close},
    Check{"CONN-7",
          "ended while connecting (requests unanswered, or closed): a late ACCEPT draws one "
          "DISCONNECT, reason 0x49 or 0; one naming another nonce draws nothing",
          check_conn7_abandoned},
    Check{"CONN-8",
          "a DISCONNECT's reason decides nothing: one giving 0xee closes; closing a connection "
          "NAK 0x02 failed gives reason 0x02",
          check_conn8},
    Check{"CONN-11",
          "crossed connects, either first: both requests answered, the target's work goes on "
          "the connection it opened, the tester's on the one it accepted",
          check_conn11},
    Check{"CONN-10",
          "connected to its own address (the tester the wire between): its own request "
          "accepted, again when repeated; a WRITE between its halves lands; the close answered",
          check_conn10},
    Check{"BAD-7, CONN-7",
          "after either end closed, a WRITE, ACK, NAK or PROBE for the connection draws nothing, "
          "changes nothing, counts as for an unknown dst_conn; while closing, the same uncounted",
          check_after_close},
    Check{"SEQ-1",
          "the first PSN is the announced initial PSN; two connections' initial PSNs lie further "
          "apart than the largest window (2^10), as random ones do",
          check_seq1},
    Check{"SEQ-2",
          "WRITEs across the PSN wrap, one lost each side, are placed and acknowledged across "
          "it; a resend from before it is a duplicate",
          check_seq2},
    Check{"SEQ-2",
          "the target's own PSNs, set to start 4 below 2^32, run across the wrap on a connection "
          "it makes and one it accepts; a SACK across it completes nothing, the ACK of cum "
          "0x00000004 completes the WRITE",
          check_seq2_target},
    Check{"SEQ-3", "with cum held, no PSN at or beyond cum + W, W from the smaller window_log2",
          check_seq3},
    Check{"SEQ-5",
          "a WRITE and a READ response of 2 mtu + 1 bytes at the agreed mtu (1024, the tester's "
          "offer) take 3 consecutive PSNs, full but the last; a WRITE of no bytes one",
          check_seq5},
    Check{"PLACE-1", "a message's packets sent in reverse are each placed on arrival",
          check_place1},
    Check{"ACK-1",
          "in-order packets without AR draw one ACK per two, at once, none for the first of "
          "each pair (simulated time only)",
          check_ack1, true},
    Check{"ACK-2, ACK-6",
          "each CE-marked packet draws its own ACK at once with ECHO_CE, echoing its psn, tsval "
          "and path_tag",
          check_ack2},
    Check{"ACK-4, ACK-5",
          "an ACK at once for a message's last packet or one filling the last gap, else within "
          "ack_delay (simulated time only)",
          check_ack4, true},
    Check{"ACK-8", "the fewest SACK words covering the highest PSN: 1, 2 and 16 words", check_ack8},
    Check{"SEQ-4, ACK-3", "a duplicate draws an ECHO_DUP ACK at once; outside the window, nothing",
          check_seq4},
    Check{"SEQ-6", "a retransmission differs only in path_tag, tsval and ICRC", check_seq6},
    Check{"SCHED-2, LOSS-2, LOSS-3",
          "a packet is declared lost once 3 later packets of its path are acknowledged, not 2, "
          "and resent before new data waiting beside it, on another path (simulated time only)",
          check_sched2, true},
    Check{"SCHED-4",
          "READ responses owed and the target's own READs, both ready, take turns in its PSN "
          "space",
          check_sched4},
    Check{"ACK-7", "an ACK leaves from the source port of the packet it echoes", check_ack7},
    Check{"ACK-7",
          "a PROBE, AR set or not, draws an ACK at once from its port, echoing it with "
          "ECHO_PROBE, never ECHO_CE",
          check_probe_answered},
    Check{"PATH-1", "a connection's paths start on distinct, consecutive source ports",
          check_path1},
    Check{"PATH-2",
          "data packets carry slot | generation << 5 in path_tag: slots as PATH-1's ports, a "
          "retired path one generation on",
          check_path2},
    Check{"PLACE-2",
          "a bad key or a message range past the region (whole message, not packet) writes "
          "nothing and draws the NAK",
          check_place2},
    Check{"TRIM-2",
          "a flagged, cut WRITE draws an ACK at once with ECHO_TRIMMED and its echo fields, "
          "acknowledges and writes nothing; flagged with its payload, it is placed",
          check_trim2},
    Check{"TRIM-3",
          "an ACK echoing a WRITE with ECHO_TRIMMED has it resent at once, on another path "
          "(simulated time only)",
          check_trim3, true},
    Check{"TRIM-5",
          "with PC clear, a packet with less payload than SEQ-5 gives it, not flagged trimmed, "
          "is dropped: no reply, nothing written or received",
          check_trim5},
    Check{"MR-1", "remote keys are nonzero and distinct; a deregistered key draws NAK 0x02",
          check_mr1},
    Check{"MR-2", "work naming memory without the local right, or past it, is refused", check_mr2},
    Check{"MR-3",
          "a range that wraps past 2^64 draws NAK 0x03; one ending at the region's end "
          "is accepted",
          check_mr3},
    Check{"MR-4",
          "regions at base 0 and 2^64 - 4096: WRITE, READ, SEND and local work at base-relative "
          "addresses; past base + length NAK 0x03; a wrapping base refused",
          check_mr4},
    Check{"MR-5",
          "a SEND into a receive buffer, or a READ_RESP into a READ target, deregistered since "
          "writes nothing and draws NAK 0x07",
          check_mr5},
    Check{"MR-5",
          "a region deregistered while a READ from it is answered: no response after, NAK 0x07 "
          "naming the READ_REQ; a READ_REQ naming it then draws NAK 0x02",
          check_mr5_read},
    Check{"MR-5",
          "a READ waiting for an earlier packet (READ-5) whose region is deregistered meanwhile: "
          "once the packet lands, no response, NAK 0x07 naming the READ_REQ",
          check_mr5_waiting_read},
    Check{"LOSS-4",
          "srtt from RTT samples of 100 and 200 us: 100, then 112.5 us (simulated time only)",
          check_loss4, true},
    Check{"LOSS-5, PATH-4, SCHED-3",
          "a path dies: its packets all resent elsewhere, no data on it once it probed "
          "(SCHED-3), retired after timeouts each twice as long (simulated time only)",
          check_loss5, true},
    Check{"CC-1",
          "with no ACK, a 1 MiB WRITE's first flight is the connection's 16 packets of the "
          "agreed mtu (4096, then 1024), no more and no fewer, split over its paths",
          check_cc1},
    Check{"CC-2",
          "slow start: each flight acknowledged at once, unmarked, draws twice as many new "
          "packets (simulated time only)",
          check_cc2, true},
    Check{"CC-3, CC-4",
          "alpha starts at 1 and converges to the marked fraction of packets, not of ACKs",
          check_cc3},
    Check{"CC-6",
          "its paths pacing (cwnd below a packet under ECHO_CE), every READ response "
          "acknowledged, nothing in flight: the pacing wait's end sends the next (simulated "
          "time only)",
          check_cc6, true},
    Check{"PATH-3, LOSS-6", "an echo of an old generation acknowledges, but moves no srtt or cwnd",
          check_path3},
    Check{"TRIM-4",
          "an ECHO_TRIMMED echo cuts its path's cwnd as a CE echo does: to half at first, once "
          "per srtt",
          check_trim4},
    Check{"PLACE-3",
          "SEND, SEND_IMM and WRITE_IMM consume receive buffer msn, whatever the arrival order; "
          "a SEND past its buffer draws NAK 0x05",
          check_place3},
    Check{"PLACE-5",
          "a duplicate WRITE or SEND after the application reused its bytes is placed nowhere",
          check_place5},
    Check{"PLACE-6",
          "shared receives (where offered): oldest first, naming their connection, by RSN; "
          "empty, RNR; a closed connection's given back",
          check_place6},
    Check{"COMP-1, COMP-2",
          "a WRITE SACKed but not cumulatively acknowledged does not complete; sends and "
          "receives complete in posting order",
          check_comp},
    Check{"COMP-3",
          "a WRITE_IMM's receive completes only once the WRITE held back before it has arrived",
          check_comp3},
    Check{"COMP-5",
          "in the error state (a fatal NAK sent), every outstanding WRITE, READ and receive "
          "completes kFlushed in posting order",
          check_comp5},
    Check{"PATH-7",
          "work unacknowledged for 2 s, PROBEs answered, fails kPeerUnreachable: the oldest "
          "request with it, the rest kFlushed",
          check_path7},
    Check{"CONN-9",
          "an idle connection PROBEs its silent peer after keepalive, quiet once answered; "
          "unanswered, the PROBEs space out and it fails kPeerUnreachable at the peer timeout",
          check_conn9},
    Check{"NAK-1",
          "a duplicate with a bad key is acknowledged, one out of the window dropped: no NAK",
          check_nak1},
    Check{"NAK-2", "after a fatal NAK every data packet draws the same NAK and writes nothing",
          check_nak2},
    Check{"NAK-3",
          "a fatal NAK completes its WR with the code, later ones kFlushed; then no data goes out",
          check_nak3},
    Check{"NAK-4",
          "RNR is not fatal: a SEND refused RNR lands once resent after a receive is posted; "
          "one that drew RNR is resent",
          check_nak4},
    Check{"LOSS-7",
          "a SEND refused RNR goes again rnr_retry (100 us) after the NAK, nothing before it, a "
          "SEND posted meanwhile after it (simulated time only)",
          check_loss7, true},
    Check{"LOSS-7",
          "READ responses, new and resent, go on in an RNR pause: one echoed ECHO_TRIMMED is "
          "resent within 20 us, the refused SEND still after rnr_retry (simulated time only)",
          check_loss7_read, true},
    Check{"LOSS-7, NAK-4",
          "rnr_retry_limit 3: a SEND refused RNR each time goes 4 times, then completes "
          "kRnrRetryExceeded, the next kFlushed, the tester told nothing; 0: resent after 20",
          check_loss7_limit},
    Check{"LOSS-8",
          "one path's packets left unacknowledged, the rest acknowledged: a PROBE on that "
          "path and its oldest packet again on another, before the RTO (simulated time only)",
          check_loss8, true},
    Check{"LOSS-8",
          "the newest PSN acknowledged, one path left with a resend sent after it: that resend "
          "waits for its own timer, not a quarter round trip (simulated time only)",
          check_loss8_tail_by_send_time, true},
    Check{"ACK-9", "ACKs have PSN 0; an ACK of PSNs never sent is ignored, echo included",
          check_ack9},
    Check{"READ-1",
          "two READs' READ_REQ fields, read sequence 0 then 1; each completes with its response "
          "placed",
          check_read1},
    Check{"READ-2",
          "READ_RESPs in the responder's PSN space; bad key, right, bounds or msg_len above "
          "2^31 draw NAK 0x02, 0x04, 0x03, 0x06",
          check_read2},
    Check{"PLACE-4",
          "a READ_RESP past its READ's length, for no outstanding READ, or not its segment "
          "(no bytes at offset = msg_len, a piece at offset 50) is dropped unacknowledged, "
          "nothing written",
          check_place4},
    Check{"READ-3", "no more READs outstanding than the peer's max_reads, 0 taken as 1",
          check_read3},
    Check{"READ-3",
          "the responder: 4 x its max_reads READ_REQs queued, max_reads of them unanswered, the "
          "next draws NAK 0x06",
          check_read3_responder},
    Check{"READ-4", "a duplicate READ_REQ is acknowledged, not answered again", check_read4},
    Check{"READ-5", "a READ is answered only once every earlier packet has arrived", check_read5},
};

// The spec's rules that no check names (conformance.coverage keeps this
// list, --list and section 12 in step).
constexpr std::string_view kNoPeerTest =
    "its tests in section 12 are codec, engine or fabric ones, run on the reference "
    "implementation (the property tests, the simulator)";
// No rule is one at present (ENC-2 was, until its check); kept for the next.
[[maybe_unused]] constexpr std::string_view kNotYet =
    "section 12 names a peer test for it, which this suite does not have yet "
    "(conformance/README.md, \"Not yet here\")";
constexpr std::array kUnchecked = {
    Unchecked{"CC-5", false, kNoPeerTest},   Unchecked{"CC-7", false, kNoPeerTest},
    Unchecked{"CC-8", false, kNoPeerTest},   Unchecked{"CC-9", false, kNoPeerTest},
    Unchecked{"COMP-4", false, kNoPeerTest}, Unchecked{"LOSS-1", false, kNoPeerTest},
    Unchecked{"MR-6", false, kNoPeerTest},   Unchecked{"PATH-5", false, kNoPeerTest},
    Unchecked{"PATH-6", false, kNoPeerTest}, Unchecked{"PATH-8", false, kNoPeerTest},
    Unchecked{"READ-6", false, kNoPeerTest}, Unchecked{"SCHED-1", false, kNoPeerTest},
    Unchecked{"TRIM-1", false, kNoPeerTest}, Unchecked{"SCHED-5", false, kNoPeerTest},
};

bool names(std::string_view list, std::string_view rule) {
  for (size_t at = list.find(rule); at != std::string_view::npos; at = list.find(rule, at + 1)) {
    const size_t end = at + rule.size();
    if ((at == 0 || list[at - 1] == ' ') && (end == list.size() || list[end] == ',')) return true;
  }
  return false;
}

// `list`'s rule IDs ("LOSS-5, PATH-4, SCHED-3").
std::vector<std::string_view> split_rules(std::string_view list) {
  std::vector<std::string_view> out;
  while (!list.empty()) {
    const size_t end = std::min(list.find(','), list.size());
    out.push_back(list.substr(0, end));
    list.remove_prefix(std::min(end + 2, list.size()));  // ", "
  }
  return out;
}

bool names_any(std::string_view list, std::span<const std::string> rules) {
  if (rules.empty()) return true;
  for (const std::string& r : rules)
    if (names(list, r)) return true;
  return false;
}

}  // namespace

std::span<const Check> checks() { return kChecks; }
std::span<const Unchecked> unchecked() { return kUnchecked; }

bool any_check_names(std::string_view rule) {
  if (rule.empty()) return true;
  for (const Check& c : kChecks)
    if (names(c.rule, rule)) return true;
  return false;
}

const Unchecked* find_unchecked(std::string_view rule) {
  for (const Unchecked& u : kUnchecked)
    if (u.rule == rule) return &u;
  return nullptr;
}

std::string_view unchecked_kind(const Unchecked& u) {
  return u.peer_test ? "not yet" : "no peer test";
}

std::string unchecked_refusal(const Unchecked& u) {
  std::string s = "no check names rule ";
  s.append(u.rule).append(" (").append(unchecked_kind(u)).append("): ").append(u.why);
  return s;
}

RealTimeCover real_time_cover(std::string_view rule) {
  size_t naming = 0, simulated = 0;
  for (const Check& c : kChecks)
    if (names(c.rule, rule)) {
      ++naming;
      simulated += c.simulated_only;
    }
  if (simulated == 0) return RealTimeCover::kFull;
  return simulated == naming ? RealTimeCover::kNone : RealTimeCover::kInPart;
}

std::vector<std::string_view> checked_rules() {
  std::vector<std::string_view> out;
  for (const Check& c : kChecks)
    for (const std::string_view r : split_rules(c.rule))
      if (std::ranges::find(out, r) == out.end()) out.push_back(r);
  return out;
}

Unverified unverified(std::span<const Result> results) {
  // Per rule, in the order first named: checks among `results`, and of
  // those skipped for want of simulated time.
  std::vector<std::pair<std::string_view, std::pair<size_t, size_t>>> rules;
  for (const Result& r : results)
    for (const std::string_view rule : split_rules(r.check->rule)) {
      auto it = std::ranges::find(rules, rule, [](const auto& e) { return e.first; });
      if (it == rules.end()) it = rules.insert(rules.end(), {rule, {0, 0}});
      ++it->second.first;
      it->second.second += r.check->simulated_only && r.outcome.skipped;
    }
  Unverified out;
  for (const auto& [rule, n] : rules)
    if (n.second != 0) (n.second == n.first ? out.none : out.in_part).emplace_back(rule);
  return out;
}

std::vector<Result> run(const std::function<std::unique_ptr<Target>()>& make, std::string_view rule,
                        Abort* aborted, const std::function<void(const Result&)>& on_result) {
  std::vector<std::string> rules;
  if (!rule.empty()) rules.emplace_back(rule);
  return run_rules(make, rules, aborted, on_result);
}

std::vector<Result> run_rules(const std::function<std::unique_ptr<Target>()>& make,
                              std::span<const std::string> rules, Abort* aborted,
                              const std::function<void(const Result&)>& on_result) {
  std::vector<Result> out;
  Abort stop;
  for (const Check& c : kChecks) {
    if (!names_any(c.rule, rules)) continue;
    if (stop.check != nullptr) {
      stop.not_run.push_back(&c);
      continue;
    }
    std::unique_ptr<Target> t = make();
    stop = {&c, t ? std::string() : "it could not be opened", t != nullptr, {}};
    if (t) {
      // One place decides it, so that --list's "(simulated time only)" and
      // the README's list of such checks cannot drift from what skips.
      Outcome o = c.simulated_only && !t->simulated_time()
                      ? skip("needs a target with simulated time")
                      : c.run(*t);
      stop.why = t->lost();
      if (!o.passed && !o.skipped && !t->last_error().empty())
        o.detail += " (the agent's last error: " + t->last_error() + ")";
      if (stop.why.empty()) {
        stop.check = nullptr;
        out.push_back({&c, std::move(o)});
        if (on_result) on_result(out.back());
      }
    }
  }
  if (aborted != nullptr && stop.check != nullptr) *aborted = std::move(stop);
  return out;
}

}  // namespace metaroce::conformance
