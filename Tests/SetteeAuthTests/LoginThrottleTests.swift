import SetteeCore
import Synchronization
import Testing

@testable import SetteeAuth

@Suite struct LoginThrottleTests {
    /// Proves the rule with time injected: `loginFailuresBeforeThrottle` failures of one user from one address
    /// throttle further attempts of that user from that address until the window has passed since the last failure;
    /// the same user from another address and another user from the same address are unaffected (ADR 0144).
    @Test func failuresThrottleOnlyTheirPair() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        let window = Double(Limits.loginFailureWindowSeconds)
        for i in 0..<n {
            #expect(t.decide(source: "10.0.0.1", user: "alice", now: Double(i)) == .allow)
            t.recordFailure(source: "10.0.0.1", user: "alice", now: Double(i))
        }
        let last = Double(n - 1)
        guard case .throttled(let retry) = t.decide(source: "10.0.0.1", user: "alice", now: last + 1) else {
            Issue.record("alice at 10.0.0.1 should be throttled")
            return
        }
        #expect(retry >= 1 && retry <= Limits.loginFailureWindowSeconds)
        #expect(t.decide(source: "10.9.9.9", user: "alice", now: last + 1) == .allow)
        #expect(t.decide(source: "10.0.0.1", user: "bob", now: last + 1) == .allow)
        #expect(t.decide(source: "10.0.0.1", user: "alice", now: last + window + 1) == .allow)
        #expect(t.count == 1)
    }

    /// Regression (issue 72 item 5): eight clients guessing a gateway user's password, each from its own address,
    /// made that user's correct logins answer 429 from every address (the user name was a key of its own). Now each
    /// guessing address throttles only itself, and the user from an address that never failed checks its password.
    @Test func guessingFromManyAddressesDoesNotLockTheUserOutElsewhere() {
        var t = LoginThrottle()
        for client in 0..<8 {
            for _ in 0..<(Limits.loginFailuresBeforeThrottle + 3) {
                let source = "192.0.2.\(client)"
                if t.beginCheck(source: source, user: "alice", now: 1) == .allow {
                    t.endCheck(source: source, user: "alice", succeeded: false, now: 1)
                }
            }
            #expect(t.decide(source: "192.0.2.\(client)", user: "alice", now: 2) != .allow)
        }
        #expect(t.beginCheck(source: "198.51.100.7", user: "alice", now: 2) == .allow)
        t.endCheck(source: "198.51.100.7", user: "alice", succeeded: true, now: 2)
        #expect(t.decide(source: "198.51.100.7", user: "alice", now: 3) == .allow)
    }

    /// Regression (issue 72 item 5): failed SASL logins from a fuzzer on 127.0.0.1 in made-up names locked the
    /// administrator out of 127.0.0.1 (the address was a key of its own). Now the administrator there, who never
    /// failed, is allowed; the administrator's own failures there still throttle them there.
    @Test func aFuzzerOnOneAddressDoesNotLockOtherUsersOutThere() {
        var t = LoginThrottle()
        for i in 0..<500 {
            if t.beginCheck(source: "127.0.0.1", user: "fuzz\(i % 50)", now: 1) == .allow {
                t.endCheck(source: "127.0.0.1", user: "fuzz\(i % 50)", succeeded: false, now: 1)
            }
        }
        #expect(t.decide(source: "127.0.0.1", user: "fuzz0", now: 2) != .allow)
        #expect(t.beginCheck(source: "127.0.0.1", user: "Administrator", now: 2) == .allow)
        t.endCheck(source: "127.0.0.1", user: "Administrator", succeeded: true, now: 2)
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            t.recordFailure(source: "127.0.0.1", user: "Administrator", now: 3)
        }
        #expect(t.decide(source: "127.0.0.1", user: "Administrator", now: 4) != .allow)
    }

    /// Proves another account cannot reset the pair it guesses at: four wrong passwords for Administrator from
    /// 10.1.1.1, a correct login as mallory (the attacker's own account) from there, and one more wrong password
    /// throttle Administrator at 10.1.1.1, while mallory stays allowed; only Administrator's right password from
    /// 10.1.1.1 clears that pair.
    @Test func onlyThePairsOwnSuccessResetsItsFailures() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        for _ in 0..<(n - 1) { t.recordFailure(source: "10.1.1.1", user: "Administrator", now: 1) }
        t.recordSuccess(source: "10.1.1.1", user: "mallory", now: 2)
        #expect(t.decide(source: "10.1.1.1", user: "Administrator", now: 3) == .allow)
        t.recordFailure(source: "10.1.1.1", user: "Administrator", now: 3)
        #expect(t.decide(source: "10.1.1.1", user: "Administrator", now: 4) != .allow)
        #expect(t.decide(source: "10.1.1.1", user: "mallory", now: 4) == .allow)
        var u = LoginThrottle()
        for _ in 0..<(n - 1) { u.recordFailure(source: "10.1.1.1", user: "Administrator", now: 1) }
        u.recordSuccess(source: "10.1.1.1", user: "Administrator", now: 2)
        for _ in 0..<(n - 1) { u.recordFailure(source: "10.1.1.1", user: "Administrator", now: 3) }
        #expect(u.decide(source: "10.1.1.1", user: "Administrator", now: 4) == .allow)
    }

    /// Proves `LoginGuard` counts every login it refuses as throttled (the `/metrics` figure), per (user, source)
    /// pair, with the clock injected: five failures, then two refusals; another source of the same user is allowed.
    @Test func theGuardCountsThrottledLogins() {
        let guardian = LoginGuard(now: { 1_000 })
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            #expect(guardian.beginCheck(source: "10.6.6.6", user: "eve") == .allow)
            guardian.endCheck(source: "10.6.6.6", user: "eve", succeeded: false)
        }
        #expect(guardian.throttledLogins == 0)
        for _ in 0..<2 { #expect(guardian.beginCheck(source: "10.6.6.6", user: "eve") != .allow) }
        #expect(guardian.beginCheck(source: "10.6.6.7", user: "eve") == .allow)
        #expect(guardian.throttledLogins == 2)
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
            t.recordFailure(source: "10.\(i / 256 % 256).\(i % 256).1", user: "user\(i)", now: Double(i))
        }
        #expect(t.count <= Limits.loginThrottleMaxKeys)
        #expect(t.decide(source: nil, user: "user0", now: 0) == .allow)
    }

    /// Proves every form of a peer's address description gives one source, the address alone: with NIO's host name
    /// (an accepted socket) or without it (an address made from an IP, as the channel tests' peer is), IPv4 or
    /// IPv6, or `host:port`. Before, the host-less form kept NIO's `[IPv4]` tag, so one peer could count under two
    /// sources.
    @Test func theSourceIsTheAddressInEveryForm() {
        for description in ["[IPv4]127.0.0.1/127.0.0.1:5555", "[IPv4]127.0.0.1:40000", "127.0.0.1:5555"] {
            #expect(LoginGuard.sourceHost(description) == "127.0.0.1", "\(description)")
        }
        #expect(LoginGuard.sourceHost("[IPv6]::1/::1:5555") == "::1")
        #expect(LoginGuard.sourceHost("[IPv6]::1:5555") == "::1")
        #expect(LoginGuard.sourceHost("?") == nil)
        #expect(LoginGuard.sourceHost(nil) == nil)
    }

    /// Proves attempts count as they arrive: 2,000 wrong logins that all arrive before any check ends (pipelined,
    /// or on many connections from one address) are allowed `loginFailuresBeforeThrottle` password checks, the rest
    /// are `busy` and, once those checks have failed, throttled (that user there; another user there is not). With
    /// `decide` (the old rule) every one of them was allowed, since no failure was recorded yet when each was decided.
    @Test func attemptsCountBeforeTheirChecksEnd() {
        var t = LoginThrottle()
        let n = Limits.loginFailuresBeforeThrottle
        var allowed = 0
        for _ in 0..<2000 where t.beginCheck(source: "10.3.3.3", user: "Administrator", now: 1) == .allow {
            allowed += 1
        }
        #expect(allowed == n)
        #expect(t.pendingCount == n)
        // Another address and user are unaffected.
        #expect(t.beginCheck(source: "10.4.4.4", user: "bob", now: 1) == .allow)
        t.endCheck(source: "10.4.4.4", user: "bob", succeeded: true, now: 1)
        for _ in 0..<n { t.endCheck(source: "10.3.3.3", user: "Administrator", succeeded: false, now: 2) }
        #expect(t.pendingCount == 0)
        guard case .throttled = t.beginCheck(source: "10.3.3.3", user: "Administrator", now: 3) else {
            Issue.record("Administrator at 10.3.3.3 should be throttled after its allowed checks failed")
            return
        }
        #expect(t.pendingCount == 0)
        #expect(t.beginCheck(source: "10.3.3.3", user: "eve", now: 3) == .allow)
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
