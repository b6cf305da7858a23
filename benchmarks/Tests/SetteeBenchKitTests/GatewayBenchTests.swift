import Histogram
import SetteeBenchKit
import SetteeJSON
import Testing

@Suite struct LatencyCurveTests {
    @Test func percentileAxisIsLogOfOneOverOneMinusP() {
        // Proves the x axis puts 90, 99, 99.9, 99.99 one decade apart and maps x back to the same percentile.
        #expect(abs(LatencyCurve.x(percentile: 90) - 1) < 1e-9)
        #expect(abs(LatencyCurve.x(percentile: 99.9) - 3) < 1e-9)
        #expect(abs(LatencyCurve.x(percentile: 99.99) - 4) < 1e-9)
        #expect(LatencyCurve.x(percentile: 100) == LatencyCurve.maxX)
        #expect(abs(LatencyCurve.percentile(x: 2) - 99) < 1e-9)
        let ps = LatencyCurve.percentiles
        #expect(ps.count == 51 && ps.first == 0 && abs(ps.last! - 99.999) < 1e-9)
    }

    @Test func pointsStopWhereTheSampleCountEnds() {
        // Proves a 1,000-sample histogram yields points up to p99.9 (not beyond) with the recorded latencies.
        var h = Histogram<UInt64>(
            lowestDiscernibleValue: 1, highestTrackableValue: 100_000_000_000, numberOfSignificantValueDigits: .three)
        for i in 1...1000 { _ = h.record(UInt64(i) * 1000) }  // 1 µs ... 1000 µs
        let points = LatencyCurve.points(h)
        #expect(abs(points.last!.percentile - 99.9) < 1e-9)
        let p50 = points.first { abs($0.percentile - 50) < 0.5 }!
        #expect(abs(p50.micros - 500) < 2)
        #expect(zip(points, points.dropFirst()).allSatisfy { $0.micros <= $1.micros })
    }

    @Test func medianIsPerPercentileAndDropsPointsNotInEveryRun() {
        // Proves the median of three curves takes the middle value at each percentile and the shortest length.
        let a = [PercentilePoint(percentile: 0, micros: 1), PercentilePoint(percentile: 50, micros: 10)]
        let b = [PercentilePoint(percentile: 0, micros: 3), PercentilePoint(percentile: 50, micros: 30)]
        let c = [
            PercentilePoint(percentile: 0, micros: 2), PercentilePoint(percentile: 50, micros: 20),
            PercentilePoint(percentile: 90, micros: 99),
        ]
        #expect(
            LatencyCurve.median([a, b, c]) == [
                PercentilePoint(percentile: 0, micros: 2), PercentilePoint(percentile: 50, micros: 20),
            ])
    }

    @Test func yTicksCoverTheDataOnOneTwoFiveSteps() {
        // Proves the log axis spans the data with 1-2-5 ticks and no tick outside its bounds.
        let axis = LatencyCurve.yTicks(low: 230, high: 41_000)
        #expect(axis.min <= 230 && axis.max >= 41_000)
        #expect(axis.min == 200 && axis.max == 50_000)
        #expect(axis.ticks == [200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000])
    }

    @Test func svgHasOneLinePerSeriesWithPointsAndEscapesNames() {
        // Proves the chart draws a polyline for each series with data, lists every series, and escapes names.
        let pts = [PercentilePoint(percentile: 0, micros: 100), PercentilePoint(percentile: 99, micros: 900)]
        let svg = LatencyCurve.svg(title: "t", series: [("a<b", pts), ("empty", []), ("c", pts)])
        #expect(svg.components("<polyline") == 2)
        #expect(svg.contains("a&lt;b") && svg.contains(">empty<") && !svg.contains("<script"))
        let none = LatencyCurve.svg(title: "t", series: [("x", [])])
        #expect(none.contains("no latency distribution"))
    }
}

@Suite struct GatewayRequestTests {
    @Test func pushedDocumentsAreValidJSONOfTheRequestedSizeWithRevisions() throws {
        // Proves a _bulk_docs body parses, carries new_edits=false, and each document is ~doc-size bytes with a
        // _rev whose digest is its _revisions id.
        let set = GatewayRequests.DocSet(prefix: "p", count: 10, docSize: 1024)
        var one: [UInt8] = []
        GatewayRequests.document(set, 3, into: &one)
        #expect(one.count == 1024)
        let body = try JSON.parse(GatewayRequests.bulkDocs(set, [0, 3, 9]))
        #expect(body["new_edits"] == .bool(false))
        let docs = try #require(body["docs"]?.arrayValue)
        #expect(docs.count == 3)
        #expect(docs[1]["_id"]?.stringValue == "p-000003")
        let rev = try #require(docs[1]["_rev"]?.stringValue)
        #expect(rev == "1-" + (docs[1]["_revisions"]?["ids"]?.arrayValue?.first?.stringValue ?? ""))
        #expect(rev.count == 34 && set.rev(3) == rev && set.rev(4) != rev)
    }

    @Test func revsDiffAndBulkGetBodies() throws {
        // Proves _revs_diff maps each id to its one revision and _bulk_get lists id/rev pairs, both as valid JSON.
        let set = GatewayRequests.DocSet(prefix: "q\"x", count: 5, docSize: 100)
        let diff = try JSON.parse(GatewayRequests.revsDiff(set, 1..<3))
        #expect(diff[set.id(1)]?.arrayValue == [.string(set.rev(1))])
        #expect(diff[set.id(2)] != nil && diff[set.id(0)] == nil)
        let get = try JSON.parse(GatewayRequests.bulkGet([(id: "a/b", rev: "1-x"), (id: "c", rev: "2-y")]))
        #expect(get["docs"]?.arrayValue?.count == 2 && get["docs"]?.arrayValue?[0]["id"]?.stringValue == "a/b")
        #expect(GatewayRequests.queryValue("12:34") == "12%3A34")
    }

    @Test func replyParserReadsGatewayShapes() throws {
        // Proves JSON reads a Sync Gateway _changes envelope (CRLF, string last_seq, escapes).
        let text =
            "{\"results\":[\r\n{\"seq\":5,\"id\":\"d\\u00e9\\n\",\"changes\":[{\"rev\":\"1-a\"}]}\n],\n\"last_seq\":\"5\"}\n"
        let json = try JSON.parse(Array(text.utf8))
        #expect(json["last_seq"]?.sequenceText == "5")
        #expect(json["results"]?.arrayValue?.first?["id"]?.stringValue == "dé\n")
        #expect(JSON.integer(12).sequenceText == "12")
        #expect(JSON.number(12.5).sequenceText == "12.5")
        #expect(throws: JSONError.self) { try JSON.parse(Array("{\"a\":".utf8)) }
    }

    @Test func targetsAreLoopbackDatabaseURLs() throws {
        // Proves gateway URLs parse with a label and admin URL, and non-loopback or db-less URLs are refused.
        let t = try GatewayTarget.parse("walrus@http://127.0.0.1:4984/db", admin: "http://127.0.0.1:4985/db")
        #expect(t.label == "walrus" && t.publicURL.port == 4984 && t.adminURL?.port == 4985)
        #expect(t.publicURL.path("/_changes") == "/db/_changes")
        #expect(try GatewayTarget.parse("http://localhost:1/x", admin: nil).label == "gateway@1")
        #expect(throws: GatewayEndpoint.ParseError.self) { try GatewayEndpoint.parse("http://10.0.0.1:4984/db") }
        #expect(throws: GatewayEndpoint.ParseError.self) { try GatewayEndpoint.parse("http://127.0.0.1:4984/") }
    }
}

extension String {
    fileprivate func components(_ needle: String) -> Int {
        var n = 0
        var rest = Substring(self)
        while let r = rest.firstRange(of: needle) {
            n += 1
            rest = rest[r.upperBound...]
        }
        return n
    }
}
