import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import SetteeTestSupport
import Testing

@testable import SetteeTLS

/// Certificate reload without a restart (`ReloadableTLSIdentity`, ADR 0038): which files make a usable identity,
/// that a refused reload changes nothing, and what the per-handshake callback hands new connections.
@Suite(.onTestThreads) struct ReloadableTLSIdentityTests {
    /// A directory with `cert.pem`/`key.pem` of a fresh self-signed identity, plus the reloadable identity over it.
    struct Files {
        let directory: String
        var certificatePath: String { directory + "/cert.pem" }
        var keyPath: String { directory + "/key.pem" }

        init() throws {
            directory = NSTemporaryDirectory() + "settee-reload-\(UUID().uuidString)"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }

        func write(_ identity: SelfSignedIdentity, certificate: Bool = true, key: Bool = true) throws {
            if certificate {
                try identity.certificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
            }
            if key { try identity.privateKeyPEM.write(toFile: keyPath, atomically: true, encoding: .utf8) }
        }

        func remove() { try? FileManager.default.removeItem(atPath: directory) }
    }

    static func reloadable(_ files: Files, _ first: SelfSignedIdentity) throws -> ReloadableTLSIdentity {
        try files.write(first)
        let identity = try TLSIdentity.load(certificatePath: files.certificatePath, keyPath: files.keyPath)
        return ReloadableTLSIdentity(identity, certificatePath: files.certificatePath, keyPath: files.keyPath)
    }

    /// What the configuration's callback hands a new connection: nil for "the context's own identity".
    static func handshakeOverride(_ config: TLSConfiguration) throws -> [NIOSSLCertificateSource]? {
        let callback = try #require(config.sslContextCallback)
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(
            of: NIOSSLContextConfigurationOverride.self)
        callback(NIOSSLClientExtensionValues(serverHostname: nil), promise)
        return try promise.futureResult.wait().certificateChain
    }

    static func fingerprint(_ source: NIOSSLCertificateSource?) throws -> String? {
        guard case .certificate(let certificate)? = source else { return nil }
        return SelfSignedIdentity.fingerprint(ofDER: try certificate.toDERBytes())
    }

    /// Proves a reload of new files swaps what new handshakes get: before it the callback changes nothing (the
    /// context's own certificate), after it the callback hands the new certificate, and `fingerprint` follows.
    @Test func reloadServesTheNewFilesToNewHandshakes() throws {
        let files = try Files()
        defer { files.remove() }
        let first = try SelfSignedIdentity(commonName: "reload first")
        let reloadable = try Self.reloadable(files, first)
        let config = reloadable.serverConfiguration()
        #expect(try Self.handshakeOverride(config) == nil)

        let second = try SelfSignedIdentity(commonName: "reload second")
        try files.write(second)
        let loaded = try reloadable.reload()
        #expect(loaded.fingerprint == second.fingerprint)
        #expect(reloadable.fingerprint == second.fingerprint)
        let handed = try Self.handshakeOverride(config)
        #expect(try Self.fingerprint(handed?.first) == second.fingerprint)

        // Back to the first certificate: the context's own again, nothing to override.
        try files.write(first)
        try reloadable.reload()
        #expect(try Self.handshakeOverride(config) == nil)
        #expect(reloadable.fingerprint == first.fingerprint)
    }

    /// Proves a key of another certificate, an expired certificate and an unreadable file are each refused with
    /// a reason naming the problem, and the identity in use stays the one loaded before.
    @Test func badFilesAreRefusedAndTheOldIdentityStays() throws {
        let files = try Files()
        defer { files.remove() }
        let first = try SelfSignedIdentity(commonName: "reload kept")
        let reloadable = try Self.reloadable(files, first)
        let config = reloadable.serverConfiguration()

        // The certificate of one pair with the key of another.
        try files.write(try SelfSignedIdentity(commonName: "reload other"), key: false)
        try files.write(try SelfSignedIdentity(commonName: "reload other key"), certificate: false)
        let mismatch = #expect(throws: TLSSetupError.self) { try reloadable.reload() }
        #expect(mismatch?.description.contains("does not match") == true, "\(String(describing: mismatch))")
        #expect(reloadable.fingerprint == first.fingerprint)
        #expect(try Self.handshakeOverride(config) == nil)

        // Expired half a minute ago.
        try files.write(try SelfSignedIdentity(commonName: "reload expired", validFor: -30))
        let expired = #expect(throws: TLSSetupError.self) { try reloadable.reload() }
        #expect(expired?.description.contains("expired") == true, "\(String(describing: expired))")
        #expect(reloadable.fingerprint == first.fingerprint)

        // No key file at all.
        try files.write(try SelfSignedIdentity(commonName: "reload no key"))
        try FileManager.default.removeItem(atPath: files.keyPath)
        let unreadable = #expect(throws: TLSSetupError.self) { try reloadable.reload() }
        #expect(unreadable?.description.contains(files.keyPath) == true, "\(String(describing: unreadable))")
        #expect(reloadable.fingerprint == first.fingerprint)

        // Garbage where the certificate was.
        try "not a certificate\n".write(toFile: files.certificatePath, atomically: true, encoding: .utf8)
        #expect(throws: TLSSetupError.self) { try reloadable.reload() }
        #expect(reloadable.fingerprint == first.fingerprint)
        #expect(try Self.handshakeOverride(config) == nil)
    }

    /// Proves the validity rule on its own: valid now, expired, not valid yet (a certificate made for later use).
    @Test func validityWindow() throws {
        let identity = try SelfSignedIdentity(commonName: "validity", validFor: 3600)
        let der = identity.certificateDER
        #expect(TLSIdentity.validityProblem(leafDER: der, now: Date(), source: "x") == nil)
        let late = TLSIdentity.validityProblem(leafDER: der, now: Date().addingTimeInterval(7200), source: "x")
        #expect(late?.contains("expired") == true)
        let early = TLSIdentity.validityProblem(leafDER: der, now: Date().addingTimeInterval(-3600), source: "x")
        #expect(early?.contains("not valid before") == true)
        #expect(
            TLSIdentity.validityProblem(leafDER: [0x30, 0x00], now: Date(), source: "x")?.contains("parsed") == true)
    }
}
