import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import SetteeBLIP
import SetteeCore
import SetteeHTTPServer
import SetteeJSON
import SetteeReplication
import SetteeTLS
import Synchronization

/// Lite's P2P listener: an embedded HTTP(S) server on an ephemeral loopback-or-LAN port serving the
/// replication endpoints of one database (`GET /db/`, `_changes`, `_revs_diff`, `_bulk_get`,
/// `_bulk_docs`, `_local/…`, `GET doc?open_revs=`), so another peer's `Replicator` pushes to or pulls
/// from it directly. Every request needs basic auth with the listener's one-time credentials (made
/// at start, gone at stop); with TLS the identity is a self-signed certificate made at start, or the
/// application's certificate files (`identity:`), pinned by the fingerprint in the sync URL. An identity from
/// files is reloadable while the listener runs (`reloadCertificate()`, ADR 0040): new connections get the new
/// certificate, open ones keep theirs.
///
/// It also answers BLIP replicators, as Couchbase Lite's `URLEndpointListener` does: a WebSocket upgrade of
/// `GET /db/_blipsync` offering `BLIP_3+CBMobile_3` or `BLIP_3+CBMobile_2` (the same credentials, refused with 401
/// before the upgrade, and over the same TLS identity) is served by a `BLIPReplicationServer` over the same endpoint,
/// so the peer's sync URL with `ws(s)://` replicates over BLIP (`blipSyncURL`); a BLIP peer replicating several
/// collections (`getCollections`) gets those `collections` resolves (Lite's `Database.blipCollectionResolver()`).
public final class PeerListener: Sendable {
    public struct Started: Sendable {
        public let port: Int
        public let credentials: OneTimeCredentials
        /// `http(s)://user:password@host:port/db` (plus `?cert=sha256:…` with TLS).
        public let syncURL: String
        /// The certificate's fingerprint with TLS, else nil.
        public let fingerprint: String?

        /// `syncURL` for a BLIP replicator: `ws(s)://user:password@host:port/db` (plus `?cert=sha256:…` with TLS).
        public var blipSyncURL: String {
            if syncURL.hasPrefix("https://") { return "wss://" + syncURL.dropFirst("https://".count) }
            return "ws://" + syncURL.dropFirst("http://".count)
        }
    }

    private let endpoint: any ReplicationEndpoint
    private let headDeadline: TimeAmount
    private let databaseName: String
    private let host: String
    private let useTLS: Bool
    /// The application's certificate files, served when given (implies TLS).
    private let fileIdentity: ReloadableTLSIdentity?
    private let logger: Logger
    /// Bytes of revisions (bodies and attachments) one `_bulk_get` or `open_revs` answer may gather.
    private let maxBulkReadBytes: Int
    /// BLIP replicators may push and pull JSON deltas (Couchbase Lite's `URLEndpointListenerConfiguration`
    /// `enableDeltaSync`).
    private let deltaSync: Bool
    /// Resolves the collections a BLIP peer names in `getCollections` (nil: the default collection only).
    private let collections: BLIPReplicationServer.CollectionResolver?
    /// The deltas its BLIP connections took and sent (Sync Gateway's `delta_sync` counters).
    public let deltaStats = DeltaSyncStats()
    private let state = Mutex<(task: Task<Void, any Error>?, started: Started?)>((nil, nil))

    /// `headDeadline`: how long a connection may take to send a request head; `maxBulkReadBytes`: the bytes of
    /// revisions one `_bulk_get` or `open_revs` answer may gather before it is refused with 413 (tests lower both).
    /// `deltaSync`: BLIP replicators may push and pull JSON deltas (ADR 0125), Couchbase Lite's
    /// `URLEndpointListenerConfiguration.enableDeltaSync`; on by default here, where Couchbase Lite's is off (ADR
    /// 0137: a delta that cannot be used costs one 422 and the revision whole). `collections`: the collections BLIP
    /// peers may replicate by name (`scope.collection`, `_default`), as `BLIPReplicationServer` resolves them; nil
    /// serves `endpoint` as the default collection only. The REST endpoints serve `endpoint` alone.
    public init(
        endpoint: any ReplicationEndpoint, databaseName: String, host: String = "127.0.0.1", tls: Bool = false,
        identity: ReloadableTLSIdentity? = nil, logger: Logger = Logger(label: "settee.lite.listener"),
        headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        maxBulkReadBytes: Int = GatewayHTTPLimits.maxBulkReadBytes, deltaSync: Bool = true,
        collections: BLIPReplicationServer.CollectionResolver? = nil
    ) {
        self.deltaSync = deltaSync
        self.collections = collections
        self.headDeadline = headDeadline
        self.maxBulkReadBytes = maxBulkReadBytes
        self.endpoint = endpoint
        self.databaseName = databaseName
        self.host = host
        self.useTLS = tls || identity != nil
        self.fileIdentity = identity
        self.logger = logger
    }

    /// Starts listening on an ephemeral port with fresh credentials (and identity, with TLS).
    public func start() async throws -> Started {
        let credentials = OneTimeCredentials()
        // The application's files (reloadable), else a self-signed certificate made now, else plain HTTP.
        let selfSigned = useTLS && fileIdentity == nil ? try SelfSignedIdentity() : nil
        let fingerprint = fileIdentity?.fingerprint ?? selfSigned?.fingerprint
        let identity =
            try fileIdentity.map { $0.serverConfiguration() } ?? selfSigned.map { try $0.serverConfiguration() }
        let router = makeRouter(credentials: credentials)
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        // A peer on the LAN is not trusted until it authenticates: every connection gets the idle timeout and head
        // deadline of Settee's other HTTP ports, and at most `Limits.liteListenerMaxConnections` are open at once.
        let configuration = ApplicationConfiguration(
            address: .hostname(host, port: 0), serverName: "settee-lite",
            availableConnectionsDelegate: ConnectionCap(Limits.liteListenerMaxConnections, logger: logger)
        )
        let plain = makeServerBuilder(credentials: credentials)
        let onRunning: @Sendable (any Channel) async -> Void = { channel in
            continuation.yield(channel.localAddress?.port ?? 0)
        }
        let task: Task<Void, any Error>
        if let identity {
            let app = Application(
                router: router,
                server: try .tls(plain, tlsConfiguration: identity),
                configuration: configuration, onServerRunning: onRunning, logger: logger)
            task = Task { try await app.runService(gracefulShutdownSignals: []) }
        } else {
            let app = Application(
                router: router, server: plain, configuration: configuration, onServerRunning: onRunning,
                logger: logger)
            task = Task { try await app.runService(gracefulShutdownSignals: []) }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port > 0 else {
            task.cancel()
            throw ReplicationError.invalid("listener did not start")
        }
        let started = Self.started(
            port: port, credentials: credentials, host: host, databaseName: databaseName, fingerprint: fingerprint)
        state.withLock { $0 = (task, started) }
        return started
    }

    static func started(
        port: Int, credentials: OneTimeCredentials, host: String, databaseName: String, fingerprint: String?
    ) -> Started {
        let scheme = fingerprint == nil ? "http" : "https"
        var url = "\(scheme)://\(credentials.user):\(credentials.password)@\(host):\(port)/\(databaseName)"
        if let fingerprint { url += "?cert=\(fingerprint)" }
        return Started(port: port, credentials: credentials, syncURL: url, fingerprint: fingerprint)
    }

    /// Rereads the certificate files the listener was given (`identity:`) and serves them to new connections if
    /// they make a usable identity; returns the listener's new `Started` (its sync URL pins the new certificate).
    /// Throws why otherwise (no files, unreadable, key not the certificate's, expired), and the certificate in use
    /// stays. Connections already open keep theirs.
    public func reloadCertificate() async throws -> Started {
        guard let fileIdentity else {
            throw ReplicationError.invalid(
                "this listener serves no certificate files (start it with identity:) and has nothing to reload")
        }
        let reloaded = try await fileIdentity.reloadOffLoop()
        return try state.withLock { s in
            guard let current = s.started else { throw ReplicationError.invalid("the listener is not running") }
            let started = Self.started(
                port: current.port, credentials: current.credentials, host: host, databaseName: databaseName,
                fingerprint: reloaded.fingerprint)
            s.started = started
            return started
        }
    }

    /// Stops listening; the credentials die with the server.
    public func stop() async {
        let task = state.withLock { s -> Task<Void, any Error>? in
            defer { s = (nil, nil) }
            return s.task
        }
        task?.cancel()
        _ = try? await task?.value
    }

    // MARK: BLIP

    /// The HTTP/1 server with the `/db/_blipsync` WebSocket upgrade: the head deadline and idle timeout of Settee's
    /// other ports (`HTTPServerBuilder.settee`), BLIP frames of up to `Limits.blipMaxFrameBytes`, and a refused
    /// upgrade answered with its own status (`UpgradeRefusalWriter`).
    func makeServerBuilder(credentials: OneTimeCredentials) -> HTTPServerBuilder {
        let idleTimeout = TimeAmount.seconds(Limits.httpIdleTimeoutSeconds)
        let http1 = HTTP1Channel.Configuration(
            idleTimeout: idleTimeout,
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: Limits.maxHTTPHeaderBytes, maxHeaderListSize: Limits.maxHTTPHeaderBytes))
        let webSocket = WebSocketServerConfiguration(maxFrameSize: Limits.blipMaxFrameBytes)
        let deadline = HeadDeadline.effective(headDeadline, idleTimeout: idleTimeout)
        let (endpoint, path, logger) = (self.endpoint, "/\(databaseName)/_blipsync", self.logger)
        let (deltaSync, deltaStats, collections) = (self.deltaSync, self.deltaStats, self.collections)
        let makeHandler: @Sendable () -> BLIPReplicationServer = {
            BLIPReplicationServer(
                endpoint: endpoint, deltaSync: deltaSync, deltaStats: deltaStats, collections: collections,
                logger: logger)
        }
        return HTTPServerBuilder { respond in
            UpgradeRefusalChildChannel(
                inner: HeadDeadlineChildChannel(
                    inner: HTTP1WebSocketUpgradeChannel(
                        responder: respond, configuration: .init(http1: http1, ws: webSocket),
                        shouldUpgrade: { head, channel, _ in
                            await Self.blipUpgrade(
                                head, path: path, credentials: credentials, makeHandler: makeHandler,
                                channel: channel)
                        }),
                    headDeadline: deadline, upgradable: true, idleTimeout: idleTimeout))
        }
    }

    /// Decides a WebSocket upgrade: only `GET /db/_blipsync` with the listener's credentials (else 401 with a
    /// challenge, before the upgrade) and a BLIP subprotocol this side speaks (else 400 naming them), the first the
    /// peer offers of `WebSocketBLIPConnector.subprotocols`, echoed in the answer; the connection is then served by
    /// a handler `makeHandler` makes.
    static func blipUpgrade(
        _ head: HTTPRequest, path: String, credentials: OneTimeCredentials,
        makeHandler: @Sendable () -> BLIPReplicationServer, channel: any Channel
    ) async -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>> {
        func refuse(_ status: Int, _ error: String, _ reason: String, challenge: Bool = false) async
            -> ShouldUpgradeResult<WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>>
        {
            var headers: HTTPFields = [.contentType: "application/json"]
            if challenge { headers[.wwwAuthenticate] = "Basic realm=\"settee-lite\"" }
            await UpgradeRefusalWriter.leave(
                (status, headers, JSON.errorBody(error, reason: reason).serialized()), on: channel)
            return .dontUpgrade
        }
        guard URI(head.path ?? "/").path == path else {
            return await refuse(404, "not_found", "this listener upgrades only \(path)")
        }
        guard let (user, password) = BasicAuth.parse(head.headerFields[.authorization]),
            credentials.matches(user: user, password: password)
        else { return await refuse(401, "unauthorized", "Login required", challenge: true) }
        guard let chosen = BLIPReplicationServer.subprotocol(offered: head.headerFields[.secWebSocketProtocol]) else {
            return await refuse(
                400, "bad_request",
                "Unsupported WebSocket subprotocol: this listener speaks \(WebSocketBLIPConnector.subprotocols)")
        }
        let handler = makeHandler()
        return .upgrade([.secWebSocketProtocol: chosen]) { inbound, outbound, _ in
            defer { handler.close() }
            let session = BLIPSession(handler: handler) { frame in
                try await outbound.write(.binary(ByteBuffer(bytes: frame)))
            }
            let frames = inbound.messages(maxSize: Limits.blipMaxFrameBytes).compactMap {
                @Sendable message -> [UInt8]? in
                if case .binary(let buffer) = message { return Array(buffer.readableBytesView) }
                return nil
            }
            let end = await session.run(inbound: frames)
            handler.close()
            try? await outbound.close(.init(codeNumber: Int(end.closeCode)), reason: end.reason)
        }
    }

    // MARK: Routes

    /// The listener's routes behind its credentials (internal: the fuzz target runs them without a socket).
    func makeRouter(credentials: OneTimeCredentials) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: BasicAuthGate(credentials: credentials))
        let db = "/\(databaseName)"
        let endpoint = self.endpoint
        let maxBulkReadBytes = self.maxBulkReadBytes
        router.get("/") { _, _ in
            Self.json(.ok, .object([("couchdb", "Welcome"), ("vendor", .object([("name", "settee-lite")]))]))
        }
        // `/db` and `/db/` are one route (Hummingbird ignores the trailing slash).
        router.get(RouterPath(db)) { _, _ in try await Self.answer { Self.json(.ok, try await endpoint.info()) } }
        router.get(RouterPath(db + "/_changes")) { request, _ in
            try await Self.answer { try await Self.changes(endpoint, request, docIDs: nil) }
        }
        router.post(RouterPath(db + "/_changes")) { request, _ in
            try await Self.answer {
                let body = try await Self.body(request)
                let ids = body["doc_ids"]?.arrayValue?.compactMap(\.stringValue)
                return try await Self.changes(endpoint, request, docIDs: ids, body: body)
            }
        }
        router.post(RouterPath(db + "/_revs_diff")) { request, _ in
            try await Self.answer {
                Self.json(.ok, try await endpoint.revsDiff(try RevsDiff.parseRequest(try await Self.body(request))))
            }
        }
        router.post(RouterPath(db + "/_bulk_get")) { request, _ in
            try await Self.answer {
                let requests = try BulkGet.parseRequest(try await Self.body(request)).map {
                    BulkGetRequest(id: $0.id, rev: $0.rev ?? "", attsSince: $0.attsSince)
                }
                let fetched = try await Self.boundedBulkGet(endpoint, requests, maxBytes: maxBulkReadBytes)
                if request.headers[.accept]?.contains("multipart/") == true {
                    let m = BulkGet.multipartAnswer(fetched)
                    return Self.raw(.ok, contentType: m.contentType, m.serialized())
                }
                return Self.json(.ok, BulkGet.jsonAnswer(fetched))
            }
        }
        router.post(RouterPath(db + "/_bulk_docs")) { request, _ in
            try await Self.answer {
                let body = try await Self.body(request)
                guard let list = body["docs"]?.arrayValue else {
                    throw ReplicationError.http(
                        status: 400, error: "bad_request", reason: "POST body must contain docs")
                }
                let newEdits = body["new_edits"]?.boolValue ?? true
                let docs = try list.map { try FetchedRevision(document: $0) }
                return Self.json(.created, .array(try await endpoint.bulkDocs(docs, newEdits: newEdits)))
            }
        }
        // Syncs what was written before it is answered (a pushing peer then checkpoints past it), and names this
        // listener's start: a peer that sees it change knows writes it sent before may be lost.
        let instance = RandomID.hex128()
        router.post(RouterPath(db + "/_ensure_full_commit")) { _, _ in
            try await Self.answer {
                _ = try await endpoint.ensureFullCommit()
                return Self.json(.created, .object([("ok", .bool(true)), ("instance_start_time", .string(instance))]))
            }
        }
        router.get(RouterPath(db + "/_local/:id")) { _, context in
            try await Self.answer {
                let id = PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? "")
                guard let doc = try await endpoint.getLocal(id) else {
                    throw ReplicationError.http(status: 404, error: "not_found", reason: "missing")
                }
                return Self.json(.ok, doc)
            }
        }
        router.put(RouterPath(db + "/_local/:id")) { request, context in
            try await Self.answer {
                let id = PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? "")
                try await endpoint.putLocal(id, try await Self.body(request))
                let saved = try await endpoint.getLocal(id)
                return Self.json(
                    .created,
                    .object([("ok", .bool(true)), ("id", .string("_local/" + id)), ("rev", saved?["_rev"] ?? .null)]))
            }
        }
        router.get(RouterPath(db + "/:id")) { request, context in
            try await Self.answer {
                let id = PercentEncoding.decodeOrKeep(context.parameters.get("id") ?? "")
                let q = request.uri.queryParameters
                guard let openRevs = q.get("open_revs") else {
                    throw ReplicationError.http(
                        status: 400, error: "bad_request", reason: "the listener serves documents only with open_revs")
                }
                let revs: [String]
                if openRevs == "all" {
                    throw ReplicationError.http(
                        status: 400, error: "bad_request", reason: "open_revs must list revisions")
                } else {
                    guard
                        let list = (try? JSON.parse(openRevs, maxValues: GatewayHTTPLimits.maxRequestJSONValues))?
                            .arrayValue
                    else {
                        throw ReplicationError.http(
                            status: 400, error: "bad_request", reason: "open_revs is not a JSON array")
                    }
                    revs = list.compactMap(\.stringValue)
                }
                // A document has a handful of leaves; a longer list only makes the listener read more.
                guard revs.count <= Limits.liteListenerMaxOpenRevs else {
                    throw ReplicationError.http(
                        status: 413, error: "too_large",
                        reason: "open_revs lists \(revs.count) revisions (max \(Limits.liteListenerMaxOpenRevs))")
                }
                let attsSince =
                    (try? JSON.parse(q.get("atts_since") ?? "[]", maxValues: GatewayHTTPLimits.maxRequestJSONValues))?
                    .arrayValue?.compactMap(\.stringValue) ?? []
                let fetched = try await Self.boundedBulkGet(
                    endpoint, revs.map { BulkGetRequest(id: id, rev: $0, attsSince: attsSince) },
                    maxBytes: maxBulkReadBytes)
                if request.headers[.accept]?.contains("multipart/") == true {
                    let m = BulkGet.multipartAnswer(fetched)
                    return Self.raw(.ok, contentType: m.contentType, m.serialized())
                }
                return Self.json(
                    .ok,
                    .array(
                        fetched.map { r in
                            r.error != nil ? .object([("missing", .string(r.rev))]) : .object([("ok", r.inlineJSON())])
                        }))
            }
        }
        return router
    }

    /// Reads `requests` within what one request may make the listener hold, as the gateway's `_bulk_get` does
    /// (`GatewayHTTPLimits`): at most `maxBulkItems` items, identical ones read once (the answer has one row for
    /// them), at most `maxBulkReadDocs` distinct ones, and once the revisions gathered (bodies and attachment bytes)
    /// pass `maxBytes` nothing more is read and the request is refused with 413, so the peer asks for fewer. One
    /// revision is read at a time: at most `maxBytes` plus one revision is held.
    static func boundedBulkGet(
        _ endpoint: any ReplicationEndpoint, _ requests: [BulkGetRequest], maxBytes: Int
    ) async throws -> [FetchedRevision] {
        guard requests.count <= GatewayHTTPLimits.maxBulkItems else {
            throw ReplicationError.http(
                status: 413, error: "too_large", reason: "Too many docs (max \(GatewayHTTPLimits.maxBulkItems))")
        }
        var seen = Set<BulkGetRequest>()
        let distinct = requests.filter { seen.insert($0).inserted }
        guard distinct.count <= GatewayHTTPLimits.maxBulkReadDocs else {
            throw ReplicationError.http(
                status: 413, error: "too_large", reason: "Too many docs (max \(GatewayHTTPLimits.maxBulkReadDocs))")
        }
        var gathered = 0
        var fetched: [FetchedRevision] = []
        fetched.reserveCapacity(distinct.count)
        for request in distinct {
            for revision in try await endpoint.bulkGet([request]) {
                gathered +=
                    revision.body.approximateSerializedSize + revision.attachments.values.reduce(0) { $0 + $1.count }
                fetched.append(revision)
            }
            guard gathered <= maxBytes else {
                throw ReplicationError.http(
                    status: 413, error: "too_large",
                    reason: "Response would exceed \(maxBytes) bytes; ask for fewer docs")
            }
        }
        return fetched
    }

    private static func changes(
        _ endpoint: any ReplicationEndpoint, _ request: Request, docIDs: [String]?, body: JSON = .object([])
    ) async throws -> Response {
        let q = request.uri.queryParameters
        let feedName = q.get("feed") ?? body["feed"]?.stringValue ?? "normal"
        guard let feed = ChangesFeedKind(rawValue: feedName) else {
            throw ReplicationError.http(status: 400, error: "bad_request", reason: "Unknown feed type")
        }
        var since = q.get("since") ?? body["since"]?.stringValue
        if since == nil, let n = body["since"]?.intValue { since = String(n) }
        let limit = Int(q.get("limit") ?? "") ?? body["limit"]?.intValue ?? 1000
        var filter: ReplicationFilter?
        var ids = docIDs
        if ids == nil, q.get("filter") == "_doc_ids", let text = q.get("doc_ids"),
            let list = (try? JSON.parse(text, maxValues: GatewayHTTPLimits.maxRequestJSONValues))?.arrayValue
        {
            ids = list.compactMap(\.stringValue)
        }
        if let ids {
            // The gateway's `_doc_ids` bound: a peer asks for a few documents, not for a list the size of a database.
            guard ids.count <= GatewayHTTPLimits.maxBulkItems,
                case let distinct = Set(ids), distinct.count <= GatewayHTTPLimits.maxBulkReadDocs
            else {
                throw ReplicationError.http(
                    status: 413, error: "too_large",
                    reason: "Too many doc_ids (max \(GatewayHTTPLimits.maxBulkReadDocs))")
            }
            filter = .docIDs(Array(distinct))
        }
        let heartbeat = Int(q.get("heartbeat") ?? "")
        guard feed == .continuous else {
            let batch = try await endpoint.changes(
                since: since, limit: max(limit, 1), feed: feed, filter: filter, heartbeatMs: heartbeat)
            return json(.ok, batch.json())
        }
        // Continuous: one row per line as changes come, a newline heartbeat while idle, until `limit`
        // rows or the client leaves.
        let start = since
        let streamFilter = filter
        return Response(
            status: .ok, headers: [.contentType: "application/octet-stream"],
            body: ResponseBody { writer in
                var cursor = start
                var sent = 0
                while sent < limit && !Task.isCancelled {
                    let batch = try await endpoint.changes(
                        since: cursor, limit: limit - sent, feed: .longpoll, filter: streamFilter,
                        heartbeatMs: heartbeat)
                    var lines: [UInt8] = []
                    for row in batch.rows { lines += row.json().serialized() + [0x0A] }
                    if lines.isEmpty { lines = [0x0A] }
                    try await writer.write(ByteBuffer(bytes: lines))
                    sent += batch.rows.count
                    if let last = batch.lastSeq { cursor = last.description }
                }
                try await writer.finish(nil)
            })
    }

    // MARK: Helpers

    private static func answer(_ body: () async throws -> Response) async throws -> Response {
        do {
            return try await body()
        } catch let error as ReplicationError {
            switch error {
            case .http(let status, let name, let reason): return errorResponse(status, name, reason)
            case .badResponse(let m), .invalid(let m): return errorResponse(400, "bad_request", m)
            case .network(let m): return errorResponse(503, "service_unavailable", m)
            }
        } catch let error as JSONError {
            return errorResponse(400, "bad_request", "Invalid JSON: \(error)")
        }
    }

    static func errorResponse(_ status: Int, _ error: String, _ reason: String) -> Response {
        json(.init(code: status), .errorBody(error, reason: reason))
    }

    private static func json(_ status: HTTPResponse.Status, _ value: JSON) -> Response {
        raw(status, contentType: "application/json", value.serialized())
    }

    private static func raw(_ status: HTTPResponse.Status, contentType: String, _ bytes: [UInt8]) -> Response {
        Response(
            status: status, headers: [.contentType: contentType],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The body as JSON, of at most `Limits.liteListenerMaxRequestBody` bytes and, as the gateway's,
    /// `GatewayHTTPLimits.maxRequestJSONValues` values (else 400).
    private static func body(_ request: Request) async throws -> JSON {
        var r = request
        let buffer = try await r.collectBody(upTo: Limits.liteListenerMaxRequestBody)
        return try JSON.parse(Array(buffer.readableBytesView), maxValues: GatewayHTTPLimits.maxRequestJSONValues)
    }
}

/// Refuses every request without the listener's one-time basic credentials: 401 with a
/// `WWW-Authenticate` challenge, before any route runs.
struct BasicAuthGate: RouterMiddleware {
    typealias Context = BasicRequestContext
    let credentials: OneTimeCredentials

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        if let (user, password) = BasicAuth.parse(request.headers[.authorization]),
            credentials.matches(user: user, password: password)
        {
            return try await next(request, context)
        }
        var response = PeerListener.errorResponse(401, "unauthorized", "Login required")
        response.headers[.wwwAuthenticate] = "Basic realm=\"settee-lite\""
        return response
    }
}
