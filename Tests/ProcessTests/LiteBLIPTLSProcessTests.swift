import Foundation
import NIOSSL
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTLS
import SetteeTestSupport
import Testing

/// SetteeLite's BLIP replicator over TLS (`wss://`) against a real `settee-gateway` process serving TLS only
/// (`SSLCert`/`SSLKey`), trusting the gateway's certificate through a CA file (issue 68 item 5; the listener's side,
/// with a pin, is `ListenerBLIPTests.wssWithThePinnedCertificate`), and a refused login at the gateway's upgrade.
@Suite(.serialized, .onTestThreads) struct LiteBLIPTLSProcessTests {
    /// Proves a Lite database pushes 40 documents with attachments to the gateway over `wss://` and a fresh one pulls
    /// them back byte-identical (winning revision, body, attachment digests and bytes), the client trusting only the
    /// CA file it was given (full verification, the host name `localhost` included); and that a wrong password is
    /// refused at the upgrade and reported as HTTP 401, which stops the replicator at once (before: retried as a
    /// network error).
    @Test func pushAndPullOverWSSWithACAFile() async throws {
        let identity = try SelfSignedIdentity(commonName: "settee-gateway test")
        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-wss"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let certPath = dir.appendingPathComponent("cert.pem").path
        let keyPath = dir.appendingPathComponent("key.pem").path
        try Data(identity.certificatePEM.utf8).write(to: URL(fileURLWithPath: certPath))
        try Data(identity.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: keyPath))
        let config = JSON.object([
            ("SSLCert", .string(certPath)), ("SSLKey", .string(keyPath)),
            (
                "databases",
                .object([
                    (
                        "db",
                        .object([
                            ("server", .string("walrus:")),
                            (
                                "users",
                                .object([
                                    ("GUEST", .object([("disabled", .bool(true))])),
                                    (
                                        "jane",
                                        .object([
                                            ("password", .string("secret")), ("admin_channels", .array([.string("*")])),
                                        ])
                                    ),
                                ])
                            ),
                        ])
                    )
                ])
            ),
        ])
        let gw = try GatewayProcess(name: "liteblip-wss", config: config.text)
        try gw.start()
        defer { gw.stop() }

        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(certPath)
        tls.certificateVerification = .fullVerification
        func replicator(_ db: Database, _ role: BLIPEndpoint.Role, password: String) throws -> Replicator {
            // By name: the certificate names localhost (an IP address can only be pinned, `WebSocketBLIPConnector`).
            let url = "wss://jane:\(password)@localhost:\(gw.port)/db"
            var options = ReplicatorOptions()
            options.backoffInitialMs = 50
            return Replicator(
                blip: try WebSocketBLIPConnector(databaseURL: url, tls: tls),
                remoteIdentity: ReplicationID.stripCredentials(url), local: LocalEndpoint(db), role: role,
                options: options)
        }
        func run(_ r: Replicator) async -> ReplicationStatus {
            r.start()
            return await r.waitUntilStopped()
        }

        let source = try Database(name: "source", directory: dir.path)
        defer { source.close() }
        var docs: [Document] = []
        for n in 0..<40 {
            let bytes = Array("attachment \(n) ".utf8) + [UInt8](repeating: UInt8(n), count: 300 + n)
            docs.append(
                Document(
                    id: "doc-\(n)", properties: .object([("n", .int(n))]),
                    attachments: ["a": Blob(data: bytes, contentType: "application/octet-stream")]))
        }
        _ = try source.saveAll(docs)
        let push = await run(try replicator(source, .pushTarget, password: "secret"))
        #expect(push.lastError == nil && push.docsWritten == 40, "push: \(push)")

        let target = try Database(name: "target", directory: dir.path)
        defer { target.close() }
        let pull = await run(try replicator(target, .pullSource, password: "secret"))
        #expect(pull.lastError == nil && pull.docsWritten == 40, "pull: \(pull)")
        for n in 0..<40 {
            let a = try #require(try source.document("doc-\(n)"))
            let b = try #require(try target.document("doc-\(n)"))
            #expect(a.revision == b.revision && a.properties == b.properties)
            let digest = try #require(a.attachments["a"]?.digest)
            #expect(b.attachments["a"]?.digest == digest)
            #expect(try source.attachmentData(digest: digest) == target.attachmentData(digest: digest))
        }

        let refused = await run(try replicator(target, .pullSource, password: "wrong"))
        guard case .http(let status, _, _)? = refused.lastError else {
            Issue.record("expected HTTP 401, got \(String(describing: refused.lastError))")
            return
        }
        #expect(status == 401 && refused.activity == .stopped)
    }
}
