import Foundation
import NIOHTTP1
import SetteeJSON
import SetteeTestSupport
import Testing

/// Replaced revision bodies bounded in time on a real `settee-gateway` over a walrus: bucket, and the database's
/// figures through `/_expvar`, `/_metrics` and `settee gateway stats` (issue 71 items 4 and 7; ADR 0156).
@Suite(.serialized, .onTestThreads) struct GatewayOldBodiesProcessTests {
    static func send(_ method: HTTPMethod, _ url: String, _ body: String? = nil) async throws -> GatewayHTTP.Reply {
        try await GatewayHTTP.request(method, url, body: body.map { Array($0.utf8) })
    }

    static func json(_ reply: GatewayHTTP.Reply) -> JSON { (try? JSON.parse(reply.body)) ?? .null }

    static func figures(_ admin: String) async throws -> JSON {
        json(try await send(.GET, "\(admin)/_expvar"))["syncgateway"]?["per_db"]?["db"]?["database"] ?? .null
    }

    @Test func oldBodiesExpireAfterOldRevExpirySecondsAndTheFiguresShowIt() async throws {
        // Proves item 4's time bound over HTTP: with `old_rev_expiry_seconds: 6`, a document written three times and
        // then left alone serves its replaced revisions (`GET ?rev=`) and counts them in `/_expvar` at first; within
        // a few seconds the gateway's sweep drops them: those revisions answer 404, the winner 200, `old_bodies` is 0
        // and `old_bodies_expired` 2, in `/_metrics` too; `settee gateway stats db` prints the same figures. Before,
        // the config key was refused and the bodies were kept (up to 20 per document) for good.
        let gw = try GatewayProcess(
            name: "old-bodies",
            config: """
                {"databases": {"db": {"server": "walrus:", "old_rev_expiry_seconds": 6,
                  "users": {"GUEST": {"disabled": false, "admin_channels": ["*"]}}}}}
                """)
        try gw.start()
        defer { gw.stop() }
        let admin = "http://127.0.0.1:\(gw.adminPort)"
        let db = "\(admin)/db"
        var revs: [String] = []
        for i in 1...3 {
            let revMember = revs.last.map { #""_rev":"\#($0)","# } ?? ""
            let put = try await Self.send(.PUT, "\(db)/d", #"{\#(revMember)"v":\#(i)}"#)
            #expect(put.status == 201, "\(put.text)")
            revs.append(Self.json(put)["rev"]?.stringValue ?? "")
        }
        #expect(try await Self.send(.GET, "\(db)/d?rev=\(revs[0])").status == 200)
        let before = try await Self.figures(admin)
        #expect(before["old_bodies"]?.intValue == 2 && before["live_revisions"]?.intValue == 1, "\(before)")

        // The sweep runs every `old_rev_expiry_seconds` (6 s here: the writes and the looks before it must fit in one
        // window, which 2 s did not leave a machine three times as busy): the bodies are gone within two windows of
        // the last write; poll up to 40 s.
        let deadline = Date().addingTimeInterval(40)
        var after = before
        while Date() < deadline {
            after = try await Self.figures(admin)
            if after["old_bodies"]?.intValue == 0 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(after["old_bodies"]?.intValue == 0 && after["old_body_bytes"]?.intValue == 0, "\(after)")
        #expect(after["old_bodies_expired"]?.intValue == 2, "\(after)")
        for old in revs.prefix(2) {
            let gone = try await Self.send(.GET, "\(db)/d?rev=\(old)")
            #expect(gone.status == 404, "\(gone.text)")
        }
        #expect(try await Self.send(.GET, "\(db)/d?rev=\(revs[2])").status == 200)
        let metrics = try await Self.send(.GET, "\(admin)/_metrics")
        #expect(metrics.text.contains("settee_gateway_old_bodies{database=\"db\"} 0"), "\(metrics.text)")
        #expect(metrics.text.contains("settee_gateway_old_bodies_expired_total{database=\"db\"} 2"))
        #expect(metrics.text.contains("settee_gateway_live_revisions{database=\"db\"} 1"))

        let cli = try runCLI(["gateway", "stats", "db", "--gateway", admin])
        #expect(cli.status == 0, "\(cli.stderr)")
        let lines = cli.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(lines.contains(["old_bodies", "0"]) && lines.contains(["old_bodies_expired", "2"]), "\(cli.stdout)")
        #expect(lines.contains(["documents", "1"]) && lines.contains(["stored_revisions", "3"]), "\(cli.stdout)")
        let missing = try runCLI(["gateway", "stats", "nodb", "--gateway", admin])
        #expect(missing.status != 0 && missing.stderr.contains("no database nodb"), "\(missing.stderr)")
    }
}
