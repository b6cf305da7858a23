/// When an HTTP connection must have sent a complete request head, as a pure value: the channel handlers
/// (`HeadDeadlineHandler`, `RequestPartObserver`) feed it events and carry out the actions it returns; nothing here
/// reads a clock or touches a channel.
///
/// States (`phase`):
/// - `awaitingHead`: no request is being read. The first head is timed from the connection's start (a client that
///   connects and sends nothing, or dribbles its first head, is closed at the deadline); a later head is timed from
///   the first read burst that leaves it incomplete (between requests, an idle keep-alive connection is the idle
///   timeout's business, not this one's).
/// - `readingRequest`: a head was decoded; its body and the response are not timed here.
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

    public init(upgradable: Bool) { self.upgradable = upgradable }

    /// The connection is active: time its first head.
    public mutating func connectionStarted() -> Action {
        guard phase == .awaitingHead, !armed else { return .none }
        armed = true
        return .arm
    }

    /// Some bytes arrived (before the HTTP decoder saw them).
    public mutating func bytesArrived() {
        if phase == .awaitingHead { bytesPending = true }
    }

    /// A read burst ended: a head that is still incomplete is timed from now.
    public mutating func readComplete() -> Action {
        guard phase == .awaitingHead, bytesPending, !armed else { return .none }
        armed = true
        return .arm
    }

    /// The decoder produced a request head; `upgrade`: it asks to switch protocols.
    public mutating func headDecoded(upgrade: Bool) -> Action {
        guard phase != .off else { return .none }
        sawHead = true
        bytesPending = false
        upgradeAsked = upgrade && upgradable
        phase = .readingRequest
        return disarm()
    }

    /// The pipeline switched protocols after a head asking to upgrade (the server accepted): frames are not heads,
    /// so the timing ends. Ignored unless `upgradeAsked` (a client cannot switch the deadline off).
    public mutating func upgraded() -> Action {
        guard upgradeAsked, phase != .off else { return .none }
        upgradeAsked = false
        phase = .off
        return disarm()
    }

    /// The decoder produced a request's end: the next bytes start the next head.
    public mutating func endDecoded() {
        guard phase == .readingRequest else { return }
        phase = .awaitingHead
        bytesPending = false
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
        return .answerBadRequestAndClose
    }

    /// The connection closed.
    public mutating func closed() -> Action {
        phase = .off
        return disarm()
    }

    private mutating func disarm() -> Action {
        guard armed else { return .none }
        armed = false
        return .disarm
    }
}
