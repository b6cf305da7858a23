import SetteeCore
import SetteeDocument
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// Issue 67: a document updated while a lower sequence is still pending keeps its last stable row in every feed
/// until its new sequence is stable, so a pull running in that window never ends without it.
@Suite struct PendingSequenceChangesTests {
    /// `kept` and `moved` are in channel `a` at their first sequences; then a sequence is held (allocated, not yet
    /// written) and both are updated above it, `moved` into channel `b` only. Until the held sequence is released,
    /// the admin feed, a `bychannel` feed, a user of `a` and a pager one row at a time show both at their old
    /// sequences and revisions (`moved` as it was in `a`, not as a removal). Once released, a pull from the window's
    /// `last_seq` shows both at their new sequences, and the reader of `a` gets `moved`'s removal.
    @Test
    func updateAbovePendingSequenceKeepsTheOldRowVisible() async throws {
        let f = try await Fixture.open(
            DatabaseOptions(
                name: "db", users: ["ann": json(#"{"password":"pw2","admin_channels":["a"]}"#)],
                skippedSequenceWaitSeconds: 600))
        let ann = try #require(f.db.userContext("ann"))
        let kept1 = try await f.db.put("kept", body: json(#"{"channels":["a"],"n":1}"#), user: nil)
        let moved1 = try await f.db.put("moved", body: json(#"{"channels":["a"],"n":1}"#), user: nil)
        let firstSeqs = f.db.index.withLock { idx in [idx.docs["kept"]!.seq, idx.docs["moved"]!.seq] }
        let held = try await f.db.allocateSequence()
        let kept2 = try await f.db.put(
            "kept", body: json(#"{"_rev":"\#(kept1)","channels":["a"],"n":2}"#), user: nil)
        let moved2 = try await f.db.put(
            "moved", body: json(#"{"_rev":"\#(moved1)","channels":["b"],"n":2}"#), user: nil)
        let stable = f.db.index.withLock { $0.sequences.stable }
        #expect(stable == held - 1)

        func rows(_ q: ChangesQuery, _ user: UserContext?) async throws -> [String: ChangeRow] {
            let page = try await f.db.changes(q, user: user)
            return Dictionary(page.rows.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        }
        let window: [(String, [String: ChangeRow])] = [
            ("admin", try await rows(ChangesQuery(), nil)),
            ("bychannel a", try await rows(ChangesQuery(channels: ["a"]), nil)),
            ("ann", try await rows(ChangesQuery(), ann)),
            ("ann active_only", try await rows(ChangesQuery(activeOnly: true), ann)),
        ]
        for (name, got) in window {
            #expect(got["kept"]?.seq.seq == firstSeqs[0], "\(name)")
            #expect(got["kept"]?.changes == [kept1], "\(name)")
            #expect(got["moved"]?.seq.seq == firstSeqs[1], "\(name)")
            #expect(got["moved"]?.changes == [moved1], "\(name)")
            #expect(got["moved"]?.removed == [], "\(name)")
        }
        let (paged, pagedLast, _) = try await ChangesPagerTests.paged(f.db, ChangesQuery(), user: ann, pageRows: 1)
        #expect(paged.filter { !$0.id.hasPrefix("_user/") }.map(\.id).sorted() == ["kept", "moved"])
        #expect(pagedLast == ChangesSince(stable))

        await f.db.releaseSequence(held)
        let after = ChangesSince(stable)
        let admin = try await rows(ChangesQuery(since: after), nil)
        #expect(admin["kept"]?.changes == [kept2] && admin["kept"]!.seq.seq > held)
        #expect(admin["moved"]?.changes == [moved2] && admin["moved"]!.seq.seq > held)
        let annAfter = try await rows(ChangesQuery(since: after), ann)
        #expect(annAfter["kept"]?.changes == [kept2])
        #expect(annAfter["moved"]?.removed == ["a"])
        // From the start, each document once, at its new sequence.
        let whole = try await f.db.changes(ChangesQuery(), user: nil).rows
        #expect(whole.map(\.id).sorted() == ["kept", "moved"])
        #expect(whole.allSatisfy { $0.seq.seq > held })
        await f.close()
    }

    /// A held sequence that is never written is abandoned by the gap timer: the stable sequence moves past it, the
    /// shadow of the document updated above it goes, and feeds show the document once, at its new sequence.
    @Test
    func abandoningTheGapDropsTheShadow() async throws {
        let f = try await Fixture.open(DatabaseOptions(name: "db", skippedSequenceWaitSeconds: 600))
        let rev1 = try await f.db.put("d", body: json(#"{"n":1}"#), user: nil)
        let held = try await f.db.allocateSequence()
        let rev2 = try await f.db.put("d", body: json(#"{"_rev":"\#(rev1)","n":2}"#), user: nil)
        #expect(f.db.index.withLock { $0.shadows["d"] != nil })
        let during = try await f.db.changes(ChangesQuery(), user: nil).rows
        #expect(during.map(\.changes) == [[rev1]])
        let moved = f.db.index.withLock { $0.abandonFirstGap() }
        #expect(moved)
        #expect(f.db.index.withLock { $0.shadows.isEmpty && $0.sequences.stable > held })
        let after = try await f.db.changes(ChangesQuery(), user: nil).rows
        #expect(after.map(\.changes) == [[rev2]])
        #expect(after.allSatisfy { $0.seq.seq > held })
        await f.close()
    }
}
