import Foundation
import SetteeCore
import SetteeJS
import SetteeJSON

/// One queued run of the sync function.
struct SyncJob: Sendable {
    var doc: JSON
    var oldDoc: JSON?
    var user: UserContext
    var continuation: UnsafeContinuation<Result<SyncOutcome, CouchError>, Never>
}

/// The threads behind a `SyncFunction`: a FIFO of jobs under an `NSCondition`, drained by workers that
/// each own a `JSEngine` with the wrapped function compiled in it.
final class SyncWorkerPool: @unchecked Sendable {
    // Guarded by `condition`.
    private let condition = NSCondition()
    private var queue: [SyncJob] = []
    private var head = 0
    private var stopping = false
    private var running = 0
    private var startupErrors: [CouchError] = []
    private var started = 0

    init(wrapped: String, threads: Int, timeLimitSeconds: Double, heapLimitBytes: Int) throws(CouchError) {
        for i in 0..<threads {
            let thread = Thread { [self] in
                workerMain(wrapped: wrapped, timeLimitSeconds: timeLimitSeconds, heapLimitBytes: heapLimitBytes)
            }
            thread.name = "settee.sync.\(i)"
            thread.start()
        }
        condition.lock()
        while started < threads { condition.wait() }
        let error = startupErrors.first
        condition.unlock()
        if let error {
            shutdown()
            throw error
        }
    }

    func submit(_ job: SyncJob) {
        condition.lock()
        if stopping || queue.count - head >= Limits.syncFunctionMaxQueuedRuns {
            let closed = stopping
            condition.unlock()
            job.continuation.resume(
                returning: .failure(
                    CouchError.status(503, closed ? "sync function closed" : "sync function overloaded")))
            return
        }
        queue.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Stops the workers after their current run and answers every queued run with 503.
    func shutdown() {
        condition.lock()
        stopping = true
        let pending = queue[head...]
        queue = []
        head = 0
        condition.broadcast()
        condition.unlock()
        for job in pending {
            job.continuation.resume(returning: .failure(CouchError.status(503, "sync function closed")))
        }
    }

    private func next() -> SyncJob? {
        condition.lock()
        defer { condition.unlock() }
        while head == queue.count && !stopping { condition.wait() }
        if stopping { return nil }
        let job = queue[head]
        head += 1
        if head > 64 && head * 2 > queue.count {
            queue.removeFirst(head)
            head = 0
        }
        return job
    }

    private func workerMain(wrapped: String, timeLimitSeconds: Double, heapLimitBytes: Int) {
        let engine = JSEngine(timeLimitSeconds: timeLimitSeconds, heapLimitBytes: heapLimitBytes)
        var function: JSFunction?
        do throws(JSError) {
            function = try engine.compileFunction(wrapped)
        } catch {
            condition.lock()
            startupErrors.append(CouchError.status(500, "sync function does not compile: \(error)"))
            started += 1
            condition.broadcast()
            condition.unlock()
            return
        }
        condition.lock()
        started += 1
        condition.broadcast()
        condition.unlock()
        guard let function else { return }
        while let job = next() {
            job.continuation.resume(returning: Self.run(job, function, engine))
        }
    }

    private static func run(_ job: SyncJob, _ function: JSFunction, _ engine: JSEngine) -> Result<
        SyncOutcome, CouchError
    > {
        let ctx: JSArgument
        if let name = job.user.name {
            ctx = .json(
                JSON.object([
                    ("name", .string(name)),
                    ("roles", .array(job.user.roles.sorted().map { .string($0) })),
                    ("channels", .array(job.user.channels.sorted().map { .string($0) })),
                ]).serialized())
        } else {
            ctx = .null
        }
        let old: JSArgument = job.oldDoc.map { .json($0.serialized()) } ?? .null
        let answer: [UInt8]?
        do throws(JSError) {
            answer = try engine.call(function, [.json(job.doc.serialized()), old, ctx])
        } catch .timeout {
            return .failure(
                CouchError.status(
                    500,
                    "Exception in JS sync function: stopped after \(engine.timeLimitSeconds)s (time limit)"))
        } catch .outOfMemory {
            return .failure(
                CouchError.status(
                    500,
                    "Exception in JS sync function: stopped holding over \(engine.heapLimitBytes >> 20) MiB (heap limit)"
                ))
        } catch {
            return .failure(CouchError.status(500, SyncFunction.exceptionReason))
        }
        guard let answer, let json = try? JSON.parse(answer) else {
            return .failure(CouchError.status(500, SyncFunction.exceptionReason))
        }
        do throws(CouchError) {
            return .success(try SyncFunction.outcome(from: json))
        } catch {
            return .failure(error)
        }
    }
}
