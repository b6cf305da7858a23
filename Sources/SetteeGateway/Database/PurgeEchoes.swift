import SetteeCore

/// The change stream's echoes of documents `_purge` removed, told apart from later writes (a pure value: the
/// database asks it about every stream entry of a document under purge).
///
/// `_purge` forgets a document in the index and then deletes its item. The stream may still carry the
/// document's older versions (written before the purge, not yet read) and carries the purge's own deletion:
/// handled as usual, an older version would index the document again and the deletion would then be imported
/// as a tombstone revision (`import_docs`), so the purged document came back. Per key the stream is in write
/// order and a later write has a larger CAS, so every entry up to the purge's deletion (by its CAS) is an echo
/// and every entry after it is news.
struct PurgeEchoes {
    private enum Entry {
        /// The delete is in flight: every entry is an echo; the largest CAS seen so far.
        case deleting(seen: CAS)
        /// Deleted with this CAS: entries at or below it are echoes; the one at it ends the watch.
        case deleted(CAS)
    }

    private var entries: [String: Entry] = [:]
    let bound: Int

    init(bound: Int = Limits.gatewayPurgeEchoesTracked) { self.bound = bound }

    var count: Int { entries.count }

    /// The purge of `id` starts (before the index forgets it). False when `bound` documents are watched already:
    /// the purge goes on unwatched (an echo may then bring the document back, as before this watch existed).
    mutating func begin(_ id: String) -> Bool {
        if entries[id] == nil, entries.count >= bound { return false }
        entries[id] = .deleting(seen: .zero)
        return true
    }

    /// The purge's delete ended: with the deletion's CAS, or nil when nothing was deleted (no echo will come).
    /// True when an entry newer than the deletion was already swallowed while the delete was in flight (another
    /// writer's, just after it): the caller reads the item and handles it as that entry.
    mutating func end(_ id: String, deletedWith cas: CAS?) -> Bool {
        guard case .deleting(let seen) = entries[id] else { return false }
        if let cas, seen < cas {
            entries[id] = .deleted(cas)
            return false
        }
        entries[id] = nil
        return seen > (cas ?? .zero)
    }

    /// Whether a version of `id` with `cas` is an echo of a purge under way or just done (what `admits` would say,
    /// without ending the watch): checked again where a streamed or re-read version is indexed, under this value's
    /// lock, since a purge may begin between an entry's admission and its indexing.
    func isEcho(_ id: String, cas: CAS) -> Bool {
        switch entries[id] {
        case nil: false
        case .deleting: true
        case .deleted(let deletion): cas <= deletion
        }
    }

    /// Whether a stream entry of `id` with `cas` is news to handle (true) or an echo of the purge (false).
    mutating func admits(_ id: String, cas: CAS) -> Bool {
        guard let entry = entries[id] else { return true }
        switch entry {
        case .deleting(let seen):
            entries[id] = .deleting(seen: max(seen, cas))
            return false
        case .deleted(let deletion):
            if cas >= deletion { entries[id] = nil }
            return cas > deletion
        }
    }
}
