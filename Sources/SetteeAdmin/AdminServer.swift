import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import Synchronization

/// The admin REST API (Couchbase's port-8091 shape) over a `NodeRegistry`.
///
/// Every registry call that touches disk or runs PBKDF2 goes through `BlockingPool.run`, off the event loop.
public enum AdminServer {
    /// Builds the application; run it with `runService()` (or inside a ServiceGroup).
    /// `onListening` receives the bound port once the server is up (useful with `port: 0`).
    public static func makeApplication(
        registry: NodeRegistry, host: String, port: Int, logger: Logger, cluster: ClusterManager? = nil,
        console: ConsoleOptions? = nil, idleTimeout: TimeAmount = .seconds(Limits.httpIdleTimeoutSeconds),
        maxConnections: Int = Limits.maxAdminConnections,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        makeApplication(
            router: makeRouter(registry: registry, logger: logger, cluster: cluster, console: console), host: host,
            port: port, logger: logger, server: plainServer(idleTimeout: idleTimeout), maxConnections: maxConnections,
            onListening: onListening)
    }

    /// An application serving `router` on `host:port` with `server` (`plainServer` or `tlsServer`): the admin
    /// HTTPS port (Couchbase's 18091) shares the plain port's router, wrapped in `SecureCookies`.
    public static func makeApplication<Routes: HTTPResponderBuilder>(
        router: Routes, host: String, port: Int, logger: Logger, server: HTTPServerBuilder,
        maxConnections: Int = Limits.maxAdminConnections,
        onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol where Routes.Responder.Context == AdminRequestContext {
        Application(
            router: router, server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(host, port: port), serverName: "Settee",
                availableConnectionsDelegate: ConnectionCap(maxConnections, logger: logger)),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? port) },
            logger: logger)
    }

    /// HTTP/1.1 with the idle timeout, header-size bound and request-head deadline of Limits (the one setup every
    /// HTTP port shares: `HTTPServerBuilder.settee`).
    /// `closes`: the port's count of connections closed unanswered (`/metrics`).
    public static func plainServer(
        idleTimeout: TimeAmount, headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        closes: UnansweredCloseCounts? = nil
    ) -> HTTPServerBuilder {
        .settee(idleTimeout: idleTimeout, headDeadline: headDeadline, closes: closes)
    }

    /// `plainServer` inside TLS. The handshake runs under the same head deadline and connection cap as requests.
    public static func tlsServer(
        idleTimeout: TimeAmount, headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        tls: TLSConfiguration, closes: UnansweredCloseCounts? = nil
    ) throws -> HTTPServerBuilder {
        try .tls(
            plainServer(idleTimeout: idleTimeout, headDeadline: headDeadline, closes: closes), tlsConfiguration: tls)
    }

    /// The router alone (tests drive it with HummingbirdTesting).
    /// With `console`, the web console (`/ui/`, `/` redirects there), its log-in sessions and `/metrics` too.
    /// With `tls`, `POST /node/controller/reloadCertificate` swaps the certificate the node's TLS ports present.
    /// `compactions`: the node's compaction runs, shared with its `AutoCompactionChecks` (nil: a set of its own).
    public static func makeRouter(
        registry: NodeRegistry, logger: Logger, cluster: ClusterManager? = nil, console: ConsoleOptions? = nil,
        tls: ReloadableTLSIdentity? = nil, views: (any ViewIndexFiles)? = nil, compactions: BucketCompactions? = nil
    ) -> Router<AdminRequestContext> {
        var made = AdminAPI(registry: registry, logger: logger, started: ContinuousClock.now, cluster: cluster)
        made.compactions = compactions ?? BucketCompactions(views: views, logger: logger)
        let api = made
        let router = Router(context: AdminRequestContext.self)
        router.add(middleware: AdminAuthMiddleware(registry: registry, sessions: console?.sessions))
        if let console {
            ConsoleRoutes.add(to: router, api: api, options: console)
            if let metrics = console.metrics {
                router.get("/metrics") { _, _ in
                    let body = await BlockingPool.run { metrics.render() }
                    return Response(
                        status: .ok, headers: [.contentType: PrometheusText.contentType],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
                }
            }
        } else {
            router.get("/") { _, _ in AdminResponses.text(.ok, "Settee admin API\n") }
        }
        DocumentRoutes.add(to: router, api: api)
        CollectionRoutes.add(to: router, api: api)
        ViewsRelay.add(to: router, api: api)
        router.get("/pools") { _, _ in api.pools() }
        router.get("/pools/default") { r, _ in await api.poolDefault(r) }
        router.get("/pools/nodes") { r, _ in await api.poolDefault(r) }
        router.post("/pools/default") { r, _ in try await api.updatePool(r) }
        router.post("/node/controller/setupServices") { r, _ in try await api.setupServices(r) }
        router.post("/settings/web") { r, _ in try await api.settingsWeb(r) }
        router.post("/clusterInit") { r, _ in try await api.clusterInit(r) }
        router.get("/pools/default/buckets") { r, _ in await api.listBuckets(r) }
        router.post("/pools/default/buckets") { r, _ in try await api.createBucket(r) }
        router.get("/pools/default/buckets/:name") { r, c in await api.getBucket(r, name: bucketParameter(c)) }
        router.post("/pools/default/buckets/:name") { r, c in try await api.editBucket(r, name: bucketParameter(c)) }
        router.delete("/pools/default/buckets/:name") { r, c in await api.deleteBucket(r, name: bucketParameter(c)) }
        router.post("/pools/default/buckets/:name/controller/doFlush") { _, c in
            // One cluster-wide operation when this node runs a cluster manager (ClusterManager+Flush.swift).
            guard let cluster, let name = bucketParameter(c) else {
                return await api.flushBucket(name: bucketParameter(c))
            }
            let response = FlushRoutes.response(await cluster.flushBucket(name))
            if response.status == .ok { api.audit(.bucketFlushed, [("bucket_name", .string(name))]) }
            return response
        }
        router.get("/pools/default/b/:name") { r, c in api.terseBucket(r, name: bucketParameter(c)) }
        CompactionRoutes.add(to: router, api: api)
        AutoCompactionRoutes.add(to: router, api: api)
        RBACRoutes.add(to: router, api: api)
        SecretRoutes.add(to: router, api: api)
        CertificateRoutes.add(to: router, api: api, tls: tls, cluster: cluster)
        TrustedCARoutes.add(to: router, api: api)
        AuditRoutes.add(to: router, api: api, cluster: cluster)
        if let cluster {
            ClusterRoutes.add(to: router, api: api, cluster: cluster)
            FlushRoutes.add(to: router, cluster: cluster)
        }
        return router
    }
}

/// The `:name` path parameter, percent-decoded (Hummingbird hands path parameters over raw, and bucket
/// names may contain `%`, which clients send as `%25`).
func bucketParameter(_ context: AdminRequestContext) -> String? {
    context.parameters.get("name").map(PercentEncoding.decodeOrKeep)
}

/// A query parameter's value as sent, decoded once. Hummingbird percent-decodes query values itself
/// (`URI.queryParameters`); decoding again made the bucket `a%b` (sent as `a%25b`) unknown to the internal seqno and
/// flush calls, so it could not be rebalanced ("returned 404 for seqnos of a%b"), and would have read `a%41b` as
/// `aAb` (issue 69). Every route that reads a query value goes through here.
func queryValue(_ request: Request, _ key: String) -> String? {
    request.uri.queryParameters[Substring(key)].map(String.init)
}

/// The route handlers.
struct AdminAPI: Sendable {
    let registry: NodeRegistry
    let logger: Logger
    let started: ContinuousClock.Instant
    /// nil in tests of a lone node's API.
    var cluster: ClusterManager? = nil
    /// Each bucket's recent mutation totals, for `basicStats.opsPerSec`.
    var opsRates = BucketOpsRates()
    /// The compactions running on this node (ADR 0154); nil in tests that build the API alone.
    var compactions: BucketCompactions? = nil
    /// Backups and restores their CLIs report (`POST /controller/reportBackupTask`), shown in `/pools/default/tasks`.
    let reportedTasks = ReportedTaskBoard()

    /// Forwards a topology request to the orchestrator when this node is not it (nil: handle it here).
    func forwardToOrchestrator(_ request: Request) async -> Response? {
        guard let cluster else { return nil }
        return await ClusterRoutes.forward(request, api: self, cluster: cluster)
    }

    /// Pushes the config to the other nodes after a change made here.
    func publish() async {
        await cluster?.publish()
    }

    // MARK: Helpers

    /// Reads the body (at most `Limits.maxAdminRequestBody`) and parses it; a `Response` on failure.
    func form(_ request: Request) async -> Result<FormBody, AdminError> {
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: Limits.maxAdminRequestBody) } catch {
            return .failure(
                AdminError(
                    response: AdminResponses.general(
                        .contentTooLarge, "Request body exceeds \(Limits.maxAdminRequestBody) bytes")))
        }
        var fields: FormBody
        do {
            fields = try FormBody.parse(Array(buffer.readableBytesView), contentType: request.headers[.contentType])
        } catch {
            let message: String
            switch error {
            case .malformed(let m): message = m
            }
            return .failure(AdminError(response: AdminResponses.general(.badRequest, message)))
        }
        // Query parameters count too (some clients send settings there); the body wins.
        for (k, v) in request.uri.queryParameters where fields.fields[String(k)] == nil {
            fields.fields[String(k)] = String(v)
        }
        return .success(fields)
    }

    /// The host part of the request's authority, for `newBaseUri` and self addresses.
    func requestHost(_ request: Request) -> String {
        guard let authority = request.head.authority, !authority.isEmpty else { return registry.node.host }
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            return String(authority[authority.index(after: authority.startIndex)..<close])
        }
        if let colon = authority.lastIndex(of: ":") { return String(authority[..<colon]) }
        return authority
    }

    func runtime() -> NodeRuntime {
        var items = 0
        var mem = 0
        // A node that cannot persist a bucket, or holds one that failed warmup, is not healthy.
        var healthy = true
        // A listed bucket neither open nor failed is still warming up.
        var warming = false
        for name in registry.bucketNames {
            if let stats = registry.bucket(named: name)?.stats() {
                items += stats.currItems
                mem += stats.memUsed
                if stats.diskFailure != nil { healthy = false }
            } else if registry.bucketFailure(named: name) != nil {
                healthy = false
            } else {
                warming = true
            }
        }
        // Nor is a node that fenced itself for lack of a majority (the reason is in its log and 503 answers).
        if registry.fenceReason != nil { healthy = false }
        let uptime = ContinuousClock.now - started
        return NodeRuntime(
            status: healthy ? (warming ? "warmup" : "healthy") : "unhealthy",
            uptimeSeconds: Int(uptime.components.seconds),
            memoryTotal: Int(ProcessInfo.processInfo.physicalMemory), memoryFree: Self.memAvailable(),
            cpuCount: ProcessInfo.processInfo.activeProcessorCount, currItems: items, memUsed: mem)
    }

    /// `MemAvailable` from /proc/meminfo in bytes (0 when unknown).
    static func memAvailable() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("MemAvailable:") {
            let kb = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return kb * 1024
        }
        return 0
    }

    func basicStats(_ name: String) -> BucketBasicStats {
        guard let s = registry.bucket(named: name)?.stats() else {
            var failed = BucketBasicStats()
            if let reason = registry.bucketFailure(named: name) {
                failed.status = "failed"
                failed.statusReason = "warmup failed: \(reason)"
            }
            return failed
        }
        var mutations: Int64 = 0
        if let map = registry.clusterMap(bucket: name), let engine = registry.bucket(named: name) {
            for i in 0..<map.numVBuckets where map.isActiveHere(VBucketID(UInt16(i))) {
                mutations &+= Int64(truncatingIfNeeded: engine.seqnoInfo(VBucketID(UInt16(i))).highSeqno.rawValue)
            }
        }
        var stats = BucketBasicStats(
            opsPerSec: opsRates.record(bucket: name, total: mutations), diskFetches: s.bgFetched,
            itemCount: s.currItems, diskUsed: s.diskUsed,
            dataUsed: s.diskUsed, memUsed: s.memUsed, vbActiveNumNonResident: s.nonResidentItems)
        stats.unpersistedItems = s.flusherTodo
        if let failure = s.diskFailure {
            stats.status = "persistenceFailing"
            stats.statusReason = failure
        } else if s.repairedRows > 0 {
            stats.statusReason = "repaired at warmup: \(s.repairedRows) corrupt rows skipped and deleted"
        }
        return stats
    }

    /// "newBaseUri" of `/settings/web` and `/clusterInit`.
    func newBaseURI(_ request: Request) -> JSON {
        ["newBaseUri": .string("http://\(hostPort(requestHost(request), registry.node.adminPort))/")]
    }

    // MARK: Pools

    func pools() -> Response {
        let initialized = registry.isInitialized
        return AdminResponses.json(
            .ok,
            AdminJSON.pools(
                clusterUUID: initialized ? registry.clusterIdentity.uuid : nil,
                isAdmin: initialized && !AnonymousAccess.isAnonymous))
    }

    func poolDefault(_ request: Request) async -> Response {
        guard registry.isInitialized else { return AdminResponses.json(.notFound, "unknown pool") }
        let registry = self.registry
        let api = self
        // Without credentials, only buckets without a password are named (ADR 0015); a user's, only theirs.
        let anonymous = AnonymousAccess.isAnonymous
        let roles = CallerRoles.roles
        let body = await BlockingPool.run {
            let snapshot = registry.clusterSnapshot
            var nodes = snapshot.members.map(\.node)
            let thisNode: Int
            if let i = nodes.firstIndex(where: { $0.otpNode == registry.node.otpNode }) {
                nodes[i] = registry.node
                thisNode = i
            } else {
                nodes.append(registry.node)
                thisNode = nodes.count - 1
            }
            var members: [NodeID: (membership: String, status: String, recoveryType: String)] = [:]
            for m in snapshot.members {
                members[m.id] = (
                    m.membership.rawValue, api.cluster?.status(of: m.id) ?? "healthy", m.recoveryType ?? "none"
                )
            }
            let running = api.cluster?.rebalance.withLock { $0.running } ?? false
            let balanced = snapshot.members.allSatisfy { $0.membership == .active }
            return AdminJSON.poolDefault(
                cluster: registry.clusterIdentity, nodes: nodes, thisNode: thisNode, runtime: api.runtime(),
                selfAddress: .configured,
                buckets: registry.allBucketSettings.filter {
                    (!anonymous || $0.authType == .none) && CallerRoles.mayList(bucket: $0.name, roles: roles)
                },
                memoryQuotaMB: registry.memoryQuotaMB, maxBucketCount: Limits.maxBuckets, members: members,
                rebalanceStatus: running ? "running" : "none", balanced: balanced && !running
            ).serialized()
        }
        return AdminResponses.bytes(.ok, body)
    }

    /// `POST /pools/default`: `memoryQuota` (MiB) and `clusterName`; other quotas are accepted and ignored
    /// (this node runs no index/FTS/analytics service).
    func updatePool(_ request: Request) async throws -> Response {
        // A cluster-wide change (it takes a new config revision): made by the orchestrator, with a majority.
        if let forwarded = await forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        var errors: [(String, String)] = []
        let quota = Self.memoryQuota(form, errors: &errors)
        if let q = quota {
            let used = registry.allBucketSettings.reduce(0) { $0 + $1.ramQuotaMB }
            if q < used {
                errors.append(
                    ("memoryQuota", "The data service quota cannot be set below the total bucket quotas (\(used) MiB).")
                )
            }
        }
        guard errors.isEmpty else { return AdminResponses.fieldErrors(errors) }
        let name = form["clusterName"]
        let registry = self.registry
        // Only a rename takes a new config revision (configs carry the name): it claims an epoch (ADR 0039).
        guard let name, name != registry.clusterIdentity.name else {
            try await BlockingPool.run { [quota] in try registry.updateClusterSettings(memoryQuotaMB: quota) }
            return AdminResponses.empty(.ok)
        }
        do {
            try await configChange { [quota] claim in
                try registry.updateClusterSettings(clusterName: name, memoryQuotaMB: quota, claim: claim)
            }
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        }
        await publish()
        return AdminResponses.empty(.ok)
    }

    static let knownServices: Set<String> = ["kv", "n1ql", "index", "fts", "cbas", "eventing", "backup"]

    /// Splits and checks a `services` value; the error text is ns_server's.
    static func parseServices(_ value: String?) -> Result<[String], AdminError> {
        guard let value, !value.isEmpty else {
            return .failure(
                AdminError(response: AdminResponses.fieldErrors([("services", "The value must be supplied")])))
        }
        let services = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        let unknown = services.filter { !knownServices.contains($0) }
        if !unknown.isEmpty {
            let list = unknown.map { "\"\($0)\"" }.joined(separator: ",")
            return .failure(
                AdminError(response: AdminResponses.fieldErrors([("services", "Unknown services: [\(list)]")])))
        }
        return .success(services)
    }

    func setupServices(_ request: Request) async throws -> Response {
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let services: [String]
        switch Self.parseServices(form["services"]) {
        case .success(let s): services = s
        case .failure(let e): return e.response
        }
        let registry = self.registry
        try await BlockingPool.run { try registry.updateClusterSettings(services: services) }
        return AdminResponses.empty(.ok)
    }

    /// Checks `username`/`password`/`port` of `/settings/web` and `/clusterInit`.
    func credentialErrors(_ form: FormBody, portRequired: Bool) -> [(String, String)] {
        var errors: [(String, String)] = []
        let supplied = "The value must be supplied"
        if let u = form["username"], !u.isEmpty {
            if u.count > 128 { errors.append(("username", "Username must not be longer than 128 characters.")) }
        } else {
            errors.append(("username", supplied))
        }
        if let p = form["password"], !p.isEmpty {
            if p.count < 6 { errors.append(("password", "The password must be at least 6 characters long.")) }
        } else {
            errors.append(("password", supplied))
        }
        if let port = form["port"] {
            // The listener cannot move while running: only this node's own port (or SAME) is accepted.
            if port != "SAME" && Int(port) != registry.node.adminPort {
                errors.append(
                    ("port", "Port must be SAME or \(registry.node.adminPort): this node cannot change its admin port.")
                )
            }
        } else if portRequired {
            errors.append(("port", supplied))
        }
        return errors
    }

    func settingsWeb(_ request: Request) async throws -> Response {
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let errors = credentialErrors(form, portRequired: true)
        guard errors.isEmpty, let user = form["username"], let password = form["password"] else {
            return AdminResponses.fieldErrors(errors)
        }
        let registry = self.registry
        // A password change rotates the internal secret in a new cluster revision: every member must hear of it.
        let rotated: Bool
        do {
            rotated = try await configChange { claim in
                try registry.initialize(username: user, password: password, claim: claim)
            }
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        }
        if rotated { await publish() }
        return AdminResponses.json(.ok, newBaseURI(request))
    }

    /// `POST /clusterInit`: services, memoryQuota, clusterName, then the credentials, in one call.
    /// The optional `memoryQuota` field (MiB), with Couchbase-style error reporting.
    static func memoryQuota(_ form: FormBody, errors: inout [(String, String)]) -> Int? {
        guard let q = form["memoryQuota"] else { return nil }
        if let n = Int(q), n >= Limits.minBucketRamQuotaMB, n <= Limits.maxBucketRamQuotaMB { return n }
        errors.append(
            (
                "memoryQuota",
                "The data service quota must be an integer of \(Limits.minBucketRamQuotaMB) to "
                    + "\(Limits.maxBucketRamQuotaMB) MiB."
            ))
        return nil
    }

    func clusterInit(_ request: Request) async throws -> Response {
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        var errors = credentialErrors(form, portRequired: false)
        var services: [String]? = nil
        if form["services"] != nil {
            switch Self.parseServices(form["services"]) {
            case .success(let s): services = s
            case .failure: errors.append(("services", "Unknown services in \(form["services"] ?? "")"))
            }
        }
        let quota = Self.memoryQuota(form, errors: &errors)
        guard errors.isEmpty, let user = form["username"], let password = form["password"] else {
            return AdminResponses.fieldErrors(errors)
        }
        let name = form["clusterName"]
        let registry = self.registry
        let cluster = self.cluster
        try await BlockingPool.run { [quota, services] in
            // A new config revision (name, credentials) this node commits alone: loaded into its brain after.
            let write = {
                try registry.updateClusterSettings(clusterName: name, memoryQuotaMB: quota, services: services)
                try registry.initialize(username: user, password: password)
            }
            if let cluster { try cluster.stored(write) } else { try write() }
        }
        return AdminResponses.json(.ok, newBaseURI(request))
    }

    // MARK: Buckets

    func listBuckets(_ request: Request) async -> Response {
        let api = self
        // Without credentials only buckets without a password are listed (ADR 0015); a user's, only theirs.
        let anonymous = AnonymousAccess.isAnonymous
        let roles = CallerRoles.roles
        @Sendable func listed(_ name: String) -> Bool {
            (!anonymous || AnonymousAccess.mayRead(bucket: name, registry: registry))
                && CallerRoles.mayList(bucket: name, roles: roles)
        }
        // Counts are the bucket's over the cluster (each node's active share), unless a peer asks for ours.
        var gathered: [String: PeerShares] = [:]
        if request.uri.queryParameters["local"] == nil {
            for name in registry.bucketNames where listed(name) {
                guard let map = registry.clusterMap(bucket: name) else { continue }
                gathered[name] = await peerShares(bucket: name, map: map)
            }
        }
        let shares = gathered
        let body = await BlockingPool.run {
            let rt = api.runtime()
            let buckets: [JSON] = api.registry.bucketNames.compactMap { name in
                if !listed(name) { return nil }
                guard let map = api.registry.clusterMap(bucket: name) else { return nil }
                let local = api.basicStats(name)
                return AdminJSON.bucket(
                    map, runtime: rt, stats: shares[name]?.total(local) ?? local, selfAddress: .configured,
                    nodeStatus: api.nodeStatuses(map, runtime: rt, missing: shares[name]?.missing ?? []))
            }
            return JSON.array(buckets).serialized()
        }
        return AdminResponses.bytes(.ok, body)
    }

    func getBucket(_ request: Request, name: String?) async -> Response {
        guard let name, let current = registry.clusterMap(bucket: name) else {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        }
        // A `bucket_uuid` from an older incarnation of the name (the `uri` field carries it) is not this bucket.
        if let asked = request.uri.queryParameters["bucket_uuid"], asked != current.bucket.uuid {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        }
        let api = self
        // The bucket's counts over the cluster, unless a peer asks for this node's share (`local=1`).
        let shares = request.uri.queryParameters["local"] == nil ? await peerShares(bucket: name, map: current) : nil
        let body: [UInt8]? = await BlockingPool.run {
            guard let map = api.registry.clusterMap(bucket: name) else { return nil }
            let rt = api.runtime()
            let local = api.basicStats(name)
            return AdminJSON.bucket(
                map, runtime: rt, stats: shares?.total(local) ?? local, selfAddress: .configured,
                nodeStatus: api.nodeStatuses(map, runtime: rt, missing: shares?.missing ?? [])
            )
            .serialized()
        }
        guard let body else { return AdminResponses.text(.notFound, "Requested resource not found.\r\n") }
        return AdminResponses.bytes(.ok, body)
    }

    func terseBucket(_ request: Request, name: String?) -> Response {
        guard let name, let map = registry.clusterMap(bucket: name) else {
            return AdminResponses.json(.notFound, "Bucket not found")
        }
        // Over HTTP the node's real address stands in for `$HOST`, as ns_server substitutes its local address.
        let body = ConfigJSON.terseBucket(map, cluster: registry.clusterIdentity, selfAddress: .configured)
        return AdminResponses.json(.ok, body)
    }

    /// ns_server's `summaries` object for bucket-create replies.
    func summaries(thisQuotaMB: Int?) -> JSON {
        // Quotas come from request forms (unvalidated when the reply reports their errors): clamp each
        // before turning MiB into bytes so the products cannot overflow.
        let mib = 1024 * 1024
        func bytes(_ mb: Int) -> Int { min(max(mb, 0), Limits.maxBucketRamQuotaMB) * mib }
        let others = registry.allBucketSettings.reduce(0) { $0 + bytes($1.ramQuotaMB) }
        let total = bytes(registry.memoryQuotaMB)
        let this = bytes(thisQuotaMB ?? 0)
        var diskTotal = 0
        var diskFree = 0
        if let attrs = try? FileManager.default.attributesOfFileSystem(forPath: registry.dataDirectory) {
            diskTotal = (attrs[.systemSize] as? NSNumber)?.intValue ?? 0
            diskFree = (attrs[.systemFreeSize] as? NSNumber)?.intValue ?? 0
        }
        return [
            "ramSummary": [
                "total": .int(total), "otherBuckets": .int(others), "nodesCount": 1,
                "perNodeMegs": .int(thisQuotaMB ?? 0), "thisAlloc": .int(this), "thisUsed": 0,
                "free": .int(total - others - this),
            ],
            "hddSummary": [
                "total": .int(diskTotal), "otherData": .int(diskTotal - diskFree), "otherBuckets": 0, "thisUsed": 0,
                "free": .int(diskFree),
            ],
        ]
    }

    func createBucket(_ request: Request) async throws -> Response {
        if let forwarded = await forwardToOrchestrator(request) { return forwarded }
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let uuid = RandomID.hex128()
        var validation = BucketValidation.validate(form, existingNames: registry.bucketNames, uuid: uuid)
        let requestedQuota = Int(form["ramQuota"] ?? form["ramQuotaMB"] ?? "")
        if let s = validation.settings, registry.memoryQuotaMB > 0 {
            let others = registry.allBucketSettings.reduce(0) { $0 + $1.ramQuotaMB }
            if others + s.ramQuotaMB > registry.memoryQuotaMB {
                validation.errors.append(
                    ("ramQuota", "RAM quota specified is too large to be provisioned into this cluster."))
                validation.settings = nil
            }
        }
        guard validation.errors.isEmpty, let settings = validation.settings else {
            return AdminResponses.fieldErrors(
                validation.errors, extra: [("summaries", summaries(thisQuotaMB: requestedQuota))])
        }
        if request.uri.queryParameters["just_validate"] == "1" {
            return AdminResponses.json(.ok, ["errors": [:], "summaries": summaries(thisQuotaMB: settings.ramQuotaMB)])
        }
        if registry.bucketNames.count >= Limits.maxBuckets {
            return AdminResponses.general(.badRequest, "Cannot create more than \(Limits.maxBuckets) buckets")
        }
        let registry = self.registry
        do {
            try await configChange { claim in try registry.createBucket(settings, claim: claim) }
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        } catch RegistryError.alreadyExists {
            return AdminResponses.fieldErrors([("name", "Bucket with given name already exists")])
        } catch RegistryError.tooMany {
            return AdminResponses.general(.badRequest, "Cannot create more than \(Limits.maxBuckets) buckets")
        } catch {
            logger.error("bucket creation failed", metadata: ["bucket": "\(settings.name)", "error": "\(error)"])
            return AdminResponses.general(.internalServerError, "Bucket creation failed: \(error)")
        }
        audit(
            .bucketCreated,
            [
                ("bucket_name", .string(settings.name)), ("ram_quota_mb", .int(settings.ramQuotaMB)),
                ("num_replicas", .int(settings.replicaNumber)),
            ])
        await publish()
        let location = "/pools/default/buckets/\(PercentEncoding.encode(settings.name))"
        return AdminResponses.empty(.accepted, headers: [.location: location])
    }

    /// `POST /pools/default/buckets/NAME`: edits `flushEnabled` and `replicaNumber`; 200 on success.
    func editBucket(_ request: Request, name: String?) async throws -> Response {
        if let forwarded = await forwardToOrchestrator(request) { return forwarded }
        guard let name, let current = registry.bucketSettings(named: name) else {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        }
        let form: FormBody
        switch await self.form(request) {
        case .success(let f): form = f
        case .failure(let e): return e.response
        }
        let edit = BucketValidation.validateEdit(form, current: current)
        guard edit.errors.isEmpty else {
            return AdminResponses.fieldErrors(
                edit.errors, extra: [("summaries", summaries(thisQuotaMB: current.ramQuotaMB))])
        }
        if request.uri.queryParameters["just_validate"] == "1" {
            return AdminResponses.json(.ok, ["errors": [:], "summaries": summaries(thisQuotaMB: current.ramQuotaMB)])
        }
        let registry = self.registry
        do {
            try await configChange { claim in
                try registry.updateBucket(
                    named: name, flushEnabled: edit.flushEnabled, replicaNumber: edit.replicaNumber,
                    purgeInterval: edit.purgeInterval, claim: claim)
            }
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        } catch RegistryError.notFound {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        }
        audit(.bucketModified, [("bucket_name", .string(name))])
        await publish()
        return AdminResponses.empty(.ok)
    }

    func deleteBucket(_ request: Request, name: String?) async -> Response {
        if let forwarded = await forwardToOrchestrator(request) { return forwarded }
        guard let name else { return AdminResponses.text(.notFound, "The bucket to be deleted was not found.\r\n") }
        let registry = self.registry
        do {
            try await configChange { claim in try registry.deleteBucket(named: name, claim: claim) }
            audit(.bucketDeleted, [("bucket_name", .string(name))])
            await publish()
            return AdminResponses.empty(.ok)
        } catch let refused as ClusterRequestError {
            return Self.refusal(refused)
        } catch RegistryError.notFound {
            return AdminResponses.text(.notFound, "The bucket to be deleted was not found.\r\n")
        } catch {
            logger.error("bucket deletion incomplete", metadata: ["bucket": "\(name)", "error": "\(error)"])
            return AdminResponses.general(
                .internalServerError, "Bucket deletion not yet complete, but will continue.\r\n")
        }
    }

    func flushBucket(name: String?) async -> Response {
        guard let name else { return AdminResponses.text(.notFound, "Requested resource not found.\r\n") }
        let registry = self.registry
        do {
            try await BlockingPool.run { try registry.flushBucket(named: name) }
            audit(.bucketFlushed, [("bucket_name", .string(name))])
            return AdminResponses.empty(.ok)
        } catch RegistryError.notFound {
            return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
        } catch RegistryError.flushDisabled {
            return AdminResponses.general(.badRequest, "Flush is disabled for the bucket")
        } catch {
            logger.error("bucket flush failed", metadata: ["bucket": "\(name)", "error": "\(error)"])
            return AdminResponses.general(.gatewayTimeout, "Flush failed or timed out")
        }
    }
}

/// A reply that ends a handler early.
struct AdminError: Error {
    let response: Response
}
