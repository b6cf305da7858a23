import SetteeClusterMap
import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeRegistry

/// A node started with other certificate files keeps the pin its cluster document held (ADR 0040): the document
/// changes only through the orchestrator, so the node sees the difference and asks for the new pin.
@Suite struct RestartCertificatePinTests {
    static let old = "sha256:" + String(repeating: "0a", count: 32)
    static let new = "sha256:" + String(repeating: "0b", count: 32)

    static func node(fingerprint: String?) -> NodeInfo {
        var node = testNode
        node.adminTLSPort = fingerprint == nil ? nil : 19000
        node.tlsFingerprint = fingerprint
        return node
    }

    /// Proves a restart with a new certificate leaves the document's pin (and revision) as it was while the node
    /// itself serves and advertises the new fingerprint; other fields of its entry (a new admin TLS port) follow the
    /// command line as before.
    @Test func restartWithANewCertificateKeepsThePin() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let first = try NodeRegistry(
            dataDirectory: dir.path, node: Self.node(fingerprint: Self.old), logger: testLogger)
        let revision = first.clusterSnapshot.revision
        #expect(first.clusterSnapshot.members.first?.node.tlsFingerprint == Self.old)
        first.shutdown()

        var restarted = Self.node(fingerprint: Self.new)
        restarted.adminTLSPort = 19001
        let second = try NodeRegistry(dataDirectory: dir.path, node: restarted, logger: testLogger)
        defer { second.shutdown() }
        let entry = try #require(second.clusterSnapshot.members.first)
        #expect(entry.node.tlsFingerprint == Self.old)
        #expect(entry.node.adminTLSPort == 19001)
        #expect(second.node.tlsFingerprint == Self.new)
        #expect(second.clusterSnapshot.revision == revision)
    }

    /// Proves the pin is kept only when there is one to keep and the node still serves TLS: a node that gains TLS
    /// takes its fingerprint, and one started without TLS drops it (peers then call its plain port, as before).
    @Test func pinKeptOnlyBetweenTwoCertificates() {
        let member = { (fingerprint: String?) in
            NodeMetadata(
                nodeUUID: "u", cluster: ClusterIdentity(uuid: "c", name: ""), memoryQuotaMB: 0, services: ["kv"],
                admin: nil, buckets: [], revEpoch: 1, lastRev: 1
            )
            .with(member: Self.node(fingerprint: fingerprint))
        }
        let cases: [(stored: String?, served: String?, expected: String?)] = [
            (Self.old, Self.new, Self.old), (nil, Self.new, Self.new), (Self.old, nil, nil),
            (Self.old, Self.old, Self.old),
        ]
        for c in cases {
            var served = Self.node(fingerprint: c.served)
            served.nodeUUID = "u"
            let normalized = NodeRegistry.normalized(member(c.stored), node: served)
            #expect(normalized.members?.first?.node.tlsFingerprint == c.expected, "\(c)")
        }
    }
}

extension NodeMetadata {
    fileprivate func with(member node: NodeInfo) -> NodeMetadata {
        var m = self
        var node = node
        node.nodeUUID = nodeUUID
        m.members = [ClusterMember(node: node, membership: .active)]
        return m
    }
}
