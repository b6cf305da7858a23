import Synchronization

/// A bound on the silence of a response body, which nothing else bounds: AsyncHTTPClient's deadline
/// (`execute(_:timeout:)`) ends when the response head arrives, and its read timeout is one per client
/// (`HTTPClient.Configuration.timeout.read`, unset on `RemoteEndpoint.sharedClient` and on the clients callers pass
/// in), too coarse for a continuous feed whose silence is bounded by the heartbeat it asked for. Without it a peer
/// that sends a head and then nothing holds the request, its connection and the replicator for ever.
///
/// `run` performs `body`, which calls `heard()` on the watch for every chunk it reads (an ordinary request also for
/// every piece of its own body written to the socket, and for its head: `AnswerCollector`); once `idle` passes
/// without a call, `body`'s task is cancelled (AsyncHTTPClient then closes the connection) and `run` fails with
/// `ReplicationError.network`, transient: the replicator's retry with backoff follows, as CouchDB's replicator
/// treats a feed silent past its `connection_timeout` as a failed connection.
///
/// A bound on silence alone lets a peer that sends a byte every `idle` less a little keep the request for ever, so
/// a request that is not a feed also passes `deadline`, the instant its whole request must be done by
/// (`ReplicationLimits.requestDeadlineMs` after it began): past it `run` fails the same way, whatever the peer sent.
enum IdleTimeout {
    /// When `body` last heard from the peer.
    final class Watch: Sendable {
        private let last = Mutex(ContinuousClock.now)

        /// Bytes arrived: the silence starts again.
        func heard() { last.withLock { $0 = .now } }

        var lastHeard: ContinuousClock.Instant { last.withLock { $0 } }
    }

    /// The whole request's bound: `instant` is when it is due, `total` how long it was given (for the message).
    struct Deadline: Sendable {
        var instant: ContinuousClock.Instant
        var total: Duration

        /// Due `total` from now.
        init(_ total: Duration) {
            self.instant = .now + total
            self.total = total
        }
    }

    private enum Outcome<R: Sendable>: Sendable {
        case done(R)
        case silent
        case overdue
    }

    /// `body`'s result, or `ReplicationError.network` naming `what` once `idle` passes without `heard()` (but not
    /// before `quietUntil`, if given) or once `deadline` (if any) passes.
    static func run<R: Sendable>(
        idle: Duration, deadline: Deadline? = nil, quietUntil: ContinuousClock.Instant? = nil,
        what: @autoclosure () -> String,
        _ body: @escaping @Sendable (Watch) async throws -> R
    ) async throws -> R {
        let watch = Watch()
        let outcome = try await withThrowingTaskGroup(of: Outcome<R>.self) { group -> Outcome<R>? in
            group.addTask { .done(try await body(watch)) }
            group.addTask {
                // At the timeout or the deadline; a cancellation error once `body` is done (or the caller is
                // cancelled).
                while true {
                    let now = ContinuousClock.now
                    if let deadline, now >= deadline.instant { return .overdue }
                    let silent = watch.lastHeard + idle
                    let due = quietUntil.map { max(silent, $0) } ?? silent
                    if now >= due { return .silent }
                    try await Task.sleep(until: deadline.map { min(due, $0.instant) } ?? due, clock: .continuous)
                }
            }
            defer { group.cancelAll() }
            return try await group.next()
        }
        switch outcome {
        case .done(let value)?:
            return value
        case .overdue?:
            throw overdue(what(), total: deadline?.total ?? .zero)
        case .silent?, nil:
            throw ReplicationError.network("\(what()): nothing from the peer for \(idle.milliseconds) ms")
        }
    }
}

extension IdleTimeout {
    /// The failure of a request that passed its whole deadline of `total`, whichever timer saw it first (`run`'s, or
    /// AsyncHTTPClient's own for the same instant: `HTTPClientError.deadlineExceeded`).
    static func overdue(_ what: String, total: Duration) -> ReplicationError {
        .network("\(what): the peer took longer than the request's deadline of \(total.milliseconds) ms")
    }
}

extension Duration {
    /// Whole milliseconds, for messages.
    fileprivate var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
