import HTTPTypes
import SetteeCore
import SetteeDocument
import SetteeJSON

/// `_all_docs`, `_bulk_docs`, `_bulk_get`, `_revs_diff`.
enum BulkHandlers {
    /// `GET|POST /db/_all_docs` with `include_docs`, `channels`, `access` (admin), `revs`, `update_seq`,
    /// `startkey`/`endkey`, `limit`, `skip`, `keys` (GET JSON array or POST `{"keys": [...]}`).
    static func allDocs(_ r: GatewayRequest) async throws -> GatewayReply {
        var q = AllDocsQuery()
        q.includeDocs = try r.bool("include_docs")
        q.channels = try r.bool("channels")
        q.access = try r.bool("access") && r.admin
        q.revs = try r.bool("revs")
        q.updateSeq = try r.bool("update_seq")
        q.limit = try r.int("limit") ?? 0
        q.skip = try r.int("skip") ?? 0
        q.startKey = try keyParameter(r, "startkey", "start_key")
        q.endKey = try keyParameter(r, "endkey", "end_key")
        if let keys = try r.jsonQuery("keys") { q.keys = try stringList(keys, name: "keys") }
        if r.method == "POST" {
            guard let keys = try r.bodyJSON()["keys"] else { throw GatewayError.badRequest("Bad/missing keys") }
            q.keys = try stringList(keys, name: "keys")
        }
        if let keys = q.keys {
            // What one request may cost: each key once, and a bounded number of documents read.
            var seen = Set<String>()
            let distinct = keys.filter { seen.insert($0).inserted }
            if q.includeDocs && distinct.count > GatewayHTTPLimits.maxBulkReadDocs {
                throw GatewayError.status(
                    413, "Too many keys with include_docs (max \(GatewayHTTPLimits.maxBulkReadDocs))")
            }
            q.keys = distinct
        }
        let db = r.database
        var pager = try db.allDocsPager(q, user: r.user)
        let first = await pager.next(db)
        let revs = q.revs
        guard first.bodyReads.isEmpty, pager.done else {
            return .streamed(r, headers: [.contentType: GatewayReply.jsonType]) { [pager] write in
                var rest = pager
                try await writeAllDocs(first: first, rest: &rest, db: db, revs: revs, write)
            }
        }
        var body: [UInt8] = []
        var rest = pager
        await writeAllDocs(first: first, rest: &rest, db: db, revs: revs) { body.append(contentsOf: $0) }
        return .bytes(200, body, contentType: GatewayReply.jsonType)
    }

    /// `{"rows":[row,row],"total_rows":N,"update_seq":S}` and a newline: `first`, then the pages `rest` still builds
    /// (`AllDocsPager`), each written a chunk at a time with its `include_docs` bodies (`GatewayDatabase.inChunks`):
    /// such an answer never holds more than a page of rows and a chunk's bodies.
    static func writeAllDocs(
        first: AllDocsPage, rest: inout AllDocsPager, db: GatewayDatabase, revs: Bool,
        _ write: ([UInt8]) async throws -> Void
    ) async rethrows {
        try await write(Array("{\"rows\":[".utf8))
        var page = first
        var written = 0
        while true {
            try await db.inChunks(rows: page.rows.count, reads: page.bodyReads, revs: revs) { range, reads, docs in
                var rows = page.rows[range]
                for (read, doc) in zip(reads, docs) { AllDocsPage.place(doc, in: &rows[read.row]) }
                var out: [UInt8] = []
                for n in range {
                    if written > 0 { out.append(UInt8(ascii: ",")) }
                    JSON.object(rows[n]).write(into: &out)
                    written += 1
                }
                try await write(out)
            }
            if rest.done { break }
            page = await rest.next(db)
        }
        var out = Array("],\"total_rows\":".utf8)
        JSON.number(Double(written)).write(into: &out)
        out.append(contentsOf: ",\"update_seq\":".utf8)
        JSON.number(Double(rest.updateSeq)).write(into: &out)
        out.append(contentsOf: "}\n".utf8)
        try await write(out)
    }

    /// A key given as JSON (`"a"`) or, leniently, as a bare string.
    private static func keyParameter(_ r: GatewayRequest, _ names: String...) throws(GatewayError) -> String? {
        for name in names {
            guard let v = r.query[name] else { continue }
            if let parsed = try? JSON.parse(v, maxValues: GatewayHTTPLimits.maxRequestJSONValues),
                let s = parsed.stringValue
            {
                return s
            }
            return v
        }
        return nil
    }

    private static func stringList(_ json: JSON, name: String) throws(GatewayError) -> [String] {
        guard let items = json.arrayValue, items.count <= GatewayHTTPLimits.maxBulkItems else {
            throw .badRequest("Bad/missing \(name)")
        }
        return try items.map { item throws(GatewayError) in
            guard let s = item.stringValue else { throw .badRequest("Bad/missing \(name)") }
            return s
        }
    }

    /// `POST /db/_bulk_docs {"docs": [...], "new_edits": bool}` → 201 with one row per document.
    /// Each document is bounded by `Limits.maxDocumentDepth` on its own (the `{"docs":[…]}` around it does not count):
    /// one nested deeper, or holding a number past a double's range (`1e400`), fails its own row (400), and the others
    /// are written.
    static func bulkDocs(_ r: GatewayRequest) async throws -> GatewayReply {
        let (body, elements) = try r.bodyDocuments("docs")
        guard body["docs"]?.arrayValue != nil else { throw GatewayError.badRequest("Missing 'docs' array") }
        guard elements.count <= GatewayHTTPLimits.maxBulkItems else { throw GatewayError.status(413, "Too many docs") }
        var newEdits = true
        if let ne = body["new_edits"] {
            guard let b = ne.boolValue else { throw GatewayError.badRequest("new_edits must be a boolean") }
            newEdits = b
        }
        var docs: [JSON] = []
        var refused: [Int: JSON] = [:]
        for (i, element) in elements.enumerated() {
            switch element {
            case .value(let doc):
                guard case .object = doc else { throw GatewayError.badRequest("Document body must be JSON") }
                docs.append(doc)
            case .tooDeep(let partial):
                refused[i] = GatewayError.documentTooDeep.row(id: partial["_id"]?.stringValue)
            case .outOfRange(let partial):
                refused[i] = GatewayError.badRequest("Invalid JSON: number out of range").row(
                    id: partial["_id"]?.stringValue)
            }
        }
        var written = await r.database.bulkDocs(docs, newEdits: newEdits, user: r.user).makeIterator()
        let rows = elements.indices.map { i in refused[i] ?? written.next() ?? .null }
        return .json(201, .array(rows))
    }

    /// `POST /db/_bulk_get?revs=&attachments=&revs_limit=&latest=` `{"docs": [{"id", "rev"?, "atts_since"?}]}`
    /// (`latest`: a revision no longer a leaf answers with the leaf descending from it, `GatewayDatabase.get`):
    /// `multipart/mixed` for clients that accept it (Couchbase Lite), else CouchDB 2's JSON
    /// `{"results": [{"id", "docs": [{"ok": ...} | {"error": ...}]}]}` (PouchDB).
    static func bulkGet(_ r: GatewayRequest) async throws -> GatewayReply {
        let body = try r.bodyJSON()
        guard let docs = body["docs"]?.arrayValue else { throw GatewayError.badRequest("Missing 'docs' array") }
        guard docs.count <= GatewayHTTPLimits.maxBulkItems else { throw GatewayError.status(413, "Too many docs") }
        // What one request may cost: identical items are read once, at most maxBulkReadDocs of them, and
        // the documents gathered stay under maxBulkReadBytes.
        var seen = Set<[UInt8]>()
        let items = docs.filter { seen.insert($0.serialized()).inserted }
        guard items.count <= GatewayHTTPLimits.maxBulkReadDocs else {
            throw GatewayError.status(413, "Too many docs (max \(GatewayHTTPLimits.maxBulkReadDocs))")
        }
        let revs = try r.bool("revs")
        let attachments = try r.bool("attachments")
        let revsLimit = try r.int("revs_limit")
        let latest = try r.bool("latest")
        let db = r.database
        let user = r.user
        // Every item is checked before anything is read: a malformed one answers with its own error row.
        var specs: [(id: String, rev: String?, read: Result<(rev: RevID?, attsSince: [RevID]?), GatewayError>)] = []
        specs.reserveCapacity(items.count)
        for item in items {
            guard let id = item["id"]?.stringValue else {
                specs.append((id: "", rev: nil, read: .failure(.badRequest("Missing id"))))
                continue
            }
            let revText = item["rev"]?.stringValue
            do throws(GatewayError) {
                var rev: RevID? = nil
                if let revText {
                    guard let parsed = RevID(revText) else { throw GatewayError.badRequest("Invalid revision ID") }
                    rev = parsed
                }
                let attsSince = try GatewayRequest.revList(item["atts_since"], name: "atts_since")
                specs.append((id: id, rev: revText, read: .success((rev: rev, attsSince: attsSince))))
            } catch {
                specs.append((id: id, rev: revText, read: .failure(error)))
            }
        }
        // Read a few at a time (on a cluster bucket each read is a round trip: one after another they were most of a
        // pull's time), in the request's order in the answer. The documents gathered stay under maxBulkReadBytes:
        // past it nothing more is started and the request is refused (those running finish first, so at most
        // `gatewayBulkDocsConcurrency` - 1 documents more are held).
        // The reads' inline attachments share one bound as well (each revision's alone was bounded, so 16 reads
        // at once held up to 16 times it).
        var gathered = 0
        let checked = specs
        let attachmentBudget = db.inlineAttachmentBudget()
        let overBudget = { gathered > GatewayHTTPLimits.maxBulkReadBytes || attachmentBudget.isExceeded }
        let reads = await BoundedConcurrency.map(
            specs.count,
            keepGoing: { (result: Result<JSON, GatewayError>) in
                if case .success(let doc) = result { gathered += doc.approximateSerializedSize }
                return !overBudget()
            }
        ) { i -> Result<JSON, GatewayError> in
            let spec = checked[i]
            switch spec.read {
            case .failure(let e): return .failure(e)
            case .success(let read):
                do throws(GatewayError) {
                    let (doc, _) = try await db.get(
                        spec.id, rev: read.rev, revs: revs, attsSince: read.attsSince, attachmentBodies: attachments,
                        user: user, attachmentBudget: attachmentBudget, latest: latest)
                    return .success(DocumentHandlers.trimRevisions(doc, limit: revsLimit))
                } catch {
                    return .failure(error)
                }
            }
        }
        if overBudget() {
            throw GatewayError.status(
                413, "Response would exceed \(GatewayHTTPLimits.maxBulkReadBytes) bytes; ask for fewer docs")
        }
        var results: [(id: String, rev: String?, result: Result<JSON, GatewayError>)] = []
        results.reserveCapacity(specs.count)
        for (spec, read) in zip(specs, reads) {
            guard let read else { continue }
            results.append((id: spec.id, rev: spec.rev, result: read))
        }
        if r.acceptsMultipart && MultipartReplies.available { return MultipartReplies.bulkGet(results) }
        var rows: [JSON] = []
        for item in results {
            let entry: JSON
            switch item.result {
            case .success(let doc): entry = .object([("ok", doc)])
            case .failure(let e):
                entry = .object([("error", e.row(id: item.id, rev: item.rev))])
            }
            rows.append(.object([("id", .string(item.id)), ("docs", .array([entry]))]))
        }
        return .json(200, .object([("results", .array(rows))]))
    }

    /// `POST /db/_revs_diff {"docid": ["rev", ...]}` (unparseable revisions count as missing).
    static func revsDiff(_ r: GatewayRequest) async throws -> GatewayReply {
        guard case .object(let members) = try r.bodyJSON() else {
            throw GatewayError.badRequest("Body must be a JSON object")
        }
        // Each document named is read (a round trip on a cluster bucket), as `_bulk_get`'s are: the same bounds.
        guard members.count <= GatewayHTTPLimits.maxBulkReadDocs else {
            throw GatewayError.status(413, "Too many docs (max \(GatewayHTTPLimits.maxBulkReadDocs))")
        }
        var request: [String: [RevID]] = [:]
        var revisions = 0
        for (id, revs) in members {
            guard let items = revs.arrayValue else {
                throw GatewayError.badRequest("Revisions of \(id) must be an array")
            }
            revisions += items.count
            guard revisions <= GatewayHTTPLimits.maxBulkItems else {
                throw GatewayError.status(413, "Too many revisions (max \(GatewayHTTPLimits.maxBulkItems))")
            }
            request[id] = items.compactMap { $0.stringValue.flatMap(RevID.init) }
        }
        return .json(200, await r.database.revsDiff(request, user: r.user))
    }
}
