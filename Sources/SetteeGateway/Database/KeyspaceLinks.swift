import Synchronization

/// The keyspaces (collections) of one gateway database, each a `GatewayDatabase` over its collection, linked so that
/// what Sync Gateway keeps per database stays per database (ADR 0142):
///
/// - **Sequences.** Every keyspace takes its sequences from the database's one allocator (`sequenceOwner`'s, whose
///   batches come from `_sync:seq` in the default collection, `KeyspaceBucket`), so each keyspace's changes feed sees
///   the sequences the others used as gaps. A keyspace that indexes a document version, or releases sequences, tells
///   the others, which count them as not theirs (as released ones), so no feed waits `skippedSequenceWaitSeconds` for
///   another collection's write.
/// - **Principals.** Users and roles are the database's (in the default collection); each keyspace follows them from
///   the default collection's stream, and one applied here (an admin `PUT /db/_user/x`) is handed to the others at
///   once, so a user created through one keyspace logs in through every other at the next request.
/// - **Grants.** A document's `access()`/`role()` grants are handed to the other keyspaces
///   (`ChannelIndex.otherKeyspaceGrants`), so they apply in every collection. A purge (or, without import, a KV delete)
///   of a granting document does not withdraw them elsewhere until the gateway restarts.
///
/// Members are held weakly: a keyspace that closes and goes away drops out.
public final class KeyspaceLinks: Sendable {
    private struct Member {
        weak var database: GatewayDatabase?
    }

    private let members = Mutex<[Member]>([])

    public init() {}

    func join(_ database: GatewayDatabase) {
        members.withLock { $0.append(Member(database: database)) }
    }

    /// The keyspace that allocates the database's sequences (the first to join): one reserved batch per database, as
    /// Sync Gateway has one sequence allocator per database. With a batch per keyspace, each keyspace's unused rest of
    /// its batch would hold back every other keyspace's feed until released (`gatewaySequenceReleaseWaitSeconds`).
    var sequenceOwner: GatewayDatabase? {
        members.withLock { m in m.lazy.compactMap { $0.database }.first }
    }

    /// Every other live keyspace of the database.
    func others(than database: GatewayDatabase) -> [GatewayDatabase] {
        members.withLock { m in m.compactMap { $0.database }.filter { $0 !== database } }
    }
}

extension GatewayDatabase {
    /// Tells the database's other keyspaces that `seqs` were used here (`KeyspaceLinks`).
    func shareSequences(_ seqs: [UInt64]) {
        guard let links = options.links else { return }
        for other in links.others(than: self) { other.seeOtherKeyspaceSequences(seqs) }
    }

    /// Sequences another keyspace of the database used: never this keyspace's documents, so they are seen as
    /// released ones are, and the stable sequence moves past them.
    func seeOtherKeyspaceSequences(_ seqs: [UInt64]) {
        let change = index.withLock { idx -> IndexChange in
            var c = IndexChange()
            c.stableMoved = idx.seeSequences(seqs)
            return c
        }
        notify(change)
    }

    /// Hands the grants `doc`'s indexed version makes (none for a tombstone) to the database's other keyspaces, where
    /// they apply too (Sync Gateway's `access()` and `role()` grant across the database's collections).
    func shareGrants(of doc: StoredDocument) {
        guard let links = options.links else { return }
        let id = "\(keyspace)/\(doc.id)"
        let grants =
            doc.meta.access.isEmpty && doc.meta.roleAccess.isEmpty
            ? nil : DocumentGrants(access: doc.meta.access, roleAccess: doc.meta.roleAccess)
        for other in links.others(than: self) {
            let touched = other.index.withLock { $0.setOtherKeyspaceGrants(id: id, grants) }
            if touched.isEmpty { continue }
            var change = IndexChange()
            change.principals = touched
            other.notify(change)
        }
    }

    /// Takes in the grants the documents of the database's keyspaces opened before this one already make (each
    /// keyspace hands over only what it indexes after this one joined).
    func adoptOtherKeyspacesGrants() {
        guard let links = options.links else { return }
        for other in links.others(than: self) {
            let prefix = "\(other.keyspace)/"
            let grants = other.index.withLock { idx in
                idx.docs.compactMap { id, e -> (String, DocumentGrants)? in
                    e.access.isEmpty && e.roleAccess.isEmpty
                        ? nil : (prefix + id, DocumentGrants(access: e.access, roleAccess: e.roleAccess))
                }
            }
            guard !grants.isEmpty else { continue }
            index.withLock { idx in for (id, g) in grants { _ = idx.setOtherKeyspaceGrants(id: id, g) } }
        }
    }

    /// Hands a principal version applied here to the database's other keyspaces (`KeyspaceLinks`).
    func sharePrincipal(_ p: PrincipalRecord?, name: String, isRole: Bool) {
        guard let links = options.links else { return }
        for other in links.others(than: self) { other.applyPrincipal(p, name: name, isRole: isRole, shared: true) }
    }
}
