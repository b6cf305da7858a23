import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import Testing

/// The views TLS port in configs (ADR 0040): Couchbase's `capiSSL` and `couchApiBaseHTTPS`.
@Suite struct ViewsTLSConfigTests {
    /// Proves a node with a views TLS port advertises `capiSSL` beside `capi` in `nodesExt`, and `couchApiBaseHTTPS`
    /// beside `couchApiBase` in terse and full bucket configs; a node without TLS advertises neither; a node that
    /// serves no views advertises no views port at all, TLS or not; the port survives the cluster document's JSON.
    @Test func capiSSLAndCouchApiBaseHTTPS() throws {
        var node = ClusterMapTests.node
        node.servesViews = true
        node.viewsTLSPort = 19500
        let map = ClusterMap.initial(
            bucket: ClusterMapTests.bucket, nodes: [node], thisNode: 0, revision: MapRevision(rev: 1))
        let json = try parse(ConfigJSON.terseBucket(map, cluster: ConfigJSONTests.cluster, selfAddress: .placeholder))
        let ext = try #require(json["nodesExt"] as? [[String: Any]])
        #expect(ext[0]["services"] as? [String: Int] == ["mgmt": 9000, "kv": 12000, "capi": 9500, "capiSSL": 19500])
        let nodes = try #require(json["nodes"] as? [[String: Any]])
        #expect(
            nodes[0]["couchApiBaseHTTPS"] as? String == "https://$HOST:19500/beer%2Bfe01ce2a7fbac8fafaed7c982a04e229")
        let full = try parse(
            AdminJSON.bucket(map, runtime: NodeRuntime(), stats: BucketBasicStats(), selfAddress: .configured))
        let fullNodes = try #require(full["nodes"] as? [[String: Any]])
        #expect(
            fullNodes[0]["couchApiBaseHTTPS"] as? String
                == "https://127.0.0.1:19500/beer%2Bfe01ce2a7fbac8fafaed7c982a04e229")
        #expect(try JSONDecoder().decode(NodeInfo.self, from: JSONEncoder().encode(node)) == node)

        var plain = node
        plain.viewsTLSPort = nil
        let plainMap = ClusterMap.initial(
            bucket: ClusterMapTests.bucket, nodes: [plain], thisNode: 0, revision: MapRevision(rev: 1))
        let plainText = ConfigJSON.terseBucket(plainMap, cluster: ConfigJSONTests.cluster, selfAddress: .placeholder)
            .text
        #expect(!plainText.contains("capiSSL") && !plainText.contains("couchApiBaseHTTPS"))

        var noViews = node
        noViews.servesViews = false
        let noViewsMap = ClusterMap.initial(
            bucket: ClusterMapTests.bucket, nodes: [noViews], thisNode: 0, revision: MapRevision(rev: 1))
        #expect(
            !ConfigJSON.terseBucket(noViewsMap, cluster: ConfigJSONTests.cluster, selfAddress: .placeholder).text
                .contains("capi"))
    }
}
