import SetteeCore
import SetteeDocument

/// The winning revision of recently indexed documents, as Sync Gateway's revision cache keeps them: the body's
/// bytes and the revision's history (newest first). Pure value; `GatewayDatabase` keeps it behind a mutex.
///
/// What it is for: a KV client's write replaces the whole item, so the revision it replaces loses its body (and,
/// without shared bucket access, its `_sync` history) the moment the write lands. The import reads both back from
/// here: the parent's body is kept as an ancestor body of the new revision (so a puller that `_changes` told about
/// it can still fetch it), and the history continues instead of starting at the last winner (so a replica that
/// missed an import still finds its revision among the new one's ancestors; issue 67, items 4 and 5).
///
/// Invariants:
/// 1. At most one entry per document: the last version indexed (a newer one replaces it).
/// 2. `entries.count <= maxEntries` and `bytes <= maxBytes` after every `put`; the oldest inserted leave first.
/// 3. `bytes` is the sum of `Entry.cost` over `entries`.
struct RevisionCache: Sendable {
    struct Entry: Sendable, Equatable {
        var rev: RevID
        var deleted: Bool
        /// The revision's body as stored (members, `_attachments` stubs included; no `_id`/`_rev`).
        var body: [UInt8]
        /// `rev` and its ancestors, newest first (`RevTree.history(of:)`), at most `maxHistory` of them.
        var history: [RevID]
        /// `history` reaches the root of the revision's branch: it is the whole history the document's tree holds,
        /// so a read can be answered from the entry (`GatewayDatabase.cachedWinner`) as from the bucket.
        var historyComplete = false
        /// Insertion stamp: the entry `order` names must carry it to be live.
        fileprivate var stamp: UInt64 = 0

        /// Bytes accounted for: the body, each rev id (generation and digest string) and the entry itself.
        var cost: Int { body.count + history.count * 48 + 96 }
    }

    let maxEntries: Int
    let maxBytes: Int
    let maxHistory: Int
    private(set) var bytes = 0
    private var entries: [String: Entry] = [:]
    /// Insertion order, oldest first from `head`; a pair whose stamp no longer matches its entry is stale.
    private var order: [(id: String, stamp: UInt64)] = []
    private var head = 0
    private var nextStamp: UInt64 = 0

    init(
        maxEntries: Int = Limits.gatewayRevisionCacheEntries, maxBytes: Int = Limits.gatewayRevisionCacheBytes,
        maxHistory: Int = Limits.gatewayRevisionCacheReadHistory
    ) {
        self.maxEntries = max(0, maxEntries)
        self.maxBytes = max(0, maxBytes)
        self.maxHistory = max(1, maxHistory)
    }

    var count: Int { entries.count }

    /// The cached winner of `id` when it is `rev`.
    func entry(_ id: String, rev: RevID) -> Entry? {
        guard let e = entries[id], e.rev == rev else { return nil }
        return e
    }

    /// Remembers `rev` as the winner of `id` (replacing what was cached for it). An entry larger than the whole
    /// cache is not kept (and drops an older version of the same document).
    /// `complete`: `history` is the revision's whole history (it ends at a root), kept as such when it fits
    /// `maxHistory`.
    mutating func put(
        _ id: String, rev: RevID, deleted: Bool, body: [UInt8], history: [RevID], complete: Bool = false
    ) {
        remove(id)
        var e = Entry(
            rev: rev, deleted: deleted, body: body, history: Array(history.prefix(maxHistory)),
            historyComplete: complete && history.count <= maxHistory)
        guard maxEntries > 0, e.cost <= maxBytes else { return }
        nextStamp &+= 1
        e.stamp = nextStamp
        entries[id] = e
        bytes += e.cost
        order.append((id, nextStamp))
        while entries.count > maxEntries || bytes > maxBytes, evictOldest() {}
        compactOrder()
    }

    mutating func remove(_ id: String) {
        guard let old = entries.removeValue(forKey: id) else { return }
        bytes -= old.cost
    }

    /// Drops the oldest live entry; false when there is none.
    private mutating func evictOldest() -> Bool {
        while head < order.count {
            let (id, stamp) = order[head]
            head += 1
            if let e = entries[id], e.stamp == stamp {
                remove(id)
                return true
            }
        }
        return false
    }

    /// Forgets the order's consumed and stale pairs once they are most of it, so `order` stays within twice the
    /// live entries (amortised constant time per `put`).
    private mutating func compactOrder() {
        guard order.count > 64, order.count > 2 * entries.count else { return }
        order = order[head...].filter { entries[$0.id]?.stamp == $0.stamp }
        head = 0
    }
}
