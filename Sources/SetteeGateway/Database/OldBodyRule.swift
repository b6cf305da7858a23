import SetteeCore
import SetteeDocument

/// Which replaced revision bodies a document keeps, by age (ADR 0156; issue 71 item 4).
///
/// A revision's body stays in the document's tree (`_sync.history.bodies`) after a newer revision replaces it, so a
/// replicator still fetching it, a `GET ?rev=`, and a delta (`deltaSrc`) can use it. Sync Gateway keeps such a body
/// as an item of its own with a bucket TTL: `old_rev_expiry_seconds` (default 300 s), or with delta sync on
/// `delta_sync.rev_max_age_seconds` (db/crud.go `backupRevisionJSON`). Here the tree keeps, per replaced body, the
/// second it was replaced (`_sync.old_body_at`, `SyncMeta.oldBodyTimes`), and a body older than the window goes:
/// at the document's next write, or by the database's sweep (`GatewayDatabase.sweepOldBodies`) for a document not
/// written again. A read of a revision whose body went answers 404 `missing`, and a delta against it is not made
/// (the revision is sent whole), as Sync Gateway answers once the backup item expired.
///
/// Only ancestors' bodies (revisions no longer leaves) age: a leaf's body, the winner's or a conflicting branch's,
/// is the revision itself. The per-document count and byte bounds (`RevTree.dropAncestorBodies`) still apply.
///
/// Invariants after `apply`:
/// 1. `times` names exactly the ancestors of `tree` that keep a body.
/// 2. No kept ancestor body's time is `window` or more seconds before `now` (when `window` > 0).
struct OldBodyRule: Sendable, Equatable {
    /// Seconds a replaced body is kept; 0 keeps it without an age bound (Sync Gateway writes its backup with a TTL of
    /// 0 then: no expiry), leaving only the count and byte bounds.
    var windowSeconds: Int

    /// The window a database applies: `rev_max_age_seconds` while delta sync is active (deltas need their sources;
    /// Sync Gateway backs up old bodies with that TTL then), else `old_rev_expiry_seconds`.
    static func window(oldRevExpirySeconds: Int, deltaSync: DeltaSyncConfig) -> Int {
        deltaSync.active ? deltaSync.revMaxAgeSeconds : oldRevExpirySeconds
    }

    /// Seconds between two sweeps for this window: a tenth of it (`Limits.gatewayOldBodySweepsPerWindow`), 1 s …
    /// `Limits.gatewayOldBodySweepSeconds`; a window of 0 (no age bound) sweeps for the byte bound alone, at the
    /// longest wait. A body then lives its window and at most a tenth more (at 60 s, up to 66 s), so the bodies kept
    /// at any instant are the last window's within 10 %: a sweep once a window let them live one to two windows,
    /// and the kept population swung by half with the sweep's phase (issue 71's long run).
    var sweepInterval: Double {
        let longest = Double(Limits.gatewayOldBodySweepSeconds)
        guard windowSeconds > 0 else { return longest }
        return min(max(Double(windowSeconds) / Double(Limits.gatewayOldBodySweepsPerWindow), 1), longest)
    }

    /// The bodies `tree` keeps for revisions that are no longer leaves, with their sizes in bytes.
    static func ancestorBodies(of tree: RevTree) -> [(rev: RevID, bytes: Int)] {
        tree.revisions.compactMap { r in
            guard !tree.isLeaf(r), let body = tree.body(of: r) else { return nil }
            return (r, body.count)
        }
    }

    /// Whether a body replaced at `replacedAt` (seconds since the epoch) is past the window at `now`.
    func isExpired(replacedAt: UInt32, now: UInt32) -> Bool {
        windowSeconds > 0 && Int(now) - Int(replacedAt) >= windowSeconds
    }

    /// Applies the window to `tree`, keeping `times` (replaced-at seconds per ancestor body) in step. An ancestor
    /// body without a time was replaced by the write being made (`stampUntimed`: stamped `now`; a write also stamps
    /// bodies kept from before this rule existed, which then get one window), or, for the sweep (`stampUntimed`
    /// false), was kept before times were: expired. Returns how many bodies were dropped.
    @discardableResult
    func apply(tree: inout RevTree, times: inout [RevID: UInt32], now: UInt32, stampUntimed: Bool) -> Int {
        var kept: [RevID: UInt32] = [:]
        var dropped = 0
        for (rev, _) in Self.ancestorBodies(of: tree) {
            let at = times[rev] ?? (stampUntimed ? now : 0)
            if times[rev] == nil && !stampUntimed || isExpired(replacedAt: at, now: now) {
                tree.setBody(nil, of: rev)
                dropped += 1
            } else {
                kept[rev] = at
            }
        }
        times = kept
        return dropped
    }

    /// Drops every ancestor body of `tree` (the database's byte bound evicting this document's, oldest documents
    /// first) and empties `times`. Returns how many bodies were dropped.
    @discardableResult
    static func evictAll(tree: inout RevTree, times: inout [RevID: UInt32]) -> Int {
        let bodies = ancestorBodies(of: tree)
        for (rev, _) in bodies { tree.setBody(nil, of: rev) }
        times = [:]
        return bodies.count
    }

    /// The documents the sweep rewrites, from the index's per-document summaries (`id`, bytes of ancestor bodies,
    /// the oldest one's replaced-at time; 0 for a body kept without one): every document holding an expired body,
    /// then, while the ancestor bodies of the rest total more than `maxBytes`, the documents whose oldest body is
    /// oldest (ties by id), until their bytes cover the excess. `evict` names those whose ancestor bodies all go.
    func sweepPlan(
        _ docs: [(id: String, bytes: Int, oldestAt: UInt32)], now: UInt32, maxBytes: Int
    ) -> (expire: [String], evict: [String]) {
        var expire: [String] = []
        var rest: [(id: String, bytes: Int, oldestAt: UInt32)] = []
        var total = 0
        for d in docs where d.bytes > 0 {
            total += d.bytes
            if d.oldestAt == 0 || isExpired(replacedAt: d.oldestAt, now: now) {
                expire.append(d.id)
            } else {
                rest.append(d)
            }
        }
        // What the expired documents free is not counted (only their expired bodies go, maybe not all): the evicted
        // documents cover the excess by themselves, so the bound holds after one sweep.
        var excess = total - maxBytes
        var evict: [String] = []
        if excess > 0 {
            rest.sort { ($0.oldestAt, $0.id) < ($1.oldestAt, $1.id) }
            for d in rest {
                guard excess > 0 else { break }
                evict.append(d.id)
                excess -= d.bytes
            }
        }
        return (expire.sorted(), evict)
    }
}
