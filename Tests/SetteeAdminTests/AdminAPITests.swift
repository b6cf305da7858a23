import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import SetteeAdmin
import SetteeClusterMap
import SetteeCore
import SetteeRegistry
import SetteeStorage
import SetteeTestSupport
import Synchronization
import Testing

final class PortBox: Sendable {
    let port = Mutex(0)
}

/// One HTTP exchange's outcome, decoded.
struct Reply {
    let status: HTTPResponse.Status
    let headers: HTTPFields
    let body: String
    var json: [String: Any]? { try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] }
    var jsonArray: [[String: Any]]? { try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [[String: Any]] }
    var errors: [String: String]? { json?["errors"] as? [String: String] }
}

let adminAuth = "Basic " + Data("Administrator:password".utf8).base64EncodedString()

func call(
    _ client: some TestClientProtocol, _ method: HTTPRequest.Method, _ uri: String, form: String? = nil,
    auth: String? = adminAuth, contentType: String = "application/x-www-form-urlencoded"
) async throws -> Reply {
    var headers: HTTPFields = [:]
    if let auth { headers[.authorization] = auth }
    if form != nil { headers[.contentType] = contentType }
    let response = try await client.execute(
        uri: uri, method: method, headers: headers, body: form.map { ByteBuffer(string: $0) })
    return Reply(status: response.status, headers: response.headers, body: String(buffer: response.body))
}

/// Runs `body` against a router over a real registry on a fresh temp dir.
func withAdmin(
    initialized: Bool = true, cluster withCluster: Bool = false,
    _ body: @Sendable (any TestClientProtocol, NodeRegistry) async throws -> Void
) async throws {
    let dir = TemporaryDirectory("admin")
    defer { dir.remove() }
    let registry = try makeRegistry(dir)
    defer { registry.shutdown() }
    if initialized { try registry.initialize(username: "Administrator", password: "password") }
    // The cluster routes (`/settee/internal/...`) are registered only with a cluster manager.
    let cluster = withCluster ? ClusterManager(registry: registry, logger: testLogger) : nil
    let app = Application(router: AdminServer.makeRouter(registry: registry, logger: testLogger, cluster: cluster))
    do {
        try await app.test(.router) { client in try await body(client, registry) }
    } catch {
        await cluster?.shutdown()
        throw error
    }
    await cluster?.shutdown()
}

@Suite struct AdminAPITests {
    /// Proves the provisioning flow: open setup endpoints before init, empty pools, then credentials required.
    @Test func initialisationFlow() async throws {
        try await withAdmin(initialized: false) { client, registry in
            let pools = try await call(client, .get, "/pools", auth: nil)
            #expect(pools.status == .ok)
            #expect((pools.json?["pools"] as? [Any])?.isEmpty == true)
            let pool = try await call(client, .get, "/pools/default", auth: nil)
            #expect(pool.status == .notFound)
            #expect(pool.body == "\"unknown pool\"")
            #expect(try await call(client, .get, "/pools/default/buckets", auth: nil).status == .unauthorized)

            let services = try await call(
                client, .post, "/node/controller/setupServices", form: "services=kv", auth: nil)
            #expect(services.status == .ok)
            let badServices = try await call(
                client, .post, "/node/controller/setupServices", form: "services=kv,eve3nting", auth: nil)
            #expect(badServices.errors?["services"] == "Unknown services: [\"eve3nting\"]")
            let noServices = try await call(client, .post, "/node/controller/setupServices", form: "", auth: nil)
            #expect(noServices.errors?["services"] == "The value must be supplied")
            let quota = try await call(
                client, .post, "/pools/default", form: "memoryQuota=512&clusterName=demo", auth: nil)
            #expect(quota.status == .ok)
            #expect(registry.memoryQuotaMB == 512)

            let missing = try await call(
                client, .post, "/settings/web", form: "username=Administrator&password=password", auth: nil)
            #expect(missing.status == .badRequest)
            #expect(missing.errors?["port"] == "The value must be supplied")
            let short = try await call(
                client, .post, "/settings/web", form: "username=a&password=123&port=SAME", auth: nil)
            #expect(short.errors?["password"] == "The password must be at least 6 characters long.")
            let web = try await call(
                client, .post, "/settings/web", form: "username=Administrator&password=password&port=SAME", auth: nil)
            #expect(web.status == .ok)
            #expect((web.json?["newBaseUri"] as? String)?.hasPrefix("http://") == true)
            #expect((web.json?["newBaseUri"] as? String)?.hasSuffix(":9000/") == true)
            #expect(registry.isInitialized)

            // Now everything needs credentials, including a second /settings/web.
            let again = try await call(
                client, .post, "/settings/web", form: "username=x&password=xxxxxxxx&port=SAME", auth: nil)
            #expect(again.status == .unauthorized)
            let after = try await call(client, .get, "/pools")
            #expect(after.status == .ok)
            #expect((after.json?["pools"] as? [[String: Any]])?.first?["name"] as? String == "default")
            let def = try await call(client, .get, "/pools/default")
            #expect(def.status == .ok)
            #expect(def.json?["clusterName"] as? String == "demo")
        }
    }

    /// Proves `/clusterInit` applies services, quota, name and credentials in one call.
    @Test func clusterInit() async throws {
        try await withAdmin(initialized: false) { client, registry in
            let r = try await call(
                client, .post, "/clusterInit",
                form: "username=Administrator&password=password&port=SAME&services=kv&clusterName=c1&memoryQuota=1024",
                auth: nil)
            #expect(r.status == .ok)
            #expect(registry.isInitialized)
            #expect(registry.clusterIdentity.name == "c1")
            #expect(registry.memoryQuotaMB == 1024)
            #expect(registry.checkAdmin(username: "Administrator", password: "password"))
        }
    }

    /// Proves missing or wrong credentials get 401 with Couchbase's realm (wrong ones even on the listings
    /// open to anonymous callers), and `GET /` always answers.
    @Test func authRequired() async throws {
        try await withAdmin { client, _ in
            for auth in [
                nil, "Basic " + Data("Administrator:wrong".utf8).base64EncodedString(), "Bearer x", "Basic !!",
            ] {
                let r = try await call(client, .get, "/settings/rbac/users", auth: auth)
                #expect(r.status == .unauthorized)
                #expect(r.headers[.wwwAuthenticate] == "Basic realm=\"Couchbase Server Admin / REST\"")
                if auth != nil {
                    #expect(try await call(client, .get, "/pools/default/buckets", auth: auth).status == .unauthorized)
                }
            }
            #expect(try await call(client, .get, "/", auth: nil).status == .ok)
            #expect(try await call(client, .get, "/pools/default/buckets").status == .ok)
        }
    }

    /// Proves the reads open without credentials (ADR 0015): pools, the bucket list showing only the
    /// authType=none bucket, that bucket's full and terse configs; the sasl bucket, an unknown one, bucket
    /// creation and RBAC stay 401; `/pools` says the anonymous caller is not the admin.
    @Test func anonymousReadsOfOpenBuckets() async throws {
        try await withAdmin { client, registry in
            try registry.createBucket(settings("open", auth: .none))
            try registry.createBucket(settings("secret", auth: .sasl))
            let pools = try await call(client, .get, "/pools", auth: nil)
            #expect(pools.status == .ok && pools.json?["isAdminCreds"] as? Bool == false)
            #expect(try await call(client, .get, "/pools/default", auth: nil).status == .ok)
            let list = try await call(client, .get, "/pools/default/buckets", auth: nil)
            #expect(list.status == .ok && list.jsonArray?.map { $0["name"] as? String } == ["open"])
            #expect(try await call(client, .get, "/pools/default/buckets").jsonArray?.count == 2)
            for path in ["/pools/default/buckets/open", "/pools/default/b/open"] {
                #expect(try await call(client, .get, path, auth: nil).status == .ok)
            }
            for path in [
                "/pools/default/buckets/secret", "/pools/default/b/secret", "/pools/default/b/nosuch",
                "/settings/rbac/users",
            ] {
                #expect(try await call(client, .get, path, auth: nil).status == .unauthorized)
            }
            let create = try await call(
                client, .post, "/pools/default/buckets", form: "name=x&ramQuotaMB=100&authType=none", auth: nil)
            #expect(create.status == .unauthorized)
            #expect(try await call(client, .delete, "/pools/default/buckets/open", auth: nil).status == .unauthorized)
        }
    }

    /// Proves create → list → get → terse config, with 202 + Location and SDK-required fields.
    @Test func createListGetTerse() async throws {
        try await withAdmin { client, registry in
            let created = try await call(
                client, .post, "/pools/default/buckets",
                form: "name=beer-sample&bucketType=couchbase&ramQuotaMB=100&replicaNumber=0&flushEnabled=1")
            #expect(created.status == .accepted)
            #expect(created.headers[.location] == "/pools/default/buckets/beer-sample")
            #expect(created.body.isEmpty)
            #expect(registry.bucket(named: "beer-sample") != nil)

            let list = try await call(client, .get, "/pools/default/buckets")
            #expect(list.status == .ok)
            let buckets = try #require(list.jsonArray)
            #expect(buckets.map { $0["name"] as? String } == ["beer-sample"])

            let one = try await call(client, .get, "/pools/default/buckets/beer-sample")
            let b = try #require(one.json)
            #expect(b["bucketType"] as? String == "membase")
            #expect((b["quota"] as? [String: Int])?["rawRAM"] == 100 * 1024 * 1024)
            #expect(b["replicaNumber"] as? Int == 0)
            #expect((b["controllers"] as? [String: Any])?["flush"] != nil)
            #expect((b["nodes"] as? [[String: Any]])?.first?["hostname"] as? String == "127.0.0.1:9000")
            #expect(try await call(client, .get, "/pools/default/buckets/nope").status == .notFound)
            let uri = try #require(b["uri"] as? String)
            #expect(try await call(client, .get, uri).status == .ok)
            #expect(
                try await call(client, .get, "/pools/default/buckets/beer-sample?bucket_uuid=00").status == .notFound)

            let terse = try await call(client, .get, "/pools/default/b/beer-sample")
            let t = try #require(terse.json)
            #expect(t["rev"] as? Int == Int(try #require(registry.configRevision(bucket: "beer-sample")).rev))
            #expect((t["vBucketServerMap"] as? [String: Any])?["serverList"] as? [String] == ["127.0.0.1:12000"])
            #expect(!terse.body.contains("$HOST"))
            let missing = try await call(client, .get, "/pools/default/b/nope")
            #expect(missing.status == .notFound)
            #expect(missing.body == "\"Bucket not found\"")

            let pool = try #require(try await call(client, .get, "/pools/default").json)
            #expect(pool["rebalanceStatus"] as? String == "none")
            #expect((pool["bucketNames"] as? [[String: Any]])?.first?["bucketName"] as? String == "beer-sample")
            #expect((pool["nodes"] as? [[String: Any]])?.first?["status"] as? String == "healthy")
        }
    }

    /// Proves every bucket-create validation message matches ns_server's, under its field key, with summaries.
    @Test(arguments: [
        ("bucketType=couchbase&ramQuotaMB=100", "name", "Bucket name needs to be specified"),
        ("name=&ramQuotaMB=100", "name", "Bucket name cannot be empty"),
        (
            "name=\(String(repeating: "a", count: 101))&ramQuotaMB=100", "name",
            "Bucket name cannot exceed 100 characters"
        ),
        (
            "name=bad%21name&ramQuotaMB=100", "name",
            "Bucket name can only contain characters in range A-Z, a-z, 0-9 as well as underscore, period, dash & percent. Consult the documentation."
        ),
        ("name=.dot&ramQuotaMB=100", "name", "Bucket name cannot start with dot."),
        ("name=b&bucketType=ephemeral&ramQuotaMB=100", "bucketType", "invalid bucket type"),
        ("name=b&bucketType=memcached&ramQuotaMB=100", "bucketType", "memcached buckets are no longer supported"),
        ("name=b", "ramQuota", "The RAM Quota must be specified and must be a positive integer."),
        ("name=b&ramQuotaMB=abc", "ramQuota", "The RAM Quota must be specified and must be a positive integer."),
        ("name=b&ramQuota=-5", "ramQuota", "The RAM Quota cannot be negative."),
        ("name=b&ramQuotaMB=99", "ramQuota", "RAM quota cannot be less than 100 MiB"),
        (
            "name=b&ramQuotaMB=100&replicaNumber=-1", "replicaNumber",
            "The replica number must be specified and must be a non-negative integer."
        ),
        (
            "name=b&ramQuotaMB=100&replicaNumber=x", "replicaNumber",
            "The replica number must be specified and must be a non-negative integer."
        ),
        ("name=b&ramQuotaMB=100&replicaNumber=4", "replicaNumber", "Replica number larger than 3 is not supported."),
        ("name=b&ramQuotaMB=100&flushEnabled=2", "flushEnabled", "flushEnabled can only be 1 or 0"),
        (
            "name=b&ramQuotaMB=100&evictionPolicy=lru", "evictionPolicy",
            "Eviction policy must be either 'valueOnly' or 'fullEviction' for couchbase buckets"
        ),
        (
            "name=b&ramQuotaMB=100&purgeInterval=61", "purgeInterval",
            "Metadata purge interval must be a number between 0.04 and 60 days"
        ),
        (
            "name=b&ramQuotaMB=100&purgeInterval=0.01", "purgeInterval",
            "Metadata purge interval must be a number between 0.04 and 60 days"
        ),
        (
            "name=b&ramQuotaMB=100&purgeInterval=soon", "purgeInterval",
            "Metadata purge interval must be a number between 0.04 and 60 days"
        ),
    ])
    func validationMessages(form: String, field: String, message: String) async throws {
        try await withAdmin { client, registry in
            let r = try await call(client, .post, "/pools/default/buckets", form: form)
            #expect(r.status == .badRequest)
            #expect(r.errors?[field] == message, "body: \(r.body)")
            #expect((r.json?["summaries"] as? [String: Any])?["ramSummary"] != nil)
            #expect(registry.bucketNames.isEmpty)
        }
    }

    /// Proves several bad fields are all reported at once, and unknown extra fields are tolerated.
    @Test func multipleErrorsAndExtras() async throws {
        try await withAdmin { client, registry in
            let r = try await call(client, .post, "/pools/default/buckets", form: "name=.x&ramQuotaMB=1&flushEnabled=9")
            #expect(Set(r.errors?.keys.map { $0 } ?? []) == ["name", "ramQuota", "flushEnabled"])
            let ok = try await call(
                client, .post, "/pools/default/buckets",
                form: "name=extra&ramQuotaMB=100&maxTTL=0&compressionMode=off&storageBackend=couchstore&whatever=1")
            #expect(ok.status == .accepted)
            #expect(registry.bucketSettings(named: "extra")?.replicaNumber == 1)
        }
    }

    /// Proves a duplicate name gets ns_server's message, case-insensitively, and the SDK's `ramQuota` alias works.
    @Test func duplicateName() async throws {
        try await withAdmin { client, _ in
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=dup&ramQuota=100").status
                    == .accepted)
            for name in ["dup", "DUP"] {
                let r = try await call(client, .post, "/pools/default/buckets", form: "name=\(name)&ramQuotaMB=100")
                #expect(r.status == .badRequest)
                #expect(r.errors?["name"] == "Bucket with given name already exists")
            }
        }
    }

    /// Proves the quota check against the cluster's memoryQuota and `just_validate=1` (validates, creates nothing).
    @Test func quotaAndJustValidate() async throws {
        try await withAdmin { client, registry in
            try registry.updateClusterSettings(memoryQuotaMB: 250)
            let v = try await call(
                client, .post, "/pools/default/buckets?just_validate=1", form: "name=a&ramQuotaMB=200")
            #expect(v.status == .ok)
            #expect(registry.bucketNames.isEmpty)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=a&ramQuotaMB=200").status
                    == .accepted)
            let r = try await call(client, .post, "/pools/default/buckets", form: "name=b&ramQuotaMB=100")
            #expect(r.errors?["ramQuota"] == "RAM quota specified is too large to be provisioned into this cluster.")
        }
    }

    /// Proves a bucket name with `%` round-trips: created from a form, addressed as `%25` in paths.
    @Test func percentInBucketName() async throws {
        try await withAdmin { client, registry in
            let created = try await call(client, .post, "/pools/default/buckets", form: "name=a%25b&ramQuotaMB=100")
            #expect(created.status == .accepted)
            #expect(created.headers[.location] == "/pools/default/buckets/a%25b")
            #expect(registry.bucketNames == ["a%b"])
            let got = try await call(client, .get, "/pools/default/buckets/a%25b")
            #expect(got.json?["name"] as? String == "a%b")
            #expect(try await call(client, .delete, "/pools/default/buckets/a%25b").status == .ok)
            #expect(registry.bucketNames.isEmpty)
        }
    }

    /// Proves a bucket edit turns flush on (then doFlush works), changes replicas with a newer config revision,
    /// and refuses what cannot change live, with 404 for an unknown bucket.
    @Test func editBucket() async throws {
        try await withAdmin { client, registry in
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=ed&ramQuotaMB=100&replicaNumber=0")
                    .status == .accepted)
            #expect(
                try await call(client, .post, "/pools/default/buckets/ed/controller/doFlush").status == .badRequest)
            let rev0 = try #require(registry.configRevision(bucket: "ed"))
            let ok = try await call(
                client, .post, "/pools/default/buckets/ed", form: "ramQuotaMB=100&flushEnabled=1&replicaNumber=1")
            #expect(ok.status == .ok)
            #expect(registry.bucketSettings(named: "ed")?.flushEnabled == true)
            #expect(registry.bucketSettings(named: "ed")?.replicaNumber == 1)
            #expect(try #require(registry.configRevision(bucket: "ed")) > rev0)
            #expect(registry.clusterMap(bucket: "ed")?.vbucketMap.chains.first == [0, -1])
            #expect(try await call(client, .post, "/pools/default/buckets/ed/controller/doFlush").status == .ok)
            let got = try #require(try await call(client, .get, "/pools/default/buckets/ed").json)
            #expect((got["controllers"] as? [String: Any])?["flush"] != nil)

            let bad = try await call(
                client, .post, "/pools/default/buckets/ed", form: "ramQuotaMB=200&flushEnabled=7&replicaNumber=9")
            #expect(bad.status == .badRequest)
            #expect(Set(bad.errors?.keys.map { $0 } ?? []) == ["ramQuota", "flushEnabled", "replicaNumber"])
            #expect(registry.bucketSettings(named: "ed")?.ramQuotaMB == 100)
            #expect(
                try await call(client, .post, "/pools/default/buckets/none", form: "flushEnabled=1").status
                    == .notFound)
        }
    }

    /// Proves the metadata purge interval (ADR 0095): given at creation it is kept and shown in days, the default
    /// (3) is shown when none was given, and an edit changes it in the settings and in the running engine at once.
    @Test func purgeInterval() async throws {
        try await withAdmin { client, registry in
            let day: Double = 86_400 * 1e9
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=p&ramQuotaMB=100&purgeInterval=0.5")
                    .status == .accepted)
            #expect(registry.bucketSettings(named: "p")?.purgeInterval == 0.5)
            #expect(try #require(registry.bucket(named: "p")).purgeAgeNanoseconds == UInt64(0.5 * day))
            let p = try #require(try await call(client, .get, "/pools/default/buckets/p").json)
            #expect(p["purgeInterval"] as? Double == 0.5)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=q&ramQuotaMB=100").status
                    == .accepted)
            let q = try #require(try await call(client, .get, "/pools/default/buckets/q").json)
            #expect((q["purgeInterval"] as? NSNumber)?.doubleValue == Limits.defaultPurgeIntervalDays)

            #expect(try await call(client, .post, "/pools/default/buckets/p", form: "purgeInterval=2").status == .ok)
            #expect(registry.bucketSettings(named: "p")?.purgeInterval == 2)
            #expect(try #require(registry.bucket(named: "p")).purgeAgeNanoseconds == UInt64(2 * day))
            let bad = try await call(client, .post, "/pools/default/buckets/p", form: "purgeInterval=0")
            #expect(bad.status == .badRequest && bad.errors?["purgeInterval"] != nil)
            #expect(registry.bucketSettings(named: "p")?.purgeInterval == 2)
        }
    }

    /// Proves delete answers 200, then 404 with ns_server's text, and the bucket is gone.
    @Test func deleteBucket() async throws {
        try await withAdmin { client, registry in
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=gone&ramQuotaMB=100").status
                    == .accepted)
            let d = try await call(client, .delete, "/pools/default/buckets/gone")
            #expect(d.status == .ok)
            #expect(registry.bucket(named: "gone") == nil)
            let again = try await call(client, .delete, "/pools/default/buckets/gone")
            #expect(again.status == .notFound)
            #expect(again.body == "The bucket to be deleted was not found.\r\n")
            #expect(try await call(client, .get, "/pools/default/buckets/gone").status == .notFound)
        }
    }

    /// Proves flush: 200 when enabled (documents removed), 400 {"_":...} when disabled, 404 when missing.
    @Test func flush() async throws {
        try await withAdmin { client, registry in
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=f1&ramQuotaMB=100&flushEnabled=1")
                    .status == .accepted)
            #expect(
                try await call(client, .post, "/pools/default/buckets", form: "name=f0&ramQuotaMB=100").status
                    == .accepted)
            let key = Array("doc".utf8)
            let vb = VBucketHash.vbucket(forKey: key)
            let engine = try #require(registry.bucket(named: "f1"))
            _ = try engine.store(
                .set, vb, key, value: Array("{}".utf8), flags: 0, expiry: 0, datatype: .json, cas: .zero)
            let ok = try await call(client, .post, "/pools/default/buckets/f1/controller/doFlush")
            #expect(ok.status == .ok)
            #expect(throws: EngineError.keyNotFound) { try engine.get(vb, key) }
            let disabled = try await call(client, .post, "/pools/default/buckets/f0/controller/doFlush")
            #expect(disabled.status == .badRequest)
            #expect(disabled.json?["_"] as? String == "Flush is disabled for the bucket")
            #expect(try await call(client, .post, "/pools/default/buckets/nope/controller/doFlush").status == .notFound)
        }
    }

    /// Proves the 31st bucket gets 400 {"_":"Cannot create more than 30 buckets"}.
    @Test func bucketLimit() async throws {
        try await withAdmin { client, registry in
            for i in 0..<Limits.maxBuckets {
                try registry.createBucket(settings("pre\(i)", vbuckets: 16))
            }
            let r = try await call(client, .post, "/pools/default/buckets", form: "name=over&ramQuotaMB=100")
            #expect(r.status == .badRequest)
            #expect(r.json?["_"] as? String == "Cannot create more than 30 buckets")
            #expect(r.json?["errors"] == nil)
        }
    }

    /// Proves malformed and oversized bodies get 400/413 with a message instead of a crash, and JSON bodies work.
    @Test func malformedBodies() async throws {
        try await withAdmin { client, registry in
            let badEscape = try await call(client, .post, "/pools/default/buckets", form: "name=%zz&ramQuotaMB=100")
            #expect(badEscape.status == .badRequest)
            #expect((badEscape.json?["_"] as? String)?.contains("percent") == true)
            let badJSON = try await call(
                client, .post, "/pools/default/buckets", form: "{\"name\":", contentType: "application/json")
            #expect(badJSON.status == .badRequest)
            #expect(badJSON.json?["_"] is String)
            let big = String(repeating: "a", count: Limits.maxAdminRequestBody + 10)
            let tooBig = try await call(client, .post, "/pools/default/buckets", form: "name=\(big)")
            #expect(tooBig.status == .contentTooLarge)
            let json = try await call(
                client, .post, "/pools/default/buckets", form: #"{"name":"j","ramQuotaMB":100,"flushEnabled":true}"#,
                contentType: "application/json")
            #expect(json.status == .accepted)
            #expect(registry.bucketSettings(named: "j")?.flushEnabled == true)
        }
    }

    /// Proves a bucket and the credentials created over HTTP are there after a restart, and a wrong password is refused.
    @Test func restartPersistence() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        do {
            let registry = try makeRegistry(dir)
            let app = Application(router: AdminServer.makeRouter(registry: registry, logger: testLogger))
            try await app.test(.router) { client in
                _ = try await call(
                    client, .post, "/settings/web", form: "username=Administrator&password=password&port=SAME",
                    auth: nil)
                #expect(
                    try await call(client, .post, "/pools/default/buckets", form: "name=kept&ramQuotaMB=100").status
                        == .accepted)
            }
            registry.shutdown()
        }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        let app = Application(router: AdminServer.makeRouter(registry: registry, logger: testLogger))
        try await app.test(.router) { client in
            let list = try await call(client, .get, "/pools/default/buckets")
            #expect(list.jsonArray?.map { $0["name"] as? String } == ["kept"])
            let wrong = "Basic " + Data("Administrator:password1".utf8).base64EncodedString()
            #expect(try await call(client, .get, "/pools/default/buckets", auth: wrong).status == .unauthorized)
            #expect(try await call(client, .get, "/pools/default/b/kept").status == .ok)
        }
    }

    /// Proves the live server binds port 0 and reports the real port, and answers over a socket.
    @Test func liveServerReportsPort() async throws {
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let registry = try makeRegistry(dir)
        defer { registry.shutdown() }
        let seen = PortBox()
        let app = AdminServer.makeApplication(
            registry: registry, host: "127.0.0.1", port: 0, logger: testLogger,
            onListening: { port in seen.port.withLock { $0 = port } })
        try await app.test(.live) { client in
            let r = try await call(client, .get, "/pools", auth: nil)
            #expect(r.status == .ok)
            // Several requests over the socket, as the SDK sends them (keep-alive, form bodies, Basic auth).
            let web = try await call(
                client, .post, "/settings/web", form: "username=Administrator&password=password&port=SAME", auth: nil)
            #expect(web.status == .ok)
            let created = try await call(client, .post, "/pools/default/buckets", form: "name=live&ramQuotaMB=100")
            #expect(created.status == .accepted)
            #expect(created.headers[.contentLength] == "0")
            let terse = try await call(client, .get, "/pools/default/b/live")
            #expect(terse.json?["name"] as? String == "live")
            #expect(terse.headers[.contentLength] == String(terse.body.utf8.count))
            let port = try #require(client.port)
            #expect(port != 0)
            #expect(seen.port.withLock { $0 } == port)
        }
    }
}
