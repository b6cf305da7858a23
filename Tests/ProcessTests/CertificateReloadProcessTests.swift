import Foundation
import SetteeClient
import SetteeCore
import SetteeProtocol
import SetteeTLS
import SetteeTestSupport
import Testing

/// `POST /node/controller/reloadCertificate`: a node's certificate replaced without a restart, and the cluster
/// document made to pin the new one (ADR 0038).
@Suite(.serialized, .onTestThreads) struct CertificateReloadProcessTests {
    /// A `--tls` node (self-signed certificate in `<data-dir>/tls`) on runtime ports, started.
    static func tlsNode(_ name: String) throws -> (server: ServerProcess, kvTLS: Int, adminTLS: Int) {
        let server = try ServerProcess(name: name)
        let kvTLS = try freePort()
        let adminTLS = try freePort()
        server.extraArguments = ["--tls", "--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(adminTLS)"]
        server.readinessPorts = [server.adminPort, kvTLS, adminTLS]
        try server.start()
        return (server, kvTLS, adminTLS)
    }

    /// `ClusterHarness.formCluster` of `n0` and `n1`, `n1` joined over HTTPS pinned to its current certificate (bucket
    /// `demo`, one replica). Returns the fingerprint `n1` was pinned with.
    static func formCluster(_ n0: ServerProcess, _ n1: ServerProcess, adminTLS1: Int) throws -> String {
        let old = try PeerTLSProcessTests.fingerprint(n1)
        try ClusterHarness.formCluster(
            [n0, n1], join: { _ in .init(hostname: "https://127.0.0.1:\(adminTLS1)", fingerprint: old) },
            rebalanceTimeout: 60)
        return old
    }

    /// Whether a fresh TLS connection to `port` is shown the certificate with `fingerprint`.
    static func presents(_ port: Int, _ fingerprint: String) async -> Bool {
        (try? await CertificatePin.fetchChain(
            host: "127.0.0.1", port: port, fingerprint: fingerprint, timeout: .seconds(5)))
            != nil
    }

    /// The fingerprint `node`'s cluster document pins for `member`.
    static func pinned(on node: ServerProcess, for member: ServerProcess) throws -> String? {
        let document = ClusterHarness.json(try node.http("GET", "/settee/internal/config"))
        let members = document["members"] as? [[String: Any]] ?? []
        let entry = members.first {
            ($0["node"] as? [String: Any])?["otpNode"] as? String == ClusterHarness.nodeName(member)
        }
        return (entry?["node"] as? [String: Any])?["tlsFingerprint"] as? String
    }

    /// Proves certificate rotation end to end on a two-node TLS cluster (n0 the orchestrator, n1 rotated): a
    /// ro_admin's or a cluster_admin's reload is 403 and changes nothing; the admin's reload of new files makes fresh connections on
    /// n1's KV and admin TLS ports see the new certificate (and no longer the old one) while a smart client's
    /// connections opened before keep working; n0's cluster document comes to pin the new fingerprint, after which
    /// n0 keeps calling n1 over TLS with no refusal and no plain call, both healthy; a new client trusting the new
    /// certificate writes with majority durability (replica streams over KV TLS) and reads back; a key file that does
    /// not match is refused with 400 and the new certificate keeps being served. Then the orchestrator's own reload
    /// reaches n1's document the same way.
    @Test func reloadRotatesEveryTLSPortAndTheClusterPinsTheNewCertificate() async throws {
        let started = Date()
        let (n0, kvTLS0, adminTLS0) = try Self.tlsNode("cert-reload-0")
        defer { n0.stopAndRemove() }
        let (n1, kvTLS1, adminTLS1) = try Self.tlsNode("cert-reload-1")
        defer { n1.stopAndRemove() }
        let old = try CertificateReloadProcessTests.formCluster(n0, n1, adminTLS1: adminTLS1)
        for (name, role) in [("ops", "cluster_admin"), ("viewer", "ro_admin")] {
            let made = try n0.http(
                "PUT", "/settings/rbac/users/local/\(name)", form: [("password", "\(name)-pw"), ("roles", role)])
            #expect(made.status == 200, "\(made.text)")
        }
        #expect(
            try ClusterHarness.eventually(20) {
                try n1.http("GET", "/pools/default", auth: ("ops", "ops-pw")).status == 200
            }, "the users did not reach n1")

        // A client trusting both original certificates, its connections open before the rotation.
        let bundle = n0.dataDir + "/original-certificates.pem"
        let originals = try [n0, n1].map { try String(contentsOfFile: $0.dataDir + "/tls/cert.pem", encoding: .utf8) }
        try originals.joined().write(toFile: bundle, atomically: true, encoding: .utf8)
        var options = TLSProcessTests.clientOptions(n0, kvTLS: kvTLS0, trust: .authority(path: bundle))
        options.operationTimeoutMs = 10_000
        let before = try await BucketClient.connect(options)
        try await Self.writeDurably(before, prefix: "before", count: 16)

        // New files in place of n1's, as an operator would copy them.
        let fresh = try SelfSignedIdentity(
            commonName: "settee-server rotated \(UUID().uuidString.prefix(8))", hosts: ["127.0.0.1"], validFor: 3600)
        try fresh.certificatePEM.write(toFile: n1.dataDir + "/tls/cert.pem", atomically: true, encoding: .utf8)
        try fresh.privateKeyPEM.write(toFile: n1.dataDir + "/tls/key.pem", atomically: true, encoding: .utf8)

        let refused = try n1.http("POST", "/node/controller/reloadCertificate", auth: ("viewer", "viewer-pw"))
        #expect(refused.status == 403, "\(refused.text)")
        #expect(await Self.presents(adminTLS1, old))

        // Reloading is security: a Cluster Admin is refused too (Couchbase: Full or Security Admin); the admin reloads.
        let clusterAdmin = try n1.http("POST", "/node/controller/reloadCertificate", auth: ("ops", "ops-pw"))
        #expect(clusterAdmin.status == 403, "\(clusterAdmin.text)")
        try n1.enableAudit()
        let reloaded = try n1.http("POST", "/node/controller/reloadCertificate")
        #expect(reloaded.status == 200, "\(reloaded.text)")
        // Audited (issue 72 item 3): who reloaded, and no key material in the record.
        let audited = try n1.auditRecords(id: 40974)
        #expect(audited.count == 1, "\(audited)")
        #expect(((audited.first?["real_userid"] as? [String: Any])?["user"] as? String) == "<ud>Administrator</ud>")
        #expect(!(try String(contentsOfFile: n1.dataDir + "/logs/audit.log", encoding: .utf8)).contains("PRIVATE KEY"))
        #expect(ClusterHarness.json(reloaded)["fingerprint"] as? String == fresh.fingerprint, "\(reloaded.text)")
        for port in [kvTLS1, adminTLS1] {
            #expect(await Self.presents(port, fresh.fingerprint), "port \(port) does not present the new certificate")
            #expect(!(await Self.presents(port, old)), "port \(port) still presents the old certificate")
        }
        // Connections opened before the rotation keep working (reads and durable writes through both nodes).
        for i in 0..<16 { #expect(try await before.get("before::\(i)").value == [UInt8(i)]) }
        try await Self.writeDurably(before, prefix: "during", count: 8)

        // The cluster learns it through the orchestrator's document.
        #expect(
            try ClusterHarness.eventually(15) { try Self.pinned(on: n0, for: n1) == fresh.fingerprint },
            "n0's cluster document does not pin n1's new certificate")
        #expect(try Self.pinned(on: n1, for: n1) == fresh.fingerprint)
        let tls = "settee_peer_calls_total{transport=\"tls\"}"
        let refusedCalls = "settee_peer_calls_refused_total"
        // Past any call already under way with the old pin, n0 keeps calling n1 over TLS and is never refused.
        try await Task.sleep(for: .milliseconds(1500))
        let tlsBefore = try PeerTLSProcessTests.metric(n0, tls) ?? 0
        let refusedBefore = try PeerTLSProcessTests.metric(n0, refusedCalls) ?? 0
        #expect(
            try ClusterHarness.eventually(15) { (try PeerTLSProcessTests.metric(n0, tls) ?? 0) >= tlsBefore + 3 },
            "n0 stopped calling n1 over TLS")
        #expect(try PeerTLSProcessTests.metric(n0, refusedCalls) == refusedBefore)
        print("reload answer: \(reloaded.text); n0's peer calls refused around the switch: \(refusedBefore)")
        for node in [n0, n1] {
            #expect(try PeerTLSProcessTests.metric(node, "settee_peer_calls_total{transport=\"plain\"}") == 0)
            let nodes = ClusterHarness.json(try node.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
            #expect(nodes.count == 2 && nodes.allSatisfy { $0["status"] as? String == "healthy" }, "\(nodes)")
        }

        // A new client trusting n0's certificate and n1's new one: durable writes need n1's replica streams.
        let rotated = n0.dataDir + "/rotated-certificates.pem"
        try (originals[0] + fresh.certificatePEM).write(toFile: rotated, atomically: true, encoding: .utf8)
        let after = try await BucketClient.connect(
            TLSProcessTests.clientOptions(n1, kvTLS: kvTLS1, trust: .authority(path: rotated)))
        try await Self.writeDurably(after, prefix: "after", count: 16)
        for i in 0..<16 { #expect(try await after.get("after::\(i)").value == [UInt8(i)]) }
        for i in 0..<8 { #expect(try await after.get("during::\(i)").value == [UInt8(i)]) }
        await after.close()
        await before.close()

        // A key that is not the certificate's: refused, the certificate in use stays.
        let stranger = try SelfSignedIdentity(commonName: "settee-server stranger")
        try stranger.privateKeyPEM.write(toFile: n1.dataDir + "/tls/key.pem", atomically: true, encoding: .utf8)
        let mismatch = try n1.http("POST", "/node/controller/reloadCertificate")
        #expect(mismatch.status == 400)
        #expect(mismatch.text.contains("does not match"), "\(mismatch.text)")
        for port in [kvTLS1, adminTLS1] { #expect(await Self.presents(port, fresh.fingerprint)) }
        #expect(try Self.pinned(on: n0, for: n1) == fresh.fingerprint)

        // The orchestrator's own rotation: it pins its new certificate itself and pushes the document to n1.
        let orchestratorFresh = try SelfSignedIdentity(
            commonName: "settee-server rotated \(UUID().uuidString.prefix(8))", hosts: ["127.0.0.1"], validFor: 3600)
        try orchestratorFresh.certificatePEM.write(
            toFile: n0.dataDir + "/tls/cert.pem", atomically: true, encoding: .utf8)
        try orchestratorFresh.privateKeyPEM.write(
            toFile: n0.dataDir + "/tls/key.pem", atomically: true, encoding: .utf8)
        // Through the CLI: `settee node reload-certificate` against the orchestrator.
        let own = try runCLI(["node", "reload-certificate"], server: n0)
        #expect(own.status == 0, "\(own.stdout) \(own.stderr)")
        #expect(own.stdout.contains("serving certificate \(orchestratorFresh.fingerprint)"), "\(own.stdout)")
        #expect(await Self.presents(adminTLS0, orchestratorFresh.fingerprint))
        #expect(
            try ClusterHarness.eventually(15) { try Self.pinned(on: n1, for: n0) == orchestratorFresh.fingerprint },
            "n1's cluster document does not pin n0's new certificate")
        #expect(try PeerTLSProcessTests.metric(n1, "settee_peer_calls_total{transport=\"plain\"}") == 0)
        print("certificate reload process test: \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }

    /// Writes `count` keys with majority durability, retrying each while the replica streams (re)connect.
    static func writeDurably(_ client: BucketClient, prefix: String, count: Int) async throws {
        for i in 0..<count {
            let until = Date().addingTimeInterval(20)
            while true {
                do {
                    _ = try await client.upsert("\(prefix)::\(i)", [UInt8(i)], durability: .majority)
                    break
                } catch {
                    if Date() > until { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
    }
}
