import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeControl
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage

/// Cluster endpoints: Couchbase's `/controller/...` and `/pools/default/rebalanceProgress`, plus the internal
/// API nodes use with each other (`/settee/internal/...`, authenticated as `NodeRegistry.internalUsername`).
enum ClusterRoutes {
    static func add(to router: Router<AdminRequestContext>, api: AdminAPI, cluster: ClusterManager) {
        let registry = api.registry
        // Internal.
        router.get("/settee/internal/node") { _, _ in
            let body = (try? JSONEncoder().encode(registry.node)).map { Array($0) } ?? []
            return AdminResponses.bytes(.ok, body)
        }
        router.get("/settee/internal/heartbeat") { request, _ in
            if let from = queryValue(request, "from"),
                registry.clusterSnapshot.members.contains(where: { $0.id.rawValue == from })
            {
                cluster.heartbeatReceived(from: NodeID(from))
            }
            let s = registry.clusterSnapshot
            return AdminResponses.json(
                .ok,
                [
                    "otpNode": .string(registry.node.otpNode.rawValue), "epoch": .int(s.revision.epoch),
                    "rev": .int(s.revision.rev), "cluster": .string(s.identity.uuid),
                    "sees": .array(cluster.reachablePeers().map(\.rawValue).sorted().map { .string($0) }),
                    "orchestrator": s.orchestrator.map { .string($0.rawValue) } ?? .null,
                    "promised": .int(registry.epochPromise?.epoch ?? 0),
                ])
        }
        // A candidate's request for a cluster epoch, decided by the brain (`EpochRules.grants`): granted promises are
        // persisted before the answer.
        router.post("/settee/internal/promise") { request, _ in
            guard let body = await api.body(request), let json = try? JSON.parse(body),
                let epoch = json["epoch"]?.int64Value, let candidate = json["candidate"]?.stringValue,
                let stampEpoch = json["stampEpoch"]?.int64Value, let stampRev = json["stampRev"]?.int64Value
            else { return AdminResponses.general(.badRequest, "epoch, candidate, stampEpoch and stampRev required") }
            let stamp = ConfigStamp(
                epoch: stampEpoch, rev: stampRev, publisher: json["stampPublisher"]?.stringValue.map { NodeID($0) })
            // Refused before anything is persisted: a promise of Int64.max made the node refuse every config for good.
            guard ConfigStamp.isValidEpoch(epoch), stamp.isWithinLimits else {
                return AdminResponses.general(
                    .badRequest,
                    "epoch, stampEpoch and stampRev must be within 0...\(Limits.maxClusterEpoch)")
            }
            do {
                let granted = try await BlockingPool.run {
                    try cluster.promiseRequested(from: NodeID(candidate), epoch: epoch, stamp: stamp)
                }
                return AdminResponses.json(
                    .ok, ["granted": .bool(granted), "promised": .int(registry.epochPromise?.epoch ?? 0)])
            } catch {
                return AdminResponses.general(.internalServerError, "\(error)")
            }
        }
        // A failover's orchestrator asks its victim to stop serving before it samples the survivors' seqnos
        // (ADR 0120); answered once the fence is applied.
        router.post("/settee/internal/fence") { request, _ in
            guard let body = await api.body(request), let json = try? JSON.parse(body),
                let epoch = json["epoch"]?.int64Value, let from = json["from"]?.stringValue
            else { return AdminResponses.general(.badRequest, "epoch and from required") }
            guard ConfigStamp.isValidEpoch(epoch) else {
                return AdminResponses.general(.badRequest, "epoch must be within 0...\(Limits.maxClusterEpoch)")
            }
            let fenced = await cluster.fenceRequested(from: NodeID(from), epoch: epoch)
            return AdminResponses.json(.ok, ["fenced": .bool(fenced)])
        }
        router.get("/settee/internal/config") { _, _ in
            AdminResponses.bytes(.ok, try registry.clusterDocument())
        }
        router.post("/settee/internal/config") { request, _ in
            guard let body = await api.body(request) else {
                return AdminResponses.general(.contentTooLarge, "config too large")
            }
            do {
                let adopted = try await BlockingPool.run { try cluster.offerDocument(body) }
                if adopted { await cluster.tickOnce() }
                let s = registry.clusterSnapshot
                return AdminResponses.json(
                    .ok, ["adopted": .bool(adopted), "epoch": .int(s.revision.epoch), "rev": .int(s.revision.rev)])
            } catch {
                return AdminResponses.general(.badRequest, "\(error)")
            }
        }
        router.post("/settee/internal/join") { request, _ in
            guard let body = await api.body(request) else {
                return AdminResponses.general(.contentTooLarge, "config too large")
            }
            guard registry.bucketNames.isEmpty else {
                return AdminResponses.general(.badRequest, "Node is not empty: it holds buckets; delete them first.")
            }
            do {
                // Joining is no adoption: this node takes the cluster's document as it is, then its brain loads it.
                try await BlockingPool.run {
                    try cluster.stored {
                        try registry.storeClusterDocument(body, promise: registry.epochPromise, join: true)
                    }
                }
            } catch {
                return AdminResponses.general(.badRequest, "\(error)")
            }
            let info = (try? JSONEncoder().encode(registry.node)).map { Array($0) } ?? []
            return AdminResponses.bytes(.ok, info)
        }
        router.post("/settee/internal/leave") { _, _ in
            do {
                try await BlockingPool.run { try cluster.stored { try registry.leaveCluster() } }
                return AdminResponses.empty(.ok)
            } catch {
                return AdminResponses.general(.internalServerError, "\(error)")
            }
        }
        router.get("/settee/internal/seqnos") { request, _ in
            guard let name = queryValue(request, "bucket"),
                let engine = registry.bucket(named: name)
            else { return AdminResponses.general(.notFound, "no such bucket") }
            var rows: [SeqnoReport.Row] = []
            let count = registry.bucketSettings(named: name)?.numVBuckets ?? 0
            // `persist=3,17,…`: vBuckets a rebalance waits to see persisted here; written in the flusher's next
            // express batch. Entries that are not a vBucket of the bucket are ignored; at most `count` are read.
            if let list = request.uri.queryParameters["persist"] {
                for part in list.split(separator: ",").prefix(count) {
                    if let i = Int(part), i >= 0, i < count { engine.persistSoon(VBucketID(UInt16(i))) }
                }
            }
            rows.reserveCapacity(count)
            for i in 0..<count {
                let info = engine.seqnoInfo(VBucketID(UInt16(i)))
                rows.append(
                    SeqnoReport.Row(
                        state: Self.reported(info.state), high: info.highSeqno.rawValue,
                        persisted: info.persistedSeqno.rawValue))
            }
            return AdminResponses.bytes(.ok, SeqnoReport.json(rows).serialized())
        }

        // A node holding active vBuckets after an unclean shutdown asks the orchestrator to hand those its replicas
        // are ahead of to them (ADR 0033).
        router.post("/settee/internal/handover") { request, _ in
            guard let body = await api.body(request), let json = try? JSON.parse(body),
                let bucket = json["bucket"]?.stringValue, let from = json["from"]?.stringValue,
                let items = json["moves"]?.arrayValue, items.count <= Int(UInt16.max)
            else { return AdminResponses.general(.badRequest, "bucket, from and moves required") }
            var moves: [(vb: Int, to: NodeID)] = []
            for item in items {
                guard let vb = item["vb"]?.intValue, let to = item["to"]?.stringValue else {
                    return AdminResponses.general(.badRequest, "each move needs vb and to")
                }
                moves.append((vb, NodeID(to)))
            }
            guard cluster.orchestrator()?.id == registry.node.otpNode else {
                return AdminResponses.general(.conflict, "not the orchestrator")
            }
            switch await cluster.handOver(bucket: bucket, from: NodeID(from), moves: moves) {
            case .success(let n): return AdminResponses.json(.ok, ["applied": .int(n)])
            case .failure(let e): return AdminResponses.general(.serviceUnavailable, "\(e)")
            }
        }

        addAutoFailover(to: router, api: api, cluster: cluster)
        LogsCollectionRoutes.add(to: router, api: api, cluster: cluster)
        // Couchbase's controllers. Topology changes run on the orchestrator: forwarded when this node is not it.
        router.post("/controller/addNode") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            guard let hostname = form["hostname"], !hostname.isEmpty else {
                return AdminResponses.json(.badRequest, ["Hostname is required."])
            }
            // Decided before anything is sent: pinned HTTPS, or plain HTTP to loopback / with allowInsecure (ADR 0030).
            let target: AddNodeTarget
            let pin = form["tlsFingerprint"]
            let insecure = form["allowInsecure"] == "true"
            switch AddNodeTarget.parse(
                hostname: hostname, tlsFingerprint: pin, allowInsecure: insecure, clusterTrustsCAs: cluster.trustsCAs)
            {
            case .success(let t): target = t
            case .failure(let refusal): return AdminResponses.json(.badRequest, [.string(refusal.message)])
            }
            let result = await cluster.addNode(target, username: form["user"] ?? "", password: form["password"] ?? "")
            switch result {
            case .success(let id): return AdminResponses.json(.ok, ["otpNode": .string(id.rawValue)])
            case .failure(let e): return response(e)
            }
        }
        router.post("/controller/rebalance") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            let known = (form["knownNodes"] ?? "").split(separator: ",").map { String($0) }
            let ejected = (form["ejectedNodes"] ?? "").split(separator: ",").map { String($0) }
            switch await cluster.startRebalance(knownNodes: known, ejectedNodes: ejected) {
            case .success: return AdminResponses.empty(.ok)
            case .failure(let e): return response(e)
            }
        }
        router.post("/controller/stopRebalance") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            cluster.stopRebalance()
            return AdminResponses.empty(.ok)
        }
        router.get("/pools/default/rebalanceProgress") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            return AdminResponses.json(.ok, cluster.rebalanceProgressJSON())
        }
        router.get("/pools/default/tasks") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            // This node's compactions (ADR 0154) and the backups and restores reported to it beside the cluster's
            // tasks.
            let tasks =
                (cluster.tasksJSON().arrayValue ?? []) + (api.compactions?.tasksJSON() ?? [])
                + api.reportedTasks.tasksJSON()
            return AdminResponses.json(.ok, .array(tasks))
        }
        // A backup's or restore's progress, from the `settee` CLI that runs it (issue 72 item 4): kept by the
        // orchestrator, which answers `/pools/default/tasks`.
        router.post("/controller/reportBackupTask") { request, _ in
            guard let body = await api.body(request) else {
                return AdminResponses.general(.contentTooLarge, "Request body too large")
            }
            if let forwarded = await forward(request, api: api, cluster: cluster, body: body) { return forwarded }
            let f = (try? FormBody.parse(body, contentType: request.headers[.contentType]))?.fields ?? [:]
            func number(_ k: String) -> Int? { f[k].flatMap { Int($0) } }
            guard let progress = number("progress"), let items = number("items"), let bytes = number("bytes") else {
                return AdminResponses.fieldErrors([("progress", "progress, items and bytes must be integers")])
            }
            let report = ReportedTasks.Report(
                id: f["id"] ?? "", kind: f["kind"] ?? "", bucket: f["bucket"] ?? "", name: f["name"] ?? "",
                status: f["status"] ?? "", progress: progress, items: items, bytes: bytes, message: f["message"] ?? "")
            if let refusal = report.refusal { return AdminResponses.fieldErrors([refusal]) }
            api.reportedTasks.record(report)
            return AdminResponses.empty(.ok)
        }
        router.post("/controller/failOver") { request, _ in
            guard let body = await api.body(request) else {
                return AdminResponses.general(.contentTooLarge, "Request body too large")
            }
            let fields = (try? FormBody.parse(body, contentType: request.headers[.contentType]))?.fields ?? [:]
            let node = fields["otpNode"] ?? request.uri.queryParameters["otpNode"].map { String($0) } ?? ""
            guard !node.isEmpty else {
                return AdminResponses.json(.badRequest, ["No server specified."])
            }
            // Forwarded unless the orchestrator is the node being failed over (it is presumably dead).
            if cluster.orchestrator()?.id.rawValue != node,
                let forwarded = await forward(request, api: api, cluster: cluster, body: body, checkQuorum: false)
            {
                return forwarded
            }
            let allowUnsafe =
                (fields["allowUnsafe"] ?? request.uri.queryParameters["allowUnsafe"].map { String($0) }) == "true"
            switch await cluster.failOver(NodeID(node), allowUnsafe: allowUnsafe) {
            case .success:
                api.audit(.failover, [("otp_node", .string(node)), ("type", .string("hard"))])
                return AdminResponses.empty(.ok)
            case .failure(let e): return response(e)
            }
        }
        router.post("/controller/startGracefulFailover") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster, checkQuorum: false) {
                return forwarded
            }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            guard let node = form["otpNode"], !node.isEmpty else {
                return AdminResponses.json(.badRequest, ["No server specified."])
            }
            // Replicas are followed continuously, so promoting them is the graceful path too.
            switch await cluster.failOver(NodeID(node)) {
            case .success:
                api.audit(.failover, [("otp_node", .string(node)), ("type", .string("graceful"))])
                return AdminResponses.empty(.ok)
            case .failure(let e): return response(e)
            }
        }
        router.post("/controller/setRecoveryType") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            switch await cluster.setRecoveryType(NodeID(form["otpNode"] ?? ""), form["recoveryType"] ?? "") {
            case .success: return AdminResponses.empty(.ok)
            case .failure(let e): return response(e)
            }
        }
    }

    /// `GET/POST /settings/autoFailover` and `POST /settings/autoFailover/resetCount`.
    static func addAutoFailover(to router: Router<AdminRequestContext>, api: AdminAPI, cluster: ClusterManager) {
        let registry = api.registry
        router.get("/settings/autoFailover") { _, _ in
            let s = registry.autoFailover
            return AdminResponses.json(
                .ok,
                [
                    "enabled": .bool(s.enabled), "timeout": .int(s.timeout), "count": .int(s.count),
                    "maxCount": .int(s.maxCount),
                ])
        }
        router.post("/settings/autoFailover") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            var errors: [(String, String)] = []
            let enabled: Bool?
            switch form["enabled"] {
            case "true": enabled = true
            case "false": enabled = false
            case nil: enabled = nil
            default:
                enabled = nil
                errors.append(("enabled", "The value of \"enabled\" must be true or false"))
            }
            var timeout: Int? = nil
            if let t = form["timeout"] {
                if let n = Int(t),
                    (AutoFailoverSettings.minimumTimeout...AutoFailoverSettings.maximumTimeout).contains(n)
                {
                    timeout = n
                } else {
                    errors.append(
                        (
                            "timeout",
                            "The value of \"timeout\" must be a positive integer in a range from "
                                + "\(AutoFailoverSettings.minimumTimeout) to \(AutoFailoverSettings.maximumTimeout)"
                        ))
                }
            }
            guard errors.isEmpty else { return AdminResponses.fieldErrors(errors) }
            let newTimeout = timeout
            do {
                try await cluster.claimedChange { claim in
                    try registry.updateAutoFailover(claim: claim) { s in
                        if let enabled { s.enabled = enabled }
                        if let newTimeout { s.timeout = newTimeout }
                        if let m = form["maxCount"].flatMap({ Int($0) }), m >= 1 { s.maxCount = m }
                    }
                }
            } catch let refused as ClusterRequestError {
                return response(refused)
            }
            await cluster.publish()
            return AdminResponses.empty(.ok)
        }
        router.post("/settings/autoFailover/resetCount") { request, _ in
            if let forwarded = await forward(request, api: api, cluster: cluster) { return forwarded }
            do {
                try await cluster.claimedChange { claim in
                    try registry.updateAutoFailover(claim: claim) { $0.count = 0 }
                }
            } catch let refused as ClusterRequestError {
                return response(refused)
            }
            await cluster.publish()
            return AdminResponses.empty(.ok)
        }
    }

    /// A vBucket's engine state as the seqnos report names it (one case each, so a new state does not compile
    /// until it is named here).
    static func reported(_ state: VBucketState) -> SeqnoReport.State {
        switch state {
        case .active: return .active
        case .replica: return .replica
        case .pending: return .pending
        case .dead: return .dead
        }
    }

    static func response(_ error: ClusterRequestError) -> Response {
        switch error {
        case .badRequest(let messages): return AdminResponses.json(.badRequest, .array(messages.map { .string($0) }))
        case .fieldErrors(let errors): return AdminResponses.fieldErrors(errors)
        case .mismatch: return AdminResponses.json(.badRequest, ["mismatch": 1])
        case .emptyKnownNodes: return AdminResponses.json(.badRequest, ["empty_known_nodes": 1])
        case .rebalanceRunning: return AdminResponses.json(.serviceUnavailable, ["Rebalance running."])
        case .noQuorum(let reason): return AdminResponses.json(.serviceUnavailable, [.string(reason)])
        case .internalError(let m): return AdminResponses.json(.internalServerError, [.string(m)])
        }
    }

    /// Relays `request` to the orchestrator when this node is not it; nil when this node should handle it.
    /// `body`: the request body when the caller already read it (a body can be read only once).
    /// A change this node would handle itself is answered 503 while it does not reach a majority of the cluster,
    /// unless `checkQuorum` is false (failover, which applies its own rule).
    static func forward(
        _ request: Request, api: AdminAPI, cluster: ClusterManager, body: [UInt8]? = nil, checkQuorum: Bool = true
    ) async -> Response? {
        guard let orchestrator = cluster.orchestrator(), orchestrator.id != api.registry.node.otpNode else {
            // Handled here: a change (not a read) needs this node to reach a majority of the cluster.
            if checkQuorum, request.method != .get, let problem = cluster.quorumProblem() {
                return AdminResponses.json(.serviceUnavailable, [.string(problem)])
            }
            return nil
        }
        var request = request
        let bytes: [UInt8]
        if let body {
            bytes = body
        } else {
            guard let buffer = try? await request.collectBody(upTo: Limits.maxAdminRequestBody) else {
                return AdminResponses.general(.contentTooLarge, "Request body too large")
            }
            bytes = Array(buffer.readableBytesView)
        }
        let credentials = BasicAuth.parse(request.headers[.authorization])
        let path = request.uri.string
        let method = HTTPMethod(rawValue: request.method.rawValue)
        do {
            let reply = try await cluster.peers.call(
                PeerEndpoint.admin(orchestrator.node), method, path, body: method == .GET ? nil : bytes,
                credentials: credentials, contentType: request.headers[.contentType], timeout: .seconds(120))
            var headers = HTTPFields()
            if let type = reply.contentType, let name = HTTPField.Name("Content-Type") { headers[name] = type }
            return Response(
                status: HTTPResponse.Status(code: Int(reply.status)), headers: headers,
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: reply.body)))
        } catch {
            return AdminResponses.general(.serviceUnavailable, "The orchestrator could not be reached: \(error)")
        }
    }
}

extension AdminAPI {
    /// The raw request body (at most `Limits.maxClusterDocumentBytes`, config documents included); nil when larger.
    func body(_ request: Request) async -> [UInt8]? {
        var request = request
        guard let buffer = try? await request.collectBody(upTo: Limits.maxClusterDocumentBytes) else { return nil }
        return Array(buffer.readableBytesView)
    }
}
