import Foundation

/// Runs blocking test work (a socket read, a child process) on a thread of its own, so it does not hold one of the
/// cooperative pool's few threads: on 2 cores the pool has 2, and an in-process server under test (a gateway, a
/// client's callers) needs them while the test waits for its answer.
package func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// An executor with one thread of its own, for async test work whose timing is what the test asserts: a fake peer's
/// heartbeats and the reader that must hear them. On the cooperative pool's 2 threads, beside suites that block
/// them, such work waited for seconds (a CI run saw a 1 s heartbeat feed go unread for over 6 s); here it waits only
/// for the kernel's scheduler. Work runs in the order it was enqueued; it must not block.
package final class OwnThreadExecutor: TaskExecutor, @unchecked Sendable {
    /// The one every timing-sensitive test shares: their work is waiting on sockets and timers, not computing.
    package static let shared = OwnThreadExecutor(name: "settee-test-own-thread")

    private let condition = NSCondition()
    /// Jobs not yet run; guarded by `condition`.
    private var jobs: [UnownedJob] = []

    private init(name: String) {
        let thread = Thread { [self] in self.runJobs() }
        thread.name = name
        thread.start()
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let batch = jobs
            jobs.removeAll(keepingCapacity: true)
            condition.unlock()
            for job in batch { job.runSynchronously(on: asUnownedTaskExecutor()) }
        }
    }
}
