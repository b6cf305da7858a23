import Foundation
import Logging
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSync
import Synchronization

/// A document key as read for a request.
enum LoadedDocument {
    case missing
    case found(StoredDocument)
    /// Written by a KV client and not imported (import disabled, or the sync function rejected it).
    case notImported
}

extension GatewayDatabase {
    // MARK: loading

    func load(_ id: String) async throws(GatewayError) -> LoadedDocument {
        // A key no document can have (the gateway's `_sync:` metadata, `_`-prefixed resources) is never read for a
        // request: importing one served user records (password hashes included) and checkpoints as documents.
        guard Self.isDocumentID(id) else { return .missing }
        // With shared bucket access a KV write is imported on demand even without `import_docs`, as Sync Gateway
        // 2.x does (`import_docs` then only says whether this gateway imports from the change stream).
        let imports = options.importDocs || options.sharedBucketAccess
        for _ in 0..<Limits.gatewayWriteRetries {
            guard let parsed = try await readItem(id) else { return .missing }
            switch parsed {
            case .gateway(let doc): return .found(doc)
            case .foreign: return .notImported
            case .refused(let reason):
                if imports { refuseImport(id, reason: reason) }
                return .notImported
            case .absent: return .missing
            case .legacy(let body, let sync, let winnerDeleted, let cas):
                // A 1.x document under shared bucket access: moved to the XATTR layout, then read again.
                guard await migrateLegacyItem(id, body: body, sync: sync, winnerDeleted: winnerDeleted, cas: cas)
                else { return .notImported }
            case .deletedByKV(let meta, let cas):
                guard imports else { return .notImported }
                guard await importDeletion(id: id, known: (meta, cas)) else { return .notImported }
            case .external(let body, let meta, let cas):
                guard imports else { return .notImported }
                do {
                    if let doc = try await importDocument(id: id, body: body, meta: meta, cas: cas) {
                        return .found(doc)
                    }
                } catch {
                    return .notImported
                }
            }
        }
        throw .unavailable("Too many concurrent updates of the document")
    }

    func loadForRead(_ id: String) async throws(GatewayError) -> StoredDocument {
        guard Self.isDocumentID(id) else { throw .badRequest("Invalid doc ID") }
        switch try await load(id) {
        case .found(let d): return d
        case .missing: throw .notFound("missing")
        case .notImported:
            // The item holds a KV write the gateway did not import (refused, or imports off): readers keep getting
            // the revision `_changes` lists, while the revision cache has it, instead of a 404 that fails a pull.
            if let doc = lastIndexedVersion(id) { return doc }
            throw .notFound("Not imported")
        }
    }

    /// The version of `id` the index lists, rebuilt from the revision cache (its body and history, the index's
    /// channels and grants); nil when the cache no longer has it.
    func lastIndexedVersion(_ id: String) -> StoredDocument? {
        guard let cas = index.withLock({ $0.docs[id]?.cas }),
            let meta = lastKnownMeta(id, historyLimit: Limits.gatewayRevisionCacheReadHistory),
            let winner = meta.tree.winner, let bytes = meta.tree.body(of: winner),
            case .object(let members)? = try? JSON.parse(bytes)
        else { return nil }
        return StoredDocument(id: id, body: members, meta: meta, cas: cas)
    }

    /// `isDocumentID` for a write, saying which rule an id breaks: `_sync:` is the gateway's own (403), any other
    /// `_` id names another resource (`_design/`, `_local/`, `_user/`…; Sync Gateway's `realDocID`).
    func checkDocID(_ id: String) throws(GatewayError) {
        guard !Self.isDocumentID(id) else { return }
        if id.hasPrefix("_sync:") { throw .forbidden("Document id is reserved") }
        if id.utf8.count > Limits.maxKeyLength, !id.hasPrefix("_") { throw .badRequest("Document id too long") }
        throw .badRequest("Invalid doc ID")
    }

    /// Whether `id` can name a document: not empty, at most `Limits.maxKeyLength` bytes, not starting with `_` (the
    /// gateway's `_sync:` metadata and other resources; Sync Gateway's `realDocID`). Reads of any other id answer as
    /// for a missing document without reading the bucket.
    static func isDocumentID(_ id: String) -> Bool {
        !id.isEmpty && !id.hasPrefix("_") && id.utf8.count <= Limits.maxKeyLength
    }

    // MARK: the write path

    /// Creates or updates a document (`PUT`, `POST`, `DELETE`, one `_bulk_docs` row). `body` carries `_rev`
    /// (the parent; with `newEdits == false` the new revision, grafted with `_revisions`, which names it when
    /// `_rev` is absent: `DocumentBody.replicatedHistory`), `_deleted`,
    /// `_attachments` (inline `data`, stubs kept from the parent, or `follows` with the bytes in
    /// `attachmentData`). Runs the sync function as `user` (nil: admin). Returns the new revision (with
    /// `newEdits == false` and a known revision, that revision, nothing written). `noConflicts` (a BLIP `rev`'s
    /// `noconflicts`) refuses a replicated revision whose history lacks a live winner with 409, as a database with
    /// `allow_conflicts` false refuses every one, checked on the read the write is made from.
    public func put(
        _ id: String, body: JSON, attachmentData: [String: [UInt8]] = [:], newEdits: Bool = true,
        noConflicts: Bool = false, user: UserContext?
    ) async throws(GatewayError) -> RevID {
        guard isOnline else { throw .unavailable("DB is currently under maintenance") }
        try checkDocID(id)
        guard body.nestingDepth <= Limits.maxDocumentDepth else { throw .documentTooDeep }
        let parsed: DocumentBody
        do { parsed = try DocumentBody(body) } catch {
            throw GatewayError(status: error.status, error: error.error, reason: error.reason)
        }
        let expiry = try Self.expiry(parsed.expiry)
        // The sync function sees the writer's current roles and channels, not a session's snapshot.
        let runAs: UserContext? = user.flatMap { u in u.name.map { userContext($0) ?? u } }
        // A document the index has not seen is first tried as new, without reading it (`guessesNew`): the insert
        // fails `.exists` when the item is there after all, and the write goes round the loop with a real read.
        var guessed = guessesNew(id, parsed: parsed, newEdits: newEdits)
        for _ in 0..<Limits.gatewayWriteRetries {
            let old: StoredDocument?
            switch try await (guessed ? LoadedDocument.missing : load(id)) {
            case .missing: old = nil
            case .found(let d): old = d
            case .notImported: throw .conflict("Not imported")
            }
            var tree = old?.meta.tree ?? RevTree()
            let newRev: RevID
            let parent: RevID?
            var stored: [(String, JSON)] = parsed.properties.objectValue ?? []
            // The new revision's body as stored in the tree: its members and their serialization, handed to `commit`
            // so the write neither parses them back nor serializes them again.
            var storedBytes: [UInt8] = []
            let blobs: [(String, [UInt8])]
            if newEdits {
                var p = parsed.rev
                if p == nil, let w = tree.winner {
                    guard tree.winnerIsDeleted else { throw .conflict("Document exists") }
                    p = w
                }
                if let p {
                    guard tree.contains(p) else {
                        if old == nil { throw .notFound("No previous revision to replace") }
                        throw .conflict("Document revision conflict")
                    }
                    guard tree.isLeaf(p) else { throw .conflict("Document revision conflict") }
                }
                parent = p
                guard let generation = RevID.nextGeneration(after: p) else {
                    throw .badRequest("Revision generation limit reached")
                }
                let (atts, b) = try await prepareAttachments(
                    parsed.attachments, tree: tree, parent: p, generation: generation,
                    follows: attachmentData, newEdits: true)
                blobs = b
                if let atts { stored.append(("_attachments", atts)) }
                // One pass writes the stored form and digests the canonical form (issue 69 item 6).
                guard
                    let (next, bytes) = RevID.nextWithSerialized(
                        parent: p, deleted: parsed.deleted, body: .object(stored))
                else {
                    throw .badRequest("Revision generation limit reached")
                }
                newRev = next
                storedBytes = bytes
                do {
                    try tree.add(newRev, parent: p, deleted: parsed.deleted, body: bytes)
                } catch {
                    throw .conflict("Document revision conflict")
                }
            } else {
                // `_revisions` alone names the revision too (CouchDB, Sync Gateway); `_rev` alone is a history of one.
                let history: [RevID]
                do { history = try parsed.replicatedHistory() } catch {
                    throw GatewayError(status: error.status, error: error.error, reason: error.reason)
                }
                guard let rev = history.first else { throw .badRequest("Bad _revisions: empty history") }
                if tree.contains(rev) { return rev }
                parent = history.dropFirst().first { tree.contains($0) }
                if !options.allowConflicts || noConflicts, let w = tree.winner, !tree.winnerIsDeleted, parent != w {
                    throw .conflict("Document revision conflict")
                }
                let (atts, b) = try await prepareAttachments(
                    parsed.attachments, tree: tree, parent: parent, generation: rev.generation,
                    follows: attachmentData, newEdits: false)
                blobs = b
                if let atts { stored.append(("_attachments", atts)) }
                let added: Int
                storedBytes = JSON.object(stored).serialized()
                do {
                    added = try tree.addHistory(history, deleted: parsed.deleted, body: storedBytes)
                } catch {
                    throw .badRequest("Bad _revisions: \(error)")
                }
                if added == 0 { return rev }
                newRev = rev
            }
            let doc = revisionJSON(id: id, rev: newRev, deleted: parsed.deleted, members: stored)
            let oldDoc = ancestorJSON(id: id, tree: tree, from: parent)
            let result: SyncResult
            do { result = try await sync.run(doc: doc, oldDoc: oldDoc, user: runAs) } catch {
                // A guess ran the sync function with a null oldDoc; its refusal counts only once the item was read.
                guard guessed else { throw error }
                guessed = false
                continue
            }
            if try await commit(
                id: id, old: old, tree: tree, newRev: newRev, result: result, blobs: blobs, expiry: expiry,
                newBody: (stored, storedBytes)) != nil
            {
                collectionStats.wrote(bytes: storedBytes.count)
                return newRev
            }
            guessed = false
        }
        throw .unavailable("Too many concurrent updates of \(id)")
    }

    /// Whether `put` may try `id` as a new document without reading it: the index has not seen it (this gateway
    /// indexes each of its writes before acknowledging it, others' arrive through the change stream, so an
    /// unknown id is nearly always new; one the stream has not delivered yet fails the insert), and with the
    /// item absent nothing before the sync function could fail: no `_rev` unless pushed with `new_edits=false`
    /// (then `_rev` or `_revisions` names the revision), no attachments (their stubs take the parent's
    /// metadata). Not with shared bucket access, where a KV tombstone keeps `_sync` and the write depends on it.
    func guessesNew(_ id: String, parsed: DocumentBody, newEdits: Bool) -> Bool {
        let namesRevision = parsed.rev != nil || (!newEdits && parsed.revisions != nil)
        guard !options.sharedBucketAccess, newEdits != namesRevision else { return false }
        if let atts = parsed.attachments, !atts.isNull { return false }
        return !knowsDocument(id)
    }

    /// Whether the index holds the document (live or a tombstone).
    func knowsDocument(_ id: String) -> Bool { index.withLock { $0.docs[id] != nil } }

    /// `_exp` as a bucket expiry: seconds (up to 30 days relative, else absolute Unix time, as Couchbase
    /// reads them), a numeric string, or an ISO-8601 date. Nil when absent or zero.
    static func expiry(_ json: JSON?) throws(GatewayError) -> UInt32? {
        guard let json, !json.isNull else { return nil }
        var seconds: Double?
        switch json {
        case .integer, .number: seconds = json.numberValue
        case .string(let s):
            if let d = Double(s) {
                seconds = d
            } else {
                let f = ISO8601DateFormatter()
                f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                let plain = ISO8601DateFormatter()
                if let date = f.date(from: s) ?? plain.date(from: s) { seconds = date.timeIntervalSince1970.rounded() }
            }
        default: break
        }
        guard let seconds, seconds >= 0, seconds <= Double(UInt32.max), seconds.rounded() == seconds else {
            throw .badRequest("Invalid expiry: \(json.text)")
        }
        return seconds == 0 ? nil : UInt32(seconds)
    }

    /// `DELETE /db/doc?rev=`: a tombstone revision on `rev`.
    public func delete(_ id: String, rev: RevID?, user: UserContext?) async throws(GatewayError) -> RevID {
        guard let rev else { throw .conflict("Document update conflict") }
        return try await put(
            id, body: .object([("_rev", .string(rev.description)), ("_deleted", .bool(true))]), user: user)
    }

    /// `_bulk_docs`: one row per document, `{"id","rev","ok":true}` or an error row. Ids starting with
    /// `_local/` are stored as local documents.
    public func bulkDocs(_ docs: [JSON], newEdits: Bool, user: UserContext?) async -> [JSON] {
        // Ids first (generated ones too), so rows keep the request's order whatever finishes first.
        var ids: [String?] = []
        ids.reserveCapacity(docs.count)
        for doc in docs {
            guard case .object = doc else {
                ids.append(nil)
                continue
            }
            ids.append(doc["_id"]?.stringValue ?? (newEdits ? Self.newDocID() : nil))
        }
        // Documents of distinct ids are written concurrently (a few at a time: the sync function's threads
        // and the bucket overlap); the rows naming one id (a replicator sends each conflicting leaf of a document as a
        // row of its own) are written in the request's order, one chain per id. Before, one repeated id made the whole
        // batch run one row at a time.
        var chains: [[Int]] = []
        var chainOf: [String: Int] = [:]
        for (i, id) in ids.enumerated() {
            if let id, let c = chainOf[id] {
                chains[c].append(i)
            } else {
                if let id { chainOf[id] = chains.count }
                chains.append([i])
            }
        }
        let named = ids
        let links = chains
        let written = await BoundedConcurrency.map(links.count) { c in
            var rows: [(Int, JSON)] = []
            for i in links[c] {
                rows.append((i, await self.bulkRow(docs[i], id: named[i], newEdits: newEdits, user: user)))
            }
            return rows
        }
        var rows = [JSON](repeating: .null, count: docs.count)
        for chain in written {
            for (i, row) in chain ?? [] { rows[i] = row }
        }
        return rows
    }

    private func bulkRow(_ doc: JSON, id: String?, newEdits: Bool, user: UserContext?) async -> JSON {
        guard case .object = doc else { return GatewayError.badRequest("Document body must be JSON").row(id: nil) }
        guard let id else { return GatewayError.badRequest("Missing _id").row(id: nil) }
        do {
            let rev: String
            if id.hasPrefix("_local/") {
                rev = try await putLocal(id, doc)
            } else {
                var body = doc
                if doc["_id"] == nil { body.set("_id", .string(id)) }
                rev = try await put(id, body: body, newEdits: newEdits, user: user).description
            }
            return .object([("id", .string(id)), ("rev", .string(rev)), ("ok", .bool(true))])
        } catch {
            return error.row(id: id)
        }
    }

    /// A new document id: 32 random hex digits.
    public static func newDocID() -> String { RandomID.hex128() }

    /// The body the sync function sees for a revision: `_id`, `_rev`, the members, `_deleted`.
    func revisionJSON(id: String, rev: RevID, deleted: Bool, members: [(String, JSON)]) -> JSON {
        var m: [(String, JSON)] = [("_id", .string(id)), ("_rev", .string(rev.description))]
        m += members
        if deleted { m.append(("_deleted", .bool(true))) }
        return .object(m)
    }

    /// The blob keys (`_sync:att:<digest>`) a revision refers to: those of `blobs` (digest, bytes) being stored with
    /// it and the `digest` of each `_attachments` entry of its `body` (stubs included).
    static func attachmentKeys(blobs: [(String, [UInt8])], body: [(String, JSON)]) -> [String] {
        var keys = blobs.map { attachmentPrefix + $0.0 }
        for (name, value) in body where name == "_attachments" {
            for (_, meta) in value.objectValue ?? [] {
                if let d = meta["digest"]?.stringValue { keys.append(attachmentPrefix + d) }
            }
        }
        return keys
    }

    /// `oldDoc`: the nearest ancestor from `rev` up whose body is still kept (a tombstone on re-creation).
    func ancestorJSON(id: String, tree: RevTree, from rev: RevID?) -> JSON? {
        guard let rev else { return nil }
        for r in tree.history(of: rev) {
            guard let bytes = tree.body(of: r), let body = try? JSON.parse(bytes) else { continue }
            return revisionJSON(id: id, rev: r, deleted: tree.isDeleted(r), members: body.objectValue ?? [])
        }
        return nil
    }

    /// Applies a sync result and writes the new version with CAS (insert for a new key); indexes it.
    /// Nil when another writer got there first (the caller re-reads and retries). `importing`: an import of an
    /// application's write, which keeps the item's body bytes (shared bucket access), expiry, flags and user XATTRs
    /// (`writeItem`). `newBody`: `newRev`'s stored members and the bytes the tree holds for them, when the caller has
    /// both (a write: `put`); used as the winner's body when `newRev` wins, instead of parsing the tree's bytes and
    /// serializing them again for the item.
    func commit(
        id: String, old: StoredDocument?, tree: RevTree, newRev: RevID, result: SyncResult,
        blobs: [(String, [UInt8])], expiry docExpiry: UInt32? = nil, importing: Bool = false,
        newBody: (members: [(String, JSON)], bytes: [UInt8])? = nil
    ) async throws(GatewayError) -> StoredDocument? {
        var tree = tree
        var meta = old?.meta ?? SyncMeta()
        guard let winner = tree.winner else { throw .internalError("revision tree without a winner") }
        var winnerResult: SyncResult?
        if winner == newRev {
            winnerResult = result
        } else if winner != old?.meta.tree.winner {
            // Another branch became the winner: its channels and grants now count.
            let members = tree.body(of: winner).flatMap { try? JSON.parse($0) }?.objectValue ?? []
            let doc = revisionJSON(id: id, rev: winner, deleted: tree.winnerIsDeleted, members: members)
            winnerResult = (try? await sync.run(doc: doc, oldDoc: nil, user: nil)) ?? SyncResult()
        }
        let bucket = self.bucket
        // Named to a running (or starting) attachment compaction before any blob is stored, so its sweep keeps them.
        let blobKeys = Self.attachmentKeys(
            blobs: blobs,
            body: newBody?.members ?? tree.body(of: newRev).flatMap { try? JSON.parse($0) }?.objectValue ?? [])
        if !blobKeys.isEmpty { attachmentSweep.withLock { $0.begin(blobKeys) } }
        defer { if !blobKeys.isEmpty { attachmentSweep.withLock { $0.end(blobKeys) } } }
        for (digest, data) in blobs {
            do { _ = try await bucket.insert(attachmentPrefix + digest, value: data, expiry: 0) } catch .exists {
            } catch { throw GatewayError.bucket(error) }
        }
        let seq = try await allocateSequence()
        meta.sequence = seq
        meta.recentSequences.append(seq)
        if meta.recentSequences.count > Limits.gatewayRecentSequences {
            meta.recentSequences.removeFirst(meta.recentSequences.count - Limits.gatewayRecentSequences)
        }
        meta.revChannels[newRev] = result.channels
        if let r = winnerResult {
            meta.revChannels[winner] = r.channels
            let now = options.clock.nowSeconds()
            for ch in meta.channels where !r.channels.contains(ch) {
                meta.removals[ch] = ChannelRemoval(
                    seq: seq, rev: winner, deleted: tree.winnerIsDeleted, removedAt: now)
            }
            for ch in r.channels { meta.removals[ch] = nil }
            meta.channels = r.channels
            meta.access = Self.grants(r.access.filter { !$0.value.isEmpty }, old: meta.access, seq: seq)
            meta.roleAccess = Self.grants(r.roles.filter { !$0.value.isEmpty }, old: meta.roleAccess, seq: seq)
            meta.expiry = r.expiry ?? docExpiry
        }
        do { try await pruneChannelHistory(&meta.removals) } catch {
            await releaseSequence(seq)
            throw error
        }
        if tree.winnerIsDeleted {
            // Kept from the deletion that made the winner a tombstone (a conflict added under it changes nothing).
            let wasDeleted = old?.meta.tree.winnerIsDeleted == true
            meta.tombstonedAt =
                wasDeleted ? (meta.tombstonedAt ?? options.clock.nowSeconds()) : options.clock.nowSeconds()
        } else {
            meta.tombstonedAt = nil
        }
        _ = tree.prune(revsLimit: options.revsLimit)
        tree.dropAncestorBodies(
            keep: Limits.gatewayKeptAncestorBodies, maxBytes: Limits.gatewayKeptAncestorBodyBytes)
        // The parent this write replaced is stamped now; bodies past `old_rev_expiry_seconds` go (ADR 0156).
        let expired = oldBodyRule.apply(
            tree: &tree, times: &meta.oldBodyTimes, now: options.clock.nowSeconds(), stampUntimed: true)
        if expired > 0 { _ = oldBodiesExpired.add(expired, ordering: .relaxed) }
        meta.tree = tree
        // The new revision's body in the tree is the bytes `put` serialized: written into `_sync` as they are.
        if newBody != nil { meta.verbatim.revs.insert(newRev) }
        meta.revChannels = meta.revChannels.filter { tree.body(of: $0.key) != nil }
        // A winner whose body is kept but does not read back is never stored as an empty body (that dropped every
        // application field of an imported document nested past the old parse bound).
        var body: [(String, JSON)] = []
        var serializedBody: [UInt8]?
        if winner == newRev, let newBody, tree.body(of: winner) != nil {
            body = newBody.members
            serializedBody = newBody.bytes
        } else if let bytes = tree.body(of: winner) {
            guard let members = (try? JSON.parse(bytes))?.objectValue else {
                throw .internalError("the winning revision's body does not parse")
            }
            body = members
        }
        var doc = StoredDocument(id: id, body: body, meta: meta, cas: old?.cas ?? .zero)
        doc.serializedBody = serializedBody
        do {
            doc.cas = try await writeItem(&doc, old: old, expiry: meta.expiry ?? 0, importing: importing)
        } catch .exists {
            await releaseSequence(seq)
            return nil
        } catch .notFound {
            await releaseSequence(seq)
            return nil
        } catch {
            await releaseSequence(seq)
            throw GatewayError.bucket(error)
        }
        indexOwnWrite(doc)
        return doc
    }

    /// Grants of the new winner, keeping the sequence of grants this document already made.
    static func grants(
        _ new: [String: Set<String>], old: [String: [String: UInt64]], seq: UInt64
    ) -> [String: [String: UInt64]] {
        var out: [String: [String: UInt64]] = [:]
        for (principal, items) in new {
            var m: [String: UInt64] = [:]
            for item in items where item != "*" { m[item] = old[principal]?[item] ?? seq }
            if !m.isEmpty { out[principal] = m }
        }
        return out
    }

    /// Turns a request's `_attachments` into stored stubs plus the blobs to store. Stubs take the parent's
    /// metadata; new data (inline base64 or `follows`) gets a SHA-1 digest and `revpos` = this generation.
    func prepareAttachments(
        _ attachments: JSON?, tree: RevTree, parent: RevID?, generation: Int, follows: [String: [UInt8]],
        newEdits: Bool
    ) async throws(GatewayError) -> (JSON?, [(String, [UInt8])]) {
        guard let attachments, !attachments.isNull else { return (nil, []) }
        guard case .object(let entries) = attachments else { throw .badRequest("Invalid _attachments") }
        if entries.isEmpty { return (nil, []) }
        var parentAtts: [(String, JSON)] = []
        if let parent {
            for r in tree.history(of: parent) {
                if let bytes = tree.body(of: r), let b = try? JSON.parse(bytes) {
                    parentAtts = b["_attachments"]?.objectValue ?? []
                    break
                }
            }
        }
        func parentMeta(_ name: String) -> JSON? { parentAtts.first { $0.0 == name }?.1 }
        /// An attachment with `digest` in any revision of this document whose body is kept: what a stub may name
        /// besides the parent's (a replicator's stub for an attachment of an older revision it knows we have).
        func ownMeta(digest: String) -> JSON? {
            for r in tree.revisions {
                guard let bytes = tree.body(of: r), let b = try? JSON.parse(bytes) else { continue }
                for (_, m) in b["_attachments"]?.objectValue ?? [] where m["digest"]?.stringValue == digest {
                    return m
                }
            }
            return nil
        }
        var out: [(String, JSON)] = []
        var blobs: [(String, [UInt8])] = []
        for (name, e) in entries {
            guard case .object = e else { throw .badRequest("Invalid attachment \(name)") }
            if e["stub"]?.boolValue == true {
                if let revpos = e["revpos"]?.intValue, revpos < 1 { throw .badRequest("Invalid revpos") }
                if let p = parentMeta(name) {
                    out.append((name, p))
                    continue
                }
                guard let digest = e["digest"]?.stringValue else {
                    throw .badRequest("Missing digest in stub attachment")
                }
                // A stub stands for data this document already holds. One naming any other digest would make the
                // blob stored under it readable through this document, whatever channels its own documents are
                // in (CouchDB answers such a stub 412 missing_stub).
                guard let own = ownMeta(digest: digest) else {
                    throw GatewayError(
                        status: 412, error: "missing_stub",
                        reason: "Attachment \(name) is a stub of data this document does not have")
                }
                out.append((name, own))
                continue
            }
            let data: [UInt8]
            if let b64 = e["data"]?.stringValue {
                guard let d = Base64.decode(b64, .strict) else { throw .badRequest("Invalid base64 data of \(name)") }
                data = d
            } else if e["follows"]?.boolValue == true {
                guard let d = follows[name] else { throw .badRequest("Missing data of attachment \(name)") }
                data = d
            } else {
                throw .badRequest("Missing data of attachment")
            }
            let digest = AttachmentInfo.digest(of: data)
            var revpos = newEdits ? generation : (e["revpos"]?.intValue ?? generation)
            if let p = parentMeta(name), p["digest"]?.stringValue == digest, let pr = p["revpos"]?.intValue {
                revpos = pr
            }
            var m: [(String, JSON)] = [
                ("content_type", e["content_type"] ?? .string("application/octet-stream")),
                ("digest", .string(digest)),
                ("length", .number(Double(data.count))),
                ("revpos", .number(Double(revpos))),
                ("stub", .bool(true)),
            ]
            if let enc = e["encoding"] {
                m.append(("encoding", enc))
                m.append(("encoded_length", .number(Double(data.count))))
                if let l = e["length"] { m[2] = ("length", l) }
            }
            blobs.append((digest, data))
            out.append((name, .object(m)))
        }
        return (.object(out), blobs)
    }

    // MARK: import

    /// The compiled `import_filter` of `options` (nil when none is configured). A source that is not a JavaScript
    /// function is a 400 naming `import_filter`, as a sync function that does not compile is.
    static func makeImportFilter(_ options: DatabaseOptions) throws(GatewayError) -> JavaScriptPredicate? {
        guard let source = options.importFilterSource, !source.allSatisfy(\.isWhitespace) else { return nil }
        do { return try JavaScriptPredicate(source: source, threadName: "settee.import-filter") } catch {
            throw .badRequest("import_filter: \(error)")
        }
    }

    /// The answer to an import the `import_filter` refused: 404, as Sync Gateway answers a read of a document it
    /// did not import. The item stays in the bucket exactly as the application wrote it.
    static let filteredOut = GatewayError.notFound("Not imported: the import filter did not accept the document")

    /// Whether the `import_filter` accepts `doc` (true without a filter). Counted in `import_filtered_count` when not.
    /// A filter replaced (`reconfigure`) between being read and being called gave no answer: the one now in force
    /// is asked, so an import racing a `PUT /db/_config` is never refused by a filter that did not refuse it.
    func importFilterAccepts(_ doc: JSON, id: String) async -> Bool {
        let body = doc.serialized()
        var answer: Bool?
        var asked: JavaScriptPredicate?
        while answer == nil {
            guard let filter = importFilter.withLock({ $0 }) else { return true }
            // The same predicate shut down again: the database is closing; nothing is imported any more.
            if filter === asked { return false }
            asked = filter
            answer = await filter.answer(body)
        }
        if answer == true { return true }
        importStats.filtered()
        logger.debug("not imported: the import filter did not accept it", metadata: ["doc": "\(id)"])
        return false
    }

    /// Turns a body a KV client wrote into a new revision (child of the current winner, if any), run
    /// through the sync function as the admin with `oldDoc` null. Nil when the key changed meanwhile.
    /// A body without `_sync` (an SDK upsert replaces the whole value) continues the history the index
    /// last saw for the key, so the import does not start a second root that forks the document.
    func importDocument(
        id: String, body: [(String, JSON)], meta: SyncMeta?, cas: CAS
    ) async throws(GatewayError) -> StoredDocument? {
        // Sync Gateway's `import_filter` decides first: a document it leaves out is not the gateway's business, its
        // members reserved or not.
        guard await importFilterAccepts(.object(body), id: id) else { throw Self.filteredOut }
        // A body holding CouchDB's or the gateway's reserved members is not the application's document as a client
        // could write it: imported as it is, it was served with two `_id`s (or another document's `_rev`) and forked
        // or stalled replicas; stripped, the application's data was silently altered. Refused instead, as Sync
        // Gateway refuses it (`validateImportBody`), counted and logged; the item stays as the application wrote it.
        if let reserved = ImportRules.reservedMember(in: body, gatewayStubs: !options.sharedBucketAccess && meta != nil)
        {
            importStats.refused()
            logger.warning(
                "not imported: the body has a reserved top-level property",
                metadata: ["doc": "\(id)", "property": "\(reserved)"])
            throw .notFound("Not imported: top-level property '\(reserved)' is a reserved internal property")
        }
        let meta = meta ?? lastKnownMeta(id)
        var tree = meta?.tree ?? RevTree()
        var members = body
        // Shared bucket access keeps attachments in `_sync`, out of the application's sight: an SDK update of the
        // body keeps them.
        let hasAttachments = members.contains { $0.0 == "_attachments" }
        if options.sharedBucketAccess, let atts = meta?.attachments, !hasAttachments {
            members.append(("_attachments", atts))
        }
        let parent = tree.winner
        // The replaced winner's body went with the item the KV client overwrote; the revision cache may still have
        // it. Kept as the new revision's parent body, a puller that `_changes` told about the parent can fetch it.
        if let parent, tree.body(of: parent) == nil,
            let cached = revisionCache.withLock({ $0.entry(id, rev: parent) })
        {
            tree.setBody(cached.body, of: parent)
        }
        guard let rev = RevID.next(parent: parent, deleted: false, body: .object(members)) else {
            throw .badRequest("Revision generation limit reached")
        }
        do { try tree.add(rev, parent: parent, deleted: false, body: JSON.object(members).serialized()) } catch {
            throw .internalError("import could not extend the revision tree: \(error)")
        }
        let result = try await sync.run(
            doc: revisionJSON(id: id, rev: rev, deleted: false, members: members), oldDoc: nil, user: nil)
        let old = StoredDocument(id: id, body: [], meta: meta ?? SyncMeta(), cas: cas)
        let doc = try await commit(
            id: id, old: old, tree: tree, newRev: rev, result: result, blobs: [], importing: true)
        if doc != nil {
            importStats.imported()
            logger.debug("imported", metadata: ["doc": "\(id)", "rev": "\(rev)"])
        }
        return doc
    }

    /// A KV client's body the gateway cannot hold as a document (`StoredDocument.Parsed.refused`: too deep, or not
    /// JSON it can read): not imported, counted (`import_error_count`) and logged with `reason`; the item stays
    /// exactly as the application wrote it.
    func refuseImport(_ id: String, reason: String) {
        importStats.refused()
        logger.warning("not imported: \(reason)", metadata: ["doc": "\(id)"])
    }

    /// A KV client deleted (or the bucket expired) a gateway document: its history went with the value,
    /// so the index's last view of it becomes the parent of a tombstone revision, written back like a
    /// gateway delete so clients replicate the deletion. Returns false when there is nothing to continue
    /// (unknown key, already a tombstone, sync function refused, or the key was re-created meanwhile).
    /// With shared bucket access the tombstone kept `_sync` (`known`: its metadata and CAS), so the whole
    /// history is there and the tombstone revision is written onto the KV tombstone itself.
    func importDeletion(id: String, known: (meta: SyncMeta, cas: CAS)? = nil) async -> Bool {
        guard let meta = known?.meta ?? lastKnownMeta(id), !meta.tree.winnerIsDeleted, let parent = meta.tree.winner
        else {
            return false
        }
        // The filter sees a deletion as Sync Gateway shows it one: `{"_deleted": true}` (its documentation asks
        // filters to accept those).
        guard await importFilterAccepts(.object([("_deleted", .bool(true))]), id: id) else { return false }
        let empty: [(String, JSON)] = []
        var tree = meta.tree
        guard let rev = RevID.next(parent: parent, deleted: true, body: .object(empty)),
            (try? tree.add(rev, parent: parent, deleted: true, body: JSON.object(empty).serialized())) != nil
        else { return false }
        do {
            let result = try await sync.run(
                doc: revisionJSON(id: id, rev: rev, deleted: true, members: empty), oldDoc: nil, user: nil)
            let old = StoredDocument(id: id, body: [], meta: meta, cas: known?.cas ?? .zero, itemDeleted: known != nil)
            guard try await commit(id: id, old: old, tree: tree, newRev: rev, result: result, blobs: []) != nil
            else { return false }
        } catch {
            logger.warning("import of a deletion failed", metadata: ["doc": "\(id)", "error": "\(error)"])
            return false
        }
        logger.debug("imported a deletion", metadata: ["doc": "\(id)", "rev": "\(rev)"])
        return true
    }

    /// The index's last view of a document as metadata: its winner with the history and body the revision cache
    /// kept of it (without, the winner alone as a root: other branches, and ancestors past the cache, lived in the
    /// overwritten value), its channels, removals and grants.
    /// `historyLimit`: how much of the cached history to take (an import continues from at most
    /// `Limits.gatewayRevisionCacheHistory` of it, as before the cache kept more for reads).
    func lastKnownMeta(_ id: String, historyLimit: Int = Limits.gatewayRevisionCacheHistory) -> SyncMeta? {
        guard let e = index.withLock({ $0.docs[id] }) else { return nil }
        var meta = SyncMeta()
        let cached = revisionCache.withLock { $0.entry(id, rev: e.rev) }
        let history = Array((cached?.history ?? [e.rev]).prefix(max(1, historyLimit)))
        guard (try? meta.tree.addHistory(history, deleted: e.deleted, body: cached?.body)) != nil else { return nil }
        meta.sequence = e.seq
        meta.recentSequences = [e.seq]
        meta.channels = e.channels
        meta.removals = e.removals
        meta.access = e.access
        meta.roleAccess = e.roleAccess
        return meta
    }
}
