import Dispatch
import Foundation
import SetteeClient
import SetteeCore
import SetteeTestSupport
import Testing

/// One serial queue as a task executor: a test can hold it (a job that sleeps) the way a busy cooperative pool
/// holds a client's tasks, deterministically.
final class OneQueueExecutor: TaskExecutor, @unchecked Sendable {
    let queue = DispatchQueue(label: "settee.test.one-queue-executor")

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// The admin port's "connection closed before a complete response" when many clusters start at once (issue 16,
/// ADR 0053): the smart client's `AdminHTTP` connected, then wrote its request only when its task ran again; with the
/// test process's cooperative pool busy for over 10 s (two threads on two cores, other suites blocking them), the
/// node's head deadline closed the connection that had sent nothing.
@Suite(.onTestThreads) struct AdminHTTPStarvedClientProcessTests {
    /// Proves the request goes out as soon as the connection is up, whatever the calling task's executor does: the
    /// task's executor is held for 3 s right after it started connecting, and a node whose head deadline is 1 s
    /// (`--http-idle-timeout 1`) still answers. Before, the request was written by the task after the hold and the
    /// node had closed the connection unanswered ("connection closed before a complete response").
    @Test func aStarvedCallerStillSendsItsRequestInTime() async throws {
        let server = try ServerProcess(name: "starved-client")
        server.extraArguments = ["--http-idle-timeout", "1"]
        try server.start()
        defer { server.stopAndRemove() }
        let executor = OneQueueExecutor()
        let address = NodeAddress(host: "127.0.0.1", port: server.adminPort)
        let started = Date()
        let call = Task(executorPreference: executor) {
            try await AdminHTTP.request(.GET, "/pools", at: address, username: nil, password: nil, timeoutMs: 20_000)
        }
        // Queued behind the task's first job, which runs up to its first suspension (the connect): the rest of the
        // call waits the whole hold, as under a starved pool.
        executor.queue.async { usleep(3_000_000) }
        let response = try await call.value
        #expect(Date().timeIntervalSince(started) >= 2.9, "the hold did not delay the caller")
        #expect(response.status == 200 || response.status == 401, "\(response.status) \(response.text)")
    }
}
