import SetteeClient
import SetteeCore
import Testing

/// The vBucket count of a config a node sends is bounded before the client hashes a key with it.
@Suite struct ConfigVBucketCountTests {
    static func config(vbuckets: Int) -> [UInt8] {
        let map = Array(repeating: "[0]", count: vbuckets).joined(separator: ",")
        let text =
            #"{"rev":1,"nodesExt":[{"services":{"kv":11210}}],"vBucketServerMap":{"numReplicas":0,"vBucketMap":["#
            + map + "]}}"
        return Array(text.utf8)
    }

    /// Proves a config with 65,536 vBuckets (a power of two the parser used to accept) is refused: adopted, it
    /// made the first key operation trap in `VBucketHash` (count above `UInt16.max`), which a hostile node could
    /// use to stop a router or a gateway. The largest count the hash can address is still taken and routes keys.
    @Test func vBucketCountAboveWhatTheHashAddressesIsRefused() throws {
        #expect(throws: ConfigError.self) {
            try BucketConfig.parse(Self.config(vbuckets: 65_536), sourceHost: "h")
        }
        let largest = try BucketConfig.parse(Self.config(vbuckets: ClientLimits.maxConfigVBuckets), sourceHost: "h")
        #expect(largest.numVBuckets == 32_768)
        let vb = largest.vbucket(forKey: Array("some-key".utf8))
        #expect(vb.index < largest.numVBuckets)
        #expect(largest.activeNode(of: vb) == 0)
    }
}
