import SetteeJSON
import SetteeSQLite

/// An all-documents query: documents in document-id order (raw UTF-8 byte order, as CouchDB's
/// `_all_docs`), optionally within a key range or for listed ids, filtered after loading.
public struct AllDocsQuery: Sendable {
    /// First id (the highest when `descending`).
    public var startKey: String?
    /// Last id (the lowest when `descending`).
    public var endKey: String?
    public var inclusiveEnd = true
    /// Exactly these ids in this order (absent ones are skipped).
    public var keys: [String]?
    public var limit: Int?
    public var skip = 0
    public var descending = false
    /// Include tombstones.
    public var includeDeleted = false
    /// Keeps only documents it returns true for; applied before `skip` and `limit`.
    public var postFilter: (@Sendable (Document) -> Bool)?

    public init(
        startKey: String? = nil, endKey: String? = nil, inclusiveEnd: Bool = true, keys: [String]? = nil,
        limit: Int? = nil, skip: Int = 0, descending: Bool = false, includeDeleted: Bool = false,
        postFilter: (@Sendable (Document) -> Bool)? = nil
    ) {
        self.startKey = startKey
        self.endKey = endKey
        self.inclusiveEnd = inclusiveEnd
        self.keys = keys
        self.limit = limit
        self.skip = skip
        self.descending = descending
        self.includeDeleted = includeDeleted
        self.postFilter = postFilter
    }
}

extension DatabaseCollection {
    /// The winning revisions of this collection's documents matching `query`.
    public func allDocuments(_ query: AllDocsQuery = AllDocsQuery()) throws(LiteError) -> [Document] {
        try read { store in try store.allDocuments(query) }
    }
}

extension Database {
    /// The winning revisions of the default collection's documents matching `query`.
    public func allDocuments(_ query: AllDocsQuery = AllDocsQuery()) throws(LiteError) -> [Document] {
        try defaultCollectionHandle.allDocuments(query)
    }
}

extension Store {
    func allDocuments(_ q: AllDocsQuery) throws -> [Document] {
        var out: [Document] = []
        var toSkip = max(0, q.skip)
        let limit = q.limit ?? Int.max
        if limit <= 0 { return [] }
        // Returns false when enough rows were collected.
        func offer(_ doc: Document) -> Bool {
            if doc.isDeleted && !q.includeDeleted { return true }
            if let f = q.postFilter, !f(doc) { return true }
            if toSkip > 0 {
                toSkip -= 1
                return true
            }
            out.append(doc)
            return out.count < limit
        }
        let select = """
            SELECT d.id, d.winner, d.deleted, d.body FROM \(tables.docs) d
            """
        let decode = { (s: Statement) -> Document? in
            Store.document(id: s.text(at: 0), winner: s.text(at: 1), deleted: s.int64(at: 2) != 0, body: s.blob(at: 3))
        }
        if let keys = q.keys {
            for key in keys {
                let found = try first(select + " WHERE d.id = ?", [.text(key)]) { s in decode(s) }
                guard let found, let doc = found else { continue }
                if !offer(doc) { break }
            }
            return out
        }
        var sql = select + " WHERE 1"
        var binds: [SQLValue] = []
        if !q.includeDeleted { sql += " AND d.deleted = 0" }
        let low = q.descending ? q.endKey : q.startKey
        let high = q.descending ? q.startKey : q.endKey
        if let low {
            sql += q.descending && !q.inclusiveEnd ? " AND d.id > ?" : " AND d.id >= ?"
            binds.append(.text(low))
        }
        if let high {
            sql += !q.descending && !q.inclusiveEnd ? " AND d.id < ?" : " AND d.id <= ?"
            binds.append(.text(high))
        }
        sql += q.descending ? " ORDER BY d.id DESC" : " ORDER BY d.id"
        try each(sql, binds) { s in
            guard let doc = decode(s) else { return true }
            return offer(doc)
        }
        return out
    }
}
