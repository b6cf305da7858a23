import Foundation
import SetteeCore
import SetteeDocument

/// One document touched by a committed write.
public struct ChangedDocument: Sendable, Equatable {
    public var id: String
    /// The document's winning revision after the write (nil after a purge).
    public var revision: RevID?
    public var isDeleted: Bool
    /// The `type` property of the winner, or of the last live revision for a deletion.
    public var type: String?
    /// True when the document did not exist (or was deleted) before this write.
    public var isNew: Bool
    /// True for a purge: the document is gone, history and all.
    public var isPurged: Bool
}

/// What one committed transaction changed, as `Database.changes` delivers it.
public struct DatabaseChange: Sendable, Equatable {
    public var documents: [ChangedDocument]
    /// The database's last sequence after the transaction.
    public var lastSequence: SeqNo
    /// True when the revisions came from a replicator (`new_edits=false`) rather than a local save.
    public var isExternal: Bool
    /// The scope and collection the transaction wrote (one transaction writes one collection).
    public var scope: String = "_default"
    public var collection: String = "_default"
    /// The collection's row id (the hub's filter).
    var collectionID: Int64 = 0
    public var documentIDs: [String] { documents.map(\.id) }
}

/// One row of `changes(since:)`: a document's latest change (older changes of it are superseded).
public struct ChangeEntry: Sendable, Equatable {
    public var sequence: SeqNo
    public var id: String
    public var revision: RevID
    public var isDeleted: Bool
    /// Every leaf revision of the document (the winner first), as the replication `_changes` lists.
    public var leaves: [RevID]
}

/// Fans committed changes out to every subscriber. Posting never blocks (unbounded buffers; a
/// subscriber that stops reading should cancel its iteration, which removes it).
final class ChangeHub: @unchecked Sendable {
    private let lock = NSLock()
    private var next = 0
    private var subscribers: [Int: (collection: Int64?, continuation: AsyncStream<DatabaseChange>.Continuation)] = [:]

    /// A stream of the changes of collection `collection` (a `collections` row id; nil: every collection).
    func subscribe(collection: Int64? = nil) -> AsyncStream<DatabaseChange> {
        let (stream, continuation) = AsyncStream<DatabaseChange>.makeStream()
        lock.lock()
        let key = next
        next += 1
        subscribers[key] = (collection, continuation)
        lock.unlock()
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.lock.lock()
            self.subscribers[key] = nil
            self.lock.unlock()
        }
        return stream
    }

    func post(_ change: DatabaseChange) {
        lock.lock()
        let targets = subscribers.values.filter { $0.collection == nil || $0.collection == change.collectionID }
        lock.unlock()
        for c in targets { c.continuation.yield(change) }
    }

    func finishAll() {
        lock.lock()
        let targets = Array(subscribers.values)
        subscribers = [:]
        lock.unlock()
        for c in targets { c.continuation.finish() }
    }
}
