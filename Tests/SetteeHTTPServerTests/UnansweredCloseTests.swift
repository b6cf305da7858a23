import SetteeHTTPServer
import Testing

/// `UnansweredClose` (which closes a node's HTTP port makes without answering, and why) and
/// `UnansweredCloseCounts` (their counts and the once-per-second log decision), without sockets.
@Suite struct UnansweredCloseTests {
    static let second: UInt64 = 1_000_000_000
    static let idle = 60 * second

    /// Proves a connection the head deadline closes after it sent nothing counts as `head_deadline`.
    @Test func aSilentConnectionClosedByTheDeadlineCounts() {
        var ledger = UnansweredClose(now: 0)
        ledger.closing(.headDeadline)
        #expect(ledger.closed(now: 10 * Self.second, idleTimeoutNanos: Self.idle) == .headDeadline)
    }

    /// Proves a request answered and then closed (by either side) is not counted, and that bytes arriving after
    /// the answer make a later server close count again.
    @Test func answeredRequestsAreNotCounted() {
        var ledger = UnansweredClose(now: 0)
        ledger.bytesArrived(now: 1)
        ledger.responseWritten(now: 2)
        ledger.closeRequested()
        #expect(ledger.closed(now: 3, idleTimeoutNanos: Self.idle) == nil)
        ledger.bytesArrived(now: 4)
        #expect(ledger.closed(now: 5, idleTimeoutNanos: Self.idle) == .other)
    }

    /// Proves a close the client made (no close through the handler, no error) is never counted, even with its
    /// request unanswered.
    @Test func aClientCloseIsNotCounted() {
        var ledger = UnansweredClose(now: 0)
        ledger.bytesArrived(now: 1)
        #expect(ledger.closed(now: 2, idleTimeoutNanos: Self.idle) == nil)
    }

    /// Proves the first cause wins, errors are told apart (TLS, parse, other), and a server close with no cause is
    /// `idle` once the connection was quiet for the idle timeout, `other` before.
    @Test func causesAreNamed() {
        var tls = UnansweredClose(now: 0)
        tls.errorCaught(tls: true, parse: false)
        tls.closing(.headDeadline)
        #expect(tls.closed(now: 1, idleTimeoutNanos: Self.idle) == .tlsError)

        var parse = UnansweredClose(now: 0)
        parse.bytesArrived(now: 0)
        parse.errorCaught(tls: false, parse: true)
        #expect(parse.closed(now: 1, idleTimeoutNanos: Self.idle) == .parseError)
        parse.responseWritten(now: 2)
        #expect(parse.closed(now: 3, idleTimeoutNanos: Self.idle) == nil, "the 400 went out")

        var other = UnansweredClose(now: 0)
        other.errorCaught(tls: false, parse: false)
        #expect(other.closed(now: 1, idleTimeoutNanos: Self.idle) == .error)

        var idle = UnansweredClose(now: 0)
        idle.closeRequested()
        #expect(idle.closed(now: Self.idle - 1, idleTimeoutNanos: Self.idle) == .other)
        #expect(idle.closed(now: Self.idle, idleTimeoutNanos: Self.idle) == .idle)

        var shutdown = UnansweredClose(now: 0)
        shutdown.quiesce()
        shutdown.closeRequested()
        #expect(shutdown.closed(now: 1, idleTimeoutNanos: Self.idle) == .shutdown)
    }

    /// Proves every close is counted per reason while each reason is logged at most once per second.
    @Test func countsEveryCloseAndLogsOncePerReasonPerSecond() {
        let counts = UnansweredCloseCounts()
        #expect(counts.record(.headDeadline, now: 10 * Self.second))
        #expect(!counts.record(.headDeadline, now: 10 * Self.second + 1))
        #expect(counts.record(.idle, now: 10 * Self.second + 2), "another reason has its own second")
        #expect(!counts.record(.headDeadline, now: 11 * Self.second - 1))
        #expect(counts.record(.headDeadline, now: 11 * Self.second))
        #expect(counts.count(.headDeadline) == 4)
        #expect(counts.count(.idle) == 1)
        #expect(counts.count(.tlsError) == 0)
    }
}
