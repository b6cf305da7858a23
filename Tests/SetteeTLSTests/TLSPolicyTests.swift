import Foundation
import NIOCore
import NIOEmbedded
import NIOSSL
import NIOTLS
import SetteeTestSupport
import Testing

@testable import SetteeTLS

/// What the TLS ports offer (`TLSPolicy`, ADR 0144): by default TLS 1.3 and TLS 1.2 with ECDHE + AEAD suites only,
/// configurable as Couchbase's `tlsMinVersion` and `cipherSuites`. Handshakes run in memory (two `EmbeddedChannel`s)
/// between a server built as the ports build theirs and a NIOSSL client limited to one suite or version.
@Suite(.onTestThreads) struct TLSPolicyTests {
    /// Records whether the client's handshake completed.
    final class HandshakeRecorder: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        var completed = false
        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case .handshakeCompleted? = event as? TLSUserEvent { completed = true }
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// Runs a handshake between `server` and `client` in memory; whether it completed.
    static func handshakes(server: TLSConfiguration, client: TLSConfiguration) throws -> Bool {
        let s = EmbeddedChannel()
        let c = EmbeddedChannel()
        defer {
            _ = try? s.finish()
            _ = try? c.finish()
        }
        try s.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: try NIOSSLContext(configuration: server)))
        let recorder = HandshakeRecorder()
        try c.pipeline.syncOperations.addHandler(
            try NIOSSLClientHandler(context: try NIOSSLContext(configuration: client), serverHostname: nil))
        try c.pipeline.syncOperations.addHandler(recorder)
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: 1)
        // Not waited on: the client handler completes its connect only once the handshake is done.
        _ = s.connect(to: address)
        _ = c.connect(to: address)
        for _ in 0..<32 {
            var moved = false
            while let bytes = try? c.readOutbound(as: ByteBuffer.self) {
                moved = true
                if (try? s.writeInbound(bytes)) == nil { return false }
            }
            while let bytes = try? s.readOutbound(as: ByteBuffer.self) {
                moved = true
                if (try? c.writeInbound(bytes)) == nil { return false }
            }
            if !moved { break }
        }
        return recorder.completed
    }

    /// A client that offers only `suite` over TLS 1.2, or only TLS 1.3.
    static func client(_ suite: NIOTLSCipher? = nil, tls13: Bool = false) -> TLSConfiguration {
        var config = TLSConfiguration.makeClientConfiguration()
        config.certificateVerification = .none
        if tls13 {
            config.minimumTLSVersion = .tlsv13
        } else {
            config.maximumTLSVersion = .tlsv12
            config.minimumTLSVersion = .tlsv12
        }
        if let suite { config.cipherSuiteValues = [suite] }
        return config
    }

    /// An RSA identity made by `openssl` (the self-signed identity is ECDSA, which no static-RSA suite can use).
    static func rsaIdentity() throws -> TLSIdentity {
        let dir = NSTemporaryDirectory() + "settee-rsa-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/key.pem", "-out", dir + "/cert.pem",
            "-days", "2", "-subj", "/CN=settee-test",
        ]
        p.standardError = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        return try TLSIdentity.load(certificatePath: dir + "/cert.pem", keyPath: dir + "/key.pem")
    }

    /// Regression (issue 72 item 5): the gateway's RSA identity offered static-RSA key exchange (no forward secrecy)
    /// and the node's AES-CBC-SHA1 suites. A port built with the default policy now refuses a client offering only
    /// `TLS_RSA_WITH_AES_128_GCM_SHA256`, `TLS_RSA_WITH_AES_128_CBC_SHA` or `TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA`, and
    /// completes with ECDHE-RSA-AES-GCM, ECDHE-RSA-ChaCha20 and TLS 1.3.
    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func anRSAIdentityOffersOnlyECDHEAEADAndTLS13() throws {
        let server = try Self.rsaIdentity().serverConfiguration()
        for weak: NIOTLSCipher in [
            .TLS_RSA_WITH_AES_128_GCM_SHA256, .TLS_RSA_WITH_AES_128_CBC_SHA, .TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA,
        ] {
            #expect(try !Self.handshakes(server: server, client: Self.client(weak)), "\(weak)")
        }
        for strong: NIOTLSCipher in [
            .TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, .TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            .TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ] {
            #expect(try Self.handshakes(server: server, client: Self.client(strong)), "\(strong)")
        }
        #expect(try Self.handshakes(server: server, client: Self.client(tls13: true)))
    }

    /// Proves the same for the node's self-signed (ECDSA P-256) identity, through `ReloadableTLSIdentity` as the node
    /// builds its ports: ECDHE-ECDSA-AES-CBC-SHA1 refused, ECDHE-ECDSA-AES-GCM and TLS 1.3 accepted.
    @Test
    func theSelfSignedIdentityOffersOnlyECDHEAEADAndTLS13() throws {
        let made = try SelfSignedIdentity(commonName: "policy", hosts: ["127.0.0.1"], validFor: 3600)
        let server = try made.serverConfiguration()
        #expect(try !Self.handshakes(server: server, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA)))
        #expect(try !Self.handshakes(server: server, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA)))
        #expect(try Self.handshakes(server: server, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)))
        #expect(try Self.handshakes(server: server, client: Self.client(tls13: true)))
    }

    /// Proves `tlsMinVersion` and `cipherSuites`: `tlsv1.3` refuses every TLS 1.2 client and accepts TLS 1.3; a named
    /// list offers exactly those suites (a weak one only when named on purpose); unknown or older values are refused
    /// with the value named.
    @Test
    func theSettingsChooseVersionAndSuites() throws {
        let made = try SelfSignedIdentity(commonName: "policy", hosts: ["127.0.0.1"], validFor: 3600)
        let only13 = try TLSPolicy.parse(minimumVersion: "tlsv1.3", cipherSuites: nil)
        #expect(only13.minimumVersion == .tls13 && only13.cipherSuites == TLSPolicy.defaultCipherSuites)
        let server13 = try made.serverConfiguration(policy: only13)
        #expect(try !Self.handshakes(server: server13, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)))
        #expect(try Self.handshakes(server: server13, client: Self.client(tls13: true)))

        let named = try TLSPolicy.parse(
            minimumVersion: nil, cipherSuites: ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"])
        let serverNamed = try made.serverConfiguration(policy: named)
        #expect(try Self.handshakes(server: serverNamed, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)))
        #expect(
            try !Self.handshakes(server: serverNamed, client: Self.client(.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)))

        #expect(throws: TLSSetupError.self) { try TLSPolicy.parse(minimumVersion: "tlsv1.1", cipherSuites: nil) }
        #expect(throws: TLSSetupError.self) { try TLSPolicy.parse(minimumVersion: nil, cipherSuites: ["RC4-MD5"]) }
        #expect(try TLSPolicy.parse(minimumVersion: nil, cipherSuites: []) == .default)
    }
}
