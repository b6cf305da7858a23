import SetteeCore
import Synchronization

/// Failed-login throttling per source address and per user name, as a pure value: time comes in as
/// seconds, nothing here sleeps or locks. After `Limits.loginFailuresBeforeThrottle` failures of one key
/// (a source, or a user name) inside `Limits.loginFailureWindowSeconds`, further attempts with that key are
/// refused without checking the password until the window has passed since the last failure, so a flood of
/// bad logins costs one cheap lookup each instead of a PBKDF2 or bcrypt run, and guessing one user's password
/// from many addresses is slowed as much as guessing from one. A success clears the user's and the source's
/// counts. At most `Limits.loginThrottleMaxKeys` keys are remembered (the oldest go first), so the table
/// stays small whatever an attacker sends.
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

    /// Whether an attempt from `source` for `user` may check its password at `now` (seconds, any epoch).
    public func decide(source: String?, user: String?, now: Double) -> Decision {
        var wait = 0.0
        for key in keys(source: source, user: user) {
            guard let e = entries[key], e.failures >= Limits.loginFailuresBeforeThrottle else { continue }
            let remaining = e.lastFailure + Double(Limits.loginFailureWindowSeconds) - now
            wait = max(wait, remaining)
        }
        guard wait > 0 else { return .allow }
        return .throttled(retryAfterSeconds: max(1, Int(wait.rounded(.up))))
    }

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

    /// Records a successful login: the user's and the source's failures are forgotten.
    public mutating func recordSuccess(source: String?, user: String?) {
        for key in keys(source: source, user: user) { entries.removeValue(forKey: key) }
    }

    var count: Int { entries.count }

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
        state.withLock { $0.recordSuccess(source: source, user: user) }
    }

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
