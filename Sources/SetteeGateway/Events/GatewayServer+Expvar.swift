import SetteeJSON

extension GatewayServer {
    /// `GET /_expvar` (admin port), in Sync Gateway's `syncgateway.per_db` shape: each database's
    /// `event_handlers` counters (webhooks posted, failed, retried; events queued, pending, dropped, filtered out),
    /// its `shared_bucket_import` counters (`import_count`: KV writes made revisions; `import_error_count`: KV writes
    /// refused, such as bodies with reserved top-level properties, each also logged);
    /// and in `syncgateway.global.resource_utilization` (where Sync Gateway puts process-wide costs: CPU, memory)
    /// `password_checks`, the bcrypt checks the public port ran since start (`passwordChecks`): the login throttle is
    /// one per process, shared by every database, so the count is global, not a `per_db` `security` stat.
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
            ])
            perDB.append((name, .object([("event_handlers", stats), ("shared_bucket_import", imports)])))
        }
        let global: JSON = .object([
            ("resource_utilization", .object([("password_checks", .integer(Int128(passwordChecks)))]))
        ])
        return .object([("syncgateway", .object([("global", global), ("per_db", .object(perDB))]))])
    }
}
