import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// `_changes` read a page at a time (`ChangesPager`, `Limits.gatewayChangesPageRows`) and each source of the index
/// walked only as far as a page needs (`ChannelIndex.changeCandidates`): the pages of an answer together are the
/// answer read whole, and a limited answer is the whole answer's first rows.
@Suite struct ChangesPagerTests {
    static let channels = ["a", "b", "c", "d"]

    /// A database whose history has what a feed must get right: documents in zero to two channels, documents moved
    /// between channels (removal rows), deletions, and user `joe` granted channels at three moments (backfills).
    static func history(seed: UInt64) async throws -> (Fixture, UserContext) {
        var rng = SplitMix64(seed: seed)
        func below(_ n: Int) -> Int { Int.random(in: 0..<n, using: &rng) }
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["joe": json(#"{"password":"pw2","admin_channels":["a"]}"#)]))
        var revs: [String: RevID] = [:]
        func write(_ id: String) async throws {
            let chans = (0..<below(3)).map { _ in Self.channels[below(Self.channels.count)] }
            var members: [(String, JSON)] = [("channels", .array(chans.map { .string($0) })), ("n", .number(1))]
            if let rev = revs[id] { members.append(("_rev", .string(rev.description))) }
            if revs[id] != nil && below(6) == 0 { members.append(("_deleted", .bool(true))) }
            revs[id] = try await f.db.put(id, body: .object(members), user: nil)
            if members.contains(where: { $0.0 == "_deleted" }) { revs[id] = nil }
        }
        for phase in 0..<3 {
            for _ in 0..<40 { try await write("doc\(below(60))") }
            let granted = ["a"] + Self.channels.prefix(phase + 2).dropFirst()
            _ = try await f.db.putPrincipal(
                "joe", isRole: false, .object([("admin_channels", .array(granted.map { .string($0) }))]))
        }
        for _ in 0..<20 { try await write("doc\(below(60))") }
        let joe = try #require(f.db.userContext("joe"))
        // Every write indexed and no gap left (the feed stops at the stable sequence).
        let settled = await eventually {
            let info = await f.db.info()
            let stable = UInt64(info["update_seq"]?.intValue ?? 0)
            let counter = try await f.bucket.get("_sync:seq").flatMap {
                UInt64(String(decoding: $0.value, as: UTF8.self))
            }
            return stable > 0 && stable == counter
        }
        #expect(settled)
        return (f, joe)
    }

    /// The pages of `q` read `pageRows` at a time, and the pager's `last_seq`.
    static func paged(
        _ db: GatewayDatabase, _ q: ChangesQuery, user: UserContext?, pageRows: Int
    ) async throws -> ([ChangeRow], ChangesSince, Int) {
        var pager = ChangesPager(q, pageRows: pageRows)
        var rows: [ChangeRow] = []
        var pages = 0
        repeat {
            let page = try await pager.next(db, user: user)
            #expect(page.rows.count <= pageRows)
            rows += page.rows
            pages += 1
        } while !pager.done
        return (rows, pager.lastSeq, pages)
    }

    /// Proves, over seeded histories, for the admin and for a user with late grants, from several `since` values
    /// (plain and a compound one inside a backfill), with and without `active_only` and a `_doc_ids` filter:
    /// - a limited answer is the first `limit` rows of the whole answer (each source is left early, so this fails
    ///   if a source is left before the rows it owes);
    /// - the pages of a paged answer, at 1, 3 and 7 rows per page, are the whole answer's rows in its order and end
    ///   at its `last_seq`, except that a document a page has already sent may come again, as when a client pages
    ///   with `limit`: in a second backfill (a document in two channels granted at different times), or after a
    ///   removal row (a document removed from two of the reader's channels at different sequences: the whole
    ///   answer keeps its first row, a later page cannot know an earlier one sent it);
    /// - no document is missing; the admin's pages (no removals, no backfills) are exactly the whole answer.
    @Test func pagesAndLimitedAnswersAreTheWholeAnswer() async throws {
        let seed =
            UInt64(ProcessInfo.processInfo.environment["SETTEE_PAGER_SEED"] ?? "") ?? UInt64.random(in: 1...UInt64.max)
        print("ChangesPagerTests seed \(seed) (replay with SETTEE_PAGER_SEED=\(seed))")
        for round in 0..<3 {
            let (f, joe) = try await Self.history(seed: seed &+ UInt64(round))
            let all = try await f.db.changes(ChangesQuery(), user: nil)
            let mid = all.rows.count > 2 ? all.rows[all.rows.count / 2].seq : .zero
            let joeFirst = try await f.db.changes(ChangesQuery(), user: joe)
            var sinces: [ChangesSince] = [.zero, ChangesSince(3), mid]
            // A compound since inside a backfill: from early on, joe's answer backfills channels granted later.
            let early = try await f.db.changes(ChangesQuery(since: ChangesSince(5)), user: joe)
            if let inBackfill = early.rows.first(where: { $0.seq.triggeredBy != 0 }) { sinces.append(inBackfill.seq) }
            #expect(!joeFirst.rows.isEmpty)
            let someIDs = Set(all.rows.map(\.id).filter { $0.hasSuffix("1") || $0.hasSuffix("7") })
            for user in [nil, joe] {
                for since in sinces {
                    for (activeOnly, docIDs) in [(false, nil), (true, nil), (false, someIDs)] as [(Bool, Set<String>?)]
                    {
                        let q = ChangesQuery(since: since, activeOnly: activeOnly, docIDs: docIDs)
                        let whole = try await f.db.changes(q, user: user)
                        let label =
                            "seed \(seed) round \(round) user \(user == nil ? "admin" : "joe") since \(since) "
                            + "active \(activeOnly) ids \(docIDs != nil)"
                        for limit in [1, 2, 5, 17] where limit < whole.rows.count {
                            var lq = q
                            lq.limit = limit
                            let limited = try await f.db.changes(lq, user: user)
                            #expect(limited.rows == Array(whole.rows.prefix(limit)), "\(label) limit \(limit)")
                            #expect(limited.lastSeq == whole.rows[limit - 1].seq, "\(label) limit \(limit)")
                        }
                        for pageRows in [1, 3, 7] {
                            let (rows, last, pages) = try await Self.paged(f.db, q, user: user, pageRows: pageRows)
                            #expect(last == whole.lastSeq, "\(label) pages of \(pageRows)")
                            #expect(pages >= (whole.rows.count + pageRows - 1) / pageRows, "\(label)")
                            var earlier: [String: ChangeRow] = [:]
                            var firsts: [ChangeRow] = []
                            for row in rows {
                                guard let before = earlier[row.id] else {
                                    earlier[row.id] = row
                                    firsts.append(row)
                                    continue
                                }
                                #expect(
                                    (row.seq.triggeredBy != 0 && before.seq.triggeredBy != 0)
                                        || !before.removed.isEmpty,
                                    "\(label): \(row) sent again after \(before): not two backfills, not after a removal"
                                )
                            }
                            #expect(firsts.map(\.id) == whole.rows.map(\.id), "\(label) pages of \(pageRows)")
                            #expect(Set(rows.map(\.id)) == Set(whole.rows.map(\.id)), "\(label)")
                            if user == nil {
                                // The admin has no backfills: exactly the whole answer.
                                #expect(rows == whole.rows, "\(label) pages of \(pageRows)")
                            }
                        }
                    }
                }
            }
            await f.close()
        }
    }

    /// Proves a paged answer stops at the stable sequence its first page saw: a document written while the answer
    /// is read is not in it (it comes from the answer's `last_seq` next time), and one written again moves out of
    /// this answer into the next, so the two answers together have every document once at its newest revision.
    @Test func aPagedAnswerEndsAtItsFirstPagesStableSequence() async throws {
        let f = try await Fixture.open()
        var revs: [String: RevID] = [:]
        for i in 0..<10 { revs["d\(i)"] = try await f.db.put("d\(i)", body: json(#"{"i":\#(i)}"#), user: nil) }
        var pager = ChangesPager(ChangesQuery(), pageRows: 4)
        var rows = try await pager.next(f.db, user: nil).rows
        #expect(rows.map(\.id) == ["d0", "d1", "d2", "d3"])
        // Meanwhile: a new document, and d8 (not sent yet) written again.
        _ = try await f.db.put("late", body: json(#"{"late":true}"#), user: nil)
        let d8 = try await f.db.put("d8", body: json(#"{"_rev":"\#(revs["d8"]!)","i":80}"#), user: nil)
        repeat { rows += try await pager.next(f.db, user: nil).rows } while !pager.done
        #expect(rows.map(\.id) == ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d9"])
        let next = await eventually {
            try await f.db.changes(ChangesQuery(since: pager.lastSeq), user: nil).rows.map(\.id) == ["late", "d8"]
        }
        #expect(next)
        let d8row = try await f.db.changes(ChangesQuery(since: pager.lastSeq), user: nil).rows.last
        #expect(d8row?.changes == [d8])
        await f.close()
    }
}
