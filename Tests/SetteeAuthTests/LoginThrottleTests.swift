import SetteeCore
import Testing

@testable import SetteeAuth

@Suite struct LoginThrottleTests {
    /// Proves the rule with time injected: `loginFailuresBeforeThrottle` failures of one user (from any
    /// address) or from one address (for any user) throttle further attempts until the window has passed since
    /// the last failure; other users and addresses are unaffected; a success clears the user's count only.
    @Test func failuresThrottleUserAndSource() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        let window = Double(Limits.loginFailureWindowSeconds)
        for i in 0..<n {
            #expect(t.decide(source: "10.0.0.\(i)", user: "alice", now: Double(i)) == .allow)
            t.recordFailure(source: "10.0.0.\(i)", user: "alice", now: Double(i))
        }
        let last = Double(n - 1)
        guard case .throttled(let retry) = t.decide(source: "10.9.9.9", user: "alice", now: last + 1) else {
            Issue.record("alice should be throttled")
            return
        }
        #expect(retry >= 1 && retry <= Limits.loginFailureWindowSeconds)
        #expect(t.decide(source: "10.9.9.9", user: "bob", now: last + 1) == .allow)
        #expect(t.decide(source: "10.9.9.9", user: "alice", now: last + window + 1) == .allow)

        for i in 0..<n { t.recordFailure(source: "10.1.1.1", user: "u\(i)", now: 100) }
        #expect(t.decide(source: "10.1.1.1", user: "carol", now: 101) != .allow)
        #expect(t.decide(source: "10.2.2.2", user: "carol", now: 101) == .allow)
        t.recordSuccess(source: "10.2.2.2", user: "carol", now: 101)
        #expect(t.decide(source: "10.1.1.1", user: "carol", now: 101) != .allow)
        #expect(t.decide(source: "10.2.2.2", user: "carol", now: 101) == .allow)
    }

    /// Proves a valid account cannot reset its address's failures: four wrong passwords for Administrator from
    /// 10.1.1.1, a correct login as mallory (the attacker's own account) from there, and one more wrong password
    /// throttle 10.1.1.1 for every user. The old rule cleared the source's count on any success, so guesses
    /// interleaved with own logins (or with a legitimate client's on a shared address) were never throttled.
    @Test func aSuccessDoesNotResetTheSourcesFailures() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        for _ in 0..<(n - 1) { t.recordFailure(source: "10.1.1.1", user: "Administrator", now: 1) }
        t.recordSuccess(source: "10.1.1.1", user: "mallory", now: 2)
        #expect(t.decide(source: "10.1.1.1", user: "Administrator", now: 3) == .allow)
        t.recordFailure(source: "10.1.1.1", user: "Administrator", now: 3)
        #expect(t.decide(source: "10.1.1.1", user: "Administrator", now: 4) != .allow)
        #expect(t.decide(source: "10.1.1.1", user: "mallory", now: 4) != .allow)
        #expect(t.decide(source: "10.2.2.2", user: "mallory", now: 4) == .allow)
    }

    /// Proves failures in a user's name from elsewhere cannot lock the user out of a source they logged in from:
    /// after Administrator logs in from 10.0.0.1, six wrong logins as Administrator from other addresses throttle
    /// those addresses and every source Administrator never used, but not 10.0.0.1; 10.0.0.1's own failures still
    /// throttle it; and the trust ends `loginTrustedSourceSeconds` after the last success.
    @Test func failuresElsewhereDoNotLockOutATrustedSource() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        t.recordSuccess(source: "10.0.0.1", user: "Administrator", now: 0)
        for i in 0...n { t.recordFailure(source: "192.0.2.\(i % 2)", user: "Administrator", now: 1) }
        #expect(t.decide(source: "10.0.0.1", user: "Administrator", now: 2) == .allow)
        #expect(t.decide(source: "10.0.0.9", user: "Administrator", now: 2) != .allow)
        #expect(t.decide(source: "192.0.2.7", user: "Administrator", now: 2) != .allow)
        #expect(t.trustedCount == 1)
        let expired = Double(Limits.loginTrustedSourceSeconds) + 1
        for _ in 0..<n { t.recordFailure(source: "192.0.2.0", user: "Administrator", now: expired - 2) }
        #expect(t.decide(source: "10.0.0.1", user: "Administrator", now: expired) != .allow)
        var own = LoginThrottle()
        own.recordSuccess(source: "10.0.0.1", user: "Administrator", now: 0)
        for _ in 0..<n { own.recordFailure(source: "10.0.0.1", user: "Administrator", now: 1) }
        #expect(own.decide(source: "10.0.0.1", user: "Administrator", now: 2) != .allow)
    }

    /// Proves a reset (credentials changed) ends a lockout at once: a node joining a cluster refuses the SDK's
    /// logins until it adopts the cluster's admin credentials, and those early failures must not keep the
    /// SDK out for the whole window afterwards (it failed a rebalance under the Python SDK before).
    @Test func resetEndsALockout() {
        let guardian = LoginGuard(now: { 1_000 })
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            guardian.recordFailure(source: "127.0.0.1", user: "Administrator")
        }
        #expect(guardian.decide(source: "127.0.0.1", user: "Administrator") != .allow)
        guardian.reset()
        #expect(guardian.decide(source: "127.0.0.1", user: "Administrator") == .allow)
    }

    /// Proves memory stays bounded whatever names an attacker tries.
    @Test func keysAreBounded() {
        var t = LoginThrottle()
        for i in 0..<(Limits.loginThrottleMaxKeys * 2) {
            t.recordFailure(source: nil, user: "user\(i)", now: Double(i))
        }
        #expect(t.count <= Limits.loginThrottleMaxKeys)
        #expect(t.decide(source: nil, user: "user0", now: 0) == .allow)
        #expect(LoginGuard.sourceHost("[IPv4]127.0.0.1/127.0.0.1:5555") == "127.0.0.1")
        #expect(LoginGuard.sourceHost("?") == nil)
    }

    /// Proves attempts count as they arrive: 2,000 wrong logins that all arrive before any check ends (pipelined,
    /// or on many connections from one address) are allowed `loginFailuresBeforeThrottle` password checks, the rest
    /// are `busy` and, once those checks have failed, throttled. With `decide` (the old rule) every one of them was
    /// allowed, since no failure was recorded yet when each was decided.
    @Test func attemptsCountBeforeTheirChecksEnd() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        var allowed = 0
        for _ in 0..<2000 where t.beginCheck(source: "10.3.3.3", user: "Administrator", now: 1) == .allow {
            allowed += 1
        }
        #expect(allowed == n)
        #expect(t.pendingCount == 2 * n)
        // Another address and user are unaffected.
        #expect(t.beginCheck(source: "10.4.4.4", user: "bob", now: 1) == .allow)
        t.endCheck(source: "10.4.4.4", user: "bob", succeeded: true, now: 1)
        for _ in 0..<n { t.endCheck(source: "10.3.3.3", user: "Administrator", succeeded: false, now: 2) }
        #expect(t.pendingCount == 0)
        guard case .throttled = t.beginCheck(source: "10.3.3.3", user: "eve", now: 3) else {
            Issue.record("10.3.3.3 should be throttled after its allowed checks failed")
            return
        }
        #expect(t.pendingCount == 0)
    }

    /// Proves a burst of correct logins from one address is only delayed: the attempts past the allowance are
    /// `busy` (not refused, nothing counted) and allowed as soon as a running check ends as a success.
    @Test func aBurstOfCorrectLoginsIsOnlyDelayed() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        for _ in 0..<n { #expect(t.beginCheck(source: "10.5.5.5", user: "app", now: 1) == .allow) }
        #expect(t.beginCheck(source: "10.5.5.5", user: "app", now: 1) == .busy)
        t.endCheck(source: "10.5.5.5", user: "app", succeeded: true, now: 1)
        #expect(t.beginCheck(source: "10.5.5.5", user: "app", now: 1) == .allow)
        for _ in 0..<n { t.endCheck(source: "10.5.5.5", user: "app", succeeded: true, now: 1) }
        #expect(t.pendingCount == 0)
        #expect(t.decide(source: "10.5.5.5", user: "app", now: 1) == .allow)
    }
}
