import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeHTTPServer
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import SetteeViews

/// The views HTTP API (Couchbase's port-8092 "capi" shape) over `NodeViews`:
/// `PUT/GET/DELETE /BUCKET/_design/NAME`, `GET/POST /BUCKET/_design/NAME/_view/VIEW`.
///
/// Authentication is HTTP Basic checked by the `NodeRegistry` (the admin, or the bucket's own
/// credentials for that bucket). Every call that touches disk, JavaScript or an index wait runs on
/// the node's `BlockingPool`, never on the event loop.
public enum ViewsServer {
    /// Builds the application; run it with `runService()` (or inside a ServiceGroup). `server` replaces the plain
    /// HTTP/1 server (the views TLS port passes the same one inside TLS; ADR 0040).
    public static func makeApplication(
        views: NodeViews, host: String, port: Int, logger: Logger,
        idleTimeout: TimeAmount = .seconds(Limits.httpIdleTimeoutSeconds),
        headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        maxConnections: Int = Limits.maxViewsConnections, server: HTTPServerBuilder? = nil,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        // Idle timeout, header-size bound, request-head deadline (slowloris) and connection cap: see Limits.
        Application(
            router: makeRouter(views: views, logger: logger),
            server: server ?? .settee(idleTimeout: idleTimeout, headDeadline: headDeadline),
            configuration: ApplicationConfiguration(
                address: .hostname(host, port: port), serverName: "Settee",
                availableConnectionsDelegate: ConnectionCap(maxConnections, logger: logger)),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// The router alone (tests drive it with HummingbirdTesting). `maxQueryBytes`: what one view query may hold
    /// (`ViewQueryBudget`).
    public static func makeRouter(
        views: NodeViews, logger: Logger, maxQueryBytes: Int = Limits.viewMaxQueryResultBytes
    ) -> Router<ViewsRequestContext> {
        let api = ViewsAPI(views: views, logger: logger, maxQueryBytes: maxQueryBytes)
        let router = Router(context: ViewsRequestContext.self)
        router.add(middleware: ViewsAuthMiddleware(registry: views.registry))
        router.get("/") { _, _ in
            ViewsAPI.json(200, .object([("couchdb", .string("Welcome")), ("version", .string("settee"))]))
        }
        router.get("/:bucket/_settee_ddocs") { _, c in await api.listDesigns(c) }
        router.put("/:bucket/_design/:ddoc") { r, c in await api.putDesign(r, c) }
        router.get("/:bucket/_design/:ddoc") { _, c in await api.getDesign(c) }
        router.delete("/:bucket/_design/:ddoc") { r, c in await api.deleteDesign(r, c) }
        router.get("/:bucket/_design/:ddoc/_view/:view") { r, c in await api.query(r, c, body: nil) }
        router.post("/:bucket/_design/:ddoc/_view/:view") { r, c in
            switch await ViewsAPI.body(r) {
            case .success(let body): return await api.query(r, c, body: body)
            case .failure(let error): return ViewsAPI.error(error)
            }
        }
        return router
    }
}

struct ViewsAPI: Sendable {
    let views: NodeViews
    let logger: Logger
    /// Bytes of rows one query may hold (`Limits.viewMaxQueryResultBytes`): its read, or on a coordinator its part,
    /// its peers' answers and the merged page together.
    let maxQueryBytes: Int
    var peers: ViewsPeers { ViewsPeers(registry: views.registry, client: views.peerClient) }

    static func json(_ status: Int, _ value: JSON, headers: HTTPFields = [:]) -> Response {
        bytes(status, value.serialized(), headers: headers)
    }

    static func bytes(_ status: Int, _ body: [UInt8], headers: HTTPFields = [:]) -> Response {
        var h = headers
        h[.contentType] = "application/json"
        return Response(
            status: HTTPResponse.Status(code: status), headers: h,
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func error(_ e: ViewError) -> Response { json(e.status, e.json) }

    /// `request`'s body, at most `Limits.maxViewsRequestBody` bytes: past it 413 `too_large`, as CouchDB answers a body
    /// past its bound; any other read failure (the client gone, a broken chunk) 400 `bad_request`. Before, both were
    /// 400 "request body too large".
    static func body(_ request: Request) async -> Result<[UInt8], ViewError> {
        var request = request
        do {
            return .success(Array(try await request.collectBody(upTo: Limits.maxViewsRequestBody).readableBytesView))
        } catch is NIOTooManyBytesError {
            return .failure(.tooLarge("The request body is larger than \(Limits.maxViewsRequestBody) bytes"))
        } catch {
            return .failure(.badRequest("The request body could not be read: \(error)"))
        }
    }

    static func parameter(_ c: ViewsRequestContext, _ name: String) -> String {
        let raw = c.parameters.get(name) ?? ""
        let decoded = PercentEncoding.decodeOrKeep(raw)
        // `couchApiBase` addresses a bucket as `NAME+UUID` (`/beer%2B<uuid>/_design/...`); bucket names
        // cannot contain `+`, so the part before it is the name.
        if name == "bucket", let plus = decoded.firstIndex(of: "+") { return String(decoded[..<plus]) }
        return decoded
    }

    func putDesign(_ request: Request, _ c: ViewsRequestContext) async -> Response {
        let body: [UInt8]
        switch await Self.body(request) {
        case .success(let b): body = b
        case .failure(let error): return Self.error(error)
        }
        let bucket = Self.parameter(c, "bucket")
        let name = Self.parameter(c, "ddoc")
        let views = self.views
        let result: Result<Void, ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) in
                let doc = try DesignDocument(name: name, body: body)
                try views.views(bucket: bucket).put(doc)
            }
        }
        switch result {
        case .success:
            if request.uri.queryParameters["_local"] != "true" {
                await forwardDesign(bucket: bucket, name: name, method: .PUT, body: body)
            }
            return Self.json(201, .object([("ok", .bool(true)), ("id", .string("_design/" + name))]))
        case .failure(let e): return Self.error(e)
        }
    }

    /// Every design document of the bucket in the shape of Couchbase's `GET /pools/default/buckets/B/ddocs`
    /// (the admin port relays that route here): `{"rows":[{"doc":{"meta":{"id","rev"},"json":{...}}}]}`.
    func listDesigns(_ c: ViewsRequestContext) async -> Response {
        let bucket = Self.parameter(c, "bucket")
        let views = self.views
        let result: Result<[DesignDocument], ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) -> [DesignDocument] in try views.views(bucket: bucket).designDocuments }
        }
        switch result {
        case .success(let docs):
            let rows: [JSON] = docs.sorted { $0.name < $1.name }.map { d in
                let json = (try? JSON.parse(d.body)) ?? .object([])
                let meta = JSON.object([
                    ("id", .string(d.id)), ("rev", .string("1-\(String(d.signature, radix: 16))")),
                ])
                return .object([("doc", .object([("meta", meta), ("json", json)]))])
            }
            return Self.json(200, .object([("rows", .array(rows))]))
        case .failure(let e): return Self.error(e)
        }
    }

    func getDesign(_ c: ViewsRequestContext) async -> Response {
        let bucket = Self.parameter(c, "bucket")
        let name = Self.parameter(c, "ddoc")
        let views = self.views
        let result: Result<DesignDocument, ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) -> DesignDocument in
                guard let d = try views.views(bucket: bucket).designDocument(named: name) else {
                    throw .notFound("missing")
                }
                return d
            }
        }
        switch result {
        case .success(let d):
            let meta = JSON.object([
                ("id", .string(d.id)), ("rev", .string("1-\(String(d.signature, radix: 16))")),
                ("type", .string("json")),
            ])
            var headers = HTTPFields()
            headers[.init("X-Couchbase-Meta")!] = meta.text
            return Self.bytes(200, d.body, headers: headers)
        case .failure(let e): return Self.error(e)
        }
    }

    func deleteDesign(_ request: Request, _ c: ViewsRequestContext) async -> Response {
        let bucket = Self.parameter(c, "bucket")
        let name = Self.parameter(c, "ddoc")
        let views = self.views
        let result: Result<Void, ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) in try views.views(bucket: bucket).delete(named: name) }
        }
        switch result {
        case .success:
            if request.uri.queryParameters["_local"] != "true" {
                await forwardDesign(bucket: bucket, name: name, method: .DELETE, body: nil)
            }
            return Self.json(200, .object([("ok", .bool(true)), ("id", .string("_design/" + name))]))
        case .failure(let e): return Self.error(e)
        }
    }

    func query(_ request: Request, _ c: ViewsRequestContext, body: [UInt8]?) async -> Response {
        let bucket = Self.parameter(c, "bucket")
        let name = Self.parameter(c, "ddoc")
        let view = Self.parameter(c, "view")
        let params: [(String, String)] = request.uri.queryParameters.map { k, v in
            let key = String(k)
            // Hummingbird percent-decodes values, not names.
            return (PercentEncoding.decodeOrKeep(key), String(v))
        }
        let views = self.views
        let prepared: Result<(ViewQuery, DesignIndex, ReduceFunction?), ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) -> (ViewQuery, DesignIndex, ReduceFunction?) in
                var parsedBody: JSON? = nil
                if let body, !body.isEmpty {
                    do throws(JSONError) { parsedBody = try JSON.parse(body) } catch {
                        throw .badRequest("invalid UTF-8 JSON: \(error.reason)")
                    }
                }
                let q = try ViewQuery.parse(params, body: parsedBody)
                let bucketViews = try views.views(bucket: bucket)
                guard let doc = bucketViews.designDocument(named: name) else { throw .notFound("missing") }
                guard let index = bucketViews.index(named: name), let def = doc.views.first(where: { $0.name == view })
                else { throw .notFound("missing_named_view") }
                return (q, index, def.reduce)
            }
        }
        let q: ViewQuery
        let index: DesignIndex
        let reduce: ReduceFunction?
        switch prepared {
        case .success(let p): (q, index, reduce) = p
        case .failure(let e): return Self.error(e)
        }
        let targets = q.localOnly ? [] : peers.queryTargets(bucket: bucket)
        // Couchbase streams a result of any size; this node answers a page whole, so what a query holds is bounded.
        let budget = ViewQueryBudget(limit: maxQueryBytes)
        if targets.isEmpty {
            let result: Result<[UInt8], ViewError> = await BlockingPool.run {
                Result { () throws(ViewError) -> [UInt8] in try index.query(view: view, q, budget: budget).serialized()
                }
            }
            switch result {
            case .success(let bytes): return Self.bytes(200, bytes)
            case .failure(let e): return Self.error(e)
            }
        }
        // Scatter to every node owning active vBuckets, gather, merge in collation order.
        let partial = q.partial
        // This node's part runs while the peers answer theirs, as Couchbase's merger starts every index's fold at
        // once: a query takes the slowest part's time, not the local part's plus the peers' (with stale=false the
        // local part may wait for its index).
        async let localPart: Result<ViewResult, ViewError> = BlockingPool.run {
            Result { () throws(ViewError) -> ViewResult in try index.query(view: view, partial, budget: budget) }
        }
        let path =
            "/\(PercentEncoding.encode(bucket))/_design/\(PercentEncoding.encode(name))/_view/"
            + "\(PercentEncoding.encode(view))?" + ViewsPeers.queryString(q.partialParameters)
        let keysBody = partial.keys.map { JSON.object([("keys", .array($0))]).serialized() }
        let designBody = index.design.body
        let peers = self.peers
        // Each peer's answer counts against the query's budget as its bytes arrive, then as the rows parsed from it:
        // the coordinator never holds more than the budget of answers, however many peers answer at once.
        let answers = await withTaskGroup(of: Result<ViewResult, ViewsPeerFailure>.self) { group in
            for node in targets {
                group.addTask {
                    let from = ViewsPeers.url(node, path)
                    do {
                        var (status, bytes) = try await peers.call(
                            node, keysBody == nil ? .GET : .POST, path, body: keysBody,
                            timeoutMs: q.connectionTimeoutMs,
                            budget: budget)
                        if status == 404, (try? JSON.parse(bytes))?["reason"]?.stringValue == "missing" {
                            // The node joined after the design document was stored: give it the
                            // document (it builds its index) and ask again.
                            budget.release(bytes.count)
                            let put =
                                "/\(PercentEncoding.encode(bucket))/_design/\(PercentEncoding.encode(name))?_local=true"
                            _ = try await peers.call(node, .PUT, put, body: designBody, timeoutMs: 10_000)
                            (status, bytes) = try await peers.call(
                                node, keysBody == nil ? .GET : .POST, path, body: keysBody,
                                timeoutMs: q.connectionTimeoutMs, budget: budget)
                        }
                        guard status == 200 else {
                            budget.release(bytes.count)
                            let error = try? JSON.parse(bytes)
                            // The peer's own read passed the bound: so does the whole query.
                            let tooLarge = status == 413 && error?["error"]?.stringValue == "too_large"
                            let reason = error?["reason"]?.stringValue ?? "status \(status)"
                            return .failure(ViewsPeerFailure(from: from, reason: reason, tooLarge: tooLarge))
                        }
                        // The body becomes rows, each counted as it is made; then the body's bytes are released.
                        let parsed = Result { () throws(ViewError) -> ViewResult in
                            try ViewMerge.parse(bytes, budget: budget)
                        }
                        budget.release(bytes.count)
                        do throws(ViewError) {
                            return .success(try parsed.get())
                        } catch {
                            return .failure(
                                ViewsPeerFailure(from: from, reason: error.reason, tooLarge: error.status == 413))
                        }
                    } catch let error as ViewError {
                        return .failure(
                            ViewsPeerFailure(from: from, reason: error.reason, tooLarge: error.status == 413))
                    } catch {
                        return .failure(ViewsPeerFailure(from: from, reason: "\(error)"))
                    }
                }
            }
            var out: [Result<ViewResult, ViewsPeerFailure>] = []
            for await a in group {
                if case .failure(let f) = a, f.tooLarge {
                    // The query fails whatever the others answer: stop reading them.
                    group.cancelAll()
                    return [a]
                }
                out.append(a)
            }
            return out
        }
        var parts: [ViewResult] = []
        switch await localPart {
        case .success(let r): parts.append(r)
        case .failure(let e): return Self.error(e)
        }
        var errors: [(String, String)] = []
        for a in answers {
            switch a {
            case .success(let r): parts.append(r)
            case .failure(let f) where f.tooLarge: return Self.error(budget.exceeded)
            case .failure(let f): errors.append((f.from, f.reason))
            }
        }
        if q.onErrorStop && !errors.isEmpty {
            // on_error=stop: no merged rows once a node failed, only the errors (still 200, as Couchbase).
            var r = ViewResult(totalRows: nil, rows: [])
            r.errors = errors
            return Self.bytes(200, r.serialized())
        }
        let gathered = parts
        let failures = errors
        let merged: Result<[UInt8], ViewError> = await BlockingPool.run {
            Result { () throws(ViewError) -> [UInt8] in
                var r = try ViewMerge.merge(gathered, q, reduce: reduce, budget: budget)
                r.errors = failures
                return r.serialized()
            }
        }
        switch merged {
        case .success(let bytes): return Self.bytes(200, bytes)
        case .failure(let e): return Self.error(e)
        }
    }

    /// After a design document changed here, the same change on every other node (`_local=true`, so
    /// they do not forward again). Best effort: a node that misses it is logged.
    func forwardDesign(bucket: String, name: String, method: HTTPMethod, body: [UInt8]?) async {
        let path = "/\(PercentEncoding.encode(bucket))/_design/\(PercentEncoding.encode(name))?_local=true"
        for node in peers.allOthers(bucket: bucket) {
            do {
                let (status, _) = try await peers.call(node, method, path, body: body, timeoutMs: 10_000)
                if status >= 300 && !(method == .DELETE && status == 404) {
                    logger.warning(
                        "design document not forwarded", metadata: ["node": "\(node.host)", "status": "\(status)"])
                }
            } catch {
                logger.warning(
                    "design document not forwarded", metadata: ["node": "\(node.host)", "error": "\(error)"])
            }
        }
    }
}

/// The views port's request context: the one every HTTP port that checks passwords shares.
public typealias ViewsRequestContext = PeerAddressRequestContext

struct ViewsPeerFailure: Error {
    var from: String
    var reason: String
    /// The query's result passed its bound (`ViewError.tooLarge`, here or at the peer): the query fails with it.
    var tooLarge = false
}

/// HTTP Basic on every request but `GET /`: the admin, or a bucket's credentials for that bucket's
/// paths. PBKDF2 on a cache miss, so the check runs off the event loop.
struct ViewsAuthMiddleware: RouterMiddleware {
    typealias Context = ViewsRequestContext
    let registry: NodeRegistry

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let path = request.uri.path
        if request.method == .get && (path == "/" || path.isEmpty) { return try await next(request, context) }
        guard let (user, password) = BasicAuth.parse(request.headers[.authorization]) else {
            return Self.unauthorized
        }
        // Through the login guard, as the admin and KV ports check passwords: this port guessed without one.
        let principal: NodeRegistry.Principal?
        switch await registry.authenticateGuarded(source: context.sourceHost, user: user, password: password) {
        case .throttled(let seconds):
            return Response(
                status: .tooManyRequests, headers: [.retryAfter: String(seconds)],
                body: ResponseBody(
                    byteBuffer: ByteBuffer(
                        string: #"{"error":"too_many_requests","reason":"Too many failed logins; try again later."}"#)))
        case .checked(let p): principal = p
        }
        switch principal {
        case .admin?: return try await next(request, context)
        case .bucket(let name)?:
            let first = path.split(separator: "/").first.map(String.init) ?? ""
            let bucket = PercentEncoding.decodeOrKeep(first).split(separator: "+").first.map(String.init) ?? ""
            if bucket == name { return try await next(request, context) }
            return Self.unauthorized
        case .user(_, let roles)?:
            // RBAC users: querying needs read access to `_default._default` (views index only the default
            // collection, as in Couchbase; ADR 0141), changing design documents needs manage on the whole bucket.
            let first = path.split(separator: "/").first.map(String.init) ?? ""
            let bucket = PercentEncoding.decodeOrKeep(first).split(separator: "+").first.map(String.init) ?? ""
            let d = CollectionsManifest.defaultName
            let allowed =
                Self.isQuery(method: request.method, path: path)
                ? roles.access(.read, bucket: bucket, scope: d, collection: d) == .allowed
                : roles.grants(onBucket: bucket).contains(.manage)
            if !bucket.isEmpty && allowed { return try await next(request, context) }
            return Self.unauthorized
        case nil: return Self.unauthorized
        }
    }

    /// Whether `method path` reads (a view query, GET on anything), not changes a design document: a query is
    /// `/B/_design/D/_view/V`, its view named. `PUT /B/_design/_view/` held `/_view/` too, was let through with read
    /// access, and Hummingbird, dropping the trailing slash, routed it to the design-document PUT of `_view`.
    static func isQuery(method: HTTPRequest.Method, path: String) -> Bool {
        if method == .get || method == .head { return true }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        return segments.count == 5 && segments[1] == "_design" && segments[3] == "_view"
    }

    static let unauthorized = Response(
        status: .unauthorized, headers: [.wwwAuthenticate: "Basic realm=\"Couchbase Server Admin / REST\""],
        body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"error":"unauthorized","reason":"password required"}"#)))

}
