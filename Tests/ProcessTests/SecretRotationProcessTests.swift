import Foundation
import NIOCore
import NIOHTTP1
import SetteeAuth
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// SCRAM for every first-party client and rotation of the internal node secret, on a real two-node cluster.
@Suite(.serialized, .onTestThreads) struct SecretRotationProcessTests {
    static let internalUser = "@settee-internal"

    /// The internal secret a node holds, read from its metadata file (the envelope's inner JSON text).
    static func secret(_ node: ServerProcess) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: node.dataDir + "/node-metadata.json"))
        let envelope = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
        let inner = Data((envelope["metadata"] as? String ?? "").utf8)
        let metadata = try JSONSerialization.jsonObject(with: inner) as? [String: Any] ?? [:]
        guard let secret = metadata["internalSecret"] as? String else { throw HarnessError("no internalSecret") }
        return secret
    }

    /// Whether a SCRAM-SHA512 login as the internal user with `password` succeeds on `node`'s KV port.
    static func kvLogin(_ node: ServerProcess, password: String) throws -> Bool {
        let c = try TestKVClient(port: node.kvPort)
        let (status, verified) = try AuthProcessTests.scram(c, .sha512, user: internalUser, password: password)
        return status == .success && verified
    }

    /// The HTTP status of an internal call authenticated with `password`.
    static func httpStatus(_ node: ServerProcess, password: String) throws -> Int {
        try node.http("GET", "/settee/internal/heartbeat", auth: (internalUser, password)).status
    }

    /// STAT of `node`, read on a connection that logs in with SCRAM as the admin (so it adds no PLAIN login).
    static func stats(_ node: ServerProcess) throws -> [String: String] {
        let c = try TestKVClient(port: node.kvPort)
        let (status, _) = try AuthProcessTests.scram(c, .sha512, user: node.user, password: node.password)
        guard status == .success else { throw HarnessError("admin SCRAM login refused: \(status)") }
        return try c.stats()
    }

    /// Majority-durable writes of `keys`, retried until each succeeds (replica streams may be reconnecting).
    static func durableWrites(_ client: BucketClient, _ keys: [String], timeout: TimeInterval = 30) async throws {
        for key in keys {
            let deadline = Date().addingTimeInterval(timeout)
            while true {
                do {
                    _ = try await client.upsert(key, Array("{\"k\":\"\(key)\"}".utf8), durability: .majority)
                    break
                } catch {
                    if Date() > deadline { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
    }

    /// Proves, on two real nodes: the replicating peer, the smart client, the router and the gateway log in with
    /// SCRAM-SHA512 and never with PLAIN (STAT `auth_logins_*`); `POST /controller/rotateInternalSecret` gives both
    /// nodes a new secret; during the grace period the old secret still logs in (KV SCRAM and HTTP) and majority
    /// writes keep replicating; a second rotation drops the first secret at once; after its grace the previous secret
    /// is refused on both nodes and both ports, the new one works, and a restarted node's replication logs in with
    /// the new secret (majority writes succeed again). Changing the admin password rotates the secret again,
    /// cluster-wide.
    @Test func scramEverywhereAndRotation() async throws {
        let nodes = try (0..<2).map { try ServerProcess(name: "rotate-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for s in nodes { try s.start() }
        let (a, b) = (nodes[0], nodes[1])
        try ClusterHarness.formCluster([a, b], authType: "sasl")

        let client = try await BucketClient.connect(
            ClientOptions(
                seeds: [.http(NodeAddress(host: "127.0.0.1", port: a.adminPort))], bucket: "demo",
                username: a.user, password: a.password, operationTimeoutMs: 10_000))
        defer { Task { await client.close() } }
        try await Self.durableWrites(client, (0..<16).map { "before::\($0)" })
        let router = try RouterProcess(server: a)
        let viaRouter = try TestKVClient(port: router.port)
        #expect(
            try viaRouter.request(
                .set, key: "routed", value: Array("{}".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0)
            ).status == .success)
        // The gateway reaches the bucket through its smart client too: a document written through it.
        let gateway = try GatewayProcess(
            name: "rotate-gw",
            config: """
                {"databases":{"db":{"server":"http://127.0.0.1:\(a.adminPort)","bucket":"demo",\
                "username":"\(a.user)","password":"\(a.password)"}}}
                """)
        try gateway.start()
        defer { _ = gateway.stop() }
        let put = try await GatewayHTTP.request(
            .PUT, "http://127.0.0.1:\(gateway.adminPort)/db/through-gateway", body: Array("{\"a\":1}".utf8))
        #expect(put.status == 201, "\(String(decoding: put.body, as: UTF8.self))")
        for node in [a, b] {
            let s = try Self.stats(node)
            #expect(s["auth_logins_plain"] == "0", "\(node.adminPort): \(s["auth_logins_plain"] ?? "-") PLAIN logins")
            // The peer's replication, the smart client, the router's and the gateway's, and this STAT connection.
            #expect(Int(s["auth_logins_scram_sha512"] ?? "") ?? 0 >= 5, "\(s["auth_logins_scram_sha512"] ?? "-")")
        }

        let old = try Self.secret(a)
        #expect(try Self.secret(b) == old)
        #expect(try Self.kvLogin(b, password: old))
        // A long grace first: within it both values work everywhere, and replication goes on.
        let first = try b.http("POST", "/controller/rotateInternalSecret", form: [("graceSeconds", "120")])
        #expect(first.status == 200, "\(first.text)")
        #expect(try ClusterHarness.eventually { try Self.secret(a) != old && Self.secret(b) == Self.secret(a) })
        let middle = try Self.secret(a)
        for node in [a, b] {
            #expect(try Self.kvLogin(node, password: old))
            #expect(try Self.kvLogin(node, password: middle))
            #expect(try Self.httpStatus(node, password: old) == 200)
        }
        try await Self.durableWrites(client, (0..<16).map { "during::\($0)" })

        // A second rotation with a short grace: the first secret is dropped at once (only the last one is kept),
        // the second is refused once its grace has passed.
        let grace = 2
        let second = try a.http("POST", "/controller/rotateInternalSecret", form: [("graceSeconds", String(grace))])
        #expect(second.status == 200, "\(second.text)")
        let rotatedAt = Date()
        #expect(try ClusterHarness.eventually { try Self.secret(a) != middle && Self.secret(b) == Self.secret(a) })
        let new = try Self.secret(a)
        for node in [a, b] {
            #expect(try !Self.kvLogin(node, password: old), "first secret still logs in on \(node.adminPort)")
        }
        let remaining = Double(grace) - Date().timeIntervalSince(rotatedAt) + 1
        if remaining > 0 { try await Task.sleep(for: .milliseconds(Int(remaining * 1000))) }
        for node in [a, b] {
            #expect(try !Self.kvLogin(node, password: middle), "old secret still logs in on \(node.adminPort)")
            #expect(try Self.httpStatus(node, password: middle) == 401)
            #expect(try Self.kvLogin(node, password: new))
            #expect(try Self.httpStatus(node, password: new) == 200)
        }
        try await Self.durableWrites(client, (0..<16).map { "after::\($0)" })
        // b's replication reconnects after a restart: with the new secret, or majority writes would fail.
        _ = b.stop()
        try b.start()
        try await Self.durableWrites(client, (0..<32).map { "restarted::\($0)" }, timeout: 60)
        #expect(try Self.stats(b)["auth_logins_plain"] == "0")

        // A new admin password rotates the secret cluster-wide, and b learns the password too.
        let web = try a.http(
            "POST", "/settings/web", form: [("username", a.user), ("password", "changed-pw"), ("port", "SAME")])
        #expect(web.status == 200, "\(web.text)")
        #expect(try ClusterHarness.eventually { try Self.secret(b) != new && Self.secret(b) == Self.secret(a) })
        #expect(
            try ClusterHarness.eventually {
                try b.http("GET", "/pools/default", auth: (a.user, "changed-pw")).status == 200
            })
    }

    /// Proves the router's own login for its clients: it offers SCRAM first, a SCRAM login with its credentials
    /// succeeds with a server signature the client verifies (the Couchbase SDKs' default, no PLAIN fallback), a wrong
    /// password and an unknown user are refused and stay unauthenticated, and PLAIN still works for memcached
    /// clients. Before, the router offered PLAIN only.
    @Test func routerLogsItsClientsInWithScram() throws {
        let server = try ServerProcess.started(name: "router-scram")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        let router = try RouterProcess(server: server, extraArguments: ["--require-auth"])
        let mechs = try TestKVClient(port: router.port).request(.saslListMechs)
        #expect(String(buffer: mechs.value) == "SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 PLAIN")
        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)
        for hash in ScramHash.allCases {
            let c = try TestKVClient(port: router.port)
            let (status, verified) = try AuthProcessTests.scram(c, hash, user: server.user, password: server.password)
            #expect(status == .success && verified, "\(hash)")
            #expect(try c.request(.set, key: "k", value: Array("{}".utf8), extras: extras).status == .success)
        }
        for (user, password) in [(server.user, "wrong-password"), ("nobody", server.password)] {
            let c = try TestKVClient(port: router.port)
            #expect(try AuthProcessTests.scram(c, .sha512, user: user, password: password).0 == .authError)
            #expect(try c.request(.get, key: "k").status == .accessDenied)
        }
        let plain = try TestKVClient(port: router.port)
        #expect(try plain.authenticate(user: server.user, password: "wrong-password") == .authError)
        #expect(try plain.authenticate(user: server.user, password: server.password) == .success)
        #expect(try plain.request(.get, key: "k").status == .success)
    }
}
