// What the server and the client share: the options both take, the idle
// policy of their loops, control-message exchange and the I/O report.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "control.hpp"
#include "metaroce/udp.hpp"
#include "traffic.hpp"

namespace metaroce::perf {

// Exit statuses, as metaroce-conform's: 1 says the test ran and went wrong
// (a verdict, as a failed check is), 2 that nothing ran or its report was
// lost (a bad command line, no server, a refusal, stdout full). They used to
// be 1 for a test that could not start and 2 for one that went wrong, so a
// script could not tell a typo from a failed test.
inline constexpr int kExitTestFailed = 1;
inline constexpr int kExitNothingRan = 2;

// Signals seen: the first stops posting and drains, a second gives up.
extern volatile std::sig_atomic_t g_stop;

inline double dbl(uint64_t v) { return static_cast<double>(v); }

// What a loop does when a round moved nothing. --busy: poll again at once
// (lowest latency with a core per process). Otherwise: poll again after
// sched_yield() until spin_us passed without activity, then sleep on the
// endpoint's epoll fd until a datagram or an engine timer arrives. Sleeping
// gives the core back when the two ends share cores with each other or with
// other work; yielding matters because once one end sleeps, the kernel tends
// to wake the other onto the same core (wake-affine), where a spinning
// process would make every round trip wait out its peer's spin.
// A yield that returns late found the core shared: another task ran. Then
// the loop sleeps at once whenever idle, for kSharedFor, before it tries a
// yield again. On a loaded host a yield hands a slice to every other task,
// while a sleeper is woken by its next datagram ahead of them; on a pair of
// otherwise idle cores a yield returns at once and the loop keeps polling,
// which spares its peer a wake-up per burst.
struct Idler {
  static constexpr auto kSharedYield = std::chrono::microseconds(50);
  static constexpr auto kSharedFor = std::chrono::milliseconds(100);
  bool busy = false;
  Clock::duration spin{};
  bool idle = false;
  Clock::time_point since{};
  Clock::time_point shared_until{};

  void step(udp::UdpEndpoint& ep, bool active, Clock::time_point now);
};

// The ranges of the options both ends take (main.cpp rejects a value outside
// them), where they are narrower than the engine's own (config.hpp's
// config_error, which open() applies).
inline constexpr uint32_t kMaxAckEvery = 64;
// Below the longest RTO (LOSS-5, 100 ms) a connection fails before its
// retransmissions have run their course; 0 failed it at once.
inline constexpr uint32_t kMinPeerTimeoutMs = 100, kMaxPeerTimeoutMs = 3'600'000;
inline constexpr uint32_t kMaxMinRtoUs = 100'000;  // max_rto (LOSS-5): a longer min_rto acts as it
inline constexpr uint32_t kMaxTargetDelayUs = 1'000'000;
inline constexpr uint32_t kMaxSpinUs = 1'000'000;
// --rnr-retry-limit: the engine's own range (LOSS-7), 0 (unlimited) to
// 65534; the engine refuses 65535 at open, which would come after the
// command line.
inline constexpr uint32_t kMaxRnrRetryLimit = 65'534;
// --connect-timeout-ms: how long a client asks for its connection, one
// request every connect_retry (CONN-2, 10 ms): one request at the least, the
// engine's 65,535 at the most.
inline constexpr uint32_t kDefaultConnectTimeoutMs = 500;
inline constexpr uint32_t kMinConnectTimeoutMs = 10, kMaxConnectTimeoutMs = 655'350;

struct Common {
  uint16_t mtu = 4096;
  uint32_t paths = 8;
  uint32_t entropy_count = 64;
  uint16_t entropy_base = 0;
  uint32_t peer_timeout_ms = 2000;
  uint32_t rnr_retry_limit = 0;  // LOSS-7, NAK-4; 0: unlimited, the engine's default
  bool no_gso = false, no_gro = false;
  bool no_cc = false;
  bool payload_crc = false;
  int cpu = -1;                  // pin the process to this CPU (-1: no)
  uint32_t ack_every = 0;        // engine ack_every (ACK-1); 0: the engine default
  uint32_t min_rto_us = 0;       // LOSS-4 min_rto; 0: the driver's default
  uint32_t target_delay_us = 0;  // CC-5 target queue delay; 0: the driver's default
  int64_t explore_ms = -1;       // PATH-8 interval; 0: off, negative: the engine's default
  bool busy = false;             // never sleep: poll the sockets continuously
  uint32_t spin_us = 50;         // otherwise poll this long before sleeping
  uint32_t control_dscp = kDefaultControlDscp;  // ENC-6: ACKs and NAKs
  uint32_t data_dscp = 0;                       // ENC-6: every other packet
  Idler idler() const;
};

udp::Options make_options(const Common& c);

// The connection requests that wait `timeout_ms`, `retry_ns` apart (rounded
// up: the wait is never shorter than asked), within the engine's range.
uint32_t connect_attempts_for(uint32_t timeout_ms, uint64_t retry_ns);
// A failed connect as a metaroce-perf user reads it: the driver's "timed
// out after T ms" (T this timeout) names no count of requests, nor the option
// that waits longer; it says the wait, the requests and --connect-timeout-ms
// instead, keeping the rest (the peer, what its host answered, the status).
// A timeout worded otherwise gets the option added; other failures are left
// as they are.
std::string connect_error_text(const udp::Error& e, uint32_t timeout_ms);

// A control message on its way out: its encoded bytes, registered while the
// send is in flight.
struct CtrlOut {
  uint8_t bytes[kCtrlBytes] = {};
  MemoryRegion mr;
  udp::UdpEndpoint* ep = nullptr;
  CtrlOut() = default;
  CtrlOut(const CtrlOut&) = delete;
  CtrlOut& operator=(const CtrlOut&) = delete;
  ~CtrlOut();
};
udp::Error send_ctrl(udp::UdpEndpoint& ep, ConnId conn, const Ctrl& m, CtrlOut& out, uint64_t id);
udp::Error send_path_report(udp::UdpEndpoint& ep, ConnId conn, const PathReport& r, CtrlOut& out,
                            uint64_t id);

// Waits for the next control message on the sink, driving the endpoint and
// feeding other completions to the generator (if any). Gives up after `to`,
// or once g_stop has counted `give_up_at` signals: the server stops at the
// first, a client at the second (its first stops posting, and the client
// still collects the server's Result, as main.cpp promises).
// `silence` (0: none) gives up sooner, once nothing has arrived from the
// peer for that long: the engine's peer timeout (PATH-7) covers only a
// connection with something outstanding, and an end that waits for an
// answer whose request the peer acknowledged has nothing (a server killed
// after the client's Done: the client waited out `to`, 10 s). `why`, when
// given, says why it gave up: the connection's end, the silence, the time.
// `end`, when given, says which of those it was, for a caller that words
// it itself; a failed control message is then left to it (without `end` it
// is printed on stderr).
struct CtrlWaitEnd {
  enum class Kind { kSignal, kTimeout, kSilence, kCtrlFailed, kConnEnded };
  Kind kind = Kind::kTimeout;
  Status failed = Status::kOk;  // kCtrlFailed: the failed control message's status
};
// A server's other connections, while it waits for one's message:
// `after_round` runs after every round (the connections the round
// established take their Hello receives), `claim` sees every completion
// first (true: one of theirs).
struct Bystanders {
  std::function<void()> after_round;
  std::function<bool(const Completion&)> claim;
};
bool wait_ctrl(udp::UdpEndpoint& ep, Sink& sink, Generator* gen, Ctrl& out,
               std::chrono::milliseconds to, int give_up_at = 1,
               std::chrono::milliseconds silence = std::chrono::milliseconds(0),
               std::string* why = nullptr, CtrlWaitEnd* end = nullptr,
               const Bystanders* others = nullptr);
// Why a client's Hello got no HelloAck, as its error says it. "no answer"
// only for a server that stayed silent (or a signal); a Hello the server
// refused at the transport (a NAK: its receive too short, say), a
// connection that ended, a control message other than a HelloAck each say
// so, as does data that no metaroce-perf server sends before its HelloAck
// (`stray` messages, `stray_bytes` bytes: another program at that port).
// All of these used to read "no answer from server".
struct HelloOutcome {
  bool waited = false;     // wait_ctrl returned a control message
  Ctrl got;                // that message (waited)
  CtrlWaitEnd end;         // otherwise how the wait ended
  std::string why;         // and wait_ctrl's words for it
  std::string conn_state;  // conn_state_text of the connection
  uint64_t stray = 0, stray_bytes = 0;
};
std::string hello_failure_text(const std::string& addr, const std::string& peer_conn,
                               const HelloOutcome& o);
// Signals after which a client gives up waiting: the second.
inline constexpr int kClientGivesUpAt = 2;

// Whether a server whose test's client has been quiet for `quiet` holds a
// client that connects now (accepted, its Hello unanswered) rather than
// refusing it busy at once: when the test would be given up, at the peer
// timeout of quiet, within kHoldAtMost, which leaves the newcomer (it waits
// 5 s for its HelloAck) time to be served next. The server refuses it as
// soon as the test's client is heard again (a live client within a packet's
// time; one stopped for less than the peer timeout keeps its test) or after
// kHoldAtMost.
inline constexpr auto kHoldAtMost = std::chrono::seconds(3);
bool holds_newcomers(Clock::duration quiet, std::chrono::milliseconds peer_timeout);

// Packets of any kind that arrived from the peer on a connection (data,
// duplicates, ACKs, NAKs, out of window): what moves while the peer lives.
uint64_t heard_from_peer(const ConnStats& s);

// One path slot's figures as a PathReport carries them.
PathReport path_report(const PathStats& p, size_t slot, size_t slots);

// "peer ADDR, conn 0xID": who a message about a connection is about, as the
// driver's own errors say it.
std::string peer_and_conn(const udp::UdpEndpoint& ep, ConnId conn);

// A connection's state as a message says it ("established", "closed"...),
// with what ended it: for a failed one the status the driver kept
// (conn_error), else `seen` (a failed completion's, say) unless kOk:
// "failed: ended with kPeerUnreachable (peer unreachable: ...)", and what the
// driver adds, such as "; the peer's host answered with ICMP port
// unreachable ...: no socket listened at its port" for a peer killed.
std::string conn_state_text(const udp::UdpEndpoint& ep, ConnId conn, Status seen = Status::kOk);

// The q-quantile of v in microseconds (v holds nanoseconds; reordered): the
// nearest rank, the ceil(q n)-th smallest (the median of 1..100 is 50).
double pct(std::vector<uint64_t>& v, double q);
double mean_rx_wait_us(const udp::IoStats& io);
// The driver's counters: every IoStats field but rx_wait_ns_max (a
// maximum), named as --json's "io" object names them. One list, so that
// io_since differences and the report shows each counter the driver keeps
// (the thread's and the dropped accepts' were in neither), and a counter
// added to IoStats but not here fails the build (session.cpp).
struct IoCounter {
  const char* name;
  uint64_t udp::IoStats::*field;
};
inline constexpr IoCounter kIoCounters[] = {
    {"rx_datagrams", &udp::IoStats::rx_datagrams},
    {"rx_syscalls", &udp::IoStats::rx_syscalls},
    {"rx_gro_batches", &udp::IoStats::rx_gro_batches},
    {"rx_ce", &udp::IoStats::rx_ce},
    {"rx_control_class", &udp::IoStats::rx_control_class},
    {"rx_truncated", &udp::IoStats::rx_truncated},
    {"rx_foreign", &udp::IoStats::rx_foreign},
    {"rx_ctrunc", &udp::IoStats::rx_ctrunc},
    {"rx_wait_ns_total", &udp::IoStats::rx_wait_ns_total},
    {"rx_backlogged_rounds", &udp::IoStats::rx_backlogged_rounds},
    {"tx_datagrams", &udp::IoStats::tx_datagrams},
    {"tx_syscalls", &udp::IoStats::tx_syscalls},
    {"tx_gso_msgs", &udp::IoStats::tx_gso_msgs},
    {"tx_eagain", &udp::IoStats::tx_eagain},
    {"tx_errors", &udp::IoStats::tx_errors},
    {"tx_remapped", &udp::IoStats::tx_remapped},
    {"tx_materialized", &udp::IoStats::tx_materialized},
    {"thread_wakeups", &udp::IoStats::thread_wakeups},
    {"thread_rounds", &udp::IoStats::thread_rounds},
    {"accepts_dropped", &udp::IoStats::accepts_dropped},
};
// What happened between `before` and `now` (a server's test): each counter's
// difference; rx_wait_ns_max, a maximum, stays `now`'s.
udp::IoStats io_since(const udp::IoStats& now, const udp::IoStats& before);
// max_since_start: rx_wait_ns_max is the endpoint's since it opened, not
// the other figures' span (a server's io_since).
void print_io(const udp::IoStats& io, bool max_since_start = false);

// The local address a client opens for a peer at `addr`: resolved first
// (parse_address: ip:port, [ip6]:port, a host name), "0.0.0.0:0" for an
// IPv4 peer, "[::]:0" for an IPv6 one; `peer` gets the resolved address,
// which connect() takes. False (and `why`) when it does not resolve.
bool client_local_address(const std::string& addr, std::string& local, std::string& peer,
                          std::string& why);

// The test's forward load as a server reports it (its Result's messages and
// bytes, its summary line): what its Sink counted where every message
// leaves a completion there (a send, a write with --verify: WRITE_IMM);
// for a plain write the payload bytes the connection accepted (`cst`) less
// the client's control SENDs (Hello, Done), in messages of `size`; for a
// read, whose responses leave nothing at the server, the client's Done.
struct ForwardCount {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  const char* how = "";  // for the summary line
};
ForwardCount forward_count(const TestParams& tp, const Sink& data, const ConnStats& cst,
                           const Ctrl& done);

int run_server(const std::string& addr, const Common& common, bool once);

// Progress lines' timestamps: as many decimals as --interval has (at least
// one, at most six), so that lines a sub-second interval apart do not all
// read [0.0s]; the default 1 s keeps "[  2.0s]".
int progress_decimals(double interval);
std::string progress_stamp(double elapsed, int decimals);
// When the progress line after one due at `due` (<= now) is: the first
// point of the interval's grid past `now`, in one step. A loop adding the
// interval spun forever, deaf to signals, on an interval of 0 ns; one below
// 1 ns counts as 1 ns here (the command line refuses it before).
Clock::time_point next_progress_line(Clock::time_point due, Clock::time_point now,
                                     Clock::duration interval);

// The longest --duration or --interval, in seconds (11.6 days); far longer
// ones (1e10, inf) overflowed the clock's duration and ran nothing.
inline constexpr double kMaxSeconds = 1e6;
// The shortest, 1 ms. Below a nanosecond the clock's duration is 0: an
// --interval of 1e-10 made the progress loop's catch-up spin forever, deaf
// to signals, and a --duration of 1e-300 ran no message and exited 0. No
// progress line or run means anything at a finer grain than this.
inline constexpr double kMinSeconds = 1e-3;
// Why `s` is not a number of seconds that --duration and --interval take (a
// finite number from kMinSeconds to kMaxSeconds), or "" when it is one.
std::string seconds_problem(double s);

struct ClientArgs {
  std::string addr;
  std::string bind;  // the local address to open on; empty: the wildcard of addr's family, port 0
  TestParams tp;
  double duration = 5;
  uint64_t iters = 0;
  bool json = false;
  double interval = 1.0;
  uint32_t connect_timeout_ms = kDefaultConnectTimeoutMs;
};
int run_client(const ClientArgs& a, const Common& common);

}  // namespace metaroce::perf
