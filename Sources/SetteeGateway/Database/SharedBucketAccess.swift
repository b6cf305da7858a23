import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSubdoc

/// Shared bucket access (`enable_shared_bucket_access`, docs/adr/0037): Sync Gateway 2.x's layout, in which a
/// document's item holds the application's body untouched and the gateway's metadata lives in the system
/// XATTR `_sync`. Pure: the requests the gateway sends and what it makes of what it reads.
///
/// Invariants:
/// 1. The gateway writes `_sync` and the body in one CAS-guarded MULTI_MUTATION, so a concurrent KV write
///    fails the write (`.exists`) and is reread, never overwritten.
/// 2. `_sync.cas` is the CAS of the gateway's last write of the item (filled in by the data node from the
///    `${Mutation.CAS}` macro) and `_sync.body_digest` the digest of the body it wrote: an item whose CAS differs
///    and whose body digest differs was written by someone else (an import).
/// 3. An item whose winning revision is deleted is a tombstone; `_sync` stays on it (a system XATTR).
enum SharedBucketAccess {
    static let syncPath = Array(syncXattrName.utf8)
    static let casPath = Array((syncXattrName + ".cas").utf8)
    static let casMacro = Array("\"${Mutation.CAS}\"".utf8)

    /// Reads `_sync` and the body of a document or of its tombstone in one call.
    static let lookup = SubdocRequest.multiLookup(
        [
            SubdocSpec(operation: .command(.get), flags: .xattrPath, path: syncPath),
            SubdocSpec(operation: .wholeDocumentGet, path: []),
        ], docFlags: .accessDeleted)

    /// How a write changes the document's item.
    enum Transition: Sendable, Equatable {
        /// No item (or a tombstone without `_sync`): create it (ADD).
        case create
        /// No item, and the new winner is deleted: create it as a tombstone holding `_sync` (CREATE_AS_DELETED).
        case createDeleted
        /// A live item stays live.
        case update
        /// A live item becomes a tombstone that keeps `_sync`.
        case delete
        /// A tombstone stays one: only `_sync` changes (ACCESS_DELETED).
        case updateTombstone
        /// A tombstone comes back with a body (ACCESS_DELETED | REVIVE_DOCUMENT).
        case revive
    }

    static func transition(exists: Bool, itemDeleted: Bool, winnerDeleted: Bool) -> Transition {
        guard exists else { return winnerDeleted ? .createDeleted : .create }
        switch (itemDeleted, winnerDeleted) {
        case (false, false): return .update
        case (false, true): return .delete
        case (true, true): return .updateTombstone
        case (true, false): return .revive
        }
    }

    /// The MULTI_MUTATION of `transition`:
    /// `_sync` set whole, its `cas` expanded by the node, then the body or the deletion. CAS-guarded by the
    /// caller except for a creation (ADD).
    static func write(_ transition: Transition, sync: [UInt8], body: [UInt8], expiry: UInt32) -> SubdocRequest {
        var specs = [
            SubdocSpec(operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: syncPath, value: sync),
            SubdocSpec(
                operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP, .expandMacros], path: casPath,
                value: casMacro),
        ]
        var flags: SubdocDocFlags = []
        switch transition {
        case .create:
            specs.append(SubdocSpec(operation: .wholeDocumentSet, path: [], value: body))
            flags = .add
        case .createDeleted:
            flags = [.add, .accessDeleted, .createAsDeleted]
        case .update:
            specs.append(SubdocSpec(operation: .wholeDocumentSet, path: [], value: body))
        case .delete:
            specs.append(SubdocSpec(operation: .wholeDocumentDelete, path: []))
        case .updateTombstone:
            flags = .accessDeleted
        case .revive:
            // REVIVE_DOCUMENT: kv_engine refuses a body on a tombstone without it (a deleted document cannot have
            // a value); the CAS read still guards it, and a document revived meanwhile fails on that CAS first.
            specs.append(SubdocSpec(operation: .wholeDocumentSet, path: [], value: body))
            flags = [.accessDeleted, .reviveDocument]
        }
        let deleting = transition == .delete || transition == .updateTombstone || transition == .createDeleted
        return .multiMutation(specs, docFlags: flags, expiry: deleting || expiry == 0 ? nil : expiry)
    }

    /// Moving a 1.x item (`_sync` in its body) to this layout, CAS-guarded by the caller: `sync` as the XATTR
    /// (without `cas`, so the import rule still compares body digests: a 1.x document an application edited is
    /// imported afterwards), then the body without `_sync`, or a deletion when the winner is deleted (1.x keeps a
    /// live item for a deleted document). No revision is made.
    static func migrate(sync: [UInt8], body: [UInt8], winnerDeleted: Bool) -> SubdocRequest {
        let xattr = SubdocSpec(
            operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: syncPath, value: sync)
        let item =
            winnerDeleted
            ? SubdocSpec(operation: .wholeDocumentDelete, path: [])
            : SubdocSpec(operation: .wholeDocumentSet, path: [], value: body)
        return .multiMutation([xattr, item])
    }

    /// `_purge`: `_sync` removed, and a live item deleted, so nothing of the gateway's is left for an import.
    static func purge(itemDeleted: Bool) -> SubdocRequest {
        let remove = SubdocSpec(operation: .command(.delete), flags: .xattrPath, path: syncPath)
        if itemDeleted { return .multiMutation([remove], docFlags: .accessDeleted) }
        return .multiMutation([remove, SubdocSpec(operation: .wholeDocumentDelete, path: [])])
    }

    /// What an item read with `_sync` is.
    enum Decision: Sendable, Equatable {
        /// Nothing of the gateway's: a tombstone without `_sync`.
        case absent
        /// The gateway's version (or one whose body it wrote, with only metadata changed since: a touch).
        case gateway
        /// A KV client wrote the body: import it as a child of the winner `_sync` holds (if any).
        case importBody
        /// A KV client deleted a live gateway document: import a tombstone child of the winner.
        case importDeletion
    }

    /// Invariant 2. `bodyDigest` is computed only when the CAS alone does not decide.
    static func decide(
        itemDeleted: Bool, hasSync: Bool, winnerDeleted: Bool, syncCAS: CAS?, itemCAS: CAS, storedDigest: UInt64,
        bodyDigest: () -> UInt64
    ) -> Decision {
        guard hasSync else { return itemDeleted ? .absent : .importBody }
        if itemDeleted { return winnerDeleted ? .gateway : .importDeletion }
        if syncCAS == itemCAS { return .gateway }
        return bodyDigest() == storedDigest ? .gateway : .importBody
    }

    /// `${Mutation.CAS}` as the node expands it: `"0x"` and 16 hex digits of the CAS in little-endian byte
    /// order (kv_engine's form, which Sync Gateway decodes the same way). Nil for anything else.
    static func decodeMacroCAS(_ text: String) -> CAS? {
        guard text.hasPrefix("0x"), text.utf8.count == 18, let v = UInt64(text.dropFirst(2), radix: 16) else {
            return nil
        }
        return CAS(v.byteSwapped)
    }
}

extension StoredDocument {
    /// What a shared-bucket-access item holds: `body` (empty for a tombstone), `sync` the `_sync` XATTR's value.
    /// A live item whose `_sync` does not parse is imported as if it had none.
    static func parseShared(id: String, body bodyBytes: [UInt8], sync: [UInt8]?, cas: CAS, deleted: Bool) -> Parsed {
        let meta = sync.flatMap { try? JSON.parse($0, maxDepth: maxStoredDepth) }.flatMap { try? SyncMeta(json: $0) }
            .flatMap {
                $0.tree.winner == nil ? nil : $0
            }
        var body: [(String, JSON)] = []
        if !deleted {
            let json: JSON
            do { json = try JSON.parse(bodyBytes, maxDepth: maxStoredDepth) } catch {
                return refusal(error, of: bodyBytes)
            }
            guard case .object(let members) = json else { return .foreign }
            // The gateway writes no body that deep, so only a KV client's can be: refused, never imported.
            if nestsTooDeep(members) { return .refused(reason: tooDeepReason) }
            body = members
        }
        if meta == nil, !deleted, let old = body.first(where: { $0.0 == syncXattrName })?.1,
            let legacy = legacy(sync: old, body: body, cas: cas)
        {
            return legacy
        }
        let decision = SharedBucketAccess.decide(
            itemDeleted: deleted, hasSync: meta != nil, winnerDeleted: meta?.tree.winnerIsDeleted ?? false,
            syncCAS: meta?.cas, itemCAS: cas, storedDigest: meta?.bodyDigest ?? 0,
            bodyDigest: { fnv1a(JSON.object(body).serialized()) })
        switch decision {
        case .absent:
            return .absent
        case .importBody:
            if let refused = notUTF8(bodyBytes) { return refused }
            return .external(body: body, meta: meta, cas: cas)
        case .importDeletion:
            guard let meta else { return .absent }
            return .deletedByKV(meta: meta, cas: cas)
        case .gateway:
            guard var meta else { return .absent }
            // The winner's attachments live in `_sync`; the document the gateway serves has them in its body.
            if let attachments = meta.attachments { body.append(("_attachments", attachments)) }
            // The winner's body is the item's, not kept in `_sync`: a tombstone's is `{}`, so a replicator that
            // fetches the deleted revision (`_bulk_get`, `open_revs`) gets it rather than 404.
            // The item's body is the winner's as this gateway serialized it when its digest says so (no
            // attachments moved out of it): kept as read, not serialized again (issue 69 item 6).
            if let w = meta.tree.winner {
                let written = !deleted && meta.attachments == nil && fnv1a(bodyBytes) == meta.bodyDigest
                meta.tree.setBody(written ? bodyBytes : JSON.object(body).serialized(), of: w)
                meta.verbatim.revs.insert(w)
            }
            return .gateway(StoredDocument(id: id, body: body, meta: meta, cas: cas, itemDeleted: deleted))
        }
    }

    /// A 1.x item (`_sync` in the body, ADR 0011) read with shared bucket access: the layout move, as Sync
    /// Gateway 2.x migrates such documents on import. The body's digest is recomputed the way this layout
    /// computes it (without `_attachments`, which move to `_sync.attachments`) only when it matched the 1.x
    /// digest, i.e. the gateway wrote it; an application's edit keeps the old digest and is imported once moved.
    /// Nil when the member is no gateway metadata (the body is then an application's like any other).
    static func legacy(sync old: JSON, body: [(String, JSON)], cas: CAS) -> Parsed? {
        guard var meta = try? SyncMeta(json: old), meta.tree.winner != nil else { return nil }
        let rest = body.filter { $0.0 != syncXattrName }
        let ours = fnv1a(JSON.object(rest).serialized()) == meta.bodyDigest
        if let attachments = rest.first(where: { $0.0 == "_attachments" })?.1 { meta.attachments = attachments }
        let app = JSON.object(rest.filter { $0.0 != "_attachments" }).serialized()
        if ours { meta.bodyDigest = fnv1a(app) }
        meta.cas = nil
        return .legacy(body: app, sync: meta.json().serialized(), winnerDeleted: meta.tree.winnerIsDeleted, cas: cas)
    }

    /// The item as shared bucket access stores it: the body without `_attachments` (those go to `_sync`), and
    /// `_sync`'s value, its digest that of the body.
    mutating func sharedValue() -> (body: [UInt8], sync: [UInt8]) {
        let attachments = body.first { $0.0 == "_attachments" }?.1
        meta.attachments = attachments
        // Without attachments the application's body is the whole body, whose bytes a write may already have.
        let bytes =
            attachments == nil
            ? (serializedBody ?? JSON.object(body).serialized())
            : JSON.object(body.filter { $0.0 != "_attachments" }).serialized()
        meta.bodyDigest = fnv1a(bytes)
        return (bytes, meta.storageBytes())
    }
}
