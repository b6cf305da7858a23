import Foundation
import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// Sync Gateway's `import_filter` (docs: "Import Filter"; per collection since 3.1): a JavaScript function of a
/// document a KV client wrote that returns `true` when the gateway is to import it. Without sockets, over an
/// embedded bucket.
@Suite struct ImportFilterTests {
    static let mobileOnly = """
        function(doc) { if (doc._deleted === true) { return true; } return doc.type == "mobile"; }
        """

    static func options(filter: String?) -> DatabaseOptions {
        var o = DatabaseOptions(name: "db", importDocs: true)
        o.sharedBucketAccess = true
        o.importFilterSource = filter
        return o
    }

    static func write(_ f: Fixture, _ key: String, _ body: String) async throws -> [UInt8] {
        let bytes = Array(body.utf8)
        _ = try await f.bucket.upsert(key, value: bytes, expiry: 0)
        return bytes
    }

    /// Proves a document the filter refuses is not imported (no revision, absent from `_changes`, a read answers 404
    /// after refusing it again on demand) and stays in the bucket byte for byte as the application wrote it, while a
    /// document the filter accepts is imported; `import_filtered_count` counts each refusal and `import_error_count`
    /// none. The stream's refusal is awaited by its count before any read (the stream imports keys in parallel
    /// lanes, so the order of two keys' imports says nothing). A filter that throws or returns a non-boolean refuses.
    @Test func aRefusedDocumentIsNotImportedAndStaysAsWritten() async throws {
        let f = try await Fixture.open(Self.options(filter: Self.mobileOnly))
        let server = try await Self.write(f, "server-only", #"{"type":"server","channels":["a"]}"#)
        _ = try await Self.write(f, "mobile", #"{"type":"mobile","channels":["a"]}"#)
        #expect(await eventually { f.db.importStats.importFilteredCount == 1 })
        let imported = await eventually {
            (try? await f.db.get("mobile", user: nil).body["type"]?.stringValue) == "mobile"
        }
        #expect(imported)
        let rows = try await f.db.changes(ChangesQuery(), user: nil).rows
        #expect(rows.map(\.id) == ["mobile"])
        do {
            _ = try await f.db.get("server-only", user: nil)
            Issue.record("a document the filter refused was served")
        } catch {
            #expect(error.status == 404)
        }
        #expect(f.db.importStats.importFilteredCount == 2)
        #expect(try await f.bucket.get("server-only")?.value == server)
        #expect(f.db.importStats.importCount == 1)
        #expect(f.db.importStats.importErrorCount == 0)
        await f.close()

        // A filter that throws, or answers anything but `true`, refuses.
        for source in ["function(doc) { throw new Error('no'); }", "function(doc) { return 1; }"] {
            let g = try await Fixture.open(Self.options(filter: source))
            _ = try await Self.write(g, "d", #"{"type":"mobile"}"#)
            let refused = await eventually { g.db.importStats.importFilteredCount >= 1 }
            #expect(refused, "\(source)")
            #expect(g.db.importStats.importCount == 0)
            await g.close()
        }
    }

    /// Proves a filter that accepts deletions (as Sync Gateway's documentation asks) sees a KV delete as
    /// `{"_deleted": true}` and the deletion reaches `_changes` as a tombstone revision; one that does not accept them
    /// leaves the imported revision as it was.
    @Test func deletionsReachTheFilterAsDeletedTrue() async throws {
        let f = try await Fixture.open(Self.options(filter: Self.mobileOnly))
        _ = try await Self.write(f, "m", #"{"type":"mobile","channels":["a"]}"#)
        #expect(await eventually { (try? await f.db.get("m", user: nil)) != nil })
        try await f.bucket.remove("m", cas: .zero)
        let tombstoned = await eventually {
            let rows = try await f.db.changes(ChangesQuery(), user: nil).rows.filter { $0.id == "m" }
            return rows.count == 1 && rows[0].deleted
        }
        #expect(tombstoned)
        await f.close()

        let g = try await Fixture.open(Self.options(filter: #"function(doc) { return doc.type == "mobile"; }"#))
        _ = try await Self.write(g, "m", #"{"type":"mobile","channels":["a"]}"#)
        #expect(await eventually { (try? await g.db.get("m", user: nil)) != nil })
        let before = g.db.importStats.importFilteredCount
        try await g.bucket.remove("m", cas: .zero)
        #expect(await eventually { g.db.importStats.importFilteredCount > before })
        let rows = try await g.db.changes(ChangesQuery(), user: nil).rows.filter { $0.id == "m" }
        #expect(rows.allSatisfy { !$0.deleted })
        await g.close()
    }

    /// Proves `reconfigure` (`PUT /db/_config`) swaps the filter: a document the old filter refused is imported when
    /// written again under the new one, and a database without a filter imports everything; a source that does not
    /// compile is a 400 naming `import_filter`, and the filter in force stays.
    @Test func reconfigureSwapsTheFilter() async throws {
        let f = try await Fixture.open(Self.options(filter: Self.mobileOnly))
        _ = try await Self.write(f, "s", #"{"type":"server"}"#)
        #expect(await eventually { f.db.importStats.importFilteredCount >= 1 })
        do {
            try await f.db.reconfigure(Self.options(filter: "function(doc) {"))
            Issue.record("a filter that does not compile was accepted")
        } catch {
            #expect(error.status == 400 && error.reason.contains("import_filter"))
        }
        try await f.db.reconfigure(Self.options(filter: #"function(doc) { return doc.type == "server"; }"#))
        _ = try await Self.write(f, "s", #"{"type":"server","v":2}"#)
        #expect(await eventually { (try? await f.db.get("s", user: nil).body["v"]?.intValue) == 2 })
        try await f.db.reconfigure(Self.options(filter: nil))
        _ = try await Self.write(f, "t", #"{"type":"other"}"#)
        #expect(await eventually { (try? await f.db.get("t", user: nil)) != nil })
        await f.close()
    }

    /// Proves the config shapes: `import_filter` in a collection (Sync Gateway 3.1) and at the database (the legacy
    /// place) reach the keyspace; at the database beside `scopes` it is refused at its path.
    @Test func configPlacesTheFilterOnItsKeyspace() throws {
        let server = #""server":"http://127.0.0.1:8091""#
        let scoped = try GatewayConfig.parse(
            Array(
                #"{"databases":{"db":{\#(server),"scopes":{"s":{"collections":{"c":{"import_filter":"function(doc){return true;}"}}}}}}}"#
                    .utf8)
        ).databases.first
        #expect(scoped?.keyspaces.first?.importFilter == "function(doc){return true;}")
        let legacy = try GatewayConfig.parse(
            Array(#"{"databases":{"db":{"server":"walrus:","import_filter":"function(doc){return false;}"}}}"#.utf8)
        ).databases.first
        #expect(legacy?.keyspaces.first?.importFilter == "function(doc){return false;}")
        #expect(DatabaseOptions(config: try #require(legacy)).importFilterSource == "function(doc){return false;}")
        do {
            _ = try GatewayConfig.parse(
                Array(
                    #"{"databases":{"db":{\#(server),"import_filter":"f","scopes":{"s":{"collections":{"c":{}}}}}}}"#
                        .utf8))
            Issue.record("import_filter beside scopes was accepted")
        } catch {
            #expect(error.path == "databases.db.import_filter")
        }
    }

    /// Proves an import racing `PUT /db/_config` is answered by a filter, never refused because the filter it read was
    /// replaced before its call was queued: imports asked while the accept-all filter is swapped for another
    /// accept-all one 40 times all accept, and none is counted as filtered. The predicate itself gives no answer (nil)
    /// once shut down, and answers the calls queued before.
    @Test func anImportRacingAReconfigureIsAnsweredByTheFilterInForce() async throws {
        let all = "function(doc) { return true; }"
        let f = try await Fixture.open(Self.options(filter: all))
        let refused = await withTaskGroup(of: Int.self) { group in
            for n in 0..<4 {
                group.addTask {
                    var refused = 0
                    for i in 0..<200 where !(await f.db.importFilterAccepts(json(#"{"n":\#(i)}"#), id: "d\(n)")) {
                        refused += 1
                    }
                    return refused
                }
            }
            group.addTask {
                for i in 0..<40 {
                    try? await f.db.reconfigure(Self.options(filter: all + " // \(i)"))
                    await Task.yield()
                }
                return 0
            }
            return await group.reduce(0, +)
        }
        #expect(refused == 0)
        #expect(f.db.importStats.importFilteredCount == 0)
        await f.close()

        let p = try JavaScriptPredicate(source: all, threadName: "test.predicate")
        #expect(await p.answer(Array("{}".utf8)) == true)
        p.shutdown()
        #expect(await p.answer(Array("{}".utf8)) == nil)
        #expect(await p.accepts(Array("{}".utf8)) == false)
    }

    /// Proves an open that fails after the import filter and the webhooks' filters started stops their threads (a
    /// database that failed to open has no `close()`; each thread lived for the life of the process before): the
    /// second webhook's filter does not compile, so the first webhook's handler and the import filter, both made
    /// already, must be stopped. Each source is unique to this test, so other tests' threads are not counted.
    @Test func aFailedOpenStopsTheFilterThreadsItStarted() async throws {
        let tag = UInt64.random(in: 0...UInt64.max)
        let importSource = "function(doc) { return true; } // import \(tag)"
        let hookSource = "function(doc) { return true; } // hook \(tag)"
        var options = Self.options(filter: importSource)
        options.eventHandlers = EventHandlersConfig(documentChanged: [
            .init(url: "http://127.0.0.1:9/a", filter: hookSource),
            .init(url: "http://127.0.0.1:9/b", filter: "function(doc) {"),
        ])
        // The count sees a running predicate, and its end.
        let probe = try JavaScriptPredicate(source: importSource, threadName: "settee.test-probe")
        #expect(JavaScriptPredicate.liveThreads(source: importSource) == 1)
        probe.shutdown()
        #expect(await eventually { JavaScriptPredicate.liveThreads(source: importSource) == 0 })
        let bucket = try EmbeddedBucket(server: "walrus:", name: "test", logger: quietLogger())
        do {
            _ = try await GatewayDatabase(options: options, bucket: bucket, logger: quietLogger())
            Issue.record("a webhook filter that does not compile was accepted")
        } catch {
            #expect(error.status == 400 && error.reason.contains("event_handlers"))
        }
        #expect(await eventually { JavaScriptPredicate.liveThreads(source: importSource) == 0 })
        #expect(await eventually { JavaScriptPredicate.liveThreads(source: hookSource) == 0 })
        await bucket.close()
    }
}
