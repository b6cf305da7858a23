import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage

/// Couchbase's documents endpoint (what the console's Documents page and curl use):
///
///     GET    /pools/default/buckets/NAME/docs?skip=&limit=&startkey=&endkey=   keys in byte order, paged
///     GET    /pools/default/buckets/NAME/docs/ID                                one document
///     POST   /pools/default/buckets/NAME/docs/ID   (form: value, flags, expiry) store JSON
///     DELETE /pools/default/buckets/NAME/docs/ID
///
/// A document is read and written through `BucketEngine` on the node holding its active vBucket: another node
/// relays the request there (the bucket's `ClusterMap`, the internal credentials). A listing gathers this node's
/// active vBuckets and, unless `local=1`, each other node's first `skip+limit` keys, and merges them. Relayed
/// requests carry `relayed=1` and are never relayed again (a map in flux answers 503 instead of looping).
enum DocumentRoutes {
    static let defaultPageSize = 20
    /// Couchbase SDKs' flags for a JSON document.
    static let jsonFlags: UInt32 = 0x0200_0006
    static let hexPreviewBytes = 64

    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/pools/default/buckets/:name/docs") { r, c in await list(r, api: api, bucket: bucketParameter(c)) }
        router.get("/pools/default/buckets/:name/docs/:id") { r, c in
            await single(r, api: api, bucket: bucketParameter(c), id: docID(c), op: .read)
        }
        router.post("/pools/default/buckets/:name/docs/:id") { r, c in
            await single(r, api: api, bucket: bucketParameter(c), id: docID(c), op: .write)
        }
        router.delete("/pools/default/buckets/:name/docs/:id") { r, c in
            await single(r, api: api, bucket: bucketParameter(c), id: docID(c), op: .delete)
        }
    }

    enum Operation { case read, write, delete }

    static func docID(_ context: AdminRequestContext) -> String? {
        context.parameters.get("id").map(PercentEncoding.decodeOrKeep)
    }

    static let notFound = AdminResponses.json(.notFound, .errorBody("not_found", reason: "missing"))

    // MARK: One document

    static func single(_ request: Request, api: AdminAPI, bucket: String?, id: String?, op: Operation) async
        -> Response
    {
        guard let bucket, let map = api.registry.clusterMap(bucket: bucket),
            let engine = api.registry.bucket(named: bucket)
        else { return AdminResponses.text(.notFound, "Requested resource not found.\r\n") }
        guard let id, !id.isEmpty, id.utf8.count <= Limits.maxKeyLength else {
            return AdminResponses.fieldErrors([("id", "Document id must be 1 to \(Limits.maxKeyLength) bytes")])
        }
        let key = Array(id.utf8)
        let vb = VBucketHash.vbucket(forKey: key, count: map.numVBuckets)
        if !map.isActiveHere(vb) {
            return await relay(request, api: api, map: map, vbucket: vb)
        }
        // Audited where it is served (a relayed request is audited by the node that holds the vBucket).
        let operation =
            switch op {
            case .read: "read"
            case .write: "write"
            case .delete: "delete"
            }
        api.audit(
            .documentAccessed,
            [
                ("bucket_name", .string(bucket)), ("key", .string(AuditEvent.userData(id))),
                ("operation", .string(operation)),
            ])
        switch op {
        case .read: return await read(engine, vb, key, id: id)
        case .delete:
            switch await blocking({ () throws(EngineError) in try engine.delete(vb, key, cas: CAS(0)) }) {
            case .success: return AdminResponses.json(.ok, [:])
            case .failure(let error): return engineError(error)
            }
        case .write:
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            guard let text = form["value"] else {
                return AdminResponses.fieldErrors([("value", "A value is required")])
            }
            let value = Array(text.utf8)
            guard (try? JSON.parse(value)) != nil else {
                return AdminResponses.fieldErrors([("value", "The value is not valid JSON")])
            }
            var errors: [(String, String)] = []
            let flags = UInt32(form["flags"] ?? "") ?? (form["flags"] == nil ? jsonFlags : nil)
            let expiry = UInt32(form["expiry"] ?? "0")
            if flags == nil { errors.append(("flags", "flags must be an unsigned 32-bit integer")) }
            if expiry == nil { errors.append(("expiry", "expiry must be an unsigned 32-bit integer")) }
            guard errors.isEmpty, let flags, let expiry else { return AdminResponses.fieldErrors(errors) }
            let stored = await blocking { () throws(EngineError) in
                try engine.store(
                    .set, vb, key, value: value, flags: flags, expiry: expiry, datatype: .json, cas: CAS(0))
            }
            switch stored {
            case .success(let result): return AdminResponses.json(.ok, ["cas": .string(String(result.cas.rawValue))])
            case .failure(let error): return engineError(error)
            }
        }
    }

    /// A read, fetching an evicted value from disk once before giving up with 503.
    static func read(_ engine: BucketEngine, _ vb: VBucketID, _ key: [UInt8], id: String) async -> Response {
        for attempt in 0..<3 {
            do throws(EngineError) {
                let doc = try engine.get(vb, key)
                return AdminResponses.bytes(.ok, render(id: id, doc))
            } catch .wouldBlock where attempt < 2 {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    engine.fetch(vb, key) { c.resume() }
                }
            } catch {
                return engineError(error)
            }
        }
        return engineError(.temporaryFailure)
    }

    /// `{"meta":{...},"json":<the value>}` for JSON, `{"meta":{...},"base64":"...","hexPreview":"..."}` otherwise.
    static func render(id: String, _ stored: Document) -> [UInt8] {
        // The console shows the body: XATTRs stay out (ADR 0029).
        var doc = stored
        doc.value = stored.body
        let compressed = doc.meta.datatype.contains(.snappy)
        let isJSON = !compressed && (try? JSON.parse(doc.value)) != nil
        let meta: JSON = [
            "id": .string(id), "cas": .string(String(doc.meta.cas.rawValue)), "flags": .int(Int64(doc.meta.flags)),
            "expiration": .int(Int64(doc.meta.expiry)), "size": .int(doc.value.count),
            "datatype": .string(isJSON ? "json" : (compressed ? "snappy" : "binary")),
        ]
        var out: [UInt8] = Array(#"{"meta":"#.utf8)
        meta.write(into: &out)
        if isJSON {
            out += Array(#","json":"#.utf8)
            out += doc.value
        } else {
            let preview = doc.value.prefix(hexPreviewBytes).map { b in
                let h = String(b, radix: 16)
                return h.count == 1 ? "0" + h : h
            }.joined(separator: " ")
            out += Array(#","base64":"#.utf8)
            JSON.string(Base64.encode(Array(doc.value))).write(into: &out)
            out += Array(#","hexPreview":"#.utf8)
            JSON.string(preview).write(into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func engineError(_ error: EngineError) -> Response {
        switch error {
        case .keyNotFound: notFound
        case .valueTooLarge: AdminResponses.fieldErrors([("value", "Value is too large")])
        case .invalidArguments: AdminResponses.general(.badRequest, "Invalid document id or value")
        case .keyExists, .locked, .syncWriteInProgress:
            AdminResponses.general(.conflict, "The document changed or is locked; retry")
        case .temporaryFailure, .wouldBlock, .notMyVBucket:
            AdminResponses.general(.serviceUnavailable, "Temporary failure; retry")
        case .ioFailure: AdminResponses.general(.internalServerError, "The bucket's disk failed")
        case .persistenceFailing(let reason):
            AdminResponses.general(.serviceUnavailable, "The bucket cannot persist now; retry: \(reason)")
        case .notStored, .deltaBadValue: AdminResponses.general(.badRequest, "Not stored")
        }
    }

    // MARK: Relay

    /// Sends the request on to the node holding `vbucket`'s active copy and answers with its reply.
    static func relay(_ request: Request, api: AdminAPI, map: ClusterMap, vbucket: VBucketID) async -> Response {
        let owner = map.vbucketMap.activeNode(of: vbucket.index)
        guard request.uri.queryParameters["relayed"] == nil, owner >= 0, owner < map.nodes.count,
            let peers = api.cluster?.peers
        else { return AdminResponses.general(.serviceUnavailable, "vBucket \(vbucket.rawValue) is not active here") }
        var request = request
        // The body goes whole or the request does not go, with the answer the owner would give it (`AdminAPI.form`):
        // forwarded without it, the owner saw another request (a write without its value).
        let body: ByteBuffer
        do { body = try await request.collectBody(upTo: Limits.maxAdminRequestBody) } catch is NIOTooManyBytesError {
            return AdminResponses.general(
                .contentTooLarge, "Request body exceeds \(Limits.maxAdminRequestBody) bytes")
        } catch {
            return AdminResponses.general(.badRequest, "The request body could not be read")
        }
        let node = map.nodes[owner]
        let query = request.uri.query.map { $0 + "&relayed=1" } ?? "relayed=1"
        let creds = api.registry.internalCredentials
        do {
            let reply = try await peers.call(
                PeerEndpoint.admin(node), HTTPMethod(rawValue: request.method.rawValue),
                request.uri.path + "?" + query, body: Array(body.readableBytesView),
                credentials: (creds.username, creds.password), contentType: request.headers[.contentType])
            var headers: HTTPFields = [:]
            if let type = reply.contentType { headers[.contentType] = type }
            return Response(
                status: HTTPResponse.Status(code: Int(reply.status)), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: reply.body)))
        } catch {
            api.logger.warning("document relay failed", metadata: ["node": "\(node.otpNode)", "error": "\(error)"])
            return AdminResponses.general(.badGateway, "The node holding this document did not answer")
        }
    }

    // MARK: Listing

    static func list(_ request: Request, api: AdminAPI, bucket: String?) async -> Response {
        guard let bucket, let map = api.registry.clusterMap(bucket: bucket),
            let engine = api.registry.bucket(named: bucket)
        else { return AdminResponses.text(.notFound, "Requested resource not found.\r\n") }
        let q = request.uri.queryParameters
        let skip = max(0, Int(q["skip"] ?? "") ?? 0)
        guard skip <= Limits.consoleMaxSkip else {
            return AdminResponses.text(
                .badRequest, "skip must be at most \(Limits.consoleMaxSkip); page further with startkey.\r\n")
        }
        let limit = min(Limits.consoleMaxPageSize, max(1, Int(q["limit"] ?? "") ?? defaultPageSize))
        let start = q["startkey"].map { Array(Self.unquote(String($0)).utf8) }
        let end = q["endkey"].map { Array(Self.unquote(String($0)).utf8) }
        let wanted = skip + limit
        let local: KeyPage
        switch await blocking({ () throws(EngineError) in
            try localKeys(engine, map: map, start: start, end: end, first: wanted)
        }) {
        case .success(let page): local = page
        case .failure(let error): return engineError(error)
        }
        var keys = local.keys
        var total = local.total
        var truncated = local.truncated
        if q["local"] == nil, let peers = api.cluster?.peers {
            let creds = api.registry.internalCredentials
            var peerQuery = "local=1&skip=0&limit=\(min(wanted, Limits.consoleMaxPageSize))"
            if let s = q["startkey"] { peerQuery += "&startkey=" + PercentEncoding.encode(String(s)) }
            if let e = q["endkey"] { peerQuery += "&endkey=" + PercentEncoding.encode(String(e)) }
            let others = Set(map.vbucketMap.chains.compactMap { $0.first }).subtracting([map.thisNode])
            for index in others where index >= 0 && index < map.nodes.count {
                let node = map.nodes[index]
                guard
                    let reply = try? await peers.call(
                        PeerEndpoint.admin(node), .GET,
                        "/pools/default/buckets/\(PercentEncoding.encode(bucket))/docs?\(peerQuery)",
                        credentials: (creds.username, creds.password)),
                    reply.ok,
                    let object = try? JSON.parse(reply.body),
                    let rows = object["rows"]?.arrayValue
                else {
                    truncated = true
                    continue
                }
                keys += rows.compactMap { $0["id"]?.stringValue.map { Array($0.utf8) } }
                // A peer's count is not trusted to be sane: saturate rather than trap on the sum.
                let count = max(0, object["total_rows"]?.intValue ?? rows.count)
                let (sum, overflow) = total.addingReportingOverflow(count)
                total = overflow ? Int.max : sum
                truncated = truncated || (object["truncated"]?.boolValue ?? false)
            }
            keys.sort { $0.lexicographicallyPrecedes($1) }
        }
        let page = keys.dropFirst(skip).prefix(limit)
        let rows: [JSON] = page.map { k in
            let id = String(decoding: k, as: UTF8.self)
            return ["id": .string(id), "key": .string(id)]
        }
        return AdminResponses.json(
            .ok, ["total_rows": .int(total), "truncated": .bool(truncated), "rows": .array(rows)])
    }

    /// This node's live keys in active vBuckets within `[start, end]`, sorted; the first `first` of them, the
    /// count in range, and whether the scan stopped at `Limits.consoleMaxListedKeys`. Blocking.
    static func localKeys(
        _ engine: BucketEngine, map: ClusterMap, start: [UInt8]?, end: [UInt8]?, first: Int
    ) throws(EngineError) -> KeyPage {
        var keys: [[UInt8]] = []
        var scanned = 0
        var truncated = false
        scan: for i in 0..<map.numVBuckets {
            let vb = VBucketID(UInt16(i))
            guard map.isActiveHere(vb) else { continue }
            var since = SeqNo.zero
            while true {
                let batch = try engine.changes(vb, since: since, limit: Limits.changeFeedMaxBatch)
                for record in batch.records where !record.meta.deleted {
                    scanned += 1
                    if scanned > Limits.consoleMaxListedKeys {
                        truncated = true
                        break scan
                    }
                    if let start, record.key.lexicographicallyPrecedes(start) { continue }
                    if let end, end.lexicographicallyPrecedes(record.key) { continue }
                    keys.append(record.key)
                }
                if batch.complete { break }
                since = batch.lastSeqno
            }
        }
        keys.sort { $0.lexicographicallyPrecedes($1) }
        let total = keys.count
        if keys.count > first { keys.removeLast(keys.count - first) }
        return KeyPage(keys: keys, total: total, truncated: truncated)
    }

    /// One node's share of a listing.
    struct KeyPage: Sendable {
        var keys: [[UInt8]]
        var total: Int
        var truncated: Bool
    }

    /// Runs engine work off the event loop; its typed error comes back as a `Result`.
    static func blocking<T: Sendable>(
        _ body: @escaping @Sendable () throws(EngineError) -> T
    ) async -> Result<T, EngineError> {
        await BlockingPool.run { () -> Result<T, EngineError> in
            do throws(EngineError) { return .success(try body()) } catch { return .failure(error) }
        }
    }

    /// Couchbase clients send `startkey="abc"` (JSON-quoted); a bare value is taken as is.
    static func unquote(_ s: String) -> String {
        guard s.count >= 2, s.hasPrefix("\""), s.hasSuffix("\""),
            let v = (try? JSON.parse(s))?.stringValue
        else { return s }
        return v
    }

}
