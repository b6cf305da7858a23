import Foundation
import NIOHTTP1
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeReplication
import SetteeTestSupport
import Testing

/// Issue 68, Must show: Lite over BLIP against the gateway on a 3-node cluster bucket, push and pull of 5,000
/// documents with attachments, byte-identical. `make test` moves the issue's 5,000 (48 s on the shared 2-core machine
/// under a load average of 10-15, 2026-11-29); `SETTEE_BLIP_CLUSTER_DOCS=N` moves N.
@Suite(.serialized, .onTestThreads) struct LiteBLIPClusterProcessTests {
    static let docCount: Int =
        ProcessInfo.processInfo.environment["SETTEE_BLIP_CLUSTER_DOCS"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil }
        ?? 5000

    /// The attachment sizes, in turn, of every tenth document: inside one small frame, one `Limits.blipSmallFrameBytes`
    /// frame, and spread over several `Limits.blipFrameBytes` frames. The first and last attachment documents carry
    /// 1.5 MiB, more than a whole frame may ever be (`Limits.blipMaxFrameBytes`).
    static let attachmentSizes = [300, Limits.blipSmallFrameBytes, 3 * Limits.blipFrameBytes + 1234]
    static let largeAttachmentBytes = Limits.blipMaxFrameBytes + Limits.blipMaxFrameBytes / 2

    /// What one document must be everywhere: its revision, its properties as canonical JSON, and its attachment.
    struct Expected {
        var rev: String
        var properties: String
        var attachment: [UInt8]?
    }

    /// Proves, on a gateway mounted on a bucket of a 3-node cluster (replicaNumber 1): a Lite database pushes
    /// `docCount` documents over BLIP (`ws://`, Basic auth on the public port), every tenth with an attachment of
    /// 300 B, 4 KiB or ~49 KiB (spread over BLIP frames) and two of 1.5 MiB (past the largest frame); a fresh Lite
    /// database pulls them over BLIP. Every document's revision ID, canonical body and attachment (digest, and bytes
    /// equal to what was written and hashing to that digest) is the same on both Lite databases; the gateway's REST
    /// view agrees: `_all_docs?include_docs=true` lists exactly those documents with the same revision, body and
    /// attachment digest, and `GET /db/doc/blob` answers every attachment's bytes. Push and pull docs/s are printed.
    @Test(.timeLimit(.minutes(15))) func pushThenPullThroughAThreeNodeClusterBucketIsByteIdentical() async throws {
        let total = Self.docCount
        let started = ContinuousClock.now
        let nodes = try (0..<3).map { try ServerProcess(name: "liteblip-cluster-\($0)") }
        defer { nodes.forEach { $0.stopAndRemove() } }
        for node in nodes { try node.start() }
        try ClusterHarness.formCluster(nodes, authType: "sasl", replicaNumber: 1)
        let config = """
            {"databases": {"db": {"server": "http://127.0.0.1:\(nodes[0].adminPort)", "bucket": "demo",
               "username": "Administrator", "password": "password",
               "users": {"GUEST": {"disabled": true}, "phone": {"password": "pw-phone", "admin_channels": ["*"]}}}}}
            """
        let gw = try GatewayProcess(name: "liteblip-cluster", config: config)
        let admin = "http://127.0.0.1:\(gw.adminPort)/db"
        try await gw.start { (try? await GatewayHTTP.request(.GET, admin + "/"))?.status == 200 }
        defer { gw.stop() }
        let clusterReady = ContinuousClock.now - started
        let ws = "ws://127.0.0.1:\(gw.port)/db"
        let phone = ReplicationAuthenticator.basic(user: "phone", password: "pw-phone")

        let dir = URL(fileURLWithPath: TemporaryDirectory.make("liteblip-cluster"))
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = try Database(name: "source", directory: dir.path)
        defer { source.close() }
        var rng = SplitMix64(seed: 5000)
        var expected: [String: Expected] = [:]
        var attachmentBytes = 0
        let attachmentEvery = 10
        let lastWithAttachment = (total - 1) / attachmentEvery * attachmentEvery
        for chunk in stride(from: 0, to: total, by: 500) {
            var docs: [Document] = []
            for n in chunk..<min(chunk + 500, total) {
                let id = String(format: "doc-%05d", n)
                let properties: JSON = [
                    "n": .number(Double(n)), "name": .string("item \(n) ünïcødé"),
                    "tags": .array([.string("t\(n % 7)"), .bool(n % 2 == 0), .null]),
                    "nested": .object([
                        ("x", .number(Double(n) / 4)), ("y", .string(String(repeating: "y", count: n % 50))),
                    ]),
                ]
                var doc = Document(id: id, properties: properties)
                if n % attachmentEvery == 0 {
                    let size =
                        n == 0 || n == lastWithAttachment
                        ? Self.largeAttachmentBytes
                        : Self.attachmentSizes[(n / attachmentEvery) % Self.attachmentSizes.count]
                    let data = LiteConvergence.randomBytes(size, &rng)
                    doc.attachments["blob"] = Blob(data: data, contentType: "application/octet-stream")
                    attachmentBytes += size
                }
                docs.append(doc)
            }
            for saved in try source.saveAll(docs) {
                let id = try #require(saved.id)
                let blob = saved.attachments["blob"]
                expected[id] = Expected(
                    rev: try #require(saved.revision?.description),
                    properties: LiteConvergence.canonical(saved.properties),
                    attachment: try blob.map { try source.content(of: $0) })
            }
        }
        let withAttachments = expected.values.filter { $0.attachment != nil }.count
        #expect(expected.count == total, "setup: \(expected.count) documents saved of \(total)")

        // Push over BLIP.
        let pushStarted = ContinuousClock.now
        let push = try Replicator(source, .push(to: ws), authenticator: phone)
        let pushed = await LiteConvergence.replicate(push, timeout: .seconds(600))
        let pushTime = ContinuousClock.now - pushStarted
        #expect(pushed.lastError == nil, "push: \(pushed)")
        #expect(pushed.docsWritten == total && pushed.docWriteFailures == 0, "push: \(pushed)")

        // Pull over BLIP into a fresh database.
        let target = try Database(name: "target", directory: dir.path)
        defer { target.close() }
        let pullStarted = ContinuousClock.now
        let pull = try Replicator(target, .pull(from: ws), authenticator: phone)
        let pulled = await LiteConvergence.replicate(pull, timeout: .seconds(600))
        let pullTime = ContinuousClock.now - pullStarted
        #expect(pulled.lastError == nil, "pull: \(pulled)")
        #expect(pulled.docsWritten == total && pulled.docWriteFailures == 0, "pull: \(pulled)")

        // Both Lite databases: the same revision, canonical body and attachment (digest and bytes) per document.
        var liteDiffers: [String] = []
        for (id, want) in expected.sorted(by: { $0.key < $1.key }) {
            let a = try LiteConvergence.liteState(source, id)
            let b = try LiteConvergence.liteState(target, id)
            guard let b, a == b, b.winner == want.rev, b.leaves == [want.rev] else {
                liteDiffers.append("\(id): source \(a?.description ?? "absent"), target \(b?.description ?? "absent")")
                continue
            }
            let doc = try target.document(id)
            if doc.map({ LiteConvergence.canonical($0.properties) }) != want.properties {
                liteDiffers.append("\(id): pulled body differs")
            }
            let blob = doc?.attachments["blob"]
            let bytes = try blob.map { try target.content(of: $0) }
            if bytes != want.attachment
                || (want.attachment.map { blob?.digest != AttachmentInfo.digest(of: $0) } ?? false)
            {
                liteDiffers.append(
                    "\(id): pulled attachment differs (\(bytes?.count ?? -1) bytes, \(blob?.digest ?? "-"))")
            }
        }
        #expect(
            liteDiffers.isEmpty, "pulled database: \(liteDiffers.count) documents differ, e.g. \(liteDiffers.prefix(3))"
        )
        #expect(try LiteConvergence.liteIDs(target).count == total, "pulled database: document count")

        // The gateway's REST view: _all_docs with bodies, then every attachment's bytes.
        var restDiffers: [String] = []
        var listed = Set<String>()
        var startKey: String? = nil
        while true {
            var url = "\(admin)/_all_docs?include_docs=true&limit=500"
            if let startKey { url += "&startkey=" + PercentEncoding.encode("\"\(startKey)\"") + "&skip=1" }
            let reply = try await GatewayHTTP.request(.GET, url)
            guard reply.status == 200, let rows = try JSON.parse(reply.body)["rows"]?.arrayValue else {
                Issue.record("REST: _all_docs answered \(reply.status) \(reply.text.prefix(200))")
                break
            }
            for row in rows {
                guard let id = row["id"]?.stringValue else { continue }
                listed.insert(id)
                guard let want = expected[id] else {
                    restDiffers.append("\(id): listed but never written")
                    continue
                }
                let doc = row["doc"]
                var props: [(String, JSON)] = []
                for (k, v) in doc?.objectValue ?? [] where !k.hasPrefix("_") { props.append((k, v)) }
                if row["value"]?["rev"]?.stringValue != want.rev || doc?["_rev"]?.stringValue != want.rev {
                    restDiffers.append("\(id): rev \(row["value"]?["rev"]?.stringValue ?? "-"), want \(want.rev)")
                }
                if LiteConvergence.canonical(.object(props)) != want.properties {
                    restDiffers.append("\(id): body \(LiteConvergence.canonical(.object(props)))")
                }
                let digest = doc?["_attachments"]?["blob"]?["digest"]?.stringValue
                if digest != want.attachment.map(AttachmentInfo.digest(of:)) {
                    restDiffers.append("\(id): attachment digest \(digest ?? "none")")
                }
            }
            guard rows.count == 500, let last = rows.last?["id"]?.stringValue else { break }
            startKey = last
        }
        #expect(
            listed == Set(expected.keys),
            "REST: _all_docs lists \(listed.count) of \(total); missing \(Set(expected.keys).subtracting(listed).sorted().prefix(5))"
        )
        for (id, want) in expected.sorted(by: { $0.key < $1.key }) {
            guard let data = want.attachment else { continue }
            let reply = try await GatewayHTTP.request(.GET, "\(admin)/\(id)/blob")
            if reply.status != 200 || reply.body != data {
                restDiffers.append("\(id)/blob: \(reply.status), \(reply.body.count) bytes of \(data.count)")
            }
        }
        #expect(restDiffers.isEmpty, "REST: \(restDiffers.count) differ, e.g. \(restDiffers.prefix(3))")

        func perSecond(_ d: Duration) -> Int {
            let s = Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
            return s > 0 ? Int(Double(total) / s) : 0
        }
        print(
            "LiteBLIPClusterProcessTests: \(total) docs (\(withAttachments) with attachments, "
                + "\(attachmentBytes / 1024) KiB of attachments) through a gateway on a 3-node cluster bucket; "
                + "cluster + gateway up in \(clusterReady); BLIP push \(pushTime) (\(perSecond(pushTime)) docs/s), "
                + "BLIP pull \(pullTime) (\(perSecond(pullTime)) docs/s); whole test \(ContinuousClock.now - started)")
    }
}
