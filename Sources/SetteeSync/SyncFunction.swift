import Foundation
import SetteeCore
import SetteeJS
import SetteeJSON

/// A compiled sync function and the threads that run it.
///
/// Invariants:
/// 1. JavaScript runs only on this function's worker threads, each owning one `JSEngine` (created,
///    used and destroyed there); never on the caller's thread, a NIO event loop or the cooperative pool.
/// 2. Every worker compiled the same wrapped source before `init` returned; a source that does not
///    compile fails `init` and no worker survives.
/// 3. A run longer than `timeLimitSeconds`, or holding more than `heapLimitBytes` of JavaScript heap (ADR 0111),
///    is stopped by JSC's watchdog, answers 500, and the worker's engine keeps serving later runs.
/// 4. Every submitted run is answered exactly once, including runs still queued when the function is
///    deallocated (503).
///
/// ```
///  caller (async) --submit--> [queue] --> worker 1 (JSEngine) --resume--> caller
///                                     \-> worker 2 (JSEngine) --/
/// ```
public final class SyncFunction: Sendable {
    private let pool: SyncWorkerPool
    /// The configured source (nil: the default function).
    public let source: String?

    /// Compiles `source` (nil: `function(doc){channel(doc.channels);}`) on `threads` worker threads.
    /// Blocks until every worker has compiled it (a few milliseconds); a compile error is a 500
    /// rejection whose reason carries JavaScriptCore's message. `heapLimitBytes` is each worker engine's heap
    /// bound (`Limits.jsHeapMaxBytes`; tests lower it).
    public init(
        source: String?, threads: Int = Limits.syncFunctionThreads,
        timeLimitSeconds: Double = Limits.syncFunctionTimeLimitSeconds, heapLimitBytes: Int = Limits.jsHeapMaxBytes
    ) throws(CouchError) {
        precondition(threads > 0, "a sync function needs at least one thread, got \(threads)")
        self.source = source
        let trimmed = source?.trimmingCharacters(in: .whitespacesAndNewlines)
        let body = (trimmed?.isEmpty ?? true) ? SyncWrapper.defaultSource : trimmed!
        pool = try SyncWorkerPool(
            wrapped: SyncWrapper.source(wrapping: body), threads: threads, timeLimitSeconds: timeLimitSeconds,
            heapLimitBytes: heapLimitBytes)
    }

    deinit { pool.shutdown() }

    /// The reason Sync Gateway gives for an unexpected exception.
    public static let exceptionReason = "Exception in JS sync function"

    /// Runs the function for a new revision `doc` (with `_id`, `_rev`, `_deleted`, `_attachments` stubs)
    /// whose parent body is `oldDoc` (nil: none), as `user` (name nil: admin/import, no validation).
    /// The work happens on a worker thread; the caller is resumed with the outcome.
    ///
    /// A refused write throws the `CouchError` the gateway answers with: 403 (`throw({forbidden})` or a failed
    /// `require*`), 401 (`throw({unauthorized})`), 400 (an illegal channel name, too many grants), 500 (any other
    /// exception, a runaway function stopped by the watchdog, malformed `access()`/`role()`/`expiry()` arguments),
    /// 503 (the function's worker pool is closed or saturated).
    public func run(doc: JSON, oldDoc: JSON?, user: UserContext) async throws(CouchError) -> SyncOutcome {
        let result = await withUnsafeContinuation {
            (c: UnsafeContinuation<Result<SyncOutcome, CouchError>, Never>) in
            pool.submit(SyncJob(doc: doc, oldDoc: oldDoc, user: user, continuation: c))
        }
        return try result.get()
    }

    /// The driver's raw answer turned into an outcome, with Sync Gateway's validation of names.
    static func outcome(from answer: JSON) throws(CouchError) -> SyncOutcome {
        if let status = answer["status"]?.intValue {
            throw CouchError.status(status, answer["reason"]?.stringValue ?? "")
        }
        var out = SyncOutcome()
        // One run may name at most `Limits.maxChannelsPerGrant` channels, access grants and roles each (it was
        // checked for principals' documents only): a document naming a million channels made a log per channel.
        func bounded(_ n: Int, _ what: String) throws(CouchError) {
            guard n <= Limits.maxChannelsPerGrant else {
                throw CouchError.status(400, "Too many \(what) (max \(Limits.maxChannelsPerGrant))")
            }
        }
        try bounded(answer["channels"]?.arrayValue?.count ?? 0, "channels")
        try bounded(
            answer["access"]?.objectValue?.reduce(0) { $0 + ($1.1.arrayValue?.count ?? 1) } ?? 0, "access grants")
        try bounded(answer["roles"]?.objectValue?.reduce(0) { $0 + ($1.1.arrayValue?.count ?? 1) } ?? 0, "role grants")
        for c in answer["channels"]?.arrayValue ?? [] {
            guard let name = c.stringValue else { continue }
            guard Names.isValidChannelName(name) else {
                throw CouchError.status(400, "Illegal channel name \(quoted(name))")
            }
            out.channels.insert(name)
        }
        if out.channels.contains(ChannelAccess.star) { out.channels = [ChannelAccess.star] }
        for (principal, list) in answer["access"]?.objectValue ?? [] {
            let bare = principal.hasPrefix(Names.rolePrefix) ? String(principal.dropFirst(5)) : principal
            guard Names.isValidPrincipalName(bare) else {
                throw CouchError.status(500, "access(): invalid user or role name \(quoted(principal))")
            }
            var set = Set<String>()
            for c in list.arrayValue ?? [] {
                guard let name = c.stringValue, name != ChannelAccess.star else { continue }
                guard Names.isValidChannelName(name) else {
                    throw CouchError.status(500, "access(): illegal channel name \(quoted(name))")
                }
                set.insert(name)
            }
            if !set.isEmpty { out.access[principal, default: []].formUnion(set) }
        }
        for (user, list) in answer["roles"]?.objectValue ?? [] {
            guard Names.isValidPrincipalName(user) else {
                throw CouchError.status(500, "role(): invalid user name \(quoted(user))")
            }
            var set = Set<String>()
            for r in list.arrayValue ?? [] {
                guard let value = r.stringValue else { continue }
                guard value.hasPrefix(Names.rolePrefix) else {
                    throw CouchError.status(
                        500, "role(): value \(quoted(value)) does not begin with \"role:\"")
                }
                let name = String(value.dropFirst(Names.rolePrefix.count))
                guard name != ChannelAccess.star else { continue }
                guard Names.isValidPrincipalName(name), !name.isEmpty else {
                    throw CouchError.status(500, "role(): invalid role name \(quoted(name))")
                }
                set.insert(name)
            }
            if !set.isEmpty { out.roles[user, default: []].formUnion(set) }
        }
        if let e = answer["expiry"], !e.isNull {
            out.expiry = try expiry(e)
        }
        return out
    }

    private static func expiry(_ value: JSON) throws(CouchError) -> UInt32 {
        var number = value.numberValue
        if number == nil, let s = value.stringValue { number = Double(s) }
        guard let n = number, n >= 0, n <= Double(UInt32.max), n.rounded() == n else {
            throw CouchError.status(500, "expiry(): not a number of seconds: \(value.text)")
        }
        return UInt32(n)
    }

    private static func quoted(_ s: String) -> String { JSON.string(s).text }
}
