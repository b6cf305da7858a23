import Foundation
import Logging
import NIOCore
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport

@testable import SetteeNode

struct TestError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

let adminUser = "Administrator"
let adminPassword = "password"
let bucketName = "b"

var quietLogger: Logger {
    var l = Logger(label: "settee.node.test")
    l.logLevel = .critical
    return l
}

/// One data node in the test process: registry + bucket, KV server on a free loopback port, and its
/// replication manager wired into the KV node for durability.
final class TestDataNode: @unchecked Sendable {
    let dir: String
    let registry: NodeRegistry
    let kv: KVNode
    var server: KVServer?
    var info: NodeInfo
    let manager: ReplicationManager

    init(name: String, settings: BucketSettings, group: any EventLoopGroup) async throws {
        dir = NSTemporaryDirectory() + "settee-node-\(UUID().uuidString)"
        let placeholder = NodeInfo(
            otpNode: NodeID(name), host: "127.0.0.1", adminPort: 0, kvPort: 0, viewsPort: 0, nodeUUID: "")
        registry = try NodeRegistry(dataDirectory: dir, node: placeholder, logger: quietLogger)
        try registry.initialize(username: adminUser, password: adminPassword)
        try registry.createBucket(settings)
        kv = KVNode(registry: registry, logger: quietLogger)
        let server = try await KVServer.start(node: kv, host: "127.0.0.1", port: 0, group: group)
        self.server = server
        info = NodeInfo(
            otpNode: NodeID(name), host: "127.0.0.1", adminPort: 0, kvPort: server.port, viewsPort: 0, nodeUUID: "")
        manager = ReplicationManager(
            registry: registry, node: info, group: group, credentials: { (adminUser, adminPassword) },
            logger: quietLogger)
        kv.setReplication(manager)
    }

    var engine: BucketEngine { registry.bucket(named: bucketName)! }

    /// Stops serving (like a crashed process, as far as peers can tell): KV listener and replication.
    func stopServing() async {
        await manager.shutdown()
        await server?.close()
        server = nil
    }

    func destroy() async {
        await stopServing()
        kv.shutdownPool()
        registry.shutdown()
        try? FileManager.default.removeItem(atPath: dir)
    }
}

/// Nodes sharing one event loop group, and helpers to hand them duties from a vBucket map.
final class TestCluster: @unchecked Sendable {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    var nodes: [TestDataNode] = []
    let settings: BucketSettings

    init(nodes count: Int, replicas: Int, vbuckets: Int) async throws {
        settings = BucketSettings(
            name: bucketName, uuid: String(repeating: "cd", count: 16), ramQuotaMB: 256, replicaNumber: replicas,
            flushEnabled: false, authType: .sasl, numVBuckets: vbuckets)
        for i in 0..<count {
            nodes.append(try await TestDataNode(name: "n\(i)@127.0.0.1", settings: settings, group: group))
        }
    }

    var ids: [NodeID] { nodes.map(\.info.otpNode) }

    /// Every node reconciles to its duties for `map` (chains index `nodes`); `only` limits who does.
    func apply(_ map: VBucketMap, only: [Int]? = nil) {
        for i in only ?? Array(nodes.indices) {
            let duties = VBucketDuty.duties(for: ids[i], nodes: ids, map: map)
            nodes[i].manager.reconcile(bucket: bucketName, duties: duties, nodes: nodes.map(\.info))
        }
    }

    func shutdown() async {
        for n in nodes { await n.destroy() }
        try? await group.shutdownGracefully()
    }
}

/// Polls `condition` every 20 ms for up to `timeout` seconds.
func eventually(timeout: Double = 30, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(nanoseconds: 20_000_000)
    }
    return condition()
}

/// Whether `replica` holds exactly what `active` holds in `vb` (every key's latest version and metadata).
func sameContents(_ active: BucketEngine, _ replica: BucketEngine, _ vb: VBucketID) throws -> Bool {
    let a = try active.changes(vb, since: .zero, limit: Limits.changeFeedMaxBatch)
    let r = try replica.changes(vb, since: .zero, limit: Limits.changeFeedMaxBatch)
    // DCP deletions carry no flags: compare tombstones by key and metadata that travels.
    func normal(_ rs: [ChangeRecord]) -> [ChangeRecord] {
        rs.map { r in
            var r = r
            if r.meta.deleted { r.meta.flags = 0 }
            return r
        }
    }
    return a.complete && r.complete && normal(a.records) == normal(r.records)
}

func key(_ s: String) -> [UInt8] { Array(s.utf8) }
