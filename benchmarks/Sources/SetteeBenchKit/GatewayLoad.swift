import Histogram
import NIOCore
import NIOHTTP1
import SetteeJSON
import Synchronization

/// Settings of the gateway phases.
public struct GatewayLoadOptions: Sendable {
    public var docs: Int
    public var docSize: Int
    /// Documents per `_revs_diff`/`_bulk_docs` batch, rows per `_changes` page and per `_bulk_get`.
    public var batch: Int
    /// Concurrent batches (push) or `_bulk_get`s (pull).
    public var connections: Int
    /// fanout: long-poll feeds held open.
    public var clients: Int
    /// fanout: the feeds' `timeout` (and how long a write may take to reach them all).
    public var waitMillis: Int
    /// fanout: longest wait for every feed's response head before the write is sent anyway.
    public var settleMillis: Int
    /// Basic credentials for the public port (nil = GUEST).
    public var user: (name: String, password: String)?
    public var progress: Bool

    public init(
        docs: Int, docSize: Int, batch: Int, connections: Int, clients: Int, waitMillis: Int = 30_000,
        settleMillis: Int = 10_000, user: (name: String, password: String)? = nil, progress: Bool = true
    ) {
        self.docs = docs
        self.docSize = docSize
        self.batch = batch
        self.connections = connections
        self.clients = clients
        self.waitMillis = waitMillis
        self.settleMillis = settleMillis
        self.user = user
        self.progress = progress
    }
}

/// A shared counter for tasks (an `Atomic` cannot be captured by escaping closures).
final class Counter: Sendable {
    private let atomic = Atomic<Int>(0)

    /// Adds `n`, returning the value before.
    @discardableResult
    func add(_ n: Int) -> Int { atomic.add(n, ordering: .relaxed).oldValue }
    var value: Int { atomic.load(ordering: .relaxed) }
}

/// What one worker of a phase measured; merged at the end.
struct WorkerTally: Sendable {
    var docs = 0
    var requests = 0
    var errors: [String: Int] = [:]
    var latency = makeLatencyHistogram()
    var perRequest: [String: Histogram<UInt64>] = [:]

    mutating func record(_ kind: String, _ nanos: UInt64) {
        requests += 1
        _ = perRequest[kind, default: makeLatencyHistogram()].record(max(nanos, 1))
    }

    mutating func error(_ kind: String) { errors[kind, default: 0] += 1 }

    mutating func merge(_ o: WorkerTally) {
        docs += o.docs
        requests += o.requests
        errors.merge(o.errors, uniquingKeysWith: +)
        latency.add(o.latency)
        for (k, h) in o.perRequest { perRequest[k, default: makeLatencyHistogram()].add(h) }
    }
}

/// Replicator-shaped load on one gateway database over real HTTP (`HTTPConnection`).
public struct GatewayLoad: Sendable {
    public let group: any EventLoopGroup
    public let target: GatewayTarget
    public let options: GatewayLoadOptions

    public init(group: any EventLoopGroup, target: GatewayTarget, options: GatewayLoadOptions) {
        self.group = group
        self.target = target
        self.options = options
    }

    func connectPublic() async throws -> HTTPConnection {
        try await HTTPConnection.connect(
            group: group, host: target.publicURL.host, port: target.publicURL.port,
            basicAuth: options.user.map { ($0.name, $0.password) })
    }

    /// A connection for database-level reads and the fan-out write: the admin port when given.
    func connectControl() async throws -> (HTTPConnection, GatewayEndpoint) {
        if let admin = target.adminURL {
            return (try await HTTPConnection.connect(group: group, host: admin.host, port: admin.port), admin)
        }
        return (try await connectPublic(), target.publicURL)
    }

    /// The database's current `update_seq` (`GET /db/`), as the `since` of a feed that wants only what
    /// comes next.
    public func updateSeq() async throws -> String {
        let (c, endpoint) = try await connectControl()
        defer { Task { await c.close() } }
        let reply = try await c.request(.GET, endpoint.path("/"))
        guard let seq = (try? JSON.parse(reply.body.readableBytesView))?["update_seq"]?.sequenceText else {
            throw HTTPClientError.malformed("GET /\(endpoint.db)/ has no update_seq")
        }
        return seq
    }

    private func progressTask(_ label: String, _ counter: Counter) -> Task<Void, Never>? {
        guard options.progress else { return nil }
        return Task {
            var last = 0
            var seconds = 0
            while !Task.isCancelled {
                do { try await Task.sleep(for: .seconds(1)) } catch { return }
                seconds += 1
                let now = counter.value
                printErr("[\(label)] \(seconds)s  \(now - last) docs/s  total \(now)")
                last = now
            }
        }
    }

    // MARK: push

    /// Pushes `options.docs` new documents named `<prefix>-NNNNNN` as a replicator does: for each batch
    /// `_revs_diff`, then `_bulk_docs` with `new_edits=false` carrying the missing ones with `_revisions`.
    /// `options.connections` batches are in flight at once. Latency: one batch, both requests.
    public func push(prefix: String, round: Int) async -> GatewayPhaseResult {
        let set = GatewayRequests.DocSet(prefix: prefix, count: options.docs, docSize: options.docSize)
        let batches = (options.docs + options.batch - 1) / options.batch
        let next = Counter()
        let done = Counter()
        let path = target.publicURL
        let batch = options.batch
        let docs = options.docs
        var total = WorkerTally()
        let progress = progressTask("push \(target.label)", done)
        let start = uptimeNanos()
        await withTaskGroup(of: WorkerTally.self) { group in
            for _ in 0..<min(options.connections, batches) {
                group.addTask {
                    var t = WorkerTally()
                    let c: HTTPConnection
                    do { c = try await connectPublic() } catch {
                        t.error("connect: \(error)")
                        return t
                    }
                    while true {
                        let b = next.add(1)
                        if b >= batches { break }
                        let range = b * batch..<min(docs, (b + 1) * batch)
                        let t0 = uptimeNanos()
                        do {
                            let diff = try await c.request(
                                .POST, path.path("/_revs_diff"),
                                body: ByteBuffer(bytes: GatewayRequests.revsDiff(set, range)))
                            t.record("revs_diff", diff.endAt - diff.sentAt)
                            let missing = try Self.missingIndices(diff.body, set: set, range: range)
                            var accepted = 0
                            if !missing.isEmpty {
                                let bulk = try await c.request(
                                    .POST, path.path("/_bulk_docs"),
                                    body: ByteBuffer(bytes: GatewayRequests.bulkDocs(set, missing)))
                                t.record("bulk_docs", bulk.endAt - bulk.sentAt)
                                let (ok, failed) = try Self.bulkDocsOutcome(bulk.body)
                                accepted = ok
                                for (kind, n) in failed { t.errors["bulk_docs: \(kind)", default: 0] += n }
                            }
                            _ = t.latency.record(max(uptimeNanos() - t0, 1))
                            t.docs += accepted
                            done.add(accepted)
                        } catch {
                            t.error("\(error)")
                        }
                    }
                    await c.close()
                    return t
                }
            }
            for await t in group { total.merge(t) }
        }
        progress?.cancel()
        return GatewayPhaseResult(
            target: target.label, phase: .push, round: round, docs: total.docs,
            seconds: Double(uptimeNanos() - start) / 1e9, requests: total.requests, errors: total.errors,
            latency: total.latency, requestLatency: total.perRequest)
    }

    /// The indices of `range` whose revision `_revs_diff` reported missing.
    static func missingIndices(_ body: ByteBuffer, set: GatewayRequests.DocSet, range: Range<Int>) throws -> [Int] {
        guard case .object(let members) = try JSON.parse(body.readableBytesView) else {
            throw HTTPClientError.malformed("_revs_diff reply is not an object")
        }
        var missing = Set<String>()
        for (id, entry) in members where entry["missing"]?.arrayValue?.isEmpty == false { missing.insert(id) }
        return range.filter { missing.contains(set.id($0)) }
    }

    /// `_bulk_docs` reply: how many rows succeeded, and the failures by error name.
    static func bulkDocsOutcome(_ body: ByteBuffer) throws -> (ok: Int, failed: [String: Int]) {
        guard let rows = try JSON.parse(body.readableBytesView).arrayValue else {
            throw HTTPClientError.malformed("_bulk_docs reply is not an array")
        }
        var ok = 0
        var failed: [String: Int] = [:]
        for row in rows {
            if let e = row["error"] {
                failed[e.stringValue ?? "error", default: 0] += 1
            } else {
                ok += 1
            }
        }
        return (ok, failed)
    }

    // MARK: pull

    /// A fresh reader pulls everything after `since` as a replicator does: `_changes?style=all_docs`
    /// pages of `batch` rows (one at a time, in order), each page's revisions fetched with
    /// `_bulk_get?revs=true` (JSON), up to `connections` `_bulk_get`s in flight. Latency: one `_bulk_get`.
    public func pull(since: String, round: Int) async -> GatewayPhaseResult {
        let path = target.publicURL
        let done = Counter()
        var total = WorkerTally()
        let progress = progressTask("pull \(target.label)", done)
        let start = uptimeNanos()
        do {
            let reader = try await connectPublic()
            var workers: [HTTPConnection] = []
            for _ in 0..<options.connections { workers.append(try await connectPublic()) }
            let pool = workers
            var since = since
            try await withThrowingTaskGroup(of: (Int, WorkerTally).self) { group in
                var free = Array(pool.indices)
                while true {
                    let page = try await reader.request(
                        .GET,
                        path.path(
                            "/_changes?style=all_docs&limit=\(options.batch)&since="
                                + GatewayRequests.queryValue(since)))
                    total.record("changes", page.endAt - page.sentAt)
                    let (items, last) = try Self.changesPage(page.body)
                    if items.isEmpty { break }
                    since = last
                    if free.isEmpty, let (i, t) = try await group.next() {
                        total.merge(t)
                        free.append(i)
                    }
                    let w = free.removeLast()
                    let body = GatewayRequests.bulkGet(items)
                    group.addTask {
                        var t = WorkerTally()
                        do {
                            let reply = try await pool[w].request(
                                .POST, path.path("/_bulk_get?revs=true"), body: ByteBuffer(bytes: body))
                            t.record("bulk_get", reply.endAt - reply.sentAt)
                            _ = t.latency.record(max(reply.endAt - reply.sentAt, 1))
                            let (ok, failed) = try Self.bulkGetOutcome(reply.body)
                            t.docs = ok
                            for (kind, n) in failed { t.errors["bulk_get: \(kind)", default: 0] += n }
                            done.add(ok)
                        } catch {
                            t.error("\(error)")
                        }
                        return (w, t)
                    }
                }
                for try await (_, t) in group { total.merge(t) }
            }
            await reader.close()
            for w in pool { await w.close() }
        } catch {
            total.error("\(error)")
        }
        progress?.cancel()
        return GatewayPhaseResult(
            target: target.label, phase: .pull, round: round, docs: total.docs,
            seconds: Double(uptimeNanos() - start) / 1e9, requests: total.requests, errors: total.errors,
            latency: total.latency, requestLatency: total.perRequest)
    }

    /// A `_changes` page: every (id, rev) of its rows (all leaves with `style=all_docs`; `_user/` rows
    /// skipped) and its `last_seq`.
    static func changesPage(_ body: ByteBuffer) throws -> (items: [(id: String, rev: String)], lastSeq: String) {
        let json = try JSON.parse(body.readableBytesView)
        guard let rows = json["results"]?.arrayValue, let last = json["last_seq"]?.sequenceText else {
            throw HTTPClientError.malformed("_changes reply without results/last_seq")
        }
        var items: [(id: String, rev: String)] = []
        for row in rows {
            guard let id = row["id"]?.stringValue, !id.hasPrefix("_user/") else { continue }
            for change in row["changes"]?.arrayValue ?? [] {
                if let rev = change["rev"]?.stringValue { items.append((id, rev)) }
            }
        }
        return (items, last)
    }

    /// `_bulk_get` JSON reply (`{"results":[{"id","docs":[{"ok"}|{"error"}]}]}`): documents received and
    /// failures by error name.
    static func bulkGetOutcome(_ body: ByteBuffer) throws -> (ok: Int, failed: [String: Int]) {
        guard let results = try JSON.parse(body.readableBytesView)["results"]?.arrayValue else {
            throw HTTPClientError.malformed("_bulk_get reply without results")
        }
        var ok = 0
        var failed: [String: Int] = [:]
        for r in results {
            for d in r["docs"]?.arrayValue ?? [] {
                if d["ok"]?["_revisions"] != nil {
                    ok += 1
                } else if d["ok"] != nil {
                    failed["no _revisions", default: 0] += 1
                } else {
                    failed[d["error"]?["error"]?.stringValue ?? "error", default: 0] += 1
                }
            }
        }
        return (ok, failed)
    }
}

extension JSON {
    /// A `since` / `last_seq` / `update_seq` as text: Sync Gateway sends a string, CouchDB a number.
    public var sequenceText: String? {
        switch self {
        case .string(let s): return s
        case .integer, .number: return text
        default: return nil
        }
    }
}
