import SetteeJSON
import SetteeReplication
import Testing

@Suite struct FetchedRevisionHeadTests {
    // Proves a pushed body naming its revision by `_revisions` alone (no `_rev`, as CouchDB and PouchDB replicators
    // may send it to the Lite listener's `_bulk_docs`) is read as the revision start-ids[0], `_rev` wins when both
    // are there (the store checks they agree), and a body naming none is still refused.
    @Test func revisionsAloneNameTheRevision() throws {
        let alone = try FetchedRevision(
            document: try JSON.parse(#"{"_id":"a","_revisions":{"start":3,"ids":["c","b"]},"v":1}"#))
        #expect(alone.id == "a" && alone.rev == "3-c" && alone.body["_rev"] == nil)
        let both = try FetchedRevision(
            document: try JSON.parse(#"{"_id":"a","_rev":"3-c","_revisions":{"start":3,"ids":["c"]}}"#))
        #expect(both.rev == "3-c")
        #expect(throws: ReplicationError.self) {
            try FetchedRevision(document: try JSON.parse(#"{"_id":"a","_revisions":{"start":"3","ids":["c"]}}"#))
        }
        #expect(throws: ReplicationError.self) { try FetchedRevision(document: try JSON.parse(#"{"_id":"a"}"#)) }
    }
}
