import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A TLS identity made when a listener starts: a fresh P-256 key and a self-signed certificate for
/// 127.0.0.1/localhost, valid for a day. Peers trust it by pinning: the sync URL carries the
/// certificate's SHA-256 fingerprint, and the sender accepts exactly that certificate.
public struct SelfSignedIdentity: Sendable {
    public let certificateDER: [UInt8]
    public let privateKeyDER: [UInt8]

    public init(commonName: String = "settee-lite listener") throws {
        let signingKey = P256.Signing.PrivateKey()
        let key = Certificate.PrivateKey(signingKey)
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
            Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            try ExtendedKeyUsage([.serverAuth])
            SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key.publicKey,
            notValidBefore: now.addingTimeInterval(-60), notValidAfter: now.addingTimeInterval(24 * 3600),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: key)
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        certificateDER = serializer.serializedBytes
        privateKeyDER = Array(signingKey.derRepresentation)
    }

    /// `sha256:` and the hex SHA-256 of the certificate's DER: what a sync URL's `cert` parameter pins.
    public var fingerprint: String {
        Self.fingerprint(ofDER: certificateDER)
    }

    /// A NIOSSL server configuration presenting this identity.
    public func serverConfiguration() throws -> TLSConfiguration {
        let cert = try NIOSSLCertificate(bytes: certificateDER, format: .der)
        let key = try NIOSSLPrivateKey(bytes: privateKeyDER, format: .der)
        return TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(cert)], privateKey: .privateKey(key))
    }

    /// The SHA-256 fingerprint (`sha256:<hex>`) of a DER certificate.
    public static func fingerprint(ofDER der: [UInt8]) -> String {
        "sha256:" + SHA256.hash(data: der).map { String(format: "%02x", $0) }.joined()
    }

    /// A client configuration that trusts exactly `certificate` (the pinned peer's) and skips hostname
    /// checks: the pin is the identity.
    public static func clientConfiguration(trusting certificate: NIOSSLCertificate) -> TLSConfiguration {
        var config = TLSConfiguration.makeClientConfiguration()
        config.trustRoots = .certificates([certificate])
        config.certificateVerification = .noHostnameVerification
        return config
    }
}
