extension JSON {
    /// CouchDB's error body, as Sync Gateway, Couchbase Lite and the views port answer it:
    /// `{"id"?, "rev"?, "error", "reason", "status"?}` (`status` in rows of bulk replies, where the HTTP
    /// status cannot carry it). The one builder of the shape for the gateway, replication, Lite and the
    /// admin and views ports.
    public static func errorBody(
        _ error: String, reason: String, status: Int? = nil, id: String? = nil, rev: String? = nil
    ) -> JSON {
        var members: [(String, JSON)] = []
        if let id { members.append(("id", .string(id))) }
        if let rev { members.append(("rev", .string(rev))) }
        members.append(("error", .string(error)))
        members.append(("reason", .string(reason)))
        if let status { members.append(("status", .int(status))) }
        return .object(members)
    }
}
