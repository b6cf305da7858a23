import Foundation
import Testing

/// A fixed pool of threads of the test process's own, as a task executor: what a suite marked `.onTestThreads` runs
/// on instead of the cooperative pool.
///
/// The cooperative pool has one thread per core, 2 on the machines `make test` runs on. A test that blocks (a
/// synchronous HTTP call to a server process, waiting for a process to start, a `usleep` while a flusher works, a
/// semaphore) holds one of them for as long as it blocks; two such tests at once left none for every in-process
/// server, replicator and async test beside them, which then missed their deadlines only when the machine was
/// busy (issue 69 item 8: a rehearsal under a load of 20 saw one-line JSON tests "pass after" 100 s and a
/// replicator's 3 s deadline take 184 s). Here a blocked test holds a thread of this pool only; jobs run in the
/// order they were enqueued, on whichever of the `threads` is free.
package final class TestThreadPool: TaskExecutor, @unchecked Sendable {
    /// The pool every `.onTestThreads` suite shares: 16 threads, so a few blocked tests leave the rest running.
    package static let shared = TestThreadPool(threads: 16, name: "settee-test-thread")
    /// One thread, jobs in the order they were enqueued: for async test work whose timing is what the test asserts
    /// (a fake peer's heartbeats and the reader that must hear them). On the cooperative pool, beside suites that
    /// block it, such work waited for seconds (a CI run saw a 1 s heartbeat feed go unread for over 6 s); here it
    /// waits only for the kernel's scheduler. Its work must not block.
    package static let oneThread = TestThreadPool(threads: 1, name: "settee-test-own-thread")

    private let condition = NSCondition()
    /// Jobs not yet run, oldest first from `head`; guarded by `condition`.
    private var jobs: [UnownedJob] = []
    private var head = 0

    private init(threads: Int, name: String) {
        for i in 0..<threads {
            let thread = Thread { [self] in self.runJobs() }
            thread.name = "\(name)-\(i)"
            thread.start()
        }
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
            while head == jobs.count { condition.wait() }
            let job = jobs[head]
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            }
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs a suite's tests (or one test) on `TestThreadPool.shared` rather than the cooperative pool: for tests that
/// block a thread (process tests' synchronous HTTP calls and process starts, storage tests' waits). Tasks the test
/// starts inherit the preference; tasks the code under test detaches do not.
package struct OnTestThreads: SuiteTrait, TestTrait, TestScoping {
    package var isRecursive: Bool { true }

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await withTaskExecutorPreference(TestThreadPool.shared) { try await function() }
    }
}

extension Trait where Self == OnTestThreads {
    /// `@Suite(.onTestThreads)`: the suite's tests run on the test process's own threads (`TestThreadPool`), so
    /// what they block is not the cooperative pool the code under test needs.
    package static var onTestThreads: Self { OnTestThreads() }
}
