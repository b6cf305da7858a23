import Foundation
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

/// Bounded metadata on a real `settee-gateway` process over a walrus: bucket (issue 71 items 1 and 2, ADR 0145):
/// Sync Gateway's `revs_limit` rule, and tombstones purged after `meta_purge_interval` with replicas whose checkpoint
/// predates the purge told to restart their pull.
@Suite(.serialized, .onTestThreads) struct GatewayBoundedMetadataProcessTests {
    static func send(_ method: HTTPMethod, _ url: String, _ body: String? = nil) async throws -> GatewayHTTP.Reply {
        try await GatewayHTTP.request(method, url, body: body.map { Array($0.utf8) })
    }

    static func json(_ reply: GatewayHTTP.Reply) -> JSON { (try? JSON.parse(reply.body)) ?? .null }

    static func lastSeq(_ db: String, since: String = "0") async throws -> String {
        let reply = try await send(.GET, "\(db)/_changes?since=\(since)")
        #expect(reply.status == 200, "\(reply.text)")
        return json(reply)["last_seq"]?.stringValue ?? ""
    }

    @Test func revsLimitFollowsSyncGatewaysRuleAndBoundsEveryTree() async throws {
        // Proves item 1: a `revs_limit` below 20 with conflicts allowed is refused at start-up (exit 1, naming the
        // field), as Sync Gateway refuses it, and by `PUT /db/_config`; with `allow_conflicts: false` a limit of 5
        // holds: a document updated 12 times keeps 5 revisions in its stored tree, and `/_expvar` counts the stored
        // revisions and tombstones. Before, revs_limit 5 was taken with conflicts on.
        let refused = try GatewayProcess(
            name: "revs-limit-refused",
            config: #"{"databases": {"db": {"server": "walrus:", "revs_limit": 5}}}"#)
        let run = try refused.runToExit()
        #expect(run.status == 1, "\(run.output)")
        #expect(run.output.contains("revs_limit") && run.output.contains("lower than 20"), "\(run.output)")

        let gw = try GatewayProcess(
            name: "revs-limit-5",
            config: #"{"databases": {"db": {"server": "walrus:", "revs_limit": 5, "allow_conflicts": false}}}"#)
        try gw.start()
        defer { gw.stop() }
        let db = "http://127.0.0.1:\(gw.adminPort)/db"
        var rev = Self.json(try await Self.send(.PUT, "\(db)/doc", #"{"v":0}"#))["rev"]?.stringValue ?? ""
        for v in 1...12 {
            let put = try await Self.send(.PUT, "\(db)/doc", #"{"_rev":"\#(rev)","v":\#(v)}"#)
            #expect(put.status == 201, "\(put.text)")
            rev = Self.json(put)["rev"]?.stringValue ?? ""
        }
        #expect(rev.hasPrefix("13-"))
        let raw = Self.json(try await Self.send(.GET, "\(db)/_raw/doc"))
        #expect(raw["_sync"]?["history"]?["revs"]?.arrayValue?.count == 5, "\(raw)")
        let gone = try await Self.send(.PUT, "\(db)/gone", #"{"v":1}"#)
        let goneRev = Self.json(gone)["rev"]?.stringValue ?? ""
        #expect(try await Self.send(.DELETE, "\(db)/gone?rev=\(goneRev)").status == 200)
        let expvar = Self.json(try await Self.send(.GET, "http://127.0.0.1:\(gw.adminPort)/_expvar"))
        let figures = expvar["syncgateway"]?["per_db"]?["db"]?["database"]
        #expect(figures?["stored_revisions"]?.intValue == 7, "\(String(describing: figures))")
        #expect(figures?["tombstones"]?.intValue == 1 && figures?["documents"]?.intValue == 2)

        let lowered = try await Self.send(
            .PUT, "\(db)/_config", #"{"revs_limit": 10, "allow_conflicts": true}"#)
        #expect(lowered.status == 400 && lowered.text.contains("lower than 20"), "\(lowered.text)")
    }

    @Test(arguments: [false, true])
    func tombstonesArePurgedAfterTheIntervalAndOlderCheckpointsMustRestart(sharedAccess: Bool) async throws {
        // Proves item 2 over HTTP: `POST /db/_compact?type=tombstone` runs in the background and `GET` reports its
        // status (Sync Gateway's shape); a tombstone younger than `meta_purge_interval` is kept, one older is purged
        // (gone from `_raw` and from `_changes` from 0); a `_changes` from a checkpoint older than the deletion is
        // refused with 410 naming the purge (never answered without the deletion), one from after it and one from 0
        // are answered; `GET /db/` shows the horizon as `purge_seq` and `/_expvar` the purge. Before, `GET _compact`
        // was 405 and tombstones stayed forever.
        let gw = try GatewayProcess(
            name: "tombstone-purge-\(sharedAccess)",
            config: """
                {"databases": {"db": {"server": "walrus:", "meta_purge_interval": 0.00005,
                  "enable_shared_bucket_access": \(sharedAccess),
                  "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
                """)
        try gw.start()
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)"
        let db = "\(admin)/db"
        let a = Self.json(try await Self.send(.PUT, "\(db)/a", #"{"v":1}"#))["rev"]?.stringValue ?? ""
        #expect(try await Self.send(.PUT, "\(db)/b", #"{"v":1}"#).status == 201)
        let checkpoint = try await Self.lastSeq(db)
        #expect(try await Self.send(.DELETE, "\(db)/a?rev=\(a)").status == 200)
        let deletedAt = Date()
        let afterDeletion = try await Self.lastSeq(db)

        /// Starts a run and waits for its end; the final status.
        func compact() async throws -> JSON {
            let started = try await Self.send(.POST, "\(db)/_compact?type=tombstone")
            #expect(started.status == 200, "\(started.text)")
            #expect(
                ["running", "completed"].contains(Self.json(started)["status"]?.stringValue ?? ""), "\(started.text)")
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                let status = Self.json(try await Self.send(.GET, "\(db)/_compact?type=tombstone"))
                if status["status"]?.stringValue == "completed" { return status }
                try await Task.sleep(for: .milliseconds(50))
            }
            Issue.record("the compaction did not complete")
            return .null
        }

        // Just deleted (0.00005 days is 4.32 s): not due.
        let early = try await compact()
        #expect(early["docs_purged"]?.intValue == 0 && early["start_time"]?.stringValue != nil, "\(early)")
        #expect(try await Self.send(.GET, "\(db)/_raw/a").status == 200)

        // Past the interval: purged. (Time has to pass here: the gateway's clock is the real one.)
        let wait = 5.5 - Date().timeIntervalSince(deletedAt)
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
        let late = try await compact()
        #expect(late["docs_purged"]?.intValue == 1, "\(late)")
        #expect(try await Self.send(.GET, "\(db)/_raw/a").status == 404)
        let fresh = Self.json(try await Self.send(.GET, "\(db)/_changes?since=0"))
        let ids = fresh["results"]?.arrayValue?.compactMap { $0["id"]?.stringValue } ?? []
        #expect(ids == ["b"], "\(fresh)")

        // A replica that last pulled before the deletion: told to restart, on the public port too.
        for base in [db, "http://127.0.0.1:\(gw.port)/db"] {
            let stale = try await Self.send(.GET, "\(base)/_changes?since=\(checkpoint)")
            #expect(stale.status == 410, "\(stale.text)")
            #expect(Self.json(stale)["reason"]?.stringValue?.contains("restart the pull") == true, "\(stale.text)")
        }
        let longpoll = try await Self.send(.GET, "\(db)/_changes?feed=longpoll&since=\(checkpoint)")
        #expect(longpoll.status == 410, "\(longpoll.text)")
        #expect(try await Self.send(.GET, "\(db)/_changes?since=\(afterDeletion)").status == 200)

        let info = Self.json(try await Self.send(.GET, "\(db)/"))
        #expect(
            info["purge_seq"]?.stringValue == afterDeletion || "\(info["purge_seq"]?.intValue ?? -1)" == afterDeletion)
        let expvar = Self.json(try await Self.send(.GET, "\(admin)/_expvar"))
        let figures = expvar["syncgateway"]?["per_db"]?["db"]?["database"]
        #expect(figures?["tombstones_purged"]?.intValue == 1 && figures?["tombstones"]?.intValue == 0, "\(expvar)")
    }
}
