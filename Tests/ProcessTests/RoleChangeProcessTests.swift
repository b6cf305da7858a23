import Foundation
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// A user's role change or deletion made through one node reaches the KV connections the user already has open on
/// another node (ADR 0008, decision 4): the change travels in the cluster document, and the other node's connections
/// re-read their roles before their next operation, as kv_engine recreates a stale privilege context. Two real nodes.
@Suite("Role changes reach open connections on other nodes (real processes)", .serialized, .onTestThreads)
struct RoleChangeProcessTests {
    /// The user's document on `node` (`GET /settings/rbac/users/local/NAME`): nil once the node answers 404.
    static func user(_ node: ServerProcess, _ name: String) throws -> String? {
        let r = try node.http("GET", "/settings/rbac/users/local/\(name)")
        return r.status == 404 ? nil : r.text
    }

    /// Proves: `app`, a `data_writer` of `demo` created on a, logs in on b and writes a key b is the active of. Made a
    /// `data_reader` through a, the same connection on b is refused its next write (EACCESS) and may now read the key
    /// it could not read before. Deleted through a, the connection is closed at its next request, which writes
    /// nothing.
    @Test func roleChangeThroughOneNodeReachesConnectionsOnAnother() throws {
        let nodes = try (0..<2).map { try ServerProcess(name: "rolechange-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        try ClusterHarness.formCluster(nodes, authType: "sasl", replicaNumber: 0)
        let (a, b) = (nodes[0], nodes[1])
        let made = try a.http(
            "PUT", "/settings/rbac/users/local/app", form: [("password", "secret1"), ("roles", "data_writer[demo]")])
        #expect(made.status == 200, "\(made.text)")
        #expect(try ClusterHarness.eventually { try Self.user(b, "app")?.contains("data_writer") == true })

        let map = try ClusterHarness.map(b)
        let bIndex = try #require(map.servers.firstIndex { $0.hasSuffix(":\(b.kvPort)") }, "\(map.servers)")
        let keys = ClusterHarness.keys(for: [bIndex], in: map, count: 3, prefix: "role-")
        try #require(keys.count == 3)
        let c = try TestKVClient(port: b.kvPort, timeoutSeconds: 10)
        #expect(try c.authenticate(user: "app", password: "secret1") == .success)
        #expect(try c.request(.selectBucket, key: "demo").status == .success)
        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)
        func set(_ k: String) throws -> Status {
            try c.request(.set, key: k, value: Array("{}".utf8), extras: extras).status
        }
        #expect(try set(keys[0]) == .success)
        #expect(try c.request(.get, key: keys[0]).status == .accessDenied)

        let demoted = try a.http(
            "PUT", "/settings/rbac/users/local/app", form: [("password", "secret1"), ("roles", "data_reader[demo]")])
        #expect(demoted.status == 200, "\(demoted.text)")
        #expect(try ClusterHarness.eventually { try Self.user(b, "app")?.contains("data_reader") == true })
        #expect(try set(keys[1]) == .accessDenied)
        #expect(try c.request(.get, key: keys[0]).status == .success)
        #expect(try c.request(.get, key: keys[1]).status == .keyNotFound)

        let deleted = try a.http("DELETE", "/settings/rbac/users/local/app")
        #expect(deleted.status == 200, "\(deleted.text)")
        #expect(try ClusterHarness.eventually { try Self.user(b, "app") == nil })
        #expect(throws: (any Error).self) { try set(keys[2]) }

        let admin = try TestKVClient(port: b.kvPort, timeoutSeconds: 10)
        #expect(try admin.authenticate(user: b.user, password: b.password) == .success)
        #expect(try admin.request(.selectBucket, key: "demo").status == .success)
        #expect(try admin.request(.get, key: keys[2]).status == .keyNotFound)
        #expect(try admin.request(.get, key: keys[1]).status == .keyNotFound)
        #expect(try admin.request(.get, key: keys[0]).status == .success)
    }
}
