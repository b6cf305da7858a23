import Foundation
import NIOCore
import SetteeAuth
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

@testable import SetteeNode

/// A local user's role change or deletion reaches the KV connections it already has open, before their next
/// operation (ADR 0008, decision 4, as kv_engine recreates a stale privilege context): a demoted user is refused
/// what its new roles deny on the same connection, a deleted user's connection is closed, and so is a DCP producer
/// that streams without sending requests. The admin API's `PUT`/`DELETE /settings/rbac/users/local/NAME` end in the
/// registry's `upsertUser` / `deleteUser`, called here directly.
@Suite(.serialized) struct RoleChangeOnOpenConnectionTests {
    /// Both ways a connection logs in set its principal: PLAIN (checked on the blocking pool) and SCRAM.
    enum Login: String, CaseIterable, CustomTestStringConvertible {
        case plain = "PLAIN"
        case scram = "SCRAM-SHA512"
        var testDescription: String { rawValue }
    }

    private static let vb: UInt16 = 1
    private static let setExtras = TestKVClient.setExtras(flags: 0, expiry: 0)

    /// A connection logged in as `user` with `login`, bucket selected.
    private func session(_ node: TestDataNode, _ user: String, _ password: String, _ login: Login) throws
        -> TestKVClient
    {
        let c = try TestKVClient(port: node.info.kvPort, timeoutSeconds: 10)
        switch login {
        case .plain:
            #expect(try c.authenticate(user: user, password: password) == .success)
        case .scram:
            var sasl = SaslClientLogin(
                username: user, password: password, allowPlain: false, clientNonce: SaslClientLogin.randomNonce())
            var directive = sasl.start()
            while let r = directive.request {
                let answer = try c.request(
                    Opcode(r.opcode), key: String(decoding: r.key, as: UTF8.self), value: r.value)
                directive = sasl.receive(.init(status: answer.status.rawValue, value: answer.valueBytes))
            }
            #expect(directive == .succeeded(mechanism: "SCRAM-SHA512"))
        }
        #expect(try c.request(.selectBucket, key: bucketName).status == .success)
        return c
    }

    /// A one-node cluster with user `app` (password `secret1`) a `data_writer` of the bucket, and a connection logged
    /// in as it with `login`.
    private func writerSession(_ login: Login) async throws -> (TestCluster, TestDataNode, TestKVClient) {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        try node.registry.upsertUser(
            name: "app", fullName: "", password: "secret1", roles: [Role(name: .dataWriter, bucket: bucketName)])
        return (cluster, node, try session(node, "app", "secret1", login))
    }

    private func set(_ c: TestKVClient, _ k: String) throws -> Status {
        try c.request(.set, key: k, value: Array("{}".utf8), extras: Self.setExtras, vbucket: Self.vb).status
    }

    private func get(_ c: TestKVClient, _ k: String) throws -> Status {
        try c.request(.get, key: k, vbucket: Self.vb).status
    }

    /// A `data_writer` writes (and may not read); changed to `data_reader`, the same connection's next write gets
    /// EACCESS (0x24) and its reads succeed.
    @Test(arguments: Login.allCases) func demotedUserIsRefusedOnItsOpenConnection(_ login: Login) async throws {
        let (cluster, node, c) = try await writerSession(login)
        #expect(try set(c, "k1") == .success)
        #expect(try get(c, "k1") == .accessDenied)

        try node.registry.upsertUser(
            name: "app", fullName: "", password: nil, roles: [Role(name: .dataReader, bucket: bucketName)])
        #expect(try set(c, "k2") == .accessDenied)
        #expect(try get(c, "k1") == .success)
        #expect(try get(c, "k2") == .keyNotFound)
        await cluster.shutdown()
    }

    /// A deleted user's open connection is closed at its next request, which is not answered.
    @Test(arguments: Login.allCases) func deletedUsersConnectionIsClosed(_ login: Login) async throws {
        let (cluster, node, c) = try await writerSession(login)
        #expect(try set(c, "k1") == .success)

        try node.registry.deleteUser(name: "app")
        #expect(throws: (any Error).self) { try set(c, "k2") }
        #expect((try? node.engine.get(VBucketID(Self.vb), key("k2"))) == nil)
        await cluster.shutdown()
    }

    /// A user's DCP producer streams with no request from its client: once the user is deleted, or changed to roles
    /// that may not stream the bucket, the next batch is not sent and the connection is closed.
    @Test(arguments: [true, false]) func streamingUsersConnectionIsClosed(deleted: Bool) async throws {
        let cluster = try await TestCluster(nodes: 1, replicas: 0, vbuckets: 4)
        let node = cluster.nodes[0]
        try node.registry.upsertUser(
            name: "feed", fullName: "", password: "secret1", roles: [Role(name: .bucketFullAccess, bucket: bucketName)])
        let c = try session(node, "feed", "secret1", .plain)
        var open = ByteBuffer()
        open.writeInteger(UInt32(0))
        open.writeInteger(DCPOpenFlags.producer)
        #expect(
            try c.request(.dcpOpen, key: "feed", extras: Array(open.readableBytesView), vbucket: 0).status == .success)
        var x = ByteBuffer()
        DCPExtras.StreamRequest(start: 0, end: UInt64.max, uuid: 0, snapStart: 0, snapEnd: 0).write(to: &x)
        #expect(
            try c.request(.dcpStreamRequest, extras: Array(x.readableBytesView), vbucket: Self.vb).status == .success)
        func store(_ k: String) throws {
            _ = try node.engine.store(
                .set, VBucketID(Self.vb), key(k), value: Array("{}".utf8), flags: 0, expiry: 0, datatype: .json,
                cas: .zero)
        }
        try store("before")
        #expect(try c.receive().opcode == .dcpSnapshotMarker)
        let first = try c.receive()
        #expect(first.opcode == .dcpMutation && String(buffer: first.key) == "before")

        if deleted {
            try node.registry.deleteUser(name: "feed")
        } else {
            try node.registry.upsertUser(
                name: "feed", fullName: "", password: nil, roles: [Role(name: .dataReader, bucket: bucketName)])
        }
        try store("after")
        let (bytes, closed) = c.readUntilClosed()
        #expect(closed)
        #expect(!String(decoding: bytes, as: UTF8.self).contains("after"))
        await cluster.shutdown()
    }
}
