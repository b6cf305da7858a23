import Foundation
import SetteeCore
import SetteeJS
import Synchronization

/// A JavaScript function of one document that answers yes or no, on a thread of its own (a `JSEngine` belongs to the
/// thread that made it): a webhook's `filter` (`event_handlers.document_changed[i].filter`) and a collection's
/// `import_filter` (Sync Gateway's `ImportFilterFunction`, db/import.go). The function is called with the document's
/// JSON body as its one argument, under the sync function's time limit (`Limits.jsCallTimeLimitSeconds`); only a
/// return value of exactly `true` accepts: `false`, any other value, a throw or a timeout refuses.
///
/// Calls are served one at a time in arrival order. The queue is bounded by its callers, each of which waits for its
/// answer: a webhook's lanes (`WebhookPolicy.lanes`) and a database's importers (one change-stream consumer and
/// requests importing on demand, themselves bounded by the HTTP server's request limits).
final class JavaScriptPredicate: @unchecked Sendable {
    // Guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [(body: [UInt8], done: CheckedContinuation<Bool?, Never>)] = []
    private var stopping = false
    private var startError: String?
    private var started = false

    /// Compiles `source` on a new thread named `threadName`. Throws `ConfigError` (path empty: the caller knows where
    /// the source came from) when the source is not a JavaScript function.
    init(source: String, threadName: String) throws(ConfigError) {
        let thread = Thread { [self] in run(source) }
        thread.name = threadName
        thread.start()
        condition.lock()
        while !started { condition.wait() }
        let error = startError
        condition.unlock()
        if let error { throw ConfigError(path: "", message: "function does not compile: \(error)") }
    }

    /// True when the function returns `true` for `body` (a JSON document). False after `shutdown()`.
    func accepts(_ body: [UInt8]) async -> Bool { await answer(body) ?? false }

    /// Whether the function returns `true` for `body`; nil when it was shut down before the call was queued (the
    /// function gave no answer: a caller that read this predicate just before it was replaced asks the new one).
    func answer(_ body: [UInt8]) async -> Bool? {
        await withCheckedContinuation { (c: CheckedContinuation<Bool?, Never>) in
            condition.lock()
            if stopping {
                condition.unlock()
                c.resume(returning: nil)
                return
            }
            jobs.append((body, c))
            condition.signal()
            condition.unlock()
        }
    }

    /// Stops the thread once the calls already queued are answered (a database reconfigured while an import waits
    /// on the old filter gets the old filter's answer, not a refusal it never made). Later calls answer false.
    func shutdown() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    /// Threads running each source now (an entry goes at zero): what a test reads to prove a path that made a
    /// predicate also stopped it (a thread nobody stops lives for the life of the process).
    private static let live = Mutex<[String: Int]>([:])

    /// How many predicate threads of `source` are running (compiling, waiting or answering).
    static func liveThreads(source: String) -> Int { live.withLock { $0[source] ?? 0 } }

    private func run(_ source: String) {
        Self.live.withLock { $0[source, default: 0] += 1 }
        defer {
            Self.live.withLock { counts in
                let left = (counts[source] ?? 1) - 1
                counts[source] = left > 0 ? left : nil
            }
        }
        let engine = JSEngine(timeLimitSeconds: Limits.jsCallTimeLimitSeconds)
        var function: JSFunction?
        do throws(JSError) { function = try engine.compileFunction(source) } catch {
            condition.lock()
            startError = "\(error)"
            started = true
            condition.broadcast()
            condition.unlock()
            return
        }
        condition.lock()
        started = true
        condition.broadcast()
        condition.unlock()
        guard let function else { return }
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            let result: Bool
            do throws(JSError) {
                result = try engine.call(function, [.json(job.body)]) == Array("true".utf8)
            } catch {
                result = false
            }
            job.done.resume(returning: result)
        }
    }
}
