import Logging
import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization

extension GatewayDatabase {
    // MARK: _local documents (`_sync:local:<id>`, revisions "0-N", never replicated)

    static func localKey(_ id: String) -> String {
        localPrefix + (id.hasPrefix("_local/") ? String(id.dropFirst("_local/".count)) : id)
    }

    static func localID(_ id: String) -> String {
        id.hasPrefix("_local/") ? id : "_local/" + id
    }

    /// The bucket expiry a `_local` document is written or touched with: `local_doc_expiry_secs` from now.
    var localDocExpiry: UInt32 {
        let o = options
        return Expiry.wire(ttlSeconds: o.localDocExpirySeconds, nowSeconds: o.clock.nowSeconds())
    }

    /// `GET /db/_local/id` (`id` with or without the `_local/` prefix): the body with `_id` and `_rev`. A read
    /// renews the document's expiry, as Sync Gateway's get-and-touch does, so a checkpoint a replicator still reads
    /// stays (`local_doc_expiry_secs`, ADR 0151); a failed touch does not fail the read.
    public func local(_ id: String) async throws(GatewayError) -> JSON {
        let bucket = self.bucket
        let key = Self.localKey(id)
        guard let item = try await bucketCall({ () async throws(GatewayBucketError) in try await bucket.get(key) }),
            let json = try? JSON.parse(item.value), case .object(let members) = json
        else { throw .notFound("missing") }
        try? await bucket.touch(key, expiry: localDocExpiry)
        var m: [(String, JSON)] = [("_id", .string(Self.localID(id)))]
        m.append(("_rev", members.first { $0.0 == "_rev" }?.1 ?? .string("0-1")))
        m += members.filter { !$0.0.hasPrefix("_") }
        return .object(m)
    }

    /// `PUT /db/_local/id`: `_rev` must be the stored one (409 otherwise; 404 when nothing is stored).
    /// Returns the new revision `"0-N"`. The item expires `local_doc_expiry_secs` after its last write or read.
    public func putLocal(_ id: String, _ body: JSON) async throws(GatewayError) -> String {
        guard case .object(let members) = body else { throw .badRequest("Document body must be a JSON object") }
        let key = Self.localKey(id)
        if key.utf8.count > Limits.maxKeyLength { throw .badRequest("Document id too long") }
        let given = body["_rev"]?.stringValue
        let bucket = self.bucket
        for _ in 0..<Limits.gatewayWriteRetries {
            let item = try await bucketCall { () async throws(GatewayBucketError) in try await bucket.get(key) }
            var generation = 0
            if let item {
                let stored = (try? JSON.parse(item.value))?["_rev"]?.stringValue ?? "0-0"
                guard given == stored else { throw .conflict("Document update conflict") }
                generation = Int(stored.split(separator: "-").last ?? "0") ?? 0
            } else if given != nil {
                throw .notFound("No previous revision to replace")
            }
            // The stored `_rev` is whatever a KV client last wrote: count on from it without trapping.
            let (next, overflow) = generation.addingReportingOverflow(1)
            guard !overflow else { throw .badRequest("Local document revision limit reached") }
            let rev = "0-\(next)"
            let value = JSON.object([("_rev", .string(rev))] + members.filter { !$0.0.hasPrefix("_") }).serialized()
            do {
                if let item {
                    _ = try await bucket.replace(key, value: value, cas: item.cas, expiry: localDocExpiry)
                } else {
                    _ = try await bucket.insert(key, value: value, expiry: localDocExpiry)
                }
                return rev
            } catch .exists {
                continue
            } catch .notFound {
                continue
            } catch {
                throw GatewayError.bucket(error)
            }
        }
        throw .conflict("Document update conflict")
    }

    /// `DELETE /db/_local/id?rev=0-N` (`rev` nil: whatever is stored).
    public func deleteLocal(_ id: String, rev: String?) async throws(GatewayError) {
        let key = Self.localKey(id)
        let bucket = self.bucket
        guard let item = try await bucketCall({ () async throws(GatewayBucketError) in try await bucket.get(key) })
        else { throw .notFound("missing") }
        if let rev, (try? JSON.parse(item.value))?["_rev"]?.stringValue != rev {
            throw .conflict("Document update conflict")
        }
        do { try await bucket.remove(key, cas: item.cas) } catch .exists {
            throw .conflict("Document update conflict")
        } catch .notFound {
            throw .notFound("missing")
        } catch { throw GatewayError.bucket(error) }
    }

    // MARK: purge, compact, raw

    /// Admin `_purge` `{"doc": ["*"]}`: removes documents with their history, leaving no tombstone
    /// revision. Only the `"*"` form is honoured (as in Sync Gateway); others are skipped. Purging a live document is
    /// not replicated (as in Sync Gateway and CouchDB: replicas keep their copy); purging a deleted one removes a
    /// tombstone, so the purge horizon is raised to its sequence first (`PurgeHorizon`): replicas that had not seen
    /// the deletion are told to restart their pull.
    public func purge(_ request: [String: [String]]) async throws(GatewayError) -> JSON {
        var purged: [(String, JSON)] = []
        for id in request.keys.sorted() where request[id] == ["*"] {
            let entry = index.withLock { $0.docs[id] }
            if let entry, entry.deleted { try await raisePurgeHorizon(to: entry.seq) }
            // The stream's entries up to the purge's own deletion are echoes (PurgeEchoes): an older version
            // would index the document again and the deletion would then be imported as a tombstone.
            if !purgeEchoes.withLock({ $0.begin(id) }) {
                logger.warning("purging without watching the change stream's echoes", metadata: ["doc": "\(id)"])
            }
            // Forgotten before the bucket delete, so the stream's deletion is not imported as a tombstone.
            if let change = index.withLock({ $0.remove(id) }) { notify(change) }
            revisionCache.withLock { $0.remove(id) }
            let deletion: CAS
            do { deletion = try await purgeItem(id) } catch .notFound {
                await endPurgeWatch(id, deletedWith: nil)
                continue
            } catch {
                await endPurgeWatch(id, deletedWith: nil)
                throw GatewayError.bucket(error)
            }
            // Ahead of the change stream until it delivers the deletion: a branch that lost the purge brings the
            // document back (ADR 0098).
            noteAheadOfStream(id, cas: deletion)
            await endPurgeWatch(id, deletedWith: deletion)
            if entry?.deleted == true { _ = tombstonesPurged.add(1, ordering: .relaxed) }
            purged.append((id, .array([.string("*")])))
        }
        return .object([("purged", .object(purged))])
    }

    /// Ends the watch `purge` kept on `id`'s stream entries; an entry newer than the deletion swallowed while the
    /// delete was in flight is handled from the item as it is now.
    private func endPurgeWatch(_ id: String, deletedWith cas: CAS?) async {
        guard purgeEchoes.withLock({ $0.end(id, deletedWith: cas) }) else { return }
        await handleCurrentItem(id)
    }

    /// Admin `POST /db/_compact?type=attachment`: drops bodies of old non-leaf revisions beyond what replicators need
    /// (marks every blob a kept revision refers to) and deletes the attachment blobs no kept revision refers to
    /// (sweeps), updating `attachmentCompaction` as it goes. Returns how many documents and blobs it changed; nil when
    /// a run is going already.
    public func compact() async -> Int? {
        let started = attachmentCompaction.withLock { $0.start(now: options.clock.nowSeconds()) }
        guard started else { return nil }
        attachmentSweep.withLock { $0.start() }
        defer {
            attachmentSweep.withLock { $0.finish() }
            attachmentCompaction.withLock { $0.running = false }
        }
        var referenced = Set<String>()
        var changed = 0
        let ids = index.withLock { Array($0.docs.keys) }
        for id in ids {
            guard let loaded = try? await load(id), case .found(var doc) = loaded else { continue }
            var tree = doc.meta.tree
            let before = tree
            tree.dropAncestorBodies(
                keep: Limits.gatewayKeptAncestorBodies, maxBytes: Limits.gatewayKeptAncestorBodyBytes)
            var times = doc.meta.oldBodyTimes
            oldBodyRule.apply(tree: &tree, times: &times, now: options.clock.nowSeconds(), stampUntimed: false)
            Self.markAttachments(of: tree, in: &referenced)
            if tree != before {
                let old = doc
                doc.meta.tree = tree
                doc.meta.oldBodyTimes = times
                doc.meta.revChannels = doc.meta.revChannels.filter { tree.body(of: $0.key) != nil }
                if let cas = try? await writeItem(&doc, old: old, expiry: doc.meta.expiry ?? 0) {
                    doc.cas = cas
                    indexOwnWrite(doc)
                    changed += 1
                    attachmentCompaction.withLock { $0.docsChanged += 1 }
                } else {
                    // Not written (a writer came first): the bodies it meant to drop are still stored, and refer on.
                    Self.markAttachments(of: before, in: &referenced)
                }
            }
        }
        let blobs = index.withLock { Array($0.attachmentBytes.keys) }
        attachmentCompaction.withLock { $0.markedAttachments = blobs.filter { referenced.contains($0) }.count }
        let bucket = self.bucket
        for key in blobs where !referenced.contains(key) {
            // A write made since the run started may refer to the blob (`AttachmentSweepGuard`): left alone, or put
            // back when the write came while it was being removed. Removed with the CAS read, so bytes stored again
            // meanwhile stay.
            guard attachmentSweep.withLock({ $0.mayRemove(key) }),
                let item = try? await bucket.get(key),
                (try? await bucket.remove(key, cas: item.cas)) != nil
            else { continue }
            if !attachmentSweep.withLock({ $0.mayRemove(key) }) {
                do { _ = try await bucket.insert(key, value: item.value, expiry: 0) } catch {
                    if case .exists = error { continue }
                    logger.error("attachment blob removed while a write referred to it", metadata: ["key": "\(key)"])
                }
                continue
            }
            changed += 1
            _ = index.withLock { $0.attachmentBytes.removeValue(forKey: key) }
            attachmentCompaction.withLock { $0.purgedAttachments += 1 }
        }
        return changed
    }

    /// Adds to `referenced` the blob key of every attachment a kept body of `tree` (a leaf or one of its ancestors)
    /// refers to.
    static func markAttachments(of tree: RevTree, in referenced: inout Set<String>) {
        for r in tree.leaves + tree.leaves.flatMap({ tree.history(of: $0) }) {
            guard let bytes = tree.body(of: r), let body = try? JSON.parse(bytes) else { continue }
            for (_, meta) in body["_attachments"]?.objectValue ?? [] {
                if let d = meta["digest"]?.stringValue { referenced.insert(attachmentPrefix + d) }
            }
        }
    }

    /// Admin `GET /db/_raw/doc`: the bucket item as stored, `_sync` included.
    public func raw(_ id: String) async throws(GatewayError) -> JSON {
        if options.sharedBucketAccess { return try await rawShared(id) }
        let bucket = self.bucket
        guard let item = try await bucketCall({ () async throws(GatewayBucketError) in try await bucket.get(id) })
        else { throw .notFound("missing") }
        guard let json = try? JSON.parse(item.value) else { throw .internalError("stored value is not JSON") }
        return json
    }
}
