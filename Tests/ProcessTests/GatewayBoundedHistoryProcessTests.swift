import Foundation
import NIOHTTP1
import SetteeCore
import SetteeJSON
import SetteeTestSupport
import Testing

/// Bounded channel history, checkpoints, sessions and attachment blobs on a real `settee-gateway` process over a
/// walrus: bucket (issue 71 items 3, 4 and their item-7 figures; ADR 0151).
@Suite(.serialized, .onTestThreads) struct GatewayBoundedHistoryProcessTests {
    static func send(_ method: HTTPMethod, _ url: String, _ body: String? = nil) async throws -> GatewayHTTP.Reply {
        try await GatewayHTTP.request(method, url, body: body.map { Array($0.utf8) })
    }

    static func json(_ reply: GatewayHTTP.Reply) -> JSON { (try? JSON.parse(reply.body)) ?? .null }

    static func figures(_ admin: String) async throws -> JSON {
        let expvar = json(try await send(.GET, "\(admin)/_expvar"))
        return expvar["syncgateway"]?["per_db"]?["db"]?["database"] ?? .null
    }

    /// Polls the figures until `check` holds (at most 10 s); the last figures seen.
    static func figures(_ admin: String, until check: (JSON) -> Bool) async throws -> JSON {
        let deadline = Date().addingTimeInterval(10)
        var f = try await figures(admin)
        while !check(f), Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
            f = try await figures(admin)
        }
        return f
    }

    @Test func aDocumentsChannelHistoryIsCappedAndOlderCheckpointsRestart() async throws {
        // Proves item 3 over HTTP: a document moved through more channels than the cap
        // (`Limits.gatewayChannelRemovalsPerDocument`) keeps only that many removal entries in `_sync.channels`; a
        // reader of a channel it left recently still gets its `removed` row; a `_changes` from a checkpoint taken
        // before the dropped removals is refused with 410 (restart the pull), on both ports, and `GET /db/` shows the
        // horizon; `/_expvar` counts the entries kept and pruned. Before, every removal was kept forever and the old
        // checkpoint was answered.
        let gw = try GatewayProcess(
            name: "channel-history",
            config: """
                {"databases": {"db": {"server": "walrus:",
                  "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
                """)
        try gw.start()
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)"
        let db = "\(admin)/db"
        let cap = Limits.gatewayChannelRemovalsPerDocument
        var rev = Self.json(try await Self.send(.PUT, "\(db)/d", #"{"channels":["c0"]}"#))["rev"]?.stringValue ?? ""
        let last = Self.json(try await Self.send(.GET, "\(db)/_changes"))["last_seq"]
        let checkpoint = last?.intValue ?? last?.stringValue.flatMap { Int($0) } ?? -1
        #expect(checkpoint > 0)
        for i in 1...(cap + 2) {
            let put = try await Self.send(.PUT, "\(db)/d", #"{"_rev":"\#(rev)","channels":["c\#(i)"]}"#)
            #expect(put.status == 201, "\(put.text)")
            rev = Self.json(put)["rev"]?.stringValue ?? ""
        }
        let raw = Self.json(try await Self.send(.GET, "\(db)/_raw/d"))
        let channels = raw["_sync"]?["channels"]?.objectValue ?? []
        #expect(channels.count == cap + 1, "\(channels.count)")  // the current channel and `cap` removals
        #expect(channels.first { $0.0 == "c0" } == nil && channels.first { $0.0 == "c1" } == nil)

        let recent = try await Self.send(
            .GET, "\(db)/_changes?since=\(checkpoint)&filter=sync_gateway/bychannel&channels=c\(cap + 1)")
        #expect(recent.status == 410, "\(recent.text)")  // the checkpoint predates the dropped removals
        let fromZero = Self.json(
            try await Self.send(.GET, "\(db)/_changes?since=0&filter=sync_gateway/bychannel&channels=c\(cap + 1)"))
        let removed = fromZero["results"]?.arrayValue?.first?["removed"]?.arrayValue?.compactMap(\.stringValue)
        #expect(removed == ["c\(cap + 1)"], "\(fromZero)")
        for base in [db, "http://127.0.0.1:\(gw.port)/db"] {
            let stale = try await Self.send(.GET, "\(base)/_changes?since=\(checkpoint)")
            #expect(stale.status == 410, "\(stale.text)")
        }
        let info = Self.json(try await Self.send(.GET, "\(db)/"))
        #expect((info["purge_seq"]?.intValue ?? 0) > checkpoint, "\(info)")
        let f = try await Self.figures(admin)
        #expect(f["channel_history_entries"]?.intValue == cap && f["channel_history_pruned"]?.intValue == 2, "\(f)")
        let metrics = try await Self.send(.GET, "\(admin)/_metrics")
        #expect(metrics.text.contains("settee_gateway_channel_history_entries{database=\"db\"} \(cap)"))
    }

    @Test func checkpointsExpireUnlessReadSessionsGoAndUnreferencedBlobsAreSwept() async throws {
        // Proves item 4 over HTTP: with `local_doc_expiry_secs: 10` a `_local` checkpoint read within the period lives
        // on past its first expiry (the read renews it, as Sync Gateway's get-and-touch), then goes once neither
        // written nor read for the period; a session with a 1 s ttl is removed from the bucket, not only refused;
        // `/_expvar` counts sessions, checkpoints, old bodies and attachment blobs with their bytes; after the only
        // document referencing a blob is purged, `POST /db/_compact?type=attachment` deletes the blob and
        // `GET /db/_compact?type=attachment` reports it. Before, `local_doc_expiry_secs` was refused (checkpoints
        // never expired), the figures were absent and `GET _compact?type=attachment` was 400.
        let gw = try GatewayProcess(
            name: "bounded-local-docs",
            config: """
                {"databases": {"db": {"server": "walrus:", "local_doc_expiry_secs": 10,
                  "users": {"ann": {"password": "secret1", "admin_channels": ["*"]}}}}}
                """)
        try gw.start()
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)"
        let db = "\(admin)/db"
        let written = Date()
        #expect(try await Self.send(.PUT, "\(db)/_local/checkpoint/kept", #"{"seq":1}"#).status == 201)
        #expect(try await Self.send(.PUT, "\(db)/_local/checkpoint/idle", #"{"seq":1}"#).status == 201)
        let session = Self.json(try await Self.send(.POST, "\(db)/_session", #"{"name":"ann","ttl":1}"#))
        let sessionID = session["session_id"]?.stringValue ?? ""
        #expect(!sessionID.isEmpty, "\(session)")
        let r1 =
            Self.json(
                try await Self.send(
                    .PUT, "\(db)/a",
                    #"{"_attachments":{"t.txt":{"content_type":"text/plain","data":"aGVsbG8gd29ybGQ="}}}"#))["rev"]?
            .stringValue ?? ""
        #expect(try await Self.send(.PUT, "\(db)/a", #"{"_rev":"\#(r1)","v":2}"#).status == 201)
        let counted = try await Self.figures(admin) {
            $0["sessions"]?.intValue == 1 && $0["checkpoints"]?.intValue == 2 && $0["attachment_blobs"]?.intValue == 1
        }
        #expect(
            counted["attachment_bytes"]?.intValue == 11 && (counted["old_bodies"]?.intValue ?? 0) >= 1, "\(counted)")
        #expect((counted["old_body_bytes"]?.intValue ?? 0) > 0, "\(counted)")

        // A 10 s expiry in whole seconds lasts 9-10 s: read `kept` at 5 s (renewed to at least 14 s), look at 11 s. Each
        // step has 3-4 s of slack, so a machine several times as busy still reads `kept` before its first expiry and
        // looks before its renewed one (a 4 s expiry left 1-1.5 s).
        func waitUntil(_ seconds: Double) async throws {
            let wait = seconds - Date().timeIntervalSince(written)
            if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
        }
        try await waitUntil(5)
        #expect(try await Self.send(.GET, "\(db)/_local/checkpoint/kept").status == 200)
        try await waitUntil(11)
        #expect(try await Self.send(.GET, "\(db)/_local/checkpoint/idle").status == 404)
        #expect(try await Self.send(.GET, "\(db)/_local/checkpoint/kept").status == 200)
        #expect(try await Self.send(.GET, "\(db)/_session/\(sessionID)").status == 404)
        let after = try await Self.figures(admin) { $0["sessions"]?.intValue == 0 && $0["checkpoints"]?.intValue == 1 }
        #expect(after["sessions"]?.intValue == 0 && after["checkpoints"]?.intValue == 1, "\(after)")

        // The blob: referenced while the document (and its kept ancestor body) exists, swept once it is purged.
        #expect(try await Self.send(.POST, "\(db)/_purge", #"{"a":["*"]}"#).status == 200)
        let compacted = try await Self.send(.POST, "\(db)/_compact?type=attachment")
        #expect(compacted.status == 200, "\(compacted.text)")
        let status = Self.json(try await Self.send(.GET, "\(db)/_compact?type=attachment"))
        #expect(
            status["status"]?.stringValue == "completed" && status["purged_attachments"]?.intValue == 1, "\(status)")
        let swept = try await Self.figures(admin) { $0["attachment_blobs"]?.intValue == 0 }
        #expect(swept["attachment_blobs"]?.intValue == 0 && swept["attachment_bytes"]?.intValue == 0, "\(swept)")
    }
}
