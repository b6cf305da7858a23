import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A self-signed TLS identity: a fresh P-256 key and a certificate for 127.0.0.1/localhost (plus any
/// `hosts` given). Lite's listener makes one valid for a day at each start; a data node makes one at first
/// start and keeps it (`TLSIdentity.loadOrCreateSelfSigned`). Peers trust it by pinning its SHA-256
/// fingerprint (or by taking the certificate itself as their CA).
public struct SelfSignedIdentity: Sendable {
    public let certificateDER: [UInt8]
    public let privateKeyDER: [UInt8]
    /// The certificate and key in PEM, for keeping them in files an operator can read with openssl.
    public let certificatePEM: String
    public let privateKeyPEM: String

    public init(
        commonName: String = "settee-lite listener", hosts: [String] = [], validFor: TimeInterval = 24 * 3600
    ) throws {
        let signingKey = P256.Signing.PrivateKey()
        let key = Certificate.PrivateKey(signingKey)
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        var names: [GeneralName] = [.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))]
        for host in hosts where host != "localhost" && host != "127.0.0.1" && !host.isEmpty {
            if let v4 = Self.ipv4Bytes(host) {
                names.append(.ipAddress(ASN1OctetString(contentBytes: ArraySlice(v4))))
            } else {
                names.append(.dnsName(host))
            }
        }
        let subjectNames = names
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
            Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            try ExtendedKeyUsage([.serverAuth])
            SubjectAlternativeNames(subjectNames)
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key.publicKey,
            notValidBefore: now.addingTimeInterval(-60), notValidAfter: now.addingTimeInterval(validFor),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions,
            issuerPrivateKey: key)
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        certificateDER = serializer.serializedBytes
        privateKeyDER = Array(signingKey.derRepresentation)
        certificatePEM = try certificate.serializeAsPEM().pemString
        privateKeyPEM = signingKey.pemRepresentation
    }

    /// The four bytes of a dotted IPv4 literal, nil for anything else (a DNS name).
    static func ipv4Bytes(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var bytes: [UInt8] = []
        for part in parts {
            guard part.count <= 3, let b = UInt8(part) else { return nil }
            bytes.append(b)
        }
        return bytes
    }

    /// `sha256:` and the hex SHA-256 of the certificate's DER: what a sync URL's `cert` parameter pins.
    public var fingerprint: String {
        Self.fingerprint(ofDER: certificateDER)
    }

    /// A NIOSSL server configuration presenting this identity, offering the versions and suites of `policy`
    /// (ADR 0144).
    public func serverConfiguration(policy: TLSPolicy = .default) throws -> TLSConfiguration {
        let cert = try NIOSSLCertificate(bytes: certificateDER, format: .der)
        let key = try NIOSSLPrivateKey(bytes: privateKeyDER, format: .der)
        var config = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(cert)], privateKey: .privateKey(key))
        policy.apply(to: &config)
        return config
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
