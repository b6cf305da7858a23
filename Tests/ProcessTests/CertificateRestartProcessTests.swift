import Foundation
import SetteeClient
import SetteeTLS
import SetteeTestSupport
import Testing

/// A node restarted with replaced certificate files rejoins; a process at its address without the cluster's secret
/// stays refused (ADR 0040, relaxing ADR 0030's restart rule).
@Suite(.serialized, .onTestThreads) struct CertificateRestartProcessTests {
    /// Proves, on a two-node TLS cluster with one replica: n1 stopped, its certificate and key replaced, restarted on
    /// the same ports comes to be pinned by n0's cluster document with the new fingerprint (it asks the orchestrator
    /// with the internal secret, the orchestrator checks the new certificate over a handshake pinned to it); then n0
    /// calls it over TLS without refusal or plain call, both healthy, and majority-durable writes through a client
    /// trusting the new certificate succeed (replica streams rejoined). Then a fresh process at n1's address (its own
    /// certificate, no secret) is refused by n0's peer calls, never called in clear, cannot get its certificate
    /// pinned with a guessed internal password, and n0's pin stays the rejoined node's.
    @Test func restartedNodeWithANewCertificateRejoinsAndAnImpostorDoesNot() async throws {
        let started = Date()
        let (n0, kvTLS0, _) = try CertificateReloadProcessTests.tlsNode("cert-restart-0")
        defer { n0.stopAndRemove() }
        let (n1, _, adminTLS1) = try CertificateReloadProcessTests.tlsNode("cert-restart-1")
        defer { n1.stopAndRemove() }
        _ = try CertificateReloadProcessTests.formCluster(n0, n1, adminTLS1: adminTLS1)
        let original0 = try String(contentsOfFile: n0.dataDir + "/tls/cert.pem", encoding: .utf8)

        // n1 down, its files replaced as an operator would, back on the same ports.
        _ = n1.stop()
        let fresh = try SelfSignedIdentity(
            commonName: "settee-server replaced \(UUID().uuidString.prefix(8))", hosts: ["127.0.0.1"], validFor: 3600)
        try fresh.certificatePEM.write(toFile: n1.dataDir + "/tls/cert.pem", atomically: true, encoding: .utf8)
        try fresh.privateKeyPEM.write(toFile: n1.dataDir + "/tls/key.pem", atomically: true, encoding: .utf8)
        try n1.start()
        #expect(await CertificateReloadProcessTests.presents(adminTLS1, fresh.fingerprint))
        #expect(
            try ClusterHarness.eventually(20) {
                try CertificateReloadProcessTests.pinned(on: n0, for: n1) == fresh.fingerprint
            }, "n0's cluster document does not pin n1's replaced certificate")
        // n1's own copy of the cluster document follows n0's (the orchestrator's) change: wait for it, as for n0's.
        #expect(
            try ClusterHarness.eventually(20) {
                try CertificateReloadProcessTests.pinned(on: n1, for: n1) == fresh.fingerprint
            }, "n1's cluster document does not pin its own replaced certificate")
        let rejoinedAfter = Date().timeIntervalSince(started)

        let tls = "settee_peer_calls_total{transport=\"tls\"}"
        let refusedCalls = "settee_peer_calls_refused_total"
        let plain = "settee_peer_calls_total{transport=\"plain\"}"
        try await Task.sleep(for: .milliseconds(1500))
        let tlsBefore = try PeerTLSProcessTests.metric(n0, tls) ?? 0
        let refusedBefore = try PeerTLSProcessTests.metric(n0, refusedCalls) ?? 0
        #expect(
            try ClusterHarness.eventually(15) { (try PeerTLSProcessTests.metric(n0, tls) ?? 0) >= tlsBefore + 3 },
            "n0 does not call the rejoined n1 over TLS")
        #expect(try PeerTLSProcessTests.metric(n0, refusedCalls) == refusedBefore)
        #expect(
            try ClusterHarness.eventually(15) {
                try [n0, n1].allSatisfy { node in
                    let nodes =
                        ClusterHarness.json(try node.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                    return nodes.count == 2 && nodes.allSatisfy { $0["status"] as? String == "healthy" }
                }
            }, "both nodes do not see each other healthy")
        for node in [n0, n1] { #expect(try PeerTLSProcessTests.metric(node, plain) == 0) }

        let bundle = n0.dataDir + "/restart-certificates.pem"
        try (original0 + fresh.certificatePEM).write(toFile: bundle, atomically: true, encoding: .utf8)
        let client = try await BucketClient.connect(
            TLSProcessTests.clientOptions(n0, kvTLS: kvTLS0, trust: .authority(path: bundle)))
        try await CertificateReloadProcessTests.writeDurably(client, prefix: "restarted", count: 16)
        for i in 0..<16 { #expect(try await client.get("restarted::\(i)").value == [UInt8(i)]) }
        await client.close()

        // An impostor: n1's address and ports, its own self-signed certificate, no cluster secret.
        _ = n1.stop()
        n1.removeData()
        try n1.start()
        let impostorFingerprint = try PeerTLSProcessTests.fingerprint(n1)
        #expect(impostorFingerprint != fresh.fingerprint)
        let refusedAtImpostor = try PeerTLSProcessTests.metric(n0, refusedCalls) ?? 0
        let guessed = try n0.http(
            "POST", "/settee/internal/certificate",
            body: Data(#"{"node":"\#(ClusterHarness.nodeName(n1))","fingerprint":"\#(impostorFingerprint)"}"#.utf8),
            contentType: "application/json", auth: ("@settee-internal", "guessed"))
        #expect(guessed.status == 401, "\(guessed.text)")
        #expect(
            try ClusterHarness.eventually(15) {
                (try PeerTLSProcessTests.metric(n0, refusedCalls) ?? 0) >= refusedAtImpostor + 3
            }, "n0's calls to the impostor are not refused")
        #expect(try CertificateReloadProcessTests.pinned(on: n0, for: n1) == fresh.fingerprint)
        #expect(try PeerTLSProcessTests.metric(n0, plain) == 0)
        #expect(
            try ClusterHarness.eventually(15) {
                let members =
                    ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                let seen = members.first { $0["otpNode"] as? String == ClusterHarness.nodeName(n1) }
                return seen != nil && seen?["status"] as? String != "healthy"
            }, "n0 sees the impostor as its healthy member")
        print(
            "certificate restart process test: rejoined \(String(format: "%.1f", rejoinedAfter)) s after start, "
                + "total \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
