import Foundation
import SetteeTLS
import SetteeTestSupport
import Testing

/// Node-to-node trust through a cluster CA (ADR 0047): `loadTrustedCAs` puts the CA the operator placed in the
/// node's `inbox/CA` into the cluster document, and members whose leaves that CA issued for their address are
/// trusted whatever leaf they show.
@Suite(.serialized, .onTestThreads) struct ClusterCAProcessTests {
    /// Writes a leaf for `names` (127.0.0.1 by default) from `issuer` (chain: leaf then CA) to
    /// `directory/name-{cert,key}.pem`.
    static func writeLeaf(
        _ issuer: TestCertificateAuthority, to directory: String, _ name: String, names: [String] = ["127.0.0.1"]
    ) throws -> [String] {
        let (chain, key) = try issuer.leafFiles(names)
        let cert = directory + "/\(name)-cert.pem"
        let keyPath = directory + "/\(name)-key.pem"
        try chain.write(toFile: cert, atomically: true, encoding: .utf8)
        try key.write(toFile: keyPath, atomically: true, encoding: .utf8)
        return ["--tls-cert", cert, "--tls-key", keyPath]
    }

    /// Proves, on two nodes whose leaves one test CA issued: loading needs CA files in the inbox (400 without),
    /// takes the CA (a dot-file is ignored), lists it on `GET /pools/default/trustedCAs` on both nodes once n1
    /// joined; n1 restarted with a fresh leaf (new key) from the same CA is called over TLS again by n0 with not one
    /// refused call and both nodes healthy, none in clear. Then a process at n1's address with a leaf from another
    /// CA (and no cluster secret) has n0's calls refused.
    @Test func aFreshLeafFromTheClusterCARejoinsAndAnotherCAIsRefused() async throws {
        let started = Date()
        let ca = try TestCertificateAuthority("settee test cluster CA")
        let files = NSTemporaryDirectory() + "settee-cluster-ca-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: files) }

        let n0 = try ServerProcess(name: "cluster-ca-0")
        defer { n0.stopAndRemove() }
        let (kvTLS0, adminTLS0) = (try freePort(), try freePort())
        n0.extraArguments =
            try Self.writeLeaf(ca, to: files, "n0") + [
                "--kv-tls-port", "\(kvTLS0)", "--admin-tls-port", "\(adminTLS0)",
            ]
        n0.readinessPorts = [n0.adminPort, kvTLS0, adminTLS0]
        try n0.start()
        let web = try n0.http(
            "POST", "/settings/web", form: [("username", n0.user), ("password", n0.password), ("port", "SAME")])
        #expect(web.status == 200, "\(web.text)")

        let empty = try n0.http("POST", "/node/controller/loadTrustedCAs")
        #expect(empty.status == 400, "\(empty.text)")
        let inbox = n0.dataDir + "/inbox/CA"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try ca.pem.write(toFile: inbox + "/ca.pem", atomically: true, encoding: .utf8)
        try "not a certificate".write(toFile: inbox + "/.notes", atomically: true, encoding: .utf8)
        let loaded = try n0.http("POST", "/node/controller/loadTrustedCAs")
        #expect(loaded.status == 200, "\(loaded.text)")
        let listed = try n0.http("GET", "/pools/default/trustedCAs").json()
        let entries = listed as? [[String: Any]] ?? []
        #expect(entries.count == 1)
        #expect((entries.first?["subject"] as? String)?.contains("settee test cluster CA") == true, "\(entries)")
        #expect(entries.first?["pem"] as? String == (try ca.pem))

        let n1 = try ServerProcess(name: "cluster-ca-1")
        defer { n1.stopAndRemove() }
        let (kvTLS1, adminTLS1) = (try freePort(), try freePort())
        let n1Files = try Self.writeLeaf(ca, to: files, "n1")
        n1.extraArguments = n1Files + ["--kv-tls-port", "\(kvTLS1)", "--admin-tls-port", "\(adminTLS1)"]
        n1.readinessPorts = [n1.adminPort, kvTLS1, adminTLS1]
        try n1.start()
        let first = try TLSIdentity.load(certificatePath: n1Files[1], keyPath: n1Files[3]).fingerprint
        let joined = try PeerTLSProcessTests.addNode(n0, "https://127.0.0.1:\(adminTLS1)", fingerprint: first)
        #expect(joined.status == 200, "\(joined.text)")
        let tls = "settee_peer_calls_total{transport=\"tls\"}"
        let refused = "settee_peer_calls_refused_total"
        let plain = "settee_peer_calls_total{transport=\"plain\"}"
        #expect(
            try ClusterHarness.eventually(20) {
                try [n0, n1].allSatisfy { (try PeerTLSProcessTests.metric($0, tls) ?? 0) >= 3 }
            }, "the nodes do not call each other over TLS")
        #expect(
            try ClusterHarness.eventually(20) {
                let text = try n1.http("GET", "/pools/default/trustedCAs", auth: (n0.user, n0.password)).text
                return text.contains("settee test cluster CA")
            }, "n1 does not hold the cluster's CA")

        // n1 down, a fresh leaf (new key) from the same CA in its files, back on the same ports.
        _ = n1.stop()
        let second = try Self.writeLeaf(ca, to: files, "n1")
        #expect(try TLSIdentity.load(certificatePath: second[1], keyPath: second[3]).fingerprint != first)
        let refusedBefore = try PeerTLSProcessTests.metric(n0, refused) ?? 0
        try n1.start()
        let tlsAtRestart = try PeerTLSProcessTests.metric(n0, tls) ?? 0
        #expect(
            try ClusterHarness.eventually(20) {
                let nodes = ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                return (try PeerTLSProcessTests.metric(n0, tls) ?? 0) >= tlsAtRestart + 3 && nodes.count == 2
                    && nodes.allSatisfy { $0["status"] as? String == "healthy" }
            }, "n0 does not call the restarted n1 over TLS, or does not see it healthy")
        #expect(try PeerTLSProcessTests.metric(n0, refused) ?? 0 == refusedBefore, "n0 refused the CA's fresh leaf")
        for node in [n0, n1] { #expect(try PeerTLSProcessTests.metric(node, plain) ?? 0 == 0) }
        let rejoinedAfter = Date().timeIntervalSince(started)

        // Another CA's leaf at n1's address, without the cluster's secret.
        _ = n1.stop()
        n1.removeData()
        _ = try Self.writeLeaf(try TestCertificateAuthority("someone else's CA"), to: files, "n1")
        try n1.start()
        let refusedAtStranger = try PeerTLSProcessTests.metric(n0, refused) ?? 0
        #expect(
            try ClusterHarness.eventually(15) {
                (try PeerTLSProcessTests.metric(n0, refused) ?? 0) >= refusedAtStranger + 2
            }, "n0's calls to another CA's leaf are not refused")
        #expect(try PeerTLSProcessTests.metric(n0, plain) ?? 0 == 0)
        print(
            "cluster CA process test: rejoined \(String(format: "%.1f", rejoinedAfter)) s after start, total "
                + "\(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }

    /// A node with a leaf from `ca` (or the given files) and TLS ports, started.
    static func caNode(_ name: String, files: [String]) throws -> (ServerProcess, adminTLS: Int) {
        let node = try ServerProcess(name: name)
        let (kvTLS, adminTLS) = (try freePort(), try freePort())
        node.extraArguments = files + ["--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(adminTLS)"]
        node.readinessPorts = [node.adminPort, kvTLS, adminTLS]
        try node.start()
        return (node, adminTLS)
    }

    /// Proves `addNode` over HTTPS without a fingerprint on the strength of the cluster's trusted CAs (ADR 0047):
    /// refused (asking for a fingerprint or a CA) while the cluster trusts no CA; once the CA is loaded, a node
    /// showing another CA's leaf is refused, so is a leaf of the cluster's CA that does not name the address
    /// dialled (each with a message naming the CAs, and nothing joined); a node with the CA's leaf for its address
    /// is added with no fingerprint and pinned to the leaf it showed, and so is a third: three nodes, all healthy,
    /// calling each other over TLS only.
    @Test func addNodeWithoutAFingerprintOnTheClusterCA() async throws {
        let started = Date()
        let ca = try TestCertificateAuthority("settee test cluster CA")
        let files = NSTemporaryDirectory() + "settee-cluster-ca-add-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: files) }

        let (n0, _) = try Self.caNode("cluster-ca-add-0", files: try Self.writeLeaf(ca, to: files, "n0"))
        defer { n0.stopAndRemove() }
        let web = try n0.http(
            "POST", "/settings/web", form: [("username", n0.user), ("password", n0.password), ("port", "SAME")])
        #expect(web.status == 200, "\(web.text)")

        // n1 first shows another CA's leaf for its address.
        let (n1, adminTLS1) = try Self.caNode(
            "cluster-ca-add-1",
            files: try Self.writeLeaf(try TestCertificateAuthority("someone else's CA"), to: files, "n1"))
        defer { n1.stopAndRemove() }
        let n1URL = "https://127.0.0.1:\(adminTLS1)"
        let noCA = try PeerTLSProcessTests.addNode(n0, n1URL, fingerprint: nil)
        #expect(noCA.status == 400 && noCA.text.contains("tlsFingerprint"), "\(noCA.text)")

        let inbox = n0.dataDir + "/inbox/CA"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try ca.pem.write(toFile: inbox + "/ca.pem", atomically: true, encoding: .utf8)
        let loaded = try n0.http("POST", "/node/controller/loadTrustedCAs")
        #expect(loaded.status == 200, "\(loaded.text)")

        let stranger = try PeerTLSProcessTests.addNode(n0, n1URL, fingerprint: nil)
        #expect(stranger.status == 400 && stranger.text.contains("trusted CAs"), "\(stranger.text)")

        // Then the cluster CA's leaf, but for another address than the one dialled.
        _ = n1.stop()
        _ = try Self.writeLeaf(ca, to: files, "n1", names: ["127.0.0.2", "node1.example.com"])
        try n1.start()
        let otherAddress = try PeerTLSProcessTests.addNode(n0, n1URL, fingerprint: nil)
        #expect(otherAddress.status == 400 && otherAddress.text.contains("trusted CAs"), "\(otherAddress.text)")
        let alone = ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
        #expect(alone.count == 1, "a refused node joined: \(alone)")

        // Then the CA's leaf for its address: added without a fingerprint, pinned to what it showed.
        _ = n1.stop()
        _ = try Self.writeLeaf(ca, to: files, "n1")
        try n1.start()
        let joined = try PeerTLSProcessTests.addNode(n0, n1URL, fingerprint: nil)
        #expect(joined.status == 200, "\(joined.text)")
        let (n2, adminTLS2) = try Self.caNode("cluster-ca-add-2", files: try Self.writeLeaf(ca, to: files, "n2"))
        defer { n2.stopAndRemove() }
        let third = try PeerTLSProcessTests.addNode(n0, "https://127.0.0.1:\(adminTLS2)", fingerprint: nil)
        #expect(third.status == 200, "\(third.text)")

        let tls = "settee_peer_calls_total{transport=\"tls\"}"
        let plain = "settee_peer_calls_total{transport=\"plain\"}"
        #expect(
            try ClusterHarness.eventually(20) {
                let nodes = ClusterHarness.json(try n0.http("GET", "/pools/default"))["nodes"] as? [[String: Any]] ?? []
                let healthy = nodes.count == 3 && nodes.allSatisfy { $0["status"] as? String == "healthy" }
                let calling = try [n0, n1, n2].allSatisfy { (try PeerTLSProcessTests.metric($0, tls) ?? 0) >= 3 }
                return healthy && calling
            }, "the three nodes do not call each other over TLS, or are not all healthy")
        for node in [n0, n1, n2] { #expect(try PeerTLSProcessTests.metric(node, plain) ?? 0 == 0) }
        print(
            "cluster CA addNode process test: \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
