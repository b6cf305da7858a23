import SetteeCore
import SetteeDocument
import SetteeJSON
import Testing

private func rev(_ s: String) -> RevID { RevID(s)! }

@Suite struct ReplicatedHistoryTests {
    private static func history(_ body: String) throws -> [RevID] {
        try DocumentBody(try JSON.parse(body)).replicatedHistory()
    }

    private static func refusal(_ body: String) -> CouchError? {
        do {
            _ = try history(body)
            return nil
        } catch let error as CouchError {
            return error
        } catch {
            return CouchError(status: 0, error: "not a CouchError", reason: "\(error)")
        }
    }

    // Proves issue 67 item 7's rule: `_revisions` alone names the revision (start-ids[0]) with its history; `_rev`
    // alone is a history of one; both agreeing is the same history.
    @Test func revisionsAloneNameTheRevision() throws {
        let expected = [rev("3-c"), rev("2-b"), rev("1-a")]
        #expect(try Self.history(#"{"_revisions":{"start":3,"ids":["c","b","a"]},"v":1}"#) == expected)
        #expect(try Self.history(#"{"_rev":"3-c","_revisions":{"start":3,"ids":["c","b","a"]}}"#) == expected)
        #expect(try Self.history(#"{"_rev":"3-c"}"#) == [rev("3-c")])
        #expect(try Self.history(#"{"_revisions":{"start":3.0,"ids":["c"]},"_deleted":true}"#) == [rev("3-c")])
    }

    // Proves every shape error is a 400 with a reason naming what is wrong, and a `_rev` that is not the head of
    // `_revisions` is refused rather than one of them guessed.
    @Test(arguments: [
        (#"{"v":1}"#, "Missing _rev"),
        (#"{"_revisions":{"ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":"3","ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":0,"ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":-9223372036854775808,"ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":1e300,"ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":2.5,"ids":["c"]}}"#, "Bad _revisions: start"),
        (#"{"_revisions":{"start":3}}"#, "Bad _revisions: ids"),
        (#"{"_revisions":{"start":3,"ids":[]}}"#, "Bad _revisions: ids"),
        (#"{"_revisions":{"start":3,"ids":"c"}}"#, "Bad _revisions: ids"),
        (#"{"_revisions":{"start":3,"ids":[7]}}"#, "Bad _revisions: ids"),
        (#"{"_revisions":{"start":3,"ids":["a b"]}}"#, "Bad _revisions: ids"),
        (#"{"_revisions":{"start":3,"ids":["c",7]}}"#, "Bad _revisions: ids must be strings"),
        (#"{"_revisions":{"start":3,"ids":["c","b\u0001"]}}"#, "Bad _revisions: Invalid revision ID in ids[1]"),
        (#"{"_revisions":{"start":2,"ids":["c","b","a"]}}"#, "Bad _revisions: more ids than generations"),
        (#"{"_rev":"3-x","_revisions":{"start":3,"ids":["c","b"]}}"#, "Bad _revisions: _rev 3-x is not its head 3-c"),
        (#"{"_rev":"2-c","_revisions":{"start":3,"ids":["c","b"]}}"#, "Bad _revisions: _rev 2-c is not its head 3-c"),
    ])
    func shapeErrorsAreBadRequests(body: String, reason: String) throws {
        let error = try #require(Self.refusal(body))
        #expect(error.status == 400 && error.error == "bad_request", "\(error)")
        #expect(error.reason.hasPrefix(reason), "\(error.reason)")
    }

    // Proves the generation bound: `start` above `Limits.maxRevGeneration` is refused, at it accepted.
    @Test func startIsBoundedByTheGenerationLimit() throws {
        let max = Limits.maxRevGeneration
        #expect(
            try Self.history(#"{"_revisions":{"start":\#(max),"ids":["c"]}}"#) == [RevID(generation: max, digest: "c")])
        #expect(Self.refusal(#"{"_revisions":{"start":\#(max + 1),"ids":["c"]}}"#)?.status == 400)
    }
}
