import CompressNIO
import HTTPTypes
import Hummingbird
import NIOCore
import SetteeCore
import SetteeJSON
import SetteeReplication
import SetteeTestSupport
import Synchronization

/// A real HTTP server on 127.0.0.1 serving a `MemoryEndpoint` with the replication protocol's URLs, so
/// `RemoteEndpoint` is tested over sockets: `_bulk_get` answered as multipart, JSON or 404 (then the
/// client must fall back to `open_revs`), basic or session-cookie authentication, continuous `_changes`.
final class ProtocolTestServer: Sendable {
    enum BulkGetMode: Sendable { case multipart, json, absent }
    let db: MemoryEndpoint
    let bulkGetMode: BulkGetMode
    /// When set, every request but `POST /db/_session` needs basic `user:password` or the session cookie.
    let credentials: (user: String, password: String)?
    /// When set, a `_bulk_get` of more revisions is refused with 413, as settee-gateway and Lite listeners refuse one
    /// whose documents pass their bytes.
    let maxBulkGetDocs: Int?
    /// With `maxBulkGetDocs` set, a `_bulk_get` asking for one of these documents is refused with 413 too (a document
    /// too large alone).
    let refusing: Set<String>
    /// When set, a `_bulk_docs` of more documents is refused with 413, as CouchDB refuses a body past
    /// `max_http_request_size` (and settee-gateway and Lite listeners past their body bound).
    let maxBulkDocsDocs: Int?
    /// With `maxBulkDocsDocs` set, a `_bulk_docs` holding one of these documents is refused with 413 too (a document
    /// too large alone).
    let refusingWrites: Set<String>
    let counters = Mutex<[String: Int]>([:])
    /// How many revisions each `_bulk_get` asked for, in order.
    let bulkGetSizes = Mutex<[Int]>([])
    /// How many documents each `_bulk_docs` held, in order.
    let bulkDocsSizes = Mutex<[Int]>([])
    private let task = Mutex<Task<Void, any Error>?>(nil)

    init(
        db: MemoryEndpoint, bulkGetMode: BulkGetMode, credentials: (user: String, password: String)? = nil,
        maxBulkGetDocs: Int? = nil, refusing: Set<String> = [], maxBulkDocsDocs: Int? = nil,
        refusingWrites: Set<String> = []
    ) {
        self.db = db
        self.bulkGetMode = bulkGetMode
        self.credentials = credentials
        self.maxBulkGetDocs = maxBulkGetDocs
        self.refusing = refusing
        self.maxBulkDocsDocs = maxBulkDocsDocs
        self.refusingWrites = refusingWrites
    }

    func count(_ name: String) -> Int { counters.withLock { $0[name] ?? 0 } }

    /// Starts listening; returns the database URL.
    func start() async throws -> String { await Self.serve(makeRouter(), in: task) }

    /// Runs `router` on 127.0.0.1 (`serveOnLoopback`), as the task `task` holds (cancel it to stop); returns the URL
    /// of database `db` there.
    static func serve(
        _ router: Router<BasicRequestContext>, in task: borrowing Mutex<Task<Void, any Error>?>,
        executor: (any TaskExecutor)? = nil
    ) async -> String {
        "http://127.0.0.1:\(await serveOnLoopback(router, in: task, executor: executor))/db"
    }

    func stop() {
        task.withLock { $0?.cancel() }
    }

    /// 413 `too_large` with `reason`, as a server refusing a request or an answer for its size.
    private func tooLarge(_ reason: String) -> Response {
        json(.contentTooLarge, .object([("error", .string("too_large")), ("reason", .string(reason))]))
    }

    private func json(_ status: HTTPResponse.Status, _ value: JSON) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: value.serialized())))
    }

    private func multipart(_ m: Multipart) -> Response {
        Response(
            status: .ok, headers: [.contentType: m.contentType],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: m.serialized())))
    }

    private func body(_ request: Request) async throws -> JSON {
        var r = request
        var buffer = try await r.collectBody(upTo: 64 << 20)
        if request.headers[.contentEncoding] == "gzip" {
            bump("gzip")
            buffer = try buffer.decompress(with: .gzip(), maxSize: 64 << 20)
        }
        return try JSON.parse(Array(buffer.readableBytesView))
    }

    private func bump(_ name: String) { counters.withLock { $0[name, default: 0] += 1 } }

    private func authorized(_ request: Request) -> Bool {
        guard let credentials else { return true }
        let basic = BasicAuth.header(user: credentials.user, password: credentials.password)
        if request.headers[.authorization] == basic { return true }
        return request.headers[.cookie]?.contains("SyncGatewaySession=good") == true
    }

    private func makeRouter() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        let unauthorized = json(
            .unauthorized, .object([("error", .string("unauthorized")), ("reason", .string("Login required"))]))
        router.post("/db/_session") { request, _ in
            self.bump("session")
            let b = try await self.body(request)
            guard let c = self.credentials, b["name"]?.stringValue == c.user, b["password"]?.stringValue == c.password
            else {
                return unauthorized
            }
            var r = self.json(.ok, .object([("ok", .bool(true))]))
            r.headers[.setCookie] = "SyncGatewaySession=good; Path=/db"
            return r
        }
        router.get("/db/") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            return self.json(.ok, try await self.db.info())
        }
        router.get("/db/_changes") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            self.bump("changes")
            let q = request.uri.queryParameters
            let feed = ChangesFeedKind(rawValue: q.get("feed") ?? "normal") ?? .normal
            let filter: ReplicationFilter? =
                q.get("filter") == "sync_gateway/bychannel"
                ? .channels((q.get("channels") ?? "").split(separator: ",").map(String.init)) : nil
            let batch = try await self.db.changes(
                since: q.get("since"), limit: Int(q.get("limit") ?? "") ?? 1000,
                feed: feed == .continuous ? .normal : feed,
                filter: filter, heartbeatMs: nil)
            guard feed == .continuous else { return self.json(.ok, batch.json()) }
            // One row per line, a heartbeat, then the connection stays open (the client leaves first).
            var lines: [UInt8] = []
            for row in batch.rows { lines += row.json().serialized() + [0x0A] }
            lines.append(0x0A)
            let payload = lines
            return Response(
                status: .ok, headers: [.contentType: "application/octet-stream"],
                body: ResponseBody { writer in
                    try await writer.write(ByteBuffer(bytes: payload))
                    try await Task.sleep(for: .seconds(60))
                    try await writer.finish(nil)
                })
        }
        router.post("/db/_changes") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            self.bump("changes")
            let q = request.uri.queryParameters
            let ids = (try await self.body(request))["doc_ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
            let batch = try await self.db.changes(
                since: q.get("since"), limit: Int(q.get("limit") ?? "") ?? 1000, feed: .normal, filter: .docIDs(ids),
                heartbeatMs: nil)
            return self.json(.ok, batch.json())
        }
        router.post("/db/_revs_diff") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            return self.json(.ok, try await self.db.revsDiff(try RevsDiff.parseRequest(try await self.body(request))))
        }
        router.post("/db/_bulk_get") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            self.bump("bulk_get")
            let reqs = try BulkGet.parseRequest(try await self.body(request)).map {
                BulkGetRequest(id: $0.id, rev: $0.rev ?? "", attsSince: $0.attsSince)
            }
            self.bulkGetSizes.withLock { $0.append(reqs.count) }
            if let max = self.maxBulkGetDocs,
                reqs.count > max || reqs.contains(where: { self.refusing.contains($0.id) })
            {
                return self.tooLarge("Response would exceed the bound; ask for fewer docs")
            }
            switch self.bulkGetMode {
            case .absent:
                return self.json(
                    .notFound, .object([("error", .string("not_found")), ("reason", .string("unknown URL"))]))
            case .json: return self.json(.ok, BulkGet.jsonAnswer(try await self.db.bulkGet(reqs)))
            case .multipart: return self.multipart(BulkGet.multipartAnswer(try await self.db.bulkGet(reqs)))
            }
        }
        router.post("/db/_bulk_docs") { request, _ in
            guard self.authorized(request) else { return unauthorized }
            self.bump("bulk_docs")
            let b = try await self.body(request)
            let docs = try (b["docs"]?.arrayValue ?? []).map { try FetchedRevision(document: $0) }
            self.bulkDocsSizes.withLock { $0.append(docs.count) }
            if let max = self.maxBulkDocsDocs,
                docs.count > max || docs.contains(where: { self.refusingWrites.contains($0.id) })
            {
                return self.tooLarge("the request entity is too large")
            }
            return self.json(
                .created, .array(try await self.db.bulkDocs(docs, newEdits: b["new_edits"]?.boolValue ?? true)))
        }
        router.get("/db/_local/:id") { request, context in
            guard self.authorized(request) else { return unauthorized }
            let id = PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? "")
            guard let doc = try await self.db.getLocal(id) else {
                return self.json(.notFound, .object([("error", .string("not_found")), ("reason", .string("missing"))]))
            }
            return self.json(.ok, doc)
        }
        router.put("/db/_local/:id") { request, context in
            guard self.authorized(request) else { return unauthorized }
            do {
                try await self.db.putLocal(
                    PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? ""), try await self.body(request))
                return self.json(.created, .object([("ok", .bool(true))]))
            } catch ReplicationError.http(let status, let error, let reason) {
                return self.json(
                    .init(code: status), .object([("error", .string(error)), ("reason", .string(reason))]))
            }
        }
        router.get("/db/:id") { request, context in
            guard self.authorized(request) else { return unauthorized }
            self.bump("open_revs")
            let id = PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? "")
            let q = request.uri.queryParameters
            let revs = (try JSON.parse(q.get("open_revs") ?? "[]")).arrayValue?.compactMap(\.stringValue) ?? []
            let fetched = try await self.db.bulkGet(revs.map { BulkGetRequest(id: id, rev: $0) })
            if request.headers[.accept]?.contains("multipart/") == true, self.bulkGetMode == .multipart {
                return self.multipart(BulkGet.multipartAnswer(fetched))
            }
            return self.json(
                .ok,
                .array(
                    fetched.map { r in
                        r.error != nil ? .object([("missing", .string(r.rev))]) : .object([("ok", r.inlineJSON())])
                    }))
        }
        return router
    }
}
