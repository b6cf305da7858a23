import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSQLite

/// Document writes and reads. Every write method runs inside a transaction the caller opened.
extension Store {
    static func newDocumentID() -> String {
        UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
    }

    static func validate(id: String) throws {
        guard !id.isEmpty, id.utf8.count <= Limits.liteMaxDocIDBytes else {
            throw LiteError.badRequest("document id must be 1...\(Limits.liteMaxDocIDBytes) bytes")
        }
        if id.hasPrefix("_") && !id.hasPrefix("_design/") {
            throw LiteError.badRequest("document ids beginning with '_' are reserved: \(id)")
        }
    }

    static func validate(properties: JSON) throws {
        guard case .object(let members) = properties else {
            throw LiteError.badRequest("document properties must be a JSON object")
        }
        if let bad = members.first(where: { $0.0.utf8.first == UInt8(ascii: "_") }) {
            throw LiteError.badRequest("user defined top level properties beginning with '_' are not allowed: \(bad.0)")
        }
        // The document bound every entry point shares (ADR 0121): a deeper local save could never be pushed (the
        // gateway and peers refuse it), so it is refused here, where the application can see why.
        guard properties.nestingDepth <= Limits.maxDocumentDepth else {
            throw LiteError.badRequest("document nests deeper than \(Limits.maxDocumentDepth) levels")
        }
    }

    // MARK: Local edits

    /// A new document's row: its id, first revision, stored body and `type` (see `newDocumentRow`).
    struct NewDocumentRow: Sendable {
        var id: String
        var rev: RevID
        var bytes: [UInt8]
        var type: String?
    }

    /// Saves `doc` as a child of `doc.revision` (or as a new document), or with `deleting` a tombstone.
    /// Returns the saved document and what changed.
    func save(_ doc: Document, deleting: Bool, revsLimit: Int) throws -> (Document, ChangedDocument) {
        let id = doc.id ?? Self.newDocumentID()
        try Self.validate(id: id)
        if !deleting { try Self.validate(properties: doc.properties) }
        if doc.revision == nil, !deleting, let done = try saveIfNew(doc, id: id) { return done }
        var stored = try loadDoc(id) ?? StoredDoc(docID: 0, id: id, seq: .zero, tree: RevTree(), type: nil)
        let wasLive = stored.tree.winner != nil && !stored.tree.winnerIsDeleted
        var parent = doc.revision
        if parent == nil, let winner = stored.tree.winner {
            guard stored.tree.winnerIsDeleted else { throw LiteError.conflict("document \(id) already exists") }
            parent = winner
        }
        if let p = parent {
            guard stored.tree.contains(p) else { throw LiteError.conflict("\(id): unknown revision \(p)") }
            guard stored.tree.isLeaf(p) else { throw LiteError.conflict("\(id): revision \(p) is not current") }
            if deleting && stored.tree.isDeleted(p) { throw LiteError.notFound("\(id) is already deleted") }
        } else if deleting {
            throw LiteError.notFound("no document \(id)")
        }
        guard let generation = RevID.nextGeneration(after: parent) else {
            throw LiteError.badRequest("\(id): revision generation limit reached")
        }
        var saved = doc
        saved.id = id
        saved.isDeleted = deleting
        if deleting {
            saved.properties = .object([])
            saved.attachments = [:]
        } else {
            try storeAttachments(of: &saved, generation: generation)
        }
        let body = saved.storedBody(revpos: generation)
        guard let (rev, bytes) = RevID.nextWithSerialized(parent: parent, deleted: deleting, body: body) else {
            throw LiteError.badRequest("\(id): revision generation limit reached")
        }
        do {
            try stored.tree.add(rev, parent: parent, deleted: deleting, body: nil)
        } catch {
            throw LiteError.conflict("\(id): \(error)")
        }
        try finishWrite(&stored, rev: rev, body: body, bytes: bytes, revsLimit: revsLimit)
        saved.revision = rev
        let change = ChangedDocument(
            id: id, revision: stored.tree.winner, isDeleted: stored.tree.winnerIsDeleted, type: stored.type,
            isNew: !wasLive && !stored.tree.winnerIsDeleted, isPurged: false)
        return (saved, change)
    }

    /// Writes the bytes of `doc`'s new attachments (revpos `generation`); a stub must name stored bytes.
    private func storeAttachments(of doc: inout Document, generation: Int) throws {
        for (name, blob) in doc.attachments {
            if let data = blob.pendingData {
                try putAttachment(digest: blob.digest, data: data)
                doc.attachments[name] = Blob(
                    contentType: blob.contentType, length: blob.length, digest: blob.digest, revpos: generation)
            } else if try !hasAttachment(blob.digest) {
                throw LiteError.badRequest("\(doc.id ?? ""): attachment \(name) has no stored data (\(blob.digest))")
            }
        }
    }

    /// The common case of `save` without a parent revision: the id is not taken, so the document is
    /// generation 1 and one row insert, with no look-up first. Nil when the id exists (a live document
    /// or a tombstone to re-create): nothing was written, and `save` takes the general path.
    private func saveIfNew(_ doc: Document, id: String) throws -> (Document, ChangedDocument)? {
        var saved = doc
        saved.id = id
        saved.isDeleted = false
        try storeAttachments(of: &saved, generation: 1)
        let body = saved.storedBody(revpos: 1)
        guard let row = Self.newRow(id: id, body: body) else {
            throw LiteError.badRequest("\(id): revision generation limit reached")
        }
        return try insertIfNew(saved, row: row)
    }

    /// The row of new document `id` stored as `body`: the digest's canonical form and the stored bytes come from
    /// one pass over the body. Nil as `RevID.nextWithSerialized`.
    private static func newRow(id: String, body: JSON) -> NewDocumentRow? {
        guard let (rev, bytes) = RevID.nextWithSerialized(parent: nil, deleted: false, body: body) else { return nil }
        return NewDocumentRow(id: id, rev: rev, bytes: bytes, type: body["type"]?.stringValue)
    }

    /// `saveIfNew`'s insert, for a row computed beforehand (by `newDocumentRow`, or by `saveIfNew` itself).
    /// Nil when the id exists: nothing was written.
    func insertIfNew(_ doc: Document, row: NewDocumentRow) throws -> (Document, ChangedDocument)? {
        guard try insertDocIfAbsent(id: row.id, rev: row.rev, type: row.type, winnerBody: row.bytes) != nil else {
            return nil
        }
        var saved = doc
        saved.id = row.id
        saved.isDeleted = false
        saved.revision = row.rev
        let change = ChangedDocument(
            id: row.id, revision: row.rev, isDeleted: false, type: row.type, isNew: true, isPurged: false)
        return (saved, change)
    }

    /// What `saveIfNew` computes before it touches the file, without the file: the row of `doc` saved as a
    /// new document. Nil when `doc` needs the store for that (it names a parent revision or has
    /// attachments) or is invalid (`save` then reports why). Pure, so `SavePipeline` runs it on another thread.
    static func newDocumentRow(_ doc: Document) -> NewDocumentRow? {
        guard doc.revision == nil, doc.attachments.isEmpty else { return nil }
        let id = doc.id ?? newDocumentID()
        guard (try? validate(id: id)) != nil, (try? validate(properties: doc.properties)) != nil else { return nil }
        return newRow(id: id, body: doc.properties)
    }

    /// Prunes, updates the type, writes the row (one INSERT or UPDATE, one new sequence) and stores
    /// `body` (serialized: `bytes`) for `rev` (already in `stored.tree`): in the row when `rev` wins, else in `revs`. A winner
    /// that changes moves bodies between the two (invariant 2 of `Schema`), so a new document, or an
    /// edit of the winner, is the row write plus at most the superseded body's `revs` row.
    private func finishWrite(
        _ stored: inout StoredDoc, rev: RevID, body: JSON, bytes: [UInt8], revsLimit: Int
    ) throws {
        let pruned = stored.tree.count > revsLimit && stored.tree.prune(revsLimit: revsLimit) > 0
        guard let winner = stored.tree.winner else { throw LiteError.storage("\(stored.id): empty revision tree") }
        let oldWinner = stored.winner
        let winnerBody: [UInt8]?
        if winner == oldWinner {
            try putRevBody(docID: stored.docID, rev: rev, body: bytes)
            winnerBody = stored.winnerBody
        } else {
            // The old winner's body leaves the row (kept in `revs` while the tree still holds it).
            if let oldWinner, stored.tree.contains(oldWinner), let old = stored.winnerBody {
                try putRevBody(docID: stored.docID, rev: oldWinner, body: old)
            }
            if winner == rev {
                winnerBody = bytes
            } else {
                try putRevBody(docID: stored.docID, rev: rev, body: bytes)
                winnerBody = try revBody(docID: stored.docID, rev: winner)
                if winnerBody != nil { try deleteRevBody(docID: stored.docID, rev: winner) }
            }
        }
        if winner != oldWinner, !stored.tree.winnerIsDeleted {
            if winner == rev {
                stored.type = body["type"]?.stringValue
            } else if let winnerBody, let json = try? JSON.parse(winnerBody, maxValues: Limits.liteMaxJSONValues) {
                stored.type = json["type"]?.stringValue
            }
        }
        try writeDoc(&stored, winnerBody: winnerBody)
        if pruned { try dropBodies(docID: stored.docID, tree: stored.tree, leavesOnly: false) }
    }

    // MARK: Replicated revisions

    /// Inserts a revision with its history as a replicator delivers it (`new_edits=false`). `body` may
    /// carry `_id`, `_rev` and/or `_revisions` (either names the revision), `_deleted` and `_attachments` (stubs, inline base64 `data`, or
    /// `follows` with the bytes in `attachmentData` by name). Returns nil when the revision was known.
    func insertReplicated(
        body json: JSON, attachmentData: [String: [UInt8]], revsLimit: Int
    ) throws -> ChangedDocument? {
        guard case .object(let members) = json else { throw LiteError.badRequest("revision body is not an object") }
        guard let id = json["_id"]?.stringValue else { throw LiteError.badRequest("revision without _id") }
        var named: RevID?
        if let revText = json["_rev"], !revText.isNull {
            guard let text = revText.stringValue, let rev = RevID(text) else {
                throw LiteError.badRequest("\(id): revision without a valid _rev")
            }
            named = rev
        }
        if id.hasPrefix("_local/") { throw LiteError.badRequest("\(id): local documents do not replicate") }
        try Self.validate(id: id)
        let deleted = json["_deleted"]?.boolValue ?? false
        // The gateway's rule (`DocumentBody.replicatedHistory`): `_revisions` alone names the revision too.
        let history: [RevID]
        do { history = try DocumentBody.replicatedHistory(rev: named, revisions: json["_revisions"]) } catch {
            throw LiteError.badRequest("\(id): \(error.reason)")
        }
        guard let rev = history.first else { throw LiteError.badRequest("\(id): empty _revisions") }
        var stored = try loadDoc(id) ?? StoredDoc(docID: 0, id: id, seq: .zero, tree: RevTree(), type: nil)
        if stored.tree.contains(rev) { return nil }
        let wasLive = stored.tree.winner != nil && !stored.tree.winnerIsDeleted
        // The stored body: user members in order, then normalised attachment stubs.
        var props: [(String, JSON)] = members.filter { !$0.0.hasPrefix("_") }
        if let atts = json["_attachments"]?.objectValue, !atts.isEmpty {
            var stubs: [(String, JSON)] = []
            for (name, entry) in atts.sorted(by: { $0.0 < $1.0 }) {
                stubs.append(
                    (
                        name,
                        try storeReplicatedAttachment(
                            id: id, name: name, entry: entry, rev: rev,
                            attachmentData: attachmentData)
                    ))
            }
            props.append(("_attachments", .object(stubs)))
        }
        let added: Int
        do { added = try stored.tree.addHistory(history, deleted: deleted, body: nil) } catch {
            throw LiteError.badRequest("\(id): \(error)")
        }
        if added == 0 { return nil }
        let body = JSON.object(props)
        try finishWrite(&stored, rev: rev, body: body, bytes: body.serialized(), revsLimit: revsLimit)
        return ChangedDocument(
            id: id, revision: stored.tree.winner, isDeleted: stored.tree.winnerIsDeleted, type: stored.type,
            isNew: !wasLive && !stored.tree.winnerIsDeleted, isPurged: false)
    }

    private func storeReplicatedAttachment(
        id: String, name: String, entry: JSON, rev: RevID, attachmentData: [String: [UInt8]]
    ) throws -> JSON {
        var data: [UInt8]?
        if let b64 = entry["data"]?.stringValue {
            guard let d = Base64.decode(b64, .strict) else {
                throw LiteError.badRequest("\(id): attachment \(name) has invalid base64 data")
            }
            data = d
        } else if entry["follows"]?.boolValue == true {
            guard let d = attachmentData[name] else {
                throw LiteError.badRequest("\(id): attachment \(name) follows but no part carried it")
            }
            data = d
        }
        let contentType = entry["content_type"]?.stringValue ?? "application/octet-stream"
        let revpos = entry["revpos"]?.intValue ?? rev.generation
        if let data {
            let digest = AttachmentInfo.digest(of: data)
            if let claimed = entry["digest"]?.stringValue, claimed.hasPrefix("sha1-"), claimed != digest {
                throw LiteError.badRequest("\(id): attachment \(name) digest mismatch")
            }
            try putAttachment(digest: digest, data: data)
            return Blob(contentType: contentType, length: data.count, digest: digest, revpos: revpos)
                .stubJSON(defaultRevpos: revpos)
        }
        guard let digest = entry["digest"]?.stringValue, try hasAttachment(digest) else {
            throw LiteError.badRequest("\(id): attachment \(name) is a stub for bytes this database lacks")
        }
        return Blob(contentType: contentType, length: entry["length"]?.intValue ?? 0, digest: digest, revpos: revpos)
            .stubJSON(defaultRevpos: revpos)
    }

    // MARK: Reads

    /// The document at `rev` (default: the winner); nil when unknown or its body was compacted away.
    func document(_ id: String, rev: RevID? = nil) throws -> Document? {
        guard let stored = try loadDoc(id), let winner = stored.tree.winner else { return nil }
        let r = rev ?? winner
        guard stored.tree.contains(r), let bytes = try body(of: stored, rev: r) else { return nil }
        let body = try JSON.parse(bytes, maxValues: Limits.liteMaxJSONValues)
        return Document.fromStored(id: id, revision: r, body: body, deleted: stored.tree.isDeleted(r))
    }

    /// A document's winner read from an index scan row (body bytes already joined).
    static func document(id: String, winner: String, deleted: Bool, body: [UInt8]) -> Document? {
        guard let rev = RevID(winner), let json = try? JSON.parse(body, maxValues: Limits.liteMaxJSONValues) else {
            return nil
        }
        return Document.fromStored(id: id, revision: rev, body: json, deleted: deleted)
    }

    // MARK: Purge and compaction

    /// Removes every trace of `id` (revisions, index rows, its expiration); the sequence moves on so indexes notice.
    func purge(_ id: String) throws -> ChangedDocument? {
        guard let stored = try loadDoc(id) else { return nil }
        try run("DELETE FROM \(tables.revs) WHERE doc_id = ?", [.int(stored.docID)])
        try run("DELETE FROM \(tables.docs) WHERE id = ?", [.text(id)])
        try run("DELETE FROM expirations WHERE collection = ? AND id = ?", [.int(tables.id), .text(id)])
        try run("DELETE FROM \(tables.viewRows) WHERE doc = ?", [.text(id)])
        try run(
            "DELETE FROM \(tables.fts) WHERE rowid BETWEEN ? AND ?",
            [.int(stored.docID << 8), .int(stored.docID << 8 | 0xFF)])
        _ = try nextSeq(withoutRow: true)
        return ChangedDocument(
            id: id, revision: nil, isDeleted: true, type: stored.type, isNew: false, isPurged: true)
    }

    /// Prunes every tree to `revsLimit` (`RevTree.prune`, the rule every write applies: a tree written under a larger
    /// limit shrinks too), drops bodies of non-leaf revisions (of every collection) and attachment bytes no kept
    /// revision of any collection names.
    func compact(revsLimit: Int) throws -> CompactionResult {
        var result = CompactionResult()
        let current = tables
        defer { tables = current }
        var named = Set<String>()
        for t in try collectionTables() {
            tables = t
            try compactBodies(&result, naming: &named, revsLimit: revsLimit)
        }
        let digests = try rows("SELECT digest, length FROM attachments") { ($0.text(at: 0), $0.int64(at: 1)) }
        for (d, length) in digests where !named.contains(d) {
            try run("DELETE FROM attachments WHERE digest = ?", [.text(d)])
            result.attachmentsDropped += 1
            result.attachmentBytesDropped += Int(length)
        }
        return result
    }

    /// Drops the current collection's non-leaf bodies and adds the digests its kept bodies name to `named`.
    private func compactBodies(
        _ result: inout CompactionResult, naming named: inout Set<String>, revsLimit: Int
    ) throws {
        // A one-revision document (empty `tree`, ADR 0052) has no body to drop.
        let docs = try rows("SELECT doc_id, tree, winner, deleted FROM \(tables.docs) WHERE length(tree) > 0") {
            ($0.int64(at: 0), $0.blob(at: 1), $0.text(at: 2), $0.int64(at: 3) != 0)
        }
        for (docID, treeBytes, winner, deleted) in docs {
            var tree = try Self.decodeTree(treeBytes, winner: winner, deleted: deleted)
            let pruned = tree.prune(revsLimit: revsLimit)
            if pruned > 0 {
                // The winner and every leaf stay (pruning keeps each leaf), so the row's other columns hold; no new
                // sequence: no revision a replica could want changed.
                try run(
                    "UPDATE \(tables.docs) SET tree = ? WHERE doc_id = ?", [.blob(Self.treeColumn(tree)), .int(docID)])
                result.revisionsPruned += pruned
            }
            result.revisionBodiesDropped += try dropBodies(docID: docID, tree: tree, leavesOnly: true)
        }
        let bodies =
            "SELECT body FROM \(tables.revs) UNION ALL SELECT body FROM \(tables.docs) WHERE body IS NOT NULL"
        try each(bodies) { s in
            let body = s.blob(at: 0)
            // Cheap pre-check: only bodies mentioning attachments are parsed.
            if body.count > 14, Self.contains(body, Self.attachmentsMarker),
                let atts = (try? JSON.parse(body, maxValues: Limits.liteMaxJSONValues))?["_attachments"]?.objectValue
            {
                for (_, info) in atts { if let d = info["digest"]?.stringValue { named.insert(d) } }
            }
            return true
        }
    }

    static let attachmentsMarker = Array("\"_attachments\"".utf8)

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        var i = 0
        while i + needle.count <= haystack.count {
            if haystack[i] == needle[0] && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    // MARK: Changes

    /// Documents changed after `since` up to `through`, oldest first, with their sequences: the change
    /// notifications for another connection's writes (`isNew` is not known there and reported false).
    func changedDocuments(after since: SeqNo, through: SeqNo, limit: Int) throws -> [(SeqNo, ChangedDocument)] {
        try rows(
            "SELECT seq, id, winner, deleted, type FROM \(tables.docs) WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            [.int(Int64(since.rawValue)), .int(Int64(through.rawValue)), .int(Int64(limit))]
        ) { s in
            let doc = ChangedDocument(
                id: s.text(at: 1), revision: RevID(s.text(at: 2)), isDeleted: s.int64(at: 3) != 0,
                type: s.isNull(at: 4) ? nil : s.text(at: 4), isNew: false, isPurged: false)
            return (SeqNo(UInt64(s.int64(at: 0))), doc)
        }
    }

    /// SQLite's `data_version`: changes when another connection commits to the file.
    func dataVersion() throws -> Int64 {
        let s = try statement(.dataVersion)
        defer { s.reset() }
        return try s.step() ? s.int64(at: 0) : 0
    }

    func changes(since: SeqNo, limit: Int) throws -> [ChangeEntry] {
        try rows(
            "SELECT seq, id, tree, winner, deleted FROM \(tables.docs) WHERE seq > ? ORDER BY seq LIMIT ?",
            [.int(Int64(since.rawValue)), .int(Int64(limit))]
        ) { s in
            let tree = try Self.decodeTree(s.blob(at: 2), winner: s.text(at: 3), deleted: s.int64(at: 4) != 0)
            guard let winner = tree.winner else { throw LiteError.storage("document without a winner") }
            let others = tree.leaves.filter { $0 != winner }.sorted(by: >)
            return ChangeEntry(
                sequence: SeqNo(UInt64(s.int64(at: 0))), id: s.text(at: 1), revision: winner,
                isDeleted: tree.winnerIsDeleted, leaves: [winner] + others)
        }
    }

    // MARK: Local documents

    func localDocument(_ id: String) throws -> JSON? {
        guard
            let row = try first(
                "SELECT rev, body FROM local_docs WHERE id = ?", [.text(id)],
                { s in
                    (s.text(at: 0), s.blob(at: 1))
                })
        else { return nil }
        var body = try JSON.parse(row.1, maxValues: Limits.liteMaxJSONValues)
        body.set("_id", .string("_local/" + id))
        body.set("_rev", .string(row.0))
        return body
    }

    /// Stores a local document (never replicated, no history); returns its new `0-N` revision.
    func putLocal(_ id: String, _ body: JSON) throws -> String {
        guard case .object(let members) = body else { throw LiteError.badRequest("local document must be an object") }
        let current = try first("SELECT rev FROM local_docs WHERE id = ?", [.text(id)]) { $0.text(at: 0) }
        let n = current.flatMap { Int($0.split(separator: "-").last ?? "") } ?? 0
        let rev = "0-\(n + 1)"
        let stored = JSON.object(members.filter { $0.0 != "_id" && $0.0 != "_rev" })
        try run(
            "INSERT OR REPLACE INTO local_docs (id, rev, body) VALUES (?, ?, ?)",
            [.text(id), .text(rev), .blob(stored.serialized())])
        return rev
    }

    func deleteLocal(_ id: String) throws -> Bool {
        try run("DELETE FROM local_docs WHERE id = ?", [.text(id)])
        return connection.changes > 0
    }
}

/// What `Database.compact()` removed, and the file before and after it (ADR 0153).
public struct CompactionResult: Sendable, Equatable {
    /// Bodies of non-leaf revisions dropped (`revs` rows; pruned revisions' included).
    public var revisionBodiesDropped = 0
    /// Revisions forgotten by pruning trees to `DatabaseOptions.revsLimit` (trees written under a larger limit).
    public var revisionsPruned = 0
    /// Attachment bodies no kept revision named, dropped, and their bytes.
    public var attachmentsDropped = 0
    public var attachmentBytesDropped = 0
    /// The file's pages (`PRAGMA page_count`) and free pages (`freelist_count`) before and after; the file shrinks
    /// by (`pageCountBefore` − `pageCountAfter`) × `pageSize` bytes.
    public var pageCountBefore = 0
    public var freePagesBefore = 0
    public var pageCountAfter = 0
    public var freePagesAfter = 0
    public var pageSize = 0
    public init() {}
}
