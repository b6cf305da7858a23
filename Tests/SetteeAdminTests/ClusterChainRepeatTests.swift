import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Testing

/// A cluster document whose placement names one node twice in a chain is refused before anything is written, and a
/// metadata file holding one (written by an older version) is repaired at start instead of trapping.
@Suite struct ClusterChainRepeatTests {
    /// A one-node registry holding bucket `demo` with one replica (chains `[n_0, null]`).
    static func registry(_ dir: TemporaryDirectory) throws -> NodeRegistry {
        let registry = try makeRegistry(dir)
        try registry.initialize(username: "Administrator", password: "password")
        var s = settings("demo", vbuckets: 16)
        s.replicaNumber = 1
        try registry.createBucket(s)
        return registry
    }

    /// The registry's document with vBucket 0's chain replaced by `chain`, at a higher revision.
    static func withChain(_ registry: NodeRegistry, _ chain: [Any]) throws -> [UInt8] {
        var doc = try #require(try jsonObject(registry.clusterDocument()))
        var buckets = try #require(doc["buckets"] as? [[String: Any]])
        var placement = try #require(buckets[0]["placement"] as? [String: Any])
        var chains = try #require(placement["chains"] as? [Any])
        chains[0] = chain
        placement["chains"] = chains
        buckets[0]["placement"] = placement
        doc["buckets"] = buckets
        doc["lastRev"] = ((doc["lastRev"] as? Int) ?? 1) + 10
        return Array(try JSONSerialization.data(withJSONObject: doc))
    }

    /// Proves `POST /settee/internal/config`'s adoption refuses a chain `["n_0", "n_0"]` and leaves the metadata
    /// file as it was. Before, validation passed it, `commit` wrote the file, then `VBucketMap`'s precondition
    /// trapped building the map (and again at every start). Empty slots may repeat: `[null, null]` is adopted.
    @Test func documentWithARepeatedNodeIsRefusedBeforeItIsWritten() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.registry(dir)
        defer { _ = registry.shutdown() }
        let me = testNode.otpNode.rawValue
        let path = dir.path + "/node-metadata.json"
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let stamp = registry.clusterStamp

        for doc in [try Self.withChain(registry, [me, me]), try Self.withChain(registry, ["x", "x"])] {
            #expect(throws: RegistryError.self) {
                try registry.storeClusterDocument(doc, promise: registry.epochPromise)
            }
            #expect(throws: RegistryError.self) {
                try registry.storeClusterDocument(doc, promise: registry.epochPromise, join: true)
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        #expect(registry.clusterStamp == stamp)

        try registry.storeClusterDocument(
            try Self.withChain(registry, [NSNull(), NSNull()]), promise: registry.epochPromise)
    }

    /// Proves an adopted document is refused, and the file left as it was, when a bucket's RAM quota is past the API's
    /// bound (8 EiB of MiB trapped `ramQuotaBytes` on every node that adopted it, and again at every start) or the
    /// auto-failover settings are outside what the API takes (a timeout of 0 or a maxCount of 0). The same document
    /// with sane values is adopted.
    @Test func documentWithOutOfRangeQuotasOrTimingsIsRefused() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try Self.registry(dir)
        defer { _ = registry.shutdown() }
        let path = dir.path + "/node-metadata.json"
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        func edited(_ edit: (inout [String: Any]) throws -> Void) throws -> [UInt8] {
            var doc = try #require(try jsonObject(registry.clusterDocument()))
            try edit(&doc)
            doc["lastRev"] = ((doc["lastRev"] as? Int) ?? 1) + 10
            return Array(try JSONSerialization.data(withJSONObject: doc))
        }
        func quota(_ mb: Int) throws -> [UInt8] {
            try edited { doc in
                var buckets = try #require(doc["buckets"] as? [[String: Any]])
                var settings = try #require(buckets[0]["settings"] as? [String: Any])
                #expect(settings["ramQuotaMB"] != nil)
                settings["ramQuotaMB"] = mb
                buckets[0]["settings"] = settings
                doc["buckets"] = buckets
            }
        }
        func autoFailover(timeout: Int, maxCount: Int) throws -> [UInt8] {
            try edited { doc in
                doc["autoFailover"] = ["enabled": true, "timeout": timeout, "maxCount": maxCount, "count": 0]
            }
        }
        for doc in [
            try quota(8_796_093_022_208), try quota(-1), try quota(0), try autoFailover(timeout: 0, maxCount: 1),
            try autoFailover(timeout: 120, maxCount: 0),
        ] {
            #expect(throws: RegistryError.self) {
                try registry.storeClusterDocument(doc, promise: registry.epochPromise)
            }
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        try registry.storeClusterDocument(try autoFailover(timeout: 30, maxCount: 2), promise: registry.epochPromise)
        #expect(registry.autoFailover.timeout == 30)
        try registry.storeClusterDocument(try quota(512), promise: registry.epochPromise)
    }

    /// Proves a metadata file (valid checksum) whose chain names the node twice is repaired at start: the repeated
    /// replica slot becomes empty, the node opens and serves the bucket, and the repaired file is written back.
    /// Before, the start trapped in `VBucketMap` (or, with validation alone, refused to start).
    @Test func storedRepeatedNodeIsRepairedAtStart() throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        do {
            let registry = try Self.registry(dir)
            _ = registry.shutdown()
        }
        let me = testNode.otpNode.rawValue
        let path = dir.path + "/node-metadata.json"
        var envelope = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        let inner = try #require(envelope["metadata"] as? String)
        var metadata = try #require(try JSONSerialization.jsonObject(with: Data(inner.utf8)) as? [String: Any])
        var buckets = try #require(metadata["buckets"] as? [[String: Any]])
        var placement = try #require(buckets[0]["placement"] as? [String: Any])
        var chains = try #require(placement["chains"] as? [Any])
        #expect(Self.names(chains[0]) == [me, nil])
        chains[0] = [me, me]
        placement["chains"] = chains
        buckets[0]["placement"] = placement
        metadata["buckets"] = buckets
        let tampered = String(decoding: try JSONSerialization.data(withJSONObject: metadata), as: UTF8.self)
        envelope["metadata"] = tampered
        envelope["crc32"] = Int(CRC32.checksum(Array(tampered.utf8)))
        try JSONSerialization.data(withJSONObject: envelope).write(to: URL(fileURLWithPath: path))

        let registry = try makeRegistry(dir)
        defer { _ = registry.shutdown() }
        let demo = try #require(registry.clusterSnapshot.buckets.first { $0.settings.name == "demo" })
        #expect(demo.placement.chains[0] == [testNode.otpNode, nil])
        #expect(registry.bucket(named: "demo") != nil)
        #expect(try Self.storedChains(path).first.map(Self.names) == [me, nil])
    }

    /// A chain as JSON decoded it: names, nil for null.
    static func names(_ chain: Any) -> [String?] { (chain as? [Any] ?? []).map { $0 as? String } }

    /// The chains of the first bucket in the metadata file at `path`.
    static func storedChains(_ path: String) throws -> [Any] {
        let envelope = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        let inner = try #require(envelope["metadata"] as? String)
        let metadata = try #require(try JSONSerialization.jsonObject(with: Data(inner.utf8)) as? [String: Any])
        let buckets = try #require(metadata["buckets"] as? [[String: Any]])
        let placement = try #require(buckets[0]["placement"] as? [String: Any])
        return try #require(placement["chains"] as? [Any])
    }
}
