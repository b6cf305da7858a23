import Foundation
import NIOCore
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeProtocol
import SetteeTLS
import SetteeTestSupport
import Testing

/// `settee-server --tls-only`: a node serves its KV and admin APIs on the TLS ports only (ADR 0035).
@Suite(.serialized, .onTestThreads) struct TLSOnlyProcessTests {
    /// A TLS-only node on runtime ports, started (ready once both TLS ports accept connections).
    struct Node {
        let server: ServerProcess
        let kvTLS: Int
        let adminTLS: Int
        var fingerprint: String {
            get throws {
                try TLSIdentity.load(
                    certificatePath: server.dataDir + "/tls/cert.pem", keyPath: server.dataDir + "/tls/key.pem"
                ).fingerprint
            }
        }

        init(name: String) throws {
            server = try ServerProcess(name: name)
            kvTLS = try freePort()
            adminTLS = try freePort()
            server.extraArguments = [
                "--tls", "--tls-only", "--kv-tls-port", "\(kvTLS)", "--admin-tls-port", "\(adminTLS)",
            ]
            server.readinessPorts = [adminTLS, kvTLS]
            try server.start()
        }

        /// Makes a cluster of `nodes` over HTTPS only (`ClusterHarness.formCluster` with `admin(nodes)`, each node
        /// added with `https://` and its fingerprint; the rebalance waited for up to `rebalanceTimeout` seconds; bucket
        /// `demo` with `bucketReplicas`), and writes every node's certificate into one bundle a client can trust.
        /// Returns its path.
        static func formCluster(_ nodes: [Node], bucketReplicas: Int, rebalanceTimeout: TimeInterval) async throws
            -> String
        {
            let cluster = Unchecked(value: nodes)
            try await offPool {
                let nodes = cluster.value
                try ClusterHarness.formCluster(
                    nodes.map(\.server), replicaNumber: bucketReplicas,
                    join: { server in
                        let node = try Self.node(server, in: nodes)
                        return .init(hostname: "https://127.0.0.1:\(node.adminTLS)", fingerprint: try node.fingerprint)
                    }, admin: admin(nodes), rebalanceTimeout: rebalanceTimeout)
            }
            let first = nodes[0]
            let bundle = first.server.dataDir + "/both-certificates.pem"
            let pems = try nodes.map {
                try String(contentsOfFile: $0.server.dataDir + "/tls/cert.pem", encoding: .utf8)
            }
            try pems.joined().write(toFile: bundle, atomically: true, encoding: .utf8)
            return bundle
        }

        /// `ClusterHarness`'s requests to `nodes`, over HTTPS pinned to each one's certificate (blocking: off the pool).
        static func admin(_ nodes: [Node]) -> ClusterHarness.Admin {
            ClusterHarness.Admin { server, method, path, form in
                let node = try Self.node(server, in: nodes)
                guard let verb = HTTPVerb(rawValue: method) else { throw HarnessError("no HTTPVerb \(method)") }
                let r = try AdminHTTP.send(
                    verb, path, at: NodeAddress(host: "127.0.0.1", port: node.adminTLS), username: server.user,
                    password: server.password, form: form,
                    tls: try TLSTrust.pinned(fingerprint: try node.fingerprint).makeClientContext()
                ).wait()
                return ServerProcess.HTTPResult(status: r.status, body: Data(r.body))
            }
        }

        static func node(_ server: ServerProcess, in nodes: [Node]) throws -> Node {
            guard let node = nodes.first(where: { $0.server === server }) else { throw HarnessError("not a node") }
            return node
        }

        /// An admin request over HTTPS pinned to this node's certificate.
        func https(_ method: HTTPVerb, _ path: String, form: [(String, String)]? = nil) async throws -> HTTPResponse {
            try await AdminHTTP.request(
                method, path, at: NodeAddress(host: "127.0.0.1", port: adminTLS), username: server.user,
                password: server.password, form: form,
                tls: try TLSTrust.pinned(fingerprint: try fingerprint).makeClientContext())
        }
    }

    /// Proves `--tls-only` closes the plain ports and keeps everything else working over TLS: two such nodes refuse
    /// TCP connections on their plain KV and admin ports; they are initialised, joined (`addNode` with
    /// `https://` and the fingerprint), rebalanced and given a bucket over HTTPS; a smart client trusting both certificates writes
    /// with majority durability (which needs the replica's DCP stream, over the active's KV TLS port) and reads
    /// every key back from both nodes' KV TLS ports; and the nodes' own calls to each other counted only TLS.
    @Test func plainPortsClosedAndEverythingWorksOverTLS() async throws {
        let nodes = try (0..<2).map { try Node(name: "tls-only-\($0)") }
        defer { nodes.forEach { $0.server.stopAndRemove() } }
        for node in nodes {
            #expect(!Loopback.canConnect(port: node.server.kvPort), "plain KV port accepts connections")
            #expect(!Loopback.canConnect(port: node.server.adminPort), "plain admin port accepts connections")
        }

        let first = nodes[0]
        // Created on the two-node cluster, the bucket is placed over both with a replica each: no vBucket moves.
        let bundle = try await Node.formCluster(nodes, bucketReplicas: 1, rebalanceTimeout: 120)
        var options = TLSProcessTests.clientOptions(first.server, kvTLS: first.kvTLS, trust: .authority(path: bundle))
        options.operationTimeoutMs = 10_000
        let client = try await BucketClient.connect(options)
        #expect(Set(client.currentConfig?.nodes.compactMap(\.kv?.port) ?? []) == Set(nodes.map(\.kvTLS)))
        // Replica streams of a new placement connect within about a second: retry each write until then.
        for i in 0..<32 {
            let until = Date().addingTimeInterval(30)
            while true {
                do {
                    _ = try await client.upsert("tls-only::\(i)", [UInt8(i)], durability: .majority)
                    break
                } catch {
                    if Date() > until { throw error }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
        }
        for i in 0..<32 { #expect(try await client.get("tls-only::\(i)").value == [UInt8(i)]) }
        await client.close()

        for node in nodes {
            let metrics = try await node.https(.GET, "/metrics").text
            func value(_ series: String) -> Double? {
                metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") }
                    .flatMap { Double($0.split(separator: " ").last ?? "") }
            }
            #expect((value("settee_peer_calls_total{transport=\"tls\"}") ?? 0) >= 1)
            #expect(value("settee_peer_calls_total{transport=\"plain\"}") ?? 0 == 0)
        }
    }

    /// Proves `--tls-only` without a TLS identity is refused at start (exit 1 with a message), never a node that
    /// would silently listen in clear or on nothing.
    @Test func tlsOnlyWithoutTLSIsRefused() throws {
        let server = try ServerProcess(name: "tls-only-refused")
        defer { server.removeData() }
        let run = try ChildProcess.run(
            ServerProcess.binary,
            [
                "--data-dir", server.dataDir, "--admin-port", "\(server.adminPort)", "--kv-port", "\(server.kvPort)",
                "--tls-only",
            ], timeout: 60)
        #expect(run.status != 0)
        #expect(run.output.contains("--tls-only needs --tls"), "\(run.output)")
    }
}
