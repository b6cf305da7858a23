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
            d.bytesArrived(1)
            #expect(d.readComplete(now: 0) == .none)
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
        d.bytesArrived(1)
        #expect(d.headDecoded(upgrade: false, now: 0) == .disarm)
        _ = d.endDecoded()
        #expect(d.readComplete(now: 0) == .none)
        #expect(!d.armed)
        // A second request that arrives whole: the decoder sees its head and end before the burst ends.
        d.bytesArrived(1)
        #expect(d.headDecoded(upgrade: false, now: 0) == .none)
        #expect(d.endDecoded() == .none)
        #expect(d.readComplete(now: 0) == .none)
        // A third head, dribbled.
        d.bytesArrived(1)
        #expect(d.readComplete(now: 0) == .arm)
        d.bytesArrived(1)
        #expect(d.readComplete(now: 0) == .none)
        #expect(d.deadlinePassed() == .close)
    }

    /// Proves a body that arrives with its head in one burst is never timed (no timer for a GET or a small PUT),
    /// and that a body still incomplete after a burst is due `grace + bytes / rate` after its head: bytes that keep
    /// the rate push the deadline on (the timer is re-armed for the rest), a body that falls below it is answered
    /// 408 on a connection's first request, and the request's end cancels the timer.
    @Test func bodiesAreTimedByTheirRate() {
        let second: UInt64 = 1_000_000_000
        let rate = HeadDeadline.BodyRate(graceNanos: 2 * second, minBytesPerSecond: 100)
        var whole = HeadDeadline(upgradable: false, bodyRate: rate)
        _ = whole.connectionStarted()
        whole.bytesArrived(500)
        #expect(whole.headDecoded(upgrade: false, now: 0) == .disarm)
        #expect(whole.endDecoded() == .none)
        #expect(whole.readComplete(now: 0) == .none)
        #expect(!whole.bodyArmed)

        var d = HeadDeadline(upgradable: false, bodyRate: rate)
        _ = d.connectionStarted()
        d.bytesArrived(100)
        #expect(d.headDecoded(upgrade: false, now: 10 * second) == .disarm)
        #expect(d.readComplete(now: 10 * second) == .armBody(afterNanos: 2 * second))
        #expect(d.bodyArmed)
        // 300 bytes earn 3 s more: at 12 s the body is due at 15 s.
        d.bytesArrived(300)
        #expect(d.readComplete(now: 11 * second) == .none)
        #expect(d.bodyDeadlinePassed(now: 12 * second) == .armBody(afterNanos: 3 * second))
        #expect(d.bodyDeadlinePassed(now: 15 * second) == .answerTimeoutAndClose)
        #expect(d.phase == .off && !d.bodyArmed)
        #expect(d.bodyDeadlinePassed(now: 16 * second) == .none)

        // The end of the request cancels the timer, and the next request's body is timed afresh and only closed
        // (an earlier response may still be going out).
        var k = HeadDeadline(upgradable: false, bodyRate: rate)
        _ = k.connectionStarted()
        _ = k.headDecoded(upgrade: false, now: 0)
        #expect(k.readComplete(now: 0) == .armBody(afterNanos: 2 * second))
        #expect(k.endDecoded() == .disarmBody)
        #expect(k.deadlinePassed() == .none)
        k.bytesArrived(10)
        #expect(k.headDecoded(upgrade: false, now: 5 * second) == .none)
        #expect(k.readComplete(now: 5 * second) == .armBody(afterNanos: 2 * second))
        #expect(k.bodyDeadlinePassed(now: 7 * second) == .close)

        // A response written for the first request turns its 408 into a close; a huge count saturates.
        var r = HeadDeadline(upgradable: false, bodyRate: rate)
        _ = r.connectionStarted()
        _ = r.headDecoded(upgrade: false, now: 0)
        _ = r.readComplete(now: 0)
        r.responseWritten()
        #expect(r.bodyDeadlinePassed(now: 3 * second) == .close)
        var big = HeadDeadline(upgradable: false, bodyRate: rate)
        _ = big.connectionStarted()
        _ = big.headDecoded(upgrade: false, now: 0)
        big.bytesArrived(Int.max)
        big.bytesArrived(Int.max)
        big.bytesArrived(Int.max)
        #expect(big.readComplete(now: .max) != .none)
        #expect(big.bodyDeadlinePassed(now: .max - 1) != .answerTimeoutAndClose)
    }

    /// Proves an accepted upgrade ends the timing on an upgradable pipeline (websocket frames are not heads), and
    /// that a head merely asking to upgrade does not: not on a plain pipeline (a client cannot switch the deadline
    /// off by sending `Upgrade`), and not where the server refused the upgrade (the connection goes on as HTTP and
    /// its next head is timed; before, a refused upgrade switched the deadline off for good).
    @Test func anUpgradeEndsTheTimingOnlyWhenTheProtocolSwitched() {
        var ws = HeadDeadline(upgradable: true)
        _ = ws.connectionStarted()
        #expect(ws.headDecoded(upgrade: true, now: 0) == .disarm)
        #expect(ws.upgradeAsked)
        _ = ws.endDecoded()
        #expect(ws.upgraded() == .none)
        ws.bytesArrived(1)
        #expect(ws.readComplete(now: 0) == .none)
        #expect(ws.phase == .off)

        var refused = HeadDeadline(upgradable: true)
        _ = refused.connectionStarted()
        _ = refused.headDecoded(upgrade: true, now: 0)
        _ = refused.endDecoded()
        #expect(refused.phase == .awaitingHead)
        refused.bytesArrived(1)
        #expect(refused.readComplete(now: 0) == .arm)
        #expect(refused.deadlinePassed() == .close)
        #expect(refused.phase == .off)

        // The switch is only taken after a head that asked for it, and a later plain head forgets the ask.
        var unasked = HeadDeadline(upgradable: true)
        _ = unasked.connectionStarted()
        #expect(unasked.upgraded() == .none)
        _ = unasked.headDecoded(upgrade: true, now: 0)
        _ = unasked.endDecoded()
        _ = unasked.headDecoded(upgrade: false, now: 0)
        #expect(!unasked.upgradeAsked)
        #expect(unasked.upgraded() == .none)
        #expect(unasked.phase == .readingRequest)

        var plain = HeadDeadline(upgradable: false)
        _ = plain.connectionStarted()
        _ = plain.headDecoded(upgrade: true, now: 0)
        #expect(!plain.upgradeAsked)
        #expect(plain.upgraded() == .none)
        _ = plain.endDecoded()
        plain.bytesArrived(1)
        #expect(plain.readComplete(now: 0) == .arm)
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
        c.bytesArrived(1)
        #expect(c.readComplete(now: 0) == .none)
    }

    /// Proves the deadline in force is never later than the idle timeout.
    @Test func theDeadlineIsBoundedByTheIdleTimeout() {
        #expect(HeadDeadline.effective(.seconds(10), idleTimeout: .seconds(1)) == .seconds(1))
        #expect(HeadDeadline.effective(.seconds(10), idleTimeout: .seconds(60)) == .seconds(10))
    }
}
