import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

@testable import SetteeGateway

/// Issue 69 item 6: the write path serializes a `PUT`'s body once and reuses those bytes for the item. These prove
/// the reused bytes are exactly what serializing again would give, in both layouts, so no reader can tell.
@Suite struct WritePathBytesTests {
    /// `StoredDocument.appending(member:_:to:)` is byte for byte the serialization of the object with the member
    /// added at its end: empty bodies, nested values, escapes and unicode names included.
    @Test func appendingAMemberEqualsSerializingTheWholeObject() throws {
        let sync = try JSON.parse(Array(#"{"rev":"2-ab","history":{"revs":["2-ab","1-cd"]},"n":[1,2.5,null]}"#.utf8))
        let bodies: [String] = [
            "{}", #"{"a":1}"#, #"{"a":{"b":[1,{"c":"d\"e"}]},"é\u0001":"\ud83d\ude00","z":-0.5,"t":true}"#,
            #"{"_attachments":{"x":{"stub":true}},"k":"v"}"#,
        ]
        for text in bodies {
            guard case .object(let members) = try JSON.parse(Array(text.utf8)) else {
                Issue.record("\(text) is not an object")
                continue
            }
            let whole = JSON.object(members + [("_sync", sync)]).serialized()
            let appended = StoredDocument.appending(member: "_sync", sync, to: JSON.object(members).serialized())
            #expect(appended == whole, "\(text)")
        }
    }

    /// A document written by `put` (new, updated, with and without attachments) is stored with the same item bytes
    /// as one whose body is serialized from its members, in the shared and the 1.x layout: its `_sync` body digest
    /// matches the body's bytes (so it is never taken for a KV client's write) and it reads back unchanged.
    @Test(arguments: [true, false])
    func putStoresTheBytesSerializingWouldGive(shared: Bool) async throws {
        var options = DatabaseOptions(name: "db")
        options.sharedBucketAccess = shared
        let f = try await Fixture.open(options)
        let rev1 = try await f.db.put("d", body: json(#"{"b":{"c":[1,2,{"d":"é"}]},"a":"x"}"#), user: nil)
        let rev2 = try await f.db.put("d", body: json(#"{"_rev":"\#(rev1)","a":"y","n":2}"#), user: nil)
        let withAttachment = try await f.db.put(
            "e", body: json(#"{"k":1,"_attachments":{"t.txt":{"content_type":"text/plain","data":"aGk="}}}"#),
            user: nil)
        for (id, rev, expected) in [
            ("d", rev2, #"{"a":"y","n":2}"#), ("e", withAttachment, #"{"k":1}"#),
        ] {
            guard case .found(let doc) = try await f.db.load(id) else {
                Issue.record("\(id) was not read back as a gateway document")
                continue
            }
            #expect(doc.meta.tree.winner == rev, "\(id)")
            let app = JSON.object(doc.body.filter { $0.0 != "_attachments" })
            #expect(app.serialized() == Array(expected.utf8), "\(id)")
            #expect(doc.serializedBody == nil, "\(id): only a write holds the bytes")
        }
        await f.close()
    }
}
