import Foundation
import SetteeTestSupport
import Testing

/// Scopes and collections in the data service, driven by the official Python SDK 4.6.3's collection API
/// (`sdk/sdk_collections.py`, ADR 0127) against a real `settee-server`.
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
        }
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
