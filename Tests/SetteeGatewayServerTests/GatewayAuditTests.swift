import Foundation
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeTestSupport
import Testing

@testable import SetteeGateway

/// The gateway's audit log (`audit_log_path`, ADR 0148): logins on the public port (Basic and `_session`, ok,
/// failed and throttled) and the admin port's changes (config, users, roles, `_purge`, `_compact`) each leave one
/// record, and the password used never appears in the log.
@Suite(.serialized) struct GatewayAuditTests {
    static let password = "Gw-Kn0wn-Pa55-91c"

    static func config(_ dir: String) -> String {
        """
        {"audit_log_path": "\(dir)", "databases": {"db": {"server": "walrus:",
          "users": {"alice": {"password": "\(password)", "admin_channels": ["*"]}}}}}
        """
    }

    /// The records in `dir/audit.log`, read again until one has id `last` (the writer is a thread of its own).
    static func records(_ dir: String, until last: AuditEvent.Kind) async throws -> [JSON] {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let text = (try? String(contentsOfFile: dir + "/audit.log", encoding: .utf8)) ?? ""
            let records = text.split(separator: "\n").compactMap { try? JSON.parse(Array($0.utf8)) }
            if records.contains(where: { $0["id"]?.intValue == last.rawValue }) || ContinuousClock.now > deadline {
                return records
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func loginsAndAdminEventsAreRecordedWithoutThePassword() async throws {
        let dir = TemporaryDirectory("gateway-audit")
        let gw = try await InProcessGateway.start(config: Self.config(dir.path))
        func basic(_ user: String, _ pw: String) -> [String: String] {
            ["Authorization": "Basic " + Data("\(user):\(pw)".utf8).base64EncodedString()]
        }
        let host = "127.0.0.1:\(gw.publicPort)"
        #expect(
            try await AnonymousAndAdminPortTests.status(
                port: gw.publicPort, "GET", "/db/", host: host, headers: basic("alice", Self.password)) == 200)
        #expect(
            try await AnonymousAndAdminPortTests.status(
                port: gw.publicPort, "GET", "/db/", host: host, headers: basic("alice", "wrong")) == 401)
        let login = Array(#"{"name":"alice","password":"\#(Self.password)"}"#.utf8)
        #expect(
            try await AnonymousAndAdminPortTests.status(
                port: gw.publicPort, "POST", "/db/_session", host: host, headers: ["Content-Type": "application/json"],
                body: login) == 200)
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            _ = try await AnonymousAndAdminPortTests.status(
                port: gw.publicPort, "GET", "/db/", host: host, headers: basic("eve", "guess"))
        }
        #expect(
            try await AnonymousAndAdminPortTests.status(
                port: gw.publicPort, "GET", "/db/", host: host, headers: basic("eve", "guess")) == 429)

        #expect(try await gw.request("PUT", "/db/_user/bob", body: #"{"password":"\#(Self.password)"}"#).status == 201)
        #expect(try await gw.request("POST", "/db/_role/", body: #"{"name":"ops"}"#).status == 201)
        #expect(try await gw.request("DELETE", "/db/_role/ops").status == 200)
        #expect(try await gw.request("DELETE", "/db/_user/bob").status == 200)
        #expect(try await gw.request("PUT", "/db/doc1", body: #"{"a":1}"#).status == 201)
        #expect(try await gw.request("POST", "/db/_purge", body: #"{"doc1":["*"]}"#).status == 200)
        #expect(try await gw.request("POST", "/db/_compact?type=attachment").status == 200)
        #expect(try await gw.request("PUT", "/db/_config", body: #"{"revs_limit": 50}"#).status == 201)

        let records = try await Self.records(dir.path, until: .gatewayDatabaseConfigChanged)
        func all(_ kind: AuditEvent.Kind) -> [JSON] { records.filter { $0["id"]?.intValue == kind.rawValue } }
        let ok = all(.loginSucceeded)
        #expect(Set(ok.compactMap { $0["source"]?.stringValue }) == ["gateway-basic", "gateway-session"])
        #expect(ok.first?["real_userid"]?["domain"]?.stringValue == "gateway")
        #expect(ok.first?["db"]?.stringValue == "db")
        #expect(all(.loginFailed).count >= 1)
        #expect(all(.loginThrottled).count >= 1)
        for kind in [
            AuditEvent.Kind.gatewayUserSet, .gatewayRoleSet, .gatewayRoleDeleted, .gatewayUserDeleted, .gatewayPurge,
            .gatewayCompact, .gatewayDatabaseConfigChanged,
        ] {
            #expect(all(kind).count == 1, "\(kind.name)")
        }
        #expect(all(.gatewayPurge).first?["doc_ids"]?.arrayValue == [JSON.string("<ud>doc1</ud>")])
        #expect(all(.gatewayDatabaseConfigChanged).first?["fields"]?.arrayValue == [JSON.string("revs_limit")])
        let text = try String(contentsOfFile: dir.path + "/audit.log", encoding: .utf8)
        #expect(!text.contains(Self.password))
        #expect(!text.contains("Basic "))
        #expect(!text.contains("SyncGatewaySession"))
        await gw.stop()
    }
}
