import SetteeCore
import SetteeProtocol

/// Whether an operation may be sent twice without changing its meaning.
public enum OperationKind: Sendable, Equatable {
    /// GET, GET_META, …: repeating changes nothing.
    case read
    /// Anything that changes a document: repeating after an unknown outcome could apply it twice.
    case mutation

    /// The kind of a memcached opcode (unknown opcodes count as mutations: the safe side).
    public init(_ opcode: Opcode) {
        switch opcode.loud {
        case .get, .getk, .getMeta, .noop, .version, .stat, .getClusterConfig, .observe, .observeSeqno:
            self = .read
        default:
            self = .mutation
        }
    }
}

/// What went wrong with one attempt.
public enum AttemptFailure: Sendable, Equatable {
    /// NOT_MY_VBUCKET; `adoptedNewerConfig` when its body carried a newer map that is now current.
    case notMyVBucket(adoptedNewerConfig: Bool)
    /// TMPFAIL (0x86) or BUSY: the server did nothing.
    case temporaryFailure
    /// SYNC_WRITE_IN_PROGRESS (0xa2): a durable write to the key is still pending; the server did nothing.
    /// Couchbase's SDKs retry it too, so concurrent writers of one key wait instead of failing.
    case syncWriteInProgress
    /// Nothing was written to the wire: no connection yet, connect refused, node marked down, no
    /// active node in the map.
    case notSent
    /// The connection closed after the request was written.
    case connectionLostAfterSend
    /// The deadline passed after the request was written.
    case timedOutAfterSend
}

/// The client's next step after a failed attempt.
public enum RetryDecision: Sendable, Equatable {
    /// Try again after `delayMs`, first fetching a fresh config when `refreshConfig`.
    case retry(delayMs: Int, refreshConfig: Bool)
    /// Give up: the error to surface.
    case fail(ClientError)
}

/// Which failures are retried, and when. Pure: a function of the failure, the attempt number and the
/// time left, so it is tested without sockets.
///
/// Rules:
/// 1. NOT_MY_VBUCKET with a newer map: retry at once on the new owner; again after that, with backoff (a node that
///    keeps answering with newer maps is churning, or hostile: at once every time, an operation parsed map after map
///    in a tight loop until its deadline).
/// 2. NOT_MY_VBUCKET without one: fetch a config from elsewhere, retry with backoff.
/// 3. TMPFAIL and not-sent: retry with backoff (nothing happened on the server).
/// 4. Connection lost after send / timeout after send: reads retry (after a refresh, the node may be
///    gone); mutations fail `ambiguous`, never retried.
/// 5. No retry is scheduled past the deadline: the op fails `timeout` (or the last definite error).
public struct RetryPolicy: Sendable, Equatable {
    public var initialBackoffMs: Int
    public var maxBackoffMs: Int

    public init(
        initialBackoffMs: Int = ClientLimits.retryBackoffInitialMs, maxBackoffMs: Int = ClientLimits.retryBackoffMaxMs
    ) {
        self.initialBackoffMs = initialBackoffMs
        self.maxBackoffMs = maxBackoffMs
    }

    /// Delay before retry number `attempt` (0-based): doubling from `initialBackoffMs`, capped.
    public func backoffMs(attempt: Int) -> Int {
        Backoff.doubling(initialBackoffMs, attempt: min(attempt, 20), cap: maxBackoffMs)
    }

    public func decide(
        operation: String, kind: OperationKind, failure: AttemptFailure, attempt: Int, elapsedMs: Int, timeoutMs: Int
    ) -> RetryDecision {
        let remaining = timeoutMs - elapsedMs
        let timeout = ClientError.timeout(operation: operation, afterMs: timeoutMs)
        let next: RetryDecision
        switch failure {
        case .notMyVBucket(let adopted):
            next =
                adopted
                ? .retry(delayMs: attempt == 0 ? 0 : backoffMs(attempt: attempt - 1), refreshConfig: false)
                : .retry(delayMs: backoffMs(attempt: attempt), refreshConfig: true)
        case .temporaryFailure, .syncWriteInProgress:
            next = .retry(delayMs: backoffMs(attempt: attempt), refreshConfig: false)
        case .notSent:
            next = .retry(delayMs: backoffMs(attempt: attempt), refreshConfig: true)
        case .connectionLostAfterSend:
            guard kind == .read else {
                return .fail(.ambiguous(operation: operation, reason: "connection lost after the request was sent"))
            }
            next = .retry(delayMs: backoffMs(attempt: attempt), refreshConfig: true)
        case .timedOutAfterSend:
            guard kind == .read else {
                return .fail(.ambiguous(operation: operation, reason: "no reply within \(timeoutMs) ms"))
            }
            return .fail(timeout)
        }
        if case .retry(let delay, _) = next, delay >= remaining {
            switch failure {
            case .temporaryFailure: return .fail(.temporaryFailure)
            case .syncWriteInProgress: return .fail(.syncWriteInProgress)
            default: return .fail(timeout)
            }
        }
        return next
    }
}
