import AsyncHTTPClient
import CompressNIO
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPCompression
import NIOSSL
import SetteeCore
import SetteeJSON
import SetteeTLS
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How a `RemoteEndpoint` proves who it is.
public enum ReplicationAuthenticator: Sendable, Equatable {
    case none
    /// `Authorization: Basic` on every request.
    case basic(user: String, password: String)
    /// `POST /db/_session` once (and again after a 401), then the `SyncGatewaySession` cookie.
    case session(user: String, password: String)
    /// A session cookie obtained elsewhere (e.g. from the admin port's `POST /db/_session`).
    case cookie(name: String, value: String)
}

/// A database reached over HTTP(S) that speaks the CouchDB replication protocol: settee-gateway, a Lite
/// peer's listener, CouchDB, Sync Gateway. Requests go through AsyncHTTPClient with gzip responses
/// accepted; `_bulk_get` falls back to `GET doc?open_revs=` for the life of the endpoint once the server
/// answers it with 404/405/406/501. A `_bulk_get` or `open_revs` answer refused for its size is asked for again in
/// halves (`fetchInParts`), and so is a `_bulk_docs` the target refuses with 413 (`bulkDocs`).
///
/// An `https://…?cert=sha256:<hex>` URL (a peer listener's sync URL, `SyncURLPin`) pins the peer's certificate: the
/// pin is taken out of the URL (never sent), the certificate is fetched once, accepted only with that fingerprint,
/// and every request then trusts it alone (`PinnedPeer`); a peer presenting another one fails the replication with
/// `ReplicationError.invalid`.
public final class RemoteEndpoint: ReplicationEndpoint {
    /// The database URL without credentials, pin and trailing slash.
    public let url: String
    /// The pinned certificate's fingerprint (`sha256:<hex>`) from the URL's `cert` parameter, if it had one.
    public let pinnedFingerprint: String?
    public let authenticator: ReplicationAuthenticator
    private let client: HTTPClient
    private let logger: Logger
    private let requestTimeout: TimeAmount
    /// Bound of one whole request that is not a continuous feed, head and body (`ReplicationLimits.requestDeadlineMs`;
    /// a longpoll's is its timeout plus this).
    private let requestDeadline: TimeAmount
    /// The least time a request with a body is given before silence fails it, as its bytes at this rate
    /// (`ReplicationLimits.uploadMinBytesPerSecond`).
    private let uploadMinBytesPerSecond: Int
    /// Seconds a longpoll `_changes` asks the server to wait before answering empty.
    public let longpollTimeoutMs: Int
    /// Send request bodies of at least `gzipRequestMinBytes` gzip-compressed (`Content-Encoding: gzip`);
    /// a server answering 415 gets them plain from then on.
    public let gzipRequests: Bool
    /// Longest continuous `_changes` line held before the feed fails (`ReplicationLimits.maxChangesLineBytes`).
    public let maxChangesLineBytes: Int
    /// Largest response body read (`ReplicationLimits.maxResponseBody`).
    public let maxResponseBody: Int
    /// Most values a `_bulk_get` or `open_revs` answer in JSON may hold (`ReplicationLimits.maxBulkGetJSONValues`).
    public let maxBulkGetJSONValues: Int
    private struct Mutable {
        var cookie: String?
        var bulkGetUnsupported = false
        var gzipRefused = false
        /// The pinned peer's TLS configuration, once its certificate was fetched and matched the pin.
        var pinnedTLS: TLSConfiguration?
    }
    private let state = Mutex(Mutable())

    /// One client shared by every endpoint that is not given its own: never shut down (AsyncHTTPClient
    /// requires a shutdown before deinit, and this one lives as long as the process).
    public static let sharedClient: HTTPClient = {
        var config = HTTPClient.Configuration(
            decompression: .enabled(limit: .ratio(ReplicationLimits.maxDecompressionRatio)))
        config.timeout = .init(connect: .seconds(5), read: nil)
        config.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: config)
    }()

    /// `url` is the database URL (`http://host:4984/db`); credentials in it (`http://u:p@host/db`) become
    /// basic authentication unless `authenticator` says otherwise; `https://…?cert=sha256:<hex>` pins the peer's
    /// certificate (`SyncURLPin`).
    /// - Throws: `ReplicationError.invalid` for a URL that is not `http(s)://`, a malformed pin or one on `http://`.
    public init(
        url: String, authenticator: ReplicationAuthenticator = .none, client: HTTPClient? = nil,
        logger: Logger = Logger(label: "settee.replication.remote"),
        requestTimeoutMs: Int = ReplicationLimits.requestTimeoutMs, longpollTimeoutMs: Int = 60_000,
        gzipRequests: Bool = false, maxChangesLineBytes: Int = ReplicationLimits.maxChangesLineBytes,
        requestDeadlineMs: Int = ReplicationLimits.requestDeadlineMs,
        maxResponseBody: Int = ReplicationLimits.maxResponseBody,
        maxBulkGetJSONValues: Int = ReplicationLimits.maxBulkGetJSONValues,
        uploadMinBytesPerSecond: Int = ReplicationLimits.uploadMinBytesPerSecond
    ) throws(ReplicationError) {
        let pinned: SyncURLPin
        do { pinned = try SyncURLPin(url) } catch {
            throw ReplicationError.invalid("\(error) (\(ReplicationID.stripCredentials(url)))")
        }
        let url = pinned.url
        guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
            throw ReplicationError.invalid("not an http(s) URL: \(ReplicationID.stripCredentials(url))")
        }
        if pinned.fingerprint != nil, !url.hasPrefix("https://") {
            throw ReplicationError.invalid(
                "cert= pins a TLS certificate: \(ReplicationID.stripCredentials(url)) must be https://")
        }
        pinnedFingerprint = pinned.fingerprint
        var auth = authenticator
        if auth == .none, let creds = RemoteEndpoint.credentials(in: url) {
            auth = .basic(user: creds.0, password: creds.1)
        }
        self.url = ReplicationID.stripCredentials(url)
        self.authenticator = auth
        self.client = client ?? RemoteEndpoint.sharedClient
        self.logger = logger
        self.requestTimeout = .milliseconds(Int64(requestTimeoutMs))
        self.requestDeadline = .milliseconds(Int64(requestDeadlineMs))
        self.uploadMinBytesPerSecond = max(1, uploadMinBytesPerSecond)
        self.longpollTimeoutMs = longpollTimeoutMs
        self.gzipRequests = gzipRequests
        self.maxChangesLineBytes = maxChangesLineBytes
        self.maxResponseBody = maxResponseBody
        self.maxBulkGetJSONValues = maxBulkGetJSONValues
        if case .cookie(let name, let value) = auth { state.withLock { $0.cookie = "\(name)=\(value)" } }
    }

    public var identity: String { url }

    static func credentials(in url: String) -> (String, String)? {
        guard let schemeEnd = afterScheme(url) else { return nil }
        let rest = url[schemeEnd...]
        let hostEnd = rest.firstIndex(of: "/") ?? rest.endIndex
        guard let at = rest[..<hostEnd].lastIndex(of: "@") else { return nil }
        let info = rest[..<at]
        let parts = info.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        let user = String(parts[0])
        let password = parts.count > 1 ? String(parts[1]) : ""
        return (PercentEncoding.decode(user) ?? user, PercentEncoding.decode(password) ?? password)
    }

    // MARK: ReplicationEndpoint

    public func info() async throws -> JSON {
        let r = try await send(.GET, "", expect: [200])
        return try r.json()
    }

    public func changes(
        since: String?, limit: Int, feed: ChangesFeedKind, filter: ReplicationFilter?, heartbeatMs: Int?
    ) async throws -> ChangesBatch {
        var feed = feed
        var polling = false
        var query: [(String, String)] = [("style", "all_docs"), ("limit", String(limit))]
        if let since { query.append(("since", since)) }
        var body: JSON?
        var method = HTTPMethod.GET
        switch filter {
        case .docIDs(let ids)?:
            // Sync Gateway answers `_doc_ids` only on the normal feed: a live doc-id replication polls.
            if feed != .normal {
                feed = .normal
                polling = true
            }
            query.append(("filter", "_doc_ids"))
            method = .POST
            body = .object([("doc_ids", .array(ids.map(JSON.string)))])
        case .channels(let channels)?:
            query.append(("filter", "sync_gateway/bychannel"))
            query.append(("channels", channels.joined(separator: ",")))
        case .named(let name, let parameters)?:
            query.append(("filter", name))
            query += parameters.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        case nil:
            break
        }
        query.append(("feed", feed.rawValue))
        var deadline = requestTimeout
        var total = requestDeadline
        if feed != .normal {
            if let heartbeatMs {
                query.append(("heartbeat", String(heartbeatMs)))
            } else {
                query.append(("timeout", String(longpollTimeoutMs)))
            }
            deadline = .milliseconds(Int64(longpollTimeoutMs)) + requestTimeout
            total = .milliseconds(Int64(longpollTimeoutMs)) + requestDeadline
        }
        if feed == .continuous {
            // Silence past a few heartbeats is a failed connection; without a heartbeat the peer may wait out
            // the longpoll timeout before it writes anything. No total deadline: the feed stays open as long as
            // the peer keeps its heartbeat, and only whole lines count as hearing from it (`readFeed`).
            let idle = heartbeatMs.map { Duration.milliseconds($0) * ReplicationLimits.changesFeedIdleHeartbeats }
            return try await continuousChanges(
                method: method, query: query, body: body, limit: limit, deadline: deadline,
                idle: idle ?? Duration(deadline))
        }
        let r = try await send(
            method, "_changes", query: query, body: body, expect: [200], timeout: deadline, total: total)
        let batch = try ChangesBatch(json: try r.json())
        if polling && batch.rows.isEmpty {
            try await Task.sleep(for: .milliseconds(ReplicationLimits.docIDPollIntervalMs))
        }
        return batch
    }

    public func revsDiff(_ request: [String: [String]]) async throws -> JSON {
        let r = try await send(.POST, "_revs_diff", body: RevsDiff.requestJSON(request), expect: [200])
        return try r.json()
    }

    public func bulkGet(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        try await fetchInParts(requests) { part in try await self.bulkGetOnce(part) }
    }

    /// One `_bulk_get` of `requests` (or their `open_revs`); `AnswerTooLarge` when its answer is refused for its size.
    private func bulkGetOnce(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        if requests.isEmpty { return [] }
        if !state.withLock({ $0.bulkGetUnsupported }) {
            let r = try await send(
                .POST, "_bulk_get", query: [("revs", "true"), ("attachments", "true"), ("latest", "true")],
                body: BulkGet.requestJSON(requests), accept: "multipart/mixed, application/json",
                expect: [200, 400, 404, 405, 406, 413, 501], splitsTooLarge: true)
            if r.status == 200 {
                return try decodeRevisions(r, id: "", bulk: true)
            }
            // settee-gateway and Lite listeners refuse a batch whose documents pass their bound with 413 and ask for
            // fewer.
            if r.status == 413 {
                throw AnswerTooLarge(reason: "the source refused it: \(r.error())", mapped: r.error())
            }
            if r.status == 400 { throw r.error() }
            logger.debug("_bulk_get unsupported; falling back to open_revs", metadata: ["status": "\(r.status)"])
            state.withLock { $0.bulkGetUnsupported = true }
        }
        return try await openRevs(requests)
    }

    /// `_bulk_docs` of `docs`; a part the target refuses with 413 (its request body bound: CouchDB's
    /// `max_http_request_size`, settee-gateway's or a Lite listener's) is sent again in halves, in order, down to one
    /// document, which is then that document's error row (413 `too_large`): the replicator counts it in
    /// `docWriteFailures`, logs it and goes on, as CouchDB's replicator does. Before, the 413 stopped the replication.
    /// A batch of n documents costs at most 2n - 1 requests.
    public func bulkDocs(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        try await inParts(docs, what: "documents") { part in
            try await self.bulkDocsOnce(part, newEdits: newEdits)
        } alone: { doc, tooLarge in
            .object([
                ("id", .string(doc.id)), ("rev", .string(doc.rev)), ("error", .string("too_large")),
                ("reason", .string("this document alone is too large for the target: \(tooLarge.reason)")),
            ])
        }
    }

    /// One `_bulk_docs` of `docs`; `AnswerTooLarge` when the target refuses it with 413.
    private func bulkDocsOnce(_ docs: [FetchedRevision], newEdits: Bool) async throws -> [JSON] {
        if docs.isEmpty { return [] }
        let body = JSON.object([("docs", .array(docs.map { $0.inlineJSON() })), ("new_edits", .bool(newEdits))])
        let r = try await send(.POST, "_bulk_docs", body: body, expect: [200, 201, 413], splitsTooLarge: true)
        if r.status == 413 { throw AnswerTooLarge(reason: "the target refused it: \(r.error())", mapped: r.error()) }
        guard let rows = try r.json().arrayValue else { throw ReplicationError.badResponse("_bulk_docs: not an array") }
        return rows
    }

    public func getLocal(_ id: String) async throws -> JSON? {
        let r = try await send(.GET, "_local/" + PercentEncoding.encode(id), expect: [200, 404])
        return r.status == 404 ? nil : try r.json()
    }

    public func putLocal(_ id: String, _ body: JSON) async throws {
        _ = try await send(.PUT, "_local/" + PercentEncoding.encode(id), body: body, expect: [200, 201])
    }

    public func ensureFullCommit() async throws -> String? {
        let r = try await send(.POST, "_ensure_full_commit", body: .object([]), expect: [200, 201, 404, 405])
        guard r.status == 200 || r.status == 201 else { return nil }
        switch try r.json()["instance_start_time"] {
        case .string(let s)?: return s
        case .number(let n)?: return JSON.number(n).text
        default: return nil
        }
    }

    // MARK: open_revs fallback

    private func openRevs(_ requests: [BulkGetRequest]) async throws -> [FetchedRevision] {
        // One GET per document (its revisions share `atts_since` from one `_revs_diff` entry).
        var order: [String] = []
        var byID: [String: [BulkGetRequest]] = [:]
        for r in requests {
            if byID[r.id] == nil { order.append(r.id) }
            byID[r.id, default: []].append(r)
        }
        var out: [FetchedRevision] = []
        for id in order {
            guard let reqs = byID[id] else { continue }
            out += try await fetchInParts(reqs) { part in try await self.openRevsOnce(id, part) }
        }
        return out
    }

    /// One `GET doc?open_revs=` of `reqs`, revisions of document `id`; `AnswerTooLarge` when its answer is refused
    /// for its size.
    private func openRevsOnce(_ id: String, _ reqs: [BulkGetRequest]) async throws -> [FetchedRevision] {
        var query: [(String, String)] = [
            ("open_revs", JSON.array(reqs.map { .string($0.rev) }).text), ("revs", "true"), ("latest", "true"),
            ("attachments", "true"),
        ]
        let since = Array(Set(reqs.flatMap(\.attsSince))).sorted()
        if !since.isEmpty { query.append(("atts_since", JSON.array(since.map(JSON.string)).text)) }
        let r = try await send(
            .GET, PercentEncoding.encode(id), query: query, accept: "multipart/mixed, application/json",
            expect: [200, 404, 413], splitsTooLarge: true)
        if r.status == 404 {
            return reqs.map {
                FetchedRevision(
                    id: id, rev: $0.rev, error: RevisionError(status: 404, error: "not_found", reason: "missing"))
            }
        }
        if r.status == 413 { throw AnswerTooLarge(reason: "the source refused it: \(r.error())", mapped: r.error()) }
        return try decodeRevisions(r, id: id, bulk: false)
    }

    // MARK: Answers too large

    /// A `_bulk_get` or `open_revs` answer refused for its size: past `maxResponseBody` bytes, past
    /// `maxBulkGetJSONValues` values (or `Limits.maxJSONBytes`) in JSON, or a 413 from the source; or a `_bulk_docs`
    /// the target refused with 413. `mapped` is what the request failed with before requests were split.
    /// `maybe`: not a refusal seen but the peer closing the connection while the request's body was sent, as a
    /// server with a request size bound may after answering 413 without reading the body (the 413 is then lost to
    /// the client, or not, by a race): worth asking for less, but one item alone fails as `mapped`, not as too large.
    struct AnswerTooLarge: Error {
        var reason: String
        var mapped: any Error
        var maybe = false
    }

    /// Whether `error` is the connection closing under a request still being sent: the peer reset or closed it
    /// (`ECONNRESET`, `EPIPE`, AsyncHTTPClient's `remoteConnectionClosed`, NIO's write on a closed channel).
    static func closedWhileSending(_ error: any Error) -> Bool {
        switch error {
        case let e as ChannelError: return e == .ioOnClosedChannel || e == .eof || e == .outputClosed
        case let e as HTTPClientError: return e == .remoteConnectionClosed
        case let e as IOError: return e.errnoCode == ECONNRESET || e.errnoCode == EPIPE
        default: return false
        }
    }

    /// `fetch` of `requests`; a part whose answer is refused for its size (`AnswerTooLarge`) is asked for again in
    /// halves, in order, down to one revision, which is then that revision's error (413 `too_large`): the replicator
    /// counts it in `docWriteFailures`, logs it and goes on, as CouchDB's replicator records a document it cannot
    /// fetch (`doc_read_failures`) instead of stalling the replication. Before, the whole batch failed, and the
    /// replicator retried the same request, or stopped on a 413 or an answer of too many values. A batch of n
    /// revisions costs at most 2n - 1 requests, each holding at most one answer.
    private func fetchInParts(
        _ requests: [BulkGetRequest], _ fetch: ([BulkGetRequest]) async throws -> [FetchedRevision]
    ) async throws -> [FetchedRevision] {
        try await inParts(requests, what: "revisions", fetch) { only, tooLarge in
            FetchedRevision(
                id: only.id, rev: only.rev,
                error: RevisionError(
                    status: 413, error: "too_large",
                    reason: "this revision's answer alone is too large: \(tooLarge.reason)"))
        }
    }

    /// `send` of `items`; a part refused for its size (`AnswerTooLarge`) is sent again in halves, in order, down to
    /// one item, whose result is then `alone(item, refusal)`. The results in the order of `items`; n items cost at
    /// most 2n - 1 requests. Any other error fails the whole.
    private func inParts<Item, Result>(
        _ items: [Item], what: String, _ send: ([Item]) async throws -> [Result],
        alone: (Item, AnswerTooLarge) -> Result
    ) async throws -> [Result] {
        var out: [Result] = []
        // The parts still to send, the next one last.
        var parts: [ArraySlice<Item>] = [items[...]]
        while let part = parts.popLast() {
            do {
                out += try await send(Array(part))
            } catch let tooLarge as AnswerTooLarge {
                if part.count > 1 {
                    let middle = part.startIndex + part.count / 2
                    parts.append(part[middle...])
                    parts.append(part[..<middle])
                    logger.debug(
                        "too large; sending it again in halves",
                        metadata: ["url": "\(url)", what: "\(part.count)", "reason": "\(tooLarge.reason)"])
                } else if tooLarge.maybe {
                    throw tooLarge.mapped
                } else if let only = part.first {
                    out.append(alone(only, tooLarge))
                }
            }
        }
        return out
    }

    private func decodeRevisions(_ r: Response, id: String, bulk: Bool) throws -> [FetchedRevision] {
        if let type = r.contentType, type.isMultipart {
            let m: Multipart
            do { m = try Multipart.parse(r.body, contentType: type) } catch {
                throw ReplicationError.badResponse("\(error)")
            }
            return try BulkGet.parseMultipartAnswer(m)
        }
        // Every revision asked for in one text (a multipart answer is parsed a revision at a time).
        let json: JSON
        do { json = try JSON.parse(r.body, maxValues: maxBulkGetJSONValues) } catch {
            let mapped = ReplicationError.badResponse("\(error)")
            if error.bound == .values || error.bound == .bytes {
                throw AnswerTooLarge(reason: "its JSON is \(error.reason)", mapped: mapped)
            }
            throw mapped
        }
        return bulk ? try BulkGet.parseJSONAnswer(json) : try BulkGet.parseOpenRevsJSON(json, id: id)
    }

    // MARK: continuous feed

    /// `deadline` bounds the wait for the response head, `idle` the silence between two reads of its body.
    private func continuousChanges(
        method: HTTPMethod, query: [(String, String)], body: JSON?, limit: Int, deadline: TimeAmount,
        idle: Duration
    ) async throws -> ChangesBatch {
        var (request, sent) = try makeRequest(method, "_changes", query: query, body: body, accept: "application/json")
        request.body = sent.map { .bytes($0) }
        request.headers.replaceOrAdd(name: "Connection", value: "close")
        request.tlsConfiguration = try await pinnedTLS()
        let response: HTTPClientResponse
        do { response = try await client.execute(request, timeout: deadline) } catch { throw map(error) }
        guard response.status.code == 200 else {
            let bytes = try? await readBody(
                response, upTo: ReplicationLimits.maxSmallResponseBody, idle: requestTimeout,
                deadline: IdleTimeout.Deadline(Duration(requestDeadline)), what: "_changes error")
            throw Response(
                status: Int(response.status.code), headers: response.headers,
                body: bytes.map { Array($0.readableBytesView) } ?? []
            ).error()
        }
        do {
            return try await IdleTimeout.run(idle: idle, what: "continuous _changes") { watch in
                try await self.readFeed(response, limit: limit, watch: watch)
            }
        } catch {
            throw map(error)
        }
    }

    /// The rows of a continuous feed up to `limit`, or up to the first heartbeat after rows. Only a whole line (a
    /// row or a heartbeat) counts as hearing from the peer: a peer that drips a byte now and then without finishing
    /// a line is as silent as one that sends nothing, so the feed's idle bound ends it. A healthy peer's rows name a
    /// document's id, sequence and leaf revisions (a few hundred bytes), far less than a slow link carries in the
    /// heartbeats' worth of time the bound allows.
    private func readFeed(_ response: HTTPClientResponse, limit: Int, watch: IdleTimeout.Watch) async throws
        -> ChangesBatch
    {
        var pending = FeedLineBuffer(maxLineBytes: maxChangesLineBytes)
        var rows: [ChangeRow] = []
        var last: SequenceID?
        // The rows' lines together stay within what one answer may be (`maxResponseBody`), as a normal feed's body
        // does: each line was bounded, the batch's up to `limit` of them was not.
        var lineBytes = 0
        do {
            reading: for try await chunk in response.body {
                try pending.append(chunk.readableBytesView)
                while let line = try pending.nextLine() {
                    watch.heard()
                    lineBytes += line.count
                    guard lineBytes <= maxResponseBody else {
                        throw ReplicationError.badResponse("continuous _changes rows past \(maxResponseBody) bytes")
                    }
                    let isBlank = !line.contains { $0 != 0x20 && $0 != 0x0D && $0 != 0x09 }
                    if isBlank {
                        if !rows.isEmpty { break reading }  // a heartbeat after rows: the feed has paused
                        continue
                    }
                    let value = try JSON.parse(line)
                    if let row = ChangeRow(json: value) {
                        rows.append(row)
                        if rows.count >= limit { break reading }
                    } else if let seq = value["last_seq"] {
                        last = SequenceID(seq)
                    }
                }
            }
        } catch let error as JSONError {
            throw ReplicationError.badResponse("continuous _changes line: \(error)")
        } catch let error as ReplicationError {
            // A line past the bound: the peer is not speaking the protocol; rows read before it are not kept.
            throw error
        } catch {
            if !rows.isEmpty {
                let batch = ChangesBatch(rows: rows, lastSeq: last)
                try batch.checkSequences()
                return batch
            }
            throw map(error)
        }
        let batch = ChangesBatch(rows: rows, lastSeq: last)
        try batch.checkSequences()
        return batch
    }

    // MARK: HTTP

    struct Response {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]

        var contentType: MediaType? { headers.first(name: "Content-Type").flatMap(MediaType.init) }

        func json(maxValues: Int = Limits.maxJSONValues) throws(ReplicationError) -> JSON {
            do { return try JSON.parse(body, maxValues: maxValues) } catch {
                throw ReplicationError.badResponse("\(error)")
            }
        }

        func error() -> ReplicationError {
            let json = try? JSON.parse(body)
            return .http(
                status: status, error: json?["error"]?.stringValue ?? "http_\(status)",
                reason: json?["reason"]?.stringValue ?? "")
        }
    }

    /// The request, without its body, and the bytes of its body as sent (after gzip), nil without one: the caller
    /// sends them its way (`perform` in pieces, the continuous feed whole).
    private func makeRequest(
        _ method: HTTPMethod, _ path: String, query: [(String, String)], body: JSON?, accept: String
    ) throws -> (request: HTTPClientRequest, body: ByteBuffer?) {
        var sent: ByteBuffer?
        var target = url + "/" + path
        if !query.isEmpty {
            target += "?" + query.map { "\($0.0)=\(PercentEncoding.encode($0.1))" }.joined(separator: "&")
        }
        var request = HTTPClientRequest(url: target)
        request.method = method
        request.headers.add(name: "Accept", value: accept)
        request.headers.add(name: "User-Agent", value: "settee-replicator/1")
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            var buffer = ByteBuffer(bytes: body.serialized())
            if gzipRequests, buffer.readableBytes >= ReplicationLimits.gzipRequestMinBytes,
                !state.withLock({ $0.gzipRefused }), let compressed = try? buffer.compress(with: .gzip())
            {
                request.headers.add(name: "Content-Encoding", value: "gzip")
                buffer = compressed
            }
            sent = buffer
        }
        switch authenticator {
        case .basic(let user, let password):
            request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        case .session, .cookie:
            if let cookie = state.withLock({ $0.cookie }) { request.headers.add(name: "Cookie", value: cookie) }
        case .none:
            break
        }
        return (request, sent)
    }

    /// `splitsTooLarge`: a body past `maxResponseBody` fails with `AnswerTooLarge` (the caller asks for less), not
    /// `ReplicationError.network`.
    private func send(
        _ method: HTTPMethod, _ path: String, query: [(String, String)] = [], body: JSON? = nil,
        accept: String = "application/json", expect: Set<Int>, timeout: TimeAmount? = nil, total: TimeAmount? = nil,
        splitsTooLarge: Bool = false
    ) async throws -> Response {
        do {
            return try await sendOnce(
                method, path, query: query, body: body, accept: accept, expect: expect, timeout: timeout, total: total)
        } catch let error as AnswerTooLarge where !splitsTooLarge {
            throw error.mapped
        }
    }

    private func sendOnce(
        _ method: HTTPMethod, _ path: String, query: [(String, String)], body: JSON?, accept: String,
        expect: Set<Int>, timeout: TimeAmount?, total: TimeAmount?
    ) async throws -> Response {
        if case .session = authenticator, state.withLock({ $0.cookie == nil }) { try await login() }
        var r = try await perform(
            method, path, query: query, body: body, accept: accept, timeout: timeout ?? requestTimeout,
            total: total ?? requestDeadline)
        if r.status == 401, case .session = authenticator {
            try await login()
            r = try await perform(
                method, path, query: query, body: body, accept: accept, timeout: timeout ?? requestTimeout,
                total: total ?? requestDeadline)
        }
        if r.status == 415, gzipRequests, body != nil, !state.withLock({ $0.gzipRefused }) {
            state.withLock { $0.gzipRefused = true }
            r = try await perform(
                method, path, query: query, body: body, accept: accept, timeout: timeout ?? requestTimeout,
                total: total ?? requestDeadline)
        }
        guard expect.contains(r.status) else { throw r.error() }
        return r
    }

    /// One request, the whole of it within `total` from now, failing once `timeout` passes with nothing from the
    /// peer: no piece of its body written to the socket while it is sent, no head after that, no piece of the
    /// answer's body between two (`AnswerCollector`); a request with a body not before `headTimeout` from now. An
    /// upload on a slow link lasts as long as the link keeps taking it. Before, a request with a body had only
    /// `headTimeout` for its head, and a larger body on a link slower than `uploadMinBytesPerSecond` failed at every
    /// retry.
    private func perform(
        _ method: HTTPMethod, _ path: String, query: [(String, String)], body: JSON?, accept: String,
        timeout: TimeAmount, total: TimeAmount
    ) async throws -> Response {
        let (prepared, sent) = try makeRequest(method, path, query: query, body: body, accept: accept)
        let tls = try await pinnedTLS()
        let bodyBytes = sent?.readableBytes ?? 0
        let deadline = IdleTimeout.Deadline(Duration(total))
        let quietUntil =
            ContinuousClock.now
            + Duration(Self.headTimeout(timeout, bodyBytes: bodyBytes, rate: uploadMinBytesPerSecond, total: total))
        let (client, maxResponseBody) = (client, maxResponseBody)
        do {
            let request = try HTTPClient.Request(
                url: prepared.url, method: method, headers: prepared.headers,
                body: sent.map { AnswerCollector.body($0, pieceBytes: ReplicationLimits.uploadPieceBytes) },
                tlsConfiguration: tls)
            let answer = try await IdleTimeout.run(
                idle: Duration(timeout), deadline: deadline, quietUntil: quietUntil, what: "\(method) \(path)"
            ) { watch in
                let task = client.execute(
                    request: request, delegate: AnswerCollector(watch: watch, maxBytes: maxResponseBody),
                    deadline: .now() + total)
                return try await withTaskCancellationHandler {
                    try await task.futureResult.get()
                } onCancel: {
                    task.cancel()
                }
            }
            return Response(
                status: Int(answer.head.status.code), headers: answer.head.headers,
                body: Array(answer.body.readableBytesView))
        } catch let error as NIOTooManyBytesError {
            throw AnswerTooLarge(reason: "its body passed \(maxResponseBody) bytes", mapped: map(error))
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            // AsyncHTTPClient's timer for the same deadline as `IdleTimeout.run`'s: the same failure, whichever first.
            throw IdleTimeout.overdue("\(method) \(path)", total: Duration(total))
        } catch  where bodyBytes > 0 && Self.closedWhileSending(error) {
            throw AnswerTooLarge(
                reason: "the peer closed the connection while \(bodyBytes) bytes were sent (\(error))",
                mapped: map(error), maybe: true)
        } catch {
            throw map(error)
        }
    }

    /// The least time a request is given before silence fails it: `timeout` plus the time `bodyBytes` take at `rate`
    /// bytes per second, at most `total` (the whole request's deadline). What the kernel's send and receive buffers
    /// take of a body at once counts as written at once, and then drains at the link's pace with nothing more to
    /// tell of it: this covers that part; the pieces' progress covers the rest (`perform`).
    static func headTimeout(_ timeout: TimeAmount, bodyBytes: Int, rate: Int, total: TimeAmount) -> TimeAmount {
        let (scaled, overflow) = Int64(bodyBytes).multipliedReportingOverflow(by: 1_000_000_000)
        let uploadNanos = overflow ? Int64.max : scaled / Int64(max(1, rate))
        let (sum, carry) = timeout.nanoseconds.addingReportingOverflow(uploadNanos)
        return carry ? total : min(.nanoseconds(sum), total)
    }

    /// `response`'s body, at most `maxBytes` (`NIOTooManyBytesError` past it), failing once `idle` passes between two
    /// reads or at `deadline`, the whole request's: AsyncHTTPClient's deadline ends with the head, and a peer may
    /// stall after it or send its body a byte at a time (`IdleTimeout`).
    private func readBody(
        _ response: HTTPClientResponse, upTo maxBytes: Int, idle: TimeAmount, deadline: IdleTimeout.Deadline,
        what: @autoclosure () -> String
    ) async throws -> ByteBuffer {
        try await IdleTimeout.run(idle: Duration(idle), deadline: deadline, what: what()) { watch in
            var collected = ByteBuffer()
            for try await chunk in response.body {
                watch.heard()
                guard chunk.readableBytes <= maxBytes - collected.readableBytes else {
                    throw NIOTooManyBytesError(maxBytes: maxBytes)
                }
                collected.writeImmutableBuffer(chunk)
            }
            return collected
        }
    }

    /// The TLS configuration of every request to a pinned peer (nil without a pin: the client's own): fetched and
    /// checked against the pin on the first request (`PinnedPeer`), kept once it matched; a failed fetch is tried
    /// again by the next request.
    private func pinnedTLS() async throws -> TLSConfiguration? {
        guard let pinnedFingerprint else { return nil }
        if let known = state.withLock({ $0.pinnedTLS }) { return known }
        let tls = try await PinnedPeer.tlsConfiguration(url: url, fingerprint: pinnedFingerprint)
        state.withLock { $0.pinnedTLS = tls }
        return tls
    }

    /// `POST /db/_session {"name","password"}` and keep the `Set-Cookie` it answers.
    private func login() async throws {
        guard case .session(let user, let password) = authenticator else { return }
        let body = JSON.object([("name", .string(user)), ("password", .string(password))])
        var request = HTTPClientRequest(url: url + "/_session")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: body.serialized()))
        request.tlsConfiguration = try await pinnedTLS()
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        let deadline = IdleTimeout.Deadline(Duration(requestDeadline))
        do {
            response = try await client.execute(request, timeout: min(requestTimeout, requestDeadline))
            bytes = try await readBody(
                response, upTo: ReplicationLimits.maxSmallResponseBody, idle: requestTimeout, deadline: deadline,
                what: "POST _session")
        } catch {
            throw map(error)
        }
        guard response.status.code == 200 || response.status.code == 201 else {
            throw Response(
                status: Int(response.status.code), headers: response.headers, body: Array(bytes.readableBytesView)
            ).error()
        }
        guard let setCookie = response.headers["Set-Cookie"].first,
            let pair = setCookie.split(separator: ";").first, pair.contains("=")
        else { throw ReplicationError.badResponse("_session answered no cookie") }
        state.withLock { $0.cookie = pair.trimmingSpaces }
    }

    private func map(_ error: any Error) -> any Error {
        if error is CancellationError || error is ReplicationError { return error }
        if let e = error as? HTTPClientError, e == .cancelled { return CancellationError() }
        if Task.isCancelled { return CancellationError() }
        logger.debug("request failed", metadata: ["url": "\(url)", "error": "\(error)"])
        // A certificate the client does not trust does not fix itself: retrying would never end.
        if let tls = error as? NIOSSLError, case .handshakeFailed = tls {
            return ReplicationError.invalid(
                "TLS handshake with \(url) failed (\(tls)): the peer's certificate is not trusted; a peer listener's "
                    + "sync URL carries ?cert=sha256:… to pin its self-signed certificate")
        }
        return ReplicationError.network("\(error)")
    }

    // MARK: URL text

}

extension Substring {
    fileprivate var trimmingSpaces: String { String(self).trimmed }
}
