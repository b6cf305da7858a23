import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import Testing
import X509

@testable import SetteeTLS

/// What a node trusts on its HTTPS calls to a peer pinned by fingerprint (`PinnedPeerTrust`, ADR 0030): the
/// pinned certificate itself when it is self-signed, else the self-signed CA the peer presents with it, and
/// nothing at all for a CA-issued leaf whose root the peer does not present.
@Suite struct PinnedPeerTrustTests {
    static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    /// A certificate for `subject`, signed by `issuerKey` under `issuer`'s name.
    static func certificate(
        subject: String, key: P256.Signing.PrivateKey, issuer: String, issuerKey: P256.Signing.PrivateKey,
        isCA: Bool
    ) throws -> Certificate {
        let now = Date()
        let extensions = try Certificate.Extensions {
            if isCA {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            } else {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
            }
        }
        return try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-60), notValidAfter: now.addingTimeInterval(3600),
            issuer: try DistinguishedName { CommonName(issuer) },
            subject: try DistinguishedName { CommonName(subject) },
            signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: .init(issuerKey))
    }

    /// Proves a node's own self-signed certificate (what `settee-server --tls` makes) is trusted alone, without a
    /// hostname check: the HTTP client's connections then pass only for that certificate (or one its key signed).
    /// Proves the trust decision's steps as values: without CAs only the pin; with CAs a kept configuration through
    /// them first, else a check unless an earlier one was refused; after a check, a vouched peer is admitted by the
    /// CAs, a refused one goes to the pin and is remembered, a busy check goes to the pin and is not remembered.
    @Test func decisionStepsAreValues() {
        for kept in [false, true] {
            for known in [false, true] {
                #expect(PinnedPeerTrust.firstStep(hasCAs: false, keptThroughCAs: kept, knownNotUnderCAs: known) == .pin)
            }
        }
        #expect(
            PinnedPeerTrust.firstStep(hasCAs: true, keptThroughCAs: true, knownNotUnderCAs: false) == .keptThroughCAs)
        #expect(
            PinnedPeerTrust.firstStep(hasCAs: true, keptThroughCAs: true, knownNotUnderCAs: true) == .keptThroughCAs)
        #expect(PinnedPeerTrust.firstStep(hasCAs: true, keptThroughCAs: false, knownNotUnderCAs: false) == .checkCAs)
        #expect(PinnedPeerTrust.firstStep(hasCAs: true, keptThroughCAs: false, knownNotUnderCAs: true) == .pin)
        let vouched = PinnedPeerTrust.afterCheck(.vouched)
        #expect(vouched.admittedBy == .ca && !vouched.rememberNotUnderCAs)
        let refused = PinnedPeerTrust.afterCheck(.refused)
        #expect(refused.admittedBy == nil && refused.rememberNotUnderCAs)
        let busy = PinnedPeerTrust.afterCheck(.busy)
        #expect(busy.admittedBy == nil && !busy.rememberNotUnderCAs)
    }

    @Test func selfSignedLeafIsItsOwnRoot() throws {
        let identity = try SelfSignedIdentity(commonName: "settee-server test", hosts: ["127.0.0.1"])
        #expect(try PinnedPeerTrust.roots(forPresentedChain: [identity.certificateDER]) == .leaf)
        let leaf = try NIOSSLCertificate(bytes: identity.certificateDER, format: .der)
        let config = try PinnedPeerTrust.configuration(presented: [leaf])
        #expect(config.trustRoots == .certificates([leaf]))
        #expect(config.certificateVerification == .noHostnameVerification)
        #expect(config.minimumTLSVersion == .tlsv12)
    }

    /// Proves an operator's CA-issued certificate is trusted through the self-signed CA the peer presents after
    /// it, with the full hostname check; without that CA in the chain the peer cannot be trusted (the message
    /// says to append it to `--tls-cert`); and a leaf that merely names itself as issuer, signed by another key,
    /// is not taken for self-signed.
    @Test func caIssuedLeafNeedsItsRootInTheChain() throws {
        let caKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        let ca = try Self.certificate(subject: "Test CA", key: caKey, issuer: "Test CA", issuerKey: caKey, isCA: true)
        let leaf = try Self.certificate(
            subject: "node 1", key: leafKey, issuer: "Test CA", issuerKey: caKey, isCA: false)
        #expect(try PinnedPeerTrust.roots(forPresentedChain: [Self.der(leaf), Self.der(ca)]) == .issuers([1]))

        let nioChain = try [leaf, ca].map { try NIOSSLCertificate(bytes: Self.der($0), format: .der) }
        let config = try PinnedPeerTrust.configuration(presented: nioChain)
        #expect(config.trustRoots == .certificates([nioChain[1]]))
        #expect(config.certificateVerification == .fullVerification)

        let error = #expect(throws: PinnedPeerTrust.Untrustable.self) {
            _ = try PinnedPeerTrust.roots(forPresentedChain: [Self.der(leaf)])
        }
        #expect(error?.description.contains("--tls-cert") == true)

        let forged = try Self.certificate(
            subject: "node 2", key: leafKey, issuer: "node 2", issuerKey: caKey, isCA: false)
        #expect(!PinnedPeerTrust.isSelfSigned(forged))
        #expect(throws: PinnedPeerTrust.Untrustable.self) {
            _ = try PinnedPeerTrust.roots(forPresentedChain: [Self.der(forged)])
        }
        #expect(throws: PinnedPeerTrust.Untrustable.self) { _ = try PinnedPeerTrust.roots(forPresentedChain: []) }
        #expect(throws: PinnedPeerTrust.Untrustable.self) {
            _ = try PinnedPeerTrust.roots(forPresentedChain: [[0x30, 0x03, 0x02, 0x01, 0x00]])
        }
    }

    /// Proves a malformed fingerprint is refused before any connection is tried.
    @Test func malformedFingerprintIsRefusedWithoutConnecting() async throws {
        let trust = PinnedPeerTrust()
        await #expect(throws: TLSSetupError.self) {
            _ = try await trust.configuration(
                host: "127.0.0.1", port: 1, fingerprint: "sha256:xyz", timeout: .seconds(1))
        }
    }
}
