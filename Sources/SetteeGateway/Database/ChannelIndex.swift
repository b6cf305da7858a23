import SetteeCore
import SetteeDocument

/// What the index keeps about one document (its latest indexed version).
struct DocEntry: Sendable {
    var seq: UInt64
    var rev: RevID
    var deleted: Bool
    /// Every leaf when there is more than one (conflicts, deleted branches); empty otherwise.
    var leaves: [RevID]
    /// Of `leaves`, those that are not deletions (what `style=all_docs&active_only=true` lists, as Sync Gateway's
    /// changes feed leaves tombstoned branches out under `active_only`); empty when `leaves` is.
    var activeLeaves: [RevID]
    var channels: Set<String>
    var removals: [String: ChannelRemoval]
    var access: [String: [String: UInt64]]
    var roleAccess: [String: [String: UInt64]]
    /// CAS of the bucket item this version was read from or written as (lets the stream skip re-parsing
    /// this gateway's own writes).
    var cas: CAS
    /// Revisions the document's tree keeps (the `/_expvar` figure).
    var revisions: Int
    /// Bodies of revisions other than the winner the tree keeps (conflicting leaves, and ancestors kept for
    /// replicators and deltas), and their bytes: the `old_bodies` figures (ADR 0151).
    var oldBodies: Int
    var oldBodyBytes: Int
    /// Of those, the bodies of ancestors (replaced revisions, `OldBodyRule`): their bytes, and the second the oldest
    /// was replaced (0: one kept without a time, or none), which the sweep of ADR 0156 goes by.
    var ancestorBodyBytes: Int
    var oldestAncestorBodyAt: UInt32
    /// Leaves that are not deletions: the winner, unless deleted, and live conflicting branches (`live_revisions`).
    var liveRevisions: Int
    /// Entries of the document's `_sync.recent_sequences` (the at-rest pass trims an idle document's to its own).
    var recentSequences: Int

    init(_ doc: StoredDocument) {
        let tree = doc.meta.tree
        seq = doc.meta.sequence
        rev = tree.winner!
        deleted = tree.winnerIsDeleted
        let l = tree.leaves
        leaves = l.count > 1 ? l : []
        activeLeaves = l.count > 1 ? l.filter { !tree.isDeleted($0) } : []
        channels = doc.meta.channels
        removals = doc.meta.removals
        access = doc.meta.access
        roleAccess = doc.meta.roleAccess
        cas = doc.cas
        revisions = tree.count
        var bodies = 0
        var bytes = 0
        for r in tree.revisions where r != rev {
            guard let body = tree.body(of: r) else { continue }
            bodies += 1
            bytes += body.count
        }
        oldBodies = bodies
        oldBodyBytes = bytes
        var ancestorBytes = 0
        var oldest = UInt32.max
        for (r, size) in OldBodyRule.ancestorBodies(of: tree) {
            ancestorBytes += size
            oldest = min(oldest, doc.meta.oldBodyTimes[r] ?? 0)
        }
        ancestorBodyBytes = ancestorBytes
        oldestAncestorBodyAt = oldest == .max ? 0 : oldest
        liveRevisions = l.filter { !tree.isDeleted($0) }.count
        recentSequences = doc.meta.recentSequences.count
    }

    /// Takes `other`'s kept-body figures (the same revision state rewritten with fewer old bodies: the sweep, the
    /// attachment compaction) and its CAS.
    mutating func takeBodies(of other: DocEntry) {
        oldBodies = other.oldBodies
        oldBodyBytes = other.oldBodyBytes
        ancestorBodyBytes = other.ancestorBodyBytes
        oldestAncestorBodyAt = other.oldestAncestorBodyAt
        cas = other.cas
    }

    /// Takes what `other`, the same version written back with less kept, changed: fewer old bodies (the sweep, the
    /// attachment compaction, ADR 0156), fewer channel removals or recent sequences (the at-rest pass, ADR 0151), and
    /// its CAS. Only ever fewer: a stale copy of this version holding more does not bring them back. Returns the
    /// channels whose removals went.
    mutating func takeRewrite(of other: DocEntry) -> [String] {
        if oldBodyBytes != other.oldBodyBytes { takeBodies(of: other) }
        if other.recentSequences < recentSequences {
            recentSequences = other.recentSequences
            cas = other.cas
        }
        let pruned = removals.keys.filter { other.removals[$0] == nil }
        guard !pruned.isEmpty, other.removals.allSatisfy({ removals[$0.key] == $0.value }) else { return [] }
        removals = other.removals
        cas = other.cas
        return Array(pruned)
    }

    var allLeaves: [RevID] { leaves.isEmpty ? [rev] : leaves }

    /// The leaves a `style=all_docs` row lists: every leaf, or with `activeOnly` those not deleted (a deleted
    /// winner's row is skipped under `activeOnly` before this is asked).
    func listedLeaves(activeOnly: Bool) -> [RevID] {
        guard activeOnly, !leaves.isEmpty else { return allLeaves }
        return activeLeaves.isEmpty ? [rev] : activeLeaves
    }
}

/// A sequence-ordered log of (sequence, document id). A document's older entries stay behind as
/// garbage (skipped on read: an entry is live when the document's state says so) until a compaction.
struct SeqLog: Sendable {
    private(set) var seqs: [UInt64] = []
    private(set) var ids: [String] = []
    var garbage = 0

    var count: Int { seqs.count }
    var last: UInt64 { seqs.last ?? 0 }

    mutating func insert(_ seq: UInt64, _ id: String) {
        if seqs.isEmpty || seqs[seqs.count - 1] < seq {
            seqs.append(seq)
            ids.append(id)
            return
        }
        let i = firstIndex(after: seq)
        if i > 0 && seqs[i - 1] == seq && ids[i - 1] == id { return }
        seqs.insert(seq, at: i)
        ids.insert(id, at: i)
    }

    /// Index of the first entry with a sequence above `seq`.
    func firstIndex(after seq: UInt64) -> Int {
        seqs.partitioningIndex { $0 > seq }
    }

    mutating func compact(keeping live: (UInt64, String) -> Bool) {
        var s: [UInt64] = []
        var d: [String] = []
        s.reserveCapacity(seqs.count - garbage)
        d.reserveCapacity(seqs.count - garbage)
        for i in seqs.indices where live(seqs[i], ids[i]) {
            s.append(seqs[i])
            d.append(ids[i])
        }
        seqs = s
        ids = d
        garbage = 0
    }
}

/// What one index update changed, for waking waiters.
/// What a document grants: channels per principal (`jane`, `role:editor`) and roles per user, each with the sequence
/// of the grant (the sync function's `access()` and `role()`).
struct DocumentGrants: Sendable, Equatable {
    var access: [String: [String: UInt64]]
    var roleAccess: [String: [String: UInt64]]
}

struct IndexChange: Sendable {
    var channels: Set<String> = []
    /// Principals (`jane`, `role:editor`) whose grants from documents changed.
    var principals: Set<String> = []
    var stableMoved = false
    /// A document changed (wakes readers of every channel: the admin, `*` users).
    var document = false
}

/// The in-memory channel index (docs/internals/gateway.md): per channel a sequence-ordered log, one log
/// of every document, the documents' latest state, the grants documents make, the principals, and the
/// sequence tracker. Pure state; `GatewayDatabase` keeps it behind a mutex.
struct ChannelIndex: Sendable {
    var docs: [String: DocEntry] = [:]
    /// `docs`' ids in id order, for `_all_docs` (ADR 0093).
    var ids = IDOrder()
    var all = SeqLog()
    var logs: [String: SeqLog] = [:]
    var sequences = SequenceTracker()
    /// Principal -> granting document -> channel -> sequence.
    var docAccess: [String: [String: [String: UInt64]]] = [:]
    /// User -> granting document -> role -> sequence.
    var docRoles: [String: [String: [String: UInt64]]] = [:]
    /// Grants made by the documents of the database's other keyspaces (ADR 0142), by `scope.collection/docid`: they
    /// apply in this keyspace too, as Sync Gateway's grants apply in every collection of the database. Kept in
    /// `docAccess`/`docRoles` under the same qualified id.
    var otherKeyspaceGrants: [String: DocumentGrants] = [:]
    var users: [String: PrincipalRecord] = [:]
    var roles: [String: PrincipalRecord] = [:]
    /// Attachment blobs seen in the bucket, by key, with their bytes (for compaction and the `/_expvar` figures).
    var attachmentBytes: [String: Int] = [:]
    /// Session items (`_sync:session:`) the bucket holds: the `sessions` figure (ADR 0151).
    var sessionKeys = Set<String>()
    /// `_local` document items (`_sync:local:`, replicators' checkpoints) the bucket holds: the `checkpoints` figure.
    var localKeys = Set<String>()
    /// Items this gateway wrote (documents, users, roles; by item key) and indexed before its change stream
    /// delivered them, with the CAS of the write: a history branched under the stream loses only these (ADR 0098).
    /// An entry leaves when the stream delivers the key at that CAS or later, or when a recheck has read the item.
    var aheadOfStream: [String: CAS] = [:]
    /// A document's last stable version while its newer one is above the stable sequence (issue 67): feeds stop at
    /// the stable sequence, so without it a pull in that window would see the document at neither sequence. At most
    /// one per document; it goes once the document's current sequence is stable (`expireShadows`), or with the
    /// document (`remove`).
    var shadows: [String: DocEntry] = [:]
    /// No shadow expires before the stable sequence reaches this (the lowest current sequence of a shadowed document
    /// when last computed, or lower).
    var shadowsExpireAt = UInt64.max

    /// The stream delivered `key` at `cas`: a write of this gateway at or before it is no longer ahead of the stream.
    mutating func streamed(_ key: String, cas: CAS) {
        guard !aheadOfStream.isEmpty, let own = aheadOfStream[key], cas >= own else { return }
        aheadOfStream[key] = nil
    }

    func isLive(channel: String, seq: UInt64, id: String) -> Bool {
        guard let d = docs[id] else { return false }
        if Self.shows(d, channel: channel, seq: seq) { return true }
        guard let s = shadows[id] else { return false }
        return Self.shows(s, channel: channel, seq: seq)
    }

    /// Whether `d` has a row in `channel`'s log at `seq` (its sequence in a channel it is in, or its removal from it).
    static func shows(_ d: DocEntry, channel: String, seq: UInt64) -> Bool {
        if d.channels.contains(channel) { return d.seq == seq }
        return d.removals[channel]?.seq == seq
    }

    /// The version of `id` a feed stopping at `stable` shows: the indexed one when its sequence is at or below
    /// `stable`, else the document's last stable version (its shadow), if any.
    func shownVersion(_ id: String, stable: UInt64) -> DocEntry? {
        guard let d = docs[id] else { return nil }
        if d.seq <= stable { return d }
        return shadows[id]
    }

    /// Drops the shadows of documents whose current sequence is now stable.
    private mutating func expireShadows() {
        let stable = sequences.stable
        guard stable >= shadowsExpireAt else { return }
        var lowest = UInt64.max
        for id in Array(shadows.keys) {
            if let d = docs[id], d.seq > stable { lowest = min(lowest, d.seq) } else { shadows[id] = nil }
        }
        shadowsExpireAt = lowest
    }

    /// Indexes a document version; nil when an equal or newer version is already indexed.
    mutating func apply(_ doc: StoredDocument) -> IndexChange? {
        let entry = DocEntry(doc)
        var change = IndexChange()
        change.stableMoved = seeSequences(doc.meta.recentSequences + [entry.seq])
        let old = docs[doc.id]
        if let old, old.seq == entry.seq, old.rev == entry.rev {
            // The same version written back with less kept (`takeRewrite`): the channels' rows of pruned removals go.
            for ch in docs[doc.id]?.takeRewrite(of: entry) ?? [] { logs[ch]?.garbage += 1 }
        }
        if let old, old.seq >= entry.seq { return change.stableMoved ? change : nil }
        change.document = true
        docs[doc.id] = entry
        if entry.seq <= sequences.stable {
            shadows[doc.id] = nil
        } else if let old, old.seq <= sequences.stable {
            // Feeds go on showing `old` until `entry` is stable (an unstable `old` leaves the shadow it has).
            shadows[doc.id] = old
        }
        if shadows[doc.id] != nil { shadowsExpireAt = min(shadowsExpireAt, entry.seq) }
        if old == nil { ids.added(doc.id) }
        if old != nil { all.garbage += 1 }
        all.insert(entry.seq, doc.id)
        for ch in entry.channels {
            if old?.channels.contains(ch) == true { logs[ch, default: SeqLog()].garbage += 1 }
            logs[ch, default: SeqLog()].insert(entry.seq, doc.id)
            change.channels.insert(ch)
        }
        for (ch, r) in entry.removals where !entry.channels.contains(ch) && old?.removals[ch]?.seq != r.seq {
            if old?.channels.contains(ch) == true || old?.removals[ch] != nil {
                logs[ch, default: SeqLog()].garbage += 1
            }
            logs[ch, default: SeqLog()].insert(r.seq, doc.id)
            change.channels.insert(ch)
        }
        if let old {
            for ch in old.channels where !entry.channels.contains(ch) { change.channels.insert(ch) }
        }
        if old?.access != entry.access || old?.roleAccess != entry.roleAccess {
            change.principals = updateGrants(id: doc.id, old: old, new: entry)
        }
        compactIfNeeded(changed: change.channels)
        return change
    }

    /// Indexes a document version as the bucket holds it now, also when it is older than the indexed one: the newer
    /// version was lost with a vBucket's history (a failover to a copy without it; ADR 0096). Otherwise `apply`.
    mutating func reindex(_ doc: StoredDocument) -> IndexChange? {
        guard let old = docs[doc.id], old.seq > DocEntry(doc).seq else { return apply(doc) }
        var change = remove(doc.id) ?? IndexChange()
        if let added = apply(doc) {
            change.channels.formUnion(added.channels)
            change.principals.formUnion(added.principals)
            change.stableMoved = change.stableMoved || added.stableMoved
            change.document = true
        }
        return change
    }

    /// Forgets a document (purged, or deleted by a KV client).
    mutating func remove(_ id: String) -> IndexChange? {
        guard let old = docs.removeValue(forKey: id) else { return nil }
        shadows[id] = nil
        let live = docs
        ids.removed { live[$0] != nil }
        var change = IndexChange()
        change.document = true
        all.garbage += 1
        for ch in old.channels.union(old.removals.keys) {
            logs[ch]?.garbage += 1
            change.channels.insert(ch)
        }
        change.principals = updateGrants(id: id, old: old, new: nil)
        compactIfNeeded(changed: change.channels)
        return change
    }

    private mutating func updateGrants(id: String, old: DocEntry?, new: DocEntry?) -> Set<String> {
        updateGrants(
            id: id, old: old.map { DocumentGrants(access: $0.access, roleAccess: $0.roleAccess) },
            new: new.map { DocumentGrants(access: $0.access, roleAccess: $0.roleAccess) })
    }

    /// Installs (nil: removes) the grants of another keyspace's document, `id` qualified by its keyspace; the
    /// principals whose grants changed.
    mutating func setOtherKeyspaceGrants(id: String, _ grants: DocumentGrants?) -> Set<String> {
        let old = otherKeyspaceGrants[id]
        guard old != grants else { return [] }
        otherKeyspaceGrants[id] = grants
        return updateGrants(id: id, old: old, new: grants)
    }

    private mutating func updateGrants(id: String, old: DocumentGrants?, new: DocumentGrants?) -> Set<String> {
        var touched = Set<String>()
        for p in (old?.access ?? [:]).keys { docAccess[p]?[id] = nil; touched.insert(p) }
        for (p, chans) in new?.access ?? [:] {
            docAccess[p, default: [:]][id] = chans
            touched.insert(p)
        }
        for u in (old?.roleAccess ?? [:]).keys { docRoles[u]?[id] = nil; touched.insert(u) }
        for (u, r) in new?.roleAccess ?? [:] {
            docRoles[u, default: [:]][id] = r
            touched.insert(u)
        }
        for p in touched {
            if docAccess[p]?.isEmpty == true { docAccess[p] = nil }
            if docRoles[p]?.isEmpty == true { docRoles[p] = nil }
        }
        // Changing who holds "role:x" changes every user of role x.
        return touched
    }

    private mutating func compactIfNeeded(changed: Set<String>) {
        if all.garbage > 1024 && all.garbage * 2 > all.count {
            let docs = self.docs
            let shadows = self.shadows
            all.compact { seq, id in docs[id]?.seq == seq || shadows[id]?.seq == seq }
        }
        for ch in changed {
            guard let log = logs[ch], log.garbage > 64, log.garbage * 2 > log.count else { continue }
            var l = log
            l.compact { seq, id in self.isLive(channel: ch, seq: seq, id: id) }
            logs[ch] = l.count == 0 ? nil : l
        }
    }

    /// Records sequences as seen; true when this closed a gap (the stable sequence moved past
    /// sequences other than these, which may make older writes visible to anyone).
    mutating func seeSequences(_ seqs: [UInt64]) -> Bool {
        let hadGap = sequences.hasGap
        let before = sequences.stable
        for s in seqs { sequences.see(s) }
        if sequences.stable > before { expireShadows() }
        return hadGap && sequences.stable > before
    }

    /// Abandons the first missing sequence (the gap timer's wait ran out, `skippedSequenceWaitSeconds`): the stable
    /// sequence moves past it, and the shadows of documents whose sequence is now stable go. True when it moved.
    mutating func abandonFirstGap() -> Bool {
        let moved = sequences.abandonFirstGap()
        if moved { expireShadows() }
        return moved
    }

    // MARK: principals

    /// Channels a user may read, each with the sequence it became visible at (`!` at 1).
    func userChannels(_ name: String) -> [String: UInt64] {
        var out: [String: UInt64] = ["!": 1]
        func merge(_ ch: String, _ seq: UInt64) {
            if let e = out[ch] { out[ch] = min(e, seq) } else { out[ch] = seq }
        }
        if let u = users[name] {
            for (c, s) in u.adminChannels { merge(c, s) }
        }
        for (_, chans) in docAccess[name] ?? [:] { for (c, s) in chans { merge(c, s) } }
        for (role, rseq) in userRoles(name) {
            var chans: [String: UInt64] = roles[role]?.adminChannels ?? [:]
            for (_, g) in docAccess["role:" + role] ?? [:] {
                for (c, s) in g { chans[c] = min(chans[c] ?? s, s) }
            }
            for (c, s) in chans { merge(c, max(s, rseq)) }
        }
        return out
    }

    /// Roles a user has (admin-granted and granted by documents' `role()`), with their grant sequences.
    func userRoles(_ name: String) -> [String: UInt64] {
        var out: [String: UInt64] = users[name]?.adminRoles ?? [:]
        for (_, r) in docRoles[name] ?? [:] {
            for (role, s) in r { out[role] = min(out[role] ?? s, s) }
        }
        return out
    }

    /// Channels a role grants (admin channels plus documents' `access("role:x", ...)`).
    func roleChannels(_ name: String) -> [String: UInt64] {
        var out = roles[name]?.adminChannels ?? [:]
        for (_, g) in docAccess["role:" + name] ?? [:] {
            for (c, s) in g { out[c] = min(out[c] ?? s, s) }
        }
        return out
    }

    /// Users holding `role` (for waking their feeds when the role changes).
    func usersWithRole(_ role: String) -> Set<String> {
        var out = Set<String>()
        for (n, u) in users where u.adminRoles[role] != nil { out.insert(n) }
        for (n, d) in docRoles where d.values.contains(where: { $0[role] != nil }) { out.insert(n) }
        return out
    }
}

/// Whether a reader with `userChannels` may see a document in `docChannels`: `*` sees everything; a
/// document in no channel is visible only to `*` readers.
func canSee(userChannels: Set<String>, docChannels: Set<String>) -> Bool {
    if userChannels.contains("*") { return true }
    if docChannels.isEmpty { return false }
    return !userChannels.isDisjoint(with: docChannels)
}
