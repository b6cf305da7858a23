import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// Over HTTP, a `_changes` answer longer than `Limits.gatewayChangesPageRows` is read and written a page at a time
/// (`ChangesPager`): it streams, and a client sees every row once, in order, whatever the feed.
@Suite struct ChangesPagesHTTPTests {
    /// Documents `p0` ... `p(count-1)` through `_bulk_docs`, 500 to a request.
    static func fill(_ gw: InProcessGateway, count: Int) async throws {
        for start in stride(from: 0, to: count, by: 500) {
            let docs = (start..<min(count, start + 500)).map { #"{"_id":"p\#($0)","channels":["x"],"n":\#($0)}"# }
            let reply = try await gw.request(
                "POST", "/db/_bulk_docs", body: #"{"docs":[\#(docs.joined(separator: ","))]}"#)
            #expect(reply.status == 201)
        }
    }

    /// A feed's document rows in order, checked: each id once, sequences rising.
    static func rows(_ rows: [JSON]) -> [(id: String, seq: UInt64)] {
        let out = rows.compactMap { row -> (id: String, seq: UInt64)? in
            guard let id = row["id"]?.stringValue, id.hasPrefix("p"),
                let seq = row["seq"].flatMap({ ChangesSince($0.stringValue ?? "\($0.intValue ?? -1)") })?.seq
            else { return nil }
            return (id, seq)
        }
        #expect(Set(out.map(\.id)).count == out.count, "a row sent twice")
        #expect(zip(out, out.dropFirst()).allSatisfy { $0.seq < $1.seq }, "sequences out of order")
        return out
    }

    /// Proves, with 2.5 pages of documents: the normal feed streams (no `Content-Length`) every row once in order
    /// and ends at a `last_seq` at or past its last row; `limit` cuts across pages and `last_seq` is then the last
    /// row's; an answer of one page is buffered as before (`Content-Length`); a longpoll with rows and a continuous
    /// feed carry every row once in order too.
    @Test func answersLongerThanAPageStreamEveryRowOnce() async throws {
        let gw = try await InProcessGateway.start(config: IncludeDocsChunkTests.config)
        let count = Limits.gatewayChangesPageRows * 5 / 2
        try await Self.fill(gw, count: count)

        let normal = try await gw.request("GET", "/db/_changes")
        #expect(normal.status == 200)
        #expect(normal.contentLength == nil, "a multi-page answer is streamed")
        let all = Self.rows(normal.body["results"]?.arrayValue ?? [])
        #expect(all.count == count)
        let last = normal.body["last_seq"].flatMap { ChangesSince($0.stringValue ?? "") }?.seq ?? 0
        #expect(last >= all.last?.seq ?? .max)

        let cut = Limits.gatewayChangesPageRows * 3 / 2
        let limited = try await gw.request("GET", "/db/_changes?limit=\(cut)")
        let limitedRows = Self.rows(limited.body["results"]?.arrayValue ?? [])
        #expect(limitedRows.map(\.id) == Array(all.prefix(cut)).map(\.id))
        #expect(limited.body["last_seq"]?.stringValue == "\(all[cut - 1].seq)")

        let small = try await gw.request("GET", "/db/_changes?limit=10")
        #expect(small.contentLength != nil, "one page stays buffered")
        #expect(Self.rows(small.body["results"]?.arrayValue ?? []).map(\.id) == Array(all.prefix(10)).map(\.id))

        let longpoll = try await gw.request("GET", "/db/_changes?feed=longpoll")
        #expect(Self.rows(longpoll.body["results"]?.arrayValue ?? []).map(\.id) == all.map(\.id))

        let continuous = try await gw.request("GET", "/db/_changes?feed=continuous&limit=\(count)")
        let lines = continuous.bytes.split(separator: UInt8(ascii: "\n")).filter { !$0.isEmpty }
        let continuousRows = Self.rows(lines.compactMap { try? JSON.parse(Array($0)) })
        #expect(continuousRows.map(\.id) == all.map(\.id))
        await gw.stop()
    }

    /// Proves `_all_docs` over 2.5 pages: streamed, every live document once in id order with `total_rows`; `skip`
    /// and `limit` carried across pages; `startkey`/`endkey` cut before rows are built; `keys` (more than a page,
    /// missing ones included) answered in the request's order; an answer of one page stays buffered; a HEAD of
    /// either feed gets the GET's status and length headers and no body.
    @Test func allDocsLongerThanAPageIsBuiltAPageAtATime() async throws {
        let gw = try await InProcessGateway.start(config: IncludeDocsChunkTests.config)
        let count = Limits.gatewayChangesPageRows * 5 / 2
        try await Self.fill(gw, count: count)
        let sorted = (0..<count).map { "p\($0)" }.sorted()
        func ids(_ reply: InProcessGateway.Reply) -> [String] {
            (reply.body["rows"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue ?? $0["key"]?.stringValue }
        }

        let all = try await gw.request("GET", "/db/_all_docs")
        #expect(all.status == 200)
        #expect(all.contentLength == nil, "a multi-page answer is streamed")
        #expect(ids(all) == sorted)
        #expect(all.body["total_rows"]?.intValue == count)

        let skip = Limits.gatewayChangesPageRows - 300
        let limit = Limits.gatewayChangesPageRows + 200
        let cut = try await gw.request("GET", "/db/_all_docs?skip=\(skip)&limit=\(limit)")
        #expect(ids(cut) == Array(sorted[skip..<(skip + limit)]))
        #expect(cut.body["total_rows"]?.intValue == limit)

        let range = try await gw.request("GET", #"/db/_all_docs?startkey="p1"&endkey="p1999""#)
        #expect(ids(range) == sorted.filter { $0 >= "p1" && $0 <= "p1999" })

        let keys = (0..<(Limits.gatewayChangesPageRows + 100)).map { $0 % 7 == 3 ? "missing\($0)" : "p\($0 * 2)" }
        let quoted = keys.map { "\"\($0)\"" }.joined(separator: ",")
        let byKeys = try await gw.request("POST", "/db/_all_docs", body: #"{"keys":[\#(quoted)]}"#)
        #expect(ids(byKeys) == keys)
        let missing = (byKeys.body["rows"]?.arrayValue ?? []).filter { $0["error"]?.stringValue == "not_found" }
        #expect(missing.count == keys.filter { $0.hasPrefix("missing") }.count)

        let small = try await gw.request("GET", "/db/_all_docs?limit=10")
        #expect(small.contentLength != nil, "one page stays buffered")
        #expect(ids(small) == Array(sorted.prefix(10)))

        // A HEAD answers as the GET would, with no body: no length past a page (the GET streams), the GET's length
        // within one.
        for path in [
            "/db/_all_docs", "/db/_all_docs?include_docs=true", "/db/_changes", "/db/_changes?include_docs=true",
        ] {
            let head = try await gw.request("HEAD", path)
            #expect(head.status == 200, "\(path)")
            #expect(head.bytes.isEmpty, "\(path)")
            #expect(head.contentLength == nil, "\(path)")
        }
        // The answer ends with the database's stable `update_seq`, which may still move while the writes above
        // settle (a loaded machine leaves sequences pending longer): compare a HEAD with the GETs either side of it
        // once those two agree, trying for as long as the sequences may take to settle.
        var compared = false
        let settleBy = ContinuousClock.now + .seconds(60)
        while !compared && ContinuousClock.now < settleBy {
            let before = try await gw.request("GET", "/db/_all_docs?limit=10")
            let smallHead = try await gw.request("HEAD", "/db/_all_docs?limit=10")
            let after = try await gw.request("GET", "/db/_all_docs?limit=10")
            #expect(smallHead.status == 200)
            #expect(smallHead.bytes.isEmpty)
            guard before.bytes == after.bytes else { continue }
            #expect(smallHead.contentLength == before.contentLength)
            compared = true
        }
        #expect(compared, "two GETs of _all_docs?limit=10 either side of a HEAD never agreed within 60 s")
        await gw.stop()
    }

    /// Proves a continuous feed with heartbeats ends its answer cleanly (a complete chunked body, every row sent
    /// before it) when its database is taken offline while the feed waits. (A page refused because the database went
    /// offline between the feed's check and its read ends it the same way, `catch is GatewayError`; that race has no
    /// test.)
    @Test func aContinuousFeedEndsWhenItsDatabaseGoesOffline() async throws {
        let gw = try await InProcessGateway.start(config: IncludeDocsChunkTests.config)
        try await Self.fill(gw, count: 3)
        async let feed = gw.request("GET", "/db/_changes?feed=continuous&heartbeat=100")
        try await Task.sleep(for: .milliseconds(500))
        #expect(try await gw.request("POST", "/db/_offline").status == 200)
        let reply = try await feed
        #expect(reply.status == 200)
        let lines = reply.bytes.split(separator: UInt8(ascii: "\n")).filter { !$0.isEmpty }
        let rows = Self.rows(lines.compactMap { try? JSON.parse(Array($0)) })
        #expect(Set(rows.map(\.id)) == ["p0", "p1", "p2"])
        await gw.stop()
    }
}
