import Foundation
import SetteeCore
import Synchronization

/// The expiry timer's state: the pure schedule and the timer it armed.
struct ExpiryState: Sendable {
    var schedule = ExpirySchedule()
    var timer: (any ScheduledTimer)?
    var closed = false

    mutating func close() {
        timer?.cancel()
        timer = nil
        closed = true
    }
}

/// Document expiration, as Couchbase Lite's `Collection.setDocumentExpiration` (ADR 0153): a document whose
/// expiration passes is purged (not deleted: no tombstone, nothing replicated), by a timer armed for the earliest
/// expiration on `DatabaseOptions.clock`; at open, documents that expired while the file was closed go at once.
/// Expirations are local: Sync Gateway strips `_exp` from bodies and Couchbase Lite drops `_` members of pulled
/// revisions, so a replicated revision neither carries nor sets one (ours drops `_exp` the same way).
extension Database {
    /// The clock's time in milliseconds since 1970.
    var nowMilliseconds: Int64 { Int64(options.clock.nowNanoseconds() / 1_000_000) }

    /// Asks the schedule what to do for the earliest stored expiration and does it: purges what is due (then asks
    /// again), arms, cancels or leaves the timer. Errors are not thrown (a timer has nobody to throw to): a failed
    /// purge is retried later (`ExpirySchedule.purgeFailed`); a closed database stops.
    func rescheduleExpiry(timerFired: Bool = false) {
        expiry.withLock { state in
            guard !state.closed else { return }
            if timerFired {
                // A fired dispatch source stays alive until cancelled.
                state.timer?.cancel()
                state.timer = nil
                state.schedule.timerFired()
            }
            // Each round purges every due document, so the second round sees only later ones; the bound is a guard.
            for _ in 0..<8 {
                let now = nowMilliseconds
                let directive: ExpirySchedule.Directive
                do throws(LiteError) {
                    let earliest = try read { try $0.earliestExpiration() }
                    directive = state.schedule.next(earliest: earliest, now: now)
                } catch {
                    if case .closed = error { return }
                    directive = state.schedule.purgeFailed(now: now)
                }
                switch directive {
                case .purgeDue:
                    do throws(LiteError) { try purgeExpired(now: now) } catch {
                        if case .closed = error { return }
                        perform(state.schedule.purgeFailed(now: now), &state)
                        return
                    }
                    continue
                case .arm, .cancel, .nothing:
                    perform(directive, &state)
                    return
                }
            }
        }
    }

    private func perform(_ directive: ExpirySchedule.Directive, _ state: inout ExpiryState) {
        switch directive {
        case .arm(let at):
            state.timer?.cancel()
            // `at` is at most `Limits.liteMaxExpirationMilliseconds` past 1970 (or now plus a bounded delay): its
            // nanoseconds fit a `UInt64`.
            let deadline = UInt64(max(0, at)) &* 1_000_000
            state.timer = options.clock.schedule(atNanoseconds: deadline, on: queue) { [weak self] in
                self?.rescheduleExpiry(timerFired: true)
            }
        case .cancel:
            state.timer?.cancel()
            state.timer = nil
        case .purgeDue, .nothing:
            break
        }
    }

    /// Purges every document of every collection whose expiration is at or before `now`, in transactions of at most
    /// `Limits.liteExpiryPurgeBatch` documents; each posts its collection's changes (`isPurged`).
    func purgeExpired(now: Int64) throws(LiteError) {
        let ids = try read { try $0.collectionsWithDueExpirations(now: now) }
        guard !ids.isEmpty else { return }
        let rows = try read { try $0.collectionRows() }
        for row in rows where ids.contains(row.tables.id) {
            while true {
                let purged = try write(in: row) { store in
                    let changes = try store.purgeExpired(now: now, limit: Limits.liteExpiryPurgeBatch)
                    return (changes.count, changes)
                }
                if purged < Limits.liteExpiryPurgeBatch { break }
            }
        }
    }

    /// Milliseconds since 1970 of `date` for the `expirations` table: a date before 1970 is 0 (already expired);
    /// 400 for one past `Limits.liteMaxExpirationMilliseconds` or not finite.
    static func expirationMilliseconds(_ date: Date) throws(LiteError) -> Int64 {
        let ms = (date.timeIntervalSince1970 * 1_000).rounded(.down)
        guard ms.isFinite, ms <= Double(Limits.liteMaxExpirationMilliseconds) else {
            throw .badRequest("an expiration is a date before the year 10000")
        }
        return ms < 0 ? 0 : Int64(ms)
    }

    // MARK: The default collection's

    /// Sets the expiration of document `id` of the default collection (`DatabaseCollection.setDocumentExpiration`).
    public func setDocumentExpiration(id: String, date: Date?) throws(LiteError) {
        try defaultCollectionHandle.setDocumentExpiration(id: id, date: date)
    }

    /// The expiration of document `id` of the default collection (`DatabaseCollection.getDocumentExpiration`).
    public func getDocumentExpiration(id: String) throws(LiteError) -> Date? {
        try defaultCollectionHandle.getDocumentExpiration(id: id)
    }
}

extension DatabaseCollection {
    /// Sets when document `id` expires: at `date` it is purged from this collection (every revision, no tombstone,
    /// nothing replicated), as Couchbase Lite's `setDocumentExpiration(withID:expiration:)`; nil clears it. The
    /// expiration is stored (it survives closing the file), kept by later saves and deletions, and dropped by a
    /// purge. A date already past purges the document before this returns. 404 when the collection has no document
    /// `id` (a deleted one counts: its tombstone may expire), 400 for a date past the year 9999.
    public func setDocumentExpiration(id: String, date: Date?) throws(LiteError) {
        let ms = try date.map { (d: Date) throws(LiteError) in try Database.expirationMilliseconds(d) }
        try write { store in
            try store.setExpiration(id: id, milliseconds: ms)
            return ((), [ChangedDocument]())
        }
        database.rescheduleExpiry()
    }

    /// When document `id` expires (Couchbase Lite's `getDocumentExpiration(withID:)`), to the millisecond; nil when
    /// it has no expiration or no such document exists.
    public func getDocumentExpiration(id: String) throws(LiteError) -> Date? {
        try read { try $0.expiration(id: id) }.map { Date(timeIntervalSince1970: Double($0) / 1_000) }
    }
}
