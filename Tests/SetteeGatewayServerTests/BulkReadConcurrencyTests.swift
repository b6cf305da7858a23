import SetteeCore
import SetteeJSON
import Synchronization
import Testing

@testable import SetteeGateway

/// `_bulk_docs`, `_revs_diff` and `_bulk_get` do their per-document work a few documents at a time
/// (`BoundedConcurrency`): answers keep the request's order whatever finishes first, and no more than the width
/// runs at once.
@Suite struct BulkReadConcurrencyTests {
    /// Proves results come back in index order even when later indices finish first, that no more than `width`
    /// bodies run at once (and that many do), and that every index runs exactly once.
    @Test func resultsKeepTheirOrderAndTheWidthHolds() async {
        let running = Atomic<Int>(0)
        let most = Atomic<Int>(0)
        let runs = Mutex<[Int]>([])
        let results = await BoundedConcurrency.map(40, width: 4) { i -> Int in
            let now = running.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
            var seen = most.load(ordering: .sequentiallyConsistent)
            while now > seen {
                let (exchanged, original) = most.compareExchange(
                    expected: seen, desired: now, ordering: .sequentiallyConsistent)
                if exchanged { break }
                seen = original
            }
            // Early indices sleep longest, so completions arrive out of order.
            try? await Task.sleep(for: .milliseconds(i % 4 == 0 ? 20 : 1))
            runs.withLock { $0.append(i) }
            running.wrappingAdd(-1, ordering: .sequentiallyConsistent)
            return i * 10
        }
        #expect(results == (0..<40).map { $0 * 10 })
        #expect(most.load(ordering: .sequentiallyConsistent) <= 4)
        #expect(most.load(ordering: .sequentiallyConsistent) >= 2)
        #expect(runs.withLock { $0.sorted() } == Array(0..<40))
        #expect(runs.withLock { $0 } != Array(0..<40), "completions should not all arrive in index order")
    }

    /// Proves a `keepGoing` that says stop starts nothing more: only the indices already running finish, the rest
    /// are nil.
    @Test func stoppingStartsNothingMore() async {
        let started = Atomic<Int>(0)
        let results = await BoundedConcurrency.map(100, width: 3, keepGoing: { $0 < 5 }) { i -> Int in
            started.wrappingAdd(1, ordering: .sequentiallyConsistent)
            return i
        }
        let ran = results.compactMap { $0 }
        // The value 5 stops it; at most width - 1 more were already running.
        #expect(ran.contains(5))
        #expect(ran.count <= 5 + 1 + 2)
        #expect(started.load(ordering: .sequentiallyConsistent) == ran.count)
        #expect(results.count == 100)
        #expect(results[99] == nil)
    }

    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}},
          "sync": `function(doc) { channel(doc.channels); }`}}}
        """

    /// Writes `<prefix>0` ... `<prefix>(count-1)`, each `{"channels":["x"],"n":i}`; their revisions by id.
    static func putDocuments(_ gw: InProcessGateway, prefix: String, count: Int) async throws -> [String: String] {
        var revs: [String: String] = [:]
        for n in 0..<count {
            let reply = try await gw.request("PUT", "/db/\(prefix)\(n)", body: #"{"channels":["x"],"n":\#(n)}"#)
            #expect(reply.status == 201)
            revs["\(prefix)\(n)"] = reply.body["rev"]?.stringValue
        }
        return revs
    }

    /// Proves `_bulk_get`, whose reads now overlap, answers one result per distinct item in the request's order,
    /// each with its own document, revision or error: found, missing, a bad revision, an unknown revision, an item
    /// without an id.
    @Test func bulkGetAnswersInTheRequestsOrder() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let revs = try await Self.putDocuments(gw, prefix: "d", count: 30)
        var items: [String] = []
        var expected: [(id: String, outcome: String)] = []
        for n in (0..<30).reversed() {
            items.append(#"{"id":"d\#(n)"}"#)
            expected.append(("d\(n)", "ok:\(n)"))
            if n % 7 == 0 {
                items.append(#"{"id":"missing\#(n)"}"#)
                expected.append(("missing\(n)", "error"))
                items.append(#"{"id":"d\#(n)","rev":"not-a-rev"}"#)
                expected.append(("d\(n)", "error"))
                items.append(#"{"id":"d\#(n)","rev":"9-ffff"}"#)
                expected.append(("d\(n)", "error"))
            }
        }
        items.append(#"{"rev":"1-abc"}"#)
        expected.append(("", "error"))
        let reply = try await gw.request(
            "POST", "/db/_bulk_get?revs=true", body: #"{"docs":[\#(items.joined(separator: ","))]}"#)
        #expect(reply.status == 200)
        let results = reply.body["results"]?.arrayValue ?? []
        #expect(results.count == expected.count)
        for (row, want) in zip(results, expected) {
            #expect(row["id"]?.stringValue == want.id)
            let doc = row["docs"]?.arrayValue?.first
            if want.outcome == "error" {
                #expect(doc?["error"] != nil, "\(want.id): \(row)")
            } else {
                let n = Int(want.outcome.dropFirst(3))
                #expect(doc?["ok"]?["n"]?.intValue == n, "\(want.id): \(row)")
                #expect(doc?["ok"]?["_rev"]?.stringValue == revs[want.id])
                #expect(doc?["ok"]?["_revisions"] != nil)
            }
        }
        await gw.stop()
    }

    /// Proves `_changes?include_docs=true` and `_all_docs?include_docs=true`, whose bodies are now read a few at a
    /// time, give every row its own document (and a deleted one none), with `doc` where it was before
    /// (`_all_docs`: after `value`, before `update_seq`).
    @Test func includeDocsRowsCarryTheirOwnDocuments() async throws {
        let gw = try await InProcessGateway.start(config: Self.config)
        let revs = try await Self.putDocuments(gw, prefix: "e", count: 40)
        let gone = try await gw.request("DELETE", "/db/e7?rev=\(revs["e7"] ?? "")")
        #expect(gone.status == 200)

        let changes = try await gw.request("GET", "/db/_changes?include_docs=true")
        var seen = 0
        for row in changes.body["results"]?.arrayValue ?? [] {
            guard let id = row["id"]?.stringValue, id.hasPrefix("e"), let n = Int(id.dropFirst()) else { continue }
            seen += 1
            if n == 7 {
                #expect(row["doc"]?["_deleted"]?.boolValue == true)
                #expect(row["doc"]?["n"] == nil)
            } else {
                #expect(row["doc"]?["n"]?.intValue == n, "\(row)")
                #expect(row["doc"]?["_rev"]?.stringValue == revs[id])
            }
        }
        #expect(seen == 40)

        let keys = (0..<40).reversed().map { #""e\#($0)""# } + [#""nope""#]
        let body = #"{"keys":[\#(keys.joined(separator: ","))]}"#
        let all = try await gw.request("POST", "/db/_all_docs?include_docs=true&update_seq=true", body: body)
        #expect(all.status == 200)
        let rows = all.body["rows"]?.arrayValue ?? []
        #expect(rows.count == 41)
        for (row, n) in zip(rows, (0..<40).reversed()) {
            #expect(row["id"]?.stringValue == "e\(n)")
            if n == 7 {
                #expect(row["doc"] == nil)
                continue
            }
            #expect(row["doc"]?["n"]?.intValue == n, "\(row)")
            guard case .object(let members) = row else {
                Issue.record("row is not an object")
                continue
            }
            #expect(members.map(\.0) == ["key", "id", "value", "doc", "update_seq"])
        }
        #expect(rows.last?["error"]?.stringValue == "not_found")
        await gw.stop()
    }
}
