import Foundation
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// Polls `check` until it holds or `seconds` pass (for effects that arrive through the bucket's stream).
/// The default deadline is 30 s, as the process tests' `eventually`: every test target runs in one process, and
/// while tests that block a thread (synchronous waits) hold the cooperative pool on CI's two cores, a bucket's
/// stream and a database's timers can stall for seconds. A check that holds returns at once; none of these
/// checks expects a failure, so the deadline costs nothing in a passing run.
func eventually(_ seconds: Double = 30, _ check: () async throws -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if (try? await check()) == true { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return (try? await check()) == true
}

func ids(_ page: ChangesPage) -> [String] { page.rows.map(\.id) }

@Suite struct ChangesTests {
    @Test func usersSeeOnlyTheirChannels() async throws {
        // Proves: a user's feed merges only their channels' logs (plus `!` public docs), the admin sees
        // everything, `_user/NAME` appears first for a fresh user, and GET of a document in no channel of
        // the user is 403.
        let f = try await Fixture.open(
            DatabaseOptions(
                name: "db",
                users: [
                    "jane": json(#"{"password":"pw1","admin_channels":["jane"]}"#),
                    "joe": json(#"{"password":"pw2","admin_channels":["joe"]}"#),
                ]))
        _ = try await f.db.put("j1", body: json(#"{"channels":["jane"]}"#), user: nil)
        _ = try await f.db.put("o1", body: json(#"{"channels":["joe"]}"#), user: nil)
        _ = try await f.db.put("p1", body: json(#"{"channels":["!"]}"#), user: nil)
        _ = try await f.db.put("n1", body: json(#"{"x":1}"#), user: nil)
        let jane = try #require(await f.db.authenticate(name: "jane", password: "pw1"))
        #expect(await f.db.authenticate(name: "jane", password: "wrong") == nil)
        let page = try await f.db.changes(ChangesQuery(), user: jane)
        #expect(ids(page) == ["_user/jane", "j1", "p1"])
        let admin = try await f.db.changes(ChangesQuery(), user: nil)
        #expect(Set(ids(admin)) == ["j1", "o1", "p1", "n1"])
        do {
            _ = try await f.db.get("o1", user: jane)
            Issue.record("jane read joe's doc")
        } catch { #expect(error.status == 403) }
        #expect(try await f.db.get("j1", user: jane).body["_id"]?.stringValue == "j1")
        // Filtered by channel.
        let filtered = try await f.db.changes(ChangesQuery(channels: ["!"]), user: jane)
        #expect(ids(filtered) == ["_user/jane", "p1"])
        await f.close()
    }

    @Test func lateGrantBackfillsWithCompoundSequencesThenRevocationStops() async throws {
        // Proves: a channel granted after a client's checkpoint re-sends that channel's history as
        // `grant:seq` rows (then nothing repeats), and a document moved out of the user's channel yields a
        // `removed` row.
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["joe": json(#"{"password":"pw2","admin_channels":["a"]}"#)]))
        for i in 0..<5 { _ = try await f.db.put("x\(i)", body: json(#"{"channels":["x"]}"#), user: nil) }
        let a1 = try await f.db.put("a1", body: json(#"{"channels":["a"]}"#), user: nil)
        let joe = try #require(f.db.userContext("joe"))
        let first = try await f.db.changes(ChangesQuery(), user: joe)
        #expect(ids(first) == ["_user/joe", "a1"])

        _ = try await f.db.putPrincipal("joe", isRole: false, json(#"{"admin_channels":["a","x"]}"#))
        let second = try await f.db.changes(ChangesQuery(since: first.lastSeq), user: joe)
        #expect(Set(ids(second)) == Set(["_user/joe", "x0", "x1", "x2", "x3", "x4"]))
        let backfilled = second.rows.filter { $0.id.hasPrefix("x") }
        #expect(backfilled.allSatisfy { $0.seq.triggeredBy != 0 && $0.seq.json.stringValue != nil })
        let third = try await f.db.changes(ChangesQuery(since: second.lastSeq), user: joe)
        #expect(third.rows.isEmpty)

        // Backfill resumes from a compound since when a limit cut it short.
        let limited = try await f.db.changes(ChangesQuery(since: first.lastSeq, limit: 2), user: joe)
        #expect(limited.rows.count == 2)
        let rest = try await f.db.changes(ChangesQuery(since: limited.lastSeq), user: joe)
        #expect(Set(ids(limited) + ids(rest)).isSuperset(of: ["x0", "x1", "x2", "x3", "x4"]))

        // Moving a1 out of "a" into "z": joe gets a removal row.
        _ = try await f.db.put("a1", body: json(#"{"_rev":"\#(a1)","channels":["z"]}"#), user: nil)
        let fourth = try await f.db.changes(ChangesQuery(since: second.lastSeq), user: joe)
        #expect(fourth.rows.count == 1 && fourth.rows[0].removed == ["a"])
        do {
            _ = try await f.db.get("a1", user: joe)
            Issue.record("removed doc still readable")
        } catch { #expect(error.status == 403) }
        // Active-only feeds skip removals.
        let active = try await f.db.changes(ChangesQuery(since: second.lastSeq, activeOnly: true), user: joe)
        #expect(active.rows.isEmpty)
        await f.close()
    }

    @Test func waitForChangeWakesOnARelevantWriteAndTimesOut() async throws {
        // Proves: a waiting feed is woken by a write to one of its channels (no polling), not by writes
        // elsewhere, and returns false at its deadline.
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["joe": json(#"{"password":"pw2","admin_channels":["a"]}"#)]))
        let joe = try #require(f.db.userContext("joe"))
        let start = try await f.db.changes(ChangesQuery(), user: joe).lastSeq
        let quiet = await f.db.waitForChange(after: start, user: joe, deadline: .now + .milliseconds(200))
        #expect(!quiet)
        let waiter = Task { await f.db.waitForChange(after: start, user: joe, deadline: .now + .seconds(20)) }
        try await Task.sleep(for: .milliseconds(100))
        _ = try await f.db.put("other", body: json(#"{"channels":["b"]}"#), user: nil)
        try await Task.sleep(for: .milliseconds(100))
        _ = try await f.db.put("mine", body: json(#"{"channels":["a"]}"#), user: nil)
        let t0 = ContinuousClock.now
        #expect(await waiter.value)
        #expect(ContinuousClock.now - t0 < .seconds(60))
        let page = try await f.db.changes(ChangesQuery(since: start), user: joe)
        #expect(ids(page) == ["mine"])
        await f.close()
    }

    @Test func aLaterSequenceWaitsForAnEarlierOneStillInFlight() async throws {
        // Proves: the stable sequence: when sequence N is allocated but not yet written, a write at N+1 is
        // held back from feeds until N is written or recorded unused; then both appear in order.
        let f = try await Fixture.open()
        _ = try await f.db.put("first", body: json(#"{"n":1}"#), user: nil)
        let inFlight = try await f.bucket.increment("_sync:seq", delta: 1, initial: 1)
        _ = try await f.db.put("third", body: json(#"{"n":3}"#), user: nil)
        let held = try await f.db.changes(ChangesQuery(), user: nil)
        #expect(ids(held) == ["first"])
        _ = try await f.bucket.insert("_sync:unusedSeq:\(inFlight)", value: Array("{}".utf8), expiry: 0)
        let released = await eventually {
            ids(try await f.db.changes(ChangesQuery(), user: nil)) == ["first", "third"]
        }
        #expect(released)
        await f.close()
    }

    @Test func aMissingSequenceIsAbandonedAfterItsWait() async throws {
        // Proves: a sequence allocated and never written (its gateway died) holds feeds back only for
        // `skippedSequenceWaitSeconds`.
        let f = try await Fixture.open(DatabaseOptions(name: "db", skippedSequenceWaitSeconds: 0.3))
        _ = try await f.bucket.increment("_sync:seq", delta: 1, initial: 1)
        _ = try await f.db.put("later", body: json(#"{"n":1}"#), user: nil)
        #expect(try await f.db.changes(ChangesQuery(), user: nil).rows.isEmpty)
        let released = await eventually(60) { ids(try await f.db.changes(ChangesQuery(), user: nil)) == ["later"] }
        #expect(released)
        await f.close()
    }

    @Test func documentsWrittenByAKVClientAreImported() async throws {
        // Proves: with import_docs a body written straight into the bucket (no `_sync`) becomes a revision
        // that appears in `_changes`, and a KV edit of a gateway document becomes its next revision.
        let f = try await Fixture.open(DatabaseOptions(name: "db", importDocs: true))
        _ = try await f.bucket.upsert("kv1", value: Array(#"{"channels":["k"],"v":1}"#.utf8), expiry: 0)
        let seen = await eventually { ids(try await f.db.changes(ChangesQuery(), user: nil)) == ["kv1"] }
        #expect(seen)
        let (body, _) = try await f.db.get("kv1", user: nil)
        #expect(body["_rev"]?.stringValue?.hasPrefix("1-") == true && body["v"]?.intValue == 1)
        // Edit the stored document as an SDK would: change the body, keep `_sync`.
        var raw = try await f.db.raw("kv1")
        raw.set("v", .number(2))
        _ = try await f.bucket.upsert("kv1", value: raw.serialized(), expiry: 0)
        let edited = await eventually {
            (try? await f.db.get("kv1", user: nil).body["_rev"]?.stringValue?.hasPrefix("2-")) == true
        }
        #expect(edited)
        #expect(try await f.db.get("kv1", user: nil).body["v"]?.intValue == 2)
        await f.close()
    }

    @Test func twoDatabasesOnOneBucketAgreeOnSequences() async throws {
        // Proves: two gateways on one bucket allocate distinct sequences from the shared counter and each
        // sees the other's writes in its feed (each reserves batches of sequences, ADR 0045: the sequences are
        // distinct, not 1...20).
        let f = try await Fixture.open()
        let other = try await GatewayDatabase(
            options: DatabaseOptions(name: "db"), bucket: f.bucket, logger: quietLogger())
        for i in 0..<20 {
            _ = try await (i % 2 == 0 ? f.db : other).put("d\(i)", body: json(#"{"i":\#(i)}"#), user: nil)
        }
        for db in [f.db, other] {
            let ok = await eventually {
                let page = try await db.changes(ChangesQuery(), user: nil)
                return page.rows.count == 20 && Set(page.rows.map(\.seq.seq)).count == 20
            }
            #expect(ok)
        }
        // A conflicting concurrent update: exactly one of two writers on the same parent wins.
        let r = try await f.db.get("d0", user: nil).body["_rev"]!.stringValue!
        async let a = try? f.db.put("d0", body: json(#"{"_rev":"\#(r)","by":"a"}"#), user: nil)
        async let b = try? other.put("d0", body: json(#"{"_rev":"\#(r)","by":"b"}"#), user: nil)
        let results = await [a, b]
        #expect(results.compactMap { $0 }.count == 1)
        await other.close()
        await f.close()
    }
}
