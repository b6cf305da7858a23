import Logging
import SetteeClient
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSubdoc

/// Reading and writing a document's item in the database's layout: Sync Gateway 1.x's (`_sync` in the body,
/// ADR 0011) or, with `enable_shared_bucket_access`, Sync Gateway 2.x's (`_sync` in a system XATTR, the body
/// the application's; ADR 0037, `SharedBucketAccess`).
extension GatewayDatabase {
    /// What the document's item holds; nil when there is no item (1.x) or neither item nor tombstone (shared).
    func readItem(_ id: String) async throws(GatewayError) -> StoredDocument.Parsed? {
        let bucket = self.bucket
        guard options.sharedBucketAccess else {
            guard
                let item = try await bucketCall({ () async throws(GatewayBucketError) in try await bucket.get(id) })
            else { return nil }
            return StoredDocument.parse(id: id, value: item.value, cas: item.cas)
        }
        guard
            let r = try await bucketCall({ () async throws(GatewayBucketError) in
                try await bucket.lookupIn(id, SharedBucketAccess.lookup)
            }), r.results.count == 2
        else { return nil }
        let sync = r.results[0].status == 0 ? r.results[0].value : nil
        let body = r.results[1].status == 0 ? r.results[1].value : []
        return StoredDocument.parseShared(id: id, body: body, sync: sync, cas: r.cas, deleted: r.deleted)
    }

    /// Writes `doc` over `old` (nil or CAS zero: no item yet), CAS-guarded; its new CAS. `.exists` / `.notFound`
    /// when another writer changed the item since `old` was read (the caller rereads).
    ///
    /// `importing`: the write adds the gateway's metadata to an application's item, and keeps what the application set
    /// on it (Sync Gateway keeps them on import): with `expiry` 0 the item's expiry (preserve-TTL), and its flags and
    /// user XATTRs (a sub-document write changes neither). With shared bucket access and a live item staying live
    /// only `_sync` is written, so the body's bytes stay the application's; in the 1.x layout the body with `_sync`
    /// is one whole-document set.
    func writeItem(_ doc: inout StoredDocument, old: StoredDocument?, expiry: UInt32, importing: Bool = false)
        async throws(GatewayBucketError) -> CAS
    {
        let oldCAS = old?.cas ?? .zero
        guard options.sharedBucketAccess else {
            let value = doc.value()
            if importing && !oldCAS.isZero {
                var request = SubdocRequest.multiMutation(
                    [SubdocSpec(operation: .wholeDocumentSet, path: [], value: value)],
                    expiry: expiry == 0 ? nil : expiry)
                request.preserveExpiry = expiry == 0
                return try await bucket.mutateIn(doc.id, request, cas: oldCAS)
            }
            if !oldCAS.isZero { return try await bucket.replace(doc.id, value: value, cas: oldCAS, expiry: expiry) }
            return try await bucket.insert(doc.id, value: value, expiry: expiry)
        }
        let (body, sync) = doc.sharedValue()
        let transition = SharedBucketAccess.transition(
            exists: !oldCAS.isZero, itemDeleted: old?.itemDeleted ?? false, winnerDeleted: doc.meta.tree.winnerIsDeleted
        )
        var request = SharedBucketAccess.write(transition, sync: sync, body: body, expiry: expiry)
        if importing && transition == .update {
            request.specs.removeAll { $0.operation == .wholeDocumentSet }
            request.preserveExpiry = expiry == 0
        }
        let cas = try await bucket.mutateIn(doc.id, request, cas: oldCAS)
        doc.itemDeleted = doc.meta.tree.winnerIsDeleted
        return cas
    }

    /// Moves a 1.x item's `_sync` into the XATTR (`SharedBucketAccess.migrate`, CAS-guarded; no revision). True
    /// when the item changed, here or by another writer meanwhile (the caller reads it again); false when the
    /// bucket refused for another reason.
    func migrateLegacyItem(_ id: String, body: [UInt8], sync: [UInt8], winnerDeleted: Bool, cas: CAS) async -> Bool {
        let request = SharedBucketAccess.migrate(sync: sync, body: body, winnerDeleted: winnerDeleted)
        do {
            _ = try await bucket.mutateIn(id, request, cas: cas)
            logger.debug("moved 1.x metadata into the _sync XATTR", metadata: ["doc": "\(id)"])
            return true
        } catch .exists, .notFound {
            return true
        } catch {
            logger.warning("cannot move 1.x metadata into the XATTR", metadata: ["doc": "\(id)", "error": "\(error)"])
            return false
        }
    }

    /// `_purge` of one document's item: the item deleted and, with shared bucket access, `_sync` removed so the
    /// tombstone carries nothing an import would revive; the CAS of that change. `.notFound` when there is
    /// nothing to purge. `cas` (non-zero: the tombstone compaction) purges only that version of the item: `.exists`
    /// when it changed since.
    func purgeItem(_ id: String, cas expected: CAS = .zero) async throws(GatewayBucketError) -> CAS {
        guard options.sharedBucketAccess else { return try await purgeMarked(id, cas: expected) }
        for _ in 0..<Limits.gatewayWriteRetries {
            guard let r = try await bucket.lookupIn(id, SharedBucketAccess.lookup), r.results.first?.status == 0
            else {
                if expected != .zero { throw .notFound }
                if let cas = try? await bucket.remove(id, cas: .zero) { return cas }
                throw .notFound
            }
            if expected != .zero, r.cas != expected { throw .exists }
            do {
                return try await bucket.mutateIn(id, SharedBucketAccess.purge(itemDeleted: r.deleted), cas: r.cas)
            } catch .exists {
                if expected != .zero { throw .exists }
                continue
            }
        }
        throw .temporary("the document kept changing during _purge")
    }

    /// `_purge` of a document stored with its metadata in the body: a deletion whose tombstone keeps the purge
    /// marker (`PurgeMarker`), so another gateway's change stream does not take it for a KV delete. A bucket that
    /// refuses the marker (a cluster user without system XATTR write) gets a plain delete, as before ADR 0074:
    /// other gateways with `import_docs` may then import it as a tombstone revision.
    private func purgeMarked(_ id: String, cas: CAS) async throws(GatewayBucketError) -> CAS {
        do { return try await bucket.mutateIn(id, PurgeMarker.deletion, cas: cas) } catch .failed(let why) {
            logger.warning(
                "the bucket refused the purge marker; deleting without it",
                metadata: ["doc": "\(id)", "error": "\(why)"])
            return try await bucket.remove(id, cas: cas)
        }
    }

    /// `GET /db/_raw/doc` with shared bucket access: the body with `_sync` from its XATTR, as Sync Gateway 2.x
    /// shows it.
    func rawShared(_ id: String) async throws(GatewayError) -> JSON {
        let bucket = self.bucket
        guard
            let r = try await bucketCall({ () async throws(GatewayBucketError) in
                try await bucket.lookupIn(id, SharedBucketAccess.lookup)
            }), r.results.count == 2
        else { throw .notFound("missing") }
        var members: [(String, JSON)] = []
        if !r.deleted {
            guard let json = try? JSON.parse(r.results[1].value), case .object(let m) = json else {
                throw .internalError("stored value is not JSON")
            }
            members = m
        }
        if r.results[0].status == 0,
            let sync = try? JSON.parse(r.results[0].value, maxDepth: StoredDocument.maxStoredDepth)
        {
            members.append((syncXattrName, sync))
        } else if r.deleted {
            throw .notFound("missing")
        }
        return .object(members)
    }
}
