import SetteeCore

/// The bytes of rows one view query holds, against `Limits.viewMaxQueryResultBytes`: a query answers a whole page at
/// once (its rows, then its JSON body), so without a bound a query without `limit` over a large index made the node
/// hold every row. One budget is shared by everything a query holds at the same time: the local read
/// (`DesignIndex.query`), on a coordinator each peer's answer as its bytes arrive (`collect`), then the rows it was
/// parsed into, and the merged page (`ViewMerge.merge`). Past the bound the query fails with `ViewError.tooLarge`.
///
/// Thread-safe (one `ByteBudget`): a coordinator's peers answer concurrently. Counts only grow but for `release` of a
/// peer's body once it became rows; an exceeded budget stays exceeded.
public final class ViewQueryBudget: Sendable {
    private let bytes: ByteBudget
    public var limit: Int { bytes.limit }

    /// `limit` comes from `Limits` or the views router's configuration; a negative one counts as 0 (every query
    /// that holds anything fails), not a trap.
    public init(limit: Int = Limits.viewMaxQueryResultBytes) {
        bytes = ByteBudget(limit: limit)
    }

    /// Bytes counted now.
    public var heldBytes: Int { bytes.heldBytes }

    /// Bytes that may still be counted before the bound (0 once it is passed).
    public var remaining: Int { bytes.remaining }

    /// Counts `bytes` as held; false when the total is now past the bound (they stay counted).
    public func admit(_ bytes: Int) -> Bool {
        self.bytes.admit(bytes)
    }

    /// Counts `bytes` as held; throws `tooLarge` when the total is now past the bound.
    public func take(_ bytes: Int) throws(ViewError) {
        guard admit(bytes) else { throw exceeded }
    }

    /// Counts `rows` as held.
    public func take(_ rows: some Sequence<ViewRow>) throws(ViewError) {
        try take(rows.reduce(0) { $0 + $1.heldBytes })
    }

    /// Stops counting `bytes` that are no longer held (a peer's body once parsed into rows).
    public func release(_ bytes: Int) {
        self.bytes.release(bytes)
    }

    /// Stops counting `rows` (rows made and then dropped, as `take(_ rows:)` counted them).
    public func release(_ rows: some Sequence<ViewRow>) {
        release(rows.reduce(0) { $0 + $1.heldBytes })
    }

    /// The error of a query past the bound: what to do instead, in Couchbase's `{"error","reason"}` shape.
    public var exceeded: ViewError {
        .tooLarge(
            "The view query's result is larger than \(limit) bytes; ask for fewer rows with limit and page with "
                + "startkey and startkey_docid")
    }

    /// The chunks of a peer's answer, gathered while each counts against the budget: past the bound it stops reading
    /// and throws `tooLarge` (what it had read is released: the query fails); a failed read releases what it had read
    /// too. The caller releases the body's bytes once it holds its rows instead.
    public func collect<S: AsyncSequence>(_ chunks: S) async throws -> [UInt8] where S.Element == [UInt8] {
        var out: [UInt8] = []
        do {
            for try await chunk in chunks {
                guard admit(chunk.count) else {
                    release(out.count + chunk.count)
                    throw exceeded
                }
                out.append(contentsOf: chunk)
            }
        } catch let error as ViewError {
            throw error
        } catch {
            // The read failed (the peer went away, or its call's deadline cancelled it): what it had read is no
            // longer held.
            release(out.count)
            throw error
        }
        return out
    }
}

extension ViewRow {
    /// Bytes of the row and its byte arrays' storage headers (approximate: what a query's budget counts for it).
    public var heldBytes: Int {
        (id?.count ?? 0) + key.count + value.count + sortKey.count + (doc?.count ?? 0)
            + MemoryLayout<ViewRow>.stride + 5 * 32
    }
}
