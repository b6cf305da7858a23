import Foundation
import Logging
import SetteeCore
import SetteeSQLite
import SetteeStreams
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Loads a bucket's file into memory before the engine serves anything (blocking warmup).
///
/// Order:
/// 1. check the format version; read the clean-shutdown marker;
/// 2. vBucket states (state, persisted high seqno, max CAS, purge seqno, failover log);
/// 3. every item in rowid order (first-write order, ADR 0067; any order would do), verifying each value's
///    length and CRC-32; once memory is above the low watermark only keys + metadata are loaded (values stay
///    on disk, as evicted). The high seqno and max CAS are the largest of the state row's and the items'
///    (`VBucketTable.load`): the flusher leaves the state row out of a batch whose newest item carries both
///    (ADR 0061);
/// 4. after an unclean shutdown, a new failover entry per vBucket at its high seqno;
/// 5. one transaction: clean-shutdown marker := 0 and every vBucket's state row, so the new
///    histories are durable before the first mutation is acknowledged.
///
/// A file that existed before the open but holds no format version (zero-length, truncated, foreign)
/// fails the warmup: it is never taken as a new empty bucket. A row that fails verification fails it
/// too, unless `EngineOptions.repair` is set: then the row is skipped, counted, logged (vBucket and key
/// length, never the key) and deleted from the file in step 5's transaction.
enum Warmup {
    struct Outcome {
        var items: Int
        var seconds: Double
        var uncleanShutdown: Bool
    }

    static func run(conn: Connection, core: EngineCore, path: String, existedBefore: Bool = false) throws -> Outcome {
        let start = monotonicNanos()
        try conn.transaction { () throws(SQLiteError) in try conn.execute(StorageSchema.create) }

        let getMeta = try conn.prepare(StorageSchema.getMeta)
        func meta(_ k: String) throws -> Int64? {
            defer { getMeta.reset() }
            try getMeta.bindText(k, at: 1)
            return try getMeta.step() ? getMeta.int64(at: 0) : nil
        }
        let version = try meta(StorageSchema.metaFormatVersion)
        let isNewFile = version == nil
        if isNewFile && existedBefore {
            throw StorageOpenError(
                "data file \(path) holds no Settee data (zero-length, truncated or not a Settee file)",
                notSetteeData: true)
        }
        if let version, version != StorageSchema.formatVersion {
            throw StorageOpenError(
                "data file format version \(version), this build reads \(StorageSchema.formatVersion)")
        }
        // A new file has no history to protect; otherwise a missing or 0 marker means we crashed.
        let marker = try meta(StorageSchema.metaCleanShutdown)
        let maxPurgedRev = RevSeqNo(UInt64(bitPattern: try meta(StorageSchema.metaMaxPurgedRev) ?? 0))
        let unclean = !isNewFile && marker != 1

        let n = core.vbuckets.count
        var present = [Bool](repeating: false, count: n)
        let states = try conn.prepare(StorageSchema.selectStates)
        while try states.step() {
            let vb = Int(states.int64(at: 0))
            guard vb >= 0 && vb < n else { throw StorageOpenError("vbucket_state row for vb \(vb) of \(n)") }
            guard let state = StorageSchema.state(code: states.int64(at: 1)) else {
                throw StorageOpenError("vbucket_state of vb \(vb): unknown state \(states.int64(at: 1))")
            }
            guard let log = states.withBlob(at: 5, { FailoverLog.decode($0) }) else {
                throw StorageOpenError("vbucket_state of vb \(vb): bad failover log")
            }
            let high = SeqNo(UInt64(bitPattern: states.int64(at: 2)))
            let maxCAS = CAS(UInt64(bitPattern: states.int64(at: 3)))
            let purge = SeqNo(UInt64(bitPattern: states.int64(at: 4)))
            // What this engine writes: seqnos within the 48 bits an item keeps, the purge seqno at or below the high
            // one, a CAS (nanoseconds of a hybrid clock) below 2^63. A row past them was not written by it; taken as
            // given, a high seqno of 2^64 - 1 wrapped to 0 at the next expiry, and a CAS of -1 made the clock hand
            // out CAS 0.
            guard high.rawValue <= Limits.maxSeqno, purge <= high, maxCAS.rawValue < 1 << 63 else {
                throw StorageOpenError(
                    "vbucket_state of vb \(vb): high seqno \(high.rawValue), purge seqno \(purge.rawValue), "
                        + "max CAS \(maxCAS.rawValue) out of range")
            }
            core.vbuckets[vb].table.withLock { t in
                t.maxPurgedRev = maxPurgedRev
                t.state = state
                t.highSeqno = high
                t.hlc = HybridLogicalClock(restoring: maxCAS)
                t.purgeSeqno = purge
                t.failoverLog = log
            }
            present[vb] = true
        }

        let bad = BadRows()
        let loaded = try loadItems(conn: conn, core: core, path: path, bad: bad)
        let skipped = bad.rows.withLock { $0 }

        var rng = SystemRandomNumberGenerator()
        var held = 0
        for (i, vb) in core.vbuckets.enumerated() {
            vb.table.withLock { t in
                // Everything in memory now came from the file: it is persisted.
                t.persistedSeqno = t.highSeqno
                // Only an active copy may have acknowledged writes that were lost in the crash; a replica
                // keeps its producer's history (the stream's rollback rules cover what it lost). The active
                // copy is held back, its history unbranched: a replica may hold majority-acknowledged writes
                // this file never got, and the cluster manager decides (`releaseHold` branches the log at the
                // high seqno when no replica is ahead; otherwise the map hands the vBucket to the replica that
                // is, and this copy follows it). A node without a cluster manager releases at once.
                // Any other copy may have been the active too, its takeover not yet in the file: until the cluster
                // has compared it, becoming active or pending holds it (`setVBucketState`).
                if unclean && core.options.holdAfterUncleanShutdown { t.unsettled = true }
                // Items without a state row: the flusher writes a vBucket's row with its first items, so the file
                // lost it (or was not written by this engine). The copy's history is unknown (a fresh one was drawn),
                // so it is held like a crashed active until the cluster has compared it: released unheld, it served
                // as active under a new history whatever its replicas held.
                let orphaned = !present[i] && t.highSeqno > .zero && core.options.holdAfterUncleanShutdown
                if (unclean && present[i] || orphaned) && t.state == .active {
                    if core.options.holdAfterUncleanShutdown {
                        t.held = true
                        t.state = .dead
                        held += 1
                    } else {
                        t.failoverLog.branch(at: t.highSeqno, using: &rng)
                    }
                }
            }
        }

        let setMeta = try conn.prepare(StorageSchema.setMeta)
        let upsert = try conn.prepare(StorageSchema.upsertState)
        let deleteRow = try conn.prepare(StorageSchema.deleteItem)
        try conn.transaction { () throws(SQLiteError) in
            for row in skipped {
                try deleteRow.bind(row.vb, at: 1)
                try deleteRow.bindBlob(row.key, at: 2)
                _ = try deleteRow.step()
                deleteRow.reset()
            }
            for (k, v) in [
                (StorageSchema.metaFormatVersion, StorageSchema.formatVersion), (StorageSchema.metaCleanShutdown, 0),
            ] {
                try setMeta.bindText(k, at: 1)
                try setMeta.bind(v, at: 2)
                _ = try setMeta.step()
                setMeta.reset()
            }
            for (i, vb) in core.vbuckets.enumerated() {
                let row = vb.table.withLock { t in
                    StateRow(
                        vb: UInt16(i), state: t.persistentState, highSeqno: t.highSeqno, maxCAS: t.hlc.maxCAS,
                        purgeSeqno: t.purgeSeqno, failoverLog: t.failoverLog)
                }
                try upsert.bind(Int64(row.vb), at: 1)
                try upsert.bind(StorageSchema.stateCode(row.state), at: 2)
                try upsert.bind(Int64(bitPattern: row.highSeqno.rawValue), at: 3)
                try upsert.bind(Int64(bitPattern: row.maxCAS.rawValue), at: 4)
                try upsert.bind(Int64(bitPattern: row.purgeSeqno.rawValue), at: 5)
                try upsert.bindBlob(row.failoverLog.encoded(), at: 6)
                _ = try upsert.step()
                upsert.reset()
            }
        }

        let seconds = Double(monotonicNanos() - start) / 1e9
        if !skipped.isEmpty {
            core.repairedRows.store(skipped.count, ordering: .relaxed)
            core.logger.critical(
                "repair warmup skipped and deleted rows that failed verification; those documents are lost",
                metadata: ["bucket": "\(core.settings.name)", "skippedRows": "\(skipped.count)"])
        }
        if unclean {
            core.logger.warning(
                core.options.holdAfterUncleanShutdown
                    ? "unclean shutdown detected; vBuckets made active here are held back until the cluster shows no replica is ahead"
                    : "unclean shutdown detected; new failover entries added",
                metadata: ["bucket": "\(core.settings.name)", "heldVBuckets": "\(held)"])
        }
        core.logger.info(
            "warmup complete",
            metadata: [
                "bucket": "\(core.settings.name)", "items": "\(loaded)",
                "seconds": "\(seconds)", "memUsed": "\(core.memory.current)",
            ])
        return Outcome(items: loaded, seconds: seconds, uncleanShutdown: unclean)
    }

    /// Rows per worker below which a second reader thread is not worth its connection.
    static let parallelThreshold: Int64 = 50_000

    /// Reads every row, split by rowid range over up to `min(cores, 4)` reader threads, each with its
    /// own read-only connection (WAL allows it; the vBucket locks and the atomic memory counter make
    /// concurrent installs safe; keys are unique, so order does not matter). Values are verified as
    /// they are decoded; a bad one stops the warmup with a `StorageCorruptionError` (serving a bucket
    /// with silently missing documents is worse).
    /// A row a repair warmup skipped: deleted from the file before the bucket serves anything.
    struct BadRow: Sendable {
        var vb: Int64
        var key: [UInt8]
    }

    /// The rows the reader threads skipped.
    final class BadRows: Sendable {
        let rows = Mutex<[BadRow]>([])
    }

    private static func loadItems(conn: Connection, core: EngineCore, path: String, bad: BadRows) throws
        -> Int
    {
        let bounds = try conn.prepare("SELECT min(rowid), max(rowid) FROM items")
        guard try bounds.step(), !bounds.isNull(at: 0) else { return 0 }
        let lo = bounds.int64(at: 0)
        let hi = bounds.int64(at: 1)
        bounds.reset()
        let cores = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))
        // Rowids SQLite hands out are positive and far below 2^62; a file naming others (tampered, or another
        // program's) is read by one thread, so the split's arithmetic cannot overflow and trap the node.
        let ordinary = lo >= 0 && hi < Int64.max / 2
        let workers = !ordinary || hi - lo + 1 < parallelThreshold * 2 ? 1 : cores
        if workers == 1 {
            return try loadRange(conn: conn, core: core, lo: lo, hi: hi, bad: bad)
        }
        let span = (hi - lo + 1 + Int64(workers) - 1) / Int64(workers)
        let outcome = Mutex<(count: Int, errors: [any Error])>((0, []))
        var latches: [Latch] = []
        for w in 0..<workers {
            let a = lo + Int64(w) * span
            let b = min(hi, a + span - 1)
            latches.append(
                startThread(name: "settee-warmup-\(w)") {
                    do {
                        var o = Connection.Options()
                        o.readOnly = true
                        let c = try Connection(path: path, options: o)
                        defer { c.close() }
                        let n = try loadRange(conn: c, core: core, lo: a, hi: b, bad: bad)
                        outcome.withLock { $0.count += n }
                    } catch {
                        outcome.withLock { $0.errors.append(error) }
                    }
                })
        }
        for l in latches { l.wait() }
        let (count, errors) = outcome.withLock { ($0.count, $0.errors) }
        if let first = errors.first { throw first }
        return count
    }

    private static func loadRange(
        conn: Connection, core: EngineCore, lo: Int64, hi: Int64, bad: BadRows
    ) throws -> Int {
        let n = core.vbuckets.count
        let s = try conn.prepare(StorageSchema.selectItemRange)
        try s.bind(lo, at: 1)
        try s.bind(hi, at: 2)
        var count = 0
        while try s.step() {
            let rawVB = s.int64(at: 0)
            let key = s.blob(at: 1)
            do {
                let item = try decodeRow(s, core: core, vbCount: n, key: key)
                let bytes = core.vbuckets[Int(rawVB)].table.withLock { t in t.load(key: key, item: item) }
                core.memory.add(bytes)
                count += 1
            } catch let error as StorageCorruptionError {
                guard core.options.repair else { throw error }
                // The row's seqno still counts: the flusher may have left the state row behind it (ADR 0061),
                // and a seqno once handed out is never reused. Step 5 writes the high seqno with the delete.
                let seqno = SeqNo(UInt64(bitPattern: s.int64(at: 2)))
                if rawVB >= 0 && rawVB < Int64(n) {
                    core.vbuckets[Int(rawVB)].table.withLock { t in
                        if seqno > t.highSeqno { t.highSeqno = seqno }
                    }
                }
                core.logger.error(
                    "repair warmup: skipping a row that failed verification",
                    metadata: ["bucket": "\(core.settings.name)", "row": "\(error)"])
                bad.rows.withLock { $0.append(BadRow(vb: rawVB, key: key)) }
            }
        }
        return count
    }

    /// One row as an item, verified; throws `StorageCorruptionError` for a row that fails verification.
    private static func decodeRow(_ s: Statement, core: EngineCore, vbCount n: Int, key: [UInt8]) throws -> Item {
        let vb64 = s.int64(at: 0)
        guard vb64 >= 0 && vb64 < Int64(n) else {
            throw StorageCorruptionError(
                vbucket: VBucketID(UInt16(truncatingIfNeeded: vb64)), keyLength: key.count,
                reason: "vb out of range")
        }
        let vb = Int(vb64)
        guard !key.isEmpty && key.count <= Limits.maxKeyLength else {
            throw StorageCorruptionError(
                vbucket: VBucketID(UInt16(vb)), keyLength: key.count, reason: "key length out of range")
        }
        let deleted = s.int64(at: 8) != 0
        var value: [UInt8]? = []
        let storedDatatype = UInt8(truncatingIfNeeded: s.int64(at: 7))
        // A tombstone's value is the system XATTRs it kept (ADR 0029): always loaded, tombstones stay resident.
        if !deleted || storedDatatype & Datatype.xattr.rawValue != 0 {
            // A prepare's value is always loaded: the active commits it right after warmup at a new seqno,
            // which needs the value in memory to queue it (and the item pager never evicts a prepare).
            if !deleted && core.memory.aboveLow && storedDatatype & StoredPrepare.datatypeBit == 0 {
                // valueOnly: keep key + metadata, leave the value on disk (verified on bg fetch).
                value = nil
            } else {
                let codec = s.int64(at: 9)
                let vlen = s.int64(at: 10)
                let crc = s.int64(at: 11)
                value = try s.withBlob(at: 12) { (stored) throws(StorageCorruptionError) in
                    try LZ4Envelope.decode(
                        codec: codec, stored: stored, length: vlen, crc: crc, vb: UInt16(vb), keyLength: key.count)
                }
            }
        } else {
            // A tombstone without XATTRs is stored with an empty value. The deleted flag is not under the value's
            // checksum, so a row that says deleted but holds a value is a damaged flag (0 and 1 are one bit apart in
            // SQLite's record header): read as a tombstone, a live document would vanish and be purged later.
            let codec = s.int64(at: 9)
            let vlen = s.int64(at: 10)
            let crc = s.int64(at: 11)
            let stored = try s.withBlob(at: 12) { (stored) throws(StorageCorruptionError) in
                try LZ4Envelope.decode(
                    codec: codec, stored: stored, length: vlen, crc: crc, vb: UInt16(vb), keyLength: key.count)
            }
            guard stored.isEmpty else {
                throw StorageCorruptionError(
                    vbucket: VBucketID(UInt16(vb)), keyLength: key.count,
                    reason: "a deleted row holds a \(stored.count)-byte value (a damaged deleted flag?)")
            }
        }
        return Item(
            key: key, value: value, cas: CAS(UInt64(bitPattern: s.int64(at: 4))),
            revSeqno: RevSeqNo(UInt64(bitPattern: s.int64(at: 3))),
            bySeqno: SeqNo(UInt64(bitPattern: s.int64(at: 2))),
            flags: UInt32(truncatingIfNeeded: s.int64(at: 5)), expiry: UInt32(truncatingIfNeeded: s.int64(at: 6)),
            datatype: Datatype(rawValue: storedDatatype), deleted: deleted,
            dirty: false, queued: false, referenced: false, corrupt: false)
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
