import SetteeCore
import SetteeJSON

/// Live facts about a node for `/pools/default` and bucket `nodes[]` (gathered by the admin shell).
public struct NodeRuntime: Sendable, Equatable {
    /// `"healthy"`, `"warmup"` or `"unhealthy"`.
    public var status: String
    public var uptimeSeconds: Int
    public var memoryTotal: Int
    public var memoryFree: Int
    public var cpuCount: Int
    /// Items and bytes over all buckets (`interestingStats`).
    public var currItems: Int
    public var memUsed: Int

    public init(
        status: String = "healthy", uptimeSeconds: Int = 0, memoryTotal: Int = 0, memoryFree: Int = 0,
        cpuCount: Int = 1, currItems: Int = 0, memUsed: Int = 0
    ) {
        self.status = status
        self.uptimeSeconds = uptimeSeconds
        self.memoryTotal = memoryTotal
        self.memoryFree = memoryFree
        self.cpuCount = cpuCount
        self.currItems = currItems
        self.memUsed = memUsed
    }
}

/// A bucket's `basicStats`.
public struct BucketBasicStats: Sendable, Equatable {
    public var opsPerSec: Double
    public var diskFetches: Int
    public var itemCount: Int
    public var diskUsed: Int
    public var dataUsed: Int
    public var memUsed: Int
    public var vbActiveNumNonResident: Int
    /// `"healthy"`, `"persistenceFailing"` (the disk refuses commits; retried) or `"failed"` (warmup failed:
    /// not served), with the reason when not healthy: the bucket object's `status` and `statusReason`.
    public var status: String = "healthy"
    public var statusReason: String? = nil
    /// Mutations not yet on disk (queued + being written).
    public var unpersistedItems: Int = 0
    /// `otpNode` names of nodes whose share is missing from `itemCount`/`opsPerSec` (they did not answer).
    public var nodesNotCounted: [String] = []

    public init(
        opsPerSec: Double = 0, diskFetches: Int = 0, itemCount: Int = 0, diskUsed: Int = 0, dataUsed: Int = 0,
        memUsed: Int = 0, vbActiveNumNonResident: Int = 0
    ) {
        self.opsPerSec = opsPerSec
        self.diskFetches = diskFetches
        self.itemCount = itemCount
        self.diskUsed = diskUsed
        self.dataUsed = dataUsed
        self.memUsed = memUsed
        self.vbActiveNumNonResident = vbActiveNumNonResident
    }
}

/// The admin REST documents: `/pools`, `/pools/default`, full bucket objects.
public enum AdminJSON {
    /// One node as `/pools/default` and full bucket objects list it.
    public static func node(
        _ node: NodeInfo, isSelf: Bool, runtime: NodeRuntime, selfAddress: SelfAddress, bucket: BucketSettings?,
        membership: String = "active", status: String? = nil, recoveryType: String = "none"
    ) -> JSON {
        let h = ConfigJSON.host(of: node, isSelf: isSelf, selfAddress: selfAddress)
        var members: [(String, JSON)] = []
        if node.servesViews {
            let base = bucket.map { ConfigJSON.couchApiBase(h, node, $0) } ?? "http://\(hostPort(h, node.viewsPort))/"
            members.append(("couchApiBase", .string(base)))
            if let port = node.viewsTLSPort {
                let https =
                    bucket.flatMap { ConfigJSON.couchApiBaseHTTPS(h, node, $0) } ?? "https://\(hostPort(h, port))/"
                members.append(("couchApiBaseHTTPS", .string(https)))
            }
        }
        members += [
            ("clusterMembership", .string(membership)),
            ("recoveryType", .string(recoveryType)),
            ("status", .string(status ?? runtime.status)),
            ("otpNode", .string(node.name)),
        ]
        if isSelf { members.append(("thisNode", true)) }
        members += [
            ("hostname", .string(hostPort(h, node.adminPort))),
            ("nodeUUID", .string(node.nodeUUID)),
            ("clusterCompatibility", .int(ConfigJSON.clusterCompatibility)),
            ("version", .string(ConfigJSON.serverVersion)),
            ("os", "x86_64-unknown-linux-gnu"),
            ("cpuCount", .int(runtime.cpuCount)),
            ("ports", ["direct": .int(node.kvPort)]),
            ("services", ["kv"]),
            // go-couchbase decodes `uptime` as a string.
            ("uptime", .string(String(runtime.uptimeSeconds))),
            ("memoryTotal", .int(runtime.memoryTotal)),
            ("memoryFree", .int(runtime.memoryFree)),
            ("interestingStats", ["curr_items": .int(runtime.currItems), "mem_used": .int(runtime.memUsed)]),
        ]
        if bucket != nil { members.append(("replication", 1)) }
        return .object(members)
    }

    /// `GET /pools`. Before provisioning `pools` and `uuid` are empty arrays, as ns_server answers.
    public static func pools(clusterUUID: String?, isAdmin: Bool) -> JSON {
        let pools: JSON
        let uuid: JSON
        let settings: JSON
        if let u = clusterUUID {
            pools = [
                [
                    "name": "default", "uri": .string("/pools/default?uuid=\(u)"),
                    "streamingUri": .string("/poolsStreaming/default?uuid=\(u)"),
                ]
            ]
            uuid = .string(u)
            settings = [
                "maxParallelIndexers": .string("/settings/maxParallelIndexers?uuid=\(u)"),
                "viewUpdateDaemon": .string("/settings/viewUpdateDaemon?uuid=\(u)"),
            ]
        } else {
            pools = []
            uuid = []
            settings = []
        }
        return [
            "isAdminCreds": .bool(isAdmin),
            "isROAdminCreds": false,
            "isEnterprise": false,
            "allowedServices": ["kv"],
            "isDeveloperPreview": false,
            "packageVariant": "",
            "pools": pools,
            "settings": settings,
            "uuid": uuid,
            "implementationVersion": .string(ConfigJSON.serverVersion),
            "componentsVersion": ["ns_server": .string(ConfigJSON.serverVersion), "settee": "0.1"],
        ]
    }

    /// `GET /pools/default`.
    public static func poolDefault(
        cluster: ClusterIdentity, nodes: [NodeInfo], thisNode: Int, runtime: NodeRuntime, selfAddress: SelfAddress,
        buckets: [BucketSettings], memoryQuotaMB: Int, maxBucketCount: Int,
        members: [NodeID: (membership: String, status: String, recoveryType: String)] = [:],
        rebalanceStatus: String = "none", balanced: Bool = true
    ) -> JSON {
        [
            "name": "default",
            "nodes": .array(
                nodes.enumerated().map { (i, n) in
                    let m = members[n.otpNode]
                    return node(
                        n, isSelf: i == thisNode, runtime: runtime, selfAddress: selfAddress, bucket: nil,
                        membership: m?.membership ?? "active", status: i == thisNode ? nil : m?.status,
                        recoveryType: m?.recoveryType ?? "none")
                }),
            "buckets": [
                "uri": .string("/pools/default/buckets?uuid=\(cluster.uuid)"),
                "terseBucketsBase": "/pools/default/b/",
                "terseStreamingBucketsBase": "/pools/default/bs/",
            ],
            "bucketNames": .array(buckets.map { ["bucketName": .string($0.name), "uuid": .string($0.uuid)] }),
            "rebalanceStatus": .string(rebalanceStatus),
            "rebalanceProgressUri": "/pools/default/rebalanceProgress",
            "stopRebalanceUri": "/controller/stopRebalance",
            "balanced": .bool(balanced),
            "nodeStatusesUri": "/nodeStatuses",
            "controllers": [
                "addNode": ["uri": "/controller/addNode"],
                "rebalance": ["uri": "/controller/rebalance"],
                "failOver": ["uri": "/controller/failOver"],
            ],
            "memoryQuota": .int(memoryQuotaMB),
            "clusterName": .string(cluster.name),
            "counters": [:],
            "tasks": ["uri": "/pools/default/tasks"],
            "maxBucketCount": .int(maxBucketCount),
        ]
    }

    /// A full bucket object (`GET /pools/default/buckets[/NAME]`), with every field the SDKs require.
    public static func bucket(
        _ map: ClusterMap, runtime: NodeRuntime, stats: BucketBasicStats, selfAddress: SelfAddress,
        nodeStatus: [String: String] = [:]
    ) -> JSON {
        let b = map.bucket
        let name = PercentEncoding.encode(b.name)
        let rawRAM = b.ramQuotaMB * 1024 * 1024
        var controllers: [(String, JSON)] = []
        // A `flush` key is how clients learn that flush is enabled.
        if b.flushEnabled {
            controllers.append(("flush", .string("/pools/default/buckets/\(name)/controller/doFlush")))
        }
        let quotaPercentUsed = rawRAM > 0 ? Double(stats.memUsed) * 100 / Double(rawRAM) : 0
        return [
            "name": .string(b.name),
            "nodeLocator": "vbucket",
            "bucketType": "membase",
            "uuid": .string(b.uuid),
            "uri": .string(ConfigJSON.bucketURI(b)),
            "streamingUri": .string(ConfigJSON.streamingURI(b)),
            "numVBuckets": .int(map.numVBuckets),
            "bucketCapabilitiesVer": "",
            "bucketCapabilities": .array(ConfigJSON.bucketCapabilities(nodes: map.nodes).map { .string($0) }),
            "ddocs": ["uri": .string("/pools/default/buckets/\(name)/ddocs")],
            "vBucketServerMap": ConfigJSON.vBucketServerMap(map, selfAddress: selfAddress),
            "controllers": .object(controllers),
            "nodes": .array(
                map.nodes.enumerated().map { (i, n) in
                    node(
                        n, isSelf: i == map.thisNode, runtime: runtime, selfAddress: selfAddress, bucket: b,
                        status: nodeStatus[n.name])
                }),
            "stats": [
                "uri": .string("/pools/default/buckets/\(name)/stats"),
                "directoryURI": .string("/pools/default/buckets/\(name)/stats/Directory"),
                "nodeStatsListURI": .string("/pools/default/buckets/\(name)/nodes"),
            ],
            "authType": .string(b.authType.rawValue),
            "replicaIndex": false,
            "replicaNumber": .int(b.replicaNumber),
            "threadsNumber": 3,
            "quota": ["ram": .int(rawRAM * map.nodes.count), "rawRAM": .int(rawRAM)],
            "status": .string(stats.status),
            "statusReason": stats.statusReason.map { .string($0) } ?? .null,
            "basicStats": [
                "unpersistedItems": .int(stats.unpersistedItems),
                "quotaPercentUsed": .number(quotaPercentUsed.isFinite ? quotaPercentUsed : 0),
                "opsPerSec": .number(stats.opsPerSec.isFinite ? stats.opsPerSec : 0),
                "diskFetches": .int(stats.diskFetches),
                "itemCount": .int(stats.itemCount),
                "diskUsed": .int(stats.diskUsed),
                "dataUsed": .int(stats.dataUsed),
                "memUsed": .int(stats.memUsed),
                "vbActiveNumNonResident": .int(stats.vbActiveNumNonResident),
                "nodesNotCounted": .array(stats.nodesNotCounted.map { .string($0) }),
            ],
            "evictionPolicy": .string(b.evictionPolicy),
            // The bucket's metadata purge interval in days (ADR 0095), the default when none was set.
            "purgeInterval": .number(b.purgeInterval ?? Limits.defaultPurgeIntervalDays),
            "durabilityMinLevel": "none",
            "conflictResolutionType": "seqno",
            "maxTTL": 0,
            "compressionMode": "off",
        ]
    }
}

/// What a node serves at `/settee/internal/seqnos` for the rebalance orchestrator: one row per vBucket,
/// `[state, highSeqno, persistedSeqno]`, seqnos as exact 64-bit integers (a double would round them above 2^53).
public enum SeqnoReport {
    /// A vBucket's state on the reporting node (Couchbase's active / replica / pending / dead), read once from the
    /// report's string: an unknown or missing one is `dead`, so a peer that says something else never moves data
    /// early (a rebalance's takeover goes on only on `pending`).
    public enum State: String, Sendable, Equatable, CaseIterable {
        case active, replica, pending, dead
    }

    public struct Row: Sendable, Equatable {
        public var state: State
        public var high: UInt64
        public var persisted: UInt64
        public init(state: State, high: UInt64, persisted: UInt64) {
            self.state = state
            self.high = high
            self.persisted = persisted
        }
    }

    public static func json(_ rows: [Row]) -> JSON {
        .array(rows.map { [.string($0.state.rawValue), .int($0.high), .int($0.persisted)] })
    }

    /// The rows of a report of a bucket with `vBuckets` vBuckets; nil unless it is an array of exactly that many
    /// arrays (callers index the rows by vBucket: a peer's short or long report is a failed answer, as a network
    /// error is). A row's missing, unreadable or unknown state is `.dead` and its missing or unreadable seqnos 0, so a peer
    /// that knows less never moves data early.
    public static func parse(_ bytes: some Collection<UInt8>, vBuckets: Int) -> [Row]? {
        guard let rows = (try? JSON.parse(bytes))?.arrayValue, rows.count == vBuckets else { return nil }
        var out: [Row] = []
        out.reserveCapacity(rows.count)
        for row in rows {
            guard let fields = row.arrayValue else { return nil }
            out.append(
                Row(
                    state: fields.first?.stringValue.flatMap(State.init(rawValue:)) ?? .dead,
                    high: fields.count > 1 ? fields[1].uint64Value ?? 0 : 0,
                    persisted: fields.count > 2 ? fields[2].uint64Value ?? 0 : 0))
        }
        return out
    }
}
