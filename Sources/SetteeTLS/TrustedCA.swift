import Foundation
import SetteeCore
import SwiftASN1
import X509

/// One CA certificate the cluster trusts for node-to-node TLS (ADR 0047): self-signed, with the CA basic
/// constraint, valid now. Its PEM travels in the cluster document; `parse` is the check at the edge (the
/// `POST /node/controller/loadTrustedCAs` route) and `ClusterAuthorities` parses the document's list again.
public struct TrustedCA: Sendable, Equatable {
    /// The certificate as one PEM block (normalised: what the cluster document stores).
    public let pem: String
    public let certificate: Certificate

    /// Why a PEM text cannot become trusted CAs.
    public struct Refusal: Error, CustomStringConvertible, Equatable, Sendable {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// Every certificate of `pemText` (a file may hold several), each checked: parseable, self-signed, the CA
    /// basic constraint, `notValidBefore <= now <= notValidAfter`, at most `Limits.maxTrustedCAPEMBytes` of PEM.
    /// Throws the first problem; a text with no certificate is refused too.
    public static func parse(pemText: String, now: Date) throws(Refusal) -> [TrustedCA] {
        let documents: [PEMDocument]
        do { documents = try PEMDocument.parseMultiple(pemString: pemText) } catch {
            throw Refusal("not PEM: \(error)")
        }
        let certificates = documents.filter { $0.discriminator == "CERTIFICATE" }
        guard !certificates.isEmpty else { throw Refusal("no CERTIFICATE block") }
        var parsed: [TrustedCA] = []
        for document in certificates {
            let pem = document.pemString
            guard pem.utf8.count <= Limits.maxTrustedCAPEMBytes else {
                throw Refusal("a certificate of \(pem.utf8.count) bytes (at most \(Limits.maxTrustedCAPEMBytes))")
            }
            let certificate: Certificate
            do { certificate = try Certificate(pemDocument: document) } catch {
                throw Refusal("cannot parse a certificate: \(error)")
            }
            if let why = problem(certificate, now: now) { throw Refusal("\(certificate.subject): \(why)") }
            parsed.append(TrustedCA(pem: pem, certificate: certificate))
        }
        return parsed
    }

    /// What keeps `certificate` from being a trusted root at `now`, or nil.
    static func problem(_ certificate: Certificate, now: Date) -> String? {
        guard PinnedPeerTrust.isSelfSigned(certificate) else { return "not self-signed (load the root CA)" }
        let constraints: BasicConstraints?
        do { constraints = try certificate.extensions.basicConstraints } catch {
            return "unreadable basic constraints: \(error)"
        }
        guard case .isCertificateAuthority = constraints else { return "not a CA (no CA basic constraint)" }
        if now < certificate.notValidBefore { return "not valid before \(certificate.notValidBefore)" }
        if now > certificate.notValidAfter { return "expired at \(certificate.notValidAfter)" }
        return nil
    }

    /// The `GET /pools/default/trustedCAs` fields of this CA (Couchbase's names).
    public var subjectText: String { "\(certificate.subject)" }
    public var notBefore: Date { certificate.notValidBefore }
    public var notAfter: Date { certificate.notValidAfter }
}
