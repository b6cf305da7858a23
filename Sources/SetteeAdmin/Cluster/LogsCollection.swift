import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeJSON
import SetteePeerHTTP
import SetteeRegistry
import SetteeStorage
import Synchronization

/// The cluster's logs collection (Couchbase's `POST /controller/startLogsCollection` and `cbcollect_info`, ADR 0148):
/// the orchestrator asks each chosen node for its part (`POST /settee/internal/collectLogs`: its recent log lines,
/// audit files, stats and the cluster document without secrets), packs the parts into one
/// `<dataDir>/collectinfo/collectinfo-<UTC time>.tar.gz` (`<otpNode>/<file>` entries) and reports progress as the
/// `clusterLogsCollection` task of `GET /pools/default/tasks`. `GET /collectInfo/NAME` downloads an archive.
///
/// With `logRedactionLevel=partial` every `<ud>…</ud>` span is replaced by a salted SHA-1 (`UserDataRedaction`, one
/// salt per collection, sent to the nodes and never stored), as `cbcollect_info` does. Each node's part is at most
/// `Limits.maxCollectedBytesPerNode`; the newest `Limits.retainedLogsCollections` archives are kept.
struct LogsCollectionStatus: Sendable {
    /// `none` (never started here), `running`, `completed` or `cancelled` (a node failed: the others' parts are
    /// still in the archive).
    var status = "none"
    var statusID = RandomID.hex128()
    var redaction = "none"
    /// Each node's `status` (`starting`, `collecting`, `collected`, `failed`) and error.
    var perNode: [(node: String, status: String, error: String?)] = []
    var path: String?
    var started: UInt64 = 0
}

extension ClusterManager {
    /// The `clusterLogsCollection` task, once one was started on this node.
    func logsCollectionTasks() -> [JSON] {
        let s = logsCollection.withLock { $0 }
        guard s.status != "none" else { return [] }
        let done = s.perNode.filter { $0.status == "collected" || $0.status == "failed" }.count
        let progress = s.perNode.isEmpty ? 100 : 100 * done / s.perNode.count
        var perNode: [(String, JSON)] = []
        for n in s.perNode {
            var entry: [(String, JSON)] = [("status", .string(n.status))]
            if let path = s.path, n.status == "collected" { entry.append(("path", .string(path))) }
            if let e = n.error { entry.append(("error", .string(e))) }
            perNode.append((n.node, .object(entry)))
        }
        var task: [(String, JSON)] = [
            ("statusId", .string(s.statusID)), ("type", "clusterLogsCollection"), ("status", .string(s.status)),
            ("progress", .int(progress)), ("recommendedRefreshPeriod", .number(2)),
            ("ts", .string(AuditTimestamp.iso8601(nanoseconds: s.started))),
            ("logRedactionLevel", .string(s.redaction)), ("node", .string(registry.node.otpNode.rawValue)),
            ("perNode", .object(perNode)),
        ]
        if let path = s.path {
            task.append(("path", .string(path)))
            task.append(("name", .string((path as NSString).lastPathComponent)))
        }
        return [.object(task)]
    }

    /// Starts collecting from `nodes` (nil: every member) unless a collection runs; false when one does.
    func startLogsCollection(nodes: [NodeInfo], redaction: String, caller: AuditCaller?) -> Bool {
        let started = logsCollection.withLock { s -> Bool in
            guard s.status != "running" else { return false }
            s = LogsCollectionStatus(
                status: "running", redaction: redaction,
                perNode: nodes.map { (node: $0.otpNode.rawValue, status: "starting", error: String?.none) },
                started: SystemWallClock().nowNanoseconds())
            return true
        }
        guard started else { return false }
        let salt = RandomID.hex128()
        Task {
            await AuditCaller.$current.withValue(caller) {
                await self.runLogsCollection(nodes: nodes, redaction: redaction, salt: salt)
            }
        }
        return true
    }

    private func runLogsCollection(nodes: [NodeInfo], redaction: String, salt: String) async {
        var archive = TarGzArchive()
        var failed = false
        let now = SystemWallClock().nowNanoseconds()
        let mtime = now / 1_000_000_000
        for (i, node) in nodes.enumerated() {
            logsCollection.withLock { $0.perNode[i].status = "collecting" }
            let result: Result<[(String, [UInt8])], any Error>
            if node.otpNode == registry.node.otpNode {
                let registry = self.registry
                result = .success(
                    await BlockingPool.run {
                        NodeCollection.files(registry: registry, redaction: redaction, salt: salt)
                    })
            } else {
                result = await fetchPart(node, redaction: redaction, salt: salt)
            }
            switch result {
            case .success(let files):
                let prefix = NodeCollection.safeName(node.otpNode.rawValue)
                for (name, bytes) in files { archive.add(name: prefix + "/" + name, bytes: bytes, mtime: mtime) }
                logsCollection.withLock { $0.perNode[i].status = "collected" }
            case .failure(let error):
                failed = true
                logsCollection.withLock {
                    $0.perNode[i].status = "failed"
                    $0.perNode[i].error = "\(error)"
                }
            }
        }
        let directory = registry.dataDirectory + "/collectinfo"
        let name =
            "collectinfo-" + AuditTimestamp.iso8601(nanoseconds: now).replacingOccurrences(of: ":", with: "-")
            + ".tar.gz"
        let finalArchive = archive
        let written: String? = await BlockingPool.run {
            guard let bytes = finalArchive.gzipped() else { return nil }
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                let path = directory + "/" + name
                guard FileManager.default.createFile(atPath: path, contents: Data(bytes)) else { return nil }
                let all = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
                    .filter { $0.hasPrefix("collectinfo-") && $0.hasSuffix(".tar.gz") }.sorted()
                for old in all.dropLast(Limits.retainedLogsCollections) {
                    try? FileManager.default.removeItem(atPath: directory + "/" + old)
                }
                return path
            } catch {
                return nil
            }
        }
        logsCollection.withLock {
            $0.path = written
            $0.status = written == nil || failed ? "cancelled" : "completed"
        }
        logger.notice(
            "logs collection ended", metadata: ["archive": "\(written ?? "none")", "nodeFailed": "\(failed)"])
    }

    private func fetchPart(_ node: NodeInfo, redaction: String, salt: String) async -> Result<
        [(String, [UInt8])], any Error
    > {
        let body = Array("redaction=\(redaction)&salt=\(salt)".utf8)
        do {
            let reply = try await peers.call(
                .admin(node), .POST, "/settee/internal/collectLogs", body: body, credentials: internalCredentials,
                contentType: "application/x-www-form-urlencoded", timeout: .seconds(60),
                maxReplyBytes: Limits.maxCollectedBytesPerNode * 2)
            guard reply.status == 200, let json = try? JSON.parse(reply.body), let files = json["files"]?.arrayValue
            else { return .failure(RebalanceError("\(node.otpNode) answered \(reply.status)")) }
            var out: [(String, [UInt8])] = []
            for f in files {
                guard let name = f["name"]?.stringValue, let data = f["base64"]?.stringValue,
                    let bytes = Base64.decode(data)
                else { continue }
                out.append((NodeCollection.safeName(name), bytes))
            }
            return .success(out)
        } catch {
            return .failure(error)
        }
    }
}

/// One node's part of a logs collection.
enum NodeCollection {
    /// A path segment made safe for an archive entry name (no `/`, no `..`, at most 60 bytes).
    static func safeName(_ text: String) -> String {
        let mapped = String(
            text.unicodeScalars.map { s -> Character in
                (s.properties.isAlphabetic || ("0"..."9").contains(s) || s == "-" || s == "_" || s == "." || s == "@")
                    && s.isASCII ? Character(s) : "_"
            })
        let trimmed = mapped == ".." || mapped == "." || mapped.isEmpty ? "_" : mapped
        return String(trimmed.prefix(60))
    }

    /// The node's files: `settee.log` (its recent log lines), `audit/*.log`, `stats.json`, `cluster.json` (the
    /// cluster document without passwords, keys, salts or secrets), each redacted as asked, within
    /// `Limits.maxCollectedBytesPerNode` (a file past what is left is cut, and `truncated.txt` says which).
    static func files(registry: NodeRegistry, redaction: String, salt: String) -> [(String, [UInt8])] {
        let redactor = redaction == "partial" ? UserDataRedaction(salt: salt) : nil
        func text(_ s: String) -> [UInt8] { Array((redactor?.redact(s) ?? s).utf8) }
        var out: [(String, [UInt8])] = []
        var left = Limits.maxCollectedBytesPerNode
        var cut: [String] = []
        func add(_ name: String, _ bytes: [UInt8]) {
            if bytes.count > left { cut.append(name) }
            let kept = Array(bytes.prefix(max(0, left)))
            left -= kept.count
            out.append((name, kept))
        }
        add("settee.log", text(RecentLogLines.process.lines.joined(separator: "\n") + "\n"))
        if let dir = registry.audit.directory {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [])
                .filter { $0.hasPrefix("audit") && $0.hasSuffix(".log") }.sorted()
            for name in names {
                guard let data = FileManager.default.contents(atPath: dir + "/" + name) else { continue }
                add("audit/" + safeName(name), text(String(decoding: data, as: UTF8.self)))
            }
        }
        add("stats.json", stats(registry))
        if let doc = try? registry.clusterDocument(), let json = try? JSON.parse(doc) {
            let kept = withoutSecrets(json)
            add("cluster.json", (redactor.map { redactingUserNames(kept, $0) } ?? kept).serialized())
        }
        if !cut.isEmpty { out.append(("truncated.txt", Array((cut.joined(separator: "\n") + "\n").utf8))) }
        return out
    }

    /// `json` without any member whose name says it holds a credential (password, secret, key, salt, the admin).
    static func withoutSecrets(_ json: JSON) -> JSON {
        switch json {
        case .object(let members):
            return .object(
                members.compactMap { (member: (String, JSON)) -> (String, JSON)? in
                    let (k, v) = member
                    let l = k.lowercased()
                    let secret =
                        l.contains("password") || l.contains("secret") || l.contains("key") || l.contains("salt")
                        || l == "admin" || l.contains("proof") || l.contains("token")
                    return secret ? nil : (k, withoutSecrets(v))
                })
        case .array(let items): return .array(items.map(withoutSecrets))
        default: return json
        }
    }

    /// `json` with the names of people replaced as a log line's `<ud>` spans are (`UserDataRedaction`): every
    /// `username` and `fullName` member, and the `name` of each entry of a `users` or `disabledUsers` array (local
    /// users, audit exclusions). Couchbase tags user names as user data; a partial collection hides them everywhere.
    static func redactingUserNames(_ json: JSON, _ redactor: UserDataRedaction, inUsers: Bool = false) -> JSON {
        switch json {
        case .object(let members):
            return .object(
                members.map { (member: (String, JSON)) -> (String, JSON) in
                    let (k, v) = member
                    if case .string(let s) = v, k == "username" || k == "fullName" || (inUsers && k == "name") {
                        return (k, .string("<ud>" + redactor.digest(s) + "</ud>"))
                    }
                    if k == "users" || k == "disabledUsers", case .array(let items) = v {
                        return (k, .array(items.map { redactingUserNames($0, redactor, inUsers: true) }))
                    }
                    return (k, redactingUserNames(v, redactor))
                })
        case .array(let items): return .array(items.map { redactingUserNames($0, redactor, inUsers: inUsers) })
        default: return json
        }
    }

    static func stats(_ registry: NodeRegistry) -> [UInt8] {
        var buckets: [(String, JSON)] = []
        for name in registry.bucketNames {
            guard let s = registry.bucket(named: name)?.stats() else {
                buckets.append((name, ["failure": .string(registry.bucketFailure(named: name) ?? "not open")]))
                continue
            }
            buckets.append(
                (
                    name,
                    [
                        "currItems": .int(s.currItems), "memUsed": .int(s.memUsed), "diskUsed": .int(s.diskUsed),
                        "nonResidentItems": .int(s.nonResidentItems), "flusherTodo": .int(s.flusherTodo),
                        "diskFailure": s.diskFailure.map { JSON.string($0) } ?? .null,
                    ]
                ))
        }
        let audit = registry.audit
        let json: JSON = [
            "node": .string(registry.node.otpNode.rawValue),
            "buckets": .object(buckets),
            "audit": ["written": .int(audit.writtenEvents), "dropped": .int(audit.droppedEvents)],
        ]
        return json.serialized()
    }
}

/// `POST /controller/startLogsCollection`, `POST /settee/internal/collectLogs`, `GET /collectInfo/NAME`, `GET /logs`,
/// `GET /diag`, `GET /sasl_logs[/STREAM]`.
enum LogsCollectionRoutes {
    /// The streams `GET /sasl_logs/STREAM` serves, as Couchbase names its node logs, each the kept log lines at or
    /// above a level (Settee keeps one log; Couchbase's `debug` log holds every level, `info` info and above,
    /// `error` errors only). `/sasl_logs` alone is `debug`.
    static let saslLogStreams: [String: Logger.Level] = ["debug": .trace, "info": .info, "error": .error]

    /// The kept log lines at or above `level` (the line's second field is its level, as `RecentLogLines` writes it),
    /// newline-terminated.
    static func logText(atLeast level: Logger.Level, lines: [String]) -> String {
        var out = ""
        for line in lines {
            let fields = line.split(separator: " ", maxSplits: 2)
            guard fields.count >= 2, let l = Logger.Level(rawValue: String(fields[1])), l >= level else { continue }
            out += line
            out += "\n"
        }
        return out
    }

    /// `GET /diag`'s text: the node's collected files (`NodeCollection.files`, unredacted: the caller holds the
    /// cluster's security privilege, as Couchbase's `/diag` asks of its caller), each under a `==== name ====` line.
    static func diagText(registry: NodeRegistry) -> [UInt8] {
        var out: [UInt8] = []
        for (name, bytes) in NodeCollection.files(registry: registry, redaction: "none", salt: "") {
            out += Array("==== \(name) ====\n".utf8)
            out += bytes
            if bytes.last != UInt8(ascii: "\n") { out.append(UInt8(ascii: "\n")) }
        }
        return out
    }

    static func add(to router: Router<AdminRequestContext>, api: AdminAPI, cluster: ClusterManager) {
        router.post("/controller/startLogsCollection") { request, _ in
            // The task lives where `/pools/default/tasks` is answered: the orchestrator.
            if let forwarded = await ClusterRoutes.forward(request, api: api, cluster: cluster, checkQuorum: false) {
                return forwarded
            }
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            let redaction = form["logRedactionLevel"] ?? "none"
            guard redaction == "none" || redaction == "partial" else {
                return AdminResponses.fieldErrors([("logRedactionLevel", "The value must be one of none, partial")])
            }
            let members = api.registry.clusterSnapshot.members.map(\.node)
            let all = members.isEmpty ? [api.registry.node] : members
            let nodes: [NodeInfo]
            switch form["nodes"] ?? "" {
            case "*", "":
                nodes = all
            case let list:
                let names = Set(list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
                nodes = all.filter { names.contains($0.otpNode.rawValue) }
                guard nodes.count == names.count else {
                    return AdminResponses.fieldErrors([("nodes", "Unknown nodes: \(list)")])
                }
            }
            guard cluster.startLogsCollection(nodes: nodes, redaction: redaction, caller: AuditCaller.current) else {
                return AdminResponses.json(.badRequest, ["_": "Logs collection task is already started"])
            }
            api.audit(
                .logsCollectionStarted,
                [
                    ("nodes", .array(nodes.map { .string($0.otpNode.rawValue) })),
                    ("log_redaction_level", .string(redaction)),
                ])
            return AdminResponses.empty(.ok)
        }
        router.post("/settee/internal/collectLogs") { request, _ in
            let form: FormBody
            switch await api.form(request) {
            case .success(let f): form = f
            case .failure(let e): return e.response
            }
            let redaction = form["redaction"] ?? "none"
            let salt = form["salt"] ?? RandomID.hex128()
            let registry = api.registry
            let body = await BlockingPool.run { () -> [UInt8] in
                let files = NodeCollection.files(registry: registry, redaction: redaction, salt: salt)
                let json: JSON = [
                    "files": .array(
                        files.map { ["name": .string($0.0), "base64": .string(Base64.encode($0.1))] })
                ]
                return json.serialized()
            }
            return AdminResponses.bytes(.ok, body)
        }
        router.get("/collectInfo/:file") { request, context in
            if let forwarded = await ClusterRoutes.forward(request, api: api, cluster: cluster, checkQuorum: false) {
                return forwarded
            }
            let name = context.parameters.get("file") ?? ""
            guard name.hasPrefix("collectinfo-"), name.hasSuffix(".tar.gz"), !name.contains("/"),
                !name.contains("..")
            else { return AdminResponses.text(.notFound, "Requested resource not found.\r\n") }
            let path = api.registry.dataDirectory + "/collectinfo/" + name
            guard let data = await BlockingPool.run({ FileManager.default.contents(atPath: path) }) else {
                return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
            }
            return Response(
                status: .ok, headers: [.contentType: "application/gzip"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
        }
        router.get("/diag") { _, _ in
            let registry = api.registry
            let body = await BlockingPool.run { diagText(registry: registry) }
            return Response(
                status: .ok, headers: [.contentType: "text/plain; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
        }
        for path in ["/sasl_logs", "/sasl_logs/:stream"] {
            router.get(RouterPath(path)) { _, context in
                let stream = context.parameters.get("stream") ?? "debug"
                guard let level = saslLogStreams[stream] else {
                    return AdminResponses.text(.notFound, "Requested resource not found.\r\n")
                }
                return AdminResponses.text(.ok, logText(atLeast: level, lines: RecentLogLines.process.lines))
            }
        }
        router.get("/logs") { _, _ in
            let lines = RecentLogLines.process.lines.suffix(1000)
            return AdminResponses.json(.ok, ["list": .array(lines.map { ["text": .string($0)] })])
        }
    }
}
