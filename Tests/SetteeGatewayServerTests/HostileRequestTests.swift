import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeGateway

/// Requests that used to kill `settee-gateway` with one message: an empty database name or document
/// id, a revision generation at `Int.max`, a password holding NUL.
@Suite(.serialized) struct HostileRequestTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]},
                    "alice": {"password": "alice-pw", "admin_channels": ["*"]}}}}}
        """

    @Test(arguments: ["//x/y", "//x", "//_all_docs", "/db//x", "//", "/db/_user//", "/db/_local//x", "/db/doc//a"])
    func emptyNamesAreNotRoutes(path: String) {
        // Proves a path with an empty database name or document id matches no endpoint on either port.
        // Before, `//x/y` resolved to a document of database "", which skipped the database lookup and
        // authentication and hit a precondition in the handler.
        #expect(GatewayRoute.match(method: "GET", path: path, admin: false) == .notFound)
        #expect(GatewayRoute.match(method: "GET", path: path, admin: true) == .notFound)
    }

    @Test func emptyNamesAnswer404OnThePublicPortAndTheGatewayLives() async throws {
        // Proves the public port, unauthenticated, answers 404 to the paths that crashed the gateway,
        // and still serves a real document afterwards (a crash would have taken this process down).
        let gw = try await InProcessGateway.start(config: Self.config)
        #expect(try await gw.request("PUT", "/db/doc", body: #"{"channels":["x"],"a":1}"#).status == 201)
        for path in ["//x/y", "//x", "//_all_docs", "/db//x"] {
            let reply = try await gw.request("GET", path, admin: false)
            #expect(reply.status == 404, "\(path): \(reply.status) \(reply.body)")
        }
        #expect(try await gw.request("GET", "/db/doc", admin: false).status == 200)
        await gw.stop()
    }

    @Test func hugeNumbersInQueriesAnswerWithoutA5xx() async throws {
        // Proves query numbers at the edges of UInt64/Int (since, limit, revs_limit, heartbeat) get an
        // answer below 500 from the gateway instead of trapping in arithmetic on them.
        let gw = try await InProcessGateway.start(config: Self.config)
        #expect(try await gw.request("PUT", "/db/doc", body: #"{"channels":["x"],"a":1}"#).status == 201)
        let max64 = "18446744073709551615"
        let maxInt = String(Int.max)
        for path in [
            "/db/_changes?since=\(max64)", "/db/_changes?since=\(max64):\(max64)",
            "/db/_changes?since=\(max64)::\(max64)",
            "/db/_changes?limit=\(maxInt)", "/db/_changes?since=0&limit=\(maxInt)&style=all_docs&include_docs=true",
            "/db/_changes?feed=longpoll&since=0&heartbeat=\(maxInt)&timeout=\(maxInt)",
            "/db/_all_docs?limit=\(maxInt)&skip=\(maxInt)", "/db/doc?revs=true&revs_limit=\(maxInt)",
            "/db/doc?open_revs=all&revs=true&revs_limit=\(maxInt)", "/db/doc?rev=\(maxInt)-a",
            "/db/doc?atts_since=%5B%22\(maxInt)-a%22%5D",
        ] {
            for admin in [false, true] {
                let reply = try await gw.request("GET", path, admin: admin)
                #expect(reply.status < 500, "\(path): \(reply.status) \(reply.body)")
            }
        }
        await gw.stop()
    }

    @Test func revisionGenerationsAreBoundedAndTheNextEditIsRefused() async throws {
        // Proves `new_edits=false` refuses a generation above `Limits.maxRevGeneration` with 400, stores
        // one at the limit, and an edit of that revision answers 400 instead of trapping on
        // `generation + 1` (before, the stored `9223372036854775807-a` made every later edit crash).
        let gw = try await InProcessGateway.start(config: Self.config)
        let huge = try await gw.request(
            "PUT", "/db/d1?new_edits=false", body: #"{"_rev":"9223372036854775807-a","v":1}"#)
        #expect(huge.status == 400, "\(huge.body)")
        let top = "\(Limits.maxRevGeneration)-a"
        let stored = try await gw.request("PUT", "/db/d2?new_edits=false", body: #"{"_rev":"\#(top)","v":1}"#)
        #expect(stored.status == 201, "\(stored.body)")
        let edit = try await gw.request("PUT", "/db/d2", body: #"{"_rev":"\#(top)","v":2}"#)
        #expect(edit.status == 400, "\(edit.body)")
        let viaQuery = try await gw.request("PUT", "/db/d2?rev=\(top)", body: #"{"v":2}"#)
        #expect(viaQuery.status == 400)
        #expect(try await gw.request("GET", "/db/d2").body["_rev"]?.stringValue == top)
        await gw.stop()
    }

    @Test func aRevisionsDigestWithASpaceIsRefusedAndTheDocumentStaysUsable() async throws {
        // Proves `new_edits=false` with `_revisions.ids` holding a digest a `_rev` could not hold ("x y") is
        // refused with 400 bad_request, by PUT and by `_bulk_docs` (a row with status 400), and stores
        // nothing: the document still reads and takes an edit. Before, the history was grafted and the stored
        // tree no longer parsed: readers got 404 "Not imported", writers 409, for good.
        let gw = try await InProcessGateway.start(config: Self.config)
        let created = try await gw.request("PUT", "/db/doc", body: #"{"channels":["x"],"v":1}"#)
        #expect(created.status == 201, "\(created.body)")
        let leaf = try #require(created.body["rev"]?.stringValue)
        let digest = String(leaf.dropFirst(2))
        let bad = #"{"_rev":"3-z","_revisions":{"start":3,"ids":["z","x y","\#(digest)"]},"v":3}"#
        let put = try await gw.request("PUT", "/db/doc?new_edits=false", body: bad)
        #expect(put.status == 400, "\(put.status) \(put.body)")
        #expect(put.body["error"]?.stringValue == "bad_request", "\(put.body)")
        #expect(put.body["reason"]?.stringValue?.contains("Invalid revision ID") == true, "\(put.body)")
        let bulk = try await gw.request(
            "POST", "/db/_bulk_docs", body: #"{"new_edits":false,"docs":[\#(bad.dropLast()),"_id":"doc"}]}"#)
        #expect(bulk.status == 201, "\(bulk.body)")
        #expect(bulk.body.arrayValue?.first?["status"]?.intValue == 400, "\(bulk.body)")

        let read = try await gw.request("GET", "/db/doc")
        #expect(read.status == 200 && read.body["_rev"]?.stringValue == leaf, "\(read.status) \(read.body)")
        let edit = try await gw.request("PUT", "/db/doc", body: #"{"_rev":"\#(leaf)","channels":["x"],"v":2}"#)
        #expect(edit.status == 201, "\(edit.status) \(edit.body)")
        #expect(try await gw.request("GET", "/db/doc").body["v"]?.intValue == 2)
        await gw.stop()
    }

    @Test func aPasswordWithNULIsRefusedNotHashed() async throws {
        // Proves a user PUT whose password holds NUL gets 400 and creates no user (bcrypt would cut it at
        // the NUL; before, hashing it reached a precondition and killed the gateway), and the gateway
        // goes on authenticating others.
        let gw = try await InProcessGateway.start(config: Self.config)
        let put = try await gw.request("PUT", "/db/_user/bob", body: #"{"password":"ab\u0000cdef"}"#)
        #expect(put.status == 400, "\(put.body)")
        #expect(try await gw.request("GET", "/db/_user/bob").status == 404)
        #expect(try await gw.request("GET", "/db/", admin: false, user: "alice").status == 200)
        await gw.stop()
    }

    @Test func aBodyOfTooManyJSONValuesIsRefused() async throws {
        // Proves an authenticated body of more than `GatewayHTTPLimits.maxRequestJSONValues` values is 400 naming the
        // bound (a document PUT, a `_bulk_docs`) and stores nothing (`JSONParseTests.valueLimit` proves the bound exact). Before, up to 64 MiB of `[0,0,…]` was parsed: about 24 times its size in
        // values (ADR 0113).
        let gw = try await InProcessGateway.start(config: Self.config)
        let bound = GatewayHTTPLimits.maxRequestJSONValues
        // `{"a":[0,…]}` of `values` values: the object, its member and the array, then one a zero.
        func doc(_ values: Int) -> String { #"{"a":["# + String(repeating: "0,", count: values - 4) + "0]}" }
        let over = try await gw.request("PUT", "/db/over", body: doc(bound + 1), admin: false, user: "alice")
        #expect(over.status == 400, "\(over.status) \(over.body)")
        #expect(over.body["reason"]?.stringValue?.contains("more than \(bound) values") == true, "\(over.body)")
        #expect(try await gw.request("GET", "/db/over").status == 404)
        let bulk = try await gw.request(
            "POST", "/db/_bulk_docs", body: #"{"docs":["# + doc(bound - 2) + "]}", admin: false, user: "alice")
        #expect(bulk.status == 400, "\(bulk.status) \(bulk.body)")
        #expect(try await gw.request("PUT", "/db/small", body: doc(5), admin: false, user: "alice").status == 201)
        await gw.stop()
    }

    @Test func bodiesNested100000DeepAreRefusedByEveryEndpointAndTheGatewayLives() async throws {
        // Proves a body nesting 100,000 arrays, sent as a document, inside a document, and as every other JSON body
        // the gateway reads (both ports), is answered below 500 without overflowing a stack, stores nothing, and a
        // too-deep `_bulk_docs` row fails alone in both modes (its neighbour is written); the gateway then serves.
        let gw = try await InProcessGateway.start(config: Self.config)
        let hostile = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let inDocument = #"{"channels":["x"],"d":"# + hostile + "}"
        let bodies: [(String, String, String)] = [
            ("PUT", "/db/deep", inDocument), ("PUT", "/db/deep", hostile), ("POST", "/db/", inDocument),
            ("PUT", "/db/deep?new_edits=false", #"{"_rev":"1-a","d":"# + hostile + "}"),
            ("PUT", "/db/_local/deep", inDocument), ("POST", "/db/_bulk_docs", hostile),
            ("POST", "/db/_bulk_docs", #"{"docs":"# + hostile + "}"),
            ("POST", "/db/_bulk_docs", #"{"new_edits":false,"x":"# + hostile + #","docs":[]}"#),
            ("POST", "/db/_bulk_get", #"{"docs":"# + hostile + "}"), ("POST", "/db/_revs_diff", hostile),
            ("POST", "/db/_all_docs", #"{"keys":"# + hostile + "}"), ("POST", "/db/_changes", hostile),
            ("POST", "/db/_session", hostile),
        ]
        for (method, path, body) in bodies {
            for admin in [false, true] {
                let reply = try await gw.request(method, path, body: body, admin: admin, user: admin ? nil : "alice")
                // `{"docs":[[[…` is one too-deep document: 201 with its row refused (below); every other body is 4xx.
                let refused = reply.status >= 400 || reply.body.arrayValue?.allSatisfy { $0["status"] == 400 } == true
                #expect(refused && reply.status < 500, "\(method) \(path): \(reply.status) \(reply.body)")
            }
        }
        for (method, path) in [("PUT", "/db/_user/deep"), ("PUT", "/db/_role/deep"), ("PUT", "/db/_config")] {
            let reply = try await gw.request(method, path, body: hostile)
            #expect(reply.status >= 400 && reply.status < 500, "\(method) \(path): \(reply.status) \(reply.body)")
        }
        #expect(try await gw.request("GET", "/db/deep").status == 404)
        for newEdits in [true, false] {
            let rev = newEdits ? "" : #","_rev":"1-a""#
            let body =
                #"{"new_edits":\#(newEdits),"docs":[{"_id":"hostile\#(newEdits)"\#(rev),"d":"# + hostile
                + #"},{"_id":"fine\#(newEdits)","channels":["x"]\#(rev)}]}"#
            let reply = try await gw.request("POST", "/db/_bulk_docs", body: body, admin: false, user: "alice")
            #expect(reply.status == 201, "\(reply.status) \(reply.body)")
            let rows = reply.body.arrayValue ?? []
            #expect(rows.count == 2 && rows.first?["status"]?.intValue == 400, "\(reply.body)")
            #expect(rows.first?["id"]?.stringValue == "hostile\(newEdits)", "\(reply.body)")
            #expect(rows.last?["rev"]?.stringValue != nil, "\(reply.body)")
        }
        #expect(try await gw.request("PUT", "/db/after", body: #"{"channels":["x"]}"#).status == 201)
        await gw.stop()
    }
}

@Suite struct HostileChangesOptionsTests {
    @Test func commaListsAreCountedBeforeTheyAreSplit() throws {
        // Proves a `channels` or `doc_ids` string of more than `GatewayHTTPLimits.maxBulkItems` comma-separated items
        // is 413 before it is split (a POST body's 64 MiB of `a,a,…` became 32 M strings, over a gigabyte, before the
        // count was checked on the deduplicated set), and one of exactly that many is split as before.
        let max = GatewayHTTPLimits.maxBulkItems
        let over = String(repeating: "a,", count: max) + "a"
        for (filter, name) in [("sync_gateway/bychannel", "channels"), ("_doc_ids", "doc_ids")] {
            let body = JSON.object([("filter", .string(filter)), (name, .string(over))])
            do {
                _ = try ChangesOptions.parse(ChangesOptions.merge(query: [:], body: body))
                Issue.record("\(name): \(max + 1) items were split")
            } catch { #expect(error.status == 413 && error.reason == "Too many \(name) (max \(max))") }
        }
        let exact = String(repeating: "a,", count: max - 1) + "b"
        let o = try ChangesOptions.parse(
            ChangesOptions.merge(query: [:], body: .object([("filter", "_doc_ids"), ("doc_ids", .string(exact))])))
        #expect(o.query.docIDs == ["a", "b"])
    }

    @Test func hugeHeartbeatAndTimeoutAreCapped() throws {
        // Proves `_changes` heartbeat and timeout of `Int.max` ms are cut to the longest feed, so no
        // deadline is computed from them.
        let o = try ChangesOptions.parse(
            ChangesOptions.merge(query: ["heartbeat": String(Int.max), "timeout": String(Int.max)], body: nil))
        #expect(o.heartbeatMs == GatewayHTTPLimits.changesMaxTimeoutMs)
        #expect(o.timeoutMs == GatewayHTTPLimits.changesMaxTimeoutMs)
    }
}
