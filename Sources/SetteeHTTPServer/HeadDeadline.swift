import SetteeCore

/// When an HTTP connection must have sent a complete request head, as a pure value: the channel handlers
/// (`HeadDeadlineHandler`, `RequestPartObserver`) feed it events and carry out the actions it returns; nothing here
/// reads a clock or touches a channel.
///
/// States (`phase`):
/// - `awaitingHead`: no request is being read. The first head is timed from the connection's start (a client that
///   connects and sends nothing, or dribbles its first head, is closed at the deadline); a later head is timed from
///   the first read burst that leaves it incomplete (between requests, an idle keep-alive connection is the idle
///   timeout's business, not this one's).
/// - `readingRequest`: a head was decoded and its end was not. A body still incomplete after a read burst is timed
///   by its rate (`BodyRate`): it is due `grace + bytes / minBytesPerSecond` after its head, so a client trickling a
///   body under a huge `Content-Length` is answered 408 (or only closed, once a response was written) instead of
///   holding the connection for as long as each byte resets the idle timeout. A body that arrives with its head in one
///   burst (every GET, most PUTs) never arms the body timer. The response is not timed here.
/// - `off`: the connection was upgraded (websocket), answered and closed, or the deadline passed.
///
/// A head asking to upgrade (on a pipeline that can switch protocols) sets `upgradeAsked` and is otherwise an
/// ordinary head: the timing ends only when the handler sees the switch happen (`upgraded()`: the HTTP decoder has
/// left the pipeline). An upgrade the server refuses leaves an HTTP connection, whose next head is timed as any.
///
/// Invariants:
/// 1. `armed` only in `awaitingHead`: decoding a head, an upgrade and every close disarm.
/// 4. `off` after an `Upgrade` head only once `upgraded()` reported the switch: asking to upgrade alone never ends
///    the timing (a refused upgrade stays under the deadline).
/// 2. The deadline answers `408` only on a connection that has decoded no head yet and sent some bytes, so the raw
///    answer can never cut into a response to an earlier request nor reach a client that asked nothing; otherwise
///    it only closes.
/// 3. At most one answer (`408` or `400`) per connection, then `off`.
/// 5. `bodyArmed` only in `readingRequest`: the request's end, an upgrade and every close disarm it; the body timer
///    answers `408` only to a connection's first request while nothing was written, else it only closes.
///
/// ```
///  start ──arm──▶ awaitingHead ──head──▶ readingRequest ──end──▶ awaitingHead (armed at the next partial head)
///                      │ deadline, or upgraded()  │ upgraded() (after a head with Upgrade, upgradable pipeline)
///                      ▼                         ▼
///                     off ◀──────────────────── off
/// ```
public struct HeadDeadline: Sendable, Equatable {
    public enum Action: Sendable, Equatable {
        case none
        /// Schedule the deadline timer now.
        case arm
        /// Cancel the deadline timer.
        case disarm
        /// Schedule the body timer to fire after this many nanoseconds (`bodyDeadlinePassed(now:)`).
        case armBody(afterNanos: UInt64)
        /// Cancel the body timer.
        case disarmBody
        /// Write `408 Request Timeout` with `Connection: close`, then close.
        case answerTimeoutAndClose
        /// Write `400 Bad Request` with `Connection: close`, then close.
        case answerBadRequestAndClose
        /// Close without an answer.
        case close
    }

    public enum Phase: Sendable, Equatable {
        case awaitingHead
        case readingRequest
        case off
    }

    public private(set) var phase: Phase = .awaitingHead
    public private(set) var armed = false
    /// Whether any request head was decoded on this connection.
    public private(set) var sawHead = false
    /// Bytes arrived since the last head was decoded (reset when a head completes).
    private var bytesPending = false
    /// Whether a request with an `Upgrade` header can end the timing (the pipeline can switch protocols).
    let upgradable: Bool
    /// The last head decoded asked to upgrade on an upgradable pipeline: the handler watches for the switch
    /// (`upgraded()`) until the next head.
    public private(set) var upgradeAsked = false
    /// The body timer is scheduled (only in `readingRequest`).
    public private(set) var bodyArmed = false
    /// How fast a request body must arrive.
    let bodyRate: BodyRate
    /// When the current request's head was decoded (monotonic nanoseconds, the caller's clock).
    private var headNanos: UInt64 = 0
    /// Bytes arrived since the current request's head was decoded (its body, and any pipelined bytes behind it).
    private var bodyBytes: UInt64 = 0
    /// Whether a response may have been written since the connection's first head: one was written for the current
    /// request, or it is not the connection's first (then the body timer only closes).
    private var responded = false

    /// How fast a request body must arrive: within `graceNanos` of its head, plus one second for every
    /// `minBytesPerSecond` bytes received (Apache mod_reqtimeout's `body=20,MinRate=500` rule).
    public struct BodyRate: Sendable, Equatable {
        public var graceNanos: UInt64
        public var minBytesPerSecond: UInt64

        /// `Limits.httpBodyGraceSeconds` and `Limits.httpMinBodyBytesPerSecond`.
        public static let standard = BodyRate(
            graceNanos: UInt64(Limits.httpBodyGraceSeconds) * 1_000_000_000,
            minBytesPerSecond: UInt64(Limits.httpMinBodyBytesPerSecond))

        public init(graceNanos: UInt64, minBytesPerSecond: UInt64) {
            self.graceNanos = graceNanos
            self.minBytesPerSecond = max(1, minBytesPerSecond)
        }

        /// Nanoseconds after its head a body of `bytes` bytes so far may take, saturating.
        func allowedNanos(bytes: UInt64) -> UInt64 {
            let perByte = 1_000_000_000 / minBytesPerSecond
            let (earned, overflow) = bytes.multipliedReportingOverflow(by: max(1, perByte))
            let (total, overflow2) = graceNanos.addingReportingOverflow(earned)
            return overflow || overflow2 ? .max : total
        }
    }

    public init(upgradable: Bool, bodyRate: BodyRate = .standard) {
        self.upgradable = upgradable
        self.bodyRate = bodyRate
    }

    /// The connection is active: time its first head.
    public mutating func connectionStarted() -> Action {
        guard phase == .awaitingHead, !armed else { return .none }
        armed = true
        return .arm
    }

    /// `count` bytes arrived (before the HTTP decoder saw them).
    public mutating func bytesArrived(_ count: Int) {
        switch phase {
        case .awaitingHead: bytesPending = true
        case .readingRequest:
            let (sum, overflow) = bodyBytes.addingReportingOverflow(UInt64(max(0, count)))
            bodyBytes = overflow ? .max : sum
        case .off: break
        }
    }

    /// A read burst ended at `now` (monotonic nanoseconds): a head that is still incomplete is timed from now; a
    /// request whose end has not arrived has its body timed from its head.
    public mutating func readComplete(now: UInt64) -> Action {
        switch phase {
        case .awaitingHead:
            guard bytesPending, !armed else { return .none }
            armed = true
            return .arm
        case .readingRequest:
            guard !bodyArmed, !upgradeAsked else { return .none }
            bodyArmed = true
            return .armBody(afterNanos: remainingBodyNanos(now: now) ?? 0)
        case .off:
            return .none
        }
    }

    /// The decoder produced a request head at `now` (monotonic nanoseconds); `upgrade`: it asks to switch protocols.
    public mutating func headDecoded(upgrade: Bool, now: UInt64) -> Action {
        guard phase != .off else { return .none }
        // A later request's 408 could land inside an earlier request's response still being written (pipelining):
        // only the first request may be answered by the body timer.
        responded = sawHead
        sawHead = true
        bytesPending = false
        upgradeAsked = upgrade && upgradable
        phase = .readingRequest
        headNanos = now
        bodyBytes = 0
        return disarm()
    }

    /// Response bytes were written for the current request.
    public mutating func responseWritten() {
        if phase == .readingRequest { responded = true }
    }

    /// The body timer fired at `now`: the body kept its rate (schedule the rest), or it did not (408 while nothing
    /// was answered, else only close).
    public mutating func bodyDeadlinePassed(now: UInt64) -> Action {
        guard phase == .readingRequest, bodyArmed else { return .none }
        if let remaining = remainingBodyNanos(now: now) { return .armBody(afterNanos: remaining) }
        bodyArmed = false
        phase = .off
        return responded ? .close : .answerTimeoutAndClose
    }

    /// Nanoseconds the current body has left at `now`, or nil when its time is up.
    private func remainingBodyNanos(now: UInt64) -> UInt64? {
        let elapsed = now >= headNanos ? now - headNanos : 0
        let allowed = bodyRate.allowedNanos(bytes: bodyBytes)
        return elapsed < allowed ? allowed - elapsed : nil
    }

    /// The pipeline switched protocols after a head asking to upgrade (the server accepted): frames are not heads,
    /// so the timing ends. Ignored unless `upgradeAsked` (a client cannot switch the deadline off).
    public mutating func upgraded() -> Action {
        guard upgradeAsked, phase != .off else { return .none }
        upgradeAsked = false
        phase = .off
        bodyArmed = false
        return disarm()
    }

    /// The decoder produced a request's end: the next bytes start the next head, and the body timer (if armed) is
    /// cancelled.
    public mutating func endDecoded() -> Action {
        guard phase == .readingRequest else { return .none }
        phase = .awaitingHead
        bytesPending = false
        guard bodyArmed else { return .none }
        bodyArmed = false
        return .disarmBody
    }

    /// The timer armed last fired.
    public mutating func deadlinePassed() -> Action {
        guard phase == .awaitingHead, armed else { return .none }
        armed = false
        phase = .off
        // 408 only to a client that started a head: one that sent nothing (a pooled client's spare connection, a
        // TLS client that never finished its handshake) did not ask anything, and an answer would be unsolicited.
        return sawHead || !bytesPending ? .close : .answerTimeoutAndClose
    }

    /// The HTTP decoder rejected the input.
    public mutating func parseFailed() -> Action {
        guard phase != .off else { return .none }
        phase = .off
        armed = false
        bodyArmed = false
        return .answerBadRequestAndClose
    }

    /// The connection closed (the handler cancels both timers).
    public mutating func closed() -> Action {
        phase = .off
        bodyArmed = false
        return disarm()
    }

    private mutating func disarm() -> Action {
        guard armed else { return .none }
        armed = false
        return .disarm
    }
}
