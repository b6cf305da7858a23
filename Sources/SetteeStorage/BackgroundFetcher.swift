import Logging
import SetteeCore
import SetteeSQLite
import Synchronization

/// A request to bring one evicted value back into memory.
struct FetchRequest: Sendable {
    var vb: UInt16
    var key: [UInt8]
    var completion: @Sendable () -> Void
}

/// The background reader: its own read-only SQLite connection (WAL lets it read while the flusher
/// writes), fed by `EngineCore.fetchQueue`. Owned by its thread.
final class BackgroundFetcher {
    private let core: EngineCore
    private let conn: Connection
    private let select: Statement

    init(core: EngineCore, conn: Connection) throws(SQLiteError) {
        self.core = core
        self.conn = conn
        self.select = try conn.prepare(StorageSchema.selectValue)
    }

    func run() {
        while true {
            var batch: [FetchRequest] = []
            core.fetchWakeup.locked {
                while true {
                    batch = core.fetchQueue.withLock { q in
                        let b = q
                        q = []
                        return b
                    }
                    if !batch.isEmpty || core.stop != .running { return }
                    core.fetchWakeup.waitLocked(seconds: 1)
                }
            }
            if batch.isEmpty { break }
            for r in batch {
                load(r)
                r.completion()
            }
        }
        conn.close()
    }

    /// Reads an evicted value back. An evicted item is clean, so the file holds a row for its key: a lookup that
    /// finds none, or meets `SQLITE_CORRUPT`, means the file is damaged (a damaged index misses rows the table
    /// holds, issue 72), and the item is marked corrupt, so reads answer as for a value that failed its checksum
    /// instead of "not found" (ADR 0144). Other failures (I/O, busy) leave it for a retry.
    private func load(_ r: FetchRequest) {
        let vb = core.vbuckets[Int(r.vb)]
        // Read first, install after: never hold the vBucket lock across the read.
        var loaded: (seqno: SeqNo, value: Result<[UInt8], StorageCorruptionError>)?
        do {
            try select.bind(Int64(r.vb), at: 1)
            // Step and read inside the key's scope: the blob is bound without a copy.
            loaded = try select.withBlobBound(r.key, at: 2) {
                () throws(SQLiteError) -> (seqno: SeqNo, value: Result<[UInt8], StorageCorruptionError>)? in
                guard try select.step() else { return nil }
                let seq = SeqNo(UInt64(bitPattern: select.int64(at: 0)))
                let codec = select.int64(at: 1)
                let vlen = select.int64(at: 2)
                let crc = select.int64(at: 3)
                let v = select.withBlob(at: 4) { stored in
                    Result { () throws(StorageCorruptionError) -> [UInt8] in
                        try LZ4Envelope.decode(
                            codec: codec, stored: stored, length: vlen, crc: crc, vb: r.vb, keyLength: r.key.count)
                    }
                }
                return (seq, v)
            }
            select.reset()
        } catch {
            select.reset()
            core.logger.error(
                "background fetch failed",
                metadata: ["vb": "\(r.vb)", "keyLength": "\(r.key.count)", "error": "\(error)"])
            if error.isUnreadableFile { markDamaged(r, vb: vb, reason: "\(error)") }
            return
        }
        core.bgFetched.wrappingAdd(1, ordering: .relaxed)
        guard let loaded else {
            markDamaged(r, vb: vb, reason: "no row for the key in the data file")
            return
        }
        var memDelta = 0
        let stale = vb.table.withLock { t -> Bool in
            guard var item = t.items[DocKey(r.key)], !item.hasValue, !item.deleted else { return false }
            guard item.bySeqno == loaded.seqno else { return true }
            switch loaded.value {
            case .success(let value):
                item.value = value
                item.corrupt = false
                item.referenced = true
                t.memUsed += value.count
                t.nonResident -= 1
                memDelta = value.count
            case .failure:
                item.corrupt = true
            }
            t.items[DocKey(r.key)] = item
            return false
        }
        if case .failure(let e) = loaded.value {
            core.logger.error(
                "stored value failed verification",
                metadata: ["vb": "\(r.vb)", "keyLength": "\(r.key.count)", "reason": "\(e.reason)"])
        }
        if stale {
            // An evicted item is clean, so its version is on disk; a mismatch means the file lost a write.
            core.logger.error(
                "background fetch found another version on disk than in memory",
                metadata: ["vb": "\(r.vb)", "keyLength": "\(r.key.count)", "diskSeqno": "\(loaded.seqno)"])
        }
        if memDelta != 0 {
            core.memory.add(memDelta)
            if core.memory.aboveHigh { core.wakeFlusherIfIdle() }
        }
    }

    /// Marks the key's evicted item corrupt (its version should be on disk and is not readable there) and logs it.
    private func markDamaged(_ r: FetchRequest, vb: VBucket, reason: String) {
        let marked = vb.table.withLock { t -> Bool in
            guard var item = t.items[DocKey(r.key)], !item.hasValue, !item.deleted else { return false }
            item.corrupt = true
            t.items[DocKey(r.key)] = item
            return true
        }
        guard marked else { return }
        core.logger.error(
            "an evicted item's row is missing or damaged in the data file; the item reads as corrupt",
            metadata: ["vb": "\(r.vb)", "keyLength": "\(r.key.count)", "reason": "\(reason)"])
    }
}
