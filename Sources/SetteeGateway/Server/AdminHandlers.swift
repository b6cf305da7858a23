import SetteeJSON

/// Admin-port endpoints over principals and maintenance: `_user/`, `_role/`, `_purge`.
enum AdminHandlers {
    /// `GET|POST /db/_user/`, `GET|PUT|DELETE /db/_user/{name}` and the same for `_role`.
    static func principals(_ r: GatewayRequest) async throws -> GatewayReply {
        let db = r.database
        let isRole = r.route.endpoint == .role || r.route.endpoint == .roleList
        switch (r.route.endpoint, r.method) {
        case (.userList, "GET"), (.userList, "HEAD"), (.roleList, "GET"), (.roleList, "HEAD"):
            return .json(200, .array(await db.principalNames(isRole: isRole).map { .string($0) }))
        case (.userList, "POST"), (.roleList, "POST"):
            let body = try r.bodyJSON()
            guard let name = body["name"]?.stringValue, !name.isEmpty else {
                throw GatewayError.badRequest("Missing name property")
            }
            if (try? await db.principal(name, isRole: isRole)) != nil {
                throw GatewayError.conflict("Already exists")
            }
            _ = try await db.putPrincipal(name, isRole: isRole, body)
            return .json(201, .object([("ok", .bool(true))]))
        case (_, "GET"), (_, "HEAD"):
            return .json(200, try await db.principal(r.route.id, isRole: isRole))
        case (_, "PUT"):
            let body = try r.bodyJSON()
            if let given = body["name"]?.stringValue, given != r.route.id {
                throw GatewayError.badRequest("Name mismatch")
            }
            let created = try await db.putPrincipal(r.route.id, isRole: isRole, body)
            return .json(created ? 201 : 200, .object([("ok", .bool(true))]))
        case (_, "DELETE"):
            try await db.deletePrincipal(r.route.id, isRole: isRole)
            return .json(200, .object([("ok", .bool(true))]))
        default:
            throw GatewayError.status(405, "\(r.method) not allowed")
        }
    }

    /// `POST /db/_purge {"docid": ["*"], ...}` → `{"purged": {...}}`.
    static func purge(_ r: GatewayRequest) async throws -> GatewayReply {
        guard case .object(let members) = try r.bodyJSON() else {
            throw GatewayError.badRequest("Body must be a JSON object")
        }
        var request: [String: [String]] = [:]
        for (id, revs) in members {
            guard let items = revs.arrayValue else {
                throw GatewayError.badRequest("Revisions of \(id) must be an array")
            }
            request[id] = items.compactMap(\.stringValue)
        }
        return .json(200, try await r.database.purge(request))
    }
}
