import SetteeCore
import Synchronization

/// Failed-login throttling per (user name, source address) pair, as a pure value: time comes in as seconds,
/// nothing here sleeps or locks. After `Limits.loginFailuresBeforeThrottle` failures of one pair inside
/// `Limits.loginFailureWindowSeconds`, further attempts of that user from that source are refused without checking
/// the password until the window has passed since the last failure, as CouchDB's `[chttpd_auth_lockout]` locks a
/// (user, peer address) pair out after `threshold` failures for `max_lifetime`. Keying the pair (ADR 0144) is what
/// keeps anyone else working: guesses at a user's password from other addresses never refuse that user at an
/// address that did not fail (the old per-user count made eight guessing clients answer the user's correct logins
/// 429 from everywhere), and failures in other names from one address (a fuzzer on 127.0.0.1) never refuse a user
/// there whose own logins did not fail (the old per-source count locked the administrator out of 127.0.0.1).
/// The cost is that each pair gets its own allowance: N addresses may try N × `loginFailuresBeforeThrottle`
/// passwords per window against one user, as in CouchDB; each failure is still answered only after
/// `Limits.loginFailureDelayMs`. A success clears its own pair's count (only the right password does that, so an
/// attacker's own account cannot reset the pair it guesses at). At most `Limits.loginThrottleMaxKeys` pairs are
/// remembered (the oldest failures go first), so the table stays small whatever names and addresses arrive.
/// A login without a source (a unix socket) is keyed by its user alone, one without a user name by its source.
///
/// Waiter list (ADR 0042, amendments "logins wait in line" and "each key has a share of the line"): an attempt past
/// the allowance of running checks (`beginCheck` says `busy`) may wait in line (`beginCheckOrWait`) instead of
/// polling. A waiter stands in the line of its key (`keys(source:user:)`: its pair's); the lines are indexed by
/// key, so an event looks only at the waiters it can answer. Invariants:
/// 1. A waiter holds no allowance: it is in `waiters` (and its key's `lines`) only, never in `pending`.
/// 2. After every event that can free allowance the waiters it can free are scanned in arrival order and each that
///    now fits is admitted (`.allow`, counted in `pending`) or, its key now throttled, answered `.throttled`: a
///    waiter never waits while it could be admitted. `endCheck`, `abandonCheck` and `recordSuccess` change only
///    their own key's counts, so they scan only that key's line; `forgetFailures` (and an `endCheck` whose failure
///    evicted old keys) may free anyone and scans all; a deadline scans its own ticket's line, then answers it.
///    (Failures ageing out of the window free nobody at an event: a waiter they hold is admitted by the next event
///    on its key or at its deadline, `Limits.loginBusyWaitMs`, far shorter than the window.)
/// 3. At most `Limits.loginMaxWaiters` wait, and an arrival whose key already has `Limits.loginMaxWaitersPerKey`
///    waiters in line is not queued: either is answered `.throttled` at once, so one pair's flood cannot take the
///    places of other logins.
/// 4. Each waiter is answered exactly once: by an `Admission` from one of those events, by `expireWaiter` at its
///    deadline (`.throttled` unless it fits then), or not at all if `cancelWaiter` removed it.
/// 5. `lines[k]` holds exactly the tickets of the waiters with key k, in arrival order, and no empty line is kept.
///
///     beginCheckOrWait ──allow/throttled (or line full)──▶ answered at once
///            │ busy
///            ▼
///        waiters, lines ──endCheck/abandonCheck/recordSuccess/──▶ Admission(ticket, allow | throttled)
///            │            forgetFailures/expireWaiter
///            └──cancelWaiter──▶ removed, unanswered
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
    /// A login waiting for its pair's running checks to end (`beginCheckOrWait` said `busy`).
    struct Waiter {
        let ticket: UInt64
        /// Arrival number, increasing: orders waiters across lines.
        let arrival: UInt64
        let source: String?
        let user: String?
        /// `keys(source:user:)`: the line it stands in (one key, or none for a login with neither name nor source).
        let keys: [String]
    }
    /// Waiting logins by ticket, at most `Limits.loginMaxWaiters`.
    private var waiters: [UInt64: Waiter] = [:]
    /// Key (user and source pair) → tickets of the waiters standing in its line, in arrival order (invariant 5). A
    /// line holds at most `Limits.loginMaxWaitersPerKey` waiters, all within `loginMaxWaiters`.
    private var lines: [String: [UInt64]] = [:]
    /// Arrivals so far (`Waiter.arrival`).
    private var arrivals: UInt64 = 0
    public init() {}

    /// The throttle's key for an attempt: its (user, source) pair (`p:` user NUL source), or `u:` user without a
    /// source, `s:` source without a user name; none for neither (nothing to count it against).
    func keys(source: String?, user: String?) -> [String] {
        let source = source.flatMap { $0.isEmpty ? nil : $0 }
        switch (user, source) {
        case let (user?, source?): return ["p:" + user + "\u{0}" + source]
        case let (user?, nil): return ["u:" + user]
        case let (nil, source?): return ["s:" + source]
        case (nil, nil): return []
        }
    }

    /// The keys whose failures count for an attempt at `now`: its pair's (`keys`). Kept as the one place an attempt's
    /// counted keys are named, should a rule ever count more than the pair.
    func countedKeys(source: String?, user: String?, now: Double) -> [String] {
        keys(source: source, user: user)
    }

    /// A key's failures if its last one is still inside the window at `now`, else nil: the one reading of a key's
    /// failures that `decide`, `beginCheck` and `recordFailure` share.
    func recentFailures(_ key: String, now: Double) -> Entry? {
        guard let e = entries[key], now - e.lastFailure < Double(Limits.loginFailureWindowSeconds) else { return nil }
        return e
    }

    /// Whether an attempt from `source` for `user` may check its password at `now` (seconds, any epoch).
    public func decide(source: String?, user: String?, now: Double) -> Decision {
        var wait = 0.0
        for key in countedKeys(source: source, user: user, now: now) {
            guard let e = recentFailures(key, now: now), e.failures >= Limits.loginFailuresBeforeThrottle else {
                continue
            }
            wait = max(wait, e.lastFailure + Double(Limits.loginFailureWindowSeconds) - now)
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
        /// counted. From `beginCheckOrWait`: the attempt waits in line and is answered by an `Admission`.
        case busy
    }

    /// The answer to a waiting login: `.allow` (counted, as from `beginCheck`) or `.throttled`.
    public struct Admission: Equatable, Sendable {
        public let ticket: UInt64
        public let start: CheckStart
    }

    /// Like `decide`, but an allowed attempt is counted at once, before its password is checked: failures plus
    /// checks still running of a key (a user at a source) never exceed `Limits.loginFailuresBeforeThrottle`, so N
    /// attempts of one user that arrive together (pipelined on one connection, or on many connections from one address) cost
    /// at most that many password checks before the first failures are recorded. A burst of correct logins is only
    /// slowed: the ones past the allowance are `busy` until a running check ends as a success.
    public mutating func beginCheck(source: String?, user: String?, now: Double) -> CheckStart {
        if case .throttled(let retry) = decide(source: source, user: user, now: now) {
            return .throttled(retryAfterSeconds: retry)
        }
        for key in countedKeys(source: source, user: user, now: now) {
            let failures = recentFailures(key, now: now)?.failures ?? 0
            if failures + (pending[key] ?? 0) >= Limits.loginFailuresBeforeThrottle { return .busy }
        }
        for key in keys(source: source, user: user) { pending[key, default: 0] += 1 }
        return .allow
    }

    /// `beginCheck`, but a `busy` attempt joins the waiter list under `ticket` (unique among waiters) and `busy` is
    /// returned: it is answered later by an `Admission` for `ticket` from `endCheck`, `recordSuccess`,
    /// `forgetFailures` or `expireWaiter`, unless `cancelWaiter` withdraws it. With `Limits.loginMaxWaiters`
    /// already waiting, or `Limits.loginMaxWaitersPerKey` in the line of one of its counted keys, it is answered
    /// `.throttled` at once (a ticket already waiting is too).
    public mutating func beginCheckOrWait(ticket: UInt64, source: String?, user: String?, now: Double) -> CheckStart {
        let start = beginCheck(source: source, user: user, now: now)
        guard start == .busy else { return start }
        guard waiters.count < Limits.loginMaxWaiters, waiters[ticket] == nil else {
            return .throttled(retryAfterSeconds: 1)
        }
        for key in countedKeys(source: source, user: user, now: now)
        where (lines[key]?.count ?? 0) >= Limits.loginMaxWaitersPerKey {
            return .throttled(retryAfterSeconds: 1)
        }
        arrivals += 1
        let waiter = Waiter(
            ticket: ticket, arrival: arrivals, source: source, user: user, keys: keys(source: source, user: user))
        waiters[ticket] = waiter
        for key in waiter.keys { lines[key, default: []].append(ticket) }
        return .busy
    }

    /// The waiter's deadline (`Limits.loginBusyWaitMs` after it arrived): the waiters of its lines that fit now are
    /// admitted, and `ticket`, if it still waits, is answered `.throttled`. Nothing when `ticket` no longer waits.
    public mutating func expireWaiter(_ ticket: UInt64, now: Double) -> [Admission] {
        guard let waiter = waiters[ticket] else { return [] }
        var out = admitWaiters(inLinesOf: waiter.keys, now: now)
        if removeWaiter(ticket) != nil {
            var retry = 1
            if case .throttled(let seconds) = decide(source: waiter.source, user: waiter.user, now: now) {
                retry = seconds
            }
            out.append(Admission(ticket: ticket, start: .throttled(retryAfterSeconds: retry)))
        }
        return out
    }

    /// Withdraws a waiter whose login went away (connection closed, task cancelled); returns whether it waited.
    /// It held no allowance, so only its places in the lines are freed.
    @discardableResult
    public mutating func cancelWaiter(_ ticket: UInt64) -> Bool {
        removeWaiter(ticket) != nil
    }

    var waiterCount: Int { waiters.count }

    /// Waiters standing in `key`'s line (tests and diagnostics); `key` as `keys(source:user:)` spells it.
    func lineLength(_ key: String) -> Int { lines[key]?.count ?? 0 }

    /// Invariant 5 holds (tests): every line lists exactly its key's waiters, in arrival order, none empty.
    var linesAreConsistent: Bool {
        var expected: [String: [UInt64]] = [:]
        for w in waiters.values.sorted(by: { $0.arrival < $1.arrival }) {
            for key in w.keys { expected[key, default: []].append(w.ticket) }
        }
        return expected == lines
    }

    /// Takes `ticket` out of `waiters` and its lines; nil if it was not waiting.
    private mutating func removeWaiter(_ ticket: UInt64) -> Waiter? {
        guard let waiter = waiters.removeValue(forKey: ticket) else { return nil }
        for key in waiter.keys {
            lines[key]?.removeAll { $0 == ticket }
            if lines[key]?.isEmpty == true { lines[key] = nil }
        }
        return waiter
    }

    /// Invariant 2 for an event that changed only `keys`' counts: the waiters of those lines, merged in
    /// arrival order, each answered if `beginCheck` now allows or throttles it. Waiters outside these lines are
    /// untouched: their keys' failures and running checks did not change, except by admissions here, which
    /// only add running checks.
    private mutating func admitWaiters(inLinesOf keys: [String], now: Double) -> [Admission] {
        var queue: [Waiter] = []
        for key in keys {
            guard let line = lines[key] else { continue }
            for ticket in line { if let w = waiters[ticket] { queue.append(w) } }
        }
        guard !queue.isEmpty else { return [] }
        if keys.count > 1 { queue.sort { $0.arrival < $1.arrival } }
        return admit(queue, now: now)
    }

    /// Invariant 2 for an event that may free anyone: every waiter, in arrival order.
    private mutating func admitAllWaiters(now: Double) -> [Admission] {
        guard !waiters.isEmpty else { return [] }
        return admit(waiters.values.sorted { $0.arrival < $1.arrival }, now: now)
    }

    /// Answers each of `queue` (in arrival order; a waiter standing in two of the scanned lines appears twice, side
    /// by side) that `beginCheck` now allows or throttles.
    private mutating func admit(_ queue: [Waiter], now: Double) -> [Admission] {
        var out: [Admission] = []
        var previous: UInt64 = 0
        for w in queue where w.arrival != previous {
            previous = w.arrival
            let start = beginCheck(source: w.source, user: w.user, now: now)
            guard start != .busy else { continue }
            _ = removeWaiter(w.ticket)
            out.append(Admission(ticket: w.ticket, start: start))
        }
        return out
    }

    /// Ends a check `beginCheck` allowed, recording its outcome; returns the waiters this answers (invariant 2).
    @discardableResult
    public mutating func endCheck(source: String?, user: String?, succeeded: Bool, now: Double) -> [Admission] {
        for key in keys(source: source, user: user) {
            guard let n = pending[key] else { continue }
            pending[key] = n > 1 ? n - 1 : nil
        }
        if succeeded {
            noteSuccess(source: source, user: user, now: now)
        } else if noteFailure(source: source, user: user, now: now) {
            return admitAllWaiters(now: now)  // forgotten keys may hold anyone back no longer
        }
        return admitWaiters(inLinesOf: keys(source: source, user: user), now: now)
    }

    /// Ends a check `beginCheck` allowed whose password was never checked (a SCRAM exchange dropped before its
    /// proof came: the connection closed, a new SASL_AUTH or HELLO replaced it, it timed out): its allowance is
    /// freed and nothing is recorded, since nothing was guessed. Returns the waiters this admits (invariant 2).
    public mutating func abandonCheck(source: String?, user: String?, now: Double) -> [Admission] {
        for key in keys(source: source, user: user) {
            guard let n = pending[key] else { continue }
            pending[key] = n > 1 ? n - 1 : nil
        }
        return admitWaiters(inLinesOf: keys(source: source, user: user), now: now)
    }

    /// Forgets every failure (the credentials changed); checks still running stay counted and
    /// waiters stay in line. Returns the waiters this admits.
    public mutating func forgetFailures(now: Double) -> [Admission] {
        entries = [:]
        return admitAllWaiters(now: now)
    }

    var pendingCount: Int { pending.values.reduce(0, +) }

    /// Records a failed password check.
    public mutating func recordFailure(source: String?, user: String?, now: Double) {
        noteFailure(source: source, user: user, now: now)
    }

    /// `recordFailure`; returns whether the oldest keys were forgotten to make room (`evictOldest`).
    @discardableResult
    private mutating func noteFailure(source: String?, user: String?, now: Double) -> Bool {
        for key in keys(source: source, user: user) {
            var e = recentFailures(key, now: now) ?? Entry(failures: 0, lastFailure: now)
            e.failures = min(e.failures + 1, Limits.loginFailuresBeforeThrottle)
            e.lastFailure = now
            entries[key] = e
        }
        guard entries.count > Limits.loginThrottleMaxKeys else { return false }
        evictOldest()
        return true
    }

    /// Records a successful login at `now`: its pair's failures are forgotten (only the right password gets here, so
    /// this resets nothing an attacker guesses at). Returns the waiters this admits.
    @discardableResult
    public mutating func recordSuccess(source: String?, user: String?, now: Double) -> [Admission] {
        noteSuccess(source: source, user: user, now: now)
        return admitWaiters(inLinesOf: keys(source: source, user: user), now: now)
    }

    private mutating func noteSuccess(source: String?, user: String?, now: Double) {
        for key in keys(source: source, user: user) { entries.removeValue(forKey: key) }
    }

    /// Keys with failures remembered (at most `Limits.loginThrottleMaxKeys`).
    var count: Int { entries.count }

    private mutating func evictOldest() {
        let excess = entries.count - Limits.loginThrottleMaxKeys * 3 / 4
        guard excess > 0 else { return }
        let oldest = entries.sorted { $0.value.lastFailure < $1.value.lastFailure }.prefix(excess).map(\.key)
        for key in oldest { entries.removeValue(forKey: key) }
    }
}

/// One process's `LoginThrottle`, shared by its ports (the KV port and the admin API of a node, the
/// gateway's public port), with a monotonic clock, and the callbacks of the logins waiting in its waiter list:
/// the lock covers the throttle and the callback table, and callbacks run after it is released. Every login it
/// refuses as throttled is counted (`throttledLogins`, for `/metrics`); the port that asked records it in the audit log
/// (`AuditEvent.loginThrottled`, ADR 0148), where the door and the peer's address are known.
public final class LoginGuard: Sendable {
    private struct Shared {
        var throttle: LoginThrottle
        /// Waiter ticket → how to answer that login (`beginCheck(ticket:source:user:resume:)`) and whose it is.
        var resumes: [UInt64: (resume: @Sendable (LoginThrottle.CheckStart) -> Void, source: String?, user: String?)] =
            [:]
    }
    private let state: Mutex<Shared>
    private let now: @Sendable () -> Double
    private let busyWait: Duration
    private let checks = Atomic<Int>(0)
    private let throttled = Atomic<Int>(0)
    private let tickets = Atomic<UInt64>(0)

    /// `now`: seconds on a monotonic clock (injected by tests). `busyWait`: how long `beginCheckWaiting` keeps a
    /// login in line before answering `.throttled` (`Limits.loginBusyWaitMs`; tests of other exits set it far
    /// beyond their bounds, so a scheduler stall cannot pass for the deadline).
    public init(
        now: @escaping @Sendable () -> Double = LoginGuard.monotonicSeconds,
        busyWait: Duration = .milliseconds(Limits.loginBusyWaitMs)
    ) {
        self.state = Mutex(Shared(throttle: LoginThrottle()))
        self.now = now
        self.busyWait = busyWait
    }

    /// Logins refused as throttled (too many failures of their user at their source, or a full line) since start.
    /// The node's `/metrics` shows it as `settee_login_throttled_total`, the gateway's as
    /// `settee_gateway_login_throttled_total`.
    public var throttledLogins: Int { throttled.load(ordering: .relaxed) }

    /// Counts an answer if it is a refusal; returns it unchanged. The one place a throttled login is counted: every
    /// refusal of every port passes here (`beginCheck`, waiters answered by `answer`).
    @discardableResult
    private func noted<T>(_ start: LoginThrottle.CheckStart, source: String?, user: String?, _ value: T) -> T {
        if case .throttled = start { throttled.add(1, ordering: .relaxed) }
        return value
    }

    public static let monotonicSeconds: @Sendable () -> Double = {
        let d = ContinuousClock.now - LoginGuard.start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    private static let start = ContinuousClock.now

    /// `LoginThrottle.decide` with this process's clock: a question, not an attempt (nothing is counted).
    public func decide(source: String?, user: String?) -> LoginThrottle.Decision {
        let t = now()
        return state.withLock { $0.throttle.decide(source: source, user: user, now: t) }
    }

    public func recordFailure(source: String?, user: String?) {
        let t = now()
        state.withLock { $0.throttle.recordFailure(source: source, user: user, now: t) }
    }

    public func recordSuccess(source: String?, user: String?) {
        answer { $0.recordSuccess(source: source, user: user, now: $1) }
    }

    /// `LoginThrottle.beginCheck` with this process's clock (`busy` means nothing was counted and nothing waits).
    public func beginCheck(source: String?, user: String?) -> LoginThrottle.CheckStart {
        let t = now()
        let start = state.withLock { $0.throttle.beginCheck(source: source, user: user, now: t) }
        return noted(start, source: source, user: user, start)
    }

    /// A ticket for `beginCheck(ticket:source:user:resume:)`, unique in this process.
    public func makeTicket() -> UInt64 { tickets.wrappingAdd(1, ordering: .relaxed).newValue }

    /// `LoginThrottle.beginCheckOrWait`: `.allow` or `.throttled` answer now and `resume` is never called; `.busy`
    /// means the login waits in line and `resume` will be called exactly once, on whatever thread ends the wait,
    /// with `.allow` (a running check ended and this one is admitted and counted: call `endCheck` once) or
    /// `.throttled` (its deadline passed, or it was cancelled). The caller must call `expireWaiter(ticket)` at its
    /// deadline (`Limits.loginBusyWaitMs`) and `cancelWaiter(ticket)` when the login goes away.
    public func beginCheck(
        ticket: UInt64, source: String?, user: String?,
        resume: @escaping @Sendable (LoginThrottle.CheckStart) -> Void
    ) -> LoginThrottle.CheckStart {
        let t = now()
        let start = state.withLock {
            let start = $0.throttle.beginCheckOrWait(ticket: ticket, source: source, user: user, now: t)
            if start == .busy { $0.resumes[ticket] = (resume, source, user) }
            return start
        }
        return noted(start, source: source, user: user, start)
    }

    /// The waiter's deadline: admitted if it fits now, else answered `.throttled`; nothing if it was answered.
    public func expireWaiter(_ ticket: UInt64) {
        answer { $0.expireWaiter(ticket, now: $1) }
    }

    /// Withdraws a waiting login (its connection closed, its task was cancelled): it leaves the line at once and its
    /// `resume` is called with `.throttled` so whatever awaits it ends; nothing if it was answered already.
    public func cancelWaiter(_ ticket: UInt64) {
        let resume = state.withLock { s -> (@Sendable (LoginThrottle.CheckStart) -> Void)? in
            guard s.throttle.cancelWaiter(ticket) else { return nil }
            return s.resumes.removeValue(forKey: ticket)?.resume
        }
        resume?(.throttled(retryAfterSeconds: 1))
    }

    /// Waiting logins (tests and diagnostics).
    public var waiterCount: Int { state.withLock { $0.throttle.waiterCount } }

    /// `LoginThrottle.endCheck` with this process's clock; counts the check in `passwordChecks` and answers the
    /// waiters it admits.
    public func endCheck(source: String?, user: String?, succeeded: Bool) {
        checks.add(1, ordering: .relaxed)
        answer { $0.endCheck(source: source, user: user, succeeded: succeeded, now: $1) }
    }

    /// `LoginThrottle.abandonCheck` with this process's clock: frees a check's allowance without a verdict (not
    /// counted in `passwordChecks`) and answers the waiters it admits.
    public func abandonCheck(source: String?, user: String?) {
        answer { $0.abandonCheck(source: source, user: user, now: $1) }
    }

    /// Runs a throttle event under the lock, then the callbacks of the waiters it answered, outside it.
    private func answer(_ event: (inout LoginThrottle, Double) -> [LoginThrottle.Admission]) {
        let t = now()
        let ready = state.withLock {
            s -> [(@Sendable (LoginThrottle.CheckStart) -> Void, LoginThrottle.CheckStart, String?, String?)] in
            event(&s.throttle, t).compactMap { a in
                s.resumes.removeValue(forKey: a.ticket).map { ($0.resume, a.start, $0.source, $0.user) }
            }
        }
        for (resume, start, source, user) in ready {
            noted(start, source: source, user: user, ())
            resume(start)
        }
    }

    /// `beginCheck` for an async caller (the admin API, the gateway): past the allowance the caller's task
    /// suspends on a continuation in the waiter list (no thread is held, nothing polls) until a running check ends
    /// and admits it, or `busyWait` (`Limits.loginBusyWaitMs`) passes, or the task is cancelled; the last two return
    /// `.throttled` and the login is to be refused unchecked. `.allow` must be followed by exactly one `endCheck`.
    public func beginCheckWaiting(source: String?, user: String?) async -> LoginThrottle.CheckStart {
        let first = beginCheck(source: source, user: user)
        guard first == .busy, !Task.isCancelled else {
            return first == .busy ? .throttled(retryAfterSeconds: 1) : first
        }
        let ticket = makeTicket()
        let busyWait = self.busyWait
        let deadline = Task { [self] in
            do { try await Task.sleep(for: busyWait) } catch { return }
            expireWaiter(ticket)
        }
        defer { deadline.cancel() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<LoginThrottle.CheckStart, Never>) in
                let start = beginCheck(ticket: ticket, source: source, user: user) { c.resume(returning: $0) }
                guard start == .busy else { return c.resume(returning: start) }
                // Cancelled before the waiter was registered: `onCancel` found nothing to withdraw.
                if Task.isCancelled { cancelWaiter(ticket) }
            }
        } onCancel: {
            cancelWaiter(ticket)
        }
    }

    /// Password checks this guard's ports ran (`endCheck` calls) since start; `reset` keeps it. The node's
    /// `/metrics` shows it as `settee_password_checks_total`.
    public var passwordChecks: Int { checks.load(ordering: .relaxed) }

    /// Forgets every failure: the credentials changed (set, or adopted from the cluster), so failures against
    /// the old ones say nothing about guessing the new ones, and a client that tried too early (a node joining a
    /// cluster is asked to log in before it holds the cluster's credentials) must not stay locked out.
    /// Checks still running stay counted and waiting logins stay in line (they may now be admitted).
    public func reset() {
        answer { throttle, t in throttle.forgetFailures(now: t) }
    }

    /// The host part of a NIO/HTTP remote address description: `[IPv4]127.0.0.1/127.0.0.1:5555` (an accepted
    /// socket's, NIO naming the host), `[IPv4]127.0.0.1:5555` (an address made without a host name),
    /// `[IPv6]::1/::1:5555` or `127.0.0.1:5555` all give the address alone (`127.0.0.1`, `::1`): failures are
    /// counted per host, not per connection's port, and every form of one address is one source. Nil for none.
    public static func sourceHost(_ description: String?) -> String? {
        guard var d = description, !d.isEmpty, d != "?" else { return nil }
        // NIO's family tag; without a host name no `/` follows it, and it must not stay part of the source.
        for tag in ["[IPv4]", "[IPv6]"] where d.hasPrefix(tag) { d = String(d.dropFirst(tag.count)) }
        if let slash = d.lastIndex(of: "/") { d = String(d[d.index(after: slash)...]) }
        if let colon = d.lastIndex(of: ":"), !d.hasSuffix("]") { d = String(d[..<colon]) }
        return d
    }
}
