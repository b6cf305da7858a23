import SetteeJSON
import SetteeReplication
import Synchronization

extension GatewayServer {
    /// `GET /_expvar` (admin port), in Sync Gateway's `syncgateway.per_db` shape: each database's
    /// `event_handlers` counters (webhooks posted, failed, retried; events queued, pending, dropped, filtered out),
    /// its `shared_bucket_import` counters (`import_count`: KV writes made revisions; `import_error_count`: KV writes
    /// refused, such as bodies with reserved top-level properties, each also logged), its `delta_sync` counters
    /// (`DeltaSyncStats`: `deltas_requested`, `deltas_sent`, `delta_pull_replication_count`, `delta_push_doc_count`), its `database` BLIP byte counts (`replication_bytes_sent`,
    /// `replication_bytes_received`: frames on `/_blipsync` as on the wire, `ReplicationByteStats`; and the bounded-metadata
    /// figures of ADR 0145: `documents`, `tombstones`, `stored_revisions`, `tombstones_purged`, `purged_through`; and of
    /// ADR 0151: `channel_history_entries`, `channel_history_pruned`, `old_bodies`, `old_body_bytes`, `sessions`,
    /// `checkpoints`, `attachment_blobs`, `attachment_bytes`; and of ADR 0156: `live_revisions`, `old_bodies_expired`);
    /// its `per_collection` figures (`CollectionStats`, one object per keyspace named `scope.collection`, ADR 0152);
    /// and in `syncgateway.global.resource_utilization` (where Sync Gateway puts process-wide costs: CPU, memory)
    /// `password_checks`, the bcrypt checks the public port ran since start (`passwordChecks`): the login throttle is
    /// one per process, shared by every database, so the count is global, not a `per_db` `security` stat.
    /// The bounded-metadata figures of one database (ADRs 0145, 0151), as `/_expvar` members.
    static func metadataFigures(_ db: GatewayDatabase) -> [(String, JSON)] {
        let figures = db.storedFigures()
        let purged: Int = db.tombstonesPurged.load(ordering: .relaxed)
        let through: UInt64 = db.purgeHorizon.withLock { $0.purgedThrough }
        return [
            ("documents", JSON.integer(Int128(figures.docs))),
            ("tombstones", JSON.integer(Int128(figures.tombstones))),
            ("stored_revisions", JSON.integer(Int128(figures.revisions))),
            ("live_revisions", JSON.integer(Int128(figures.liveRevisions))),
            ("tombstones_purged", JSON.integer(Int128(purged))),
            ("purged_through", JSON.integer(Int128(through))),
            ("channel_history_entries", JSON.integer(Int128(figures.channelHistoryEntries))),
            ("channel_history_pruned", JSON.integer(Int128(db.channelRemovalsPruned.load(ordering: .relaxed)))),
            ("old_bodies", JSON.integer(Int128(figures.oldBodies))),
            ("old_body_bytes", JSON.integer(Int128(figures.oldBodyBytes))),
            ("old_bodies_expired", JSON.integer(Int128(db.oldBodiesExpired.load(ordering: .relaxed)))),
            ("sessions", JSON.integer(Int128(figures.sessions))),
            ("checkpoints", JSON.integer(Int128(figures.checkpoints))),
            ("attachment_blobs", JSON.integer(Int128(figures.attachmentBlobs))),
            ("attachment_bytes", JSON.integer(Int128(figures.attachmentBytes))),
        ]
    }

    /// Each keyspace of database `name` by `scope.collection` (the default collection as `_default._default`), in
    /// name order, with its `CollectionStats` figures: Sync Gateway 3.1's `per_collection` group (ADR 0152).
    func perCollection(_ name: String) -> JSON {
        let spaces = keyspaces[name] ?? databases[name].map { [$0.keyspace: $0] } ?? [:]
        return .object(
            spaces.keys.sorted { $0.description < $1.description }.compactMap { k in
                guard let db = spaces[k] else { return nil }
                let figures = db.collectionStats.figures(imports: db.importStats.importCount)
                return (k.description, .object(figures.map { ($0.name, JSON.integer(Int128($0.value))) }))
            })
    }

    func expvar() -> JSON {
        var perDB: [(String, JSON)] = []
        for name in databases.keys.sorted() {
            guard let db = databases[name] else { continue }
            var stats: JSON = db.events?.stats() ?? .object([("handlers", .integer(0))])
            if case .object(var members) = stats {
                let feedDropped = db.eventFeed.droppedCount
                if let i = members.firstIndex(where: { $0.0 == "events_dropped" }), case .integer(let n) = members[i].1
                {
                    members[i].1 = .integer(n + Int128(feedDropped))
                }
                stats = .object(members)
            }
            let imports: JSON = .object([
                ("import_count", .integer(Int128(db.importStats.importCount))),
                ("import_error_count", .integer(Int128(db.importStats.importErrorCount))),
                // Settee's own: Sync Gateway counts no filtered import.
                ("import_filtered_count", .integer(Int128(db.importStats.importFilteredCount))),
            ])
            let deltas: JSON = .object([
                ("deltas_requested", .integer(Int128(db.deltaStats.deltasRequested))),
                ("deltas_sent", .integer(Int128(db.deltaStats.deltasSent))),
                ("delta_pull_replication_count", .integer(Int128(db.deltaStats.deltaPullReplicationCount))),
                ("delta_push_doc_count", .integer(Int128(db.deltaStats.deltaPushDocCount))),
            ])
            let database: JSON = .object(
                [
                    ("replication_bytes_sent", .integer(Int128(db.replicationBytes.bytesSent))),
                    ("replication_bytes_received", .integer(Int128(db.replicationBytes.bytesReceived))),
                ] + Self.metadataFigures(db))
            perDB.append(
                (
                    name,
                    .object([
                        ("event_handlers", stats), ("shared_bucket_import", imports), ("delta_sync", deltas),
                        ("database", database), ("per_collection", perCollection(name)),
                    ])
                ))
        }
        let global: JSON = .object([
            ("resource_utilization", .object([("password_checks", .integer(Int128(passwordChecks)))]))
        ])
        return .object([("syncgateway", .object([("global", global), ("per_db", .object(perDB))]))])
    }
}
