import Foundation
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

/// `PUT /db/_config` and `POST /db/_resync` on a real `settee-gateway` process (walrus: bucket).
@Suite(.serialized, .onTestThreads) struct GatewayResyncProcessTests {
    static let config = """
        {"databases": {"db": {"server": "walrus:",
          "users": {"bob": {"password": "bob-pw", "admin_channels": ["vip"]}},
          "sync": `function(doc) { channel(doc.channels); }`}}}
        """

    /// Document rows of bob's `_changes`: id -> whether it is a `removed` row.
    static func bobRows(_ base: String) async throws -> [String: Bool] {
        let r = try await GatewayHTTP.request(
            .GET, "\(base)/_changes?since=0", headers: [GatewayHTTP.basic("bob", "bob-pw")])
        var out: [String: Bool] = [:]
        for row in try JSON.parse(r.body)["results"]?.arrayValue ?? [] {
            guard let id = row["id"]?.stringValue, !id.hasPrefix("_user/") else { continue }
            out[id] = row["removed"] != nil
        }
        return out
    }

    @Test func resyncAppliesANewSyncFunction() async throws {
        // Proves over real HTTP: a sync function replaced with `PUT /db/_config` (an access() grant by
        // document) leaves stored documents as they were until `_resync`, which is refused (503) online and,
        // offline, reruns it: bob then reads a document granted to him and stops seeing one that left his
        // channel (a `removed` row, GET 403).
        let gw = try GatewayProcess(name: "resync", config: Self.config)
        try gw.start()
        defer { gw.stop() }
        let base = "http://127.0.0.1:\(gw.port)/db"
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        for (id, body) in [
            ("vip-doc", #"{"channels":["vip"],"level":"low"}"#),
            ("granted", #"{"channels":["private-bob"],"reader":"bob"}"#),
        ] {
            let r = try await GatewayHTTP.request(.PUT, "\(admin)/\(id)", body: Array(body.utf8))
            #expect(r.status == 201, "\(r.text)")
        }
        #expect(try await Self.bobRows(base) == ["vip-doc": false])

        let sync = """
            function(doc) {
              if (doc.level != "low") { channel(doc.channels); }
              if (doc.reader) { access(doc.reader, doc.channels); }
            }
            """
        var entry = try JSON.parse(try await GatewayHTTP.request(.GET, "\(admin)/_config").body)
        entry.set("sync", .string(sync))
        let put = try await GatewayHTTP.request(.PUT, "\(admin)/_config", body: entry.serialized())
        #expect(put.status == 201, "\(put.text)")
        #expect(try await Self.bobRows(base) == ["vip-doc": false])

        let refused = try await GatewayHTTP.request(.POST, "\(admin)/_resync")
        #expect(refused.status == 503, "\(refused.text)")
        #expect(try await GatewayHTTP.request(.POST, "\(admin)/_offline").status == 200)
        let resync = try await GatewayHTTP.request(.POST, "\(admin)/_resync")
        #expect(resync.status == 200, "\(resync.text)")
        #expect(try JSON.parse(resync.body)["changes"]?.intValue == 2, "\(resync.text)")
        #expect(try await GatewayHTTP.request(.POST, "\(admin)/_online").status == 200)

        #expect(try await Self.bobRows(base) == ["vip-doc": true, "granted": false])
        let bob = [GatewayHTTP.basic("bob", "bob-pw")]
        #expect(try await GatewayHTTP.request(.GET, "\(base)/granted", headers: bob).status == 200)
        #expect(try await GatewayHTTP.request(.GET, "\(base)/vip-doc", headers: bob).status == 403)
    }
}
