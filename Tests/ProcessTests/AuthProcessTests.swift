import Foundation
import NIOCore
import SetteeAuth
import SetteeProtocol
import SetteeTestSupport
import Testing

/// SASL SCRAM, RBAC and document locks over the wire of a real node, without the Python SDK.
@Suite(.serialized, .onTestThreads) struct AuthProcessTests {
    /// Runs SCRAM on `c`; returns the final status and whether the server's `v=` verified.
    static func scram(
        _ c: TestKVClient, _ hash: ScramHash, user: String, password: String
    ) throws -> (Status, Bool) {
        var client = ScramClient(hash: hash, username: user, password: password, clientNonce: "0x01 0x02 nonce")
        let first = try c.request(.saslAuth, key: hash.mechanism, value: client.clientFirst)
        guard first.status == .authContinue, let final = client.receiveServerFirst(first.valueBytes) else {
            return (first.status, false)
        }
        let done = try c.request(.saslStep, key: hash.mechanism, value: final)
        return (done.status, done.status == .success && client.verifyServerFinal(done.valueBytes))
    }

    /// Proves SCRAM-SHA512/256/1 log the admin in (server signature verified), a wrong password and an
    /// unknown user get AUTH_ERROR, and LIST_MECHS offers SCRAM first.
    @Test func scramLogins() throws {
        let server = try ServerProcess.started(name: "auth-scram")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let mechs = try TestKVClient(port: server.kvPort).request(.saslListMechs)
        #expect(String(buffer: mechs.value) == "SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 PLAIN")
        for hash in ScramHash.allCases {
            let c = try TestKVClient(port: server.kvPort)
            let (status, verified) = try Self.scram(c, hash, user: server.user, password: server.password)
            #expect(status == .success && verified, "\(hash)")
            #expect(try c.request(.selectBucket, key: "demo").status == .success)
        }
        for (user, password) in [(server.user, "wrong-password"), ("nobody", "password")] {
            let (status, _) = try Self.scram(
                try TestKVClient(port: server.kvPort), .sha512, user: user, password: password)
            #expect(status == .authError)
        }
    }

    /// Proves KV RBAC: a data_reader reads but gets EACCESS on writes and on another bucket's
    /// SELECT_BUCKET; a data_writer writes but cannot read.
    @Test func rolesOnKV() throws {
        let server = try ServerProcess.started(name: "auth-rbac")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let other = try server.http(
            "POST", "/pools/default/buckets", form: [("name", "other"), ("ramQuotaMB", "100")])
        #expect(other.status == 202)
        for (user, role) in [("reader", "data_reader[demo]"), ("writer", "data_writer[demo]")] {
            let r = try server.http(
                "PUT", "/settings/rbac/users/local/\(user)", form: [("password", "\(user)-pw"), ("roles", role)])
            #expect(r.status == 200, "\(r.text)")
        }
        let admin = try TestKVClient(port: server.kvPort)
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        _ = try admin.request(.selectBucket, key: "demo")
        let setExtras = TestKVClient.setExtras(flags: 0, expiry: 0)
        #expect(try admin.request(.set, key: "k", value: Array("1".utf8), extras: setExtras).status == .success)

        let reader = try TestKVClient(port: server.kvPort)
        #expect(try Self.scram(reader, .sha512, user: "reader", password: "reader-pw").0 == .success)
        #expect(try reader.request(.selectBucket, key: "other").status == .accessDenied)
        #expect(try reader.request(.selectBucket, key: "demo").status == .success)
        #expect(try reader.request(.get, key: "k").status == .success)
        #expect(try reader.request(.set, key: "k", value: [0x32], extras: setExtras).status == .accessDenied)
        #expect(try reader.request(.delete, key: "k").status == .accessDenied)

        let writer = try TestKVClient(port: server.kvPort)
        #expect(try writer.authenticate(user: "writer", password: "writer-pw") == .success)
        #expect(try writer.request(.selectBucket, key: "demo").status == .success)
        #expect(try writer.request(.set, key: "k", value: [0x33], extras: setExtras).status == .success)
        #expect(try writer.request(.get, key: "k").status == .accessDenied)
    }

    /// Proves lock statuses on the wire: GET_AND_LOCK returns a new CAS, GET shows CAS -1, a second
    /// lock and a CAS-less SET get LOCKED (0x09), UNLOCK with a wrong CAS gets LOCKED, with the right
    /// one succeeds, and again gets NOT_LOCKED (0x0e).
    @Test func lockStatuses() throws {
        let server = try ServerProcess.started(name: "auth-locks")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "none")
        let c = try TestKVClient(port: server.kvPort)
        let setExtras = TestKVClient.setExtras(flags: 0, expiry: 0)
        let stored = try c.request(.set, key: "doc", value: Array("1".utf8), extras: setExtras)
        let lockTime: [UInt8] = [0, 0, 0, 5]
        let locked = try c.request(.getLocked, key: "doc", extras: lockTime)
        #expect(locked.status == .success && locked.cas != stored.cas && locked.valueBytes == Array("1".utf8))
        #expect(try c.request(.get, key: "doc").cas == UInt64.max)
        #expect(try c.request(.getLocked, key: "doc", extras: lockTime).status == .locked)
        #expect(try c.request(.set, key: "doc", value: [0x32], extras: setExtras).status == .locked)
        #expect(try c.request(.unlockKey, key: "doc", cas: stored.cas).status == .locked)
        #expect(try c.request(.unlockKey, key: "doc", cas: locked.cas).status == .success)
        #expect(try c.request(.unlockKey, key: "doc", cas: locked.cas).status == Status(0x0e))
        #expect(try c.request(.set, key: "doc", value: [0x33], extras: setExtras).status == .success)
    }

    /// Proves users are cluster-wide: a user created through a non-orchestrator node (forwarded to the
    /// orchestrator) can log in with SCRAM and select the bucket on both nodes, and once deleted on
    /// one node it is refused on both.
    @Test func usersSpreadThroughTheCluster() throws {
        let a = try ServerProcess(name: "auth-cluster-a")
        let b = try ServerProcess(name: "auth-cluster-b")
        defer { [a, b].forEach { $0.stopAndRemove() } }
        for s in [a, b] { try s.start() }
        try a.initialize(authType: "sasl")
        #expect(try ClusterHarness.addNode(a, b).status == 200)
        let put = try b.http(
            "PUT", "/settings/rbac/users/local/app", form: [("password", "app-pw"), ("roles", "data_reader[demo]")])
        #expect(put.status == 200, "\(put.text)")
        func canLogIn(_ s: ServerProcess) throws -> Bool {
            let c = try TestKVClient(port: s.kvPort)
            guard try Self.scram(c, .sha512, user: "app", password: "app-pw").0 == .success else { return false }
            return try c.request(.selectBucket, key: "demo").status == .success
        }
        #expect(try ClusterHarness.eventually { try canLogIn(a) && canLogIn(b) })
        #expect(try a.http("DELETE", "/settings/rbac/users/local/app").status == 200)
        #expect(try ClusterHarness.eventually { try !canLogIn(a) && !canLogIn(b) })
    }
}
