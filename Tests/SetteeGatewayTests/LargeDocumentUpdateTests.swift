import Foundation
import SetteeCore
import SetteeDocument
import SetteeGateway
import SetteeJSON
import Testing

/// Large documents keep being updatable: the ancestor bodies a document keeps are bounded in bytes
/// (`Limits.gatewayKeptAncestorBodyBytes`), not only in generations.
@Suite struct LargeDocumentUpdateTests {
    /// Proves a 3 MiB document takes 8 updates in the 1.x layout (before, its item held 21 copies of the body and the
    /// sixth update passed the value limit: 413), and a 60 KB one 30 updates with shared bucket access (before, about
    /// the seventeenth passed the 1 MiB system XATTR). After them the item holds less than twice the body, recent
    /// small ancestors are still readable by revision, and the document reads back whole.
    @Test func largeDocumentsStayUpdatable() async throws {
        var shared = DatabaseOptions(name: "db")
        shared.sharedBucketAccess = true
        for (options, size, updates) in [(DatabaseOptions(name: "db"), 3 << 20, 8), (shared, 60_000, 30)] {
            let f = try await Fixture.open(options)
            let pad = String(repeating: "x", count: size)
            var rev = try await f.db.put("big", body: json(#"{"n":0,"pad":"\#(pad)"}"#), user: nil)
            for n in 1...updates {
                rev = try await f.db.put(
                    "big", body: json(#"{"_rev":"\#(rev)","n":\#(n),"pad":"\#(pad)"}"#), user: nil)
            }
            #expect(rev.generation == updates + 1)
            let (body, _) = try await f.db.get("big", user: nil)
            #expect(body["n"]?.intValue == updates && body["pad"]?.stringValue?.utf8.count == size)
            let item = try #require(try await f.bucket.get("big"))
            #expect(item.value.count < 2 * size + 300_000, "the item holds \(item.value.count) bytes")
            // A small document keeps its recent ancestors' bodies as before.
            var small = try await f.db.put("small", body: json(#"{"n":0}"#), user: nil)
            var history = [small]
            for n in 1...5 {
                small = try await f.db.put("small", body: json(#"{"_rev":"\#(small)","n":\#(n)}"#), user: nil)
                history.append(small)
            }
            for (n, r) in history.enumerated() {
                #expect(try await f.db.get("small", rev: r, user: nil).body["n"]?.intValue == n)
            }
            await f.close()
        }
    }
}
