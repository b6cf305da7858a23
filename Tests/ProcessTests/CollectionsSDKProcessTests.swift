import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// Scopes and collections in the data service, driven by the official Python SDK 4.6.3's collection API
/// (`sdk/sdk_collections.py`, ADR 0129) against a real `settee-server`.
@Suite(.serialized, .onTestThreads) struct CollectionsSDKProcessTests {
    /// Proves the SDK's `collection_manager()` creates a scope and two collections (one with a maxTTL) and lists them
    /// with `get_all_scopes`, refusing duplicates and unknown scopes with the SDK's exceptions; the same keys in two
    /// collections and the default collection hold different documents and a key written in one collection is not
    /// found in another; durability, sub-document, locks and counters work in a named collection; a dropped
    /// collection answers CollectionNotFound and leaves its sibling intact; a scope drops.
    @Test func officialSDKCollectionsOnOneNode() throws {
        try PythonSDKProcessTests.runOnOneNode(script: "sdk_collections.py", name: "sdk-collections", passes: 5) {
            server in
            let scopes = try server.http("GET", "/pools/default/buckets/demo/scopes")
            #expect(scopes.status == 200 && scopes.text.contains(#""name":"tenant""#))
            #expect(scopes.text.contains(#""name":"users""#) && !scopes.text.contains(#""name":"orders""#))
            try Self.expectKeptAcrossRestart(server)
        }
    }

    /// After a restart the manifest (persisted with the bucket's settings) still has `tenant.users` as id 8 and not
    /// the dropped `tenant.orders` (id 9), and `users`' documents (persisted under their engine keys) are read back
    /// with the collection prefix, over the KV port with Collections agreed.
    static func expectKeptAcrossRestart(_ server: ServerProcess) throws {
        _ = server.stop()
        try server.start()
        let kv = try TestKVClient(port: server.kvPort)
        #expect(try kv.authenticate(user: server.user, password: server.password) == .success)
        try kv.hello([.collections, .json])
        #expect(try kv.request(.selectBucket, key: "demo").status == .success)
        let id = try kv.request(.getCollectionID, value: Array("tenant.users".utf8))
        #expect(id.status == .success && Array(id.extras.readableBytesView.suffix(4)) == [0, 0, 0, 8])
        #expect(try kv.request(.getCollectionID, value: Array("tenant.orders".utf8)).status == .unknownCollection)
        let vb = VBucketHash.vbucket(forKey: Array("k0".utf8)).rawValue
        let users = try kv.request(.get, key: "\u{8}k0", vbucket: vb)
        #expect(users.status == .success && String(buffer: users.value).contains(#""in": "users""#))
        let defaults = try kv.request(.get, key: "\u{0}k0", vbucket: vb)
        #expect(defaults.status == .success && String(buffer: defaults.value).contains(#""in": "default""#))
        #expect(try kv.request(.get, key: "\u{9}k0", vbucket: vb).status == .unknownCollection)
    }

    /// Proves the same on a 3-node cluster (replicaNumber 1, SDK seeded with every node): the manifest edits made
    /// through the orchestrator reach every member with the cluster document (each node's `GET .../scopes` lists
    /// the scope and the remaining collection, and none lists the dropped one), and the documents of each collection
    /// are served from whichever node owns their vBucket, with majority durability.
    @Test func officialSDKCollectionsOnThreeNodes() throws {
        try PythonSDKProcessTests.ensureSDK()
        let nodes = try (0..<3).map { try ServerProcess(name: "sdk-collections-cluster-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "sasl")
        let a = nodes[0]
        let log = TestOutput.directory.appendingPathComponent("sdk-collections-cluster-\(a.kvPort).out")
        let (status, output) = try PythonSDKProcessTests.run(
            script: "sdk_collections.py",
            arguments: [nodes.map { "127.0.0.1:\($0.kvPort)" }.joined(separator: ","), a.user, a.password, "demo"],
            log: log)
        PythonSDKProcessTests.expectPassed(
            script: "sdk_collections.py", status: status, output: output, log: log, passes: 5)
        for node in nodes {
            let listed = try ClusterHarness.eventually(20) {
                let scopes = try node.http("GET", "/pools/default/buckets/demo/scopes")
                return scopes.status == 200 && scopes.text.contains(#""name":"users""#)
                    && !scopes.text.contains(#""name":"orders""#)
            }
            #expect(listed, "node \(node.adminPort) does not list the manifest's collections")
        }
    }
}
