import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

@Suite struct ChangesOptionsTests {
    static func parse(_ query: [String: String], body: String? = nil) throws -> ChangesOptions {
        let json = try body.map { try JSON.parse($0) }
        return try ChangesOptions.parse(ChangesOptions.merge(query: query, body: json))
    }

    @Test func queryOverridesBodyAndValuesParse() throws {
        // Proves query values win over POST body values, `since` accepts numbers and compound strings,
        // a short heartbeat is raised to the 25 s floor and the timeout is capped.
        let o = try Self.parse(
            ["feed": "longpoll", "heartbeat": "1000", "timeout": "99999999"],
            body: #"{"feed":"normal","since":"5:12","include_docs":true,"style":"all_docs","limit":3}"#)
        #expect(o.feed == .longpoll)
        #expect(o.query.since.description == "5:12")
        #expect(o.query.includeDocs && o.query.styleAllDocs)
        #expect(o.query.limit == 3)
        #expect(o.heartbeatMs == 25_000)
        #expect(o.timeoutMs == 900_000)
        #expect(try Self.parse(["since": "42"]).query.since.seq == 42)
    }

    @Test func filtersFollowSyncGatewaysRules() throws {
        // Proves bychannel takes a comma list (query) or array (body), `_doc_ids` a JSON array, and the
        // reference's error cases are 400s with its reasons.
        #expect(try Self.parse(["filter": "sync_gateway/bychannel", "channels": "a,b"]).query.channels == ["a", "b"])
        #expect(
            try Self.parse([:], body: #"{"filter":"sync_gateway/bychannel","channels":["c"]}"#).query.channels == ["c"])
        #expect(try Self.parse(["filter": "_doc_ids", "doc_ids": #"["x","y"]"#]).query.docIDs == ["x", "y"])
        let cases: [([String: String], String)] = [
            (["feed": "sideways"], "Unknown feed type"),
            (["since": "abc"], "Invalid sequence"),
            (["filter": "sync_gateway/bychannel"], "Missing 'channels' filter parameter"),
            (["filter": "sync_gateway/bychannel", "channels": ""], "Empty channel list"),
            (["filter": "mine/only"], "Unknown filter; try sync_gateway/bychannel or _doc_ids"),
            (
                ["filter": "_doc_ids", "doc_ids": "[]", "feed": "longpoll"],
                "Filter '_doc_ids' is only supported with feed=normal"
            ),
        ]
        for (query, reason) in cases {
            do {
                _ = try Self.parse(query)
                Issue.record("accepted \(query)")
            } catch let e as GatewayError {
                #expect(e.status == 400)
                #expect(e.reason == reason)
            }
        }
    }
}

@Suite struct HeaderParsingTests {
    @Test func basicCredentialsAndSessionCookie() {
        // Proves Basic credentials decode (passwords may contain ':'), other schemes are ignored, and the
        // session cookie is found among others.
        let (name, password) = BasicAuth.parse("Basic amFuZTpwYTpzcw==") ?? ("", "")
        #expect(name == "jane" && password == "pa:ss")
        #expect(BasicAuth.parse("Bearer abc") == nil)
        #expect(GatewayResponder.sessionCookie("a=b; SyncGatewaySession=xyz; c=d") == "xyz")
        #expect(GatewayResponder.sessionCookie("SyncGatewaySession=") == nil)
    }

    @Test func acceptEncodingAndRanges() {
        // Proves gzip negotiation honours q=0 and wildcards, and byte ranges clamp to the body.
        #expect(GzipCodec.accepts("deflate, gzip;q=0.5"))
        #expect(!GzipCodec.accepts("gzip;q=0"))
        #expect(GzipCodec.accepts("*"))
        #expect(!GzipCodec.accepts(nil))
        #expect(DocumentHandlers.parseRange("bytes=2-4", length: 10)! == (2, 4))
        #expect(DocumentHandlers.parseRange("bytes=-3", length: 10)! == (7, 9))
        #expect(DocumentHandlers.parseRange("bytes=8-", length: 10)! == (8, 9))
        #expect(DocumentHandlers.parseRange("bytes=20-30", length: 10) == nil)
    }

    @Test func gzipRoundTrip() throws {
        // Proves a gzip-encoded body decodes to the original bytes and garbage is a 400.
        let original = Array(String(repeating: "settee ", count: 100).utf8)
        let zipped = try #require(GzipCodec.gzip(original))
        #expect(zipped.count < original.count)
        #expect(try GzipCodec.gunzip(zipped) == original)
        #expect(throws: GatewayError.self) { try GzipCodec.gunzip([1, 2, 3]) }
    }
}
