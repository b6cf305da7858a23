import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteeRegistry
import SetteeTestSupport
import Testing

@testable import SetteeAdmin

/// The admin API's audit records (ADR 0148): `/settings/audit` turns the log on and off and is itself audited, each
/// security and admin event the API handles leaves one record of its kind, and no password or Authorization header
/// ever reaches the log.
@Suite struct AuditAdminTests {
    static let knownPassword = "Kn0wn-Pa55word-7f3a"

    /// The node's audit records written so far (waits for the writer, off the cooperative pool).
    static func records(_ registry: NodeRegistry) async throws -> [JSON] {
        let audit = registry.audit
        #expect(try await offPool { audit.waitUntilWritten() })
        return try allText(registry).split(separator: "\n").map { try JSON.parse(Array($0.utf8)) }
    }

    /// Every audit file's text, live and rotated.
    static func allText(_ registry: NodeRegistry) throws -> String {
        guard let dir = registry.audit.directory,
            let names = try? FileManager.default.contentsOfDirectory(atPath: dir)
        else { return "" }
        return try names.sorted().map { try String(contentsOfFile: dir + "/" + $0, encoding: .utf8) }.joined()
    }

    static func ids(_ records: [JSON]) -> [Int] { records.compactMap { $0["id"]?.intValue } }

    /// Off by default (Couchbase's default): nothing is written. Enabling it answers the new settings on GET and
    /// writes a `modify audit configuration` record naming the administrator; values out of range are refused field
    /// by field; a disabled id is not written; turning it off is recorded too (before it takes effect).
    @Test func settingsEnableDisableAndAreAudited() async throws {
        try await withAdmin { client, registry in
            let initial = try await call(client, .get, "/settings/audit")
            #expect(initial.json?["auditdEnabled"] as? Bool == false)
            #expect(initial.json?["logPath"] as? String == registry.dataDirectory + "/logs")
            #expect(
                try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("x", "y")).status
                    == .unauthorized)
            #expect(registry.audit.writtenEvents == 0)

            let bad = try await call(
                client, .post, "/settings/audit", form: "auditdEnabled=maybe&rotateInterval=10&rotateSize=-1")
            #expect(bad.status == .badRequest)
            #expect(Set(bad.errors?.keys.map { $0 } ?? []) == ["auditdEnabled", "rotateInterval", "rotateSize"])

            let on = try await call(
                client, .post, "/settings/audit", form: "auditdEnabled=true&rotateInterval=900&disabled=8193")
            #expect(on.status == .ok)
            let now = try await call(client, .get, "/settings/audit")
            #expect(now.json?["auditdEnabled"] as? Bool == true)
            #expect(now.json?["rotateInterval"] as? Int == 900)
            #expect(now.json?["disabled"] as? [Int] == [8193])
            #expect(registry.auditSettings.auditdEnabled)
            // 8193 (login failure) is disabled: this one is not written.
            _ = try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("x", "y"))
            _ = try await call(client, .post, "/settings/audit", form: "auditdEnabled=false")
            let records = try await Self.records(registry)
            let changes = records.filter { $0["id"]?.intValue == AuditEvent.Kind.auditSettingsChanged.rawValue }
            #expect(changes.count == 2)
            #expect(changes.first?["real_userid"]?["user"]?.stringValue == "<ud>Administrator</ud>")
            #expect(changes.first?["new_settings"]?["auditdEnabled"] == JSON.bool(true))
            #expect(changes.last?["new_settings"]?["auditdEnabled"] == JSON.bool(false))
            #expect(!Self.ids(records).contains(8193))
            let descriptors = try await call(client, .get, "/settings/audit/descriptors")
            #expect(descriptors.jsonArray?.count == AuditEvent.Kind.allCases.count)
        }
    }

    /// `disabledUsers` (Couchbase's `name/domain` list): a named user's events are not written while everyone
    /// else's are; the list comes back on GET as `{name, domain}` objects; an entry without a known domain is refused
    /// by field; an empty value clears it; a cluster document from before the field decodes it as empty.
    @Test func disabledUsersAreLeftOut() async throws {
        try await withAdmin { client, registry in
            #expect(
                try await call(
                    client, .put, "/settings/rbac/users/local/svc", form: "password=svc-pw&roles=ro_admin"
                ).status == .ok)
            let bad = try await call(client, .post, "/settings/audit", form: "disabledUsers=svc/ldap,nodomain")
            #expect(bad.status == .badRequest)
            #expect(bad.errors?.keys.map { $0 } == ["disabledUsers"])
            let on = try await call(
                client, .post, "/settings/audit", form: "auditdEnabled=true&disabledUsers=svc%2Flocal,%20app%2Fgateway")
            #expect(on.status == .ok)
            let now = try await call(client, .get, "/settings/audit")
            let listed = (now.json?["disabledUsers"] as? [[String: Any]])?.map {
                "\($0["name"] as? String ?? "")/\($0["domain"] as? String ?? "")"
            }
            #expect(listed == ["svc/local", "app/gateway"])
            let svc = RBACAPITests.basic("svc", "svc-pw")
            #expect(try await call(client, .get, "/pools/default/buckets", auth: svc).status == .ok)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=x&ramQuotaMB=100", auth: svc)
                    .status == .forbidden)
            #expect(try await call(client, .post, "/settings/audit", form: "disabledUsers=").status == .ok)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=y&ramQuotaMB=100", auth: svc)
                    .status == .forbidden)
            let records = try await Self.records(registry)
            // svc's login and refusal while listed left nothing; after the list was cleared both are written; the
            // administrator's settings changes are written throughout.
            let svcRecords = records.filter { $0["real_userid"]?["user"]?.stringValue == "<ud>svc</ud>" }
            #expect(
                Self.ids(svcRecords) == [
                    AuditEvent.Kind.loginSucceeded.rawValue, AuditEvent.Kind.accessDenied.rawValue,
                ])
            #expect(svcRecords.last?["path"]?.stringValue?.contains("/pools/default/buckets") == true)
            let changes = records.filter { $0["id"]?.intValue == AuditEvent.Kind.auditSettingsChanged.rawValue }
            #expect(changes.count == 2)
            #expect(changes.allSatisfy { $0["real_userid"]?["user"]?.stringValue == "<ud>Administrator</ud>" })
            #expect(registry.auditSettings.disabledUsers.isEmpty)

            let old = try JSONDecoder().decode(
                AuditSettings.self,
                from: Data(#"{"auditdEnabled":true,"rotateInterval":86400,"rotateSize":20,"disabled":[]}"#.utf8))
            #expect(old.disabledUsers.isEmpty)
        }
    }

    /// One record per kind of event the admin API handles, each with its fields: logins (ok, failed, throttled),
    /// an RBAC refusal, user set and delete, bucket create, edit, flush and delete, scope and collection create and
    /// drop, document read, write and delete, the internal secret's rotation.
    @Test func eachAdminEventKindIsRecorded() async throws {
        try await withAdmin { client, registry in
            #expect(try await call(client, .post, "/settings/audit", form: "auditdEnabled=true").status == .ok)
            #expect(
                try await call(
                    client, .put, "/settings/rbac/users/local/reader",
                    form: "password=reader-pw&roles=data_reader%5Bdemo%5D"
                ).status == .ok)
            let reader = RBACAPITests.basic("reader", "reader-pw")
            #expect(try await call(client, .get, "/pools/default/buckets", auth: reader).status == .ok)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=x&ramQuotaMB=100", auth: reader)
                    .status == .forbidden)
            #expect(
                try await call(
                    client, .post, "/pools/default/buckets",
                    form: "name=demo&ramQuotaMB=100&replicaNumber=0&flushEnabled=1"
                ).status == .accepted)
            #expect(try await call(client, .post, "/pools/default/buckets/demo", form: "replicaNumber=0").status == .ok)
            let scopes = "/pools/default/buckets/demo/scopes"
            #expect(try await call(client, .post, scopes, form: "name=s1").status == .ok)
            #expect(try await call(client, .post, scopes + "/s1/collections", form: "name=c1").status == .ok)
            #expect(try await call(client, .delete, scopes + "/s1/collections/c1").status == .ok)
            #expect(try await call(client, .delete, scopes + "/s1").status == .ok)
            let doc = "/pools/default/buckets/demo/docs/doc-1"
            #expect(try await call(client, .post, doc, form: "value=%7B%22a%22%3A1%7D").status == .ok)
            #expect(try await call(client, .get, doc).status == .ok)
            #expect(try await call(client, .delete, doc).status == .ok)
            #expect(try await call(client, .post, "/pools/default/buckets/demo/controller/doFlush").status == .ok)
            #expect(
                try await call(client, .post, "/controller/rotateInternalSecret", form: "graceSeconds=0").status
                    == .ok)
            #expect(try await call(client, .delete, "/pools/default/buckets/demo").status == .ok)
            #expect(try await call(client, .delete, "/settings/rbac/users/local/reader").status == .ok)
            let wrong = RBACAPITests.basic("mallory", "guess")
            for _ in 0..<Limits.loginFailuresBeforeThrottle {
                #expect(try await call(client, .get, "/pools/default", auth: wrong).status == .unauthorized)
            }
            #expect(try await call(client, .get, "/pools/default", auth: wrong).status == .tooManyRequests)

            let records = try await Self.records(registry)
            func one(_ kind: AuditEvent.Kind) -> JSON? { records.first { $0["id"]?.intValue == kind.rawValue } }
            let expected: [AuditEvent.Kind] = [
                .auditSettingsChanged, .userSet, .loginSucceeded, .accessDenied, .bucketCreated, .bucketModified,
                .scopeCreated, .collectionCreated, .collectionDropped, .scopeDropped, .documentAccessed, .bucketFlushed,
                .internalSecretRotated, .bucketDeleted, .userDeleted, .loginFailed, .loginThrottled,
            ]
            for kind in expected { #expect(one(kind) != nil, "no \(kind.name) record") }
            let denied = one(.accessDenied)
            #expect(denied?["real_userid"]?["user"]?.stringValue == "<ud>reader</ud>")
            #expect(denied?["path"]?.stringValue == "<ud>/pools/default/buckets</ud>")
            #expect(one(.loginSucceeded)?["source"]?.stringValue == "rest")
            #expect(one(.loginFailed)?["real_userid"]?["user"]?.stringValue == "<ud>mallory</ud>")
            #expect((one(.loginThrottled)?["retry_after"]?.intValue ?? 0) > 0)
            #expect(one(.bucketCreated)?["bucket_name"]?.stringValue == "demo")
            #expect(one(.collectionCreated)?["collection_name"]?.stringValue == "c1")
            #expect(one(.collectionCreated)?["scope_name"]?.stringValue == "s1")
            let docs = records.filter { $0["id"]?.intValue == AuditEvent.Kind.documentAccessed.rawValue }
            #expect(docs.compactMap { $0["operation"]?.stringValue } == ["write", "read", "delete"])
            #expect(docs.first?["key"]?.stringValue == "<ud>doc-1</ud>")
            #expect(one(.userSet)?["roles"]?.arrayValue?.first?.stringValue == "data_reader[demo]")
        }
    }

    /// After logins with a known password (right and wrong, as admin and as a local user, a user created and
    /// changed with it), no audit file holds the password, its Basic header, or any Authorization header.
    @Test func aPasswordNeverAppearsInTheLog() async throws {
        try await withAdmin { client, registry in
            #expect(try await call(client, .post, "/settings/audit", form: "auditdEnabled=true").status == .ok)
            let pw = Self.knownPassword
            #expect(
                try await call(
                    client, .put, "/settings/rbac/users/local/ann", form: "password=\(pw)&roles=cluster_admin"
                ).status == .ok)
            #expect(try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("ann", pw)).status == .ok)
            _ = try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("ann", pw + "x"))
            _ = try await call(client, .get, "/pools/default", auth: RBACAPITests.basic("Administrator", pw))
            #expect(
                try await call(client, .put, "/settings/rbac/users/local/ann", form: "password=\(pw)&roles=admin")
                    .status == .ok)
            let records = try await Self.records(registry)
            #expect(records.count >= 6)
            let text = try Self.allText(registry)
            #expect(!text.contains(pw))
            #expect(!text.contains(Data("ann:\(pw)".utf8).base64EncodedString()))
            #expect(!text.contains("Basic "))
            #expect(!text.lowercased().contains("authorization"))
        }
    }
}

/// The cluster manager's events: a rebalance (of this one node) is recorded when it starts and when it ends, and a
/// logs collection's start names the nodes and the redaction level.
@Suite struct AuditClusterEventTests {
    @Test func rebalanceAndLogsCollectionAreRecorded() async throws {
        try await withAdmin(cluster: true) { client, registry in
            #expect(try await call(client, .post, "/settings/audit", form: "auditdEnabled=true").status == .ok)
            let me = registry.node.otpNode.rawValue
            let started = try await call(client, .post, "/controller/rebalance", form: "knownNodes=\(me)&ejectedNodes=")
            #expect(started.status == .ok, "\(started.body)")
            #expect(
                try await call(
                    client, .post, "/controller/startLogsCollection", form: "nodes=*&logRedactionLevel=partial"
                )
                .status == .ok)
            var records: [JSON] = []
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                records = try await AuditAdminTests.records(registry)
                if records.contains(where: { $0["id"]?.intValue == AuditEvent.Kind.rebalanceEnded.rawValue }) { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            func one(_ kind: AuditEvent.Kind) -> JSON? { records.first { $0["id"]?.intValue == kind.rawValue } }
            #expect(one(.rebalanceStarted)?["known_nodes"]?.arrayValue == [JSON.string(me)])
            #expect(one(.rebalanceStarted)?["real_userid"]?["user"]?.stringValue == "<ud>Administrator</ud>")
            #expect(one(.rebalanceEnded)?["completed"] == JSON.bool(true))
            #expect(one(.logsCollectionStarted)?["log_redaction_level"]?.stringValue == "partial")
        }
    }
}

/// `GET /diag` and `GET /sasl_logs[/STREAM]` (issue 72 item 4: both answered 404): the node's collected files as one
/// text, and its kept log lines by Couchbase's stream names, each stream the lines at or above its level.
@Suite struct DiagnosticsRoutesTests {
    @Test func diagAndSaslLogsAnswerTheNodesTextWithoutSecrets() async throws {
        let marker = RandomID.hex128()
        RecentLogLines.process.append("2026-11-30T07:00:00.000Z info settee.test : routine \(marker)-info")
        RecentLogLines.process.append("2026-11-30T07:00:00.001Z error settee.test : failed \(marker)-error")
        try await withAdmin(cluster: true) { client, registry in
            #expect(
                try await call(
                    client, .put, "/settings/rbac/users/local/someone",
                    form: "password=\(AuditAdminTests.knownPassword)&roles=ro_admin"
                ).status == .ok)
            let diag = try await call(client, .get, "/diag")
            #expect(diag.status == .ok)
            for section in ["settee.log", "stats.json", "cluster.json"] {
                #expect(diag.body.contains("==== \(section) ===="), "\(section)")
            }
            #expect(diag.body.contains("\(marker)-error"))
            #expect(diag.body.contains(registry.node.otpNode.rawValue))
            #expect(!diag.body.contains(AuditAdminTests.knownPassword))

            let all = try await call(client, .get, "/sasl_logs")
            #expect(all.status == .ok)
            #expect(all.body.contains("\(marker)-info") && all.body.contains("\(marker)-error"))
            let info = try await call(client, .get, "/sasl_logs/info")
            #expect(info.body.contains("\(marker)-info") && info.body.contains("\(marker)-error"))
            let errors = try await call(client, .get, "/sasl_logs/error")
            #expect(errors.status == .ok)
            #expect(!errors.body.contains("\(marker)-info") && errors.body.contains("\(marker)-error"))
            #expect(try await call(client, .get, "/sasl_logs/nonesuch").status == .notFound)
            let reader = RBACAPITests.basic("someone", AuditAdminTests.knownPassword)
            #expect(try await call(client, .get, "/diag", auth: reader).status == .forbidden)
        }
    }

    /// Regression (issue 72, a helper's find): a partial logs collection's `cluster.json` held user names in the
    /// clear. Every `username`, `fullName` and users' `name` is now its salted digest in `<ud>` tags; bucket and node
    /// names are not user data and stay.
    @Test func partialRedactionHidesUserNamesInTheClusterDocument() throws {
        let text =
            #"{"buckets":[{"settings":{"name":"demo"}}],"users":[{"name":"bob","fullName":"Bob B","roles":["admin"],"#
            + #""credential":{"username":"bob"}}],"audit":{"disabledUsers":[{"name":"eve","domain":"local"}]},"#
            + #""members":[{"node":{"otpNode":"n_1@127.0.0.1"}}]}"#
        let doc = try JSON.parse(Array(text.utf8))
        let redactor = UserDataRedaction(salt: "s")
        let out = String(decoding: NodeCollection.redactingUserNames(doc, redactor).serialized(), as: UTF8.self)
        for name in ["bob", "Bob B", "eve"] {
            #expect(!out.contains("\"\(name)\""), "\(name) in \(out)")
            #expect(out.contains("<ud>\(redactor.digest(name))</ud>"))
        }
        #expect(out.contains(#""name":"demo""#) && out.contains("n_1@127.0.0.1") && out.contains(#""domain":"local""#))
    }

    /// Lines without a known level (a continuation, a foreign line) are left out of every stream but none is cut.
    @Test func logTextFiltersByTheLinesLevel() {
        let lines = [
            "t debug x : a", "t warning x : b", "t critical x : c", "no-level-line", "t notalevel x : d",
        ]
        #expect(LogsCollectionRoutes.logText(atLeast: .error, lines: lines) == "t critical x : c\n")
        #expect(
            LogsCollectionRoutes.logText(atLeast: .trace, lines: lines)
                == "t debug x : a\nt warning x : b\nt critical x : c\n")
    }
}
