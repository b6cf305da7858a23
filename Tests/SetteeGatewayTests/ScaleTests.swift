import Foundation
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

@Suite struct ScaleTests {
    @Test func aDirectoryBucketKeepsTheDatabaseAcrossARestart() async throws {
        // Proves: a directory-backed embedded bucket keeps documents, users and the sequence counter: a
        // database reopened on it serves the same revisions and feeds and continues the sequence.
        let dir = NSTemporaryDirectory() + "settee-gw-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let options = DatabaseOptions(
            name: "db", users: ["kim": json(#"{"password":"secret","admin_channels":["k"]}"#)])
        var revs: [String: String] = [:]
        do {
            let bucket = try EmbeddedBucket(server: dir, name: "b", logger: quietLogger())
            let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
            for i in 0..<20 {
                revs["d\(i)"] = try await db.put("d\(i)", body: json(#"{"channels":["k"],"i":\#(i)}"#), user: nil)
                    .description
            }
            await db.close()
            await bucket.close()
        }
        let bucket = try EmbeddedBucket(server: dir, name: "b", logger: quietLogger())
        let db = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
        let kim = try #require(await db.authenticate(name: "kim", password: "secret"))
        let page = try await db.changes(ChangesQuery(), user: kim)
        #expect(page.rows.filter { $0.id.hasPrefix("d") }.count == 20)
        for (id, rev) in revs {
            #expect(try await db.get(id, user: kim).body["_rev"]?.stringValue == rev)
        }
        let next = try await db.put("after", body: json(#"{"channels":["k"]}"#), user: nil)
        #expect(next.generation == 1)
        let last = try await db.changes(ChangesQuery(since: page.lastSeq), user: kim)
        #expect(last.rows.map(\.id) == ["after"] && last.rows[0].seq.seq > page.lastSeq.seq)
        await db.close()
        await bucket.close()
    }

    @Test func tenThousandDocumentsAndAFeedThatCostsOnlyItsChannel() async throws {
        // Proves: 10,000 1 KiB documents over 100 channels go in through _bulk_docs (new_edits=false, as a
        // replicator pushes them), the admin feed returns all of them, and a user's feed returns exactly the
        // 100 documents of their one channel. Prints the rates (debug build).
        let f = try await Fixture.open(
            DatabaseOptions(name: "db", users: ["one": json(#"{"password":"secret","admin_channels":["c7"]}"#)]))
        let pad = String(repeating: "x", count: 1000)
        let total = 10_000
        let t0 = ContinuousClock.now
        var batch: [JSON] = []
        for i in 0..<total {
            batch.append(
                json(
                    #"{"_id":"doc\#(i)","_rev":"1-\#(String(i, radix: 16))","channels":["c\#(i % 100)"],"pad":"\#(pad)"}"#
                ))
            if batch.count == 500 {
                let rows = await f.db.bulkDocs(batch, newEdits: false, user: nil)
                #expect(rows.allSatisfy { $0["ok"]?.boolValue == true })
                batch.removeAll()
            }
        }
        let pushed = ContinuousClock.now - t0
        let t1 = ContinuousClock.now
        let all = try await f.db.changes(ChangesQuery(), user: nil)
        let adminFeed = ContinuousClock.now - t1
        #expect(all.rows.count == total)
        let one = try #require(f.db.userContext("one"))
        let t2 = ContinuousClock.now
        let mine = try await f.db.changes(ChangesQuery(), user: one)
        let userFeed = ContinuousClock.now - t2
        #expect(mine.rows.filter { $0.id.hasPrefix("doc") }.count == total / 100)
        let t3 = ContinuousClock.now
        var read = 0
        for i in stride(from: 0, to: total, by: 10) {
            if try await f.db.get("doc\(i)", revs: true, user: nil).body["pad"] != nil { read += 1 }
        }
        let reads = ContinuousClock.now - t3
        #expect(read == total / 10)
        func rate(_ n: Int, _ d: Duration) -> Int {
            Int(Double(n) / (Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18))
        }
        print(
            "gateway core (debug): bulk_docs new_edits=false \(rate(total, pushed)) docs/s; admin _changes of "
                + "\(total) in \(adminFeed); one-channel _changes in \(userFeed); GET \(rate(read, reads)) docs/s")
        await f.close()
    }
}
