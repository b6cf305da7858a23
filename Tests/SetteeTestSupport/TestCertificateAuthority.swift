import Crypto
import Foundation
import SwiftASN1
import X509

/// A certificate authority made in a test (ADR 0047's cluster CA): a P-256 key and its self-signed CA certificate,
/// which issues server leaves for given IP addresses or DNS names. Tests of the CA trust decisions use the
/// certificates; process tests write the PEM files a node is started with and an operator loads.
public struct TestCertificateAuthority {
    public let key: P256.Signing.PrivateKey
    public let certificate: Certificate

    /// A CA named `name`, valid from `notBefore` for `days` days; `isCA: false` makes a self-signed certificate
    /// without the CA basic constraint (which must not load as a trusted CA).
    public init(
        _ name: String, notBefore: Date = Date().addingTimeInterval(-3600), days: Double = 30, isCA: Bool = true
    ) throws {
        let key = P256.Signing.PrivateKey()
        self.key = key
        let extensions = try Certificate.Extensions {
            if isCA {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            } else {
                Critical(BasicConstraints.notCertificateAuthority)
            }
        }
        let dn = try DistinguishedName { CommonName(name) }
        certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: notBefore, notValidAfter: notBefore.addingTimeInterval(days * 86_400), issuer: dn,
            subject: dn, signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: .init(key))
    }

    /// The CA certificate, PEM.
    public var pem: String { get throws { try certificate.serializeAsPEM().pemString } }

    /// A server leaf this CA issues, with a fresh key, for `names` (dotted quads become IP SANs, anything else DNS
    /// names), valid `days` from `notBefore`.
    public func leaf(
        _ names: [String], notBefore: Date = Date().addingTimeInterval(-3600), days: Double = 7
    ) throws -> (certificate: Certificate, key: P256.Signing.PrivateKey) {
        let leafKey = P256.Signing.PrivateKey()
        let sans: [GeneralName] = names.map { name in
            let octets = name.split(separator: ".").compactMap { UInt8($0) }
            return octets.count == 4 ? .ipAddress(ASN1OctetString(contentBytes: octets[...])) : .dnsName(name)
        }
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([.serverAuth])
            SubjectAlternativeNames(sans)
        }
        let leaf = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(leafKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notBefore.addingTimeInterval(days * 86_400),
            issuer: certificate.subject, subject: try DistinguishedName { CommonName("node \(names)") },
            signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: .init(key))
        return (leaf, leafKey)
    }

    /// A leaf for `names` as the files a node is started with: the chain (leaf, then this CA) and the key, PEM.
    public func leafFiles(_ names: [String]) throws -> (chainPEM: String, keyPEM: String) {
        let (leaf, leafKey) = try leaf(names)
        return (try leaf.serializeAsPEM().pemString + "\n" + pem + "\n", leafKey.pemRepresentation + "\n")
    }
}
