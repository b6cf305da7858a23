import SetteeCore
import SetteeDocument
import SetteeJSON

/// What a replication filter is told about a revision besides its body (Couchbase Lite 3.1's `DocumentFlags`).
public struct DocumentFlags: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The revision is a deletion (a tombstone; its document has no properties).
    public static let deleted = DocumentFlags(rawValue: 1)
    /// The remote says the user lost access to the document (a pulled revision with `_removed: true`).
    public static let accessRemoved = DocumentFlags(rawValue: 2)
}

/// A per-collection replication filter (Couchbase Lite 3.1's `CollectionConfiguration.pushFilter`/`pullFilter`):
/// true replicates the revision, false leaves it out. It runs on the database's queue for each candidate revision,
/// so it must be quick; it may read the database (no lock is held while it runs) but should not write to it.
public typealias DocumentFilter = @Sendable (Document, DocumentFlags) -> Bool

/// A conflict a pull made (Couchbase Lite 3.1's `Conflict`): the pulled revision became a second live leaf of a
/// document beside a local one.
public struct Conflict: Sendable {
    public var documentID: String
    /// The local live leaf (the winner unless the pulled revision won): its id, revision, properties, attachments.
    public var localDocument: Document?
    /// The pulled revision.
    public var remoteDocument: Document?
}

/// A per-collection conflict resolver (Couchbase Lite 3.1's `CollectionConfiguration.conflictResolver`): given a
/// conflict, the document to keep, or nil to delete the document. The answer is saved as a new revision whose parent
/// is the pulled one (so pushing it back is a fast-forward on the remote), and every other live leaf is tombstoned;
/// answering the pulled document itself, unchanged, only tombstones the local leaf. It may read the database.
public typealias ConflictResolver = @Sendable (Conflict) -> Document?

extension DatabaseCollection {
    /// After a pull saved `remote` of `id`: when the document now has more than one live leaf and `remote` is one of
    /// them, asks `resolver` and saves its answer (see `ConflictResolver`). Returns whether a resolution was saved.
    /// The leaves are read, the resolver runs without any lock, and the resolution is saved only if the live leaves
    /// are still those it was asked about (a local write in between makes it ask again, at most
    /// `Limits.liteConflictResolverAttempts` times; then the conflict stays in the tree, as without a resolver).
    func resolvePulledConflict(
        _ id: String, remote: RevID, resolver: ConflictResolver
    ) throws(LiteError) -> Bool {
        for _ in 0..<Limits.liteConflictResolverAttempts {
            let live = try conflicts(of: id)
            guard live.count > 1, let remoteDoc = live.first(where: { $0.revision == remote }) else { return false }
            let localDoc = live.first { $0.revision != remote }
            let seen = Set(live.compactMap(\.revision))
            let answer = resolver(Conflict(documentID: id, localDocument: localDoc, remoteDocument: remoteDoc))
            if try saveResolution(id: id, remote: remoteDoc, answer: answer, expected: seen) { return true }
        }
        return false
    }

    /// Saves a resolver's answer in one transaction when the live leaves are still `expected`; false otherwise.
    private func saveResolution(
        id: String, remote: Document, answer: Document?, expected: Set<RevID>
    ) throws(LiteError) -> Bool {
        guard let base = remote.revision else { return false }
        let limit = database.options.revsLimit
        return try write { store in
            guard let stored = try store.loadDoc(id) else { return (false, []) }
            let live = Set(stored.tree.leaves.filter { !stored.tree.isDeleted($0) })
            guard live == expected else { return (false, []) }
            var changes: [ChangedDocument] = []
            for leaf in live where leaf != base {
                var tomb = Document(id: id)
                tomb.revision = leaf
                changes.append(try store.save(tomb, deleting: true, revsLimit: limit).1)
            }
            if let answer {
                let keepsRemote =
                    answer.properties == remote.properties && answer.attachments == remote.attachments
                    && !answer.isDeleted
                if !keepsRemote {
                    var merged = answer
                    merged.id = id
                    merged.revision = base
                    merged.isDeleted = false
                    changes.append(try store.save(merged, deleting: false, revsLimit: limit).1)
                }
            } else {
                var tomb = Document(id: id)
                tomb.revision = base
                changes.append(try store.save(tomb, deleting: true, revsLimit: limit).1)
            }
            return (true, changes)
        }
    }
}
