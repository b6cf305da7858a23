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
    private var subscribers: [Int: AsyncStream<DatabaseChange>.Continuation] = [:]

    func subscribe() -> AsyncStream<DatabaseChange> {
        let (stream, continuation) = AsyncStream<DatabaseChange>.makeStream()
        lock.lock()
        let key = next
        next += 1
        subscribers[key] = continuation
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
        let targets = Array(subscribers.values)
        lock.unlock()
        for c in targets { c.yield(change) }
    }

    func finishAll() {
        lock.lock()
        let targets = Array(subscribers.values)
        subscribers = [:]
        lock.unlock()
        for c in targets { c.finish() }
    }
}
