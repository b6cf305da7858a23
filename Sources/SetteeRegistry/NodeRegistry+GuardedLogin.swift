import SetteeAuth
import SetteeCore

/// What a password check through the login guard gave.
public enum GuardedLogin: Sendable, Equatable {
    /// Refused before any check: too many failures for this user name or address, or its running checks fill the
    /// allowance for longer than `Limits.loginBusyWaitMs` (HTTP: 429 with Retry-After).
    case throttled(retryAfterSeconds: Int)
    /// Checked: the principal, or nil for wrong credentials (answered after `Limits.loginFailureDelayMs`).
    case checked(NodeRegistry.Principal?)
}

extension NodeRegistry {
    /// The one way an HTTP port checks a password against this node's users (the admin port's Basic credentials
    /// and console log-in, the views port): the login guard first, so N wrong logins arriving together cost at most
    /// `Limits.loginFailuresBeforeThrottle` PBKDF2 runs; PBKDF2 (on a cache miss, a decoy one for an unknown user)
    /// on the blocking pool; the outcome counted for this user and `source`; a wrong one after the failure delay.
    /// The views port checked every guess without it.
    public func authenticateGuarded(source: String?, user: String, password: String) async -> GuardedLogin {
        let start = await loginGuard.beginCheckWaiting(source: source, user: user)
        guard start == .allow else {
            try? await Task.sleep(for: .milliseconds(Limits.loginFailureDelayMs))
            if case .throttled(let seconds) = start { return .throttled(retryAfterSeconds: seconds) }
            return .throttled(retryAfterSeconds: 1)
        }
        let principal = await BlockingPool.run { self.authenticate(username: user, password: password) }
        loginGuard.endCheck(source: source, user: user, succeeded: principal != nil)
        if principal == nil { try? await Task.sleep(for: .milliseconds(Limits.loginFailureDelayMs)) }
        return .checked(principal)
    }
}
