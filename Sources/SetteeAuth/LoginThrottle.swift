import SetteeCore
import Synchronization

/// Failed-login throttling per source address and per user name, as a pure value: time comes in as
/// seconds, nothing here sleeps or locks. After `Limits.loginFailuresBeforeThrottle` failures of one key
/// (a source, or a user name) inside `Limits.loginFailureWindowSeconds`, further attempts with that key are
/// refused without checking the password until the window has passed since the last failure, so a flood of
/// bad logins costs one cheap lookup each instead of a PBKDF2 or bcrypt run, and guessing one user's password
/// from many addresses is slowed as much as guessing from one. A success clears the user's count, never the
/// source's: otherwise anyone holding one valid account (their own) could log in with it between guesses and keep
/// their address below the threshold for ever, and so could anyone sharing an address with a client that logs in
/// often (the hostile-clients benchmark found half a core of password hashing that way). At most
/// `Limits.loginThrottleMaxKeys` keys are remembered (the oldest go first), so the table stays small whatever an
/// attacker sends.
///
/// The user-name count would let anyone lock a user out (six wrong logins as Administrator from anywhere kept
/// the real administrator out for the window): a source the user logged in from within
/// `Limits.loginTrustedSourceSeconds` is not throttled by the user's count, only by its own source count (OWASP's
/// "device cookie" rule, with the address as the device). Only a correct password makes a source trusted, so an
/// attacker cannot grow that table either.
public struct LoginThrottle: Sendable {
    public enum Decision: Equatable, Sendable {
        case allow
        /// Refused without a password check; retry after this many seconds.
        case throttled(retryAfterSeconds: Int)
    }

    struct Entry {
        var failures: Int
        var lastFailure: Double
    }

    private var entries: [String: Entry] = [:]
    /// Key → password checks begun (`beginCheck`) and not yet ended (`endCheck`): attempts whose outcome is not
    /// known yet, counted against the allowance as they arrive.
    private var pending: [String: Int] = [:]
    /// User and source (`trustKey`) → when that user last logged in from that source.
    private var trusted: [String: Double] = [:]
    /// Users never throttled by name, only by source: a machine account with a long random secret (the internal
    /// node user), which nobody can guess but anybody could lock out by failing five logins in its name, and
    /// with it every node's replication and cluster calls.
    let sourceOnlyUsers: Set<String>

    public init(sourceOnlyUsers: Set<String> = []) { self.sourceOnlyUsers = sourceOnlyUsers }

    func keys(source: String?, user: String?) -> [String] {
        var out: [String] = []
        if let source, !source.isEmpty { out.append("s:" + source) }
        if let user, !sourceOnlyUsers.contains(user) { out.append("u:" + user) }
        return out
    }

    static func trustKey(source: String, user: String) -> String { user + "\u{0}" + source }

    /// Whether `user` logged in from `source` recently enough that the user's own failure count does not apply.
    func isTrusted(source: String?, user: String?, now: Double) -> Bool {
        guard let source, !source.isEmpty, let user, let at = trusted[Self.trustKey(source: source, user: user)]
        else { return false }
        return now - at <= Double(Limits.loginTrustedSourceSeconds)
    }

    /// Whether an attempt from `source` for `user` may check its password at `now` (seconds, any epoch).
    public func decide(source: String?, user: String?, now: Double) -> Decision {
        var wait = 0.0
        let trustedSource = isTrusted(source: source, user: user, now: now)
        for key in keys(source: source, user: user) {
            if trustedSource && key.hasPrefix("u:") { continue }
            guard let e = entries[key], e.failures >= Limits.loginFailuresBeforeThrottle else { continue }
            let remaining = e.lastFailure + Double(Limits.loginFailureWindowSeconds) - now
            wait = max(wait, remaining)
        }
        guard wait > 0 else { return .allow }
        return .throttled(retryAfterSeconds: max(1, Int(wait.rounded(.up))))
    }

    /// What `beginCheck` decides.
    public enum CheckStart: Equatable, Sendable {
        /// Check the password now; call `endCheck` with the outcome exactly once.
        case allow
        /// Refused without a password check; retry after this many seconds.
        case throttled(retryAfterSeconds: Int)
        /// The key's failures and the checks still running for it already reach the allowance: nothing was
        /// counted; ask again once one of them ends (within `Limits.loginBusyWaitMs`).
        case busy
    }

    /// Like `decide`, but an allowed attempt is counted at once, before its password is checked: failures plus
    /// checks still running of a key (source or user) never exceed `Limits.loginFailuresBeforeThrottle`, so N
    /// attempts that arrive together (pipelined on one connection, or on many connections from one address) cost
    /// at most that many password checks before the first failures are recorded. A burst of correct logins is only
    /// slowed: the ones past the allowance are `busy` until a running check ends as a success.
    public mutating func beginCheck(source: String?, user: String?, now: Double) -> CheckStart {
        if case .throttled(let retry) = decide(source: source, user: user, now: now) {
            return .throttled(retryAfterSeconds: retry)
        }
        let trustedSource = isTrusted(source: source, user: user, now: now)
        let keys = keys(source: source, user: user)
        for key in keys where !(trustedSource && key.hasPrefix("u:")) {
            var failures = 0
            if let e = entries[key], now - e.lastFailure <= Double(Limits.loginFailureWindowSeconds) {
                failures = e.failures
            }
            if failures + (pending[key] ?? 0) >= Limits.loginFailuresBeforeThrottle { return .busy }
        }
        for key in keys { pending[key, default: 0] += 1 }
        return .allow
    }

    /// Ends a check `beginCheck` allowed, recording its outcome.
    public mutating func endCheck(source: String?, user: String?, succeeded: Bool, now: Double) {
        for key in keys(source: source, user: user) {
            guard let n = pending[key] else { continue }
            pending[key] = n > 1 ? n - 1 : nil
        }
        if succeeded {
            recordSuccess(source: source, user: user, now: now)
        } else {
            recordFailure(source: source, user: user, now: now)
        }
    }

    var pendingCount: Int { pending.values.reduce(0, +) }

    /// Records a failed password check.
    public mutating func recordFailure(source: String?, user: String?, now: Double) {
        for key in keys(source: source, user: user) {
            var e = entries[key] ?? Entry(failures: 0, lastFailure: now)
            if now - e.lastFailure > Double(Limits.loginFailureWindowSeconds) { e.failures = 0 }
            e.failures = min(e.failures + 1, Limits.loginFailuresBeforeThrottle)
            e.lastFailure = now
            entries[key] = e
        }
        if entries.count > Limits.loginThrottleMaxKeys { evictOldest() }
    }

    /// Records a successful login at `now`: the user's failures are forgotten (the source's age out with the
    /// window), and the source becomes trusted for the user.
    public mutating func recordSuccess(source: String?, user: String?, now: Double) {
        for key in keys(source: nil, user: user) { entries.removeValue(forKey: key) }
        guard let source, !source.isEmpty, let user else { return }
        trusted[Self.trustKey(source: source, user: user)] = now
        if trusted.count > Limits.loginThrottleMaxKeys {
            let oldest = trusted.sorted { $0.value < $1.value }.prefix(
                trusted.count - Limits.loginThrottleMaxKeys * 3 / 4)
            for (key, _) in oldest { trusted.removeValue(forKey: key) }
        }
    }

    var count: Int { entries.count }
    var trustedCount: Int { trusted.count }

    private mutating func evictOldest() {
        let excess = entries.count - Limits.loginThrottleMaxKeys * 3 / 4
        guard excess > 0 else { return }
        let oldest = entries.sorted { $0.value.lastFailure < $1.value.lastFailure }.prefix(excess).map(\.key)
        for key in oldest { entries.removeValue(forKey: key) }
    }
}

/// One process's `LoginThrottle`, shared by its ports (the KV port and the admin API of a node, the
/// gateway's public port), with a monotonic clock.
public final class LoginGuard: Sendable {
    private let state: Mutex<LoginThrottle>
    private let now: @Sendable () -> Double
    private let checks = Atomic<Int>(0)

    /// `sourceOnlyUsers`: see `LoginThrottle.sourceOnlyUsers`.
    public init(
        sourceOnlyUsers: Set<String> = [], now: @escaping @Sendable () -> Double = LoginGuard.monotonicSeconds
    ) {
        self.state = Mutex(LoginThrottle(sourceOnlyUsers: sourceOnlyUsers))
        self.now = now
    }

    public static let monotonicSeconds: @Sendable () -> Double = {
        let d = ContinuousClock.now - LoginGuard.start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    private static let start = ContinuousClock.now

    public func decide(source: String?, user: String?) -> LoginThrottle.Decision {
        let t = now()
        return state.withLock { $0.decide(source: source, user: user, now: t) }
    }

    public func recordFailure(source: String?, user: String?) {
        let t = now()
        state.withLock { $0.recordFailure(source: source, user: user, now: t) }
    }

    public func recordSuccess(source: String?, user: String?) {
        let t = now()
        state.withLock { $0.recordSuccess(source: source, user: user, now: t) }
    }

    /// `LoginThrottle.beginCheck` with this process's clock.
    public func beginCheck(source: String?, user: String?) -> LoginThrottle.CheckStart {
        let t = now()
        return state.withLock { $0.beginCheck(source: source, user: user, now: t) }
    }

    /// `LoginThrottle.endCheck` with this process's clock; counts the check in `passwordChecks`.
    public func endCheck(source: String?, user: String?, succeeded: Bool) {
        let t = now()
        state.withLock { $0.endCheck(source: source, user: user, succeeded: succeeded, now: t) }
        checks.add(1, ordering: .relaxed)
    }

    /// `beginCheck` for an async caller (the admin API, the gateway): while it says `busy` the caller's task
    /// suspends (`Task.sleep`, no thread is held) and asks again every `Limits.loginBusyRetryMs`, for at most
    /// `Limits.loginBusyWaitMs`; then, or when the task is cancelled, the last answer (`busy`) is returned and the
    /// login is to be refused unchecked. `.allow` must be followed by exactly one `endCheck`.
    public func beginCheckWaiting(source: String?, user: String?) async -> LoginThrottle.CheckStart {
        var waitedMs = 0
        while true {
            let start = beginCheck(source: source, user: user)
            guard start == .busy, waitedMs < Limits.loginBusyWaitMs, !Task.isCancelled else { return start }
            try? await Task.sleep(for: .milliseconds(Limits.loginBusyRetryMs))
            waitedMs += Limits.loginBusyRetryMs
        }
    }

    /// Password checks this guard's ports ran (`endCheck` calls) since start; `reset` keeps it. The node's
    /// `/metrics` shows it as `settee_password_checks_total`.
    public var passwordChecks: Int { checks.load(ordering: .relaxed) }

    /// Forgets every failure: the credentials changed (set, or adopted from the cluster), so failures against
    /// the old ones say nothing about guessing the new ones, and a client that tried too early (a node joining a
    /// cluster is asked to log in before it holds the cluster's credentials) must not stay locked out.
    public func reset() {
        state.withLock { $0 = LoginThrottle(sourceOnlyUsers: $0.sourceOnlyUsers) }
    }

    /// The host part of a NIO/HTTP remote address description (`[IPv4]127.0.0.1/127.0.0.1:5555` or
    /// `127.0.0.1:5555`): failures are counted per host, not per connection's port.
    public static func sourceHost(_ description: String?) -> String? {
        guard var d = description, !d.isEmpty, d != "?" else { return nil }
        if let slash = d.lastIndex(of: "/") { d = String(d[d.index(after: slash)...]) }
        if let colon = d.lastIndex(of: ":"), !d.hasSuffix("]") { d = String(d[..<colon]) }
        return d
    }
}
