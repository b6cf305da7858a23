import Foundation
import SetteeCore
import SetteeDocument
import SetteeSQLite

/// The figures of `DatabaseStats` (ADR 0153), read on whichever connection the caller holds.
extension Store {
    /// The current collection's figures: one scan of its `docs` (trees decoded), two aggregates.
    func collectionStats() throws -> CollectionStats {
        var stats = CollectionStats()
        try each("SELECT tree, winner, deleted, body IS NOT NULL, coalesce(length(body), 0) FROM \(tables.docs)") { s in
            let deleted = s.int64(at: 2) != 0
            if deleted { stats.tombstones += 1 } else { stats.documents += 1 }
            if s.int64(at: 3) != 0 {
                stats.storedBodies += 1
                stats.storedBodyBytes += Int(s.int64(at: 4))
            }
            let tree = try Self.decodeTree(s.blob(at: 0), winner: s.text(at: 1), deleted: deleted)
            stats.storedRevisions += tree.count
            stats.liveRevisions += tree.leaves.count { !tree.isDeleted($0) }
            return true
        }
        if let (count, bytes) = try first(
            "SELECT count(*), coalesce(sum(length(body)), 0) FROM \(tables.revs)", [],
            { ($0.int64(at: 0), $0.int64(at: 1)) })
        {
            stats.storedBodies += Int(count)
            stats.storedBodyBytes += Int(bytes)
        }
        stats.expiringDocuments = try expiringDocumentCount()
        return stats
    }

    /// Every collection's figures and the database's own (attachments, `_local` documents, pages).
    func databaseStats(path: String) throws -> DatabaseStats {
        var stats = DatabaseStats()
        let current = tables
        defer { tables = current }
        for row in try collectionRows() {
            tables = row.tables
            let c = try collectionStats()
            stats.collections["\(row.scope).\(row.name)"] = c
            stats.total += c
        }
        if let (count, bytes) = try first(
            "SELECT count(*), coalesce(sum(length), 0) FROM attachments", [], { ($0.int64(at: 0), $0.int64(at: 1)) })
        {
            stats.attachments = Int(count)
            stats.attachmentBytes = Int(bytes)
        }
        stats.localDocuments = try first("SELECT count(*) FROM local_docs") { Int($0.int64(at: 0)) } ?? 0
        stats.pageCount = Int(try connection.queryInt64("PRAGMA page_count") ?? 0)
        stats.freePages = Int(try connection.queryInt64("PRAGMA freelist_count") ?? 0)
        stats.pageSize = Int(try connection.queryInt64("PRAGMA page_size") ?? 0)
        stats.fileBytes = Self.fileSize(path)
        stats.walBytes = Self.fileSize(path + "-wal")
        return stats
    }

    /// The size of a file in bytes, 0 when absent.
    static func fileSize(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
    }
}
