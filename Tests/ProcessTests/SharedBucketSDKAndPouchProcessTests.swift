import Foundation
import SetteeTestSupport
import Testing

/// Issue 20's must-show: an official Python SDK application and a PouchDB-style replica share one cluster bucket
/// through a `settee-gateway` database with `enable_shared_bucket_access: true` (docs/adr/0037). The script
/// (`sdk/sdk_shared_bucket.py`) runs both sides; see its docstring for why the replica is PouchDB's algorithm in
/// Python rather than PouchDB itself.
@Suite(.serialized, .onTestThreads) struct SharedBucketSDKAndPouchProcessTests {
    static func gatewayConfig(_ node: ServerProcess) -> String {
        """
        {"databases": {"demo": {"server": "http://127.0.0.1:\(node.adminPort)", "bucket": "demo",
           "username": "sgw", "password": "sgw-password", "import_docs": true,
           "enable_shared_bucket_access": true,
           "users": {"phone": {"password": "phone-password", "admin_channels": ["*"]}}}}}
        """
    }

    /// Proves, on a 3-node cluster's `sasl` bucket (replicaNumber 1; the gateway and the SDK bootstrap from the first
    /// member and reach every vBucket's active; 23 s) with the gateway logged in as a `mobile_sync_gateway` user:
    /// (1) documents PouchDB pushes (`_revs_diff`, `_bulk_docs` new_edits=false) read over the SDK as exactly the
    /// application's JSON; (2) neither the application's user (data_reader + data_writer) nor a data_reader user
    /// can read `_sync` (per-path EACCESS, absent from `$XTOC`) or write it, and bodies never carry `_sync`, `_id`
    /// or `_rev`; (3) SDK replace / mutate_in / upsert reach PouchDB's pull (`_changes?style=all_docs`,
    /// `_bulk_get`) as children of PouchDB's winner (one generation on, one leaf), the SDK's bytes untouched by the
    /// import; (4) the SDK's own user XATTR (mutate_in / lookup_in) makes no revision and survives the gateway's
    /// writes; (5) an SDK remove arrives as a tombstone child, a PouchDB delete makes the key gone for the SDK,
    /// an SDK recreation continues the tombstone's history, and a PouchDB revision on its own tombstone revives
    /// the key (REVIVE_DOCUMENT) with the body the SDK then reads; (6) 150 SDK increments racing a REST client that
    /// rewrites the whole body through the gateway all survive (no gateway write clobbers an SDK write) and the
    /// history stays one linear branch.
    @Test func sdkApplicationAndPouchReplicaShareABucket() throws {
        try PythonSDKProcessTests.ensureSDK()
        let nodes = try (0..<3).map { try ServerProcess(name: "sba-pouch-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for n in nodes { try n.start() }
        try ClusterHarness.formCluster(nodes, authType: "sasl")
        try Self.run(on: nodes[0], name: "sba-pouch")
    }

    /// Creates the users on `node` (they travel in the cluster document), starts the gateway on its admin port and
    /// runs the script against its KV port; expects its 6 checks to pass.
    static func run(on node: ServerProcess, name: String) throws {
        let users = [
            ("app", "data_reader[demo],data_writer[demo]"), ("reader", "data_reader[demo]"),
            ("sgw", "mobile_sync_gateway[demo]"),
        ]
        for (user, roles) in users {
            let put = try node.http(
                "PUT", "/settings/rbac/users/local/\(user)", form: [("password", "\(user)-password"), ("roles", roles)])
            #expect(put.status == 200, "\(put.text)")
        }
        let gateway = try GatewayProcess(name: name, config: Self.gatewayConfig(node))
        try gateway.start()
        defer { gateway.stop() }
        let log = TestOutput.directory.appendingPathComponent("\(name)-\(node.kvPort).out")
        let (status, output) = try PythonSDKProcessTests.run(
            script: "sdk_shared_bucket.py",
            arguments: [
                String(node.kvPort), "demo", "app", "app-password", "reader", "reader-password",
                "http://127.0.0.1:\(gateway.port)/demo", "phone", "phone-password",
            ], log: log)
        PythonSDKProcessTests.expectPassed(
            script: "sdk_shared_bucket.py", status: status, output: output, log: log, passes: 6)
    }
}
