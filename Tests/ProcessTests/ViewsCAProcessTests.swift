import Foundation
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeTLS
import SetteeTestSupport
import Testing

/// The views port's peer calls on a cluster whose members were added through its trusted CA (ADR 0047).
@Suite(.serialized, .onTestThreads) struct ViewsCAProcessTests {
    /// Proves, on three nodes whose leaves one test CA issued, with the CA loaded and n1, n2 added over `https://`
    /// without a fingerprint: a `stale=false` view query on n0 returns the documents of every node (each node's
    /// `_local` answer holds only its own share, and the shares add up to all), so n0's scatter to n1 and n2 (their
    /// views TLS ports, trusted through the cluster's CAs: `PinnedPeerTrust` tries the CAs first whenever the cluster
    /// document holds one) and the design document's forwarding to them succeeded; no peer call went in clear.
    @Test func viewQueryScattersThroughTheClusterCA() async throws {
        let started = Date()
        let ca = try TestCertificateAuthority("settee test cluster CA")
        let files = NSTemporaryDirectory() + "settee-views-ca-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: files) }
        var nodes: [ServerProcess] = []
        defer { nodes.forEach { $0.stopAndRemove() } }
        var adminTLS: [Int] = []
        for i in 0..<3 {
            let (node, tls) = try ClusterCAProcessTests.caNode(
                "views-ca-\(i)", files: try ClusterCAProcessTests.writeLeaf(ca, to: files, "n\(i)"))
            nodes.append(node)
            adminTLS.append(tls)
        }
        let n0 = nodes[0]
        try n0.initialize(replicaNumber: 0)
        let inbox = n0.dataDir + "/inbox/CA"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        try ca.pem.write(toFile: inbox + "/ca.pem", atomically: true, encoding: .utf8)
        let loaded = try n0.http("POST", "/node/controller/loadTrustedCAs")
        #expect(loaded.status == 200, "\(loaded.text)")
        for i in 1..<3 {
            let added = try PeerTLSProcessTests.addNode(n0, "https://127.0.0.1:\(adminTLS[i])", fingerprint: nil)
            #expect(added.status == 200, "\(added.text)")
        }
        _ = try ClusterHarness.rebalance(n0, known: nodes, timeout: 120)
        #expect(
            try ClusterHarness.eventually {
                let maps = try nodes.map { try ClusterHarness.map($0) }
                return maps[0].servers.count == 3 && maps.allSatisfy { $0.chains == maps[0].chains }
            }, "the three nodes do not share one map")
        for node in nodes { try node.waitForViews() }

        let map = try ClusterHarness.map(n0)
        var clients: [String: TestKVClient] = [:]
        for node in nodes { clients["127.0.0.1:\(node.kvPort)"] = try TestKVClient(port: node.kvPort) }
        let count = 60
        for i in 0..<count {
            let id = "doc::\(i)"
            let vb = Int(VBucketHash.vbucket(forKey: Array(id.utf8)).rawValue)
            let client = try #require(clients[map.servers[map.chains[vb][0]]])
            let r = try client.request(
                .set, key: id, value: Array(#"{"k":\#(i)}"#.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
                datatype: 1)
            #expect(r.status == .success)
        }

        let design = #"{"views":{"by_k":{"map":"function(doc, meta){ emit(doc.k, null); }"}}}"#
        #expect(try n0.views("PUT", "/demo/_design/t", body: Array(design.utf8)).status == 201)
        func rows(_ node: ServerProcess, local: Bool) throws -> [JSON] {
            let r = try node.views("GET", "/demo/_design/t/_view/by_k?stale=false" + (local ? "&_local=true" : ""))
            #expect(r.status == 200, "\(r.text.prefix(300))")
            return try JSON.parse(Array(r.body))["rows"]?.arrayValue ?? []
        }
        // Which trust admitted n0's views peer calls (ADR 0057): read before the query, so the rise is its own.
        let viaCA = "settee_peer_tls_verified_total{api=\"views\",via=\"ca\"}"
        let viaPin = "settee_peer_tls_verified_total{api=\"views\",via=\"pin\"}"
        let caBefore = try PeerTLSProcessTests.metric(n0, viaCA) ?? 0
        let all = try rows(n0, local: false)
        #expect(all.count == count, "n0's query returned \(all.count) of \(count) rows")
        let shares = try nodes.map { try rows($0, local: true).count }
        #expect(shares.allSatisfy { $0 > 0 && $0 < count } && shares.reduce(0, +) == count, "\(shares)")

        // The scatter called n1 and n2 (at least one call each), every call admitted through the CA, none by a pin;
        // the admin calls between the members (joined without a fingerprint) were admitted through the CA too.
        let caAfter = try #require(try PeerTLSProcessTests.metric(n0, viaCA))
        #expect(caAfter >= caBefore + 2, "views calls through the CA: \(caBefore) -> \(caAfter)")
        for node in nodes {
            #expect(try PeerTLSProcessTests.metric(node, viaPin) == 0)
            #expect(
                try PeerTLSProcessTests.metric(node, "settee_peer_tls_verified_total{api=\"admin\",via=\"pin\"}") == 0)
            #expect(
                try PeerTLSProcessTests.metric(node, "settee_peer_tls_verified_total{api=\"admin\",via=\"ca\"}") ?? 0
                    > 0)
        }
        let plain = "settee_peer_calls_total{transport=\"plain\"}"
        for node in nodes { #expect(try PeerTLSProcessTests.metric(node, plain) ?? 0 == 0) }
        print(
            "views through the cluster CA process test: shares \(shares), "
                + "\(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
