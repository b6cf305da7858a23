import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// A sync function run holding more JavaScript heap than its bound (ADR 0111) is stopped: its write answers 500 and
/// the database, and the worker whose engine stopped it, keep serving.
@Suite struct SyncHeapLimitTests {
    /// Hoards 100 KB strings for as long as it runs when the document says `hoard`: 32 MiB in a few hundred pushes,
    /// far within the sync function's 1 s time limit, so it is the heap bound that stops it.
    static let sync = """
        function(doc) {
          if (doc.hoard) { var a = []; while (true) { a.push('y'.repeat(100000) + a.length); } }
          channel(doc.channels);
        }
        """

    // Proves a write whose sync function run passes the heap bound (32 MiB here) answers 500 naming the heap limit,
    // in `PUT` and as its row of `_bulk_docs` beside a row that is written, and that the one worker thread then
    // serves the next writes and reads, of the same document too. With the heap check off (the watchdog checking
    // only the time), the run was stopped at the time limit instead: 500 naming the time limit.
    @Test func aSyncFunctionHoardingHeapFailsItsWriteAndTheDatabaseServesOn() async throws {
        var options = DatabaseOptions(name: "db", syncSource: Self.sync, syncThreads: 1)
        options.syncHeapLimitBytes = 32 << 20
        let f = try await Fixture.open(options)

        do {
            _ = try await f.db.put("d", body: json(#"{"hoard":true,"channels":["a"]}"#), user: nil)
            Issue.record("the hoarding write was stored")
        } catch {
            #expect(error.status == 500)
            #expect(error.reason.contains("heap limit"), "\(error.reason)")
        }

        let rev = try await f.db.put("d", body: json(#"{"v":1,"channels":["a"]}"#), user: nil)
        #expect(rev.generation == 1)
        let read = try await f.db.get("d", user: nil)
        #expect(read.body["v"]?.intValue == 1)

        let rows = await f.db.bulkDocs(
            [json(#"{"_id":"h","hoard":true}"#), json(#"{"_id":"e","v":2}"#)], newEdits: true, user: nil)
        #expect(rows.count == 2)
        #expect(rows.first?["status"]?.intValue == 500, "\(rows)")
        #expect(rows.first?["reason"]?.stringValue?.contains("heap limit") == true, "\(rows)")
        #expect(rows.last?["ok"]?.boolValue == true, "\(rows)")
        #expect(try await f.db.get("e", user: nil).body["v"]?.intValue == 2)
        await f.close()
    }
}
