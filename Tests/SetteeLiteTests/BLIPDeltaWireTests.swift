import SetteeBLIP
import SetteeCore
import SetteeJSON
import SetteeReplication
import Testing

/// The Lite client's side of delta sync (ADR 0125) in `BLIPReplicationWire`: a pushed revision goes as a delta against
/// the server's revision when that is smaller, and a received delta is made whole against the local source exactly,
/// attachments (as stubs) included, or refused: never a guessed body.
@Suite struct BLIPDeltaWireTests {
    static func parse(_ text: String) throws -> JSON { try JSON.parse(text) }

    static let long = String(repeating: "0123456789abcdef", count: 40)

    /// A local revision as `bulkGet` gives it: CouchDB-shaped, attachments marked `follows` (bytes beside).
    static func revision(_ rev: String, _ generation: Int, text: String) throws -> FetchedRevision {
        let body = try parse(
            #"{"_id":"d","_rev":"\#(rev)","_revisions":{"start":\#(generation),"ids":["\#(rev.dropFirst(2))"]},"#
                + #""text":"\#(text)","n":\#(generation),"_attachments":{"a":{"digest":"sha1-x","length":3,"revpos":1,"follows":true}}}"#
        )
        return FetchedRevision(id: "d", rev: rev, body: body, attachments: ["a": [1, 2, 3]])
    }

    @Test func aPushedRevisionGoesAsADeltaThatRebuildsItsBody() throws {
        // Proves: with a source, a live revision's `rev` carries `deltaSrc` and a body far smaller than the whole one;
        // that delta applied to the source as sent rebuilds the whole body byte for byte (`_attachments` stubs
        // included); the attachment bytes are still offered; without a source, or for a tombstone, the body is whole.
        let source = try Self.revision("1-aa", 1, text: Self.long)
        let target = try Self.revision("2-bb", 2, text: Self.long + "!")
        let whole = BLIPReplicationWire.revRequest(target, sequence: nil).message
        #expect(whole["deltaSrc"] == nil)
        let (delta, attachments) = BLIPReplicationWire.revRequest(
            target, sequence: nil, deltaSource: (rev: "1-aa", body: source.body))
        #expect(delta["deltaSrc"] == "1-aa")
        #expect(delta.body.count * 10 < whole.body.count, "\(delta.body.count) vs \(whole.body.count)")
        #expect(attachments["sha1-x"] == [1, 2, 3])
        let rebuilt = try BLIPReplicationWire.applyDelta(delta, source: source.body)
        #expect(rebuilt["deltaSrc"] == nil)
        #expect(rebuilt.body == whole.body)
        var tombstone = target
        tombstone.body.set("_deleted", .bool(true))
        let deleted = BLIPReplicationWire.revRequest(
            tombstone, sequence: nil, deltaSource: (rev: "1-aa", body: source.body)
        ).message
        #expect(deleted["deltaSrc"] == nil)
    }

    @Test(arguments: [#"{"n":{"x":1}}"#, #"{"text":["9999=",0,2]}"#, #"not json"#, #"[]"#])
    func aDeltaThatDoesNotApplyIsRefused(delta: String) throws {
        // Proves: a delta that is not JSON or does not fit the local source throws (the endpoint answers 422 and waits
        // for the revision whole); so does a tombstone as the source.
        let source = try Self.revision("1-aa", 1, text: Self.long)
        let message = BLIPMessage(
            properties: [(name: "Profile", value: "rev"), (name: "deltaSrc", value: "1-aa")], body: Array(delta.utf8))
        #expect(throws: ReplicationError.self) { try BLIPReplicationWire.applyDelta(message, source: source.body) }
        var tombstone = source.body
        tombstone.set("_deleted", .bool(true))
        let fine = BLIPMessage(properties: [(name: "deltaSrc", value: "1-aa")], body: Array(#"{"n":5}"#.utf8))
        #expect(throws: ReplicationError.self) { try BLIPReplicationWire.applyDelta(fine, source: tombstone) }
    }
}
