import NIOPosix
import SetteeCore

/// The node's one pool of threads for blocking work called from async HTTP handlers: PBKDF2 password
/// checks, registry and index file I/O, JavaScript, and `stale=false` view queries that wait for an index.
///
/// Such work must never run on an event loop or on Swift's cooperative pool (a few blocked threads there
/// stall every task in the process). An unbounded dispatch queue would instead start a thread per waiting
/// call; this pool has `Limits.blockingPoolThreads` threads, and calls beyond that wait in its queue.
/// It lives here because the admin and views servers, its two users, both import the registry, whose
/// password checks and file writes are most of the work it runs.
public enum BlockingPool {
    /// Started on first use and never shut down (it lives as long as the process). A pool that was shut
    /// down still runs submitted work, on the submitting thread (NIO hands it the `.cancelled` state):
    /// callers always get their result.
    public static let shared: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: Limits.blockingPoolThreads)
        pool.start()
        return pool
    }()

    /// Runs `body` on a thread of `pool` and resumes with its result or error.
    public static func run<T: Sendable>(
        on pool: NIOThreadPool = shared, _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            pool.submit { _ in continuation.resume(with: Result { try body() }) }
        }
    }

    /// Runs `body` on a thread of `pool` and resumes with its result.
    public static func run<T: Sendable>(
        on pool: NIOThreadPool = shared, _ body: @escaping @Sendable () -> T
    ) async -> T {
        await withCheckedContinuation { continuation in
            pool.submit { _ in continuation.resume(returning: body()) }
        }
    }
}
