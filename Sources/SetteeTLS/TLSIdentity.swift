import Foundation
import NIOSSL
import SetteeCore

#if canImport(Glibc)
    import Glibc
#endif

/// Why TLS could not be set up (an unreadable or invalid certificate or key, a CA file with no
/// certificate, a malformed pin). Names the file or value at fault.
public struct TLSSetupError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// What a TLS server presents: a certificate chain (leaf first) and its private key, with the leaf's
/// SHA-256 fingerprint (`sha256:<hex>`), which clients and peer nodes can pin.
public struct TLSIdentity: Sendable {
    public let certificateChain: [NIOSSLCertificate]
    public let privateKey: NIOSSLPrivateKey
    /// The leaf certificate's `sha256:<hex>` fingerprint.
    public let fingerprint: String
    /// Where the identity came from, for the start-up log.
    public let source: String

    /// Loads a PEM certificate chain (leaf first) and a PEM private key, as an operator provides them
    /// (`settee-server --tls-cert/--tls-key`, the gateway's `SSLCert`/`SSLKey`).
    public static func load(certificatePath: String, keyPath: String) throws -> TLSIdentity {
        let chain: [NIOSSLCertificate]
        do { chain = try NIOSSLCertificate.fromPEMFile(certificatePath) } catch {
            throw TLSSetupError("cannot read the TLS certificate \(certificatePath): \(error)")
        }
        guard let leaf = chain.first else {
            throw TLSSetupError("\(certificatePath) holds no PEM certificate")
        }
        let key: NIOSSLPrivateKey
        do { key = try NIOSSLPrivateKey(file: keyPath, format: .pem) } catch {
            throw TLSSetupError("cannot read the TLS private key \(keyPath): \(error)")
        }
        let der: [UInt8]
        do { der = try leaf.toDERBytes() } catch { throw TLSSetupError("\(certificatePath): \(error)") }
        return TLSIdentity(
            certificateChain: chain, privateKey: key, fingerprint: SelfSignedIdentity.fingerprint(ofDER: der),
            source: certificatePath)
    }

    /// The node's own self-signed identity, kept in `directory` (`cert.pem`, `key.pem`, both 0600 in a
    /// 0700 directory): made at first start for `hosts` (plus localhost and 127.0.0.1), loaded unchanged
    /// afterwards, so its fingerprint stays pinnable across restarts.
    public static func loadOrCreateSelfSigned(directory: String, hosts: [String]) throws -> TLSIdentity {
        let certPath = directory + "/cert.pem"
        let keyPath = directory + "/key.pem"
        let files = FileManager.default
        if !(files.fileExists(atPath: certPath) && files.fileExists(atPath: keyPath)) {
            do {
                try files.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch { throw TLSSetupError("cannot create \(directory): \(error)") }
            // A name of its own per node: verifiers find a root by subject name, so in a CA bundle holding
            // several nodes' certificates a shared name would make all but one fail to verify.
            var random = SystemRandomNumberGenerator()
            let tag = (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &random)) }.joined()
            let made = try SelfSignedIdentity(
                commonName: "settee-server \(tag)", hosts: hosts,
                validFor: TimeInterval(Limits.selfSignedCertificateValidityDays) * 24 * 3600)
            // Key first: a crash between the two writes leaves no certificate, so the next start makes both anew.
            // Newline-terminated, so the files concatenate into CA bundles as PEM tools expect.
            try writePrivately(Array(Self.terminated(made.privateKeyPEM).utf8), to: keyPath)
            try writePrivately(Array(Self.terminated(made.certificatePEM).utf8), to: certPath)
        }
        return try load(certificatePath: certPath, keyPath: keyPath)
    }

    private static func terminated(_ pem: String) -> String { pem.hasSuffix("\n") ? pem : pem + "\n" }

    /// Writes `bytes` to `path` through a 0600 temporary file renamed into place.
    private static func writePrivately(_ bytes: [UInt8], to path: String) throws {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TLSSetupError("cannot create \(temporary): errno \(errno)") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else {
                close(fd)
                throw TLSSetupError("cannot write \(temporary): errno \(errno)")
            }
            offset += n
        }
        let synced = fsync(fd)
        close(fd)
        guard synced == 0, rename(temporary, path) == 0 else {
            throw TLSSetupError("cannot keep \(path): errno \(errno)")
        }
    }

    /// A NIOSSL server configuration presenting this identity, offering the versions and suites of `policy`
    /// (by default TLS 1.3, and TLS 1.2 with ECDHE + AEAD suites only: ADR 0144).
    public func serverConfiguration(policy: TLSPolicy = .default) -> TLSConfiguration {
        var config = TLSConfiguration.makeServerConfiguration(
            certificateChain: certificateChain.map { .certificate($0) }, privateKey: .privateKey(privateKey))
        policy.apply(to: &config)
        return config
    }
}
