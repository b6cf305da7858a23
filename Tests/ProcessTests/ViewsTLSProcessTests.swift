import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeTLS
import SetteeTestSupport
import Testing

/// The views API over TLS (`--views-tls-port`, Couchbase's 18092 `capiSSL`), and `--tls-only` closing the plain
/// views port (ADR 0040).
@Suite(.serialized, .onTestThreads) struct ViewsTLSProcessTests {
    /// A views request over HTTPS to `port`, trusting only the certificate with `fingerprint` (fetched pinned).
    static func views(
        _ method: HTTPMethod, port: Int, fingerprint: String, _ path: String, body: String? = nil,
        user: String = "Administrator", password: String = "password"
    ) async throws -> (status: UInt, text: String) {
        let certificate = try await CertificatePin.fetch(host: "127.0.0.1", port: port, fingerprint: fingerprint)
        var request = HTTPClientRequest(url: "https://127.0.0.1:\(port)\(path)")
        request.method = method
        request.tlsConfiguration = SelfSignedIdentity.clientConfiguration(trusting: certificate)
        request.headers.add(name: "Authorization", value: BasicAuth.header(user: user, password: password))
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let collected = try await response.body.collect(upTo: 1 << 20)
        return (response.status.code, String(buffer: collected))
    }

    /// Proves, on two `--tls-only` nodes with a bucket spread over both: the plain views ports refuse connections;
    /// a design document written on n0's views TLS port reaches n1 (forwarded over n1's views TLS port, pinned); a
    /// `stale=false` query on n0's views TLS port returns every document, half of which only n1 indexes (the scatter
    /// goes over TLS too); the bucket config advertises `capiSSL` and `couchApiBaseHTTPS` for both nodes; the
    /// console's views relay answers through the admin HTTPS port; no peer call went in clear.
    @Test func viewsServedOverTLSAndScatteredOverTLS() async throws {
        let started = Date()
        let nodes = try (0..<2).map { try TLSOnlyProcessTests.Node(name: "views-tls-\($0)") }
        defer { nodes.forEach { $0.server.stopAndRemove() } }
        for node in nodes {
            #expect(!Loopback.canConnect(port: node.server.viewsPort), "plain views port accepts connections")
            try Loopback.waitUntilListening([node.server.viewsTLSPort])
        }
        let first = nodes[0]
        let bundle = try await TLSOnlyProcessTests.Node.formCluster(nodes, bucketReplicas: 0, rebalanceTimeout: 60)
        let client = try await BucketClient.connect(
            TLSProcessTests.clientOptions(first.server, kvTLS: first.kvTLS, trust: .authority(path: bundle)))
        let count = 40
        for i in 0..<count {
            let until = Date().addingTimeInterval(20)
            while true {
                do {
                    _ = try await client.upsert("doc::\(i)", Array(#"{"k":\#(i)}"#.utf8), flags: 0x0200_0006)
                    break
                } catch {
                    if Date() > until { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
        await client.close()

        let fingerprints = try nodes.map { try $0.fingerprint }
        let design = #"{"views":{"by_k":{"map":"function(doc, meta){ emit(doc.k, null); }"}}}"#
        let put = try await Self.views(
            .PUT, port: first.server.viewsTLSPort, fingerprint: fingerprints[0], "/demo/_design/t", body: design)
        #expect(put.status == 201, "\(put.text)")
        let onSecond = try await Self.views(
            .GET, port: nodes[1].server.viewsTLSPort, fingerprint: fingerprints[1], "/demo/_design/t")
        #expect(onSecond.status == 200, "the design document did not reach n1: \(onSecond.text)")
        let query = try await Self.views(
            .GET, port: first.server.viewsTLSPort, fingerprint: fingerprints[0],
            "/demo/_design/t/_view/by_k?stale=false")
        #expect(query.status == 200, "\(query.text)")
        let rows = try JSON.parse(Array(query.text.utf8))["rows"]?.arrayValue ?? []
        #expect(rows.count == count, "\(query.text.prefix(300))")

        let config = try JSON.parse(try await first.https(.GET, "/pools/default/b/demo").body)
        let services = config["nodesExt"]?.arrayValue?.compactMap { $0["services"]?["capiSSL"]?.intValue } ?? []
        #expect(Set(services) == Set(nodes.map(\.server.viewsTLSPort)), "\(services)")
        let bases = config["nodes"]?.arrayValue?.compactMap { $0["couchApiBaseHTTPS"]?.stringValue } ?? []
        #expect(bases.count == 2 && bases.allSatisfy { $0.hasPrefix("https://") }, "\(bases)")

        let relayed = try await first.https(.GET, "/settee/views/demo/_design/t")
        #expect(relayed.status == 200, "\(relayed.text)")
        for node in nodes {
            let metrics = try await node.https(.GET, "/metrics").text
            let plain = metrics.split(separator: "\n").first {
                $0.hasPrefix("settee_peer_calls_total{transport=\"plain\"} ")
            }
            #expect(plain.map { $0.hasSuffix(" 0") } ?? true, "\(plain ?? "")")
        }
        print("views TLS process test: \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
    }
}
