import Foundation
import Hummingbird
import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry
import SetteeStorage

/// Couchbase's RBAC REST API for local users:
/// `PUT|GET|DELETE /settings/rbac/users/local/NAME`, `GET /settings/rbac/users[/local]`,
/// `GET /settings/rbac/roles`. Bodies and errors follow ns_server's shapes.
enum RBACRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI) {
        router.get("/settings/rbac/roles") { _, _ in roles() }
        router.get("/settings/rbac/users") { _, _ in users(api) }
        router.get("/settings/rbac/users/local") { _, _ in users(api) }
        router.get("/settings/rbac/users/local/:user") { _, c in getUser(api, name: userParameter(c)) }
        router.put("/settings/rbac/users/local/:user") { r, c in await putUser(api, r, name: userParameter(c)) }
        router.delete("/settings/rbac/users/local/:user") { r, c in
            await deleteUser(api, r, name: userParameter(c))
        }
    }

    static func userParameter(_ context: AdminRequestContext) -> String {
        PercentEncoding.decodeOrKeep(context.parameters.get("user") ?? "")
    }

    static func roles() -> Response {
        AdminResponses.json(
            .ok,
            .array(
                Role.Name.allCases.map { n in
                    var fields: [(String, JSON)] = [("role", .string(n.rawValue))]
                    if n.isBucketScoped { fields.append(("bucket_name", "*")) }
                    if n.isCollectionScoped { fields += [("scope_name", "*"), ("collection_name", "*")] }
                    fields += [("name", .string(n.display.name)), ("desc", .string(n.display.desc))]
                    return .object(fields)
                }))
    }

    static func userJSON(_ u: NodeRegistry.LocalUser) -> JSON {
        .object([
            ("id", .string(u.name)), ("domain", "local"),
            (
                "roles",
                .array(
                    u.roles.map { r in
                        var fields: [(String, JSON)] = [("role", .string(r.name.rawValue))]
                        if let b = r.bucket { fields.append(("bucket_name", .string(b))) }
                        // Couchbase 7 spells every level of a data role, `*` for "all" (ADR 0141).
                        if r.name.isCollectionScoped {
                            fields.append(("scope_name", .string(r.scope ?? "*")))
                            fields.append(("collection_name", .string(r.collection ?? "*")))
                        }
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
            try await api.configChange { claim in
                try registry.upsertUser(
                    name: name, fullName: fullName, password: password, roles: newRoles, claim: claim)
            }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch let error as NodeRegistry.UserError {
            if case .invalid(let fields) = error {
                return AdminResponses.fieldErrors(fields.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            }
            return AdminResponses.json(.notFound, "User was not found.")
        } catch {
            api.logger.error("saving a user failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not save the user.")
        }
        api.audit(
            .userSet,
            [
                ("identity", .object([("domain", .string("local")), ("user", .string(AuditEvent.userData(name)))])),
                ("roles", .array(newRoles.map { .string($0.description) })),
                ("password_changed", .bool(password != nil)),
            ])
        await api.publish()
        return AdminResponses.json(.ok, "")
    }

    static func deleteUser(_ api: AdminAPI, _ request: Request, name: String) async -> Response {
        if let forwarded = await api.forwardToOrchestrator(request) { return forwarded }
        let registry = api.registry
        do {
            try await api.configChange { claim in try registry.deleteUser(name: name, claim: claim) }
        } catch let refused as ClusterRequestError {
            return AdminAPI.refusal(refused)
        } catch NodeRegistry.UserError.notFound {
            return AdminResponses.json(.notFound, "User was not found.")
        } catch {
            api.logger.error("deleting a user failed", metadata: ["error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Could not delete the user.")
        }
        api.audit(
            .userDeleted,
            [("identity", .object([("domain", .string("local")), ("user", .string(AuditEvent.userData(name)))]))])
        await api.publish()
        return AdminResponses.json(.ok, "")
    }
}

/// Which requests a local RBAC user may make (the admin may make all). Deny by default: a route is open to a
/// user only through a rule of `rules`; any other request (a route added later and not listed, an unknown
/// path) needs the full `admin` role, and the node-to-node routes (`/settee/...`) are never a user's.
/// Couchbase's model reduced to what settee serves: pool listings for anyone authenticated, a bucket's config
/// and documents by the bucket's grants, flush for those who may manage the bucket, cluster reads for
/// read-only admins, cluster changes for cluster admins, and security (users, the admin's credentials,
/// initialisation, adding a node: it hands the node the cluster's secrets) for full admins only.
enum RBACPolicy {
    /// What a request needs.
    enum Requirement: Equatable, CustomStringConvertible {
        /// Any authenticated user.
        case anyUser
        /// A cluster-wide right.
        case cluster(ClusterRight)
        /// Grants on the whole of the bucket named by the rule's `:b` segment (roles qualified by a scope give
        /// none: settings, flush, collection edits).
        case bucket(BucketGrants)
        /// Some privilege anywhere in the bucket (its config, its scopes listing, filtered per caller): what
        /// kv_engine asks of SELECT_BUCKET (ADR 0141).
        case anyInBucket
        /// Grants on the bucket's `_default._default` collection: the documents endpoint and views, which reach
        /// only the default collection, as in Couchbase (ADR 0141).
        case defaultCollection(BucketGrants)
        /// The `admin` role.
        case fullAdmin
        /// No local user, whatever its roles (node-to-node routes: only the admin and the nodes).
        case never

        var description: String {
            switch self {
            case .anyUser: "anyUser"
            case .cluster(let r): "cluster(\(r))"
            case .bucket(let g): "bucket(\(g.rawValue))"
            case .anyInBucket: "anyInBucket"
            case .defaultCollection(let g): "defaultCollection(\(g.rawValue))"
            case .fullAdmin: "fullAdmin"
            case .never: "never"
            }
        }
    }

    /// One grant: `method` on paths matching `pattern`, whose segments are literals, `:b` (the bucket, any one
    /// segment), `*` (any one segment) or a final `**` (any rest, at least one segment).
    struct Rule {
        var method: HTTPRequest.Method
        var pattern: [String]
        var requirement: Requirement

        init(_ method: HTTPRequest.Method, _ path: String, _ requirement: Requirement) {
            self.method = method
            self.pattern = path.split(separator: "/").map(String.init)
            self.requirement = requirement
        }

        /// The bucket segment's value when `segments` match (an empty string for patterns without `:b`).
        func match(_ segments: [String]) -> String? {
            var bucket = ""
            for (i, p) in pattern.enumerated() {
                if p == "**" { return segments.count > i ? bucket : nil }
                guard i < segments.count else { return nil }
                switch p {
                case ":b": bucket = segments[i]
                case "*": break
                default: guard segments[i] == p else { return nil }
                }
            }
            return segments.count == pattern.count ? bucket : nil
        }
    }

    static let rules: [Rule] = [
        Rule(.get, "/pools", .anyUser),
        Rule(.get, "/pools/default", .anyUser),
        Rule(.get, "/pools/nodes", .anyUser),
        Rule(.get, "/pools/default/buckets", .anyUser),
        Rule(.get, "/pools/default/buckets/:b", .anyInBucket),
        Rule(.get, "/pools/default/b/:b", .anyInBucket),
        Rule(.get, "/pools/default/buckets/:b/scopes", .anyInBucket),
        Rule(.post, "/pools/default/buckets/:b/scopes", .bucket(.manage)),
        Rule(.delete, "/pools/default/buckets/:b/scopes/*", .bucket(.manage)),
        Rule(.post, "/pools/default/buckets/:b/scopes/*/collections", .bucket(.manage)),
        Rule(.delete, "/pools/default/buckets/:b/scopes/*/collections/*", .bucket(.manage)),
        Rule(.post, "/pools/default/buckets/:b/controller/doFlush", .bucket(.manage)),
        Rule(.post, "/pools/default/buckets/:b/controller/compactBucket", .bucket(.manage)),
        Rule(.post, "/pools/default/buckets/:b/controller/compactDatabases", .bucket(.manage)),
        Rule(.post, "/pools/default/buckets/:b/controller/cancelBucketCompaction", .bucket(.manage)),
        Rule(.get, "/pools/default/buckets/:b/stats", .anyInBucket),
        Rule(.get, "/pools/default/buckets/:b/docs", .defaultCollection(.read)),
        Rule(.get, "/pools/default/buckets/:b/docs/*", .defaultCollection(.read)),
        Rule(.post, "/pools/default/buckets/:b/docs/*", .defaultCollection(.write)),
        Rule(.delete, "/pools/default/buckets/:b/docs/*", .defaultCollection(.write)),
        Rule(.get, "/pools/default/buckets/:b/ddocs", .defaultCollection(.read)),
        Rule(.get, "/pools/default/rebalanceProgress", .cluster(.read)),
        Rule(.get, "/pools/default/tasks", .cluster(.read)),
        Rule(.get, "/settings/autoFailover", .cluster(.read)),
        Rule(.get, "/settings/autoCompaction", .cluster(.read)),
        Rule(.get, "/settings/rbac/**", .cluster(.read)),
        Rule(.get, "/metrics", .cluster(.read)),
        Rule(.post, "/pools/default", .cluster(.manage)),
        Rule(.post, "/pools/default/buckets", .cluster(.manage)),
        Rule(.post, "/pools/default/buckets/:b", .cluster(.manage)),
        Rule(.delete, "/pools/default/buckets/:b", .cluster(.manage)),
        Rule(.post, "/controller/rebalance", .cluster(.manage)),
        Rule(.post, "/controller/stopRebalance", .cluster(.manage)),
        Rule(.post, "/controller/failOver", .cluster(.manage)),
        Rule(.post, "/controller/startGracefulFailover", .cluster(.manage)),
        Rule(.post, "/controller/setRecoveryType", .cluster(.manage)),
        Rule(.post, "/settings/autoFailover", .cluster(.manage)),
        Rule(.post, "/controller/setAutoCompaction", .cluster(.manage)),
        // Backups and restores need write and manage on the bucket (ADR 0147): Full and Cluster Admin report them.
        Rule(.post, "/controller/reportBackupTask", .cluster(.manage)),
        Rule(.post, "/settings/autoFailover/resetCount", .cluster(.manage)),
        // Couchbase: Full Admin or a Security Admin, not Cluster Admin ("all cluster features except security").
        Rule(.post, "/node/controller/reloadCertificate", .cluster(.security)),
        // Couchbase: the audit settings are security settings (ADR 0148).
        Rule(.get, "/settings/audit", .cluster(.security)),
        Rule(.get, "/settings/audit/descriptors", .cluster(.security)),
        Rule(.post, "/settings/audit", .cluster(.security)),
        Rule(.post, "/controller/startLogsCollection", .cluster(.manage)),
        Rule(.get, "/collectInfo/*", .cluster(.security)),
        Rule(.get, "/logs", .cluster(.read)),
        Rule(.get, "/diag", .cluster(.security)),
        Rule(.get, "/sasl_logs", .cluster(.security)),
        Rule(.get, "/sasl_logs/*", .cluster(.security)),
        Rule(.put, "/settings/rbac/users/local/*", .cluster(.security)),
        Rule(.delete, "/settings/rbac/users/local/*", .cluster(.security)),
        // Listed for the reader; unlisted routes need the same.
        Rule(.post, "/controller/addNode", .fullAdmin),
        Rule(.post, "/settings/web", .fullAdmin),
        Rule(.post, "/controller/rotateInternalSecret", .fullAdmin),
        Rule(.post, "/clusterInit", .fullAdmin),
        Rule(.post, "/node/controller/setupServices", .fullAdmin),
    ]

    /// What `method path` needs, and the bucket it names (empty if none).
    static func requirement(method: HTTPRequest.Method, path: String) -> (Requirement, bucket: String) {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true).map {
            PercentEncoding.decodeOrKeep(String($0))
        }
        if segments.first == "settee" { return (.never, "") }
        for rule in rules where rule.method == method {
            if let bucket = rule.match(segments) { return (rule.requirement, bucket) }
        }
        return (.fullAdmin, "")
    }

    static func allows(roles: [Role], method: HTTPRequest.Method, path: String) -> Bool {
        let (requirement, bucket) = requirement(method: method, path: path)
        switch requirement {
        case .anyUser: return true
        case .cluster(let right): return roles.allows(right)
        case .bucket(let needed): return roles.grants(onBucket: bucket).isSuperset(of: needed)
        case .anyInBucket: return roles.grantsAnywhere(inBucket: bucket).contains(.readConfig)
        case .defaultCollection(let needed):
            let d = CollectionsManifest.defaultName
            return roles.access(needed, bucket: bucket, scope: d, collection: d) == .allowed
        case .fullAdmin: return roles.contains { $0.name == .admin }
        case .never: return false
        }
    }

    /// ns_server's 403 body.
    static let forbidden = AdminResponses.json(
        .forbidden,
        .object([
            ("message", "Forbidden. User needs the following permissions"), ("permissions", .array([])),
        ]))
}
