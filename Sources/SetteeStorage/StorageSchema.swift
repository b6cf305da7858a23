import SetteeSQLite

/// The SQL of the bucket's file (`<dir>/data.sqlite`). Layout and reasons: docs/internals/storage-format.md
/// and docs/adr/0002-storage-layout.md.
enum StorageSchema {
    /// Bumped on any incompatible change; a file with another version is refused at open.
    static let formatVersion: Int64 = 1
    static let fileName = "data.sqlite"
    /// Page size of a new data file (ADR 0072). An existing file keeps the size it was created with (SQLite
    /// changes it only by `VACUUM`): files created before ADR 0072 have 16 KiB pages.
    static let newFilePageSize = 4096
    /// WAL bytes after which a commit checkpoints, whatever the file's page size: ADR 0002's 4,096 pages of
    /// 16 KiB. Measured in bytes so a 4 KiB-page file does not checkpoint four times as often.
    static let walAutoCheckpointBytes = 64 << 20

    /// The writer's page cache, 8 MiB (ADR 0108; `Connection.Options`' default is 16). It is filled after any load
    /// and held for good: 8 MiB less is 8 B less per resident item at 1,000,000 items. Measured, the flusher's CPU
    /// for 1,000,000 new keys or 1,000,000 random updates of them did not move.
    static let writerCacheKiB = 8 * 1024

    /// Opens the bucket's writer connection: `newFilePageSize` and `auto_vacuum=INCREMENTAL` for a new file (so a
    /// compaction gives free pages back a step at a time, ADR 0154), and a WAL checkpoint every
    /// `walAutoCheckpointBytes` for the page size the file actually has; the WAL file is truncated back to that size
    /// when a checkpoint lets it start over (`Connection.Options.walSizeLimitBytes`), so a burst past it is not kept
    /// for good.
    static func openWriter(path: String) throws(SQLiteError) -> Connection {
        var options = Connection.Options()
        options.pageSize = newFilePageSize
        options.incrementalVacuum = true
        options.cacheSizeKiB = writerCacheKiB
        options.walSizeLimitBytes = walAutoCheckpointBytes
        let conn = try Connection(path: path, options: options)
        let pageSize = Int(try conn.queryInt64("PRAGMA page_size") ?? Int64(newFilePageSize))
        try conn.execute("PRAGMA wal_autocheckpoint=\(walAutoCheckpointBytes / max(512, pageSize))")
        return conn
    }

    /// `items` is a rowid table: a new key's row is appended at the end (sequential inserts; random keys
    /// only touch the narrow index), an existing key's row is updated in place (`insertItem`, ADR 0067).
    static let create = """
        CREATE TABLE IF NOT EXISTS items(
            vb       INTEGER NOT NULL,
            key      BLOB    NOT NULL,
            seqno    INTEGER NOT NULL,
            rev      INTEGER NOT NULL,
            cas      INTEGER NOT NULL,
            flags    INTEGER NOT NULL,
            expiry   INTEGER NOT NULL,
            datatype INTEGER NOT NULL,
            deleted  INTEGER NOT NULL,
            codec    INTEGER NOT NULL,
            vlen     INTEGER NOT NULL,
            crc      INTEGER NOT NULL,
            value    BLOB    NOT NULL
        );
        CREATE UNIQUE INDEX IF NOT EXISTS items_by_key ON items(vb, key);
        CREATE TABLE IF NOT EXISTS vbucket_state(
            vb          INTEGER PRIMARY KEY,
            state       INTEGER NOT NULL,
            high_seqno  INTEGER NOT NULL,
            max_cas     INTEGER NOT NULL,
            purge_seqno INTEGER NOT NULL,
            failover    BLOB    NOT NULL
        );
        CREATE TABLE IF NOT EXISTS meta(
            k TEXT PRIMARY KEY,
            v INTEGER NOT NULL
        );
        """

    /// One key's latest version. A new key appends a row; an existing key's row is rewritten in place, keeping
    /// its rowid, so the commit writes that row's leaf only: not the index leaf (the entry's rowid stays), nor
    /// an appended leaf, nor page 1's freelist count, as `INSERT OR REPLACE` (delete + append) did (ADR 0067).
    static let insertItem = """
        INSERT INTO items(vb, key, seqno, rev, cas, flags, expiry, datatype, deleted, codec, vlen, crc, value)
        VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
        ON CONFLICT(vb, key) DO UPDATE SET seqno = excluded.seqno, rev = excluded.rev, cas = excluded.cas,
            flags = excluded.flags, expiry = excluded.expiry, datatype = excluded.datatype,
            deleted = excluded.deleted, codec = excluded.codec, vlen = excluded.vlen, crc = excluded.crc,
            value = excluded.value
        """

    static let upsertState = """
        INSERT OR REPLACE INTO vbucket_state(vb, state, high_seqno, max_cas, purge_seqno, failover)
        VALUES(?1, ?2, ?3, ?4, ?5, ?6)
        """

    static let selectStates = "SELECT vb, state, high_seqno, max_cas, purge_seqno, failover FROM vbucket_state"

    /// One warmup worker's share of the table, read in rowid order (sequential I/O; not seqno order: an
    /// updated row keeps its rowid, and warmup does not depend on the order).
    static let selectItemRange = """
        SELECT vb, key, seqno, rev, cas, flags, expiry, datatype, deleted, codec, vlen, crc, value FROM items
        WHERE rowid BETWEEN ?1 AND ?2
        """

    static let selectValue = "SELECT seqno, codec, vlen, crc, value FROM items WHERE vb = ?1 AND key = ?2"

    static let deleteVBucketItems = "DELETE FROM items WHERE vb = ?1"
    /// A purged tombstone's row, only while it still holds the purged version (ADR 0095).
    static let deletePurgedItem = "DELETE FROM items WHERE vb = ?1 AND key = ?2 AND seqno = ?3 AND deleted = 1"
    /// A dropped collection's item, live or deleted (`CollectionPurger`, ADR 0138), while it holds that version.
    static let deleteDroppedItem = "DELETE FROM items WHERE vb = ?1 AND key = ?2 AND seqno = ?3"
    /// A row a repair warmup skipped as corrupt.
    static let deleteItem = "DELETE FROM items WHERE vb = ?1 AND key = ?2"

    static let setMeta = "INSERT OR REPLACE INTO meta(k, v) VALUES(?1, ?2)"
    static let getMeta = "SELECT v FROM meta WHERE k = ?1"

    static let metaFormatVersion = "format_version"
    /// The highest revision seqno of any purged tombstone (ADR 0095): warmup restores every vBucket's
    /// `maxPurgedRev` from it, so a key written again after its tombstone was purged never goes back in revision.
    static let metaMaxPurgedRev = "max_purged_rev"
    /// 1 after `shutdown()` committed everything; set to 0 as soon as the bucket opens.
    static let metaCleanShutdown = "clean_shutdown"

    static func stateCode(_ s: VBucketState) -> Int64 {
        switch s {
        case .active: 1
        case .replica: 2
        case .pending: 3
        case .dead: 4
        }
    }

    static func state(code: Int64) -> VBucketState? {
        switch code {
        case 1: .active
        case 2: .replica
        case 3: .pending
        case 4: .dead
        default: nil
        }
    }
}
