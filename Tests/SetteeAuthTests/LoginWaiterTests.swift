import SetteeCore
import Synchronization
import Testing

@testable import SetteeAuth

/// The login throttle's waiter list (`LoginThrottle.beginCheckOrWait`, `LoginGuard.beginCheckWaiting`): logins past
/// the allowance of running checks wait in line and are answered when a check ends, not by polling.
@Suite struct LoginWaiterTests {
    typealias Admission = LoginThrottle.Admission

    /// Fills the allowance of user `user` at `source` with running checks.
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
        #expect(t.pendingCount == Limits.loginFailuresBeforeThrottle)  // one pair, five checks running
    }

    /// Proves waiters of a key whose running checks all fail are answered `.throttled` (retry after the window)
    /// the moment the last failure makes the key throttled, without a password check; another user at the same
    /// source and the same user elsewhere are not held by them.
    @Test func failuresAnswerWaitersThrottled() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.2.2.2", user: "bob")
        #expect(t.beginCheckOrWait(ticket: 1, source: "10.2.2.2", user: "bob", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 2, source: "10.2.2.2", user: "carol", now: 1) == .allow)
        #expect(t.beginCheckOrWait(ticket: 3, source: "10.9.9.9", user: "bob", now: 1) == .allow)
        for _ in 1..<Limits.loginFailuresBeforeThrottle {
            #expect(t.endCheck(source: "10.2.2.2", user: "bob", succeeded: false, now: 2).isEmpty)
        }
        let window = Limits.loginFailureWindowSeconds
        #expect(
            t.endCheck(source: "10.2.2.2", user: "bob", succeeded: false, now: 2) == [
                Admission(ticket: 1, start: .throttled(retryAfterSeconds: window))
            ])
        #expect(t.waiterCount == 0)
    }

    /// Proves `abandonCheck` (a SCRAM exchange dropped before its proof) frees its running check without a verdict:
    /// the first waiter in its line is admitted at once, and no failure is recorded (five more abandoned checks leave
    /// the key unthrottled).
    @Test func anAbandonedCheckFreesItsPlaceAndRecordsNothing() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.3.3.3", user: "erin")
        #expect(t.beginCheckOrWait(ticket: 1, source: "10.3.3.3", user: "erin", now: 1) == .busy)
        #expect(t.abandonCheck(source: "10.3.3.3", user: "erin", now: 2) == [Admission(ticket: 1, start: .allow)])
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(t.abandonCheck(source: "10.3.3.3", user: "erin", now: 2).isEmpty)
        }
        #expect(t.pendingCount == 0 && t.count == 0)
        #expect(t.decide(source: "10.3.3.3", user: "erin", now: 2) == .allow)
        Self.fill(&t, source: "10.3.3.3", user: "erin", now: 2)
    }

    /// Proves the waiter bound: with `Limits.loginMaxWaiters` waiting (spread over pairs, each within its share),
    /// one more is answered `.throttled` at once and not queued; a cancelled waiter frees its place (the next arrival
    /// waits again) and is never admitted.
    @Test func theWaiterListIsBoundedAndACancelledWaiterFreesItsPlace() {
        var t = LoginThrottle()
        let share = Limits.loginMaxWaitersPerKey
        let sources = (Limits.loginMaxWaiters + share - 1) / share + 1  // the last one has room in its line
        for i in 0..<sources { Self.fill(&t, source: "10.3.0.\(i)", user: "eve") }
        for ticket in 0..<UInt64(Limits.loginMaxWaiters) {
            let source = "10.3.0.\(Int(ticket) / share)"
            #expect(t.beginCheckOrWait(ticket: ticket, source: source, user: "eve", now: 1) == .busy)
        }
        let last = "10.3.0.\(sources - 1)"
        #expect(t.lineLength("p:eve\u{0}" + last) == 0)
        let over = UInt64(Limits.loginMaxWaiters)
        #expect(t.beginCheckOrWait(ticket: over, source: last, user: "eve", now: 1) == .throttled(retryAfterSeconds: 1))
        #expect(t.waiterCount == Limits.loginMaxWaiters)
        let cancelled = t.cancelWaiter(0)
        let cancelledAgain = t.cancelWaiter(0)
        #expect(cancelled && !cancelledAgain)
        #expect(t.beginCheckOrWait(ticket: over + 1, source: "10.3.0.0", user: "eve", now: 1) == .busy)
        #expect(
            t.endCheck(source: "10.3.0.0", user: "eve", succeeded: true, now: 2) == [
                Admission(ticket: 1, start: .allow)
            ])
        #expect(t.linesAreConsistent)
    }

    /// Proves one pair's flood cannot take another login's place in line (issue 16): with its allowance full, a
    /// user at one source gets `Limits.loginMaxWaitersPerKey` places and its next logins are refused at once, while
    /// another user at the same source is not held at all and a busy login of another pair still waits and is
    /// admitted when that pair's check ends.
    @Test func aFloodOfOnePairLeavesRoomForOthers() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.10.0.1", user: "flood")
        var queued = 0
        var ticket: UInt64 = 0
        while ticket <= UInt64(Limits.loginMaxWaiters) {
            ticket += 1
            let start = t.beginCheckOrWait(ticket: ticket, source: "10.10.0.1", user: "flood", now: 1)
            guard start == .busy else {
                #expect(start == .throttled(retryAfterSeconds: 1))
                break
            }
            queued += 1
        }
        #expect(queued == Limits.loginMaxWaitersPerKey)
        #expect(t.lineLength("p:flood\u{0}10.10.0.1") == Limits.loginMaxWaitersPerKey)
        #expect(t.beginCheckOrWait(ticket: 9_999, source: "10.10.0.1", user: "ann", now: 1) == .allow)
        Self.fill(&t, source: "10.10.0.2", user: "ann", now: 1)
        #expect(t.beginCheckOrWait(ticket: 10_000, source: "10.10.0.2", user: "ann", now: 1) == .busy)
        #expect(
            t.endCheck(source: "10.10.0.2", user: "ann", succeeded: true, now: 2) == [
                Admission(ticket: 10_000, start: .allow)
            ])
        #expect(t.waiterCount == Limits.loginMaxWaitersPerKey)
    }

    /// Proves logins in one name from many sources each have their pair's own allowance (none waits behind the
    /// others), and a login without a source (unix socket) is keyed by its user alone: it waits in that user's line.
    @Test func oneNameFromManySourcesHasAnAllowanceAtEach() {
        var t = LoginThrottle()
        for i in 0..<(Limits.loginMaxWaitersPerKey + 8) {
            #expect(t.beginCheckOrWait(ticket: UInt64(i), source: "10.22.0.\(i)", user: "admin", now: 1) == .allow)
        }
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(t.beginCheck(source: nil, user: "svc", now: 1) == .allow)
        }
        #expect(t.beginCheckOrWait(ticket: 103, source: nil, user: "svc", now: 1) == .busy)
        #expect(t.lineLength("u:svc") == 1)
        #expect(
            t.endCheck(source: nil, user: "svc", succeeded: true, now: 2) == [Admission(ticket: 103, start: .allow)])
        #expect(t.linesAreConsistent)
    }

    /// Proves arrival order within a key whatever else waits, and that an event answers only waiters of its own
    /// key: pair A's waiters are admitted in the order they came as A's checks end, pair B's waiter in between is
    /// admitted only by B's check.
    @Test func eachKeysWaitersAreAdmittedInArrivalOrder() {
        var t = LoginThrottle()
        Self.fill(&t, source: "10.30.0.1", user: "a")
        Self.fill(&t, source: "10.30.0.2", user: "a")
        #expect(t.beginCheckOrWait(ticket: 1, source: "10.30.0.1", user: "a", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 2, source: "10.30.0.2", user: "a", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 3, source: "10.30.0.1", user: "a", now: 1) == .busy)
        #expect(t.beginCheckOrWait(ticket: 5, source: "10.30.0.1", user: "a", now: 1) == .busy)
        for ticket: UInt64 in [1, 3, 5] {
            #expect(
                t.endCheck(source: "10.30.0.1", user: "a", succeeded: true, now: 2) == [
                    Admission(ticket: ticket, start: .allow)
                ])
        }
        #expect(t.endCheck(source: "10.30.0.1", user: "a", succeeded: true, now: 2).isEmpty)
        #expect(
            t.endCheck(source: "10.30.0.2", user: "a", succeeded: true, now: 2) == [
                Admission(ticket: 2, start: .allow)
            ])
        #expect(t.waiterCount == 0 && t.linesAreConsistent)
    }

    /// Proves a deadline admits the waiters of its own lines that fit by then (failures left the window), in
    /// arrival order, before answering its own ticket.
    @Test func aDeadlineAdmitsItsLinesWaitersThatFitInOrder() {
        var t = LoginThrottle()
        for _ in 0..<Limits.loginFailuresBeforeThrottle - 2 { t.recordFailure(source: "10.40.0.1", user: "p", now: 1) }
        #expect(t.beginCheck(source: "10.40.0.1", user: "p", now: 1) == .allow)
        #expect(t.beginCheck(source: "10.40.0.1", user: "p", now: 1) == .allow)
        for ticket: UInt64 in 1...4 {
            #expect(t.beginCheckOrWait(ticket: ticket, source: "10.40.0.1", user: "p", now: 1) == .busy)
        }
        let later = 1 + Double(Limits.loginFailureWindowSeconds)
        // Three failures left the window: three places; tickets 1-3 fit, 4 is answered throttled at its deadline.
        #expect(
            t.expireWaiter(4, now: later) == [
                Admission(ticket: 1, start: .allow), Admission(ticket: 2, start: .allow),
                Admission(ticket: 3, start: .allow), Admission(ticket: 4, start: .throttled(retryAfterSeconds: 1)),
            ])
        #expect(t.waiterCount == 0 && t.linesAreConsistent)
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

    /// Proves a cancelled waiting task leaves the line at once (no leak, no wait for the deadline) and returns
    /// `.throttled`, and the next check that ends admits the login behind it instead. The deadline is 10 minutes
    /// here, so an answer within 2 minutes can only be the cancellation's (with the 5 s default, a loaded machine's
    /// stall of over 1 s failed the old 1 s bound).
    @Test func aCancelledWaiterLeavesTheLine() async throws {
        let guardian = LoginGuard(busyWait: .seconds(600))
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
        #expect(ContinuousClock.now - cancelled < .seconds(120))
        #expect(guardian.waiterCount == 1)
        guardian.endCheck(source: "10.8.8.8", user: "jo", succeeded: true)
        #expect(await second.value == .allow)
        #expect(guardian.waiterCount == 0)
    }
}
