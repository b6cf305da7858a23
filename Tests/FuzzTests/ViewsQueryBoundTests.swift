import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeCore
import SetteeJSON
import SetteeRegistry
import SetteeStorage
import SetteeViewsServer
import Testing

@Suite struct ViewsQueryBoundTests {
    static let auth: HTTPFields = [.authorization: "Basic QWRtaW5pc3RyYXRvcjpwYXNzd29yZA=="]

    @Test func aQueryPastTheBoundIsA413AndTheSameQueryPagedAnswers() async throws {
        // Proves the views port refuses a query whose rows pass its bound (8 KiB here, injected; else
        // `Limits.viewMaxQueryResultBytes`) with 413 `{"error":"too_large","reason":...}`, the shape Couchbase clients
        // read a views error from, and keeps answering: the same query paged with `limit` and `startkey` answers, and
        // with the default bound the whole query answers as before. Before, a query without `limit` held every row.
        let node = try LoneNode("views-bound")
        defer { node.close() }
        let engine = try #require(node.registry.bucket(named: LoneNode.bucket.name))
        let pad = String(repeating: "p", count: 500)
        for n in 0..<40 {
            let key = "doc\(n)"
            _ = try engine.store(
                .set, VBucketHash.vbucket(forKey: key, count: LoneNode.bucket.numVBuckets), Array(key.utf8),
                value: Array(#"{"n":\#(n),"pad":"\#(pad)"}"#.utf8), flags: 0, expiry: 0, datatype: .json, cas: CAS(0))
        }
        let views = NodeViews(registry: node.registry, logger: node.logger)
        defer { views.shutdown() }
        let design = #"{"views":{"v":{"map":"function(d){ emit(d.n, d.pad); }"}}}"#
        let bounded = Application(
            router: ViewsServer.makeRouter(views: views, logger: node.logger, maxQueryBytes: 8 << 10))
        try await bounded.test(.router) { client in
            let put = try await client.execute(
                uri: "/b/_design/d", method: .put, headers: Self.auth, body: ByteBuffer(string: design))
            #expect(put.status.code == 201)
            let whole = try await client.execute(
                uri: "/b/_design/d/_view/v?stale=false", method: .get, headers: Self.auth)
            #expect(whole.status.code == 413)
            let error = try JSON.parse(Array(whole.body.readableBytesView))
            #expect(error["error"]?.stringValue == "too_large")
            #expect(error["reason"]?.stringValue?.contains("limit") == true)
            #expect(error["rows"] == nil)
            let first = try await client.execute(
                uri: "/b/_design/d/_view/v?stale=false&limit=5", method: .get, headers: Self.auth)
            #expect(first.status.code == 200)
            let page = try JSON.parse(Array(first.body.readableBytesView))
            #expect(page["rows"]?.arrayValue?.compactMap { $0["key"]?.intValue } == [0, 1, 2, 3, 4])
            let next = try await client.execute(
                uri: "/b/_design/d/_view/v?limit=5&startkey=5", method: .get, headers: Self.auth)
            #expect(next.status.code == 200)
            let second = try JSON.parse(Array(next.body.readableBytesView))
            #expect(second["rows"]?.arrayValue?.compactMap { $0["key"]?.intValue } == [5, 6, 7, 8, 9])
        }
        let open = Application(router: ViewsServer.makeRouter(views: views, logger: node.logger))
        try await open.test(.router) { client in
            let whole = try await client.execute(uri: "/b/_design/d/_view/v", method: .get, headers: Self.auth)
            #expect(whole.status.code == 200)
            let answer = try JSON.parse(Array(whole.body.readableBytesView))
            #expect(answer["total_rows"]?.intValue == 40)
            #expect(answer["rows"]?.arrayValue?.compactMap { $0["key"]?.intValue } == Array(0..<40))
        }
    }

    @Test func aBodyPastTheBoundIs413TooLarge() async throws {
        // Proves a design document PUT or a query POST whose body passes `Limits.maxViewsRequestBody` is answered 413
        // `{"error":"too_large","reason":...}`, as CouchDB answers a body past its bound, and a body within it is read
        // as before. Before, both were 400 "request body too large" (and so was any other body read failure).
        let node = try LoneNode("views-body-bound")
        defer { node.close() }
        let views = NodeViews(registry: node.registry, logger: node.logger)
        defer { views.shutdown() }
        let app = Application(router: ViewsServer.makeRouter(views: views, logger: node.logger))
        let pad = String(repeating: "p", count: Limits.maxViewsRequestBody)
        try await app.test(.router) { client in
            let hugeDesign = #"{"views":{"v":{"map":"function(d){ emit(d.n, null); }"}},"pad":"\#(pad)"}"#
            let put = try await client.execute(
                uri: "/b/_design/d", method: .put, headers: Self.auth, body: ByteBuffer(string: hugeDesign))
            #expect(put.status.code == 413)
            let putError = try JSON.parse(Array(put.body.readableBytesView))
            #expect(putError["error"]?.stringValue == "too_large")
            #expect(putError["reason"]?.stringValue?.contains("\(Limits.maxViewsRequestBody)") == true)

            let design = #"{"views":{"v":{"map":"function(d){ emit(d.n, null); }"}}}"#
            let fits = try await client.execute(
                uri: "/b/_design/d", method: .put, headers: Self.auth, body: ByteBuffer(string: design))
            #expect(fits.status.code == 201)
            let hugeKeys = #"{"keys":["\#(pad)"]}"#
            let post = try await client.execute(
                uri: "/b/_design/d/_view/v", method: .post, headers: Self.auth, body: ByteBuffer(string: hugeKeys))
            #expect(post.status.code == 413)
            #expect(try JSON.parse(Array(post.body.readableBytesView))["error"]?.stringValue == "too_large")
            let keys = try await client.execute(
                uri: "/b/_design/d/_view/v", method: .post, headers: Self.auth,
                body: ByteBuffer(string: #"{"keys":[1]}"#))
            #expect(keys.status.code == 200)
        }
    }
}
