import Foundation

/// Runs blocking test work (a socket read, a child process) on a thread of its own, so it does not hold one of the
/// cooperative pool's few threads: on 2 cores the pool has 2, and an in-process server under test (a gateway, a
/// client's callers) needs them while the test waits for its answer.
package func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
