import Foundation
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeTestSupport
import Testing

/// Lite follows the gateway's rules for replicated histories (issue 67 items 7 and 9): one parser
/// (`DocumentBody.replicatedHistory`) and one pruning rule (`RevTree.prune`).
@Suite struct ReplicatedHistoryLiteTests {
    // Proves a pushed revision named by `_revisions` alone (no `_rev`) is stored as start-ids[0] with its history
    // and answered with that rev, and a `_rev` that is not the head of `_revisions` fails only its own row (400).
    @Test func revisionsAloneNameTheRevision() throws {
        let db = try Database(name: "hist", directory: TemporaryDirectory.make("lite"))
        defer { try? db.delete() }
        let rows = try db.bulkInsert([
            ReplicatedRevision(
                body: try JSON.parse(#"{"_id":"a","_revisions":{"start":3,"ids":["c","b","a"]},"v":1}"#)),
            ReplicatedRevision(
                body: try JSON.parse(#"{"_id":"x","_rev":"2-q","_revisions":{"start":2,"ids":["c","b"]},"v":2}"#)),
        ])
        #expect(rows.first?["rev"]?.stringValue == "3-c" && rows.first?["error"] == nil, "\(rows.map(\.text))")
        #expect(rows.last?["status"]?.intValue == 400 && rows.last?["rev"]?.stringValue == "2-q")
        let tree = try #require(try db.revisionTree(of: "a"))
        #expect(
            tree.winner == RevID("3-c") && tree.history(of: RevID("3-c")!).map(\.description) == ["3-c", "2-b", "1-a"])
        #expect(try db.revisionTree(of: "x") == nil)
    }

    // Proves Lite prunes resolved conflict branches as the gateway does: with revs_limit 20, 5 conflicts resolved
    // by deleting them and the winner edited to generation 41 leave one leaf and 20 revisions.
    @Test func resolvedConflictBranchesArePruned() throws {
        var options = DatabaseOptions()
        options.revsLimit = 20
        let db = try Database(name: "prune", directory: TemporaryDirectory.make("lite"), options: options)
        defer { try? db.delete() }
        var doc = try db.put(Document(id: "d", properties: ["v": .number(0)]))
        let root = try #require(doc.revision)
        doc = try db.put(doc)
        for k in 0..<5 {
            let revisions = #"{"start":2,"ids":["c\#(k)","\#(root.digest)"]}"#
            let body = #"{"_id":"d","_rev":"2-c\#(k)","_revisions":\#(revisions),"v":"c"}"#
            #expect(try db.bulkInsert([ReplicatedRevision(body: try JSON.parse(body))]).first?["error"] == nil)
            _ = try db.delete("d", revision: RevID("2-c\(k)"))
        }
        #expect(try #require(try db.revisionTree(of: "d")).leaves.count == 6)
        for v in 2...40 {
            doc.properties = ["v": .number(Double(v))]
            doc = try db.put(doc)
        }
        let tree = try #require(try db.revisionTree(of: "d"))
        #expect(tree.leaves == [doc.revision] && tree.count == 20 && doc.revision?.generation == 41)
    }
}
