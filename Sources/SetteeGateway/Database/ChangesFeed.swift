import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeSync
import Synchronization

/// One row before it is rendered: where it sorts, what it says.
struct ChangeCandidate: Sendable {
    enum Kind: Sendable {
        case current
        case removal(channels: [String], rev: RevID, deleted: Bool)
        case user
    }
    /// Sort order: a backfill row `T:S` sorts as `(T, 0, S)` (just before T), a plain `S` as `(S, 1, 0)`.
    var key: (UInt64, UInt8, UInt64)
    var seq: ChangesSince
    var id: String
    var kind: Kind

    static func < (a: ChangeCandidate, b: ChangeCandidate) -> Bool {
        if a.key != b.key { return a.key < b.key }
        return a.id < b.id
    }
}

extension ChannelIndex {
    /// The rows of one `_changes` request, merged from the reader's channel logs, and whether more rows follow
    /// them (`truncated`: cut at the query's limit). `grants` nil: the admin (every document). Rows stop at the
    /// stable sequence, or at `through` when that is lower (a paged answer stops where its first page did).
    ///
    /// Cost: each source (the log of all documents, a channel's log above `since`, a backfill of a channel granted
    /// after `since`) is walked in its order and left once it gave `limit + 1` rows: each of those is a different
    /// document that already has a row sorting no later than anything further in that source, so nothing further
    /// can be among the first `limit` rows. A page of `limit` rows costs about `limit` entries per source.
    func changeCandidates(
        _ q: ChangesQuery, grants: [String: UInt64]?, userName: String?, through: UInt64? = nil
    ) -> (rows: [ChangeCandidate], lastSeq: ChangesSince, stable: UInt64, truncated: Bool) {
        let stable = min(sequences.stable, through ?? .max)
        let since = q.since.plainSince
        let backfillTop = min(since, q.backfillThrough ?? since)
        var found: [String: ChangeCandidate] = [:]
        let limit = q.limit > 0 ? min(q.limit, Limits.gatewayMaxRows) : Limits.gatewayMaxRows

        /// Adds `c` unless the `_doc_ids` filter drops it; true when it counts towards its source's `limit + 1`.
        @discardableResult
        func consider(_ c: ChangeCandidate) -> Bool {
            if let docIDs = q.docIDs, !docIDs.contains(c.id) { return false }
            if let e = found[c.id] {
                if case .removal(let ech, let erev, let edel) = e.kind, case .removal(let nch, _, _) = c.kind,
                    e.key == c.key
                {
                    found[c.id]!.kind = .removal(channels: Array(Set(ech + nch)).sorted(), rev: erev, deleted: edel)
                    return true
                }
                if !(c < e) { return true }
            }
            found[c.id] = c
            return true
        }

        let star = grants?["*"]
        let readerChannels = grants.map { Set($0.keys) }
        if grants == nil || star != nil, q.channels == nil || q.channels!.contains("*") {
            // Everything: the log of all documents (a `*` grant made after `since` backfills it too).
            var taken = 0
            var i = all.firstIndex(after: since)
            while i < all.count {
                let seq = all.seqs[i]
                if seq > stable { break }
                let id = all.ids[i]
                i += 1
                guard let d = shownVersion(id, stable: stable), d.seq == seq else { continue }
                if q.activeOnly && d.deleted { continue }
                if consider(ChangeCandidate(key: (seq, 1, 0), seq: ChangesSince(seq), id: id, kind: .current)) {
                    taken += 1
                    if taken > limit { break }
                }
            }
            if let g = star, g > since, g <= stable {
                let from = q.since.triggeredBy == g ? q.since.seq : 0
                var j = all.firstIndex(after: from)
                var backfilled = 0
                while j < all.count, all.seqs[j] <= backfillTop, backfilled <= limit {
                    let seq = all.seqs[j]
                    let id = all.ids[j]
                    j += 1
                    guard let d = shownVersion(id, stable: stable), d.seq == seq else { continue }
                    if q.activeOnly && d.deleted { continue }
                    if consider(
                        ChangeCandidate(
                            key: (g, 0, seq), seq: ChangesSince(seq, triggeredBy: g), id: id, kind: .current))
                    {
                        backfilled += 1
                    }
                }
            }
        } else {
            var chans: [String: UInt64]
            if let grants {
                chans = grants
                if let filter = q.channels {
                    chans = chans.filter { filter.contains($0.key) }
                    if let star { for c in filter where chans[c] == nil { chans[c] = star } }
                }
            } else {
                chans = [:]
                for c in q.channels ?? [] { chans[c] = 0 }
            }
            let visible = readerChannels ?? Set(chans.keys)
            for (ch, g) in chans where g <= stable {
                guard let log = logs[ch] else { continue }
                var i = log.firstIndex(after: since)
                var taken = 0
                while i < log.count, taken <= limit {
                    let seq = log.seqs[i]
                    if seq > stable { break }
                    let id = log.ids[i]
                    i += 1
                    guard let d = shownVersion(id, stable: stable) else { continue }
                    if d.channels.contains(ch) {
                        guard d.seq == seq else { continue }
                        if q.activeOnly && d.deleted { continue }
                        if consider(
                            ChangeCandidate(key: (seq, 1, 0), seq: ChangesSince(seq), id: id, kind: .current))
                        {
                            taken += 1
                        }
                    } else if let r = d.removals[ch], r.seq == seq {
                        // Still visible through another channel: that channel's row says so.
                        if q.activeOnly || !d.channels.isDisjoint(with: visible) { continue }
                        if consider(
                            ChangeCandidate(
                                key: (seq, 1, 0), seq: ChangesSince(seq), id: id,
                                kind: .removal(channels: [ch], rev: r.rev, deleted: r.deleted)))
                        {
                            taken += 1
                        }
                    }
                }
                // A channel granted after `since`: its whole history, as `grant:seq` rows.
                if g > since && g > 0 {
                    let from = q.since.triggeredBy == g ? q.since.seq : 0
                    var j = log.firstIndex(after: from)
                    var backfilled = 0
                    while j < log.count, log.seqs[j] <= backfillTop, backfilled <= limit {
                        let seq = log.seqs[j]
                        let id = log.ids[j]
                        j += 1
                        guard let d = shownVersion(id, stable: stable), d.seq == seq, d.channels.contains(ch) else {
                            continue
                        }
                        if q.activeOnly && d.deleted { continue }
                        if consider(
                            ChangeCandidate(
                                key: (g, 0, seq), seq: ChangesSince(seq, triggeredBy: g), id: id, kind: .current))
                        {
                            backfilled += 1
                        }
                    }
                }
            }
        }
        if let userName, let u = users[userName], u.sequence > since, u.sequence <= stable, q.docIDs == nil {
            let id = "_user/" + (userName.isEmpty ? "GUEST" : userName)
            found[id] = ChangeCandidate(key: (u.sequence, 1, 0), seq: ChangesSince(u.sequence), id: id, kind: .user)
        }
        var rows = Array(found.values)
        rows.sort(by: <)
        if rows.count > limit {
            rows.removeLast(rows.count - limit)
            return (rows, rows[rows.count - 1].seq, stable, true)
        }
        let last = since > stable ? q.since : ChangesSince(stable)
        return (rows, last, stable, false)
    }
}

extension GatewayDatabase {
    /// The channels a reader may see, each with the sequence it became visible at; nil for the admin.
    /// Computed from the bucket's current principals and grants (never from a stale session).
    func readerGrants(_ user: UserContext?) -> [String: UInt64]? {
        guard let user, let name = user.name else { return nil }
        return index.withLock { idx in
            if idx.users[name] != nil || name.isEmpty { return idx.userChannels(name) }
            var g: [String: UInt64] = ["!": 1]
            for c in user.channels { g[c] = 1 }
            return g
        }
    }

    func readerChannels(_ user: UserContext?) -> Set<String>? {
        readerGrants(user).map { Set($0.keys) }
    }

    /// `_changes` with every `include_docs` body read (one page held whole; the HTTP feeds write `changeRows` a chunk
    /// at a time instead, `forEachChunk`).
    public func changes(_ q: ChangesQuery, user: UserContext?) async throws(GatewayError) -> ChangesPage {
        var page = try await changeRows(q, user: user)
        guard !page.bodyReads.isEmpty else { return page }
        var rows: [ChangeRow] = []
        rows.reserveCapacity(page.rows.count)
        await forEachChunk(of: page) { rows.append(contentsOf: $0) }
        page.rows = rows
        page.bodyReads = []
        return page
    }

    /// The page's rows a chunk at a time (`inChunks`), each row with its `include_docs` body when it needs one (a
    /// chunk without bodies to place is the page's own storage, not a copy).
    func forEachChunk(of page: ChangesPage, _ body: (ArraySlice<ChangeRow>) async throws -> Void) async rethrows {
        try await inChunks(rows: page.rows.count, reads: page.bodyReads, revs: false) { range, reads, docs in
            var rows = page.rows[range]
            for (read, doc) in zip(reads, docs) { rows[read.row].doc = doc }
            try await body(rows)
        }
    }

    /// `_changes` (normal feed; longpoll and continuous call `waitForChange` between pages), the current revisions'
    /// `include_docs` bodies not read yet (`bodyReads`).
    func changeRows(
        _ q: ChangesQuery, user: UserContext?, through: UInt64? = nil
    ) async throws(GatewayError) -> ChangesPage {
        guard isOnline else { throw .unavailable("DB is currently under maintenance") }
        let grants = readerGrants(user)
        let name = user?.name
        // Read before the rows: the horizon the page's tokens may carry (ADR 0145 amendment) predates their view.
        let horizon = purgeHorizon.withLock { $0 }
        // The versions the rows show, read with them: a version above the page's stable sequence shows its document's
        // last stable one (`ChannelIndex.shownVersion`), which a later write could otherwise drop between the two reads.
        let (candidates, last, stable, truncated, entries) = index.withLock { idx in
            let c = idx.changeCandidates(q, grants: grants, userName: name, through: through)
            return (c.rows, c.lastSeq, c.stable, c.truncated, c.rows.map { idx.shownVersion($0.id, stable: c.stable) })
        }
        var rows: [ChangeRow] = []
        rows.reserveCapacity(candidates.count)
        /// Rows whose `doc` is the current revision's body, read when the rows are written.
        var reads: [BodyRead] = []
        for (c, entry) in zip(candidates, entries) {
            switch c.kind {
            case .user:
                rows.append(ChangeRow(seq: c.seq, id: c.id, changes: []))
            case .removal(let channels, let rev, let deleted):
                var row = ChangeRow(seq: c.seq, id: c.id, changes: [rev], deleted: deleted, removed: channels)
                if q.includeDocs {
                    row.doc = .object([
                        ("_id", .string(c.id)), ("_rev", .string(rev.description)), ("_removed", .bool(true)),
                    ])
                }
                rows.append(row)
            case .current:
                guard let d = entry else { continue }
                var row = ChangeRow(
                    seq: c.seq, id: c.id, changes: q.styleAllDocs ? d.listedLeaves(activeOnly: q.activeOnly) : [d.rev],
                    deleted: d.deleted)
                if q.includeDocs {
                    if d.deleted {
                        row.doc = .object([
                            ("_id", .string(c.id)), ("_rev", .string(d.rev.description)), ("_deleted", .bool(true)),
                        ])
                    } else {
                        reads.append(BodyRead(row: rows.count, id: c.id, rev: d.rev))
                    }
                }
                rows.append(row)
            }
        }
        let began = horizon.pullHorizon(startingFrom: q.since, stable: stable)
        if began != 0 {
            for i in rows.indices { rows[i].seq = rows[i].seq.marked(pullHorizon: began) }
        }
        var page = ChangesPage(rows: rows, lastSeq: began != 0 ? last.marked(pullHorizon: began) : last)
        page.bodyReads = reads
        page.stable = stable
        page.truncated = truncated
        return page
    }

    /// Whether the reader has anything after `since` (a cheap `_changes` with limit 1).
    func hasChanges(after since: ChangesSince, user: UserContext?, channels: Set<String>?) -> Bool {
        let grants = readerGrants(user)
        let name = user?.name
        let q = ChangesQuery(since: since, limit: 1, channels: channels)
        return index.withLock { !$0.changeCandidates(q, grants: grants, userName: name).rows.isEmpty }
    }

    /// Returns true when something the reader may see (or their access) changed after `since`, false at
    /// the deadline, on cancellation or when the database goes offline. Woken by writes and grants, never
    /// by polling.
    public func waitForChange(
        after since: ChangesSince, user: UserContext?, deadline: ContinuousClock.Instant
    ) async -> Bool {
        await waitForChange(after: since, user: user, channels: nil, deadline: deadline)
    }

    /// `waitForChange` for a feed filtered to `channels` (`filter=sync_gateway/bychannel`).
    public func waitForChange(
        after since: ChangesSince, user: UserContext?, channels: Set<String>?, deadline: ContinuousClock.Instant
    ) async -> Bool {
        while isOnline && !Task.isCancelled {
            let grants = readerGrants(user)
            let wakeOn: Set<String>? = grants.flatMap { $0["*"] != nil ? nil : Set($0.keys) }
            let id = register(
                user: user?.name, channels: channels.map { c in wakeOn.map { $0.intersection(c) } ?? c } ?? wakeOn)
            if hasChanges(after: since, user: user, channels: channels) {
                unregister(id)
                return true
            }
            if ContinuousClock.now >= deadline {
                unregister(id)
                return false
            }
            let timer = Task { [weak self] in
                try? await Task.sleep(until: deadline, clock: .continuous)
                self?.unregister(id)
            }
            await withTaskCancellationHandler {
                await suspend(id)
            } onCancel: { [weak self] in
                self?.unregister(id)
            }
            timer.cancel()
            unregister(id)
            if ContinuousClock.now >= deadline { return hasChanges(after: since, user: user, channels: channels) }
        }
        return false
    }
}
