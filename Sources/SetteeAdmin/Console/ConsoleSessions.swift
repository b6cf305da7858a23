import SetteeCore
import Synchronization

/// The admin console's log-in sessions: random tokens carried in an HttpOnly, SameSite=Strict cookie.
///
/// Invariants:
/// 1. A token is 32 bytes from the system CSPRNG, hex-encoded; only tokens this store issued are accepted.
/// 2. A session unused for `idleTimeout` is expired: the next lookup removes it and answers nil.
/// 3. At most `Limits.consoleMaxSessions` live sessions; a new one beyond that drops the least recently used.
/// 4. Nothing here holds a password: a session only says "the admin logged in".
public final class ConsoleSessions: Sendable {
    struct Session: Sendable {
        var lastUsed: ContinuousClock.Instant
    }

    let idleTimeout: Duration
    /// The cookie's name: `ui-auth-<admin port>`, so nodes on one host (cookies ignore ports) keep theirs apart.
    public let cookieName: String
    private let sessions = Mutex<[String: Session]>([:])

    public init(adminPort: Int, idleTimeout: Duration = .seconds(Limits.consoleSessionIdleTimeoutSeconds)) {
        self.idleTimeout = idleTimeout
        self.cookieName = "ui-auth-\(adminPort)"
    }

    /// Starts a session and returns its token.
    func create(now: ContinuousClock.Instant = .now) -> String {
        var rng = SystemRandomNumberGenerator()
        var token = ""
        token.reserveCapacity(64)
        for _ in 0..<4 {
            let word: UInt64 = rng.next()
            let hex = String(word, radix: 16)
            token += String(repeating: "0", count: 16 - hex.count) + hex
        }
        sessions.withLock { s in
            s = s.filter { now - $0.value.lastUsed < idleTimeout }
            if s.count >= Limits.consoleMaxSessions, let oldest = s.min(by: { $0.value.lastUsed < $1.value.lastUsed }) {
                s[oldest.key] = nil
            }
            s[token] = Session(lastUsed: now)
        }
        return token
    }

    /// Whether `token` names a live session; a live one is touched (its idle time restarts).
    func validate(_ token: String, now: ContinuousClock.Instant = .now) -> Bool {
        sessions.withLock { s in
            guard let session = s[token] else { return false }
            guard now - session.lastUsed < idleTimeout else {
                s[token] = nil
                return false
            }
            s[token]?.lastUsed = now
            return true
        }
    }

    func remove(_ token: String) {
        sessions.withLock { $0[token] = nil }
    }

    /// This store's cookie value in a `Cookie:` header, if any.
    func token(fromCookieHeader header: String?) -> String? {
        guard let header else { return nil }
        for part in header.split(separator: ";") {
            let pair = part.trimmingPrefixSpaces()
            guard let eq = pair.firstIndex(of: "=") else { continue }
            if pair[..<eq] == cookieName[...] {
                let value = pair[pair.index(after: eq)...]
                return value.isEmpty ? nil : String(value)
            }
        }
        return nil
    }
}

extension Substring {
    fileprivate func trimmingPrefixSpaces() -> Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}
