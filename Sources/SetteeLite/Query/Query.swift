import SetteeJSON

/// The options of a view query (CouchDB's names and meanings).
public struct QueryOptions: Sendable, Equatable {
    /// First key (the highest one when `descending`).
    public var startKey: JSON?
    /// Last key (the lowest one when `descending`).
    public var endKey: JSON?
    /// Exactly these keys, in this order (overrides the range).
    public var keys: [JSON]?
    public var limit: Int?
    public var skip: Int = 0
    public var descending = false
    /// Whether rows equal to `endKey` are included.
    public var inclusiveEnd = true
    /// Whether a view with a reduce returns reduced rows (false: the mapped rows).
    public var reduce = true
    /// Reduce per distinct key (same as an unlimited `groupLevel`).
    public var group = false
    /// Reduce per the first `groupLevel` elements of array keys (0 with `group` false: one total).
    public var groupLevel = 0
    /// Attach each row's document (mapped rows only).
    public var includeDocs = false

    public init(
        startKey: JSON? = nil, endKey: JSON? = nil, keys: [JSON]? = nil, limit: Int? = nil, skip: Int = 0,
        descending: Bool = false, inclusiveEnd: Bool = true, reduce: Bool = true, group: Bool = false,
        groupLevel: Int = 0, includeDocs: Bool = false
    ) {
        self.startKey = startKey
        self.endKey = endKey
        self.keys = keys
        self.limit = limit
        self.skip = skip
        self.descending = descending
        self.inclusiveEnd = inclusiveEnd
        self.reduce = reduce
        self.group = group
        self.groupLevel = groupLevel
        self.includeDocs = includeDocs
    }
}

/// One row of a view query: a mapped row (with its document id) or a reduced group (id nil).
public struct QueryRow: Sendable, Equatable {
    public var key: JSON
    public var value: JSON
    public var documentID: String?
    /// The document, with `includeDocs`.
    public var document: Document?

    public init(key: JSON, value: JSON, documentID: String? = nil, document: Document? = nil) {
        self.key = key
        self.value = value
        self.documentID = documentID
        self.document = document
    }
}

/// A view query; `run()` answers it now, `live()` keeps answering it as the database changes.
public struct Query: Sendable {
    public let view: View
    public var options: QueryOptions

    /// Updates the index (changes since its last run) and returns the rows.
    public func run() throws(LiteError) -> [QueryRow] {
        let db = view.database
        let def = try view.definition()
        let row = view.collection.row
        let viewID = try db.withWriter(in: row) { store in try store.updateView(def) }
        let options = options
        return try db.read(in: row) { store in
            try store.queryView(viewID: viewID, reduce: def.reduce, options: options)
        }
    }

    /// `run()` on the database's queue.
    public func runAsync() async throws(LiteError) -> [QueryRow] {
        let q = self
        return try await view.database.perform { _ throws(LiteError) in try q.run() }
    }

    /// Yields the rows now and again after every committed change that alters them.
    public func live() -> LiveQuery { LiveQuery(query: self) }
}

/// An `AsyncSequence` of a query's rows: the current rows first, then each time a committed change
/// alters them (changes that leave the rows equal yield nothing). Ends when the database closes or the
/// iterating task is cancelled.
public struct LiveQuery: AsyncSequence, Sendable {
    public typealias Element = [QueryRow]
    public let query: Query

    public func makeAsyncIterator() -> AsyncStream<[QueryRow]>.Iterator {
        stream().makeAsyncIterator()
    }

    /// The rows as an `AsyncStream` (latest rows only are buffered).
    public func stream() -> AsyncStream<[QueryRow]> {
        let changes = query.view.collection.changes  // subscribed before the first run: nothing is missed
        let query = query
        return AsyncStream(bufferingPolicy: .bufferingNewest(1)) { continuation in
            let task = Task {
                var last: [QueryRow]?
                func refresh() async -> Bool {
                    guard let rows = try? await query.runAsync() else { return false }
                    if rows != last {
                        last = rows
                        continuation.yield(rows)
                    }
                    return true
                }
                if await refresh() {
                    for await _ in changes {
                        if Task.isCancelled { break }
                        if await !refresh() { break }
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
