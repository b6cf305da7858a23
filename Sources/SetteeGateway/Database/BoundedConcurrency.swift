import SetteeCore

/// Runs one request's per-document work a few documents at a time: `_bulk_docs` writes, `_revs_diff` loads,
/// `_bulk_get` reads and the `include_docs` bodies of each chunk of `_changes` and `_all_docs` rows. On a cluster
/// bucket each is a network round trip, and one after another they were most of a batch's time; a bounded width keeps
/// what one request holds at once (tasks, documents in flight) named in `Limits`.
enum BoundedConcurrency {
    /// `body(i)` for every `i` in `0..<count`, at most `width` running at once (at least one); the results in index
    /// order. `keepGoing` sees each result as it arrives (on the caller's task, one at a time); once it answers false
    /// no further index is started, the ones running finish, and every index not started is nil.
    static func map<T: Sendable>(
        _ count: Int, width: Int = Limits.gatewayBulkDocsConcurrency, keepGoing: (T) -> Bool = { _ in true },
        _ body: @escaping @Sendable (Int) async -> T
    ) async -> [T?] {
        var results = [T?](repeating: nil, count: count)
        await withTaskGroup(of: (Int, T).self) { group in
            var next = 0
            var stopped = false
            func start() {
                guard !stopped, next < count else { return }
                let i = next
                next += 1
                group.addTask { (i, await body(i)) }
            }
            for _ in 0..<max(1, width) { start() }
            while let (i, value) = await group.next() {
                results[i] = value
                if !keepGoing(value) { stopped = true }
                start()
            }
        }
        return results
    }
}
