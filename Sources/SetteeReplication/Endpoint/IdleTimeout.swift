import Synchronization

/// A bound on the silence of a response body, which nothing else bounds: AsyncHTTPClient's deadline
/// (`execute(_:timeout:)`) ends when the response head arrives, and its read timeout is one per client
/// (`HTTPClient.Configuration.timeout.read`, unset on `RemoteEndpoint.sharedClient` and on the clients callers pass
/// in), too coarse for a continuous feed whose silence is bounded by the heartbeat it asked for. Without it a peer
/// that sends a head and then nothing holds the request, its connection and the replicator for ever.
///
/// `run` performs `body`, which calls `heard()` on the watch for every chunk it reads; once `idle` passes without
/// a call, `body`'s task is cancelled (AsyncHTTPClient then closes the connection) and `run` fails with
/// `ReplicationError.network`, transient: the replicator's retry with backoff follows, as CouchDB's replicator
/// treats a feed silent past its `connection_timeout` as a failed connection.
enum IdleTimeout {
    /// When `body` last heard from the peer.
    final class Watch: Sendable {
        private let last = Mutex(ContinuousClock.now)

        /// Bytes arrived: the silence starts again.
        func heard() { last.withLock { $0 = .now } }

        var lastHeard: ContinuousClock.Instant { last.withLock { $0 } }
    }

    /// `body`'s result, or `ReplicationError.network` naming `what` once `idle` passes without `heard()`.
    static func run<R: Sendable>(
        idle: Duration, what: @autoclosure () -> String, _ body: @escaping @Sendable (Watch) async throws -> R
    ) async throws -> R {
        let watch = Watch()
        let outcome = try await withThrowingTaskGroup(of: R?.self) { group -> R?? in
            group.addTask { try await body(watch) }
            group.addTask {
                // nil at the timeout; a cancellation error once `body` is done (or the caller is cancelled).
                while true {
                    let due = watch.lastHeard + idle
                    if ContinuousClock.now >= due { return nil }
                    try await Task.sleep(until: due, clock: .continuous)
                }
            }
            defer { group.cancelAll() }
            return try await group.next()
        }
        guard case .some(.some(let value)) = outcome else {
            throw ReplicationError.network("\(what()): nothing from the peer for \(idle.milliseconds) ms")
        }
        return value
    }
}

extension Duration {
    /// Whole milliseconds, for messages.
    fileprivate var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
