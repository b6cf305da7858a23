import Foundation
import NIOCore
import NIOSSL
import SwiftASN1
import Synchronization
import X509

/// The identity a node's TLS ports present, replaceable while they run (Couchbase's
/// `POST /node/controller/reloadCertificate`; ADR 0038).
///
/// Every TLS listener of the node (KV, admin HTTPS) is built from `serverConfiguration()`, whose
/// `sslContextCallback` runs once per handshake and hands BoringSSL the identity current at that moment. A reload
/// therefore changes what *new* connections see, on every port at once, without a restart; connections already
/// established keep the session they negotiated.
///
/// Invariants:
/// 1. `current` always holds an identity that passed `TLSIdentity.problem(now:)` (or the one the node started with).
/// 2. A reload that fails changes nothing: the files are read and checked completely before the swap.
public final class ReloadableTLSIdentity: Sendable {
    /// The files the node was started with (`--tls-cert`/`--tls-key`, or `<data-dir>/tls/{cert,key}.pem`), reread
    /// by every reload.
    public let certificatePath: String
    public let keyPath: String
    private let initialFingerprint: String
    private let state: Mutex<TLSIdentity>
    /// The versions and suites every port built from `serverConfiguration()` offers (`--tls-min-version`,
    /// `--tls-cipher-suites`; ADR 0144).
    public let policy: TLSPolicy

    public init(_ identity: TLSIdentity, certificatePath: String, keyPath: String, policy: TLSPolicy = .default) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        self.policy = policy
        self.initialFingerprint = identity.fingerprint
        self.state = Mutex(identity)
    }

    /// The identity new connections are given.
    public var current: TLSIdentity { state.withLock { $0 } }

    /// `sha256:<hex>` of the certificate new connections are given.
    public var fingerprint: String { current.fingerprint }

    /// A server configuration presenting the current identity to each new connection, as `policy` says. The
    /// context is built with the identity of the moment; handshakes after a reload get the new one through the
    /// callback, which costs nothing until the first reload.
    public func serverConfiguration() -> TLSConfiguration {
        var config = current.serverConfiguration(policy: policy)
        let initial = initialFingerprint
        config.sslContextCallback = { [self] _, promise in
            let identity = self.current
            guard identity.fingerprint != initial else {
                promise.succeed(.noChanges)
                return
            }
            var override = NIOSSLContextConfigurationOverride()
            override.certificateChain = identity.certificateChain.map { .certificate($0) }
            override.privateKey = .privateKey(identity.privateKey)
            promise.succeed(override)
        }
        return config
    }

    /// Rereads `certificatePath` and `keyPath`, and serves them to new connections if they make a usable identity
    /// at `now` (readable PEM, the key belongs to the leaf certificate, the leaf valid now). Throws the reason
    /// otherwise, and the identity in use stays. Blocking (file reads): call it off event loops.
    @discardableResult
    public func reload(now: Date = Date()) throws -> TLSIdentity {
        let loaded = try TLSIdentity.load(certificatePath: certificatePath, keyPath: keyPath)
        if let problem = loaded.problem(now: now) { throw TLSSetupError(problem) }
        state.withLock { $0 = loaded }
        return loaded
    }
}

extension TLSIdentity {
    /// Why this identity cannot be served at `now`, or nil: its private key does not belong to its leaf
    /// certificate (BoringSSL's own check, as a server context is built), or the leaf is expired or not valid yet.
    public func problem(now: Date) -> String? {
        guard let leaf = certificateChain.first else { return "\(source) holds no certificate" }
        do {
            _ = try NIOSSLContext(configuration: serverConfiguration())
        } catch {
            return "the private key does not match the certificate in \(source) (\(error))"
        }
        let der: [UInt8]
        do { der = try leaf.toDERBytes() } catch { return "\(source): \(error)" }
        return Self.validityProblem(leafDER: der, now: now, source: source)
    }

    /// Why a leaf certificate (DER) is not valid at `now`, or nil. Pure.
    public static func validityProblem(leafDER: [UInt8], now: Date, source: String) -> String? {
        let certificate: Certificate
        do { certificate = try Certificate(derEncoded: leafDER) } catch {
            return "the certificate in \(source) cannot be parsed: \(error)"
        }
        let stamp = ISO8601DateFormatter()
        if now > certificate.notValidAfter {
            return "the certificate in \(source) expired at \(stamp.string(from: certificate.notValidAfter))"
        }
        if now < certificate.notValidBefore {
            return "the certificate in \(source) is not valid before \(stamp.string(from: certificate.notValidBefore))"
        }
        return nil
    }
}
