import Synchronization

/// Why a node's HTTP port closed a connection without answering what the client sent (or before answering anything):
/// the `reason` label of `settee_http_closed_without_response_total{port,reason}`.
public enum UnansweredCloseReason: String, Sendable, CaseIterable, Equatable {
    /// The head deadline closed a connection that sent no bytes, or whose earlier requests were answered
    /// (`HeadDeadline.deadlinePassed` returning `.close`).
    case headDeadline = "head_deadline"
    /// The body-rate timer closed a request whose body fell below its minimum rate after a response was written, or
    /// whose 408 could not be written (`HeadDeadline.bodyDeadlinePassed`).
    case bodyRate = "body_rate"
    /// A fixed 408 or 400 could not be written before `Limits.httpAnswerThenCloseGraceSeconds` (a TLS handshake
    /// never finished, a client that does not read).
    case answerUnwritten = "answer_unwritten"
    /// The HTTP decoder rejected the input and the connection closed before its 400 went out.
    case parseError = "parse_error"
    /// A TLS error (handshake, certificate, record) was caught on the connection before it closed.
    case tlsError = "tls_error"
    /// Another error (I/O, an error Hummingbird caught) was caught on the connection before it closed.
    case error
    /// The server closed a connection that had been quiet for the idle timeout (Hummingbird's idle handler).
    case idle
    /// The server was shutting down (`ChannelShouldQuiesceEvent`).
    case shutdown
    /// The server closed it for no reason this ledger saw.
    case other
}

/// What one HTTP connection has asked and been answered, as a pure value: the connection's
/// `HeadDeadlineHandler` feeds it events and, when the connection closes, asks whether the node closed it without
/// answering and why. Nothing here reads a clock or touches a channel (`now` is passed in, in nanoseconds).
///
/// A close counts only when (1) the node closed the connection (a close passed through the handler, the handler
/// closed it itself, or an error was caught), not the client, and (2) the client was left without an answer: it had
/// sent bytes no response write followed, or the connection never wrote a response at all (a connection that sent
/// nothing and is closed by a deadline still counts: a pooled client's spare connection learns of it only when it
/// sends). A client closing its own connection, or a server closing a keep-alive connection whose requests were all
/// answered, at most counts when nothing was ever answered on it.
public struct UnansweredClose: Sendable, Equatable {
    /// Bytes arrived after the last response write (a request, or part of one, is waiting for its answer).
    public private(set) var awaitingAnswer = false
    /// Some response bytes were written on this connection.
    public private(set) var answered = false
    /// The node asked to close the connection (a close went through the handler, or the handler closed it).
    public private(set) var closedByServer = false
    /// The first known cause of the close, if any.
    public private(set) var cause: UnansweredCloseReason?
    /// When bytes last arrived or a response was last written (nanoseconds, the caller's clock).
    private var lastActivity: UInt64

    public init(now: UInt64) { lastActivity = now }

    public mutating func bytesArrived(now: UInt64) {
        awaitingAnswer = true
        lastActivity = now
    }

    public mutating func responseWritten(now: UInt64) {
        awaitingAnswer = false
        answered = true
        lastActivity = now
    }

    /// The handler closes the connection itself (`cause`: head deadline, unwritten answer).
    public mutating func closing(_ cause: UnansweredCloseReason) {
        closedByServer = true
        if self.cause == nil { self.cause = cause }
    }

    /// A close from a handler above (Hummingbird) went through the handler.
    public mutating func closeRequested() { closedByServer = true }

    /// An error was caught on the connection: the stack closes it after (NIOSSL, Hummingbird).
    public mutating func errorCaught(tls: Bool, parse: Bool) {
        closedByServer = true
        if cause == nil { cause = tls ? .tlsError : parse ? .parseError : .error }
    }

    /// The server is shutting down: its quiesce event closes connections with no request in progress.
    public mutating func quiesce() {
        if cause == nil { cause = .shutdown }
    }

    /// The connection closed: the reason to count, or nil (the client closed, or everything was answered).
    /// `idleTimeoutNanos`: the port's idle timeout, to tell Hummingbird's idle close from other closes.
    public func closed(now: UInt64, idleTimeoutNanos: UInt64) -> UnansweredCloseReason? {
        guard closedByServer, awaitingAnswer || !answered else { return nil }
        if let cause { return cause }
        let quiet = now >= lastActivity ? now - lastActivity : 0
        return quiet >= idleTimeoutNanos ? .idle : .other
    }
}

/// Counts of unanswered closes by reason for one port, shared by every connection of that port; `/metrics` reads
/// them. Also decides when a close is logged: at most once per reason per second (a flood of hostile connections
/// must not flood the log).
public final class UnansweredCloseCounts: Sendable {
    private struct State {
        /// By `UnansweredCloseReason.allCases` index.
        var counts = UnansweredCloseReason.allCases.map { _ in 0 }
        var lastLogged: [UnansweredCloseReason: UInt64] = [:]
    }
    /// One lock for counts and log times: closes are rare events next to requests.
    private let state = Mutex(State())
    /// Nanoseconds between two log lines of one reason.
    static let logIntervalNanos: UInt64 = 1_000_000_000

    public init() {}

    /// Unanswered closes of `reason` since start.
    public func count(_ reason: UnansweredCloseReason) -> Int {
        state.withLock { $0.counts[Self.index(reason)] }
    }

    /// Counts one close; true when it should be logged (the first of its reason within a second).
    public func record(_ reason: UnansweredCloseReason, now: UInt64) -> Bool {
        state.withLock { s in
            s.counts[Self.index(reason)] &+= 1
            if let previous = s.lastLogged[reason], now >= previous, now - previous < Self.logIntervalNanos {
                return false
            }
            s.lastLogged[reason] = now
            return true
        }
    }

    private static func index(_ reason: UnansweredCloseReason) -> Int {
        UnansweredCloseReason.allCases.firstIndex(of: reason) ?? 0
    }
}
