import Foundation
import Hummingbird
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeStorage

/// Couchbase's RBAC REST API for local users:
/// `PUT|GET|DELETE /settings/rbac/users/local/NAME`, `GET /settings/rbac/users[/local]`,
/// `GET /settings/rbac/roles`. Bodies and errors follow ns_server's shapes.
enum RBACRoutes {
    static func add(to router: Router<BasicRequestContext>, api: AdminAPI) {
        router.get("/settings/rbac/roles") { _, _ in roles() }
        router.get("/settings/rbac/users") { _, _ in users(api) }
        router.get("/settings/rbac/users/local") { _, _ in users(api) }
        router.get("/settings/rbac/users/local/:user") { _, c in getUser(api, name: userParameter(c)) }
        router.put("/settings/rbac/users/local/:user") { r, c in await putUser(api, r, name: userParameter(c)) }
        router.delete("/settings/rbac/users/local/:user") { r, c in
            await deleteUser(api, r, name: userParameter(c))
        }
    }

    static func userParameter(_ context: BasicRequestContext) -> String {
        let raw = context.parameters.get("user") ?? ""
        return raw.removingPercentEncoding ?? raw
    }

    static func roles() -> Response {
        AdminResponses.json(
            .ok,
            .array(
                Role.Name.allCases.map { n in
                    var fields: [(String, JSONValue)] = [("role", .string(n.rawValue))]
                    if n.isBucketScoped { fields.append(("bucket_name", "*")) }
                    fields += [("name", .string(n.display.name)), ("desc", .string(n.display.desc))]
                    return .object(fields)
                }))
    }

    static func userJSON(_ u: NodeRegistry.LocalUser) -> JSONValue {
        .object([
            ("id", .string(u.name)), ("domain", "local"),
            (
                "roles",
                .array(
                    u.roles.map { r in
                        var fields: [(String, JSONValue)] = [("role", .string(r.name.rawValue))]
                        if let b = r.bucket { fields.append(("bucket_name", .string(b))) }
                        if let s = r.scope { fields.append(("scope_name", .string(s))) }
                        if let c = r.collection { fields.append(("collection_name", .string(c))) }
                        fields.append(("origins", .array([.object([("type", "user")])])))
                        return .object(fields)
                    })
            ),
            ("groups", .array([])), ("external_groups", .array([])), ("name", .string(u.fullName)),
            ("password_change_date", .string(u.passwordChangeDate + "T00:00:00.000Z")),
        ])
    }

    static func users(_ api: AdminAPI) -> Response {
        AdminResponses.json(.ok, .array(api.registry.localUsers.map(userJSON)))
    }

    static func getUser(_ api: AdminAPI, name: String) -> Response {
        guard let u = api.registry.localUser(named: name) else {
            return AdminResponses.json(.notFound, "Unknown user.")
        }
        return AdminResponses.json(.ok, userJSON(u))
    }

    static func putUser(_ api: AdminAPI, _ request: Request, name: String) async -> Response {
        // Users live in the cluster document, which only the orchestrator changes.
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await api.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        var errors: [(String, String)] = []
        var roles: [Role] = []
        switch Role.parseList(form["roles"] ?? "") {
        case .success(let r): roles = r
        case .failure(let e):
            errors.append(
                (
                    "roles",
                    "Cannot assign roles to user because the following roles are unknown, malformed or role "
                        + "parameters are undefined: [\(e.invalid.joined(separator: ","))]"
                ))
        }
        for key in form.fields.keys.sorted() where !["name", "password", "roles", "groups"].contains(key) {
            errors.append((key, "Unsupported key"))
        }
        if !errors.isEmpty { return AdminResponses.fieldErrors(errors) }
        let registry = api.registry
        let fullName = form["name"] ?? ""
        let password = form["password"]
        let newRoles = roles
        do {
            try await Blocking.run {
                try registry.upsertUser(name: name, fullName: fullName, password: password, roles: newRoles)
            }
        } catch let error as NodeRegistry.UserError {
            if case .invalid(let fields) = error {
                return AdminResponses.fieldErrors(fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            }
            return AdminResponses.json(.notFound, "User was not found.")
        } catch {
            api.logger.error("saving a user failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not save the user.")
        }
        await api.publish()
        return AdminResponses.json(.ok, "")
    }

    static func deleteUser(_ api: AdminAPI, _ request: Request, name: String) async -> Response {
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let registry = api.registry
        do {
            try await Blocking.run { try registry.deleteUser(name: name) }
        } catch NodeRegistry.UserError.notFound {
            return AdminResponses.json(.notFound, "User was not found.")
        } catch {
            api.logger.error("deleting a user failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not delete the user.")
        }
        await api.publish()
        return AdminResponses.json(.ok, "")
    }
}

/// Which requests a local RBAC user may make (the admin may make all). Couchbase's model reduced to
/// what settee serves: pool listings for anyone authenticated, a bucket's config for its users,
/// flush for those who may manage the bucket, other reads for read-only admins, security routes
/// for full admins, everything else for cluster admins. Internal node routes: never a user.
enum RBACPolicy {
    static func allows(roles: [Role], method: HTTPRequest.Method, path: String) -> Bool {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true).map {
            String($0).removingPercentEncoding ?? String($0)
        }
        if segments.first == "settee" { return false }
        if segments.starts(with: ["settings", "rbac"]) {
            return method == .get ? roles.allows(.security) || roles.allows(.read) : roles.allows(.security)
        }
        if method == .get
            && (segments == ["pools"] || segments == ["pools", "default"] || segments == ["pools", "nodes"])
        {
            return true
        }
        if method == .get && segments == ["pools", "default", "buckets"] { return true }
        if segments.count >= 4, segments[0] == "pools", segments[1] == "default",
            segments[2] == "buckets" || segments[2] == "b"
        {
            let grants = roles.grants(onBucket: segments[3])
            if method == .get && segments.count == 4 && grants.contains(.readConfig) { return true }
            if method == .post && segments.count == 6 && segments[5] == "doFlush" && grants.contains(.manage) {
                return true
            }
        }
        return method == .get ? roles.allows(.read) : roles.allows(.manage)
    }

    /// ns_server's 403 body.
    static let forbidden = AdminResponses.json(
        .forbidden,
        .object([
            ("message", "Forbidden. User needs the following permissions"), ("permissions", .array([])),
        ]))
}
