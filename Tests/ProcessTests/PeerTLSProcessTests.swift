import Foundation
import NIOConcurrencyHelpers
import SetteeTLS
import SetteeTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Node-to-node admin calls over TLS pinned to the cluster document's fingerprints, and `/controller/addNode`
/// sending nothing to a target that does not present the pinned certificate (ADR 0030).
@Suite(.serialized, .onTestThreads) struct PeerTLSProcessTests {
    /// A value of `/metrics` (Prometheus text) on `node`: the first sample line starting with `series`.
    static func metric(_ node: ServerProcess, _ series: String) throws -> Double? {
        let text = try node.http("GET", "/metrics").text
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.split(separator: " ").last ?? "")
        }
        return nil
    }

    static func fingerprint(_ node: ServerProcess) throws -> String {
        try TLSIdentity.load(certificatePath: node.dataDir + "/tls/cert.pem", keyPath: node.dataDir + "/tls/key.pem")
            .fingerprint
    }

    static func addNode(_ via: ServerProcess, _ hostname: String, fingerprint: String?) throws
        -> ServerProcess.HTTPResult
    {
        var form = [("hostname", hostname), ("user", via.user), ("password", via.password)]
        if let fingerprint { form.append(("tlsFingerprint", fingerprint)) }
        return try via.http("POST", "/controller/addNode", form: form)
    }

    /// Proves a two-node TLS cluster's peer calls (the join, config pushes, heartbeats both ways) all go over
    /// HTTPS pinned to the fingerprints in the cluster document: each node counts TLS calls and not one plain-HTTP
    /// call, and both see each other healthy. Then another process comes up at node 1's address with its own
    /// certificate and without the cluster's secret (an impostor; a restart of node 1 itself with new files rejoins,
    /// ADR 0040, `CertificateRestartProcessTests`): node 0 refuses its calls there (counted as refused) and still
    /// makes none in clear.
    @Test func peerCallsUsePinnedTLSAndRefuseAnotherCertificate() async throws {
        let (n0, _, _) = try TLSProcessTests.tlsNode(name: "peer-tls-0")
        defer { n0.stopAndRemove() }
        let n1 = try ServerProcess(name: "peer-tls-1")
        defer { n1.stopAndRemove() }
        let adminTLS1 = try freePort()
        n1.extraArguments = ["--tls", "--kv-tls-port", "\(try freePort())", "--admin-tls-port", "\(adminTLS1)"]
        try n1.start()
        try TLSProcessTests.waitUntilListening(adminTLS1)

        let joined = try Self.addNode(n0, "https://127.0.0.1:\(adminTLS1)", fingerprint: try Self.fingerprint(n1))
        #expect(joined.status == 200, "\(joined.text)")
        // Heartbeats run every second both ways; pushes followed the join.
        let tlsCalls = "settee_peer_calls_total{transport=\"tls\"}"
        let bothCalledOverTLS = try ClusterHarness.eventually(20) {
            let counts = try [n0, n1].map { try Self.metric($0, tlsCalls) ?? 0 }
            return counts.allSatisfy { $0 >= 3 }
        }
        #expect(bothCalledOverTLS)
        for node in [n0, n1] {
            #expect(try Self.metric(node, "settee_peer_calls_total{transport=\"plain\"}") == 0)
            #expect(try Self.metric(node, "settee_peer_calls_refused_total") == 0)
            // No CA in this cluster: every TLS call was admitted by the member's pin (ADR 0057).
            let viaPin = try Self.metric(node, "settee_peer_tls_verified_total{api=\"admin\",via=\"pin\"}") ?? 0
            #expect(viaPin >= 3)
            #expect(try Self.metric(node, "settee_peer_tls_verified_total{api=\"admin\",via=\"ca\"}") == 0)
            let nodes = ClusterHarness.json(try node.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
            #expect(nodes.count == 2)
            #expect(nodes.allSatisfy { $0["status"] as? String == "healthy" }, "\(nodes)")
        }

        // Same address, another certificate, not the cluster's secret.
        _ = n1.stop()
        n1.removeData()
        try n1.start()
        try TLSProcessTests.waitUntilListening(adminTLS1)
        let impostorRefused = try ClusterHarness.eventually(20) {
            let refused = try Self.metric(n0, "settee_peer_calls_refused_total")
            return (refused ?? 0) >= 2
        }
        #expect(impostorRefused)
        #expect(try Self.metric(n0, "settee_peer_calls_total{transport=\"plain\"}") == 0)
    }

    /// Proves `/controller/addNode` hands a rogue target nothing: a fake node presenting its own certificate, added
    /// with another fingerprint, gets a TLS handshake that is broken off and not one HTTP request (no
    /// credentials, no cluster document); https without a fingerprint and plain HTTP to a non-loopback host are
    /// refused before any connection. The same fake pinned by its own fingerprint does get the join with the
    /// cluster document, so the first check is not vacuous.
    @Test func addNodeSendsNothingToATargetThatIsNotThePinnedOne() async throws {
        let (n0, _, _) = try TLSProcessTests.tlsNode(name: "peer-tls-rogue")
        defer { n0.stopAndRemove() }
        let rogue = try await FakeAdminNode(tls: true)
        let wrongPin = try Self.fingerprint(n0)

        let refused = try Self.addNode(n0, "https://127.0.0.1:\(rogue.port)", fingerprint: wrongPin)
        #expect(refused.status == 400)
        #expect(refused.text.contains("not the pinned one"), "\(refused.text)")
        let handshakes = rogue.connections.withLockedValue { $0 }
        let requestsAfterRefusal = rogue.requests.withLockedValue { $0 }
        #expect(handshakes >= 1)
        #expect(requestsAfterRefusal.isEmpty)

        let noPin = try Self.addNode(n0, "https://127.0.0.1:\(rogue.port)", fingerprint: nil)
        #expect(noPin.status == 400 && noPin.text.contains("tlsFingerprint"), "\(noPin.text)")
        let remote = try Self.addNode(n0, "192.0.2.1:8091", fingerprint: nil)
        #expect(remote.status == 400 && remote.text.contains("allowInsecure=true"), "\(remote.text)")
        let requestsAfterRefusals = rogue.requests.withLockedValue { $0 }
        #expect(requestsAfterRefusals.isEmpty)
        let members = ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
        #expect(members.count == 1)

        // Pinned to the fake's own certificate, the operator means it: the join goes there, document included.
        let pinned = try Self.addNode(n0, "https://127.0.0.1:\(rogue.port)", fingerprint: rogue.fingerprint)
        #expect(pinned.status == 200, "\(pinned.text)")
        let received = rogue.requests.withLockedValue { $0 }
        #expect(received.map(\.uri).contains("/settee/internal/node"))
        let joinBody = received.first(where: { $0.uri == "/settee/internal/join" }).map(\.body) ?? []
        let document = String(decoding: joinBody, as: UTF8.self)
        #expect(document.contains("internalSecret"))
        await rogue.close()
    }
}
