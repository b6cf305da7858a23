import ArgumentParser
import Logging
import NIOCore
import NIOPosix
import SetteeBackup
import SetteeClient
import SetteeClusterMap
import SetteeCore
import SetteeJSON
import SetteeTLS

#if canImport(Glibc)
    import Glibc
#endif

/// `settee`: the command-line client. KV commands go through the smart client; management commands
/// call the admin REST API in Couchbase's shapes.
@main
struct Settee: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee", abstract: "Settee command-line client.",
        subcommands: [
            KV.self, Bucket.self, ScopeCommand.self, CollectionCommand.self, Node.self, Rebalance.self, Failover.self,
            Cluster.self, BackupCommand.self, RestoreCommand.self, CollectInfo.self, GatewayCommand.self,
        ])
}

/// Connection flags every command takes (also from SETTEE_CLUSTER, SETTEE_USERNAME, SETTEE_PASSWORD).
struct GlobalOptions: ParsableArguments {
    @Option(
        help:
            "Admin URL of any node (env SETTEE_CLUSTER; default http://127.0.0.1:8091); https://HOST:18091 or, for kv, couchbases://HOST[:11207] for TLS."
    )
    var cluster: String?
    @Option(help: "CA certificate (PEM) that verifies the cluster's TLS certificate (https://, couchbases://).")
    var cacert: String?
    @Option(help: "Pinned TLS certificate of the cluster, sha256:HEX (instead of --cacert).")
    var certPin: String?
    @Option(name: [.customShort("u"), .long], help: "User (env SETTEE_USERNAME; default Administrator).")
    var username: String?
    @Option(name: [.customShort("p"), .long], help: "Password (env SETTEE_PASSWORD; default password).")
    var password: String?

    private func env(_ name: String) -> String? {
        guard let v = getenv(name) else { return nil }
        let s = String(cString: v)
        return s.isEmpty ? nil : s
    }

    var clusterURL: String { cluster ?? env("SETTEE_CLUSTER") ?? "http://127.0.0.1:8091" }
    var user: String { username ?? env("SETTEE_USERNAME") ?? "Administrator" }
    var pass: String { password ?? env("SETTEE_PASSWORD") ?? "password" }

    /// `--cluster`'s addresses, `http://` added to bare `HOST:PORT`s.
    var clusterSeeds: [String] {
        clusterURL.split(separator: ",").map { $0.contains("://") ? String($0) : "http://" + $0 }
    }

    /// TLS verification from `--cacert`/`--cert-pin` for TLS addresses (nil for plain ones).
    func tlsTrust() throws -> TLSTrust? {
        do { return try TLSTrust.forSeeds(clusterSeeds, caFile: cacert, pin: certPin) } catch {
            throw ValidationError("\(error)")
        }
    }

    /// The admin address named by `--cluster` (the first, if several are given).
    func adminAddress() throws -> NodeAddress {
        guard let first = clusterSeeds.first, case .http(let a)? = Seed(first) else {
            throw ValidationError("--cluster must be http(s)://HOST:PORT, got \(clusterURL)")
        }
        return a
    }

    func http(_ method: HTTPVerb, _ path: String, form: [(String, String)]? = nil) async throws -> HTTPResponse {
        let tls = try tlsTrust()?.makeClientContext()
        return try await AdminHTTP.request(
            method, path, at: try adminAddress(), username: user, password: pass, form: form, tls: tls)
    }

    /// Calls the API and fails with the server's message unless the status is 2xx.
    @discardableResult
    func call(_ method: HTTPVerb, _ path: String, form: [(String, String)]? = nil) async throws -> HTTPResponse {
        let r = try await http(method, path, form: form)
        guard (200..<300).contains(r.status) else {
            throw CLIError(Self.explain(r, method: method, path: path, user: user))
        }
        return r
    }

    /// What went wrong, in words: the server's own message when it sent one, and for the statuses a newcomer
    /// meets first (wrong password, missing role) what to change.
    static func explain(_ r: HTTPResponse, method: HTTPVerb, path: String, user: String) -> String {
        let body = String(r.text.filter { !$0.isNewline }.drop { $0 == " " })
        let hint: String
        switch r.status {
        case 401:
            hint =
                "authentication failed for user \(user): check --username/--password (or SETTEE_USERNAME/SETTEE_PASSWORD)"
        case 403: hint = "user \(user) is not allowed to do this (its roles do not grant it)"
        case 404: hint = "not found"
        default: hint = "HTTP \(r.status)"
        }
        let status = r.status == 401 || r.status == 403 || r.status == 404 ? " (HTTP \(r.status))" : ""
        return "\(method) \(path): \(hint)\(status)" + (body.isEmpty ? "" : " (server said: \(body))")
    }

    func json(_ path: String) async throws -> JSON {
        let r = try await call(.GET, path)
        do { return try JSON.parse(r.body) } catch { throw CLIError("\(path): \(error)") }
    }
}

struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

// MARK: kv

struct KV: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kv", abstract: "Read and write documents through the smart client.",
        subcommands: [Get.self, Set.self, Rm.self])

    struct Common: ParsableArguments {
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Operation deadline in milliseconds.") var timeoutMs = ClientLimits.defaultOperationTimeoutMs
        @Option(
            help:
                "Collection SCOPE.COLLECTION (default _default._default); a named one is reached with HELLO Collections."
        )
        var collection: String?

        /// The collection named by `--collection`, or nil for the default collection reached without Collections.
        func collectionPath() throws -> (scope: String, name: String)? {
            guard let collection else { return nil }
            return try CollectionPath.split(collection)
        }

        /// Runs `body` on the collection `--collection` names (the default one without it).
        func withCollection<T>(_ body: (CollectionHandle) async throws -> T) async throws -> T {
            let path = try collectionPath()
            return try await withClient(collections: path != nil) { client in
                try await body(client.collection(path?.scope ?? "_default", path?.name ?? "_default"))
            }
        }

        func withClient<T>(collections: Bool = false, _ body: (BucketClient) async throws -> T) async throws -> T {
            var logger = Logger(label: "settee.cli")
            logger.logLevel = .error
            let seeds = global.clusterSeeds.compactMap { Seed($0) }
            var options = ClientOptions(
                seeds: seeds, bucket: bucket, username: global.user, password: global.pass,
                operationTimeoutMs: timeoutMs, configPollIntervalMs: 0)
            options.tls = try global.tlsTrust()
            options.collections = collections
            let client = try await BucketClient.connect(options, logger: logger)
            do {
                let r = try await body(client)
                await client.close()
                return r
            } catch {
                await client.close()
                throw error
            }
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a document's value (its body; with --xattrs its extended attributes too).")
        @OptionGroup var common: Common
        @Argument var key: String
        @Flag(
            help:
                "Print {\"xattrs\": {NAME: VALUE...}, \"body\": BODY}: every extended attribute, system ones (_sync) included."
        )
        var xattrs = false
        func run() async throws {
            guard xattrs else {
                let r = try await common.withCollection { try await $0.get(key) }
                print(String(decoding: r.value, as: UTF8.self))
                return
            }
            if common.collection != nil { throw ValidationError("--xattrs reads the default collection only") }
            guard let d = try await common.withClient({ try await $0.getWithXattrs(key) }) else {
                throw CLIError("\(key): not found")
            }
            print(Self.xattrsJSON(d).text)
        }

        /// The document as `--xattrs` prints it; a body that is not JSON is shown as a string.
        static func xattrsJSON(_ d: DocumentWithXattrs) -> JSON {
            let attributes = d.xattrs.map {
                ($0.name, (try? JSON.parse($0.value)) ?? .string(String(decoding: $0.value, as: UTF8.self)))
            }
            let body = (try? JSON.parse(d.body)) ?? .string(String(decoding: d.body, as: UTF8.self))
            return .object([("xattrs", .object(attributes)), ("body", body)])
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Store a document (upsert).")
        @OptionGroup var common: Common
        @Argument var key: String
        @Argument var value: String
        @Option(help: "Expiry in seconds (0 = never).") var expiry: UInt32 = 0
        func run() async throws {
            let bytes = Array(value.utf8)
            let isJSON = (try? JSON.parse(bytes)) != nil
            let r = try await common.withCollection {
                try await $0.upsert(
                    key, bytes, flags: isJSON ? 0x0200_0000 : 0x0300_0002, expiry: expiry, datatype: isJSON ? 1 : 0)
            }
            print("OK cas=\(r.cas)")
        }
    }

    struct Rm: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a document.", aliases: ["delete"])
        @OptionGroup var common: Common
        @Argument var key: String
        func run() async throws {
            _ = try await common.withCollection { try await $0.remove(key) }
            print("OK")
        }
    }
}

// MARK: bucket

struct Bucket: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bucket", abstract: "Create, list and delete buckets; show their stats; compact them.",
        subcommands: [Create.self, List.self, Delete.self, Stats.self, Compact.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a bucket.")
        @OptionGroup var global: GlobalOptions
        @Argument var name: String
        @Option(help: "RAM quota in MiB.") var ramQuota = 100
        @Option(help: "Replica copies (0-3).") var replicas = 1
        @Flag(help: "Allow flushing the bucket.") var flush = false
        func run() async throws {
            try await global.call(
                .POST, "/pools/default/buckets",
                form: [
                    ("name", name), ("bucketType", "couchbase"), ("ramQuotaMB", String(ramQuota)),
                    ("replicaNumber", String(replicas)), ("flushEnabled", flush ? "1" : "0"),
                ])
            print("created bucket \(name)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List buckets.")
        @OptionGroup var global: GlobalOptions
        func run() async throws {
            let all = try await global.json("/pools/default/buckets")
            for b in all.arrayValue ?? [] {
                let name = b["name"]?.stringValue ?? "?"
                let ram = (b["quota"]?["rawRAM"]?.intValue ?? b["quota"]?["ram"]?.intValue ?? 0) / (1024 * 1024)
                let replicas = b["replicaNumber"]?.intValue ?? 0
                let items = b["basicStats"]?["itemCount"]?.intValue ?? 0
                // The count is the cluster's; a node that did not answer is named rather than silently missing.
                let missing = (b["basicStats"]?["nodesNotCounted"]?.arrayValue ?? []).compactMap(\.stringValue)
                let note = missing.isEmpty ? "" : "\t(not counted: \(missing.joined(separator: ", ")))"
                print("\(name)\tram=\(ram)MiB\treplicas=\(replicas)\titems=\(items)\(note)")
            }
        }
    }

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a bucket's stats on the node asked, one NAME VALUE line each (ADR 0154).",
            discussion: """
                couch_docs_data_size / couch_views_data_size: bytes of the pages in use; *_actual_disk_size: bytes \
                on disk (write-ahead logs included); *_fragmentation: the free pages' share, percent. \
                `settee bucket compact` gives the free pages back.
                """)
        @OptionGroup var global: GlobalOptions
        @Argument var name: String
        func run() async throws {
            let stats = try await global.json("/pools/default/buckets/\(PercentEncoding.encode(name))/stats")
            for (key, value) in stats["op"]?["samples"]?.objectValue ?? [] {
                let last = value.arrayValue?.last?.numberValue ?? 0
                print("\(key)\t\(Int(last))")
            }
        }
    }

    struct Compact: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compact a bucket's data file and view indexes on the node asked (runs in the background; "
                + "`GET /pools/default/tasks` shows it).")
        @OptionGroup var global: GlobalOptions
        @Argument var name: String
        @Flag(help: "The data file only, not the view indexes.") var dataOnly = false
        func run() async throws {
            let action = dataOnly ? "compactDatabases" : "compactBucket"
            try await global.call(.POST, "/pools/default/buckets/\(PercentEncoding.encode(name))/controller/\(action)")
            print("compaction of \(name) started")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a bucket and its data.")
        @OptionGroup var global: GlobalOptions
        @Argument var name: String
        func run() async throws {
            try await global.call(.DELETE, "/pools/default/buckets/\(PercentEncoding.encode(name))")
            print("deleted bucket \(name)")
        }
    }
}

// MARK: scopes and collections

/// `SCOPE.COLLECTION` as the commands take it.
enum CollectionPath {
    /// Splits `text` at its one dot; both parts must be non-empty (the server checks the names themselves).
    static func split(_ text: String) throws -> (scope: String, name: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
            throw ValidationError("a collection is SCOPE.COLLECTION, got \(text)")
        }
        return (String(parts[0]), String(parts[1]))
    }

    /// The admin path of bucket `bucket`'s scopes (`/pools/default/buckets/B/scopes`), then `more`'s percent-encoded
    /// segments.
    static func adminPath(bucket: String, _ more: String...) -> String {
        (["/pools/default/buckets", PercentEncoding.encode(bucket), "scopes"] + more.map(PercentEncoding.encode))
            .joined(separator: "/")
    }

    /// The manifest uid of an edit's answer (`{"uid":"<hex>"}`), for the confirmation line.
    static func uid(_ r: HTTPResponse) -> String {
        (try? JSON.parse(r.body))?["uid"]?.stringValue ?? "?"
    }
}

/// `--no-wait` of the scope and collection edits.
struct ManifestWaitOptions: ParsableArguments {
    @Flag(help: "Return once the edit is committed, without waiting for every data node to have it.")
    var noWait = false
}

extension GlobalOptions {
    /// After an edit of `bucket`'s manifest answered `r`: waits until every data node's admin API reports the
    /// answer's manifest uid or a newer one (`ManifestPropagation.wait`, at most `ClientLimits.manifestWaitMs`), so a
    /// KV operation that follows finds the edit on whichever node the key lives. Fails naming the nodes behind.
    func waitForManifest(_ r: HTTPResponse, bucket: String) async throws {
        guard let target = ManifestPropagation.uid(of: r.body) else { return }
        let tls = try tlsTrust()
        let context = try tls?.makeClientContext()
        let config = try await call(.GET, "/pools/default/b/\(PercentEncoding.encode(bucket))")
        let admin = try adminAddress()
        let nodes: [NodeAddress]
        do {
            nodes = ManifestPropagation.adminAddresses(
                try BucketConfig.parse(config.body, sourceHost: admin.host), tls: tls != nil)
        } catch { throw CLIError("bucket \(bucket): \(error)") }
        let path = CollectionPath.adminPath(bucket: bucket)
        let (user, pass) = (self.user, self.pass)
        let outcome = try await ManifestPropagation.wait(
            for: target, nodes: nodes,
            fetch: { node in
                let answer = try await AdminHTTP.request(
                    .GET, path, at: node, username: user, password: pass, tls: context)
                return answer.status == 200 ? ManifestPropagation.uid(of: answer.body) : nil
            },
            sleep: { try await Task.sleep(for: .milliseconds($0)) })
        if case .behind(let late) = outcome {
            let list = late.map { "\($0.node) (uid \($0.uid.map { String($0, radix: 16) } ?? "none"))" }
            throw CLIError(
                "committed as manifest uid \(String(target, radix: 16)), but after \(ClientLimits.manifestWaitMs / 1000) s "
                    + "these nodes had not adopted it: \(list.joined(separator: ", "))")
        }
    }
}

struct ScopeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scope", abstract: "Create, list and drop a bucket's scopes (Couchbase Server 7's REST API).",
        subcommands: [Create.self, List.self, Drop.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a scope.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Argument var name: String
        @OptionGroup var wait: ManifestWaitOptions
        func run() async throws {
            let r = try await global.call(
                .POST, CollectionPath.adminPath(bucket: bucket), form: [("name", name)])
            if !wait.noWait { try await global.waitForManifest(r, bucket: bucket) }
            print("created scope \(name) (manifest uid \(CollectionPath.uid(r)))")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List scopes, one line each: name, id, collections.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        func run() async throws {
            let manifest = try await global.json(CollectionPath.adminPath(bucket: bucket))
            for s in manifest["scopes"]?.arrayValue ?? [] {
                let count = s["collections"]?.arrayValue?.count ?? 0
                print("\(s["name"]?.stringValue ?? "?")\tid=0x\(s["uid"]?.stringValue ?? "?")\tcollections=\(count)")
            }
        }
    }

    struct Drop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop a scope and every collection in it (their documents become unreachable).",
            aliases: ["delete"])
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Argument var name: String
        @OptionGroup var wait: ManifestWaitOptions
        func run() async throws {
            let r = try await global.call(.DELETE, CollectionPath.adminPath(bucket: bucket, name))
            if !wait.noWait { try await global.waitForManifest(r, bucket: bucket) }
            print("dropped scope \(name) (manifest uid \(CollectionPath.uid(r)))")
        }
    }
}

struct CollectionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "collection",
        abstract: "Create, list and drop collections (SCOPE.COLLECTION) of a bucket (Couchbase Server 7's REST API).",
        subcommands: [Create.self, List.self, Drop.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a collection in an existing scope (`settee scope create` first).")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Maximum time to live of its documents, in seconds (0 = none).") var maxTTL: UInt32 = 0
        @Argument(help: "SCOPE.COLLECTION") var path: String
        @OptionGroup var wait: ManifestWaitOptions
        func run() async throws {
            let (scope, name) = try CollectionPath.split(path)
            var form = [("name", name)]
            if maxTTL > 0 { form.append(("maxTTL", String(maxTTL))) }
            let r = try await global.call(
                .POST, CollectionPath.adminPath(bucket: bucket, scope, "collections"), form: form)
            if !wait.noWait { try await global.waitForManifest(r, bucket: bucket) }
            print("created collection \(scope).\(name) (manifest uid \(CollectionPath.uid(r)))")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List collections, one line each: SCOPE.COLLECTION, id, maxTTL.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Only this scope's collections.") var scope: String?
        func run() async throws {
            let manifest = try await global.json(CollectionPath.adminPath(bucket: bucket))
            for s in manifest["scopes"]?.arrayValue ?? [] {
                let scopeName = s["name"]?.stringValue ?? "?"
                if let scope, scope != scopeName { continue }
                for c in s["collections"]?.arrayValue ?? [] {
                    let name = c["name"]?.stringValue ?? "?"
                    let ttl = c["maxTTL"]?.intValue ?? 0
                    print("\(scopeName).\(name)\tid=0x\(c["uid"]?.stringValue ?? "?")\tmaxTTL=\(ttl)")
                }
            }
        }
    }

    struct Drop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Drop a collection (its documents become unreachable).", aliases: ["delete"])
        @OptionGroup var global: GlobalOptions
        @Option(help: "Bucket.") var bucket = "demo"
        @Argument(help: "SCOPE.COLLECTION") var path: String
        @OptionGroup var wait: ManifestWaitOptions
        func run() async throws {
            let (scope, name) = try CollectionPath.split(path)
            let r = try await global.call(
                .DELETE, CollectionPath.adminPath(bucket: bucket, scope, "collections", name))
            if !wait.noWait { try await global.waitForManifest(r, bucket: bucket) }
            print("dropped collection \(scope).\(name) (manifest uid \(CollectionPath.uid(r)))")
        }
    }
}

// MARK: cluster membership

struct Node: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "node", abstract: "Manage nodes.", subcommands: [Add.self, ReloadCertificate.self])

    struct ReloadCertificate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reload-certificate",
            abstract: "Make the --cluster node reread its TLS certificate and key files, without a restart.",
            discussion: """
                POST /node/controller/reloadCertificate (cluster_admin). New connections on every TLS port get the \
                new certificate and the cluster document pins its fingerprint; a file that is unreadable, expired \
                or whose key does not match is refused and the old certificate stays in use.
                """)
        @OptionGroup var global: GlobalOptions
        func run() async throws {
            let r = try await global.call(.POST, "/node/controller/reloadCertificate", form: [])
            let answer = try? JSON.parse(r.body)
            print("serving certificate \(answer?["fingerprint"]?.stringValue ?? "?")")
            if answer?["clusterUpdated"]?.boolValue == false {
                let why = answer?["reason"]?.stringValue ?? "no reason given"
                print("the cluster does not pin it yet (\(why)); the node keeps retrying")
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a node (HOST:ADMINPORT) to the cluster; run `settee rebalance` afterwards.",
            discussion: """
                The cluster document (internal secret, users' password keys) is sent to the node: give \
                https://HOST:ADMINTLSPORT with --tls-fingerprint, or a loopback address; plain HTTP to another \
                host needs --allow-insecure.
                """)
        @OptionGroup var global: GlobalOptions
        @Argument var hostname: String
        @Option(help: "Services of the new node.") var services = "kv"
        @Option(help: "sha256:HEX fingerprint of the node's certificate, for an https:// HOST.")
        var tlsFingerprint: String?
        @Flag(help: "Send the cluster document over plain HTTP to a non-loopback HOST.") var allowInsecure = false
        func run() async throws {
            var form = [
                ("hostname", hostname), ("user", global.user), ("password", global.pass), ("services", services),
            ]
            if let tlsFingerprint { form.append(("tlsFingerprint", tlsFingerprint)) }
            if allowInsecure { form.append(("allowInsecure", "true")) }
            let r = try await global.call(.POST, "/controller/addNode", form: form)
            let otp = (try? JSON.parse(r.body))?["otpNode"]?.stringValue ?? "?"
            print("added \(otp); run `settee rebalance` to move data to it")
        }
    }
}

struct Rebalance: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebalance", abstract: "Rebalance vBuckets over the cluster's nodes, drawing progress.")
    @OptionGroup var global: GlobalOptions
    @Option(parsing: .upToNextOption, help: "otpNodes to remove from the cluster.") var eject: [String] = []

    func run() async throws {
        let pool = try await global.json("/pools/default")
        let known = (pool["nodes"]?.arrayValue ?? []).compactMap { $0["otpNode"]?.stringValue }
        guard !known.isEmpty else { throw CLIError("/pools/default lists no nodes") }
        for e in eject where !known.contains(e) { throw CLIError("\(e) is not a node of this cluster: \(known)") }
        try await global.call(
            .POST, "/controller/rebalance",
            form: [("knownNodes", known.joined(separator: ",")), ("ejectedNodes", eject.joined(separator: ","))])
        try await ProgressPoller.wait(global)
        print("rebalance complete")
    }
}

/// Polls `/pools/default/rebalanceProgress` until `status` is `none`, drawing a bar.
enum ProgressPoller {
    static func bar(_ fraction: Double, width: Int = 40) -> String {
        let f = max(0, min(1, fraction))
        let done = Int((f * Double(width)).rounded(.down))
        return "[" + String(repeating: "#", count: done) + String(repeating: ".", count: width - done) + "] "
            + String(Int((f * 100).rounded(.down))) + "%"
    }

    static func wait(_ global: GlobalOptions) async throws {
        var last = -1.0
        while true {
            let p = try await global.json("/pools/default/rebalanceProgress")
            let status = p["status"]?.stringValue ?? "none"
            if let err = p["errorMessage"]?.stringValue, !err.isEmpty { throw CLIError("rebalance failed: \(err)") }
            if status == "none" { break }
            var fractions: [Double] = []
            for (k, v) in p.objectValue ?? [] where k != "status" {
                if let f = v["progress"]?.numberValue { fractions.append(f) }
            }
            let f = fractions.isEmpty ? 0 : fractions.reduce(0, +) / Double(fractions.count)
            if f != last {
                print("\r" + bar(f), terminator: "")
                fflush(nil)
                last = f
            }
            try await Task.sleep(for: .milliseconds(250))
        }
        print("\r" + bar(1))
    }
}

struct Failover: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failover", abstract: "Fail a node over: its replicas elsewhere become active.")
    @OptionGroup var global: GlobalOptions
    @Argument var otpNode: String
    @Flag(help: "Graceful failover (moves actives off the node first) instead of hard.") var graceful = false
    @Flag(
        help:
            "Fail over even where no surviving copy can be shown to hold every majority-acknowledged write, or without a majority of the cluster (acknowledged writes may be lost)."
    )
    var allowUnsafe = false

    func run() async throws {
        let path = graceful ? "/controller/startGracefulFailover" : "/controller/failOver"
        var form = [("otpNode", otpNode)]
        if allowUnsafe { form.append(("allowUnsafe", "true")) }
        try await global.call(.POST, path, form: form)
        if graceful { try await ProgressPoller.wait(global) }
        print("failed over \(otpNode)")
    }
}

// MARK: cluster status

struct Cluster: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cluster", abstract: "Cluster-wide views.", subcommands: [Status.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Nodes with status, membership, services, ports, and vBuckets per node per bucket.")
        @OptionGroup var global: GlobalOptions

        func run() async throws {
            let admin = try global.adminAddress()
            let pool = try await global.json("/pools/default")
            let nodes = pool["nodes"]?.arrayValue ?? []
            let buckets = (try await global.json("/pools/default/buckets")).arrayValue ?? []
            var configs: [(String, BucketConfig)] = []
            for b in buckets {
                guard let name = b["name"]?.stringValue else { continue }
                let r = try await global.call(.GET, "/pools/default/b/\(PercentEncoding.encode(name))")
                do { configs.append((name, try BucketConfig.parse(r.body, sourceHost: admin.host))) } catch {
                    throw CLIError("bucket \(name): \(error)")
                }
            }
            let https = global.clusterSeeds.first?.hasPrefix("https://") ?? false
            let probes = await Self.probe(
                nodes.map { Self.probeAddress($0, configs: configs.map(\.1), https: https) }, global)
            print("cluster \(hostPort(admin.host, admin.port)): \(nodes.count) node(s), \(configs.count) bucket(s)")
            var header = ["otpNode", "hostname", "status", "probe", "membership", "services", "kv"]
            for (name, _) in configs { header.append("\(name) a/r") }
            var rows: [[String]] = [header]
            for (n, probe) in zip(nodes, probes) {
                let hostname = n["hostname"]?.stringValue ?? "?"
                var row = [
                    n["otpNode"]?.stringValue ?? "?", hostname, n["status"]?.stringValue ?? "?", probe,
                    n["clusterMembership"]?.stringValue ?? "?",
                    (n["services"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ","),
                    n["ports"]?["direct"]?.intValue.map(String.init) ?? "-",
                ]
                for (_, config) in configs {
                    let active = config.activeCounts()
                    let replica = config.replicaCounts()
                    // Match the map's node to this one by admin address (hostname is HOST:MGMTPORT).
                    let mgmtPort = splitHostPort(hostname)?.port
                    let kvPort = n["ports"]?["direct"]?.intValue
                    let i = config.nodes.firstIndex {
                        ($0.mgmt?.port == mgmtPort && mgmtPort != nil) || ($0.kv?.port == kvPort && kvPort != nil)
                    }
                    row.append(i.map { "\(active[$0])/\(replica[$0])" } ?? "-")
                }
                rows.append(row)
            }
            printTable(rows)
            for (name, config) in configs {
                print(
                    "bucket \(name): map rev \(config.revision), \(config.numVBuckets) vBuckets, \(config.numReplicas) replica(s)"
                )
            }
        }

        /// The address at which `cluster status` asks `node` (an entry of `/pools/default`'s `nodes`) itself: its
        /// admin `hostname` (HOST:PORT), or for an `https://` cluster URL the node's `mgmtSSL` address from a bucket
        /// map that lists the node (`tls` true); nil when no such address is known.
        static func probeAddress(_ node: JSON, configs: [BucketConfig], https: Bool) -> (
            address: NodeAddress, tls: Bool
        )? {
            guard let hostname = node["hostname"]?.stringValue, let address = splitHostPort(hostname) else {
                return nil
            }
            guard https else { return (address, false) }
            let tlsAddress = configs.lazy.flatMap(\.nodes).first { $0.mgmt == address && $0.mgmtTLS != nil }?.mgmtTLS
            return tlsAddress.map { ($0, true) }
        }

        /// Deadline of the direct ask of one node (`GET /pools`, connect included): a node that does not answer
        /// within it is shown `unreachable`. Short, as a status look must be prompt; a node that answers at all
        /// answers `/pools` in milliseconds.
        static let probeTimeoutMs = 2_000

        /// Asks each node for `GET /pools` directly, all at once, each within `probeTimeoutMs`:
        /// `ok` when it answered (any status), `unreachable` when it did not (refused, reset, timed out), `-` when no
        /// address was known. The cluster's own `status` comes from its heartbeats and names a node killed a moment
        /// ago `healthy` until they miss it; this column tells at once (issue 72 item 6).
        static func probe(_ addresses: [(address: NodeAddress, tls: Bool)?], _ global: GlobalOptions) async -> [String]
        {
            let tls = try? global.tlsTrust()?.makeClientContext()
            let (user, pass) = (global.user, global.pass)
            return await withTaskGroup(of: (Int, String).self) { group in
                for (i, target) in addresses.enumerated() {
                    group.addTask {
                        guard let target else { return (i, "-") }
                        do {
                            _ = try await AdminHTTP.request(
                                .GET, "/pools", at: target.address, username: user, password: pass,
                                timeoutMs: probeTimeoutMs, tls: target.tls ? tls : nil)
                            return (i, "ok")
                        } catch { return (i, "unreachable") }
                    }
                }
                var out = [String](repeating: "-", count: addresses.count)
                for await (i, verdict) in group { out[i] = verdict }
                return out
            }
        }

        private func printTable(_ rows: [[String]]) {
            var widths = [Int](repeating: 0, count: rows.map(\.count).max() ?? 0)
            for row in rows { for (i, c) in row.enumerated() { widths[i] = max(widths[i], c.count) } }
            for row in rows {
                let cells = row.enumerated().map { $1 + String(repeating: " ", count: widths[$0] - $1.count) }
                let line = cells.joined(separator: "  ")
                print(line.hasSuffix(" ") ? String(line.reversed().drop { $0 == " " }.reversed()) : line)
            }
        }
    }
}
