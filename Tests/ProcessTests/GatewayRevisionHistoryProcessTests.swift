import Foundation
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

/// Revision histories over HTTP on a real `settee-gateway` process (walrus: bucket, both layouts): replicated
/// revisions named by `_revisions` alone (issue 67 item 7) and the pruning of resolved conflict branches (item 9).
@Suite(.serialized, .onTestThreads) struct GatewayRevisionHistoryProcessTests {
    static func config(sharedAccess: Bool) -> String {
        """
        {"databases": {"db": {"server": "walrus:", "revs_limit": 20,
          "enable_shared_bucket_access": \(sharedAccess),
          "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
        """
    }

    static func json(_ reply: GatewayHTTP.Reply) throws -> JSON { try JSON.parse(reply.body) }

    static func send(_ method: HTTPMethod, _ url: String, _ body: String? = nil) async throws -> GatewayHTTP.Reply {
        try await GatewayHTTP.request(method, url, body: body.map { Array($0.utf8) })
    }

    /// `GET doc?revs=true`: the revision and its `_revisions` as `"N-digest"` strings, newest first.
    static func revisionsOf(_ url: String) async throws -> (rev: String?, history: [String], body: JSON) {
        let reply = try await send(.GET, "\(url)?revs=true")
        #expect(reply.status == 200, "\(reply.text)")
        let doc = try json(reply)
        let start = doc["_revisions"]?["start"]?.intValue ?? 0
        let ids = doc["_revisions"]?["ids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        return (doc["_rev"]?.stringValue, ids.enumerated().map { "\(start - $0.offset)-\($0.element)" }, doc)
    }

    @Test(arguments: [false, true])
    func replicatedRevisionsMayBeNamedByRevisionsAlone(sharedAccess: Bool) async throws {
        // Proves issue 67 item 7 over HTTP: `_bulk_docs` and `PUT ?new_edits=false` with `_revisions` and no `_rev`
        // (as CouchDB and PouchDB replicators may send) are accepted as the revision start-ids[0], readable with
        // that rev and the whole history, and extend a known history; a `_rev` that is not the head of
        // `_revisions`, a malformed `_revisions` and a body naming no revision are 400s that store nothing, and
        // in `_bulk_docs` fail only their own row. Before the fix every such write was "Missing _rev".
        let gw = try GatewayProcess(name: "revisions-alone", config: Self.config(sharedAccess: sharedAccess))
        try gw.start()
        defer { gw.stop() }
        let db = "http://127.0.0.1:\(gw.adminPort)/db"

        let bulk = try await Self.send(
            .POST, "\(db)/_bulk_docs",
            #"""
            {"new_edits": false, "docs": [
              {"_id": "a", "_revisions": {"start": 3, "ids": ["ccc", "bbb", "aaa"]}, "v": 1},
              {"_id": "bad", "_rev": "3-zzz", "_revisions": {"start": 3, "ids": ["ccc", "bbb"]}, "v": 2},
              {"_id": "t", "_revisions": {"start": 2, "ids": ["tomb", "live"]}, "_deleted": true}]}
            """#)
        #expect(bulk.status == 201, "\(bulk.text)")
        let rows = try Self.json(bulk).arrayValue ?? []
        #expect(rows.count == 3)
        #expect(rows.first?["id"]?.stringValue == "a" && rows.first?["rev"]?.stringValue == "3-ccc", "\(bulk.text)")
        #expect(rows.dropFirst().first?["status"]?.intValue == 400, "\(bulk.text)")
        #expect(rows.dropFirst().first?["reason"]?.stringValue?.contains("_rev 3-zzz") == true, "\(bulk.text)")
        #expect(rows.last?["rev"]?.stringValue == "2-tomb", "\(bulk.text)")

        let a = try await Self.revisionsOf("\(db)/a")
        #expect(a.rev == "3-ccc" && a.history == ["3-ccc", "2-bbb", "1-aaa"] && a.body["v"]?.intValue == 1)
        #expect(try await Self.send(.GET, "\(db)/bad").status == 404)
        let tomb = try await Self.send(.GET, "\(db)/t?rev=2-tomb&revs=true")
        let tombDeleted = try Self.json(tomb)["_deleted"]?.boolValue
        #expect(tomb.status == 200 && tombDeleted == true, "\(tomb.text)")

        // A later revision of the same history, again without `_rev`: grafted onto 3-ccc.
        let next = try await Self.send(
            .POST, "\(db)/_bulk_docs",
            #"{"new_edits": false, "docs": [{"_id": "a", "_revisions": {"start": 4, "ids": ["ddd", "ccc"]}, "v": 4}]}"#)
        #expect(try Self.json(next).arrayValue?.first?["rev"]?.stringValue == "4-ddd", "\(next.text)")
        let a4 = try await Self.revisionsOf("\(db)/a")
        #expect(a4.rev == "4-ddd" && a4.history == ["4-ddd", "3-ccc", "2-bbb", "1-aaa"] && a4.body["v"]?.intValue == 4)

        // PUT ?new_edits=false: the same rule on the other entry point.
        let put = try await Self.send(
            .PUT, "\(db)/b?new_edits=false", #"{"_revisions": {"start": 2, "ids": ["yyy", "xxx"]}, "v": "b"}"#)
        #expect(put.status == 201, "\(put.text)")
        #expect(try Self.json(put)["rev"]?.stringValue == "2-yyy")
        let b = try await Self.revisionsOf("\(db)/b")
        #expect(b.rev == "2-yyy" && b.history == ["2-yyy", "1-xxx"] && b.body["v"]?.stringValue == "b")

        for (body, reason) in [
            (#"{"_rev": "2-zzz", "_revisions": {"start": 2, "ids": ["yyy", "xxx"]}}"#, "Bad _revisions: _rev 2-zzz"),
            (#"{"_revisions": {"start": "2", "ids": ["yyy"]}}"#, "Bad _revisions: start"),
            (#"{"_revisions": {"start": 2, "ids": []}}"#, "Bad _revisions: ids"),
            (#"{"_revisions": {"start": 1, "ids": ["yyy", "xxx"]}}"#, "Bad _revisions: more ids than generations"),
            (#"{"v": 1}"#, "Missing _rev"),
        ] {
            let refused = try await Self.send(.PUT, "\(db)/c?new_edits=false", body)
            #expect(refused.status == 400, "\(body): \(refused.text)")
            #expect(try Self.json(refused)["error"]?.stringValue == "bad_request")
            #expect(try Self.json(refused)["reason"]?.stringValue?.hasPrefix(reason) == true, "\(refused.text)")
        }
        #expect(try await Self.send(.GET, "\(db)/c").status == 404)
    }

    @Test(arguments: [false, true])
    func resolvedConflictBranchesArePrunedBeyondRevsLimit(sharedAccess: Bool) async throws {
        // Proves issue 67 item 9 over HTTP with revs_limit 20: 30 conflicts (a branch 2-cK pushed off 1-x beside
        // the live 2-…) each resolved by deleting it, then the live branch updated to generation 41 (40 updates),
        // leave one leaf and the live branch's 20 newest revisions (31 leaves and 81 stored revisions before:
        // Sync Gateway's pruneRevisions removes tombstoned branches whose leaf is more than revs_limit
        // generations below the live one). A conflict resolved after that is gone at its own tombstone's write:
        // the document no longer grows with every resolved conflict.
        let gw = try GatewayProcess(name: "prune-resolved", config: Self.config(sharedAccess: sharedAccess))
        try gw.start()
        defer { gw.stop() }
        let db = "http://127.0.0.1:\(gw.adminPort)/db"

        func put(_ body: String, rev: String?) async throws -> String {
            let reply = try await Self.send(.PUT, "\(db)/doc" + (rev.map { "?rev=\($0)" } ?? ""), body)
            #expect(reply.status == 201, "\(reply.text)")
            return try #require(try Self.json(reply)["rev"]?.stringValue)
        }
        func resolveConflict(_ k: Int, root: String) async throws {
            let digest = root.split(separator: "-").last.map(String.init) ?? ""
            let pushed = try await Self.send(
                .PUT, "\(db)/doc?new_edits=false",
                #"{"_rev": "2-c\#(k)", "_revisions": {"start": 2, "ids": ["c\#(k)", "\#(digest)"]}, "v": "c\#(k)"}"#)
            #expect(pushed.status == 201, "\(pushed.text)")
            let deleted = try await Self.send(.DELETE, "\(db)/doc?rev=2-c\(k)")
            #expect(deleted.status == 200, "\(deleted.text)")
        }
        /// Leaves (`open_revs=all`) and stored revisions (`_raw`'s `_sync.history.revs`).
        func shape() async throws -> (leaves: Set<String>, stored: Int) {
            let open = try await GatewayHTTP.request(
                .GET, "\(db)/doc?open_revs=all", headers: [("Accept", "application/json")])
            #expect(open.status == 200, "\(open.text)")
            let leaves = try Self.json(open).arrayValue?.compactMap { $0["ok"]?["_rev"]?.stringValue } ?? []
            let raw = try await Self.send(.GET, "\(db)/_raw/doc")
            #expect(raw.status == 200, "\(raw.text)")
            return (Set(leaves), try Self.json(raw)["_sync"]?["history"]?["revs"]?.arrayValue?.count ?? -1)
        }

        let root = try await put(#"{"v": 0}"#, rev: nil)
        var live = try await put(#"{"v": 1}"#, rev: root)
        for k in 0..<30 { try await resolveConflict(k, root: root) }
        let during = try await shape()
        #expect(during.leaves.count == 31 && during.stored == 1 + 1 + 60, "\(during)")
        for v in 2...40 { live = try await put(#"{"v": \#(v)}"#, rev: live) }
        #expect(live.hasPrefix("41-"))

        let after = try await shape()
        #expect(after.leaves == [live], "\(after)")
        #expect(after.stored == 20, "\(after)")
        let read = try await Self.revisionsOf("\(db)/doc")
        #expect(read.rev == live && read.history.count == 20 && read.history.last?.hasPrefix("22-") == true)
        #expect(read.body["v"]?.intValue == 40)

        // One more conflict off the pruned root, resolved: its branch goes with its tombstone's write.
        try await resolveConflict(30, root: root)
        let again = try await shape()
        #expect(again.leaves == [live] && again.stored == 20, "\(again)")
        let changes = try await Self.send(.GET, "\(db)/_changes?since=0&style=all_docs")
        let row = try Self.json(changes)["results"]?.arrayValue?.first { $0["id"]?.stringValue == "doc" }
        #expect(row?["changes"]?.arrayValue?.compactMap { $0["rev"]?.stringValue } == [live], "\(changes.text)")
    }
}
