import SetteeCore
import Synchronization
import Testing

@testable import SetteeAuth

/// The login throttle's waiter list (`LoginThrottle.beginCheckOrWait`, `LoginGuard.beginCheckWaiting`): logins past
/// the allowance of running checks wait in line and are answered when a check ends, not by polling.
@Suite struct LoginWaiterTests {
    typealias Admission = LoginThrottle.Admission

    /// Fills the allowance of source `s` / user `u` with running checks.
    static func fill(_ t: inout LoginThrottle, source: String, user: String, now: Double = 1) {
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(t.beginCheck(source: source, user: user, now: now) == .allow)
        }
    }

    /// Proves waiters are admitted in arrival order, one per freed slot, at the moment a check ends: with the
    /// allowance full, tickets 1, 2, 3 wait; each successful `endCheck` admits exactly the earliest one left, and
    /// the admitted login is counted (a fourth arrival still waits).
    @Test func waitersAreAdmittedInArrivalOrderAsChecksEnd() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.1.1.1", user: "app")
        for ticket in UInt64(1)...3 {
            #expect(t.beginCheckOrWait(ticket: ticket, source: "10.1.1.1", user: "app", now: 1) == .busy)
        }
        #expect(t.waiterCount == 3)
        #expect(
            t.endCheck(source: "10.1.1.1", user: "app", succeeded: true, now: 2) == [
                Admission(ticket: 1, start: .allow)
            ])
        #expect(t.beginCheckOrWait(ticket: 4, source: "10.1.1.1", user: "app", now: 2) == .busy)
        #expect(
            t.endCheck(source: "10.1.1.1", user: "app", succeeded: true, now: 2) == [
                Admission(ticket: 2, start: .allow)
            ])
        #expect(
            t.endCheck(source: "10.1.1.1", user: "app", succeeded: true, now: 2) == [
                Admission(ticket: 3, start: .allow)
            ])
        #expect(
            t.endCheck(source: "10.1.1.1", user: "app", succeeded: true, now: 2) == [
                Admission(ticket: 4, start: .allow)
            ])
        #expect(t.waiterCount == 0)
        #expect(t.pendingCount == 2 * Limits.loginFailuresBeforeThrottle)  // two keys, five checks running each
    }

    /// Proves waiters of a key whose running checks all fail are answered `.throttled` (retry after the window)
    /// the moment the last failure makes the key throttled, in arrival order, without a password check; a waiter
    /// of another user from another source is not held by them.
    @Test func failuresAnswerWaitersThrottled() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.2.2.2", user: "bob")
        #expect(t.beginCheckOrWait(ticket: 1, source: "10.2.2.2", user: "bob", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 2, source: "10.2.2.2", user: "carol", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 3, source: "10.9.9.9", user: "dave", now: 1) == .allow)
        for _ in 1..<Limits.loginFailuresBeforeThrottle {
            #expect(t.endCheck(source: "10.2.2.2", user: "bob", succeeded: false, now: 2).isEmpty)
        }
        let window = Limits.loginFailureWindowSeconds
        #expect(
            t.endCheck(source: "10.2.2.2", user: "bob", succeeded: false, now: 2) == [
                Admission(ticket: 1, start: .throttled(retryAfterSeconds: window)),
                Admission(ticket: 2, start: .throttled(retryAfterSeconds: window)),
            ])
        #expect(t.waiterCount == 0)
    }

    /// Proves the waiter bound: with `Limits.loginMaxWaiters` waiting, one more is answered `.throttled` at once
    /// and not queued; a cancelled waiter frees its place (the next arrival waits again) and is never admitted.
    @Test func theWaiterListIsBoundedAndACancelledWaiterFreesItsPlace() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.3.3.3", user: "eve")
        for ticket in 0..<UInt64(Limits.loginMaxWaiters) {
            #expect(t.beginCheckOrWait(ticket: ticket, source: "10.3.3.3", user: "eve", now: 1) == .busy)
        }
        let over = UInt64(Limits.loginMaxWaiters)
        #expect(
            t.beginCheckOrWait(ticket: over, source: "10.3.3.3", user: "eve", now: 1)
                == .throttled(retryAfterSeconds: 1))
        #expect(t.waiterCount == Limits.loginMaxWaiters)
        let cancelled = t.cancelWaiter(0)
        let cancelledAgain = t.cancelWaiter(0)
        #expect(cancelled && !cancelledAgain)
        #expect(t.beginCheckOrWait(ticket: over + 1, source: "10.3.3.3", user: "eve", now: 1) == .busy)
        #expect(
            t.endCheck(source: "10.3.3.3", user: "eve", succeeded: true, now: 2) == [
                Admission(ticket: 1, start: .allow)
            ])
    }

    /// Proves a waiter's deadline answers it `.throttled` if it still does not fit (and does nothing once it was
    /// answered), and admits it if it fits by then; `forgetFailures` (credentials changed) admits waiters too.
    @Test func deadlinesAndResetsAnswerWaiters() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.4.4.4", user: "fay")
        #expect(t.beginCheckOrWait(ticket: 7, source: "10.4.4.4", user: "fay", now: 1) == .busy)
        #expect(t.expireWaiter(7, now: 6) == [Admission(ticket: 7, start: .throttled(retryAfterSeconds: 1))])
        #expect(t.expireWaiter(7, now: 6).isEmpty)

        var u = LoginThrottle()
        for _ in 0..<Limits.loginFailuresBeforeThrottle - 1 { u.recordFailure(source: "10.5.5.5", user: "gus", now: 1) }
        #expect(u.beginCheck(source: "10.5.5.5", user: "gus", now: 1) == .allow)
        #expect(u.beginCheckOrWait(ticket: 8, source: "10.5.5.5", user: "gus", now: 1) == .busy)
        // The earlier failures leave the window: the waiter fits at its deadline.
        let later = 1 + Double(Limits.loginFailureWindowSeconds)
        #expect(u.expireWaiter(8, now: later) == [Admission(ticket: 8, start: .allow)])

        var v = LoginThrottle()
        for _ in 0..<Limits.loginFailuresBeforeThrottle - 1 { v.recordFailure(source: "10.6.6.6", user: "hal", now: 1) }
        #expect(v.beginCheck(source: "10.6.6.6", user: "hal", now: 1) == .allow)
        #expect(v.beginCheckOrWait(ticket: 9, source: "10.6.6.6", user: "hal", now: 1) == .busy)
        #expect(v.forgetFailures(now: 2) == [Admission(ticket: 9, start: .allow)])
    }

    /// Proves `LoginGuard` wakes a waiter inside the `endCheck` that frees its slot, not after a poll interval
    /// (the loop it replaces asked again every 20 ms): the callback has run when `endCheck` returns, and an
    /// awaiting task's continuation is resumed within `endCheck` (each of 5 under 20 ms, in practice microseconds;
    /// when the task then runs is the cooperative pool's business, so that is not timed).
    @Test func aWaiterIsWokenAsSoonAsACheckEnds() async throws {
        let guardian = LoginGuard()
        let n = Limits.loginFailuresBeforeThrottle
        for _ in 0..<n { #expect(guardian.beginCheck(source: "10.7.7.7", user: "ivy") == .allow) }
        let answered = Mutex<LoginThrottle.CheckStart?>(nil)
        let ticket = guardian.makeTicket()
        let start = guardian.beginCheck(ticket: ticket, source: "10.7.7.7", user: "ivy") { s in
            answered.withLock { $0 = s }
        }
        #expect(start == .busy)
        guardian.endCheck(source: "10.7.7.7", user: "ivy", succeeded: true)
        #expect(answered.withLock { $0 } == .allow)
        guardian.expireWaiter(ticket)  // already answered: nothing
        #expect(answered.withLock { $0 } == .allow)

        var delays: [Duration] = []
        for _ in 0..<5 {
            let waiting = Task { await guardian.beginCheckWaiting(source: "10.7.7.7", user: "ivy") }
            while guardian.waiterCount == 0 { try await Task.sleep(for: .milliseconds(1)) }
            let ended = ContinuousClock.now
            guardian.endCheck(source: "10.7.7.7", user: "ivy", succeeded: true)
            // Admitted (out of the line, its continuation resumed) before `endCheck` returned.
            #expect(guardian.waiterCount == 0)
            delays.append(ContinuousClock.now - ended)
            #expect(await waiting.value == .allow)
        }
        #expect(delays.allSatisfy { $0 < .milliseconds(20) }, "\(delays)")
        for _ in 0..<n { guardian.endCheck(source: "10.7.7.7", user: "ivy", succeeded: true) }
    }

    /// Proves a cancelled waiting task leaves the line at once (no leak, no wait for the 5 s deadline) and
    /// returns `.throttled`, and the next check that ends admits the login behind it instead.
    @Test func aCancelledWaiterLeavesTheLine() async throws {
        let guardian = LoginGuard()
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(guardian.beginCheck(source: "10.8.8.8", user: "jo") == .allow)
        }
        let first = Task { await guardian.beginCheckWaiting(source: "10.8.8.8", user: "jo") }
        while guardian.waiterCount < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let second = Task { await guardian.beginCheckWaiting(source: "10.8.8.8", user: "jo") }
        while guardian.waiterCount < 2 { try await Task.sleep(for: .milliseconds(1)) }
        let cancelled = ContinuousClock.now
        first.cancel()
        #expect(await first.value == .throttled(retryAfterSeconds: 1))
        #expect(ContinuousClock.now - cancelled < .seconds(1))
        #expect(guardian.waiterCount == 1)
        guardian.endCheck(source: "10.8.8.8", user: "jo", succeeded: true)
        #expect(await second.value == .allow)
        #expect(guardian.waiterCount == 0)
    }
}
