import SetteeJSON

extension GatewayServer {
    /// `GET /_expvar` (admin port), in Sync Gateway's `syncgateway.per_db` shape: each database's
    /// `event_handlers` counters (webhooks posted, failed, retried; events queued, pending, dropped, filtered out).
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
            perDB.append((name, .object([("event_handlers", stats)])))
        }
        return .object([("syncgateway", .object([("per_db", .object(perDB))]))])
    }
}
