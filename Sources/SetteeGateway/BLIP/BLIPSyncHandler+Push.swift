import SetteeBLIP
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeReplication

/// A client's push (replication-protocol.adoc §4 "Push"; Sync Gateway's `handleChanges`, `handleProposeChanges`,
/// `processRev`): `changes` (allow_conflicts databases) or `proposeChanges` (every 3.x client) offer revisions,
/// then each is sent as `rev`, written through the REST `new_edits=false` path (`GatewayDatabase.put`), so the sync
/// function, its `requireUser`/`requireAccess` refusals, channels, grants and the revision tree are the same as a
/// CouchDB replicator's push. A refusal answers that `rev` alone with its HTTP status (403 for the sync function's
/// `forbidden`), which Couchbase Lite reports per document.
extension BLIPSyncHandler {
    /// `changes` from a client: `[[sequence, docID, revID, deleted?], ...]`; answers per entry the ancestors this
    /// database has (an array: send it) or 0 (already here), via `_revs_diff`. A database with `allow_conflicts`
    /// false refuses with 409 "Use 'proposeChanges' instead" unless the request says `ignoreNoConflicts`.
    func changes(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        if !db.options.allowConflicts, !SubChangesRequest.flag(request["ignoreNoConflicts"]) {
            throw .conflict("Use 'proposeChanges' instead")
        }
        let items = try Self.entries(request)
        guard !items.isEmpty else { return BLIPMessage() }
        var asked: [(id: String, rev: RevID)?] = []
        var diffRequest: [String: [RevID]] = [:]
        for item in items {
            guard let a = item.arrayValue, a.count >= 3, let id = a[1].stringValue,
                let rev = a[2].stringValue.flatMap(RevID.init)
            else {
                asked.append(nil)
                continue
            }
            asked.append((id, rev))
            diffRequest[id, default: []].append(rev)
        }
        let diff = await db.revsDiff(diffRequest, user: user)
        var answer: [JSON] = []
        for entry in asked {
            guard let entry, let missing = diff[entry.id]?["missing"]?.arrayValue,
                missing.contains(.string(entry.rev.description))
            else {
                answer.append(.number(0))
                continue
            }
            answer.append(diff[entry.id]?["possible_ancestors"] ?? .array([]))
        }
        var properties: [(name: String, value: String)] = [(name: "maxHistory", value: String(db.options.revsLimit))]
        if db.options.deltaSync.active { properties.append(BLIPDeltaSync.property) }
        return BLIPMessage(properties: properties, body: JSON.array(answer).serialized())
    }

    /// `proposeChanges`: `[[docID, revID, parentRevID?, bodySize?], ...]`; answers a status per entry, trailing
    /// zeros left out (Sync Gateway's `CheckProposedRev`): 0 send it (the document is new, its winner is the
    /// parent, or its winner is a tombstone and no parent is named), 304 the winner is that revision, 409 a
    /// conflict (`{"status":409,"rev":winner}` with `conflictIncludesRev=true`), 500 the document could not be read.
    ///
    /// The documents are read as `_revs_diff` reads them (`GatewayDatabase.revsDiff`): a few at a time
    /// (`Limits.gatewayBulkDocsConcurrency`), and one the index has not seen not at all (`proposedStatus`).
    func proposeChanges(_ request: BLIPMessage, db: GatewayDatabase) async throws(GatewayError) -> BLIPMessage {
        let items = try Self.entries(request)
        let includeRev = SubChangesRequest.flag(request["conflictIncludesRev"])
        var proposals: [(id: String, rev: String, parent: String)?] = []
        proposals.reserveCapacity(items.count)
        for item in items {
            guard let a = item.arrayValue, a.count >= 2, let id = a[0].stringValue, let rev = a[1].stringValue else {
                proposals.append(nil)
                continue
            }
            proposals.append((id, rev, a.count > 2 ? (a[2].stringValue ?? "") : ""))
        }
        let asked = proposals
        let statuses = await BoundedConcurrency.map(asked.count) { i -> (Int, RevID?) in
            guard let p = asked[i] else { return (400, nil) }
            return await self.proposedStatus(id: p.id, rev: p.rev, parent: p.parent, db: db)
        }
        var answer: [JSON] = []
        for found in statuses {
            let (status, current) = found ?? (500, nil)
            if status == 409, includeRev, let current {
                answer.append(.object([("status", .number(409)), ("rev", .string(current.description))]))
            } else {
                answer.append(.number(Double(status)))
            }
        }
        while answer.last == .number(0) { answer.removeLast() }
        // Sync Gateway says it takes deltas on the answer (`deltas`), as Couchbase Lite's pusher expects.
        let properties: [(name: String, value: String)] =
            db.options.deltaSync.active ? [BLIPDeltaSync.property] : []
        return BLIPMessage(properties: properties, body: JSON.array(answer).serialized())
    }

    /// A document the index has not seen is not read (without shared bucket access): nearly always new, it is 0, as
    /// `_revs_diff` answers it missing (ADR 0064). One the change stream has not delivered yet is then sent, and
    /// `put` finds it there: a conflicting `rev` is refused with 409 then (`noConflicts`), not here.
    func proposedStatus(id: String, rev: String, parent: String, db: GatewayDatabase) async -> (Int, RevID?) {
        guard GatewayDatabase.isDocumentID(id) else { return (id.hasPrefix("_sync:") ? 403 : 400, nil) }
        if !db.options.sharedBucketAccess, !db.knowsDocument(id) { return (0, nil) }
        let loaded: LoadedDocument
        do { loaded = try await db.load(id) } catch { return (500, nil) }
        switch loaded {
        case .missing: return (0, nil)
        case .notImported: return (409, nil)
        case .found(let doc):
            let tree = doc.meta.tree
            guard let winner = tree.winner else { return (0, nil) }
            if winner.description == rev { return (304, nil) }
            if winner.description == parent { return (0, nil) }
            if parent.isEmpty && tree.winnerIsDeleted { return (0, nil) }
            return (409, winner)
        }
    }

    /// A `changes`/`proposeChanges` body: a JSON array of at most `Limits.gatewayBLIPMaxProposedChanges` entries.
    static func entries(_ request: BLIPMessage) throws(GatewayError) -> [JSON] {
        guard !request.body.isEmpty else { return [] }
        guard let items = try jsonBody(request).arrayValue else { throw .badRequest("Body must be a JSON array") }
        guard items.count <= Limits.gatewayBLIPMaxProposedChanges else {
            throw .badRequest("Too many changes in one message (max \(Limits.gatewayBLIPMaxProposedChanges))")
        }
        return items
    }

    // MARK: rev

    /// Members of a pushed body that are not the application's (Sync Gateway's `validateBlipBody`): everything the
    /// message's properties say instead, and the gateway's own metadata.
    static let reservedMembers: Set<String> = ["_id", "_rev", "_revisions", "_sync", "_removed", "_purged"]

    /// `rev` from a client: properties `id`, `rev`, `history` (ancestors, newest first), `deleted`, `noconflicts`,
    /// `sequence`; body the document. Written as REST's `new_edits=false` with `_revisions` built from `rev` and the
    /// consecutive part of `history`. With `noconflicts`, a live winner the history does not contain is 409.
    /// Attachments this database lacks are fetched with `getAttachment`; ones it has are proved with
    /// `proveAttachment` before the client's revision may name them.
    func receiveRevision(
        _ request: BLIPMessage, peer: any BLIPPeer, db: GatewayDatabase
    ) async throws(GatewayError) -> BLIPMessage {
        guard let id = request["id"], let revText = request["rev"] else { throw .badRequest("Missing docID or rev") }
        guard let rev = RevID(revText) else { throw .badRequest("Invalid revision ID \(revText)") }
        var body: JSON = request.body.isEmpty ? .object([]) : try Self.jsonBody(request)
        // A tombstone's body is taken whole even when it names a source (Sync Gateway applies deltas to live
        // revisions only).
        if let source = request["deltaSrc"], !SubChangesRequest.flag(request["deleted"]) {
            guard db.options.deltaSync.active else { throw .badRequest("Deltas are disabled for this peer") }
            body = try await applyPushedDelta(body, id: id, source: source, db: db)
            db.deltaStats.deltaPushed()
        }
        guard var members = body.objectValue else { throw .badRequest("Document body must be a JSON object") }
        if let reserved = members.first(where: { Self.reservedMembers.contains($0.0) }) {
            throw .badRequest("top-level property '\(reserved.0)' is a reserved internal property")
        }
        var history = [rev]
        if let text = request["history"], !text.isEmpty {
            for item in text.split(separator: ",") {
                guard let r = RevID(String(item)) else { throw .badRequest("Invalid revision ID in history") }
                history.append(r)
            }
        }
        // `_revisions` is a chain of consecutive generations: a history with a gap keeps its part above the gap.
        var ids: [JSON] = [.string(rev.digest)]
        for (older, newer) in zip(history.dropFirst(), history) {
            guard older.generation == newer.generation - 1 else { break }
            ids.append(.string(older.digest))
        }
        let deleted = SubChangesRequest.flag(request["deleted"]) || body["_deleted"]?.boolValue == true
        let noConflicts = SubChangesRequest.flag(request["noconflicts"])
        var data: [String: [UInt8]] = [:]
        if let index = members.firstIndex(where: { $0.0 == "_attachments" }), let atts = members[index].1.objectValue {
            // Only a revision with attachments reads the document first: its parent's attachments are not fetched
            // again, and a conflict is refused before any is. `put` reads it (or guesses it new) either way, and
            // refuses a conflict under `noconflicts` on that read.
            var existing: StoredDocument? = nil
            if case .found(let doc) = try await db.load(id) { existing = doc }
            if noConflicts, let tree = existing?.meta.tree, let winner = tree.winner, !tree.winnerIsDeleted,
                !history.contains(winner), !tree.contains(rev)
            {
                throw .conflict("Document revision conflict")
            }
            let (resolved, bytes) = try await resolveAttachments(
                atts, docID: id, history: history, existing: existing, peer: peer, db: db,
                collection: request["collection"])
            members[index].1 = .object(resolved)
            data = bytes
        }
        members.removeAll { $0.0 == "_deleted" }
        members.append(("_id", .string(id)))
        members.append(("_rev", .string(rev.description)))
        members.append(("_revisions", .object([("start", .number(Double(rev.generation))), ("ids", .array(ids))])))
        if deleted { members.append(("_deleted", .bool(true))) }
        _ = try await db.put(
            id, body: .object(members), attachmentData: data, newEdits: false, noConflicts: noConflicts, user: user)
        return BLIPMessage()
    }

    /// A pushed `rev` body that is a JSON delta (ADR 0125) applied to the body of its `deltaSrc` as stored (Sync
    /// Gateway's `processRev`): the source is read as this connection's user, so a revision it cannot read is no
    /// source (its `_removed` stub is refused), and with its `_attachments` as stored, which the delta may change.
    /// A source that is unknown, no longer kept, a tombstone, or a delta that does not apply to it is 422 (Sync
    /// Gateway's `StatusUnprocessableEntity`, on which Couchbase Lite sends the revision again whole).
    func applyPushedDelta(
        _ delta: JSON, id: String, source: String, db: GatewayDatabase
    ) async throws(GatewayError) -> JSON {
        guard let rev = RevID(source) else { throw BLIPDeltaSync.invalidSource(source) }
        let stored: JSON
        do { stored = try await db.get(id, rev: rev, user: user).body } catch {
            throw BLIPDeltaSync.sourceUnreadable(docID: id, source: source, reason: error.reason)
        }
        return try BLIPDeltaSync.applyPushed(delta, docID: id, source: source, sourceBody: stored)
    }

    /// A pushed revision's `_attachments` made writable by `put`: an entry the parent revision has under the same
    /// name and digest stays a stub; any other is sent as `follows` with its bytes, fetched from the client
    /// (`getAttachment`, checked against its `length` and `digest`) or, when this database already stores that
    /// digest, taken from the store once the client proved it has them (`proveAttachment`, Sync Gateway's
    /// `downloadOrVerifyAttachments`; a client without the handler falls back to `getAttachment`).
    func resolveAttachments(
        _ atts: [(String, JSON)], docID: String, history: [RevID], existing: StoredDocument?, peer: any BLIPPeer,
        db: GatewayDatabase, collection: String?
    ) async throws(GatewayError) -> ([(String, JSON)], [String: [UInt8]]) {
        guard atts.count <= Limits.gatewayBLIPMaxAttachmentsPerRevision else {
            throw .badRequest("Too many attachments (max \(Limits.gatewayBLIPMaxAttachmentsPerRevision))")
        }
        var parentAtts: [(String, JSON)] = []
        if let tree = existing?.meta.tree {
            for r in history.dropFirst() where tree.contains(r) {
                if let bytes = tree.body(of: r), let b = try? JSON.parse(bytes) {
                    parentAtts = b["_attachments"]?.objectValue ?? []
                }
                break
            }
        }
        var out: [(String, JSON)] = []
        var data: [String: [UInt8]] = [:]
        for (name, meta) in atts {
            guard case .object(var entry) = meta else { throw .badRequest("Invalid attachment \(name)") }
            if meta["data"] != nil {
                out.append((name, meta))
                continue
            }
            guard let digest = meta["digest"]?.stringValue else {
                throw .badRequest("Invalid attachment, does not have digest field")
            }
            if parentAtts.contains(where: { $0.0 == name && $0.1["digest"]?.stringValue == digest }) {
                out.append((name, meta))
                continue
            }
            let bytes = try await attachmentData(
                digest: digest, meta: meta, docID: docID, peer: peer, db: db, collection: collection)
            entry.removeAll { $0.0 == "stub" || $0.0 == "follows" }
            entry.append(("follows", .bool(true)))
            out.append((name, .object(entry)))
            data[name] = bytes
        }
        return (out, data)
    }

    /// The bytes of a pushed attachment: this database's own once the client proved it has them, else the client's.
    func attachmentData(
        digest: String, meta: JSON, docID: String, peer: any BLIPPeer, db: GatewayDatabase,
        collection: String?
    ) async throws(GatewayError) -> [UInt8] {
        if let stored = try? await db.attachmentBlob(digest) {
            switch try await askProof(digest: digest, data: stored, docID: docID, peer: peer, collection: collection) {
            case .proved: return stored
            case .refused: throw .forbidden("Incorrect proof for attachment \(digest)")
            case .unsupported: break
            }
        }
        var properties: [(name: String, value: String)] = [
            (name: "Profile", value: "getAttachment"), (name: "digest", value: digest),
        ]
        if subprotocol >= .cbMobile3 { properties.append((name: "docID", value: docID)) }
        if let collection { properties.append((name: "collection", value: collection)) }
        let answer: BLIPMessage?
        do { answer = try await peer.send(BLIPMessage(properties: properties)) } catch {
            throw .unavailable("Connection closed while fetching attachment \(digest)")
        }
        guard let answer, answer.type != .error else {
            throw .badRequest("error \(answer?["Error-Code"] ?? "?") from getAttachment \(digest)")
        }
        let bytes = answer.body
        if let length = meta["length"]?.intValue, length != bytes.count {
            throw .badRequest(
                "Incorrect data sent for attachment with digest: \(digest) (length mismatch - expected \(length) got \(bytes.count))"
            )
        }
        guard AttachmentInfo.digest(of: bytes) == digest else {
            throw .badRequest("Incorrect data sent for attachment with digest: \(digest) (digest mismatch)")
        }
        return bytes
    }

    enum Proof { case proved, refused, unsupported }

    /// Asks the client to prove it holds the attachment `data` (`proveAttachment` with a fresh 20-byte nonce).
    func askProof(
        digest: String, data: [UInt8], docID: String, peer: any BLIPPeer, collection: String?
    ) async throws(GatewayError) -> Proof {
        var generator = SystemRandomNumberGenerator()
        let nonce = (0..<20).map { _ in UInt8.random(in: 0...255, using: &generator) }
        var properties: [(name: String, value: String)] = [
            (name: "Profile", value: "proveAttachment"), (name: "digest", value: digest),
        ]
        if let collection { properties.append((name: "collection", value: collection)) }
        let request = BLIPMessage(properties: properties, body: nonce)
        let answer: BLIPMessage?
        do { answer = try await peer.send(request) } catch {
            throw .unavailable("Connection closed while proving attachment \(digest)")
        }
        guard let answer else { return .unsupported }
        if answer.type == .error { return answer["Error-Code"] == "404" ? .unsupported : .refused }
        return String(decoding: answer.body, as: UTF8.self) == Self.proof(of: data, nonce: nonce) ? .proved : .refused
    }

    /// The proof of holding `data` for `nonce` (replication-protocol.adoc §proveAttachment): SHA-1 of the nonce's
    /// length as one byte, the nonce, then the data, as `sha1-` + base64 (the form of attachment digests, and what
    /// Couchbase Lite and Sync Gateway compute).
    static func proof(of data: [UInt8], nonce: [UInt8]) -> String {
        AttachmentInfo.digest(of: [UInt8(truncatingIfNeeded: nonce.count)] + nonce + data)
    }
}
