import Prometheus
import SetteeAuth
import SetteeReplication
import Synchronization

extension GatewayServer {
    /// `GET /_metrics` (admin port, as Sync Gateway 2.8+ serves it), Prometheus text:
    ///
    ///     settee_gateway_password_checks_total   password (bcrypt) checks the public port ran since start
    ///                                            (`LoginGuard.passwordChecks`; throttled logins run none)
    ///     settee_gateway_login_throttled_total   logins the public port refused unchecked as throttled (429): too
    ///                                            many failures of that user from that address (`LoginGuard`)
    ///     settee_gateway_import_count{database}        KV writes imported as revisions (Sync Gateway's
    ///                                                  `shared_bucket_import.import_count`)
    ///     settee_gateway_import_error_count{database}  KV writes refused at import, left as written (`import_error_count`)
    ///     settee_gateway_deltas_requested{database}    BLIP pulls of a revision the client has an ancestor of, deltas on
    ///     settee_gateway_deltas_sent{database}         of those, sent as a JSON delta (`delta_sync.deltas_sent`)
    ///     settee_gateway_delta_push_doc_count{database}  pushed revisions applied from a delta
    ///     settee_gateway_replication_bytes_sent{database}, ..._received{database}  BLIP frame bytes on /_blipsync
    ///     settee_gateway_documents{database}, settee_gateway_tombstones{database},
    ///     settee_gateway_stored_revisions{database}    gauges: documents indexed, those deleted, revisions their trees keep
    ///     settee_gateway_tombstones_purged_total{database}  tombstones purged since start (ADR 0145)
    ///     settee_gateway_channel_history_entries{database}, settee_gateway_old_bodies{database},
    ///     settee_gateway_old_body_bytes{database}, settee_gateway_sessions{database},
    ///     settee_gateway_checkpoints{database}, settee_gateway_attachment_blobs{database},
    ///     settee_gateway_attachment_bytes{database}  gauges (ADR 0151): channel removal entries documents keep, bodies
    ///                                                (and bytes) of revisions other than winners, session items,
    ///                                                `_local` checkpoints, attachment blobs (and bytes)
    ///     settee_gateway_channel_history_pruned_total{database}  channel removal entries pruned since start
    ///     settee_gateway_live_revisions{database}  gauge (ADR 0156): leaves that are not deletions
    ///     settee_gateway_old_bodies_expired_total{database}  replaced revision bodies dropped since start by
    ///                                                        `old_rev_expiry_seconds` or the byte bound (ADR 0156)
    ///     settee_gateway_collection_<figure>{database, collection}  each keyspace's `CollectionStats` figures
    ///                                                (Sync Gateway 3.1's `sgw_collection_*`; `collection` is
    ///                                                `scope.collection`; ADR 0152)
    ///
    /// The node's `/metrics` shows its own checks as `settee_password_checks_total`; the `_gateway` infix keeps the
    /// two apart when one Prometheus scrapes both. A fresh registry per scrape: the counter is the guard's running
    /// total, so there is no state to carry between scrapes.
    func prometheusText() -> [UInt8] {
        let registry = PrometheusCollectorRegistry()
        registry.makeCounter(
            descriptor: MetricNameDescriptor(
                metricName: "settee_gateway_password_checks_total", unitName: "",
                helpText: "Password checks the gateway's public port ran since start")
        ).increment(by: Int64(passwordChecks))
        registry.makeCounter(
            descriptor: MetricNameDescriptor(
                metricName: "settee_gateway_login_throttled_total", unitName: "",
                helpText: "Logins the gateway's public port refused as throttled since start")
        ).increment(by: Int64(loginGuard.throttledLogins))
        for name in databases.keys.sorted() {
            guard let db = databases[name] else { continue }
            let counts = [
                (
                    "settee_gateway_import_count", "KV writes the gateway imported as revisions",
                    db.importStats.importCount
                ),
                (
                    "settee_gateway_import_error_count",
                    "KV writes the gateway refused to import (logged; the item is left as written)",
                    db.importStats.importErrorCount
                ),
                (
                    "settee_gateway_import_filtered_count",
                    "KV writes the database's import_filter did not accept (not imported; the item is left as written)",
                    db.importStats.importFilteredCount
                ),
                (
                    "settee_gateway_deltas_requested",
                    "Revisions BLIP pullers asked for with a delta source, delta sync on", db.deltaStats.deltasRequested
                ),
                (
                    "settee_gateway_deltas_sent", "Revisions sent to BLIP pullers as a JSON delta",
                    db.deltaStats.deltasSent
                ),
                (
                    "settee_gateway_delta_push_doc_count", "Revisions BLIP pushers sent as a JSON delta, applied",
                    db.deltaStats.deltaPushDocCount
                ),
                (
                    "settee_gateway_replication_bytes_sent", "BLIP frame bytes sent on /_blipsync",
                    db.replicationBytes.bytesSent
                ),
                (
                    "settee_gateway_replication_bytes_received", "BLIP frame bytes received on /_blipsync",
                    db.replicationBytes.bytesReceived
                ),
            ]
            for (metric, help, value) in counts {
                registry.makeCounter(
                    descriptor: MetricNameDescriptor(metricName: metric, unitName: "", helpText: help),
                    labels: [("database", name)]
                ).increment(by: Int64(value))
            }
            registry.makeCounter(
                descriptor: MetricNameDescriptor(
                    metricName: "settee_gateway_tombstones_purged_total", unitName: "",
                    helpText: "Tombstones purged (tombstone compaction and _purge of deleted documents) since start"),
                labels: [("database", name)]
            ).increment(by: Int64(db.tombstonesPurged.load(ordering: .relaxed)))
            registry.makeCounter(
                descriptor: MetricNameDescriptor(
                    metricName: "settee_gateway_channel_history_pruned_total", unitName: "",
                    helpText: "Channel removal entries pruned from documents since start"),
                labels: [("database", name)]
            ).increment(by: Int64(db.channelRemovalsPruned.load(ordering: .relaxed)))
            registry.makeCounter(
                descriptor: MetricNameDescriptor(
                    metricName: "settee_gateway_old_bodies_expired_total", unitName: "",
                    helpText: "Replaced revision bodies dropped by old_rev_expiry_seconds or the byte bound since start"
                ),
                labels: [("database", name)]
            ).increment(by: Int64(db.oldBodiesExpired.load(ordering: .relaxed)))
            let figures = db.storedFigures()
            for (metric, help, value) in [
                ("settee_gateway_documents", "Documents the database holds, tombstones included", figures.docs),
                ("settee_gateway_tombstones", "Documents whose winning revision is a deletion", figures.tombstones),
                ("settee_gateway_stored_revisions", "Revisions the documents' trees keep", figures.revisions),
                (
                    "settee_gateway_live_revisions", "Leaves that are not deletions (winners and live conflicts)",
                    figures.liveRevisions
                ),
                (
                    "settee_gateway_channel_history_entries", "Channel removal entries the documents keep",
                    figures.channelHistoryEntries
                ),
                ("settee_gateway_old_bodies", "Bodies of revisions other than the winners", figures.oldBodies),
                (
                    "settee_gateway_old_body_bytes", "Bytes of bodies of revisions other than the winners",
                    figures.oldBodyBytes
                ),
                ("settee_gateway_sessions", "Session items in the bucket", figures.sessions),
                (
                    "settee_gateway_checkpoints", "_local documents (replicator checkpoints) in the bucket",
                    figures.checkpoints
                ),
                ("settee_gateway_attachment_blobs", "Attachment blobs in the bucket", figures.attachmentBlobs),
                ("settee_gateway_attachment_bytes", "Bytes of attachment blobs in the bucket", figures.attachmentBytes),
            ] {
                registry.makeGauge(
                    descriptor: MetricNameDescriptor(metricName: metric, unitName: "", helpText: help),
                    labels: [("database", name)]
                ).set(Int64(value))
            }
        }
        for name in keyspaces.keys.sorted() {
            for (keyspace, db) in (keyspaces[name] ?? [:]).sorted(by: { $0.key.description < $1.key.description }) {
                for figure in db.collectionStats.figures(imports: db.importStats.importCount) {
                    registry.makeCounter(
                        descriptor: MetricNameDescriptor(
                            metricName: "settee_gateway_collection_\(figure.name)", unitName: "", helpText: figure.help),
                        labels: [("database", name), ("collection", keyspace.description)]
                    ).increment(by: Int64(figure.value))
                }
            }
        }
        return registry.emitToBuffer()
    }
}
