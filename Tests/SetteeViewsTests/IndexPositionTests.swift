import Foundation
import SetteeCore
import SetteeSQLite
import SetteeStorage
import SetteeStreams
import Testing

@testable import SetteeViews

/// `IndexPosition.continues`: when a view index keeps a vBucket's rows and when it rebuilds them (ADR 0088).
@Suite struct IndexPositionTests {
    static let (u1, u2, u3) = (VBucketUUID(11), VBucketUUID(22), VBucketUUID(33))

    static func log(_ entries: (VBucketUUID, UInt64)...) -> FailoverLog {
        FailoverLog(entries: entries.map { FailoverEntry(uuid: $0.0, seqno: SeqNo($0.1)) })
    }

    // Proves the rows stay while the vBucket's history contains what was indexed: the same history at or
    // above the stored seqno, and a newer history that branched at or above it (a failover or unclean restart
    // after the index caught up, a takeover that copied the log).
    @Test func continuesWithinTheHistory() {
        let p = IndexPosition(seqno: 40, uuid: Self.u1)
        #expect(p.continues(in: Self.log((Self.u1, 0)), highSeqno: SeqNo(40)))
        #expect(p.continues(in: Self.log((Self.u1, 0)), highSeqno: SeqNo(90)))
        #expect(p.continues(in: Self.log((Self.u2, 40), (Self.u1, 0)), highSeqno: SeqNo(41)))
        #expect(p.continues(in: Self.log((Self.u3, 70), (Self.u2, 50), (Self.u1, 0)), highSeqno: SeqNo(80)))
        #expect(
            IndexPosition(seqno: 0, uuid: Self.u1).continues(in: Self.log((Self.u2, 0), (Self.u1, 0)), highSeqno: .zero)
        )
    }

    // Proves a rebuild whenever the index may hold changes the vBucket no longer has: a flush (a new history
    // from 0) even after new writes brought the high seqno back above the stored one, a branch below the stored
    // seqno (a failover to a copy that was behind), a history that fell off the log or was never in it, and a
    // high seqno below the stored one on the same history.
    @Test func rebuildsWhenTheHistoryEndedBelow() {
        let p = IndexPosition(seqno: 40, uuid: Self.u1)
        #expect(!p.continues(in: Self.log((Self.u2, 0), (Self.u1, 0)), highSeqno: SeqNo(40)))
        #expect(!p.continues(in: Self.log((Self.u2, 0), (Self.u1, 0)), highSeqno: SeqNo(500)))
        #expect(!p.continues(in: Self.log((Self.u2, 0)), highSeqno: SeqNo(500)))
        #expect(!p.continues(in: Self.log((Self.u2, 39), (Self.u1, 0)), highSeqno: SeqNo(60)))
        #expect(!p.continues(in: Self.log((Self.u3, 10), (Self.u2, 0)), highSeqno: SeqNo(60)))
        #expect(!p.continues(in: Self.log((Self.u1, 0)), highSeqno: SeqNo(39)))
        // A log whose newest entry lies above the high seqno (a replica's adopted log) is never continued, and
        // judging it does not trap.
        #expect(!p.continues(in: Self.log((Self.u2, 60), (Self.u1, 0)), highSeqno: SeqNo(50)))
    }

    // Proves an index file written before the history uuid was stored (format 1) is rebuilt when opened: its
    // seqnos name no history, so keeping them would keep the gap ADR 0088 closes. Every row, total, TTL entry and
    // seqno goes, and the new vbuckets table takes positions with their uuid.
    @Test func formatOneFileIsRebuilt() throws {
        let path = NSTemporaryDirectory() + "settee-index-format-\(UUID().uuidString).sqlite"
        defer { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } }
        do {
            let old = try Connection(path: path)
            try old.execute(
                """
                CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE vbuckets (vb INTEGER PRIMARY KEY, seqno INTEGER NOT NULL);
                CREATE TABLE rows (
                    view INTEGER NOT NULL, sk BLOB NOT NULL, doc BLOB NOT NULL, n INTEGER NOT NULL,
                    vb INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, num REAL,
                    PRIMARY KEY (view, sk, doc, n)) WITHOUT ROWID;
                CREATE TABLE totals (view INTEGER NOT NULL, vb INTEGER NOT NULL, count INTEGER NOT NULL,
                    PRIMARY KEY (view, vb)) WITHOUT ROWID;
                INSERT INTO meta VALUES ('signature', 77), ('format', 1);
                INSERT INTO vbuckets VALUES (3, 40);
                INSERT INTO rows VALUES (0, x'05', x'6b', 0, 3, x'22', x'31', 1);
                INSERT INTO totals VALUES (0, 3, 1);
                """)
        }
        let db = try IndexStore.open(path: path, signature: 77)
        let writer = try IndexWriter(db: db)
        #expect(try writer.loadPositions().isEmpty)
        #expect(try db.queryInt64("SELECT count(*) FROM rows") == 0)
        #expect(try db.queryInt64("SELECT count(*) FROM totals") == 0)
        #expect(try db.queryInt64("SELECT v FROM meta WHERE k = 'format'") == IndexStore.format)
        let position = IndexPosition(seqno: 9, uuid: Self.u2)
        try writer.commitVBucket(vb: 3, position: position, deltas: [:])
        #expect(try writer.loadPositions() == [3: position])
    }
    // Proves the purge rules (ADR 0095): rows indexed up to a position at or above the purge seqno stay, a position
    // below it rebuilds (deletions the index never saw are gone), a position of 0 has nothing to lose; and within a
    // pass, a read from 0 raises the floor while a purge above both the floor and the read's position ends the pass.
    @Test func purgesAboveThePositionRebuild() throws {
        let log = Self.log((Self.u1, 0))
        func continues(_ seqno: UInt64) -> Bool {
            IndexPosition(seqno: seqno, uuid: Self.u1).continues(in: log, highSeqno: SeqNo(90), purgeSeqno: SeqNo(40))
        }
        #expect(continues(40) && !continues(39) && continues(0))

        var w = VBucketWork(vb: 2, since: 0, high: 90, uuid: Self.u1, fresh: true, purgeFloor: PurgeFloor(SeqNo(10)))
        try w.check(since: 0, purgeSeqno: SeqNo(40))  // read from 0 after a purge: nothing missed
        #expect(w.purgeFloor.seqno == SeqNo(40))
        try w.check(since: 20, purgeSeqno: SeqNo(40))  // the old purge again, past the first batch
        #expect(throws: ViewSourcePurged(vbucket: VBucketID(2), purgeSeqno: SeqNo(45))) {
            try w.check(since: 20, purgeSeqno: SeqNo(45))
        }
        try w.check(since: 50, purgeSeqno: SeqNo(45))  // purged below what was read: nothing missed
    }
}
