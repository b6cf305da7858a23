import SetteeCore
import SetteeJSON

/// What one collection holds (issue 71's figures for Lite, ADR 0153). Counted by one scan of the collection's
/// documents (their revision trees are decoded), so it costs a read of the whole collection: for a status screen or
/// a test, not for every save.
public struct CollectionStats: Sendable, Equatable {
    /// Documents whose winner is live.
    public var documents = 0
    /// Documents whose winner is deleted (kept until purged: they replicate the deletion).
    public var tombstones = 0
    /// Live leaf revisions: one per live document plus every unresolved conflict.
    public var liveRevisions = 0
    /// Revisions the trees remember (bodies or not), bounded per branch by `DatabaseOptions.revsLimit`.
    public var storedRevisions = 0
    /// Revision bodies stored (winners' and others'; `compact()` keeps only leaves').
    public var storedBodies = 0
    /// Bytes of those bodies.
    public var storedBodyBytes = 0
    /// Documents with an expiration (`setDocumentExpiration`).
    public var expiringDocuments = 0

    public init() {}

    static func += (a: inout CollectionStats, b: CollectionStats) {
        a.documents += b.documents
        a.tombstones += b.tombstones
        a.liveRevisions += b.liveRevisions
        a.storedRevisions += b.storedRevisions
        a.storedBodies += b.storedBodies
        a.storedBodyBytes += b.storedBodyBytes
        a.expiringDocuments += b.expiringDocuments
    }

    /// The members by their snake_case names (as `settee-lite stats` prints them).
    public var json: JSON {
        .object([
            ("documents", .number(Double(documents))), ("tombstones", .number(Double(tombstones))),
            ("live_revisions", .number(Double(liveRevisions))), ("stored_revisions", .number(Double(storedRevisions))),
            ("stored_bodies", .number(Double(storedBodies))), ("stored_body_bytes", .number(Double(storedBodyBytes))),
            ("expiring_documents", .number(Double(expiringDocuments))),
        ])
    }
}

/// What a Lite database holds and what its file costs (issue 71 item 5, ADR 0153): every collection's
/// `CollectionStats`, their sum, and the database's own attachments, `_local` documents and file.
public struct DatabaseStats: Sendable, Equatable {
    /// Each collection's figures, by `scope.name`.
    public var collections: [String: CollectionStats] = [:]
    /// The sum over `collections`.
    public var total = CollectionStats()
    /// Attachment bodies stored (one per digest, shared by every revision naming it) and their bytes.
    public var attachments = 0
    public var attachmentBytes = 0
    /// `_local` documents (replication checkpoints among them).
    public var localDocuments = 0
    /// The SQLite file: pages in use or free (`PRAGMA page_count`, `freelist_count`) of `pageSize` bytes; free pages
    /// are reused by later writes and returned to the file system by `compact()`.
    public var pageCount = 0
    public var freePages = 0
    public var pageSize = 0
    /// Bytes of the database file and of its write-ahead log.
    public var fileBytes = 0
    public var walBytes = 0

    public init() {}

    /// `{"total": {...}, "collections": {"scope.name": {...}}, "attachments": N, ...}` (snake_case names).
    public var json: JSON {
        .object([
            ("total", total.json),
            ("collections", .object(collections.sorted { $0.key < $1.key }.map { ($0.key, $0.value.json) })),
            ("attachments", .number(Double(attachments))), ("attachment_bytes", .number(Double(attachmentBytes))),
            ("local_documents", .number(Double(localDocuments))), ("page_count", .number(Double(pageCount))),
            ("free_pages", .number(Double(freePages))), ("page_size", .number(Double(pageSize))),
            ("file_bytes", .number(Double(fileBytes))), ("wal_bytes", .number(Double(walBytes))),
        ])
    }
}

extension Database {
    /// The figures of every collection, the attachments and the file (`DatabaseStats`), read on the reader connection
    /// (a write meanwhile is not waited for). Costs a scan of every document.
    public func stats() throws(LiteError) -> DatabaseStats {
        let path = path
        return try read { try $0.databaseStats(path: path) }
    }
}

extension DatabaseCollection {
    /// This collection's figures (`CollectionStats`). Costs a scan of its documents.
    public func stats() throws(LiteError) -> CollectionStats {
        try read { try $0.collectionStats() }
    }
}
