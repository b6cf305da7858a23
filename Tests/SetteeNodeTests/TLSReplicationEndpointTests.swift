import SetteeClusterMap
import SetteeCore
import Testing

@testable import SetteeNode

/// Where a replica's DCP consumer connects.
@Suite struct TLSReplicationEndpointTests {
    /// Proves replication takes a source's KV TLS port, pinned to the fingerprint its cluster-document entry
    /// carries, whenever the source advertises both; and the plain KV port only for a source without TLS (or
    /// with a port but no fingerprint to verify it by, which would otherwise mean trusting any certificate).
    @Test func tlsPortAndPinWhenTheSourceAdvertisesThem() {
        var node = NodeInfo(
            otpNode: NodeID("n1"), host: "10.0.0.1", adminPort: 8091, kvPort: 11210, viewsPort: 8092, nodeUUID: "u")
        #expect(ReplicationManager.replicationEndpoint(node) == (11210, nil))
        node.kvTLSPort = 11207
        #expect(ReplicationManager.replicationEndpoint(node) == (11210, nil))
        node.tlsFingerprint = "sha256:" + String(repeating: "ab", count: 32)
        #expect(ReplicationManager.replicationEndpoint(node) == (11207, "sha256:" + String(repeating: "ab", count: 32)))
    }
}
