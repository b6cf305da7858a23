import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

/// What `PRAGMA integrity_check` said about a database file.
public enum IntegrityCheckResult: Equatable, Sendable {
    /// No problem found: every page, every b-tree and every index entry agrees with its table.
    case ok
    /// The problems SQLite listed (at most the number asked for), e.g. "row 17 missing from index items_by_key".
    case damaged([String])
    /// The time bound passed first (`SQLITE_INTERRUPT`): nothing is known.
    case unfinished
}

extension Connection {
    /// Runs `PRAGMA integrity_check(maxProblems)` for at most `seconds` (wall time on the monotonic clock, checked every
    /// 1,000 virtual-machine steps by a progress handler that interrupts it). Unlike `quick_check`, it also checks
    /// that every index holds exactly its table's rows, which is what a damaged index breaks (a lookup by key misses
    /// a row the table holds). Cost grows with the file (tens of milliseconds for 10,000 small rows). Throws only for
    /// a failure other than corruption or the time bound (a full disk, an I/O error); a file SQLite cannot read at
    /// all (`SQLITE_CORRUPT`, `SQLITE_NOTADB` from the pragma itself) is `.damaged` with SQLite's message.
    public func checkIntegrity(seconds: Double, maxProblems: Int = 10) throws(SQLiteError) -> IntegrityCheckResult {
        let deadline = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
        defer { deadline.deallocate() }
        deadline.pointee = Self.monotonicNanos() &+ UInt64(max(0, seconds) * 1e9)
        sqlite3_progress_handler(
            db, 1_000,
            { context in
                guard let context else { return 0 }
                return Connection.monotonicNanos() >= context.assumingMemoryBound(to: UInt64.self).pointee ? 1 : 0
            }, deadline)
        defer { sqlite3_progress_handler(db, 0, nil, nil) }
        var problems: [String] = []
        do {
            let s = try prepare("PRAGMA integrity_check(\(max(1, maxProblems)))")
            defer { s.reset() }
            while try s.step() {
                let line = s.text(at: 0)
                if line != "ok" { problems.append(line) }
            }
        } catch {
            if error.code == SQLITE_INTERRUPT { return .unfinished }
            if error.isUnreadableFile { return .damaged([error.description]) }
            throw error
        }
        return problems.isEmpty ? .ok : .damaged(problems)
    }

    static func monotonicNanos() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
