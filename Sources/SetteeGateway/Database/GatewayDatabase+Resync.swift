import Logging
import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization

/// Runtime reconfiguration (`PUT /db/_config`) and `_resync`, as Sync Gateway 1.x does them.
extension GatewayDatabase {
    /// Replaces the sync function, `revs_limit`, `import_docs`, `allow_conflicts` and the config's users and
    /// roles. The new sync function applies to writes that start after this returns; documents already
    /// stored keep their channels until `resync`. A sync function that does not compile is a 400 and changes
    /// nothing.
    public func reconfigure(_ new: DatabaseOptions) async throws(GatewayError) {
        guard new.name == name else { throw .badRequest("A database cannot be renamed") }
        guard new.sharedBucketAccess == options.sharedBucketAccess else {
            throw .badRequest(
                "Changing enable_shared_bucket_access of a running database is not supported: restart the gateway")
        }
        let runner: any SyncRunner
        do { runner = try makeSyncRunner(options: new, logger: logger) } catch {
            throw .badRequest(error.reason)
        }
        let filter = try Self.makeImportFilter(new)
        settings.withLock { $0 = (new, runner) }
        let replaced = importFilter.withLock { current in
            defer { current = filter }
            return current
        }
        replaced?.shutdown()
        try await applyConfigPrincipals()
        logger.info(
            "database reconfigured",
            metadata: ["revs_limit": "\(new.revsLimit)", "import_docs": "\(new.importDocs)"])
    }

    /// `POST /db/_resync`: reruns the current sync function over every document's winning revision (as the
    /// admin, `oldDoc` = its nearest kept ancestor, as Sync Gateway's `getAncestorJSON`) and rewrites the
    /// documents whose channels, access or role grants changed, each at a new sequence (so feeds see the
    /// document enter a channel, or a `removed` row when it left one, and grants backfill). A revision the
    /// function now rejects loses its channels and grants, as in Sync Gateway. Only while offline (503
    /// otherwise). Returns how many documents changed.
    public func resync() async throws(GatewayError) -> Int {
        guard !isOnline else {
            throw .unavailable("Database must be _offline before calling _resync")
        }
        guard !resyncing.exchange(true, ordering: .acquiringAndReleasing) else {
            throw .unavailable("A _resync of this database is already running")
        }
        defer { resyncing.store(false, ordering: .releasing) }
        let ids = index.withLock { Array($0.docs.keys) }.sorted()
        var changed = 0
        for id in ids {
            if try await resyncDocument(id) { changed += 1 }
        }
        logger.info("resync done", metadata: ["docs": "\(ids.count)", "changed": "\(changed)"])
        return changed
    }

    /// Reruns the sync function over one document; true when its channels or grants changed (and it was
    /// rewritten).
    func resyncDocument(_ id: String) async throws(GatewayError) -> Bool {
        let sync = self.sync
        for _ in 0..<Limits.gatewayWriteRetries {
            guard case .found(let old) = try await load(id) else { return false }
            let tree = old.meta.tree
            guard let winner = tree.winner else { return false }
            let doc = revisionJSON(id: id, rev: winner, deleted: tree.winnerIsDeleted, members: old.body)
            let oldDoc = ancestorJSON(id: id, tree: tree, from: tree.parent(of: winner))
            var result: SyncResult
            do { result = try await sync.run(doc: doc, oldDoc: oldDoc, user: nil) } catch {
                logger.warning(
                    "resync: the sync function rejected the current revision; it leaves every channel",
                    metadata: ["doc": "\(id)", "status": "\(error.status)"])
                result = SyncResult()
            }
            let access = result.access.filter { !$0.value.isEmpty }
            let roles = result.roles.filter { !$0.value.isEmpty }
            let sameAccess =
                Self.grantSets(Self.grants(access, old: old.meta.access, seq: 0)) == Self.grantSets(old.meta.access)
            let sameRoles =
                Self.grantSets(Self.grants(roles, old: old.meta.roleAccess, seq: 0))
                == Self.grantSets(old.meta.roleAccess)
            if result.channels == old.meta.channels && sameAccess && sameRoles { return false }

            let seq = try await allocateSequence()
            var meta = old.meta
            meta.sequence = seq
            meta.recentSequences.append(seq)
            if meta.recentSequences.count > Limits.gatewayRecentSequences {
                meta.recentSequences.removeFirst(meta.recentSequences.count - Limits.gatewayRecentSequences)
            }
            let now = options.clock.nowSeconds()
            for ch in meta.channels where !result.channels.contains(ch) {
                meta.removals[ch] = ChannelRemoval(
                    seq: seq, rev: winner, deleted: tree.winnerIsDeleted, removedAt: now)
            }
            for ch in result.channels { meta.removals[ch] = nil }
            do { try await pruneChannelHistory(&meta.removals) } catch {
                await releaseSequence(seq)
                throw error
            }
            meta.channels = result.channels
            meta.revChannels[winner] = result.channels
            meta.access = Self.grants(access, old: old.meta.access, seq: seq)
            meta.roleAccess = Self.grants(roles, old: old.meta.roleAccess, seq: seq)
            var updated = StoredDocument(id: id, body: old.body, meta: meta, cas: old.cas, itemDeleted: old.itemDeleted)
            do {
                updated.cas = try await writeItem(&updated, old: old, expiry: meta.expiry ?? 0)
            } catch .exists {
                await releaseSequence(seq)
                continue
            } catch .notFound {
                await releaseSequence(seq)
                return false
            } catch {
                await releaseSequence(seq)
                throw GatewayError.bucket(error)
            }
            indexOwnWrite(updated)
            return true
        }
        throw .unavailable("Too many concurrent updates of \(id) during _resync")
    }

    /// Grants without their sequences: principal -> channels (or roles).
    static func grantSets(_ g: [String: [String: UInt64]]) -> [String: Set<String>] {
        g.mapValues { Set($0.keys) }
    }
}
