import Foundation
import NIOConcurrencyHelpers
import NIOSSL
import SetteeCore
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// The cluster's trusted CAs as node-to-node TLS uses them (ADR 0047): a peer whose leaf chains to one of them and
/// names the address it is called at in its subject alternative names is trusted without a pinned fingerprint, so
/// a node restarted with a fresh leaf from the same CA needs no change to the cluster document.
///
/// The PEM list comes from the cluster document through `source` (read at each use, parsed again only when it
/// changed); certificates that no longer pass `TrustedCA.parse` (expired since they were loaded) are left out.
/// Chains are checked with swift-certificates' `Verifier` (RFC 5280 path building and validity, plus the server
/// identity: DNS name or IP address against the SANs), never by hand.
public final class ClusterAuthorities: Sendable {
    /// The parsed trust anchors, with the NIOSSL copies an HTTP client's configuration needs.
    public struct Roots: Sendable {
        public let certificates: [Certificate]
        let nio: [NIOSSLCertificate]
        /// Identifies this set in caches (the joined PEMs' hash): equal keys, equal roots.
        public let key: String
    }

    /// A peer's chain against the roots.
    public enum Decision: Equatable, Sendable {
        case trusted
        case refused(String)
    }

    /// A peer whose chain the trusted CAs do not vouch for (at the address it was called at).
    public struct Untrusted: Error, CustomStringConvertible, Sendable {
        public let presented: String
        public let reason: String
        public var description: String { "the peer's certificate (\(presented)) is not trusted: \(reason)" }
    }

    private let source: @Sendable () -> [String]
    private let kept = NIOLockedValueBox<(pems: [String], roots: Roots?)>(([], nil))
    /// A count of checks running now, at most `limit`: a check takes a slot for its duration or is refused.
    public final class CheckSlots: Sendable {
        /// How many checks may run at once.
        public let limit: Int
        private let count = NIOLockedValueBox<Int>(0)

        init(limit: Int) { self.limit = limit }

        /// Checks running now (tests, metrics).
        public var running: Int { count.withLockedValue { $0 } }

        /// Takes a slot; false when `limit` are taken.
        func take() -> Bool {
            count.withLockedValue { n in
                guard n < limit else { return false }
                n += 1
                return true
            }
        }

        func release() { count.withLockedValue { $0 = max(0, $0 - 1) } }
    }

    /// Peers' handshakes' checks (`verifyBounded`), at most `Limits.maxConcurrentCAChecks`.
    public let peerSlots: CheckSlots
    /// This node's own calls' checks (`verifyOwnBounded`), at most `Limits.maxConcurrentOwnCAChecks`: apart from
    /// the peers', so peers filling theirs cannot refuse this node's calls.
    public let ownSlots: CheckSlots

    /// Why a check beyond its bound was refused.
    public static let busyReason = "too many certificate checks running: refused without checking"
    /// The refusal of a check beyond its slots' limit.
    public static let busy = Decision.refused(busyReason)

    public init(
        maxConcurrentChecks: Int = Limits.maxConcurrentCAChecks,
        maxConcurrentOwnChecks: Int = Limits.maxConcurrentOwnCAChecks, source: @escaping @Sendable () -> [String]
    ) {
        peerSlots = CheckSlots(limit: maxConcurrentChecks)
        ownSlots = CheckSlots(limit: maxConcurrentOwnChecks)
        self.source = source
    }

    /// `verify(presented:host:)` for a call this node makes (`CertificatePin.fetchChain(trustedBy:)`), or `busy`
    /// at once when `ownSlots` are all taken.
    public func verifyOwnBounded(presented der: [[UInt8]], host: String, now: Date = Date()) async -> Decision {
        await verify(in: ownSlots, presented: der, host: host, now: now)
    }

    /// `verify(presented:host:)`, or `busy` at once when `peerSlots` are all taken: a handshake's check (started by
    /// what a peer shows) takes a slot for its duration, so peers cannot make this node start unbounded work.
    public func verifyBounded(presented der: [[UInt8]], host: String, now: Date = Date()) async -> Decision {
        await verify(in: peerSlots, presented: der, host: host, now: now)
    }

    private func verify(in slots: CheckSlots, presented der: [[UInt8]], host: String, now: Date) async -> Decision {
        guard slots.take() else { return Self.busy }
        defer { slots.release() }
        return await verify(presented: der, host: host, now: now)
    }

    /// Reports `verifyBounded`'s decision to `done` from a task started only when a slot is free; with none free,
    /// `done(busy)` is called at once and no task is started (for synchronous callbacks such as NIOSSL's
    /// certificate verification).
    public func verifyBounded(
        presented der: [[UInt8]], host: String, done: @escaping @Sendable (Decision) -> Void
    ) {
        guard peerSlots.take() else { return done(Self.busy) }
        Task {
            let decision = await verify(presented: der, host: host)
            peerSlots.release()
            done(decision)
        }
    }

    /// The current roots, nil when the cluster trusts no CA.
    public func roots(now: Date = Date()) -> Roots? {
        let pems = source()
        if pems.isEmpty { return nil }
        if let hit = kept.withLockedValue({ $0.pems == pems ? $0 : nil }) { return hit.roots }
        var certificates: [Certificate] = []
        var nio: [NIOSSLCertificate] = []
        for pem in pems.prefix(Limits.maxTrustedCAs) {
            guard let parsed = try? TrustedCA.parse(pemText: pem, now: now) else { continue }
            for ca in parsed {
                guard let copy = try? NIOSSLCertificate(bytes: Array(ca.pem.utf8), format: .pem) else { continue }
                certificates.append(ca.certificate)
                nio.append(copy)
            }
        }
        let made =
            certificates.isEmpty
            ? nil
            : Roots(
                certificates: certificates, nio: nio,
                key: SelfSignedIdentity.fingerprint(ofDER: Array(pems.joined(separator: "\n").utf8)))
        kept.withLockedValue { $0 = (pems, made) }
        return made
    }

    /// Whether `chain` (leaf first) chains to one of `roots` and its leaf is valid for `host` (a DNS name, or an
    /// IP literal checked against IP SANs) at `now`. Pure: no I/O.
    public static func verify(chain: [Certificate], host: String, roots: [Certificate], now: Date) async -> Decision {
        guard let leaf = chain.first else { return .refused("the peer presented no certificate") }
        guard !roots.isEmpty else { return .refused("the cluster trusts no CA") }
        let isIP = IPLiteral.isIP(host)
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            RFC5280Policy(fixedExpiryValidationTime: now)
            ServerIdentityPolicy(serverHostname: isIP ? nil : host, serverIP: isIP ? host : nil)
        }
        switch await verifier.validate(leaf: leaf, intermediates: CertificateStore(chain.dropFirst())) {
        case .validCertificate: return .trusted
        case .couldNotValidate(let failures):
            let reasons = failures.prefix(3).map { "\($0.policyFailureReason)" }.joined(separator: "; ")
            return .refused("\(leaf.subject) does not chain to a trusted CA for \(host): \(reasons)")
        }
    }

    /// `verify` for a chain as TLS presented it (DER, leaf first), against the current roots.
    public func verify(presented der: [[UInt8]], host: String, now: Date = Date()) async -> Decision {
        guard let roots = roots(now: now) else { return .refused("the cluster trusts no CA") }
        let chain: [Certificate]
        do { chain = try der.map { try Certificate(derEncoded: $0) } } catch {
            return .refused("the peer's certificate cannot be parsed: \(error)")
        }
        return await Self.verify(chain: chain, host: host, roots: roots.certificates, now: now)
    }

    /// The HTTP client configuration for a peer verified through the roots: they are the trust roots, with the
    /// hostname (or IP address) checked by the TLS library on every connection too.
    static func configuration(_ roots: Roots) -> TLSConfiguration {
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        config.trustRoots = .certificates(roots.nio)
        config.certificateVerification = .fullVerification
        return config
    }
}

/// IP literal test for TLS identity checks (an IPv4 dotted quad or an IPv6 literal, brackets allowed).
enum IPLiteral {
    static func isIP(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.contains(":") { return bare.allSatisfy { $0.isHexDigit || $0 == ":" || $0 == "." } }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { p in !p.isEmpty && p.count <= 3 && p.allSatisfy(\.isNumber) }
    }
}
