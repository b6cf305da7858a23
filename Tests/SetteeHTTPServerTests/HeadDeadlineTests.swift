import NIOCore
import Testing

@testable import SetteeHTTPServer

/// The request-head deadline's decisions (`HeadDeadline`), event by event, without a channel or a clock.
@Suite struct HeadDeadlineTests {
    /// Proves the first head is timed from the connection's start and a connection that dribbles it (bytes arrive,
    /// no head) is answered 408 and closed at the deadline; the bytes do not re-arm or postpone it.
    @Test func aDribbledFirstHeadIsAnswered408AtTheDeadline() {
        var d = HeadDeadline(upgradable: false)
        #expect(d.connectionStarted() == .arm)
        for _ in 0..<5 {
            d.bytesArrived()
            #expect(d.readComplete() == .none)
        }
        #expect(d.deadlinePassed() == .answerTimeoutAndClose)
        #expect(d.phase == .off)
        #expect(d.deadlinePassed() == .none)
        #expect(d.parseFailed() == .none)
    }

    /// Proves a connection that sent nothing by the deadline is closed without an answer: a 408 would reach a
    /// client that asked nothing (a pooled spare connection reads it as an unsolicited response) or sit behind a
    /// TLS handshake that never finished.
    @Test func aSilentConnectionIsClosedUnanswered() {
        var d = HeadDeadline(upgradable: false)
        #expect(d.connectionStarted() == .arm)
        #expect(d.deadlinePassed() == .close)
        #expect(d.phase == .off)
    }

    /// Proves a head that completes in one burst disarms the timer, and that a kept-alive connection between
    /// requests is not timed (that is the idle timeout's job) until bytes of a next head arrive and stay incomplete
    /// past a read burst; then the deadline only closes (a response was already given, so no raw 408).
    @Test func laterHeadsAreTimedFromTheirFirstBytesAndOnlyClosed() {
        var d = HeadDeadline(upgradable: false)
        #expect(d.connectionStarted() == .arm)
        d.bytesArrived()
        #expect(d.headDecoded(upgrade: false) == .disarm)
        d.endDecoded()
        #expect(d.readComplete() == .none)
        #expect(!d.armed)
        // A second request whose head arrives whole: the decoder sees it before the burst ends.
        d.bytesArrived()
        #expect(d.headDecoded(upgrade: false) == .none)
        #expect(d.readComplete() == .none)
        d.endDecoded()
        // A third head, dribbled.
        d.bytesArrived()
        #expect(d.readComplete() == .arm)
        d.bytesArrived()
        #expect(d.readComplete() == .none)
        #expect(d.deadlinePassed() == .close)
    }

    /// Proves a body is not timed: bytes that arrive while a request is being read never arm the deadline.
    @Test func bodiesAreNotTimed() {
        var d = HeadDeadline(upgradable: false)
        _ = d.connectionStarted()
        #expect(d.headDecoded(upgrade: false) == .disarm)
        for _ in 0..<3 {
            d.bytesArrived()
            #expect(d.readComplete() == .none)
        }
        #expect(d.deadlinePassed() == .none)
        #expect(d.phase == .readingRequest)
    }

    /// Proves an accepted upgrade ends the timing on an upgradable pipeline (websocket frames are not heads), and
    /// that a head merely asking to upgrade does not: not on a plain pipeline (a client cannot switch the deadline
    /// off by sending `Upgrade`), and not where the server refused the upgrade (the connection goes on as HTTP and
    /// its next head is timed; before, a refused upgrade switched the deadline off for good).
    @Test func anUpgradeEndsTheTimingOnlyWhenTheProtocolSwitched() {
        var ws = HeadDeadline(upgradable: true)
        _ = ws.connectionStarted()
        #expect(ws.headDecoded(upgrade: true) == .disarm)
        #expect(ws.upgradeAsked)
        ws.endDecoded()
        #expect(ws.upgraded() == .none)
        ws.bytesArrived()
        #expect(ws.readComplete() == .none)
        #expect(ws.phase == .off)

        var refused = HeadDeadline(upgradable: true)
        _ = refused.connectionStarted()
        _ = refused.headDecoded(upgrade: true)
        refused.endDecoded()
        #expect(refused.phase == .awaitingHead)
        refused.bytesArrived()
        #expect(refused.readComplete() == .arm)
        #expect(refused.deadlinePassed() == .close)
        #expect(refused.phase == .off)

        // The switch is only taken after a head that asked for it, and a later plain head forgets the ask.
        var unasked = HeadDeadline(upgradable: true)
        _ = unasked.connectionStarted()
        #expect(unasked.upgraded() == .none)
        _ = unasked.headDecoded(upgrade: true)
        unasked.endDecoded()
        _ = unasked.headDecoded(upgrade: false)
        #expect(!unasked.upgradeAsked)
        #expect(unasked.upgraded() == .none)
        #expect(unasked.phase == .readingRequest)

        var plain = HeadDeadline(upgradable: false)
        _ = plain.connectionStarted()
        _ = plain.headDecoded(upgrade: true)
        #expect(!plain.upgradeAsked)
        #expect(plain.upgraded() == .none)
        plain.endDecoded()
        plain.bytesArrived()
        #expect(plain.readComplete() == .arm)
    }

    /// Proves input the parser rejects is answered 400 once, and a closed connection disarms and stays quiet.
    @Test func parseErrorsAnswerOnceAndCloseDisarms() {
        var d = HeadDeadline(upgradable: false)
        _ = d.connectionStarted()
        #expect(d.parseFailed() == .answerBadRequestAndClose)
        #expect(d.parseFailed() == .none)
        #expect(d.deadlinePassed() == .none)

        var c = HeadDeadline(upgradable: false)
        _ = c.connectionStarted()
        #expect(c.closed() == .disarm)
        c.bytesArrived()
        #expect(c.readComplete() == .none)
    }

    /// Proves the deadline in force is never later than the idle timeout.
    @Test func theDeadlineIsBoundedByTheIdleTimeout() {
        #expect(HeadDeadline.effective(.seconds(10), idleTimeout: .seconds(1)) == .seconds(1))
        #expect(HeadDeadline.effective(.seconds(10), idleTimeout: .seconds(60)) == .seconds(10))
    }
}
