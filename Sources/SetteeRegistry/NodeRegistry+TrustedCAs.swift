import Foundation
import Logging
import SetteeClusterMap
import SetteeControl
import SetteeCore
import Synchronization

/// One trusted CA certificate in the cluster document (ADR 0047), with what `GET /pools/default/trustedCAs` shows of
/// it. The certificate is checked where it enters (the admin API, which parses it: this layer has no X.509 parser)
/// and again where it is used (`SetteeTLS.ClusterAuthorities`); `NodeMetadata.validate` bounds its size and shape.
public struct TrustedCAEntry: Codable, Sendable, Equatable {
    /// Stable number within the cluster document (Couchbase's `id`).
    public var id: Int
    /// One PEM certificate block.
    public var pem: String
    public var subject: String
    /// ISO 8601, as Couchbase shows them.
    public var notBefore: String
    public var notAfter: String
    public var loadTimestamp: String
    /// The node and the file of its `inbox/CA` directory the certificate was loaded from.
    public var loadHost: String
    public var loadFile: String

    public init(
        id: Int, pem: String, subject: String, notBefore: String, notAfter: String, loadTimestamp: String,
        loadHost: String, loadFile: String
    ) {
        self.id = id
        self.pem = pem
        self.subject = subject
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.loadTimestamp = loadTimestamp
        self.loadHost = loadHost
        self.loadFile = loadFile
    }
}

extension NodeRegistry {
    /// The cluster's trusted CA certificates, PEM (empty when none was loaded).
    public var trustedCAs: [String] { snapshots.read { $0.trustedCAs ?? [] }.map(\.pem) }

    /// The cluster's trusted CA entries, by id.
    public var trustedCAEntries: [TrustedCAEntry] { snapshots.read { $0.trustedCAs ?? [] } }

    /// Adds the CAs of `entries` whose PEM the document does not hold yet (ids are assigned here), in the epoch
    /// `claim`; the new document reaches the other nodes as users and settings do. Returns the entries added.
    /// Throws `RegistryError.corruptMetadata` past `Limits.maxTrustedCAs`. Blocking.
    @discardableResult
    public func addTrustedCAs(_ entries: [TrustedCAEntry], claim: EpochClaim? = nil) throws -> [TrustedCAEntry] {
        let added: [TrustedCAEntry] = try mutations.withLock { _ in
            var metadata = snapshots.metadata
            var cas = metadata.trustedCAs ?? []
            var added: [TrustedCAEntry] = []
            var next = (cas.map(\.id).max() ?? -1) + 1
            for var entry in entries where !cas.contains(where: { $0.pem == entry.pem }) {
                entry.id = next
                next += 1
                cas.append(entry)
                added.append(entry)
            }
            guard !added.isEmpty else { return [] }
            guard cas.count <= Limits.maxTrustedCAs else {
                throw RegistryError.corruptMetadata(
                    "\(cas.count) trusted CAs: at most \(Limits.maxTrustedCAs) (Limits.maxTrustedCAs)")
            }
            metadata.trustedCAs = cas
            try metadata.validate()
            try takeRevision(&metadata, claim: claim)
            try commit(metadata)
            return added
        }
        if !added.isEmpty {
            logger.notice(
                "trusted CAs loaded", metadata: ["subjects": "\(added.map(\.subject))", "total": "\(trustedCAs.count)"])
        }
        return added
    }
}
