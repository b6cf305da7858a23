import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSync
import Synchronization

extension GatewayDatabase {
    /// `GET /db/doc`: the winner (or `rev`) with `_id`, `_rev`, `_deleted`, `_attachments` and, with
    /// `revs`, `_revisions` (trimmed at the first of `attsSince`). With `attachmentBodies`, attachments
    /// newer than the newest `attsSince` ancestor carry their `data` inline (base64) and their bytes are
    /// also returned by name (for multipart answers); the others stay stubs. A reader who may not see the
    /// winner gets 403; asking for an explicit `rev` instead gets a `_removed` stub. `latest` (CouchDB 2's
    /// `latest=true`, which PouchDB's and CouchDB's replicators send): a `rev` that is no longer a leaf answers with
    /// the leaf that descends from it (the winning one when several do), so a puller that `_changes` told about a
    /// revision since replaced (by a client, or by a KV write whose import took the old body with it) moves on to
    /// the newer one instead of failing its batch.
    public func get(
        _ id: String, rev: RevID? = nil, revs: Bool = false, attsSince: [RevID]? = nil,
        attachmentBodies: Bool = false, user: UserContext?, attachmentBudget: ByteBudget? = nil, latest: Bool = false
    ) async throws(GatewayError) -> (body: JSON, attachments: [String: [UInt8]]) {
        guard isOnline else { throw .unavailable("DB is currently under maintenance") }
        let doc: StoredDocument
        if let rev, let cached = cachedWinner(id, rev: rev) { doc = cached } else { doc = try await loadForRead(id) }
        let rev = latest ? rev.map { Self.latestLeaves(of: $0, in: doc.meta.tree).first ?? $0 } : rev
        return try await read(
            doc, rev: rev, revs: revs, attsSince: attsSince, attachmentBodies: attachmentBodies, user: user,
            attachmentBudget: attachmentBudget)
    }

    /// `rev` of `id` from the revision cache, when it is the winner the index lists and the cache holds its whole
    /// history: what a pull's `_bulk_get` asks for (the revisions `_changes` listed), answered without reading the
    /// bucket, as Sync Gateway's revision cache answers it. The revision is the same (a revision's body and history
    /// never change) and so are its channels (the index's, those of the winner); what the cache cannot say (another
    /// revision, a history longer than it keeps, `GET` of the winner, which imports a newer KV write first) is read
    /// from the bucket. Before, every fetched revision was a bucket read and a parse of its whole `_sync` (history
    /// and kept ancestor bodies): a third of a debug gateway's time in issue 67's soak, whose pulls then fell behind
    /// the SDK's writes.
    func cachedWinner(_ id: String, rev: RevID) -> StoredDocument? {
        // One leaf: the cache holds the winner's branch alone, and a conflicted document is read whole.
        guard Self.isDocumentID(id),
            index.withLock({ $0.docs[id].map { $0.rev == rev && $0.leaves.isEmpty } ?? false }),
            revisionCache.withLock({ $0.entry(id, rev: rev)?.historyComplete ?? false }),
            let doc = lastIndexedVersion(id), doc.meta.tree.winner == rev
        else { return nil }
        return doc
    }

    /// What the attachments one request reads inline may hold together: `options.maxInlineAttachmentBytes`, shared by
    /// a `_bulk_get`'s overlapping reads and an `open_revs`' leaves (each was bounded alone, so one request held up
    /// to its read width, or its leaf count, times the bound).
    public func inlineAttachmentBudget() -> ByteBudget {
        ByteBudget(limit: options.maxInlineAttachmentBytes)
    }

    /// `get` of a document already loaded (`openRevs` reads each leaf of one load).
    private func read(
        _ doc: StoredDocument, rev: RevID?, revs: Bool, attsSince: [RevID]?, attachmentBodies: Bool,
        user: UserContext?, attachmentBudget: ByteBudget?
    ) async throws(GatewayError) -> (body: JSON, attachments: [String: [UInt8]]) {
        let id = doc.id
        let tree = doc.meta.tree
        let reader = readerChannels(user)
        if rev == nil {
            if let reader, !canSee(userChannels: reader, docChannels: doc.meta.channels) {
                throw .forbidden("forbidden")
            }
            if tree.winnerIsDeleted { throw .notFound("deleted") }
        }
        let r = rev ?? tree.winner!
        guard tree.contains(r) else { throw .notFound("missing") }
        if let reader, !canSee(userChannels: reader, docChannels: channels(of: doc, rev: r)) {
            var m: [(String, JSON)] = [("_id", .string(id)), ("_rev", .string(r.description))]
            m.append(tree.isDeleted(r) ? ("_deleted", .bool(true)) : ("_removed", .bool(true)))
            if revs { m.append(("_revisions", tree.revisionsJSON(of: r))) }
            return (.object(m), [:])
        }
        return try await render(
            doc, rev: r, revs: revs, attsSince: attsSince, attachmentBodies: attachmentBodies,
            attachmentBudget: attachmentBudget)
    }

    /// The leaves that descend from `rev` (`rev` itself when it is a leaf or unknown), the winner first when it is
    /// one of them, then live before deleted, newest generation first (CouchDB's `latest=true`).
    static func latestLeaves(of rev: RevID, in tree: RevTree) -> [RevID] {
        guard tree.contains(rev), !tree.isLeaf(rev) else { return [rev] }
        let leaves = tree.leaves.filter { tree.history(of: $0).contains(rev) }
        let winner = tree.winner
        return leaves.sorted { a, b in
            if (a == winner) != (b == winner) { return a == winner }
            if tree.isDeleted(a) != tree.isDeleted(b) { return !tree.isDeleted(a) }
            return a > b
        }
    }

    /// Channels a revision is in, as far as the document records them: the winner's channels for the
    /// winner and other revisions, none for a revision that removed the document from channels.
    func channels(of doc: StoredDocument, rev: RevID) -> Set<String> {
        if rev == doc.meta.tree.winner { return doc.meta.channels }
        // Unknown (a revision older than the kept bodies): visible only to `*` readers and the admin.
        return doc.meta.revChannels[rev] ?? []
    }

    /// A revision as clients see it. 404 when its body was pruned.
    func render(
        _ doc: StoredDocument, rev: RevID, revs: Bool, attsSince: [RevID]?, attachmentBodies: Bool,
        attachmentBudget: ByteBudget? = nil
    ) async throws(GatewayError) -> (body: JSON, attachments: [String: [UInt8]]) {
        let tree = doc.meta.tree
        guard let bytes = tree.body(of: rev), let body = try? JSON.parse(bytes) else { throw .notFound("missing") }
        collectionStats.read(bytes: bytes.count)
        var m: [(String, JSON)] = [("_id", .string(doc.id)), ("_rev", .string(rev.description))]
        var data: [String: [UInt8]] = [:]
        let known = Set(attsSince ?? [])
        for (k, v) in body.objectValue ?? [] {
            guard k == "_attachments", attachmentBodies, case .object(let atts) = v else {
                m.append((k, v))
                continue
            }
            // Attachments the client has: revpos at or below its newest known ancestor.
            let history = tree.history(of: rev)
            let knownGeneration = history.first { known.contains($0) }?.generation ?? 0
            var out: [(String, JSON)] = []
            // The attachment bytes this answer holds (twice: raw for a multipart answer, base64 in the body), bounded
            // (`DatabaseOptions.maxInlineAttachmentBytes`, a `_bulk_get`'s bound) for the revision or, given a budget,
            // for everything its request reads: before, a reader's `?attachments=true` on a document with many large
            // attachments held all of them, however many. A revision whose attachments alone pass the bound is
            // refused without counting them; one that only passes what is left counts them, so the budget stays
            // exceeded and its request can tell (`_bulk_get` then refuses the whole answer).
            let budget = attachmentBudget ?? inlineAttachmentBudget()
            for (name, meta) in atts {
                guard (meta["revpos"]?.intValue ?? 0) > knownGeneration, let digest = meta["digest"]?.stringValue else {
                    out.append((name, meta))
                    continue
                }
                let announced = max(0, meta["length"]?.intValue ?? 0)
                guard announced <= budget.limit, budget.admit(announced) else { throw attachmentsTooLarge }
                let bytes = try await attachmentBlob(digest)
                if bytes.count >= announced {
                    guard budget.admit(bytes.count - announced) else { throw attachmentsTooLarge }
                } else {
                    budget.release(announced - bytes.count)
                }
                data[name] = bytes
                var e = (meta.objectValue ?? []).filter { $0.0 != "stub" }
                e.append(("data", .string(Base64.encode(bytes))))
                out.append((name, .object(e)))
            }
            m.append((k, .object(out)))
        }
        if tree.isDeleted(rev) { m.append(("_deleted", .bool(true))) }
        if revs { m.append(("_revisions", tree.revisionsJSON(of: rev, knownAncestors: Set(attsSince ?? [])))) }
        return (.object(m), data)
    }

    /// A revision whose attachments, asked for inline, pass `options.maxInlineAttachmentBytes`.
    var attachmentsTooLarge: GatewayError {
        .tooLarge("Attachments would exceed \(options.maxInlineAttachmentBytes) bytes; read them one at a time")
    }

    func attachmentBlob(_ digest: String) async throws(GatewayError) -> [UInt8] {
        let bucket = self.bucket
        guard
            let item = try await bucketCall({ () async throws(GatewayBucketError) in
                try await bucket.get(attachmentPrefix + digest)
            })
        else { throw .notFound("Attachment content missing") }
        return item.value
    }

    /// `GET /db/doc?open_revs=...`: each asked revision (nil: every leaf) or `missing`. `latest`: an asked revision
    /// that is no longer a leaf stands for the leaves that descend from it (`latestLeaves`), each answered once.
    public func openRevs(
        _ id: String, revs: [RevID]?, revs withHistory: Bool, user: UserContext?, attsSince: [RevID]? = nil,
        attachmentBodies: Bool = false, latest: Bool = false
    ) async throws(GatewayError) -> [OpenRev] {
        guard isOnline else { throw .unavailable("DB is currently under maintenance") }
        let doc: StoredDocument
        do { doc = try await loadForRead(id) } catch {
            guard error.status == 404, let revs else { throw error }
            return revs.map { .missing($0) }
        }
        let tree = doc.meta.tree
        var out: [OpenRev] = []
        // Every leaf's inline attachments count against one bound: leaves often share their attachments, and each
        // leaf reads them again.
        let attachmentBudget = inlineAttachmentBudget()
        var asked = revs ?? tree.leaves
        if latest, revs != nil {
            var seen = Set<RevID>()
            asked = asked.flatMap { Self.latestLeaves(of: $0, in: tree) }.filter { seen.insert($0).inserted }
        }
        for r in asked {
            guard tree.contains(r), tree.body(of: r) != nil else {
                out.append(.missing(r))
                continue
            }
            do {
                // The document as loaded above: one read for every leaf (it was read again for each).
                let (body, _) = try await read(
                    doc, rev: r, revs: withHistory, attsSince: attsSince, attachmentBodies: attachmentBodies,
                    user: user, attachmentBudget: attachmentBudget)
                out.append(.ok(body))
            } catch {
                if error.status == 404 { out.append(.missing(r)) } else { throw error }
            }
        }
        return out
    }

    /// `_revs_diff`: per document the revisions this database lacks and, as `possible_ancestors`, known
    /// revisions a sender may use as `atts_since`. Documents lacking nothing are left out.
    public func revsDiff(_ request: [String: [RevID]], user: UserContext?) async -> JSON {
        let reader = readerChannels(user)
        let ids = request.keys.sorted()
        // Loads overlap (a few at a time, as `_bulk_docs` writes do): on a cluster bucket each is a network
        // round trip, and one after another they were most of a push batch's time. Documents the index has not
        // seen are not read (without shared bucket access): nearly always new, they miss every revision; one the
        // change stream has not delivered yet is then pushed, and `put` finds its revisions there (ADR 0064).
        var loaded = [StoredDocument?](repeating: nil, count: ids.count)
        let reads =
            options.sharedBucketAccess
            ? Array(ids.indices) : index.withLock { idx in ids.indices.filter { idx.docs[ids[$0]] != nil } }
        // Only the revision trees and channels are kept: up to `maxBulkReadDocs` documents are held until the answer
        // is made, and their bodies (the winner's, the kept revisions') are not needed for it.
        let found = await BoundedConcurrency.map(reads.count) { n -> StoredDocument? in
            guard let l = try? await self.load(ids[reads[n]]), case .found(var doc) = l else { return nil }
            doc.body = []
            doc.meta.tree.dropBodies()
            return doc
        }
        for (n, doc) in found.enumerated() { loaded[reads[n]] = doc ?? nil }
        var out: [(String, JSON)] = []
        for (index, id) in ids.enumerated() {
            let revs = request[id] ?? []
            let missing: [RevID]
            var ancestors: [RevID] = []
            if let doc = loaded[index] {
                if let reader, !canSee(userChannels: reader, docChannels: doc.meta.channels) {
                    // A document the reader may not see answers as if it did not exist.
                    missing = revs
                } else {
                    (missing, ancestors) = doc.meta.tree.revsDiff(revs)
                    if let reader {
                        ancestors = ancestors.filter {
                            canSee(userChannels: reader, docChannels: channels(of: doc, rev: $0))
                        }
                    }
                }
            } else {
                missing = revs
            }
            guard !missing.isEmpty else { continue }
            var m: [(String, JSON)] = [("missing", .array(missing.map { .string($0.description) }))]
            if !ancestors.isEmpty {
                m.append(("possible_ancestors", .array(ancestors.map { .string($0.description) })))
            }
            out.append((id, .object(m)))
        }
        return .object(out)
    }

    /// `GET /db/doc/att`: an attachment of the winner (or `rev`) and its bytes.
    public func attachment(
        docID: String, name: String, rev: RevID?, user: UserContext?
    ) async throws(GatewayError) -> (info: AttachmentInfo, data: [UInt8]) {
        let (body, _) = try await get(docID, rev: rev, user: user)
        if body["_removed"]?.boolValue == true { throw .forbidden("forbidden") }
        guard let meta = body["_attachments"]?[name] else { throw .notFound("missing attachment") }
        let info: AttachmentInfo
        do { info = try AttachmentInfo(json: meta) } catch {
            throw GatewayError(status: error.status, error: error.error, reason: error.reason)
        }
        return (info, try await attachmentBlob(info.digest))
    }

    /// The admin's view of each revision's body (as `GET /db/doc?rev=`), read a few at a time (`BoundedConcurrency`),
    /// in `wanted`'s order; nil where it cannot be read. The `include_docs` bodies of `_changes` and `_all_docs`.
    func bodies(_ wanted: ArraySlice<BodyRead>, revs: Bool) async -> [JSON?] {
        guard !wanted.isEmpty else { return [] }
        let reads = Array(wanted)
        let read = await BoundedConcurrency.map(reads.count) { n in
            try? await self.get(reads[n].id, rev: reads[n].rev, revs: revs, user: nil).body
        }
        return read.map { $0 ?? nil }
    }

    /// Rows `0..<count` of an answer, a chunk at a time, each chunk with the bodies its rows need (`reads`, sorted by
    /// row): `body(rows, their reads, the bodies read)`. With bodies to read a chunk is `Limits.gatewayIncludeDocsChunk`
    /// rows, so an `include_docs` answer written chunk by chunk holds no more bodies than that at once, however many
    /// rows it has; without, all rows are one chunk.
    func inChunks(
        rows count: Int, reads: [BodyRead], revs: Bool,
        _ body: (Range<Int>, ArraySlice<BodyRead>, [JSON?]) async throws -> Void
    ) async rethrows {
        let width = reads.isEmpty ? max(count, 1) : Limits.gatewayIncludeDocsChunk
        var start = 0
        var next = 0
        while start < count {
            let end = count - start > width ? start + width : count
            var stop = next
            while stop < reads.count, reads[stop].row < end { stop += 1 }
            let chunk = reads[next..<stop]
            try await body(start..<end, chunk, await bodies(chunk, revs: revs))
            start = end
            next = stop
        }
    }

    /// `_all_docs` with every `include_docs` body read (one answer held whole; the HTTP handler writes
    /// `AllDocsPager`'s pages a chunk at a time instead).
    public func allDocs(_ q: AllDocsQuery, user: UserContext?) async throws(GatewayError) -> JSON {
        var pager = try allDocsPager(q, user: user)
        var rows: [[(String, JSON)]] = []
        repeat {
            var page = await pager.next(self)
            let docs = await bodies(page.bodyReads[...], revs: q.revs)
            for (read, doc) in zip(page.bodyReads, docs) { AllDocsPage.place(doc, in: &page.rows[read.row]) }
            rows += page.rows
        } while !pager.done
        return .object([
            ("rows", .array(rows.map { .object($0) })), ("total_rows", .number(Double(rows.count))),
            ("update_seq", .number(Double(pager.updateSeq))),
        ])
    }

    /// `_all_docs`: live documents in id order (or `keys` in their order), their rows built a page at a time
    /// (`AllDocsPager`). Without `keys` the rows follow the index's id order (`IDOrder`, ADR 0093): nothing is gathered
    /// or sorted per request but the ids added since the order's last merge.
    func allDocsPager(_ q: AllDocsQuery, user: UserContext?) throws(GatewayError) -> AllDocsPager {
        guard isOnline else { throw .unavailable("DB is currently under maintenance") }
        let reader = readerChannels(user)
        if let keys = q.keys {
            let seq = index.withLock { $0.sequences.stable }
            return AllDocsPager(
                query: q, ids: .keys(keys[...]), updateSeq: seq, reader: reader, admin: user?.name == nil)
        }
        // The index's id order (two array references under the lock), walked outside it; `startkey`/`endkey` cut it
        // by binary search before any row is built. Enough new ids since the last merge: this reader merges them,
        // outside the lock, and puts the merge in place for the readers after it.
        var (order, seq) = index.withLock { ($0.ids.snapshot, $0.sequences.stable) }
        if order.wantsMerge {
            let merged = order.merge()
            let replaced: IDOrder.Replaced?
            (order, replaced) = index.withLock { idx in
                let r = idx.ids.install(merged, for: order)
                return (idx.ids.snapshot, r)
            }
            // What the merge replaced is let go of here, outside the lock.
            withExtendedLifetime(replaced) {}
        }
        let walk = IDOrder.Walk(order, from: q.startKey, through: q.endKey)
        return AllDocsPager(query: q, ids: .order(walk), updateSeq: seq, reader: reader, admin: user?.name == nil)
    }
}

/// Builds one `_all_docs` answer's rows a page at a time: each page looks up `Limits.gatewayChangesPageRows` ids in
/// the index (one short lock) and renders their rows, so an answer holds its ids (a reference each) and one page of
/// rows, not every row at once; between pages the other tasks of the thread go first (ADR 0092). `skip` and `limit`
/// carry across pages. A document deleted or gone since the ids were gathered is skipped (with `keys`, a deleted one
/// shows as deleted, as any deleted key does, and a gone one is a `not_found` row, as a missing key is).
struct AllDocsPager: Sendable {
    /// Where the ids come from: the request's `keys`, in their order, or the index's id order.
    enum IDs: Sendable {
        case keys(ArraySlice<String>)
        case order(IDOrder.Walk)

        var isEmpty: Bool {
            switch self {
            case .keys(let k): return k.isEmpty
            case .order(let w): return w.isEmpty
            }
        }

        /// Up to `count` next ids.
        mutating func take(_ count: Int) -> [String] {
            switch self {
            case .keys(let k):
                let window = Array(k.prefix(count))
                self = .keys(k.dropFirst(window.count))
                return window
            case .order(var w):
                let window = w.next(count)
                self = .order(w)
                return window
            }
        }
    }

    let query: AllDocsQuery
    private var ids: IDs
    let updateSeq: UInt64
    private let reader: Set<String>?
    private let admin: Bool
    private var skipped = 0
    private var emitted = 0
    private var started = false
    /// No page follows.
    private(set) var done = false

    init(query: AllDocsQuery, ids: IDs, updateSeq: UInt64, reader: Set<String>?, admin: Bool) {
        self.query = query
        self.ids = ids
        self.updateSeq = updateSeq
        self.reader = reader
        self.admin = admin
        done = ids.isEmpty
    }

    /// The next page's rows (empty once `done`), its `include_docs` reads relative to the page.
    mutating func next(_ db: GatewayDatabase) async -> AllDocsPage {
        guard !done else { return AllDocsPage(rows: [], bodyReads: [], updateSeq: updateSeq) }
        if started { await Task.yield() }
        started = true
        let q = query
        let window = ids.take(Limits.gatewayChangesPageRows)
        let entries = db.index.withLock { idx in window.map { idx.docs[$0] } }
        var rows: [[(String, JSON)]] = []
        var reads: [BodyRead] = []
        let limit = q.limit > 0 ? q.limit : Int.max
        for (id, entry) in zip(window, entries) {
            if emitted >= limit { break }
            guard let d = entry, q.keys != nil || !d.deleted else {
                if q.keys != nil {
                    rows.append([("key", .string(id)), ("error", .string("not_found"))])
                    emitted += 1
                }
                continue
            }
            if let reader, !canSee(userChannels: reader, docChannels: d.channels) {
                if q.keys != nil {
                    rows.append([("key", .string(id)), ("status", .number(403)), ("error", .string("forbidden"))])
                    emitted += 1
                }
                continue
            }
            if skipped < q.skip {
                skipped += 1
                continue
            }
            var value: [(String, JSON)] = [("rev", .string(d.rev.description))]
            if d.deleted { value.append(("deleted", .bool(true))) }
            if q.channels { value.append(("channels", .array(d.channels.sorted().map { .string($0) }))) }
            if q.access && admin {
                var access: [(String, JSON)] = []
                for (p, chans) in d.access.sorted(by: { $0.key < $1.key }) {
                    access.append((p, .array(chans.keys.sorted().map { .string($0) })))
                }
                value.append(("access", .object(access)))
            }
            var row: [(String, JSON)] = [("key", .string(id)), ("id", .string(id)), ("value", .object(value))]
            if q.includeDocs && !d.deleted { reads.append(BodyRead(row: rows.count, id: id, rev: d.rev)) }
            if q.updateSeq { row.append(("update_seq", .number(Double(d.seq)))) }
            rows.append(row)
            emitted += 1
        }
        done = ids.isEmpty || emitted >= limit
        return AllDocsPage(rows: rows, bodyReads: reads, updateSeq: updateSeq)
    }
}

/// A row of an `include_docs` answer that still needs its document's body (`GatewayDatabase.inChunks`).
struct BodyRead: Sendable {
    var row: Int
    var id: String
    var rev: RevID
}

/// An `_all_docs` answer before its `include_docs` bodies are read.
struct AllDocsPage: Sendable {
    var rows: [[(String, JSON)]]
    /// Sorted by row.
    var bodyReads: [BodyRead]
    var updateSeq: UInt64

    /// A row's `doc` goes after its `value`, before `update_seq`.
    static func place(_ doc: JSON?, in row: inout [(String, JSON)]) {
        guard let doc else { return }
        row.insert(("doc", doc), at: row.last?.0 == "update_seq" ? row.count - 1 : row.count)
    }
}
