import NIOConcurrencyHelpers
import NIOSSL
import SetteeCore
import SwiftASN1
import Synchronization
import X509

/// Which trust admitted a peer call's TLS configuration (`PinnedPeerTrust`): the cluster's trusted CAs (ADR 0047)
/// or the member's pinned leaf (ADR 0030). Label values of `settee_peer_tls_verified_total{via}` (ADR 0057).
public enum PeerTrustPath: String, CaseIterable, Sendable {
    case ca
    case pin
}

/// Counts of the peer calls a `PinnedPeerTrust` gave a TLS configuration, by the trust that admitted the peer.
/// Read by `/metrics`; nothing about the peer or the call is kept.
public final class PeerTrustCounts: Sendable {
    private let viaCA = Atomic<Int>(0)
    private let viaPin = Atomic<Int>(0)

    public init() {}

    /// Calls admitted through `path` since start.
    public func count(_ path: PeerTrustPath) -> Int {
        switch path {
        case .ca: viaCA.load(ordering: .relaxed)
        case .pin: viaPin.load(ordering: .relaxed)
        }
    }

    func record(_ path: PeerTrustPath) {
        switch path {
        case .ca: viaCA.wrappingAdd(1, ordering: .relaxed)
        case .pin: viaPin.wrappingAdd(1, ordering: .relaxed)
        }
    }
}

/// TLS client configurations pinned to a peer's certificate fingerprint, for an HTTP client that takes a
/// `TLSConfiguration` per request but no verification callback (AsyncHTTPClient, which a node uses for its
/// calls to other nodes' admin ports).
///
/// The first call for a fingerprint fetches the peer's certificates over a pinned handshake
/// (`CertificatePin.fetchChain`: nothing is sent to a peer whose leaf is another one), then trusts what that
/// handshake showed (`roots(forPresentedChain:)`). The configuration is kept per fingerprint, so later calls
/// cost no extra handshake; the HTTP client verifies every connection against it, so an impostor appearing at the
/// same address afterwards fails verification there.
public final class PinnedPeerTrust: Sendable {
    /// What a pinned peer's HTTP connections are verified against.
    public enum Roots: Equatable, Sendable {
        /// The pinned leaf is self-signed (a node's own certificate from `--tls`): it alone is the trust root and
        /// no hostname is checked, since the pin is the identity. Only the holder of its key can pass.
        case leaf
        /// The pinned leaf was issued by a CA (an operator's `--tls-cert` chain) and the peer also presents that
        /// CA's self-signed certificate, at these positions of its chain: those are trusted, with the host name
        /// or IP address checked as usual. BoringSSL accepts no trust root short of a self-signed one, so a
        /// non-self-signed leaf cannot be the root itself.
        case issuers([Int])
    }

    /// Why a pinned peer's certificates cannot be trusted on their own.
    public struct Untrustable: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    private let cache = NIOLockedValueBox<[String: TLSConfiguration]>([:])
    /// The cluster's trusted CAs (ADR 0047), consulted before the pin: nil for a trust that only pins.
    public let authorities: ClusterAuthorities?
    private let notUnderCAs = NIOLockedValueBox<Set<String>>([])
    /// The calls given a configuration, by the trust that admitted the peer (`/metrics`, ADR 0057).
    public let counts = PeerTrustCounts()

    public init(authorities: ClusterAuthorities? = nil) { self.authorities = authorities }

    /// The first step of `configuration(host:port:fingerprint:timeout:)` for a peer.
    public enum Step: Equatable, Sendable {
        /// A configuration through the CAs is kept for this CA set and address: the CAs admit the call.
        case keptThroughCAs
        /// Ask the CAs (a handshake whose chain must verify against them).
        case checkCAs
        /// Only the pin can admit the peer (no CAs, or they did not vouch for it at this address).
        case pin
    }

    /// How a check through the CAs ended.
    public enum CACheck: Equatable, Sendable {
        /// The chain verified against the CAs for this address.
        case vouched
        /// Not checked: `Limits.maxConcurrentOwnCAChecks` checks were running.
        case busy
        /// The CAs did not vouch for the peer (another issuer, wrong name, unreachable).
        case refused
    }

    /// What to do first for a peer: `hasCAs` (the cluster document holds trusted CAs), `keptThroughCAs` (a
    /// configuration through them is kept for this address), `knownNotUnderCAs` (an earlier check was refused).
    public static func firstStep(hasCAs: Bool, keptThroughCAs: Bool, knownNotUnderCAs: Bool) -> Step {
        guard hasCAs else { return .pin }
        if keptThroughCAs { return .keptThroughCAs }
        return knownNotUnderCAs ? .pin : .checkCAs
    }

    /// After a check through the CAs: which trust admits the call (nil: try the pin) and whether to remember that
    /// the CAs do not vouch for the peer (only a refusal is remembered; a busy check learnt nothing).
    public static func afterCheck(_ check: CACheck) -> (admittedBy: PeerTrustPath?, rememberNotUnderCAs: Bool) {
        switch check {
        case .vouched: (.ca, false)
        case .busy: (nil, false)
        case .refused: (nil, true)
        }
    }

    /// Decides, from the chain a pinned peer presented (DER, leaf first), what its connections are verified
    /// against. Throws when the leaf is not self-signed and no self-signed certificate of the chain issued it
    /// (the operator's chain file lacks its root: append the CA certificate to `--tls-cert`).
    public static func roots(forPresentedChain chain: [[UInt8]]) throws -> Roots {
        guard !chain.isEmpty else { throw Untrustable(description: "the peer presented no certificate") }
        let parsed: [Certificate]
        do { parsed = try chain.map { try Certificate(derEncoded: $0) } } catch {
            throw Untrustable(description: "the peer's certificate cannot be parsed: \(error)")
        }
        if isSelfSigned(parsed[0]) { return .leaf }
        let roots = parsed.indices.dropFirst().filter { isSelfSigned(parsed[$0]) }
        guard !roots.isEmpty else {
            throw Untrustable(
                description: "the pinned certificate (\(parsed[0].subject)) is issued by \(parsed[0].issuer), "
                    + "whose self-signed certificate the peer does not present: append the CA certificate to the "
                    + "node's --tls-cert chain")
        }
        return .issuers(roots)
    }

    /// Whether `certificate` names itself as issuer and its own key verifies its signature.
    static func isSelfSigned(_ certificate: Certificate) -> Bool {
        certificate.issuer == certificate.subject
            && certificate.publicKey.isValidSignature(certificate.signature, for: certificate)
    }

    /// The client configuration for a peer that presented `chain` (leaf first) in a pinned handshake.
    public static func configuration(presented chain: [NIOSSLCertificate]) throws -> TLSConfiguration {
        let der = try chain.map { try $0.toDERBytes() }
        var config = TLSConfiguration.makeClientConfiguration()
        config.minimumTLSVersion = .tlsv12
        switch try roots(forPresentedChain: der) {
        case .leaf:
            config.trustRoots = .certificates([chain[0]])
            config.certificateVerification = .noHostnameVerification
        case .issuers(let positions):
            config.trustRoots = .certificates(positions.map { chain[$0] })
            config.certificateVerification = .fullVerification
        }
        return config
    }

    /// The configuration for calls to the peer at `host:port` whose certificate has `fingerprint`
    /// (`sha256:<hex>`): kept from an earlier call, or made after a pinned handshake with the peer (which fails
    /// with `CertificatePin.Mismatch` when the peer presents another certificate). At most
    /// `Limits.maxPinnedPeerCertificates` are kept; past that the cache starts afresh.
    public func configuration(
        host: String, port: Int, fingerprint: String, timeout: Duration
    ) async throws -> TLSConfiguration {
        guard case .pinned(let pin) = try TLSTrust.pin(fingerprint) else {
            throw TLSSetupError("not a certificate pin: \(fingerprint)")
        }
        let roots = authorities?.roots()
        let caKey = roots.map { "ca|\($0.key)|\(host):\(port)" }
        let kept = caKey.flatMap { key in cache.withLockedValue { $0[key] } }
        // A peer the cluster's CAs vouch for at this address is trusted through them, whatever leaf it shows now
        // (a restart with a fresh leaf from the same CA changes nothing); any other peer must show the pinned leaf.
        // A peer the CAs did not vouch for is remembered (`notUnderCAs`) so its calls do not repeat the check.
        let step = Self.firstStep(
            hasCAs: roots != nil, keptThroughCAs: kept != nil,
            knownNotUnderCAs: caKey.map { key in notUnderCAs.withLockedValue { $0.contains(key) } } ?? false)
        switch step {
        case .keptThroughCAs:
            if let kept {
                counts.record(.ca)
                return kept
            }
        case .checkCAs:
            if let authorities, let roots, let caKey {
                let check: CACheck
                do {
                    _ = try await CertificatePin.fetchChain(
                        host: host, port: port, trustedBy: authorities, timeout: timeout)
                    check = .vouched
                } catch let untrusted as ClusterAuthorities.Untrusted
                    where untrusted.reason == ClusterAuthorities.busyReason
                {
                    check = .busy
                } catch {
                    check = .refused
                }
                let outcome = Self.afterCheck(check)
                if outcome.admittedBy == .ca {
                    let made = ClusterAuthorities.configuration(roots)
                    keep(made, as: caKey)
                    counts.record(.ca)
                    return made
                }
                if outcome.rememberNotUnderCAs {
                    notUnderCAs.withLockedValue {
                        if $0.count >= Limits.maxPinnedPeerCertificates { $0.removeAll() }
                        $0.insert(caKey)
                    }
                }
            }
        case .pin:
            break
        }
        if let kept = cache.withLockedValue({ $0[pin] }) {
            counts.record(.pin)
            return kept
        }
        let chain = try await CertificatePin.fetchChain(host: host, port: port, fingerprint: pin, timeout: timeout)
        let made = try Self.configuration(presented: chain)
        keep(made, as: pin)
        counts.record(.pin)
        return made
    }

    /// Forgets what was kept for `host:port` through the CAs, after a connection there failed its verification:
    /// the next call checks the peer afresh (the CAs, then the pin), so a member re-pinned to a leaf outside the
    /// CAs is reached again.
    public func forgetAuthorities(host: String, port: Int) {
        let suffix = "|\(host):\(port)"
        cache.withLockedValue { kept in
            for key in kept.keys where key.hasPrefix("ca|") && key.hasSuffix(suffix) { kept.removeValue(forKey: key) }
        }
        notUnderCAs.withLockedValue { $0 = $0.filter { !$0.hasSuffix(suffix) } }
    }

    private func keep(_ configuration: TLSConfiguration, as key: String) {
        cache.withLockedValue {
            if $0.count >= Limits.maxPinnedPeerCertificates { $0.removeAll() }
            $0[key] = configuration
        }
    }
}
