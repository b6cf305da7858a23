import SetteeCore

/// Reads one `_changes` answer a page of at most `pageRows` (`Limits.gatewayChangesPageRows`) rows at a time, so an
/// answer never holds more than a page of rows and one walk of the index never holds its lock for more than a page's.
/// Each page goes on from the last one's `last_seq` (a compound `grant:seq` included), as a client paging with
/// `limit` does, with two differences that make the pages one answer:
/// - every page stops at the stable sequence the first page saw, so the answer ends while writes go on (a document
///   written again meanwhile moves above it and comes in the next answer, from this one's `last_seq`), and a channel
///   granted meanwhile is left to the next answer, which backfills it whole;
/// - a backfill (a channel granted after the answer's `since`) reaches only as high as that `since`: what lies above
///   it came as plain rows, on this page or an earlier one.
/// Every answer stops at the query's `limit`, or at `Limits.gatewayMaxRows` without one.
///
/// A value owned by one feed: normal and longpoll answers are one pager; continuous and WebSocket feeds read a pager
/// after every wait.
struct ChangesPager: Sendable {
    private var query: ChangesQuery
    private var remaining: Int
    private var through: UInt64?
    private let pageRows: Int
    /// No page follows (the last one was not cut, or the limit is reached).
    private(set) var done = false
    /// The answer's `last_seq` so far: the last page's.
    private(set) var lastSeq: ChangesSince

    init(_ query: ChangesQuery, pageRows: Int = Limits.gatewayChangesPageRows) {
        var q = query
        q.backfillThrough = q.backfillThrough ?? q.since.plainSince
        self.query = q
        remaining = query.limit > 0 ? min(query.limit, Limits.gatewayMaxRows) : Limits.gatewayMaxRows
        self.pageRows = max(1, pageRows)
        lastSeq = query.since
    }

    /// A pager with nothing to read: its answer is no rows and `lastSeq` (a longpoll that timed out).
    init(finishedAt lastSeq: ChangesSince) {
        query = ChangesQuery(since: lastSeq)
        remaining = 0
        pageRows = 1
        done = true
        self.lastSeq = lastSeq
    }

    /// The next page (empty once `done`).
    mutating func next(_ db: GatewayDatabase, user: UserContext?) async throws(GatewayError) -> ChangesPage {
        guard !done else { return ChangesPage(rows: [], lastSeq: lastSeq) }
        // Between pages, the other tasks of this thread go first: a reader whose writes never wait (a fast client)
        // would otherwise keep its thread for the whole answer, and requests queued behind it (a PUT) with it.
        if through != nil { await Task.yield() }
        var q = query
        q.limit = min(remaining, pageRows)
        let page = try await db.changeRows(q, user: user, through: through)
        if through == nil { through = page.stable }
        remaining -= page.rows.count
        lastSeq = page.lastSeq
        query.since = page.lastSeq
        done = !page.truncated || remaining <= 0
        return page
    }

    /// Hands `first` (a page this pager already read; nil: none), then every page still to read, to `body` a chunk
    /// at a time with its `include_docs` bodies (`GatewayDatabase.forEachChunk`); true when any row was handed. A
    /// page that cannot be read throws its `GatewayError`; `body`'s errors pass through as they are, so a feed can
    /// tell the database's refusal from its client's going away.
    mutating func forEachChunk(
        after first: ChangesPage? = nil, _ db: GatewayDatabase, user: UserContext?,
        _ body: (ArraySlice<ChangeRow>) async throws -> Void
    ) async throws -> Bool {
        var page: ChangesPage
        if let first { page = first } else { page = try await next(db, user: user) }
        var any = false
        while true {
            try await db.forEachChunk(of: page, body)
            any = any || !page.rows.isEmpty
            if done { return any }
            page = try await next(db, user: user)
        }
    }
}
